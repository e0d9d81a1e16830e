"""asyncio front end, native: the async Rust client runs on a tokio runtime
of its own and every network call is an awaitable that resolves on the
event loop when the Rust future finishes (finished calls are queued and
delivered to the loop in batches, python/src/deliver.rs); no thread per
call. Every rule is still the Rust client's.

>>> from redislock_native.aio import AsyncRedlock
>>> rl = AsyncRedlock(["redis://127.0.0.1:6379"], ttl=10.0)   # doctest: +SKIP
>>> async with rl.lock("orders:1001", wait=5.0) as lock:       # doctest: +SKIP
...     print(await lock.token(), lock.validity)

Cancelling a task that awaits an acquisition drops the Rust future: the
client stops retrying, releases a grant it won anyway, and ends a
single-node wait on the server. A task cancelled inside ``async with``
releases on exit. A cancelled ``release()`` or ``stop_watchdog()`` runs to
its end in the background (as if shielded) and leaves the handle usable.
"""

from __future__ import annotations

import inspect
import os
from types import TracebackType
from typing import Any, Optional, Sequence, Type, Union

from ._native import AsyncLockCore, AsyncRedlockCore, Config, Redlock, Release, stale_token_from

__all__ = ["AsyncLock", "AsyncRedlock", "AsyncSemaphore"]


class AsyncLock:
    """A lock handle whose network calls are awaited. ``async with``
    acquires on entry when it holds nothing and releases on exit; with
    ``watchdog=True`` it also hands the lock to a watchdog and raises
    LockLost on exit if the lock was lost meanwhile."""

    def __init__(self, core: AsyncLockCore, watchdog: bool = False) -> None:
        self.core = core
        self._watchdog_in_with = watchdog

    async def acquire(self) -> None:
        await self.core.acquire()

    async def try_acquire(self) -> bool:
        return await self.core.try_acquire()

    async def extend(self, ttl: Optional[float] = None) -> float:
        return await self.core.extend(ttl)

    async def release(self) -> Release:
        return await self.core.release()

    async def release_all(self) -> Release:
        return await self.core.release(all=True)

    async def token(self) -> int:
        """The fencing token of this hold (a network round the first time)."""
        return await self.core.token()

    async def fenced(self, store: Any, fence_key: Union[str, bytes], *command: Any) -> Any:
        """Runs ``command`` on ``store`` as ``LOCK.FENCED fence_key <token>
        *command``, only while this hold's token is current there, and
        returns the command's reply. ``store`` is an asyncio client with
        ``execute_command`` (such as ``redis.asyncio.Redis``); a blocking
        client works too but blocks the event loop for the call. Raises
        StaleToken when the store has accepted a newer token, NotHeld or
        LockExpired without a current token (nothing is sent)."""
        if not command:
            raise ValueError("fenced() needs the write to run: a command and its arguments")
        token = await self.token()
        try:
            reply = store.execute_command("LOCK.FENCED", fence_key, token, *command)
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as error:
            stale = stale_token_from(error)
            if stale is None:
                raise
            raise stale from error
        return reply

    async def start_watchdog(self) -> None:
        await self.core.start_watchdog()

    async def stop_watchdog(self) -> None:
        await self.core.stop_watchdog()

    async def lost(self) -> bool:
        """Resolves when the watchdog stops watching: True when the lock
        was lost (stop the work done under it), False when the watchdog was
        stopped. Needs a watchdog."""
        return await self.core.lost()

    def check(self) -> None:
        """Raises LockLost once the watchdog has found the lock lost."""
        if self.core.is_lost:
            from ._errors import LockLost

            raise LockLost("the lock was lost (its watchdog could not renew it); acquire it again")

    @property
    def watched(self) -> bool:
        return self.core.watched

    @property
    def stopping(self) -> bool:
        """True while a release or ``stop_watchdog()`` of a watched lock is
        finishing (in the background if its task was cancelled): until then
        the handle's other operations raise RedisLockError ("watchdog is
        stopping"). ``watched`` is already False meanwhile."""
        return self.core.stopping

    async def settled(self) -> None:
        """Waits until no release or ``stop_watchdog()`` of a watched lock
        is still finishing (returns at once when none is)."""
        await self.core.settled()

    @property
    def validity(self) -> float:
        return self.core.validity

    @property
    def is_held(self) -> bool:
        return self.core.is_held

    @property
    def is_lost(self) -> bool:
        return self.core.is_lost

    @property
    def holds(self) -> int:
        return self.core.holds

    @property
    def resource(self) -> str:
        return self.core.resource

    @property
    def owner(self) -> str:
        return self.core.owner

    async def __aenter__(self) -> AsyncLock:  # noqa: PYI034 (Self needs 3.11)
        if self.core.holds == 0:
            await self.core.acquire()
        if self._watchdog_in_with:
            try:
                await self.core.start_watchdog()
            except BaseException:
                await self.core.release(all=True)
                raise
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool:
        # A stop_watchdog() cancelled in the block may still be finishing:
        # it hands the lock back to the handle, which must then release it.
        if self.core.stopping:
            await self.core.settled()
        lost = self.core.is_lost
        if self.core.holds > 0 or self.core.watched:
            await self.core.release(all=True)
        if lost and exc_type is None:
            self.check_lost_on_exit()
        return False

    def check_lost_on_exit(self) -> None:
        from ._errors import LockLost

        raise LockLost("the lock was lost while the block ran (its watchdog could not renew it)")


class AsyncSemaphore:
    """``permits`` leased permits on one resource, awaited."""

    def __init__(self, redlock: AsyncRedlock, resource: str, permits: int) -> None:
        self._redlock = redlock
        self.resource = resource
        self.permits = permits

    def permit(
        self, *, ttl: Optional[float] = None, wait: Optional[float] = None, watchdog: bool = False
    ) -> AsyncLock:
        return AsyncLock(
            self._redlock.core.handle(
                "permit", self.resource, ttl=ttl, wait=wait, permits=self.permits
            ),
            watchdog,
        )

    async def acquire(
        self, *, ttl: Optional[float] = None, wait: Optional[float] = None
    ) -> AsyncLock:
        permit = self.permit(ttl=ttl, wait=wait)
        await permit.acquire()
        return permit

    async def try_acquire(self, *, ttl: Optional[float] = None) -> Optional[AsyncLock]:
        permit = self.permit(ttl=ttl, wait=0)
        return permit if await permit.try_acquire() else None


class AsyncRedlock:
    """:class:`Redlock` for asyncio code; the same arguments."""

    def __init__(
        self,
        nodes: Union[str, Sequence[str]],
        *,
        ttl: float = 10.0,
        config: Optional[Config] = None,
        cluster: bool = False,
        tls_ca: Optional[Union[str, "os.PathLike[str]"]] = None,
        tls_cert: Optional[Union[str, "os.PathLike[str]"]] = None,
        tls_key: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> None:
        # The blocking client checks the arguments and settings (and serves
        # semaphore() checks); the async core uses the same ones.
        self.sync = Redlock(
            nodes,
            ttl=ttl,
            config=config,
            cluster=cluster,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
        )
        self.core = AsyncRedlockCore(self.sync, tls_ca, tls_cert, tls_key)

    def lock(
        self,
        resource: str,
        *,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        watchdog: bool = False,
    ) -> AsyncLock:
        return AsyncLock(self.core.handle("exclusive", resource, ttl=ttl, wait=wait), watchdog)

    def read_lock(
        self,
        resource: str,
        *,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        watchdog: bool = False,
    ) -> AsyncLock:
        return AsyncLock(self.core.handle("shared", resource, ttl=ttl, wait=wait), watchdog)

    async def acquire(
        self, resource: str, *, ttl: Optional[float] = None, wait: Optional[float] = None
    ) -> AsyncLock:
        core = self.core.handle("exclusive", resource, ttl=ttl, wait=wait)
        await core.acquire()  # directly: one coroutine less per call
        return AsyncLock(core)

    async def try_lock(self, resource: str, *, ttl: Optional[float] = None) -> Optional[AsyncLock]:
        lock = self.lock(resource, ttl=ttl, wait=0)
        return lock if await lock.try_acquire() else None

    def semaphore(self, resource: str, *, permits: int) -> AsyncSemaphore:
        self.sync.semaphore(resource, permits=permits)  # the crate's checks
        return AsyncSemaphore(self, resource, permits)

    @property
    def quorum(self) -> int:
        return self.sync.quorum
