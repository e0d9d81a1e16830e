//! The module's timer in the server's latency monitor: a firing that took
//! at least `latency-monitor-threshold` ms is a sample of the
//! `lock-timer` event (`LATENCY LATEST`, `LATENCY HISTORY lock-timer`,
//! `LATENCY DOCTOR`), as the server's own expiry cycle is of
//! `expire-cycle`. 0, the default, samples nothing (the module API would
//! take every firing then), and so does a `CONFIG` renamed away.
//!
//! The threshold is read with `CONFIG GET` (the only way on every server),
//! which the server counts like any command (`cmdstat_config|get`): so it
//! is read only when a firing took 1 ms or more (no threshold is lower)
//! and the value is not known yet or changed since (the config event names
//! the settings that changed): on a server whose firings stay short, never.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis_lock_core::firing;

use crate::ffi::{self, Ctx};

/// The server's `latency-monitor-threshold` as last read, in ms (0: off).
static THRESHOLD_MS: AtomicU64 = AtomicU64::new(0);
/// It must be read again before it is used.
static STALE: AtomicBool = AtomicBool::new(true);

/// The setting's name, as the config event gives it.
pub const SETTING: &[u8] = b"latency-monitor-threshold";

/// The threshold may have changed (from the config event; before the
/// server's first lock the module does not follow changes, so it takes
/// the value for unknown then too).
pub fn threshold_changed() {
    STALE.store(true, Ordering::Relaxed);
}

/// A firing of the timer took `elapsed`.
pub fn firing_took(ctx: Ctx, elapsed: Duration) {
    if elapsed < Duration::from_millis(1) {
        return;
    }
    if STALE.swap(false, Ordering::Relaxed) {
        let threshold = ffi::call::config_integer(ctx, c"latency-monitor-threshold")
            .and_then(|ms| u64::try_from(ms).ok())
            .unwrap_or(0);
        THRESHOLD_MS.store(threshold, Ordering::Relaxed);
    }
    if let Some(ms) = firing::latency_sample(THRESHOLD_MS.load(Ordering::Relaxed), elapsed) {
        ffi::latency_add_sample(firing::LATENCY_EVENT, i64::try_from(ms).unwrap_or(i64::MAX));
    }
}

/// At load: the value is unknown until read, and again from the server's
/// first lock on (changes before it had no event).
pub fn init() -> bool {
    threshold_changed();
    crate::activation::on_activation(|_| threshold_changed())
}
