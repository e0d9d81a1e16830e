"""Type stubs of the Rust extension module (redislock_native._native)."""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, Awaitable, List, Optional, Sequence, Type, Union

from typing_extensions import Self

class Config:
    """Client settings (the Rust crate's ``Config``); durations in seconds.

    Checked on construction: a setting that can never work raises
    ConfigError (a ValueError), a negative, NaN or infinite duration
    ValueError.
    """

    def __init__(
        self,
        *,
        node_timeout: float = 0.1,
        retry_count: int = 3,
        retry_delay: float = 0.2,
        retry_jitter: float = 0.1,
        acquire_timeout: Optional[float] = None,
        drift_factor: float = 0.01,
        drift_min: float = 0.002,
        watchdog_interval: Optional[float] = None,
        watchdog_margin: float = 0.01,
        acknowledge_replicas: int = 0,
        acknowledge_fsync: bool = False,
        acknowledge_replica_fsyncs: int = 0,
        acknowledge_timeout: float = 0.1,
    ) -> None: ...
    @property
    def node_timeout(self) -> float: ...
    @property
    def retry_count(self) -> int: ...
    @property
    def retry_delay(self) -> float: ...
    @property
    def retry_jitter(self) -> float: ...
    @property
    def acquire_timeout(self) -> Optional[float]: ...
    @property
    def drift_factor(self) -> float: ...
    @property
    def drift_min(self) -> float: ...
    @property
    def watchdog_interval(self) -> Optional[float]: ...
    @property
    def watchdog_margin(self) -> float: ...
    @property
    def acknowledge_replicas(self) -> int: ...
    @property
    def acknowledge_fsync(self) -> bool: ...
    @property
    def acknowledge_replica_fsyncs(self) -> int: ...
    def drift(self, ttl: float) -> float:
        """The clock-drift allowance for ``ttl``, in seconds."""

class Release:
    """What a release reported."""

    @property
    def holds_left(self) -> int: ...
    @property
    def released(self) -> int: ...
    @property
    def not_held(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def lapsed(self) -> bool:
        """The lease had ended before the release: the work overran it."""

class Lock:
    """A lock handle (exclusive, shared, or a semaphore permit).

    As a context manager it acquires on entry when it holds nothing, and
    releases every hold on exit (also on an exception).
    """

    def acquire(self) -> None:
        """Acquires (retrying, or waiting on the server with one node), or
        adds a hold when already held (re-entry). Raises LockNotAcquired."""
    def extend(self, ttl: Optional[float] = None) -> float:
        """Renews the lease; returns the new validity in seconds. Raises
        LockLost / LockExpired when a majority could not confirm in time."""
    def release(self) -> Release:
        """Releases one hold; the last one frees the lock on the nodes."""
    def release_all(self) -> Release:
        """Releases every hold at once (stopping a watchdog)."""
    def start_watchdog(self) -> None:
        """Hands the held lock to a watchdog renewing it in the background
        until it is released or lost (then extend() and acquire() refuse)."""
    def stop_watchdog(self) -> None:
        """Stops the watchdog; the lock stays held until its lease ends."""
    @property
    def watched(self) -> bool: ...
    @property
    def is_lost(self) -> bool:
        """The watchdog found the lock lost (always False without one)."""
    def check(self) -> None:
        """Raises LockLost once the watchdog found the lock lost."""
    @property
    def token(self) -> int:
        """The fencing token of this hold (greater than every earlier
        holder's): pass it to the storage you write to."""
    def fenced(self, store: Any, fence_key: Union[str, bytes], *command: Any) -> Any:
        """Runs ``command`` on ``store`` (a client with ``execute_command``,
        such as redis-py's ``Redis``, on a server with the module) as
        ``LOCK.FENCED fence_key <token> *command``, only while this hold's
        token is current there; returns the command's reply. Raises
        StaleToken when the store has accepted a newer token, NotHeld or
        LockExpired without a current token (nothing is sent)."""
    @property
    def validity(self) -> float:
        """Seconds in which the lock is certainly held (0.0 when not held)."""
    @property
    def is_held(self) -> bool: ...
    @property
    def holds(self) -> int: ...
    @property
    def resource(self) -> str: ...
    @property
    def owner(self) -> str: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class Semaphore:
    """``permits`` leased permits on one resource."""

    def permit(
        self,
        *,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        watchdog: bool = False,
    ) -> Lock: ...
    def acquire(self, *, ttl: Optional[float] = None, wait: Optional[float] = None) -> Lock: ...
    def try_acquire(self, *, ttl: Optional[float] = None) -> Optional[Lock]: ...
    @property
    def permits(self) -> int: ...
    @property
    def resource(self) -> str: ...

class Redlock:
    """Locks over one node, N independent masters (Redlock), or a Redis
    Cluster (``cluster=True``), each with the redis-lock module loaded.

    ``ttl`` is the default lease in seconds. ``wait`` (in seconds) bounds an
    acquisition: None uses the Config's retries and acquire_timeout, 0 makes
    one attempt, anything else retries (or waits on the server, with one
    node) until then.

    TLS: ``rediss://`` URLs; ``tls_ca`` (a PEM file of the CA to trust
    instead of the system's roots), ``tls_cert`` and ``tls_key`` (PEM files
    of a client certificate and its key, for servers with
    ``tls-auth-clients yes``).
    """

    def __init__(
        self,
        nodes: Union[str, Sequence[str]],
        *,
        ttl: float = 10.0,
        config: Optional[Config] = None,
        cluster: bool = False,
        tls_ca: Optional[Union[str, os.PathLike[str]]] = None,
        tls_cert: Optional[Union[str, os.PathLike[str]]] = None,
        tls_key: Optional[Union[str, os.PathLike[str]]] = None,
    ) -> None: ...
    def lock(
        self,
        resource: str,
        *,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        watchdog: bool = False,
    ) -> Lock:
        """A handle, not yet acquired: use it in ``with`` or call acquire().
        With ``watchdog=True`` the ``with`` block also renews it in the
        background, and raises LockLost on exit if it was lost meanwhile."""
    def acquire(
        self, resource: str, *, ttl: Optional[float] = None, wait: Optional[float] = None
    ) -> Lock:
        """Acquires an exclusive lock; raises LockNotAcquired."""
    def try_lock(self, resource: str, *, ttl: Optional[float] = None) -> Optional[Lock]:
        """One attempt, no waiting: the Lock, or None when held elsewhere."""
    def read_lock(
        self,
        resource: str,
        *,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        watchdog: bool = False,
    ) -> Lock:
        """A shared (read) lock handle, not yet acquired."""
    def semaphore(self, resource: str, *, permits: int) -> Semaphore: ...
    @property
    def quorum(self) -> int: ...
    @property
    def nodes(self) -> List[str]: ...
    @property
    def ttl(self) -> float: ...
    @property
    def config(self) -> Config: ...

def stale_token_from(error: BaseException) -> Optional[BaseException]:
    """The StaleToken a store client's exception stands for (chained to
    it), or None when it is not a stale-token refusal."""

def _delivery_channels(event_loop: object) -> int:
    """How many delivery channels the process keeps for ``event_loop`` (for
    the package's tests)."""

class AsyncLockCore:
    """The native core of ``redislock_native.aio.AsyncLock``: its methods
    return awaitables resolved by the async Rust client."""

    def acquire(self) -> Awaitable[None]: ...
    def try_acquire(self) -> Awaitable[bool]: ...
    def extend(self, ttl: Optional[float] = None) -> Awaitable[float]: ...
    def release(self, all: bool = False) -> Awaitable[Release]: ...
    def token(self) -> Awaitable[int]: ...
    def start_watchdog(self) -> Awaitable[None]: ...
    def stop_watchdog(self) -> Awaitable[None]: ...
    def lost(self) -> Awaitable[bool]: ...
    def settled(self) -> Awaitable[None]: ...
    @property
    def watched(self) -> bool: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def is_lost(self) -> bool: ...
    @property
    def is_held(self) -> bool: ...
    @property
    def validity(self) -> float: ...
    @property
    def holds(self) -> int: ...
    @property
    def resource(self) -> str: ...
    @property
    def owner(self) -> str: ...

class AsyncRedlockCore:
    """The native core of ``redislock_native.aio.AsyncRedlock``."""

    def __init__(
        self,
        sync: Redlock,
        tls_ca: Optional[Union[str, os.PathLike[str]]] = None,
        tls_cert: Optional[Union[str, os.PathLike[str]]] = None,
        tls_key: Optional[Union[str, os.PathLike[str]]] = None,
    ) -> None: ...
    def handle(
        self,
        kind: str,
        resource: str,
        *,
        ttl: Optional[float] = None,
        wait: Optional[float] = None,
        permits: int = 0,
    ) -> AsyncLockCore: ...
