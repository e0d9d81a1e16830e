//! The counters that are not in the thread-local state: Redis may free
//! values on its lazy-free thread (`FLUSHALL ASYNC`), so the numbers of lock
//! values and holders alive are atomic.

use std::sync::atomic::{AtomicI64, Ordering};

/// Lock values currently in the keyspace (`lock_held` in `INFO lock`).
pub static LIVE_LOCKS: AtomicI64 = AtomicI64::new(0);

/// Holders of those values (one per exclusive lock, one per owner of a
/// shared one): what the lease index should hold an entry for each of
/// (the sweep compares the two).
pub static LIVE_HOLDERS: AtomicI64 = AtomicI64::new(0);

/// A lock value with `holders` holders entered (+1) or left (-1) memory.
pub fn value_counted(sign: i64, holders: usize) {
    let holders = i64::try_from(holders).unwrap_or(i64::MAX);
    LIVE_LOCKS.fetch_add(sign, Ordering::Relaxed);
    LIVE_HOLDERS.fetch_add(sign.saturating_mul(holders), Ordering::Relaxed);
}

/// Holders joined (+n) or left (-n) a value in place.
pub fn holders_counted(delta: i64) {
    LIVE_HOLDERS.fetch_add(delta, Ordering::Relaxed);
}
