//! The one counter that is not in the thread-local state: Redis may free
//! values on its lazy-free thread (`FLUSHALL ASYNC`), so the number of lock
//! values alive is atomic.

use std::sync::atomic::AtomicI64;

/// Lock values currently in the keyspace (`lock_held` in `INFO lock`).
pub static LIVE_LOCKS: AtomicI64 = AtomicI64::new(0);
