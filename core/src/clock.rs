//! Time sources. Leases run on a monotonic clock so that a step of the wall
//! clock (NTP, an operator, a VM restore) neither ends nor lengthens them;
//! the wall clock is read only where time must survive the process: saving a
//! lease to disk or to a replica, and flooring fencing tokens.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Mutex, OnceLock};
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

/// The real clocks of the machine, plus what the module's debug command
/// sets to simulate clock faults (libfaketime cannot be used with
/// redis-server): a wall-clock offset (a step), and for the monotonic clock
/// a rate (a clock that runs fast or slow) and forward jumps. All are off
/// unless a test sets them.
#[derive(Debug, Default)]
pub struct SystemClock {
    wall_offset_ms: AtomicI64,
    /// Whether the monotonic clock was ever skewed (then `skew` rules it).
    skewed: AtomicBool,
    skew: Mutex<Skew>,
}

/// A skewed monotonic clock: from the real reading `anchor_real_ms` it read
/// `anchor_ms`, and it runs `rate_ppm` parts per million fast (or slow).
#[derive(Debug, Default, Clone, Copy)]
struct Skew {
    anchor_real_ms: u64,
    anchor_ms: u64,
    rate_ppm: i64,
}

impl Skew {
    fn reading(&self, real_ms: u64) -> u64 {
        let elapsed = i128::from(real_ms.saturating_sub(self.anchor_real_ms));
        let scaled = elapsed + elapsed * i128::from(self.rate_ppm) / 1_000_000;
        self.anchor_ms
            .saturating_add(u64::try_from(scaled.max(0)).unwrap_or(u64::MAX))
    }
}

/// The slowest and fastest monotonic rates the debug knob accepts, ppm: the
/// clock must keep moving forward.
pub const MONOTONIC_RATE_PPM: std::ops::RangeInclusive<i64> = -900_000..=1_000_000;

impl SystemClock {
    pub const fn new() -> Self {
        SystemClock {
            wall_offset_ms: AtomicI64::new(0),
            skewed: AtomicBool::new(false),
            skew: Mutex::new(Skew {
                anchor_real_ms: 0,
                anchor_ms: 0,
                rate_ppm: 0,
            }),
        }
    }

    fn real_monotonic_ms() -> u64 {
        // u64 milliseconds cover 584 million years of uptime. Readings
        // start at one second, so that "a millisecond ago" always exists.
        u64::try_from(process_origin().elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1_000)
    }

    /// Changes the skew from now on, keeping the clock continuous.
    fn reskew(&self, change: impl FnOnce(&mut Skew, u64)) {
        let mut skew = self.skew.lock().unwrap_or_else(|p| p.into_inner());
        let real = Self::real_monotonic_ms();
        let now = if self.skewed.load(Ordering::Relaxed) {
            skew.reading(real)
        } else {
            real
        };
        skew.anchor_real_ms = real;
        skew.anchor_ms = now;
        change(&mut skew, now);
        self.skewed.store(true, Ordering::Relaxed);
    }

    /// Makes the monotonic clock run `rate_ppm` parts per million fast
    /// (negative: slow) from now on; `None` if the rate is outside
    /// [`MONOTONIC_RATE_PPM`].
    pub fn set_monotonic_rate_ppm(&self, rate_ppm: i64) -> Option<()> {
        if !MONOTONIC_RATE_PPM.contains(&rate_ppm) {
            return None;
        }
        self.reskew(|skew, _| skew.rate_ppm = rate_ppm);
        Some(())
    }

    pub fn monotonic_rate_ppm(&self) -> i64 {
        if !self.skewed.load(Ordering::Relaxed) {
            return 0;
        }
        self.skew.lock().unwrap_or_else(|p| p.into_inner()).rate_ppm
    }

    /// The real milliseconds in which the monotonic clock moves `ms`
    /// (rounded up; `ms` itself unless the rate is skewed).
    pub fn real_delay_ms(&self, ms: u64) -> u64 {
        let rate = i128::from(self.monotonic_rate_ppm());
        if rate == 0 {
            return ms;
        }
        let real = (i128::from(ms) * 1_000_000 + (1_000_000 + rate) - 1) / (1_000_000 + rate);
        u64::try_from(real.max(0)).unwrap_or(u64::MAX)
    }

    /// Moves the monotonic clock `ms` forward at once (it never goes back),
    /// unless that carries it past `latest`: then `None`, and the clock
    /// reads on as before.
    pub fn jump_monotonic_ms(&self, ms: u64, latest: u64) -> Option<()> {
        let mut jumped = None;
        self.reskew(|skew, now| {
            if let Some(to) = now.checked_add(ms).filter(|to| *to <= latest) {
                skew.anchor_ms = to;
                jumped = Some(());
            }
        });
        jumped
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
        let real = Self::real_monotonic_ms();
        if !self.skewed.load(Ordering::Relaxed) {
            return real;
        }
        self.skew
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reading(real)
    }

    fn wall_us(&self) -> i64 {
        let real = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(since) => i64::try_from(since.as_micros()).unwrap_or(i64::MAX),
            // A wall clock set before 1970 still orders tokens; use it negative.
            Err(before) => i64::try_from(before.duration().as_micros()).map_or(i64::MIN, |us| -us),
        };
        self.wall_us_of(real)
    }
}

impl SystemClock {
    /// The wall clock as this clock reads it, from `real_us`, a reading of
    /// the machine's (Unix µs) taken elsewhere: the server's cached time of
    /// the command under way, which saves reading the clock again.
    pub fn wall_us_of(&self, real_us: i64) -> i64 {
        real_us.saturating_add(self.wall_offset_ms().saturating_mul(1000))
    }
}

/// One instant for a whole command (or, through [`UnitInstant`], for every
/// command of one transaction): the monotonic clock is read once, at
/// the start, and every step of the command sees that reading. The wall
/// clock is read the first time a step asks for it (issuing a token,
/// writing a lease end for a replica) and that reading is kept: most
/// commands never need it, and a clock read was a few per cent of them.
pub struct Now<'a> {
    pub monotonic_ms: u64,
    /// The wall clock's reading, or [`NOT_READ`] (a word, not an `Option`
    /// of two: a command's opened key, which holds a `Now`, is moved by
    /// register stores at its size).
    wall_us: Cell<i64>,
    clock: &'a dyn Clock,
}

/// No wall-clock reading yet. A reading of exactly this value (only a
/// debug offset that saturates the clock gives one) is kept as one
/// microsecond later.
const NOT_READ: i64 = i64::MIN;

impl<'a> Now<'a> {
    pub fn of(clock: &'a impl Clock) -> Self {
        Self::at(clock.monotonic_ms(), clock)
    }

    /// The instant `monotonic_ms`, a reading of `clock` taken earlier (an
    /// instant shared by every command of one transaction); the wall clock
    /// is still read when first asked for.
    pub fn at(monotonic_ms: u64, clock: &'a impl Clock) -> Self {
        Now {
            monotonic_ms,
            wall_us: Cell::new(NOT_READ),
            clock,
        }
    }

    /// This instant with its wall-clock reading given (Unix µs, taken
    /// before it by the caller): the wall clock is not read then.
    pub fn with_wall_us(self, wall_us: i64) -> Self {
        self.wall_us.set(wall_us.max(NOT_READ + 1));
        self
    }
}

impl Clock for Now<'_> {
    fn monotonic_ms(&self) -> u64 {
        self.monotonic_ms
    }

    fn wall_us(&self) -> i64 {
        match self.wall_us.get() {
            NOT_READ => {
                let wall_us = self.clock.wall_us().max(NOT_READ + 1);
                self.wall_us.set(wall_us);
                wall_us
            }
            wall_us => wall_us,
        }
    }
}

/// One monotonic reading for a whole execution unit: a transaction
/// (`MULTI`/`EXEC`), a script or a function. The server freezes its own
/// time for such a unit (its cached time, in microseconds, is set when the
/// unit's outer command starts and kept for every command inside it), so
/// that a key's expiry is one moment for all of it; a lease must be too,
/// or a lease could end between two commands of one `EXEC`.
///
/// The adapter keys the reading by the server's frozen time: the first
/// command of a unit reads the clock, the others of the same unit (same
/// key) reuse that reading. Readings stay in order: a unit's reading is
/// taken after everything before it ran, and everything after it reads the
/// clock afresh.
#[derive(Debug, Default, Clone, Copy)]
pub struct UnitInstant {
    kept: Option<(i64, u64)>,
}

impl UnitInstant {
    pub const fn new() -> Self {
        UnitInstant { kept: None }
    }

    /// The monotonic reading for the unit whose frozen server time is
    /// `unit`: the one taken by an earlier command of the same unit, or a
    /// new one from `read` (then kept for the unit's next commands).
    pub fn reading(&mut self, unit: i64, read: impl FnOnce() -> u64) -> u64 {
        match self.kept {
            Some((kept_unit, reading)) if kept_unit == unit => reading,
            _ => {
                let reading = read();
                self.kept = Some((unit, reading));
                reading
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
    fn a_jump_past_the_latest_reading_is_refused_and_moves_nothing() {
        let clock = SystemClock::new();
        let before = clock.monotonic_ms();
        let latest = before + 1_000_000;
        assert_eq!(clock.jump_monotonic_ms(2_000_000, latest), None);
        assert_eq!(clock.jump_monotonic_ms(u64::MAX, latest), None);
        assert!(clock.monotonic_ms() - before < 1_000);
        assert_eq!(clock.jump_monotonic_ms(500_000, latest), Some(()));
        assert!(clock.monotonic_ms() - before >= 500_000);
    }

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
    fn a_skewed_monotonic_clock_runs_at_its_rate_jumps_forward_and_never_goes_back() {
        let clock = SystemClock::new();
        assert_eq!(clock.monotonic_rate_ppm(), 0);
        // Twice as fast: over a real interval it moves about twice as far.
        let (real0, mono0) = (SystemClock::real_monotonic_ms(), clock.monotonic_ms());
        assert_eq!(clock.set_monotonic_rate_ppm(1_000_000), Some(()));
        std::thread::sleep(std::time::Duration::from_millis(60));
        let (real1, mono1) = (SystemClock::real_monotonic_ms(), clock.monotonic_ms());
        let (real, mono) = (real1 - real0, mono1 - mono0);
        assert!(
            mono + 2 >= 2 * real - real.min(2) && mono <= 2 * real + 2,
            "{mono} vs {real}"
        );
        // A jump moves it forward at once.
        assert_eq!(clock.jump_monotonic_ms(5_000, u64::MAX), Some(()));
        assert!(clock.monotonic_ms() >= mono1 + 5_000);
        // Slowing down never moves it back, and a rate outside the range is
        // refused, changing nothing.
        let before = clock.monotonic_ms();
        assert_eq!(clock.set_monotonic_rate_ppm(-900_000), Some(()));
        assert!(clock.monotonic_ms() >= before);
        assert_eq!(clock.set_monotonic_rate_ppm(-1_000_000), None);
        assert_eq!(clock.monotonic_rate_ppm(), -900_000);
        // The wall clock is not touched.
        let wall = SystemClock::new().wall_ms();
        assert!((clock.wall_ms() - wall).abs() < 1_000);
    }

    #[test]
    fn a_delay_on_a_skewed_clock_is_that_much_real_time() {
        let clock = SystemClock::new();
        assert_eq!(clock.real_delay_ms(1_000), 1_000);
        clock.set_monotonic_rate_ppm(1_000_000).unwrap_or_default();
        assert_eq!(clock.real_delay_ms(1_000), 500);
        assert_eq!(clock.real_delay_ms(1), 1, "rounded up");
        clock.set_monotonic_rate_ppm(-500_000).unwrap_or_default();
        assert_eq!(clock.real_delay_ms(1_000), 2_000);
    }

    #[test]
    fn a_skew_reading_scales_the_real_time_since_its_anchor() {
        let skew = Skew {
            anchor_real_ms: 1_000,
            anchor_ms: 5_000,
            rate_ppm: 10_000,
        };
        assert_eq!(skew.reading(1_000), 5_000);
        assert_eq!(skew.reading(2_000), 6_010);
        assert_eq!(skew.reading(500), 5_000, "never before the anchor");
        let slow = Skew {
            rate_ppm: -500_000,
            ..skew
        };
        assert_eq!(slow.reading(3_000), 6_000);
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
    fn a_wall_reading_at_the_clocks_floor_is_still_read_once() {
        // A debug offset far enough back saturates the wall clock at its
        // floor, the value that marks "not read": the reading is kept as
        // one microsecond later, and not taken again.
        struct Floor(Cell<u32>);
        impl Clock for Floor {
            fn monotonic_ms(&self) -> u64 {
                0
            }
            fn wall_us(&self) -> i64 {
                self.0.set(self.0.get() + 1);
                i64::MIN
            }
        }
        let clock = Floor(Cell::new(0));
        let now = Now::of(&clock);
        assert_eq!((now.wall_us(), now.wall_us()), (i64::MIN + 1, i64::MIN + 1));
        assert_eq!(clock.0.get(), 1, "the wall clock was read once");
        let given = Now::of(&clock).with_wall_us(i64::MIN);
        assert_eq!(given.wall_us(), i64::MIN + 1);
        assert_eq!(clock.0.get(), 1, "a given reading is not read again");
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
    fn one_unit_reads_the_clock_once() {
        let clock = ManualClock::new(10, 1_000);
        let mut unit = UnitInstant::new();
        assert_eq!(unit.reading(500, || clock.monotonic_ms()), 10);
        clock.advance_ms(7);
        // A later command of the same unit (same frozen server time).
        assert_eq!(unit.reading(500, || clock.monotonic_ms()), 10);
        // The next unit reads the clock afresh, and keeps that reading.
        assert_eq!(unit.reading(501, || clock.monotonic_ms()), 17);
        clock.advance_ms(3);
        assert_eq!(unit.reading(501, || clock.monotonic_ms()), 17);
        assert_eq!(unit.reading(9_000, || clock.monotonic_ms()), 20);
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
