"""asyncio front end: the blocking client's calls run on the event loop's
default executor (a thread each), so the loop keeps running while a call
waits on the network. Every rule is still the Rust client's.

>>> from redislock_native.aio import AsyncRedlock
>>> rl = AsyncRedlock(["redis://127.0.0.1:6379"], ttl=10.0)   # doctest: +SKIP
>>> async with rl.lock("orders:1001", wait=5.0) as lock:       # doctest: +SKIP
...     print(await lock.token(), lock.validity)

A cancelled acquisition still finishes on its thread; a lock it won then
belongs to a handle nobody holds, which releases it when it is collected
(at once, in CPython).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
from types import TracebackType
from typing import Any, Callable, Optional, Sequence, Type, TypeVar, Union

from ._native import Config, Lock, Redlock, Release, Semaphore, stale_token_from

__all__ = ["AsyncLock", "AsyncRedlock", "AsyncSemaphore"]

T = TypeVar("T")


async def _run(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(fn, *args, **kwargs))


class AsyncLock:
    """A :class:`Lock` whose network calls are awaited. ``async with``
    acquires on entry when it holds nothing and releases on exit."""

    def __init__(self, lock: Lock) -> None:
        self.sync = lock

    async def acquire(self) -> None:
        await _run(self.sync.acquire)

    async def extend(self, ttl: Optional[float] = None) -> float:
        return await _run(self.sync.extend, ttl)

    async def release(self) -> Release:
        return await _run(self.sync.release)

    async def release_all(self) -> Release:
        return await _run(self.sync.release_all)

    async def token(self) -> int:
        """The fencing token of this hold (a network round the first time)."""
        return await _run(lambda: self.sync.token)

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
        await _run(self.sync.start_watchdog)

    async def stop_watchdog(self) -> None:
        await _run(self.sync.stop_watchdog)

    def check(self) -> None:
        self.sync.check()

    @property
    def validity(self) -> float:
        return self.sync.validity

    @property
    def is_held(self) -> bool:
        return self.sync.is_held

    @property
    def is_lost(self) -> bool:
        return self.sync.is_lost

    @property
    def holds(self) -> int:
        return self.sync.holds

    @property
    def resource(self) -> str:
        return self.sync.resource

    async def __aenter__(self) -> AsyncLock:  # noqa: PYI034 (Self needs 3.11)
        await _run(self.sync.__enter__)
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool:
        return await _run(self.sync.__exit__, exc_type, exc, tb)


class AsyncSemaphore:
    """A :class:`Semaphore` whose permits are awaited."""

    def __init__(self, semaphore: Semaphore) -> None:
        self.sync = semaphore

    def permit(
        self, *, ttl: Optional[float] = None, wait: Optional[float] = None, watchdog: bool = False
    ) -> AsyncLock:
        return AsyncLock(self.sync.permit(ttl=ttl, wait=wait, watchdog=watchdog))

    async def acquire(
        self, *, ttl: Optional[float] = None, wait: Optional[float] = None
    ) -> AsyncLock:
        return AsyncLock(await _run(self.sync.acquire, ttl=ttl, wait=wait))

    async def try_acquire(self, *, ttl: Optional[float] = None) -> Optional[AsyncLock]:
        lock = await _run(self.sync.try_acquire, ttl=ttl)
        return None if lock is None else AsyncLock(lock)


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
        self.sync = Redlock(
            nodes,
            ttl=ttl,
            config=config,
            cluster=cluster,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
        )

    def lock(
        self,
        resource: str,
        *,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        watchdog: bool = False,
    ) -> AsyncLock:
        return AsyncLock(self.sync.lock(resource, ttl=ttl, wait=wait, watchdog=watchdog))

    def read_lock(
        self,
        resource: str,
        *,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        watchdog: bool = False,
    ) -> AsyncLock:
        return AsyncLock(self.sync.read_lock(resource, ttl=ttl, wait=wait, watchdog=watchdog))

    async def acquire(
        self, resource: str, *, ttl: Optional[float] = None, wait: Optional[float] = None
    ) -> AsyncLock:
        return AsyncLock(await _run(self.sync.acquire, resource, ttl=ttl, wait=wait))

    async def try_lock(self, resource: str, *, ttl: Optional[float] = None) -> Optional[AsyncLock]:
        lock = await _run(self.sync.try_lock, resource, ttl=ttl)
        return None if lock is None else AsyncLock(lock)

    def semaphore(self, resource: str, *, permits: int) -> AsyncSemaphore:
        return AsyncSemaphore(self.sync.semaphore(resource, permits=permits))

    @property
    def quorum(self) -> int:
        return self.sync.quorum
