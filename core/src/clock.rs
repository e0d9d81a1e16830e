//! Time sources. Leases run on a monotonic clock so that a step of the wall
//! clock (NTP, an operator, a VM restore) neither ends nor lengthens them;
//! the wall clock is read only where time must survive the process: saving a
//! lease to disk or to a replica, and flooring fencing tokens.

use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// What the lock logic needs to know about time.
pub trait Clock {
    /// Milliseconds on a clock that never steps, from an arbitrary origin
    /// fixed for the life of the process.
    fn monotonic_ms(&self) -> u64;
    /// Unix time in microseconds, as the wall clock says (it may step).
    fn wall_us(&self) -> i64;
    /// Unix time in milliseconds.
    fn wall_ms(&self) -> i64 {
        self.wall_us().div_euclid(1000)
    }
}

/// The real clocks of the machine, plus a wall-clock offset that the module's
/// debug command sets to simulate a wall-clock step (libfaketime cannot be
/// used with redis-server). The offset is 0 unless a test sets it.
#[derive(Debug, Default)]
pub struct SystemClock {
    wall_offset_ms: AtomicI64,
}

impl SystemClock {
    pub const fn new() -> Self {
        SystemClock {
            wall_offset_ms: AtomicI64::new(0),
        }
    }

    /// Shifts every later wall-clock reading by `offset_ms`.
    pub fn set_wall_offset_ms(&self, offset_ms: i64) {
        self.wall_offset_ms.store(offset_ms, Ordering::Relaxed);
    }

    pub fn wall_offset_ms(&self) -> i64 {
        self.wall_offset_ms.load(Ordering::Relaxed)
    }
}

fn process_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

impl Clock for SystemClock {
    fn monotonic_ms(&self) -> u64 {
        // u64 milliseconds cover 584 million years of uptime. Readings
        // start at one second, so that "a millisecond ago" always exists.
        u64::try_from(process_origin().elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1_000)
    }

    fn wall_us(&self) -> i64 {
        let real = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_micros()).unwrap_or(i64::MAX),
            // A wall clock set before 1970 still orders tokens; use it negative.
            Err(before) => i64::try_from(before.duration().as_micros()).map_or(i64::MIN, |us| -us),
        };
        real.saturating_add(self.wall_offset_ms().saturating_mul(1000))
    }
}

/// One instant for a whole command: the monotonic clock is read once, at
/// the start, and every step of the command sees that reading. The wall
/// clock is read the first time a step asks for it (issuing a token,
/// writing a lease end for a replica) and that reading is kept: most
/// commands never need it, and a clock read was a few per cent of them.
pub struct Now<'a> {
    pub monotonic_ms: u64,
    wall_us: Cell<Option<i64>>,
    clock: &'a dyn Clock,
}

impl<'a> Now<'a> {
    pub fn of(clock: &'a impl Clock) -> Self {
        Now {
            monotonic_ms: clock.monotonic_ms(),
            wall_us: Cell::new(None),
            clock,
        }
    }
}

impl Clock for Now<'_> {
    fn monotonic_ms(&self) -> u64 {
        self.monotonic_ms
    }

    fn wall_us(&self) -> i64 {
        match self.wall_us.get() {
            Some(wall_us) => wall_us,
            None => {
                let wall_us = self.clock.wall_us();
                self.wall_us.set(Some(wall_us));
                wall_us
            }
        }
    }
}

/// A clock that only moves when told to: for tests of lease and token rules.
#[derive(Debug)]
pub struct ManualClock {
    monotonic_ms: Cell<u64>,
    wall_us: Cell<i64>,
}

impl ManualClock {
    /// A clock at monotonic `monotonic_ms` and wall-clock `wall_ms`.
    pub fn new(monotonic_ms: u64, wall_ms: i64) -> Self {
        ManualClock {
            monotonic_ms: Cell::new(monotonic_ms),
            wall_us: Cell::new(wall_ms * 1000),
        }
    }

    /// Real time passes: both clocks move forward together.
    pub fn advance_ms(&self, ms: u64) {
        self.monotonic_ms.set(self.monotonic_ms.get() + ms);
        self.wall_us
            .set(self.wall_us.get() + i64::try_from(ms).unwrap_or(i64::MAX) * 1000);
    }

    /// The wall clock steps (forward or back); the monotonic clock does not.
    pub fn step_wall_ms(&self, ms: i64) {
        self.wall_us.set(self.wall_us.get() + ms * 1000);
    }
}

impl Clock for ManualClock {
    fn monotonic_ms(&self) -> u64 {
        self.monotonic_ms.get()
    }

    fn wall_us(&self) -> i64 {
        self.wall_us.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_offset_moves_wall_but_not_monotonic() {
        let clock = SystemClock::new();
        let wall = clock.wall_ms();
        let mono = clock.monotonic_ms();
        clock.set_wall_offset_ms(3_600_000);
        assert!(clock.wall_ms() - wall >= 3_600_000);
        assert!(clock.monotonic_ms() - mono < 1_000);
        clock.set_wall_offset_ms(-3_600_000);
        assert!(clock.wall_ms() < wall);
    }

    #[test]
    fn a_snapshot_stands_still_once_read() {
        let clock = ManualClock::new(10, 1_000);
        let now = Now::of(&clock);
        clock.advance_ms(5);
        // The monotonic reading is the one taken at the start...
        assert_eq!(now.monotonic_ms(), 10);
        // ...the wall clock is read when first asked for, then kept.
        assert_eq!(now.wall_ms(), 1_005);
        clock.advance_ms(5);
        assert_eq!((now.monotonic_ms(), now.wall_ms()), (10, 1_005));
    }

    #[test]
    fn a_snapshot_never_read_for_the_wall_does_not_read_it() {
        struct NoWall;
        impl Clock for NoWall {
            fn monotonic_ms(&self) -> u64 {
                7
            }
            fn wall_us(&self) -> i64 {
                unreachable!("the wall clock was not asked for")
            }
        }
        let now = Now::of(&NoWall);
        assert_eq!(now.monotonic_ms(), 7);
    }

    #[test]
    fn manual_clock_steps_only_the_wall() {
        let clock = ManualClock::new(10, 1_000);
        clock.step_wall_ms(-500);
        assert_eq!((clock.monotonic_ms(), clock.wall_ms()), (10, 500));
        clock.advance_ms(5);
        assert_eq!((clock.monotonic_ms(), clock.wall_ms()), (15, 505));
    }
}
