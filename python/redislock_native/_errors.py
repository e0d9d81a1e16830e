"""The exceptions of redislock_native.

Every error the Rust client reports is one of these; the base class is
:class:`RedisLockError`.
"""

from __future__ import annotations

from typing import List, Optional, Tuple


class RedisLockError(Exception):
    """Base class of every error raised by redislock_native."""


class ConfigError(RedisLockError, ValueError):
    """A setting or argument that can never work (no nodes, a bad URL, a TTL
    not longer than node_timeout plus the drift allowance, ...)."""


class LockNotAcquired(RedisLockError):
    """No attempt won a majority of the nodes before the retries or the wait
    ran out: the lock is held elsewhere, or too few nodes answered.

    ``outcomes`` lists the last attempt's answers as ``(node, answer)``.
    """

    attempts: Optional[int] = None
    elapsed: Optional[float] = None
    outcomes: List[Tuple[str, str]] = []


class LockLost(RedisLockError):
    """A held lock could not be confirmed by a majority of the nodes (on
    extend, re-entry or fencing token): assume it is lost, stop the work done
    under it and acquire it again.

    ``confirmed``/``quorum`` say how many nodes confirmed and how many were
    needed; ``outcomes`` lists the nodes' answers as ``(node, answer)``.
    """

    confirmed: Optional[int] = None
    quorum: Optional[int] = None
    outcomes: List[Tuple[str, str]] = []


class StaleToken(LockLost):
    """The store refused a fenced write (``Lock.fenced``): its fence has
    accepted a newer fencing token, so another holder has written since this
    lock was granted. Stop the work done under this lock. The store client's
    own exception is the ``__cause__``."""


class LockExpired(LockLost):
    """The lock's validity ended before the operation could be confirmed:
    another owner may hold it now. Acquire it again."""


class NodeError(RedisLockError):
    """The only node of a single-node client failed (or so many nodes refused
    the command itself that no majority is left). ``node`` is its
    ``host:port`` and ``detail`` what went wrong there."""

    node: Optional[str] = None
    detail: Optional[str] = None


class NotHeld(RedisLockError):
    """The handle holds nothing: it was never acquired, or already released
    (releasing twice is a bug in the caller)."""


class ForkedProcessError(RedisLockError):
    """A Redlock, Lock or Semaphore made before ``os.fork()`` was used in the
    child: its connections and background thread stay in the parent. Create
    a new Redlock in the child."""
