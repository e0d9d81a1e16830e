//! The module's one timer: armed for the earliest thing that is due (a lease
//! end, a wait timeout, pending grants, a recheck, the sweep), it runs the
//! handler registered at load when it fires. Anything that changes what is
//! due arms it again; arming is cheap when a timer early enough is set.
//! (The handler, `expiry::run`, is registered rather than named here, so
//! that everything that arms the timer sits below what it runs.)

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;

use redis_lock_core::{firing, Clock};
use redis_module::raw;

use crate::ffi::{self, Ctx};
use crate::guard;
use crate::recovery;
use crate::state::{ModuleState, CLOCK};
use crate::sweep;

/// A context detached from any client, made at load, for creating timers
/// from callbacks that have no context of their own (`unlink2`, `copy2`).
pub static TIMER_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// How often the timer has fired (`lock_timer_runs` in `INFO lock`), to
/// show that an idle node's timer is idle too.
pub static TIMER_RUNS: AtomicU64 = AtomicU64::new(0);

/// What a firing runs.
static HANDLER: OnceLock<fn(Ctx)> = OnceLock::new();

/// How often a name with waiters that holds a value of another type is
/// looked at again.
const FOREIGN_RECHECK_MS: u64 = 100;
/// How often the lease sweep takes a slice while it runs.
const SWEEP_INTERVAL_MS: u64 = 2;
/// Stale items (released locks, ended waits) that arming the timer drops
/// from an index's top at most; past them it arms for the stale top's
/// time, which is no later than the earliest live one's.
const ARM_POPS: usize = 256;
/// How soon the timer fires again while the lease index has memory to give
/// back (each firing gives back about a chunk, ~1 MB at most, within its
/// budget; a million leases' index is gone in a few dozen firings).
const TRIM_INTERVAL_MS: u64 = 1;
/// The longest a timer is armed for; a later deadline is armed again then.
/// (Redis computes a timer's end in microseconds: a huge delay overflows.)
const MAX_TIMER_MS: u64 = 60_000;

/// Makes sure the timer fires by the earliest deadline (now if grants wait).
pub fn arm(state: &mut ModuleState) {
    arm_not_before(state, 0);
}

/// Arms for the earliest of: the next lease end, pending grants and the
/// other work only an unpaused primary does (not before
/// `writes_not_before`), and the next wait timeout and the lease index's
/// trims (at their own time: `firing::next_firing`).
pub fn arm_not_before(state: &mut ModuleState, writes_not_before: u64) {
    let leases = state.deadlines.next_deadline_within(ARM_POPS);
    let waits = state.wait_deadlines.next_deadline_within(ARM_POPS);
    // Pending grants: at once (0 is in the past of any monotonic reading).
    let grants = (!state.pending_grants.is_empty() || !state.undelivered.is_empty()).then_some(0);
    // `ms` from now (the clock is read only for what is pending).
    let soon = |ms: u64| CLOCK.monotonic_ms().saturating_add(ms);
    let foreign = (!state.behind_foreign.is_empty()).then(|| soon(FOREIGN_RECHECK_MS));
    let recovered = state.waits_for_recovery.then(recovery::ends_at);
    let sweep = sweep::wanted(state).then(|| soon(SWEEP_INTERVAL_MS));
    // The lease index's memory after a spike, or its sweep: a chunk or so
    // per firing, on any node.
    let trim = state
        .deadlines
        .trim_wanted()
        .then(|| soon(TRIM_INTERVAL_MS));
    let held = [leases, grants, foreign, recovered, sweep]
        .into_iter()
        .flatten()
        .min();
    let own = [waits, trim].into_iter().flatten().min();
    let Some(fire_at) = firing::next_firing(held, writes_not_before, own) else {
        return;
    };
    arm_at(state, fire_at);
}

/// Whether a firing is armed for `at` or earlier (lease clock, ms).
pub fn fires_by(state: &ModuleState, at: u64) -> bool {
    state.timer.is_some_and(|(_, armed)| armed <= at)
}

/// Makes sure the timer fires by `fire_at` (lease clock, ms).
fn arm_at(state: &mut ModuleState, fire_at: u64) {
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    if ctx.is_null() {
        return;
    }
    if let Some((timer, at)) = state.timer {
        if at <= fire_at {
            return;
        }
        ffi::stop_timer(ctx, timer);
        state.timer = None;
    }
    // The clock is read only when a timer is (re)armed: most commands find
    // one armed early enough and return above.
    let now = CLOCK.monotonic_ms();
    let delay = fire_at.saturating_sub(now).min(MAX_TIMER_MS);
    // Redis counts the delay in real milliseconds (they differ only while a
    // test makes the lease clock run fast or slow).
    if let Some(timer) = ffi::create_timer(ctx, CLOCK.real_delay_ms(delay), on_timer) {
        state.timer = Some((timer, now.saturating_add(delay)));
    }
}

/// Drops lease index entry `entry` (a holder left, a lock went), and arms
/// the timer when that started a sweep of the index's stale items, or left
/// memory to give back (run in steps by the timer's trims: a removal never
/// rebuilds the index whole in practice, `DeadlineIndex::trim`).
pub fn remove_lease(state: &mut ModuleState, entry: u64) {
    state.deadlines.remove(entry);
    if state.deadlines.take_wake() {
        // Only the trim's time: `arm` would first drop the stale items at
        // the index's top, in the release (the firing arms in full).
        arm_at(state, CLOCK.monotonic_ms().saturating_add(TRIM_INTERVAL_MS));
    }
}

/// Arms the timer afresh: the lease clock's rate changed or it jumped (a
/// debug knob), so the armed timer's end no longer means what it did.
pub fn rearm(state: &mut ModuleState) {
    if let Some((timer, _)) = state.timer.take() {
        let ctx = TIMER_CTX.load(Ordering::Relaxed);
        if !ctx.is_null() {
            ffi::stop_timer(ctx, timer);
        }
    }
    arm(state);
}

extern "C" fn on_timer(ctx: Ctx, _data: *mut c_void) {
    guard::callback(ctx, "expiry timer", (), || {
        TIMER_RUNS.fetch_add(1, Ordering::Relaxed);
        if let Some(handler) = HANDLER.get() {
            let started = std::time::Instant::now();
            handler(ctx);
            crate::latency::firing_took(ctx, started.elapsed());
        }
    });
}

/// Makes the timer context at load; `handler` is what a firing runs (the
/// expiry and hand-off of `expiry.rs`, a layer above this one).
pub fn init(ctx: Ctx, handler: fn(Ctx)) -> bool {
    let _ = HANDLER.set(handler);
    let detached = ffi::detached_context(ctx);
    TIMER_CTX.store(detached, Ordering::Relaxed);
    !detached.is_null()
}
