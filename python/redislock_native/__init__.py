"""Distributed locks on Redis/Valkey nodes running the redis-lock module.

A thin layer over the Rust client ``redis-lock-client``: quorum, validity,
clock drift, fencing-token write-back and re-entry are all decided in Rust;
this package converts arguments (seconds as floats), releases the GIL during
every network wait, and raises the exceptions below.

>>> from redislock_native import Redlock
>>> rl = Redlock(["redis://127.0.0.1:6379"], ttl=10.0)      # doctest: +SKIP
>>> with rl.lock("orders:1001", wait=5.0) as lock:           # doctest: +SKIP
...     print(lock.token, lock.validity, lock.is_held)
"""

from ._errors import (
    ConfigError,
    ForkedProcessError,
    LockExpired,
    LockLost,
    LockNotAcquired,
    NodeError,
    NotHeld,
    RedisLockError,
    StaleToken,
)
from ._native import Config, Lock, Redlock, Release, Semaphore

__all__ = [
    "Config",
    "ConfigError",
    "ForkedProcessError",
    "Lock",
    "LockExpired",
    "LockLost",
    "LockNotAcquired",
    "NodeError",
    "NotHeld",
    "RedisLockError",
    "Redlock",
    "Release",
    "Semaphore",
    "StaleToken",
]
