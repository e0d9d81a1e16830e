//! `INFO lock`: what this node has done and holds now.

use std::ffi::{c_int, CStr};
use std::sync::atomic::Ordering;

use redis_module::raw;

use crate::ffi;
use crate::guard;
use crate::recovery;
use crate::state::with_state;
use crate::stats::LIVE_LOCKS;

pub extern "C" fn info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    guard::callback(std::ptr::null_mut(), "info", (), || {
        let Some((stats, last_token, waiting, index, index_bytes)) = with_state(|state| {
            (
                state.node.stats,
                state.node.tokens.last(),
                state.waiters.total(),
                state.deadlines.len(),
                state.deadlines.capacity_bytes(),
            )
        }) else {
            return;
        };
        let held = LIVE_LOCKS.load(Ordering::Relaxed);
        let recovering =
            recovery::refusal(redis_lock_core::Clock::monotonic_ms(&crate::state::CLOCK))
                .unwrap_or(0);
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let holders = crate::stats::LIVE_HOLDERS.load(Ordering::Relaxed);
        let size = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let fields: [(&CStr, i64); 26] = [
            (c"held", held),
            (c"holders", holders),
            (c"acquired", count(stats.acquired)),
            (c"reentered", count(stats.reentered)),
            (c"contended", count(stats.contended)),
            (c"released", count(stats.released)),
            (c"expired", count(stats.expired)),
            (c"extended", count(stats.extended)),
            (c"fenced", count(stats.fenced)),
            (c"waits", count(stats.waits)),
            (c"wait_grants", count(stats.wait_grants)),
            (c"wait_timeouts", count(stats.wait_timeouts)),
            (
                c"wait_grants_undelivered",
                count(stats.wait_grants_undelivered),
            ),
            (c"shared_grants", count(stats.shared_grants)),
            (c"semaphore_full", count(stats.semaphore_full)),
            (c"holders_expired", count(stats.holders_expired)),
            (
                c"evictable",
                i64::from(crate::eviction::EVICTABLE.load(Ordering::Relaxed)),
            ),
            (
                c"evicted",
                count(crate::eviction::EVICTED.load(Ordering::Relaxed)),
            ),
            (
                c"timer_runs",
                count(crate::timer::TIMER_RUNS.load(Ordering::Relaxed)),
            ),
            (c"waiting", size(waiting)),
            (c"lease_index", size(index)),
            (c"lease_index_bytes", size(index_bytes)),
            (c"last_token", last_token),
            (c"recovery_left_ms", count(recovering)),
            (
                c"effects_for_replicas",
                i64::from(crate::propagation::propagating_to_replicas()),
            ),
            (
                c"debug_wall_offset_ms",
                crate::state::CLOCK.wall_offset_ms(),
            ),
        ];
        ffi::info_section(ctx, &fields);
    });
}
