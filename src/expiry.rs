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

use std::time::{Duration, Instant};

use redis_lock_core::Clock;

use crate::ffi::{self, Ctx};
use crate::recovery;
use crate::state::{with_state, CLOCK};
use crate::sweep;
use crate::timer;
use crate::waiting;

/// How often a replica looks again at leases that ended.
const REPLICA_RECHECK_MS: u64 = 100;
/// How often the timer looks again while writes are paused.
const PAUSE_RECHECK_MS: u64 = 10;
/// Items taken per index lookup, and the time each kind of work (wait
/// timeouts, leases, grants, the sweep) may take per firing.
const BATCH: usize = 64;
const BUDGET: Duration = Duration::from_millis(2);

/// One firing of the timer (`timer.rs` calls it).
pub fn run(ctx: Ctx) {
    with_state(|state| state.timer = None);
    // Waits end on time whatever the role (a primary turned replica may
    // still have clients waiting): a nil reply propagates nothing.
    waiting::end_due_waits(BATCH, BUDGET);
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
            timer::arm_not_before(state, recheck);
        });
        return;
    }
    if ffi::avoid_replica_traffic() {
        let recheck = CLOCK.monotonic_ms().saturating_add(PAUSE_RECHECK_MS);
        with_state(|state| timer::arm_not_before(state, recheck));
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
    let mut grants = with_state(|state| {
        let mut grants = std::mem::take(&mut state.pending_grants);
        grants.append(&mut state.behind_foreign);
        if state.waits_for_recovery && recovered {
            state.waits_for_recovery = false;
            grants.extend(state.waiters.keys_where(|_| true));
        }
        grants
    })
    .unwrap_or_default();
    // Keys whose waiters may be served, within the budget too; the rest
    // wait for the next firing (the timer fires again at once for them).
    let started = Instant::now();
    while let Some(key) = grants.pop_first() {
        waiting::settle_by_name(ctx, &key, None);
        if started.elapsed() >= BUDGET {
            break;
        }
    }
    if !grants.is_empty() {
        with_state(|state| state.pending_grants.append(&mut grants));
    }
    if with_state(|state| sweep::wanted(state)).unwrap_or(false) {
        sweep::step(ctx, BUDGET);
    }
    with_state(timer::arm);
}
