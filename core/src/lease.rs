//! Converting lease ends between the process's monotonic clock and the wall
//! clock. A lease lives on the monotonic clock; it crosses a process boundary
//! (RDB, AOF, replication) as an absolute wall-clock end, like `PEXPIREAT`.
//! So after a restart the lease left is what was saved minus the wall-clock
//! time the node was down, and a replica holds the primary's lease end.

use crate::clock::Clock;

/// The longest lease any configuration allows (`lock.max-ttl` at most):
/// ten years, so that no deadline arithmetic can overflow.
pub const MAX_TTL_MS: u64 = 315_360_000_000;

/// How far a lease end that crosses processes (RDB, AOF, replication,
/// `RESTORE`) may lie beyond [`MAX_TTL_MS`] from now: the clock difference
/// between two nodes that this tolerates. A further end is not a lease any
/// node granted: the payload is refused.
pub const MAX_CLOCK_SKEW_MS: u64 = 86_400_000;

/// The latest lease-clock reading at which every deadline the module files
/// (a lease up to [`MAX_TTL_MS`] + [`MAX_CLOCK_SKEW_MS`] ahead, a wait up to
/// [`crate::args::MAX_WAIT_MS`] ahead) still fits the lease index exactly
/// ([`crate::deadlines::LATEST_DEADLINE`]): about 547 years of uptime, so
/// only `LOCK.DEBUG MONOTONIC-JUMP` can get there, and it may not. Past it
/// a deadline would be filed at the index's latest one, already due, and
/// filed again at each firing: the timer would spin.
pub const LATEST_READING_MS: u64 =
    crate::deadlines::LATEST_DEADLINE - MAX_TTL_MS - MAX_CLOCK_SKEW_MS;

const _: () = assert!(crate::args::MAX_WAIT_MS <= MAX_TTL_MS + MAX_CLOCK_SKEW_MS);

/// Whether a lease end read from outside (Unix ms) is one a node could have
/// granted: not beyond now + [`MAX_TTL_MS`] + [`MAX_CLOCK_SKEW_MS`].
pub fn plausible_wall_end(clock: &impl Clock, wall_end_ms: i64) -> bool {
    let horizon = MAX_TTL_MS.saturating_add(MAX_CLOCK_SKEW_MS);
    let horizon = i64::try_from(horizon).unwrap_or(i64::MAX);
    wall_end_ms <= clock.wall_ms().saturating_add(horizon)
}

/// The monotonic deadline `ttl_ms` from now.
pub fn deadline_after(clock: &impl Clock, ttl_ms: u64) -> u64 {
    clock.monotonic_ms().saturating_add(ttl_ms)
}

/// Milliseconds left before a monotonic deadline (0 once it has passed).
pub fn remaining_ms(clock: &impl Clock, deadline: u64) -> u64 {
    deadline.saturating_sub(clock.monotonic_ms())
}

/// The wall-clock time (Unix ms) at which a monotonic deadline falls, as the
/// wall clock reads now.
pub fn to_wall_ms(clock: &impl Clock, deadline: u64) -> i64 {
    let left = i64::try_from(remaining_ms(clock, deadline)).unwrap_or(i64::MAX);
    clock.wall_ms().saturating_add(left)
}

/// The monotonic deadline of a lease that ends at wall-clock `wall_end_ms`.
/// An end already in the past gives a deadline before now: the lease is
/// over (a lease lives through the reading of its deadline, see
/// `Lock::ends_at`).
pub fn from_wall_ms(clock: &impl Clock, wall_end_ms: i64) -> u64 {
    let now = clock.monotonic_ms();
    let left = wall_end_ms.saturating_sub(clock.wall_ms());
    match u64::try_from(left) {
        Ok(left) => now.saturating_add(left),
        Err(_) => now.saturating_sub(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn wall_clock_step_does_not_change_the_lease() {
        let clock = ManualClock::new(1_000, 1_700_000_000_000);
        let deadline = deadline_after(&clock, 10_000);
        clock.step_wall_ms(3_600_000);
        assert_eq!(remaining_ms(&clock, deadline), 10_000);
        clock.step_wall_ms(-7_200_000);
        assert_eq!(remaining_ms(&clock, deadline), 10_000);
        clock.advance_ms(9_999);
        assert_eq!(remaining_ms(&clock, deadline), 1);
        clock.advance_ms(1);
        assert_eq!(remaining_ms(&clock, deadline), 0);
    }

    #[test]
    fn restart_subtracts_the_downtime() {
        let before = ManualClock::new(50_000, 1_700_000_000_000);
        let deadline = deadline_after(&before, 30_000);
        before.advance_ms(5_000);
        let saved = to_wall_ms(&before, deadline);
        assert_eq!(saved, 1_700_000_030_000);
        // A new process: its monotonic clock restarts; 12 s of wall time passed.
        let after = ManualClock::new(7, 1_700_000_005_000 + 12_000);
        let loaded = from_wall_ms(&after, saved);
        assert_eq!(remaining_ms(&after, loaded), 30_000 - 5_000 - 12_000);
    }

    #[test]
    fn a_lease_end_beyond_any_ttl_and_skew_is_not_plausible() {
        let clock = ManualClock::new(7, 1_700_000_000_000);
        let horizon = i64::try_from(MAX_TTL_MS + MAX_CLOCK_SKEW_MS).unwrap();
        assert!(plausible_wall_end(&clock, 1_700_000_000_000 + horizon));
        assert!(!plausible_wall_end(&clock, 1_700_000_000_000 + horizon + 1));
        assert!(!plausible_wall_end(&clock, i64::MAX));
        assert!(plausible_wall_end(&clock, i64::MIN));
    }

    #[test]
    fn a_lease_that_ended_while_down_is_over_at_load() {
        let after = ManualClock::new(7, 2_000);
        let ended = from_wall_ms(&after, 1_000);
        assert_eq!(ended, 6);
        assert!(crate::lock::Holder::new(b"o", 1, 1, ended).has_expired(7));
        // An end of exactly now leaves the lease this millisecond.
        assert!(!crate::lock::Holder::new(b"o", 1, 1, from_wall_ms(&after, 2_000)).has_expired(7));
        assert_eq!(remaining_ms(&after, from_wall_ms(&after, i64::MIN)), 0);
        assert_eq!(
            remaining_ms(&after, from_wall_ms(&after, i64::MAX)),
            u64::try_from(i64::MAX - 2_000).unwrap()
        );
    }
}
