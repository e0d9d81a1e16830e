//! Ending leases and waits on time. One Redis timer is armed for the earliest
//! deadline: of the lease index, of the `WAIT` timeouts, or now when grants
//! are pending; when it fires, every lock whose lease ended is removed with
//! an `expired` event and a replicated `DEL`, and its waiters are served,
//! whether or not anyone touches the key. Work per firing is bounded so that
//! a million leases ending at once never stall the server: the rest is left
//! to the next firing, one event-loop turn later.
//!
//! Only a primary decides expiry; a replica waits for the primary's `DEL`
//! and rechecks now and then, so that it takes over once promoted.
//!
//! Nothing is ended, granted or taken back while the server asks modules to
//! avoid writes (`CLIENT PAUSE WRITE|ALL`, `FAILOVER`): propagating then
//! trips an assertion in Redis. The timer looks again a few ms later, and
//! the leases that ended meanwhile end right after the pause, in order.

use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_lock_core::Clock;
use redis_module::raw;

use crate::ffi::{self, rm, Ctx};
use crate::guard;
use crate::recovery;
use crate::state::{with_state, ModuleState, CLOCK};
use crate::sweep;
use crate::waiting;

/// A context detached from any client, made at load, for creating timers
/// from callbacks that have no context of their own (`unlink2`, `copy2`).
pub static TIMER_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// How often the timer has fired (`lock_timer_runs` in `INFO lock`), to
/// show that an idle node's timer is idle too.
pub static TIMER_RUNS: AtomicU64 = AtomicU64::new(0);

/// How often a replica looks again at leases that ended.
const REPLICA_RECHECK_MS: u64 = 100;
/// How often the timer looks again while writes are paused.
const PAUSE_RECHECK_MS: u64 = 10;
/// How often a name with waiters that holds a value of another type is
/// looked at again.
const FOREIGN_RECHECK_MS: u64 = 100;
/// How often the lease sweep takes a slice while it runs.
const SWEEP_INTERVAL_MS: u64 = 2;
/// The longest a timer is armed for; a later deadline is armed again then.
/// (Redis computes a timer's end in microseconds: a huge delay overflows.)
const MAX_TIMER_MS: u64 = 60_000;
/// Keys expired per index lookup, and time spent per firing.
const BATCH: usize = 64;
const BUDGET: Duration = Duration::from_millis(2);

/// Makes sure the timer fires by the earliest deadline (now if grants wait).
pub fn arm(state: &mut ModuleState) {
    arm_not_before(state, 0);
}

/// Arms for the earliest of: the next lease end and pending grants (not
/// before `writes_not_before`), and the next wait timeout.
fn arm_not_before(state: &mut ModuleState, writes_not_before: u64) {
    let leases = state
        .deadlines
        .next_deadline()
        .map(|deadline| deadline.max(writes_not_before));
    let waits = state.wait_deadlines.next_deadline();
    // Pending grants: at once (0 is in the past of any monotonic reading).
    let grants = (!state.pending_grants.is_empty() || !state.undelivered.is_empty())
        .then_some(writes_not_before);
    // `ms` from now (the clock is read only for what is pending).
    let soon = |ms: u64| {
        CLOCK
            .monotonic_ms()
            .saturating_add(ms)
            .max(writes_not_before)
    };
    let foreign = (!state.behind_foreign.is_empty()).then(|| soon(FOREIGN_RECHECK_MS));
    let recovered = state
        .waits_for_recovery
        .then(|| recovery::ends_at().max(writes_not_before));
    let sweep = sweep::wanted(state).then(|| soon(SWEEP_INTERVAL_MS));
    let Some(fire_at) = [leases, waits, grants, foreign, recovered, sweep]
        .into_iter()
        .flatten()
        .min()
    else {
        return;
    };
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    if ctx.is_null() {
        return;
    }
    if let Some((timer, at)) = state.timer {
        if at <= fire_at {
            return;
        }
        rm!(RedisModule_StopTimer(ctx, timer, std::ptr::null_mut()));
        state.timer = None;
    }
    // The clock is read only when a timer is (re)armed: most commands find
    // one armed early enough and return above.
    let now = CLOCK.monotonic_ms();
    let delay = fire_at.saturating_sub(now).min(MAX_TIMER_MS);
    if let Some(timer) = rm!(RedisModule_CreateTimer(
        ctx,
        i64::try_from(delay).unwrap_or(0),
        Some(on_timer),
        std::ptr::null_mut()
    )) {
        state.timer = Some((timer, now.saturating_add(delay)));
    }
}

extern "C" fn on_timer(ctx: Ctx, _data: *mut c_void) {
    guard::callback(ctx, "expiry timer", (), || run(ctx));
}

fn run(ctx: Ctx) {
    TIMER_RUNS.fetch_add(1, Ordering::Relaxed);
    with_state(|state| state.timer = None);
    // Waits end on time whatever the role (a primary turned replica may
    // still have clients waiting): a nil reply propagates nothing.
    waiting::end_due_waits();
    if !ffi::is_primary(ctx) {
        // A replica grants nothing (its waiters were unblocked by Redis on
        // demotion, and WAIT does not block on a replica): drop what was
        // pending, so that it cannot keep the timer firing.
        // The sweep indexes what arrived by RENAME or MOVE from the
        // primary's stream too: a promoted replica ends those leases.
        if with_state(|state| sweep::wanted(state)).unwrap_or(false) {
            sweep::step(ctx, BUDGET);
        }
        let recheck = CLOCK.monotonic_ms().saturating_add(REPLICA_RECHECK_MS);
        with_state(|state| {
            state.pending_grants.clear();
            state.behind_foreign.clear();
            state.undelivered.clear();
            arm_not_before(state, recheck);
        });
        return;
    }
    if ffi::avoid_replica_traffic() {
        let recheck = CLOCK.monotonic_ms().saturating_add(PAUSE_RECHECK_MS);
        with_state(|state| arm_not_before(state, recheck));
        return;
    }
    let undelivered =
        with_state(|state| std::mem::take(&mut state.undelivered)).unwrap_or_default();
    for grant in &undelivered {
        waiting::revoke_undelivered(ctx, grant);
    }
    let started = Instant::now();
    while started.elapsed() < BUDGET {
        let now = CLOCK.monotonic_ms();
        let Some(due) = with_state(|state| {
            let due = state.deadlines.pop_due(now, BATCH);
            (!due.is_empty() || state.deadlines.has_due(now)).then_some(due)
        })
        .flatten() else {
            break;
        };
        for (id, key) in due {
            waiting::settle_by_name(ctx, &key, Some(id));
        }
    }
    let recovered = recovery::refusal(CLOCK.monotonic_ms()).is_none();
    let grants = with_state(|state| {
        let mut grants = std::mem::take(&mut state.pending_grants);
        grants.append(&mut state.behind_foreign);
        if state.waits_for_recovery && recovered {
            state.waits_for_recovery = false;
            grants.extend(state.waiters.keys_where(|_| true));
        }
        grants
    })
    .unwrap_or_default();
    for key in grants {
        waiting::settle_by_name(ctx, &key, None);
    }
    if with_state(|state| sweep::wanted(state)).unwrap_or(false) {
        sweep::step(ctx, BUDGET);
    }
    with_state(arm);
}

/// Registers the timer context at load.
pub fn init(ctx: Ctx) -> bool {
    let detached =
        rm!(RedisModule_GetDetachedThreadSafeContext(ctx)).unwrap_or(std::ptr::null_mut());
    TIMER_CTX.store(detached, Ordering::Relaxed);
    !detached.is_null()
}
