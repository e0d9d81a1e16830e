//! The recovery window (antirez's delayed restart, built in): for
//! `lock.recovery-ms` after the module loads, the node refuses every new
//! lock, so a node that restarted without its locks cannot grant one that a
//! client still believes it holds through this node's earlier vote.

use std::sync::atomic::{AtomicU64, Ordering};

use redis_lock_core::Clock;

use crate::config::RECOVERY_MS;
use crate::state::CLOCK;

/// Monotonic time at which the module loaded.
static LOADED_AT: AtomicU64 = AtomicU64::new(0);

pub fn mark_loaded() {
    LOADED_AT.store(CLOCK.monotonic_ms(), Ordering::Relaxed);
}

/// Milliseconds left in the recovery window at monotonic time `now`, if it
/// is still open.
pub fn refusal(now: u64) -> Option<u64> {
    let window = u64::try_from(RECOVERY_MS.load(Ordering::Relaxed)).unwrap_or(0);
    let ends = LOADED_AT.load(Ordering::Relaxed).saturating_add(window);
    let left = ends.saturating_sub(now);
    (left > 0).then_some(left)
}
