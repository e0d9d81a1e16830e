//! The node's fencing-token counter.
//!
//! Rule: a fresh acquisition gets `max(last + 1, wall clock in µs)`, and
//! `LOCK.FENCE … ATLEAST n` raises `last` to at least `n`. `last` is saved in
//! the RDB and carried by every replicated or AOF-logged effect, so a restart
//! or a promoted replica continues above it. The clock floor covers what
//! persistence can lose: after an unclean crash that drops the AOF tail (or a
//! rewrite without an RDB preamble that kept no lock), the first token is
//! still above every token issued before the crash, because those tokens were
//! at most the wall clock of their time (1 µs apart at most a million grants
//! a second, which one node cannot reach), unless the counter had been raised
//! past the clock by `ATLEAST` or the wall clock stepped back across the
//! restart.
//!
//! Every token is at most [`MAX_TOKEN`] = 2^53 − 1, the largest integer a
//! double holds exactly: JavaScript numbers (node-redis, ioredis), Lua
//! numbers and most JSON parsers keep every token exact, so two holders can
//! never see the same token after rounding. The clock floor reaches it in
//! the year 2255; only `ATLEAST` can bring it closer.

/// The largest token this node issues, and the largest value `ATLEAST` may
/// raise the counter to: 2^53 − 1.
pub const MAX_TOKEN: i64 = (1 << 53) - 1;

/// How far `LOCK.FLOOR` may raise the counter ahead of the node's wall
/// clock: 24 hours, in microseconds. A client raising shards to a token it
/// was granted raises them by the clock difference of two nodes (and any
/// `ATLEAST` lead); without a bound, any client could spend the token space
/// (2^53 − 1 is the year 2255 on the clock floor) in one command.
pub const MAX_FLOOR_LEAD_US: i64 = 24 * 60 * 60 * 1_000_000;

/// `LOCK.FLOOR n` refused: `n` is above `max`, the node's wall clock in
/// microseconds plus [`MAX_FLOOR_LEAD_US`] (or [`MAX_TOKEN`]), and above
/// the counter. Nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FloorTooFar {
    pub max: i64,
}

impl std::fmt::Display for FloorTooFar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ERR floor is more than 24 h ahead of this node's wall clock: at most {} now (the wall clock in microseconds plus {MAX_FLOOR_LEAD_US})",
            self.max
        )
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenCounter {
    last: i64,
}

/// The counter reached [`MAX_TOKEN`]: no token greater than every earlier
/// one can be issued on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokensExhausted;

impl TokenCounter {
    pub const fn new() -> Self {
        TokenCounter { last: 0 }
    }

    /// The greatest token issued on, or raised into, this node.
    pub fn last(&self) -> i64 {
        self.last
    }

    /// A new token, greater than every earlier one and not below the clock.
    pub fn issue(&mut self, wall_us: i64) -> Result<i64, TokensExhausted> {
        let next = self
            .last
            .checked_add(1)
            .ok_or(TokensExhausted)?
            .max(wall_us);
        if next > MAX_TOKEN {
            return Err(TokensExhausted);
        }
        self.last = next;
        Ok(next)
    }

    /// Makes every later token greater than `token`.
    pub fn raise(&mut self, token: i64) {
        self.last = self.last.max(token);
    }

    /// `LOCK.FLOOR floor`: makes every later token greater than `floor`,
    /// unless that would carry the counter more than
    /// [`MAX_FLOOR_LEAD_US`] ahead of `wall_us` (then nothing changes). A
    /// floor at or below the counter is always accepted and changes nothing,
    /// however far the counter already leads the clock. `Ok(true)` when the
    /// counter rose.
    pub fn raise_floor(&mut self, floor: i64, wall_us: i64) -> Result<bool, FloorTooFar> {
        if floor <= self.last {
            return Ok(false);
        }
        let max = wall_us.saturating_add(MAX_FLOOR_LEAD_US).min(MAX_TOKEN);
        if floor > max {
            return Err(FloorTooFar { max });
        }
        self.last = floor;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_follow_the_clock_and_never_repeat() {
        let mut counter = TokenCounter::new();
        assert_eq!(counter.issue(1_000), Ok(1_000));
        // Two grants in the same microsecond, and a clock that stepped back.
        assert_eq!(counter.issue(1_000), Ok(1_001));
        assert_eq!(counter.issue(10), Ok(1_002));
        assert_eq!(counter.issue(5_000), Ok(5_000));
    }

    #[test]
    fn raise_moves_the_floor() {
        let mut counter = TokenCounter::new();
        counter.raise(9_000);
        counter.raise(3);
        assert_eq!(counter.last(), 9_000);
        assert_eq!(counter.issue(100), Ok(9_001));
    }

    #[test]
    fn a_floor_raises_within_a_day_of_the_clock() {
        let wall = 1_700_000_000_000_000;
        let mut counter = TokenCounter::new();
        assert_eq!(counter.raise_floor(wall + 60_000_000, wall), Ok(true));
        assert_eq!(counter.last(), wall + 60_000_000);
        // The same floor again, or a lower one: accepted, nothing changes.
        assert_eq!(counter.raise_floor(wall + 60_000_000, wall), Ok(false));
        assert_eq!(counter.raise_floor(0, wall), Ok(false));
        assert_eq!(counter.last(), wall + 60_000_000);
        // Exactly a day ahead is accepted; one µs more is refused and
        // changes nothing.
        let max = wall + MAX_FLOOR_LEAD_US;
        assert_eq!(counter.raise_floor(max + 1, wall), Err(FloorTooFar { max }));
        assert_eq!(counter.last(), wall + 60_000_000);
        assert_eq!(counter.raise_floor(max, wall), Ok(true));
        assert_eq!(counter.last(), max);
        // Later tokens are above the floor, whatever the clock.
        assert_eq!(counter.issue(wall), Ok(max + 1));
        // A counter already far ahead (ATLEAST) accepts a floor below it.
        let mut counter = TokenCounter::new();
        counter.raise(MAX_TOKEN - 5);
        assert_eq!(counter.raise_floor(MAX_TOKEN - 6, 0), Ok(false));
        assert_eq!(
            counter.raise_floor(MAX_TOKEN, 0),
            Err(FloorTooFar {
                max: MAX_FLOOR_LEAD_US
            })
        );
        // A clock near the cap: the bound is the cap.
        let mut counter = TokenCounter::new();
        assert_eq!(counter.raise_floor(MAX_TOKEN, i64::MAX), Ok(true));
        assert!(FloorTooFar { max: 5 }
            .to_string()
            .starts_with("ERR floor is more than 24 h ahead"));
    }

    #[test]
    fn a_crash_that_forgot_the_counter_still_issues_higher_tokens() {
        let mut before = TokenCounter::new();
        let issued: Vec<i64> = (0..1_000)
            .map(|i| before.issue(1_000_000 + i).unwrap_or(0))
            .collect();
        // The restarted node lost its counter but its clock moved on.
        let mut after = TokenCounter::new();
        let first = after.issue(1_000_000 + 2_000).unwrap_or(0);
        assert!(issued.iter().all(|&t| t < first));
    }

    #[test]
    fn exhaustion_is_an_error_not_a_wrap() {
        let mut counter = TokenCounter::new();
        counter.raise(i64::MAX);
        assert_eq!(counter.issue(0), Err(TokensExhausted));
        assert_eq!(counter.last(), i64::MAX);
    }

    #[test]
    fn no_token_above_2_pow_53_minus_1() {
        let mut counter = TokenCounter::new();
        counter.raise(MAX_TOKEN - 1);
        assert_eq!(counter.issue(0), Ok(MAX_TOKEN));
        assert_eq!(counter.issue(0), Err(TokensExhausted));
        assert_eq!(counter.last(), MAX_TOKEN);
        // A clock past the cap does not push a token over it either.
        let mut counter = TokenCounter::new();
        assert_eq!(counter.issue(MAX_TOKEN + 1), Err(TokensExhausted));
        assert_eq!(counter.last(), 0);
        // Every token is exact in a double.
        assert_eq!(MAX_TOKEN as f64 as i64, MAX_TOKEN);
        assert_ne!((MAX_TOKEN + 2) as f64 as i64, MAX_TOKEN + 2);
    }
}
