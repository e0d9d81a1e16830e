//! The recovery window (antirez's delayed restart, built in): for
//! `lock.recovery-ms` after the module loads (or after that config is set),
//! the node grants nothing, neither a new lock nor a re-entry, so a node
//! that restarted without its latest writes cannot grant a lock that a
//! client still believes it holds through this node's earlier vote.
//! Waiters (`WAIT`) wait through the window; the timer serves them at its end.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_lock_core::Clock;

use crate::config::RECOVERY_MS;
use crate::state::CLOCK;

/// Monotonic time at which the module loaded.
static LOADED_AT: AtomicU64 = AtomicU64::new(0);

/// Starts the window now: at load, and when `lock.recovery-ms` is set.
pub fn mark_loaded() {
    LOADED_AT.store(CLOCK.monotonic_ms(), Ordering::Relaxed);
}

/// The monotonic time at which the window ends.
pub fn ends_at() -> u64 {
    let window = u64::try_from(RECOVERY_MS.load(Ordering::Relaxed)).unwrap_or(0);
    LOADED_AT.load(Ordering::Relaxed).saturating_add(window)
}

/// Milliseconds left in the recovery window at monotonic time `now`, if it
/// is still open.
pub fn refusal(now: u64) -> Option<u64> {
    let left = ends_at().saturating_sub(now);
    (left > 0).then_some(left)
}
