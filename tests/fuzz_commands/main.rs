//! A command fuzzer against a live server: over 100,000 pipelined calls of
//! every LOCK.* command with random arity, binary and 1 MiB strings,
//! negative, zero, overflowing and non-numeric numbers, unknown and repeated
//! options, and keys holding other types.
//!
//! The generator knows, for every call it makes on purpose, whether it is
//! valid and, if not, which defects it carries. It checks that
//! - every invalid call is answered with an error, and that error is one of
//!   the errors its defects call for (which one, when several apply, is left
//!   to the module);
//! - every valid call is answered without an error, with a reply of the
//!   command's shape;
//! - `DEBUG DIGEST` of the dataset is unchanged by a phase of invalid calls
//!   only, while a phase of mixed calls (valid ones included) changes it;
//! - the server answers PING throughout and its log has no "panicked".
//!
//! A third kind of call, pure junk (random command, random arguments), has
//! no expectation except that the server survives it.
//!
//! Environment: `REDIS_LOCK_FUZZ_SEED` picks the seed (printed on failure),
//! `REDIS_LOCK_FUZZ_CALLS` the number of calls of the main test;
//! `REDIS_LOCK_FUZZ_SERIAL=1` sends calls one at a time (slow; names a call
//! that gets no reply) and `REDIS_LOCK_FUZZ_TRACE=file` then appends each
//! call to `file` as RESP, to replay; `REDIS_LOCK_FUZZ_NO_WAIT=1` keeps valid
//! calls from waiting for a held lock.
//!
//! Files: `rng.rs`, `contract.rs` (the oracle), `generator.rs`, `runner.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub(crate) const DEFAULT_SEED: u64 = 0x5eed_f10c;
pub(crate) const MIB: usize = 1 << 20;
pub(crate) const MAX_WAIT_MS: u64 = 315_360_000_000;
pub(crate) const MAX_ATLEAST: u64 = (1 << 53) - 1;
/// Calls per pipeline round trip.
pub(crate) const BATCH: usize = 500;
/// Each place that may put a 1 MiB string in a call does it about once in
/// this many times (some places far more often, some less): a few hundred
/// such calls in a run of 100,000.
pub(crate) const HUGE_ODDS: u64 = 400;

mod contract;
mod generator;
mod rng;
mod runner;

use contract::{Command, Limits, COMMANDS};
use runner::Fuzz;

fn seed() -> u64 {
    std::env::var("REDIS_LOCK_FUZZ_SEED")
        .ok()
        .and_then(|s| {
            s.strip_prefix("0x")
                .map_or_else(|| s.parse().ok(), |h| u64::from_str_radix(h, 16).ok())
        })
        .unwrap_or(DEFAULT_SEED)
}

#[test]
fn fuzzed_commands_with_default_limits() {
    let calls: usize = std::env::var("REDIS_LOCK_FUZZ_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
        .max(1_000);
    let mut fuzz = Fuzz::start(
        seed(),
        Limits {
            max_ttl: 86_400_000,
            max_owner: 256,
            debug: true,
        },
    );
    let rounds = 10;
    let per_round = calls.div_ceil(rounds);
    fuzz.rounds(rounds, per_round / 2, per_round - per_round / 2);
    assert!(fuzz.tally.calls >= calls);
    // Every command was exercised both ways.
    for command in COMMANDS {
        let count = |outcome| {
            fuzz.tally
                .outcomes
                .get(&(command, outcome))
                .copied()
                .unwrap_or(0)
        };
        assert!(count("invalid: refused") > 0, "{}", command.name());
        if command != Command::Apply {
            assert!(count("valid: ok") > 0, "{}", command.name());
        }
    }
}

/// Other limits (the error texts name them) and LOCK.DEBUG disabled.
#[test]
fn fuzzed_commands_with_small_limits_and_no_debug() {
    let mut fuzz = Fuzz::start(
        seed() ^ 0xa5a5,
        Limits {
            max_ttl: 2_400_000,
            max_owner: 3,
            debug: false,
        },
    );
    fuzz.rounds(4, 2_500, 2_500);
    assert!(fuzz.tally.calls >= 20_000);
}
