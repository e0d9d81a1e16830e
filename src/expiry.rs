//! Ending leases and waits on time. One Redis timer is armed for the earliest
//! deadline: of the lease index, of the `WAIT` timeouts, or now when grants
//! are pending; when it fires, every lock whose lease ended is removed with
//! an `expired` event and a replicated `DEL`, and its waiters are served,
//! whether or not anyone touches the key. What a firing does on which node,
//! and how much of it, is the core's (`redis_lock_core::firing`: only an
//! unpaused primary ends leases; work per firing is bounded).

use std::time::Instant;

use redis_lock_core::firing::{self, BATCH, BUDGET};
use redis_lock_core::Clock;

use crate::ffi::{self, Ctx};
use crate::recovery;
use crate::state::{with_state, CLOCK};
use crate::sweep;
use crate::timer;
use crate::waiting;

/// One firing of the timer (`timer.rs` calls it), by the core's plan
/// (`redis_lock_core::firing`).
pub fn run(ctx: Ctx) {
    // One budget for the whole firing, each kind of work taking what the
    // ones before it left (`firing::left`).
    let started = Instant::now();
    let left = || firing::left(BUDGET, started.elapsed());
    with_state(|state| state.timer = None);
    let plan = firing::plan(ffi::is_primary(ctx), ffi::avoid_replica_traffic());
    if plan.end_waits {
        waiting::end_due_waits(BATCH, left());
    }
    if plan.forget_pending {
        // The sweep indexes what arrived by RENAME or MOVE from the
        // primary's stream too: a promoted replica ends those leases.
        if with_state(|state| sweep::wanted(state)).unwrap_or(false) {
            sweep::step(ctx, left());
        }
        with_state(|state| {
            state.pending_grants.clear();
            state.behind_foreign.clear();
            state.undelivered.clear();
        });
    }
    // What the plan holds off (a lease that is over, on a replica or a
    // paused primary) is armed for no sooner than the recheck: every arm
    // of this firing says so (`firing::next_firing`).
    let held_until = plan.held_until(CLOCK.monotonic_ms());
    if plan.recheck_ms.is_some() {
        with_state(|state| timer::arm_not_before(state, held_until));
    }
    if plan.settle {
        settle(ctx, &left);
    }
    // Memory the lease index gives back after a spike, a chunk at a time
    // (any role: a replica's index shrinks too), and its sweep. The next
    // trim 1 ms on, whatever the role: on a replica or a paused primary a
    // lease that is over stays due, and a plain `timer::arm` fired the
    // timer again at once for it, trims back to back.
    if with_state(|state| state.deadlines.trim_wanted()).unwrap_or(false) {
        let started = Instant::now();
        firing::bounded(
            left(),
            || started.elapsed(),
            || with_state(|state| state.deadlines.trim()).unwrap_or(false),
        );
        with_state(|state| timer::arm_not_before(state, held_until));
    }
}

/// A primary's work: take back undelivered grants, end the leases that are
/// over and serve their queues, serve the queues of keys removed outside
/// our commands, sweep; each within what `left()` says is left of the
/// firing's budget.
fn settle(ctx: Ctx, left: &dyn Fn() -> std::time::Duration) {
    let undelivered =
        with_state(|state| std::mem::take(&mut state.undelivered)).unwrap_or_default();
    for grant in &undelivered {
        waiting::revoke_undelivered(ctx, grant);
    }
    let started = Instant::now();
    firing::bounded(
        left(),
        || started.elapsed(),
        || {
            let now = CLOCK.monotonic_ms();
            let Some(due) =
                with_state(|state| state.deadlines.next_due_batch(now, BATCH)).flatten()
            else {
                return false;
            };
            for (id, key) in due {
                waiting::settle_by_name(ctx, &key, Some(id));
            }
            true
        },
    );
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
    firing::bounded(
        left(),
        || started.elapsed(),
        || {
            let Some(key) = grants.pop_first() else {
                return false;
            };
            waiting::settle_by_name(ctx, &key, None);
            true
        },
    );
    if !grants.is_empty() {
        with_state(|state| state.pending_grants.append(&mut grants));
    }
    if with_state(|state| sweep::wanted(state)).unwrap_or(false) {
        sweep::step(ctx, left());
    }
    with_state(timer::arm);
}
