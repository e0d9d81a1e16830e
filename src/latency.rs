//! The module's timer in the server's latency monitor: a firing that took
//! at least `latency-monitor-threshold` ms is a sample of the
//! `lock-timer` event (`LATENCY LATEST`, `LATENCY HISTORY lock-timer`,
//! `LATENCY DOCTOR`), as the server's own expiry cycle is of
//! `expire-cycle`. The threshold is read at load, at the server's first
//! lock, and on every `CONFIG SET` (the config event); 0, the default, or
//! a `CONFIG` renamed away samples nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis_lock_core::firing;

use crate::ffi::{self, Ctx};

/// The server's `latency-monitor-threshold`, in ms (0: off).
static THRESHOLD_MS: AtomicU64 = AtomicU64::new(0);

/// Reads the threshold again.
pub fn read_threshold(ctx: Ctx) {
    let threshold = ffi::call::config_integer(ctx, c"latency-monitor-threshold")
        .and_then(|ms| u64::try_from(ms).ok())
        .unwrap_or(0);
    THRESHOLD_MS.store(threshold, Ordering::Relaxed);
}

/// A firing of the timer took `elapsed`.
pub fn firing_took(elapsed: Duration) {
    if let Some(ms) = firing::latency_sample(THRESHOLD_MS.load(Ordering::Relaxed), elapsed) {
        ffi::latency_add_sample(firing::LATENCY_EVENT, i64::try_from(ms).unwrap_or(i64::MAX));
    }
}

/// At load: the threshold now and from the server's first lock on (the
/// config event is `eviction`'s, which reads it again on every change).
pub fn init(ctx: Ctx) -> bool {
    read_threshold(ctx);
    crate::activation::on_activation(read_threshold)
}
