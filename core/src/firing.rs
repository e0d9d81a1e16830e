//! What one firing of the module's timer does, and how much of it. The
//! timer ends leases and waits on time; its work per firing is bounded so
//! that a million leases ending at once never stall the server (the rest
//! waits for the next firing, one event-loop turn later).
//!
//! - Waits end on time whatever the node's role: a nil reply propagates
//!   nothing, and a primary turned replica may still have clients waiting.
//! - Only a primary ends leases, grants and takes back undelivered grants.
//!   A replica waits for its primary's `DEL`, drops what was pending (so it
//!   cannot keep the timer firing) and looks again now and then, so that it
//!   takes over once promoted.
//! - While the server asks modules to avoid writes (`CLIENT PAUSE WRITE`,
//!   `FAILOVER`), nothing is ended, granted or taken back: propagating then
//!   trips an assertion in Redis. The timer looks again a few ms later, and
//!   the leases that ended meanwhile end right after the pause, in order.

use std::time::Duration;

/// How often a replica looks again at leases that ended.
pub const REPLICA_RECHECK_MS: u64 = 100;
/// How often the timer looks again while writes are paused.
pub const PAUSE_RECHECK_MS: u64 = 10;
/// Items taken per index lookup.
pub const BATCH: usize = 64;
/// The time one firing may take, every kind of work (wait timeouts,
/// leases, grants, the sweep) together: each kind gets what the kinds
/// before it left (see [`left`]), so that a firing stalls the server for
/// about this long whatever is due (each kind its own 2 ms let a firing
/// take 8 ms, and a million leases ending together stalled a `PING` for
/// 6–8 ms).
pub const BUDGET: Duration = Duration::from_millis(2);

/// What is left of the firing's `budget` once `elapsed` has passed: zero
/// when it is spent. A kind of work given zero still makes the one step
/// [`bounded`] always makes, so every kind moves on in every firing.
pub fn left(budget: Duration, elapsed: Duration) -> Duration {
    budget.saturating_sub(elapsed)
}

/// The latency monitor's event for a firing (`LATENCY LATEST`,
/// `LATENCY HISTORY lock-timer`, `LATENCY DOCTOR`).
pub const LATENCY_EVENT: &std::ffi::CStr = c"lock-timer";

/// The latency monitor's sample for a firing that took `elapsed`, with the
/// server's `latency-monitor-threshold` at `threshold_ms` (0: the monitor
/// is off, and nothing is sampled; the server's module API would take
/// every firing then): the firing's time in ms, rounded up (a firing over
/// 5 ms never reads 5), when it took at least the threshold.
pub fn latency_sample(threshold_ms: u64, elapsed: Duration) -> Option<u64> {
    if threshold_ms == 0 || elapsed < Duration::from_millis(threshold_ms) {
        return None;
    }
    Some(u64::try_from(elapsed.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX))
}

/// What a firing does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// End the waits whose timeout passed.
    pub end_waits: bool,
    /// End leases, serve queues, take back undelivered grants.
    pub settle: bool,
    /// Drop pending grants and take-backs (a replica never makes them).
    pub forget_pending: bool,
    /// Fire again no later than this many ms from now, whatever else is
    /// due.
    pub recheck_ms: Option<u64>,
}

/// The plan for a node that is (or is not) a primary, with writes paused
/// (or not).
pub fn plan(primary: bool, writes_paused: bool) -> Plan {
    match (primary, writes_paused) {
        (false, _) => Plan {
            end_waits: true,
            settle: false,
            forget_pending: true,
            recheck_ms: Some(REPLICA_RECHECK_MS),
        },
        (true, true) => Plan {
            end_waits: true,
            settle: false,
            forget_pending: false,
            recheck_ms: Some(PAUSE_RECHECK_MS),
        },
        (true, false) => Plan {
            end_waits: true,
            settle: true,
            forget_pending: false,
            recheck_ms: None,
        },
    }
}

impl Plan {
    /// The earliest the timer is armed (lease clock, ms, at `now`) for
    /// the work this plan holds off, a primary's (lease ends, grants):
    /// the recheck on a replica or a paused primary, no bound (0) on an
    /// unpaused primary.
    pub fn held_until(&self, now: u64) -> u64 {
        self.recheck_ms.map_or(0, |ms| now.saturating_add(ms))
    }
}

/// When the timer fires next (lease clock, ms): the earliest of `held`,
/// the primary's work (lease ends, grants, a recheck of names held by
/// another type, the end of recovery, the arrivals sweep), not before
/// `held_until` ([`Plan::held_until`]), and `own`, work a firing does on
/// any node at its own time (wait timeouts, the lease index's trims).
/// `None`: nothing is due.
///
/// A replica or a paused primary does not end a lease that is over, so
/// its deadline stays in the past: were the trims held with it (or the
/// timer armed for it unheld), a firing that trims would arm the next at
/// once, back to back, for as long as the index has memory to give back.
pub fn next_firing(held: Option<u64>, held_until: u64, own: Option<u64>) -> Option<u64> {
    let held = held.map(|at| at.max(held_until));
    match (held, own) {
        (Some(held), Some(own)) => Some(held.min(own)),
        (held, own) => held.or(own),
    }
}

/// Runs `step` until it reports that nothing is left (`false`) or
/// `elapsed` (time since the work started) reaches `budget`. Returns
/// whether work was left over. At least one step runs.
pub fn bounded(
    budget: Duration,
    elapsed: impl Fn() -> Duration,
    mut step: impl FnMut() -> bool,
) -> bool {
    loop {
        if !step() {
            return false;
        }
        if elapsed() >= budget {
            return true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_firing_is_sampled_only_when_the_monitor_is_on_and_it_reached_the_threshold() {
        let us = Duration::from_micros;
        // The monitor off: nothing, however long.
        assert_eq!(latency_sample(0, Duration::from_secs(1)), None);
        // Below the threshold: nothing (a firing of 0.3 ms never reads 1).
        assert_eq!(latency_sample(1, us(300)), None);
        assert_eq!(latency_sample(3, us(2_999)), None);
        // At or over it: rounded up.
        assert_eq!(latency_sample(1, us(1_000)), Some(1));
        assert_eq!(latency_sample(1, us(2_050)), Some(3));
        assert_eq!(latency_sample(5, us(5_001)), Some(6));
        assert_eq!(latency_sample(1, Duration::MAX).map(|v| v > 0), Some(true));
        assert_eq!(latency_sample(u64::MAX, Duration::from_secs(1)), None);
    }

    #[test]
    fn only_an_unpaused_primary_settles() {
        assert!(plan(true, false).settle);
        assert!(!plan(true, true).settle);
        assert!(!plan(false, false).settle);
        assert!(!plan(false, true).settle);
        for (primary, paused) in [(true, false), (true, true), (false, false), (false, true)] {
            assert!(plan(primary, paused).end_waits, "waits end on time");
        }
        assert!(plan(false, false).forget_pending);
        assert!(
            !plan(true, true).forget_pending,
            "a paused primary keeps its work"
        );
        assert_eq!(plan(false, false).recheck_ms, Some(REPLICA_RECHECK_MS));
        assert_eq!(plan(true, true).recheck_ms, Some(PAUSE_RECHECK_MS));
        assert_eq!(plan(true, false).recheck_ms, None);
    }

    /// On a replica or a paused primary a lease that is over stays in the
    /// index (its primary, or the end of the pause, ends it): the timer is
    /// armed for it no sooner than the recheck, while the lease index's
    /// trims (any role) keep their own pace, 1 ms apart, not back to back
    /// (what the firing that trimmed armed, at 2141ec7: the overdue lease's
    /// time, so at once) and not at the recheck's pace.
    #[test]
    fn a_held_overdue_lease_waits_for_the_recheck_and_trims_keep_their_pace() {
        let now = 1_000_000;
        let overdue = Some(now - 5_000);
        let trim = Some(now + 1);
        for (primary, paused, recheck) in [
            (false, false, REPLICA_RECHECK_MS),
            (false, true, REPLICA_RECHECK_MS),
            (true, true, PAUSE_RECHECK_MS),
        ] {
            let held_until = plan(primary, paused).held_until(now);
            assert_eq!(held_until, now + recheck);
            assert_eq!(
                next_firing(overdue, held_until, trim),
                trim,
                "primary {primary}, paused {paused}: trims not 1 ms apart"
            );
            assert_eq!(
                next_firing(overdue, held_until, None),
                Some(now + recheck),
                "primary {primary}, paused {paused}: the overdue lease"
            );
            // A lease that ends after the recheck is armed for its end.
            let later = Some(now + 60_000);
            assert_eq!(next_firing(later, held_until, trim), trim);
            assert_eq!(next_firing(later, held_until, None), later);
        }
        // An unpaused primary ends the overdue lease at once.
        let held_until = plan(true, false).held_until(now);
        assert_eq!(held_until, 0);
        assert_eq!(next_firing(overdue, held_until, trim), overdue);
        assert_eq!(next_firing(None, held_until, trim), trim);
        assert_eq!(next_firing(None, held_until, None), None);
        // A wait timeout (own) earlier than the recheck keeps its time.
        let wait = Some(now + 7);
        assert_eq!(next_firing(overdue, now + 100, wait), wait);
        assert_eq!(plan(true, true).held_until(u64::MAX), u64::MAX);
    }

    #[test]
    fn the_kinds_of_work_share_one_budget() {
        let budget = Duration::from_millis(2);
        assert_eq!(left(budget, Duration::ZERO), budget);
        assert_eq!(
            left(budget, Duration::from_micros(1500)),
            Duration::from_micros(500)
        );
        assert_eq!(left(budget, Duration::from_millis(3)), Duration::ZERO);
        // A kind given nothing still makes one step, and says work is left.
        let steps = Cell::new(0);
        let left_over = bounded(
            Duration::ZERO,
            || Duration::ZERO,
            || {
                steps.set(steps.get() + 1);
                true
            },
        );
        assert!(left_over);
        assert_eq!(steps.get(), 1);
    }

    #[test]
    fn work_stops_at_the_budget_and_says_so() {
        // Each step costs 1 ms of a 2 ms budget: two steps, work left.
        let clock = Cell::new(0u64);
        let mut steps = 0;
        let left = bounded(
            Duration::from_millis(2),
            || Duration::from_millis(clock.get()),
            || {
                steps += 1;
                clock.set(clock.get() + 1);
                true
            },
        );
        assert!(left);
        assert_eq!(steps, 2);
        // Work that runs out first: nothing left.
        let mut items = 5;
        let left = bounded(
            Duration::from_millis(2),
            || Duration::ZERO,
            || {
                items -= 1;
                items > 0
            },
        );
        assert!(!left);
        assert_eq!(items, 0);
    }
}
