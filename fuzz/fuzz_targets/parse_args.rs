//! Fuzzes argument parsing (`redis_lock_core::args`) against an independent
//! model of the README's command contract.
//!
//! Input: byte 0 picks the command, bytes 1-2 `lock.max-owner-bytes` (and
//! `lock.max-holders`), bytes 3-10 `lock.max-ttl`; the rest, split on NUL bytes, is the argument list
//! after the command name (so the key, owner, numbers and options are all
//! fuzzed, arity included).
//!
//! Checks, for every input:
//! - `parse_i64` agrees with Redis's integer rule (optional `-`, digits
//!   without a leading zero, no `+`, no spaces, fits in i64), and a fence's
//!   token parses exactly when it is such an integer in 0..=2^53−1;
//! - each `parse_*` accepts exactly what the model accepts, with the same
//!   values, and when it refuses, its error is one the model allows (when a
//!   call has several defects, which one is reported is the parser's choice);
//! - every error renders as a one-line `ERR …` reply.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::num::NonZeroU32;

use redis_lock_core::args::{self, ArgError, Limits, MAX_WAIT_MS};
use redis_lock_core::fence;
use redis_lock_core::token::MAX_TOKEN;
use redis_lock_core::Mode;

/// Redis's integer rule, written independently of `parse_i64`.
fn model_int(bytes: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    let canonical = text == "0"
        || (!digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !digits.starts_with('0'));
    if canonical {
        text.parse().ok()
    } else {
        None
    }
}

fn model_range(bytes: &[u8], lo: i64, hi: i64) -> Option<i64> {
    model_int(bytes).filter(|v| (lo..=hi).contains(v))
}

/// What the model expects: the parsed values, or the errors it allows.
enum Expect<T> {
    Ok(T),
    Err(Vec<ArgError>),
}

/// Collects defects; `Ok` only if there are none.
struct Defects(Vec<ArgError>);

impl Defects {
    fn new() -> Self {
        Defects(Vec::new())
    }

    fn add(&mut self, error: ArgError) {
        self.0.push(error);
    }

    fn owner(&mut self, owner: &[u8], limits: &Limits) {
        if owner.is_empty() {
            self.add(ArgError::EmptyOwner);
        } else if owner.len() > limits.max_owner_bytes {
            self.add(ArgError::OwnerTooLong {
                max: limits.max_owner_bytes,
            });
        }
    }

    /// A holder's owner (release, extend, fence): only non-empty; its
    /// length is checked against the lock, not here.
    fn holder_owner(&mut self, owner: &[u8]) {
        if owner.is_empty() {
            self.add(ArgError::EmptyOwner);
        }
    }

    fn ttl(&mut self, ttl: &[u8], limits: &Limits) -> u64 {
        let max = i64::try_from(limits.max_ttl_ms).unwrap_or(i64::MAX);
        match model_range(ttl, 1, max) {
            Some(v) => v as u64,
            None => {
                self.add(ArgError::Ttl {
                    max: limits.max_ttl_ms,
                });
                0
            }
        }
    }

    fn finish<T>(self, value: T) -> Expect<T> {
        if self.0.is_empty() {
            Expect::Ok(value)
        } else {
            Expect::Err(self.0)
        }
    }
}

fn keyword(word: &[u8], name: &str) -> bool {
    word.eq_ignore_ascii_case(name.as_bytes())
}

fn model_acquire<'a>(argv: &[&'a [u8]], limits: &Limits) -> Expect<args::AcquireArgs<'a>> {
    if argv.len() < 4 {
        return Expect::Err(vec![ArgError::WrongArity]);
    }
    let mut defects = Defects::new();
    defects.owner(argv[2], limits);
    let ttl_ms = defects.ttl(argv[3], limits);
    let (mut wait_ms, mut shared, mut limit) = (None, false, None);
    let mut i = 4;
    while i < argv.len() {
        if keyword(argv[i], "SHARED") && !shared {
            shared = true;
            i += 1;
            continue;
        }
        let option = if keyword(argv[i], "WAIT") && wait_ms.is_none() {
            "WAIT"
        } else if keyword(argv[i], "LIMIT") && limit.is_none() {
            "LIMIT"
        } else {
            // Unknown or repeated: the rest is not interpreted.
            defects.add(ArgError::Syntax);
            break;
        };
        if i + 1 == argv.len() {
            defects.add(ArgError::Syntax);
            break;
        }
        if option == "WAIT" {
            match model_range(argv[i + 1], 0, MAX_WAIT_MS as i64) {
                Some(t) => wait_ms = Some(t as u64),
                None => {
                    defects.add(ArgError::WaitTimeout);
                    wait_ms = Some(0);
                }
            }
        } else {
            match model_range(argv[i + 1], 1, i64::from(limits.max_holders)) {
                Some(n) => limit = NonZeroU32::new(n as u32),
                None => {
                    defects.add(ArgError::Limit {
                        max: limits.max_holders,
                    });
                    limit = NonZeroU32::new(1);
                }
            }
        }
        i += 2;
    }
    if limit.is_some() && !shared {
        defects.add(ArgError::LimitWithoutShared);
    }
    defects.finish(args::AcquireArgs {
        owner: argv[2],
        ttl_ms,
        mode: if shared {
            Mode::Shared
        } else {
            Mode::Exclusive
        },
        limit,
        wait_ms,
    })
}

fn model_release<'a>(argv: &[&'a [u8]]) -> Expect<args::ReleaseArgs<'a>> {
    if argv.len() < 3 {
        return Expect::Err(vec![ArgError::WrongArity]);
    }
    let mut defects = Defects::new();
    defects.holder_owner(argv[2]);
    let all = match &argv[3..] {
        [] => false,
        [word] if keyword(word, "ALL") => true,
        _ => {
            defects.add(ArgError::Syntax);
            false
        }
    };
    defects.finish(args::ReleaseArgs {
        owner: argv[2],
        all,
    })
}

fn model_extend<'a>(argv: &[&'a [u8]], limits: &Limits) -> Expect<args::ExtendArgs<'a>> {
    if argv.len() < 4 {
        return Expect::Err(vec![ArgError::WrongArity]);
    }
    let mut defects = Defects::new();
    defects.holder_owner(argv[2]);
    let ttl_ms = defects.ttl(argv[3], limits);
    if argv.len() > 4 {
        defects.add(ArgError::Syntax);
    }
    defects.finish(args::ExtendArgs {
        owner: argv[2],
        ttl_ms,
    })
}

fn model_fence<'a>(argv: &[&'a [u8]]) -> Expect<args::FenceArgs<'a>> {
    if argv.len() < 3 {
        return Expect::Err(vec![ArgError::WrongArity]);
    }
    let mut defects = Defects::new();
    defects.holder_owner(argv[2]);
    let mut at_least = None;
    match &argv[3..] {
        [] => {}
        [word, n, rest @ ..] if keyword(word, "ATLEAST") => {
            match model_range(n, 0, MAX_TOKEN) {
                Some(n) => at_least = Some(n),
                None => defects.add(ArgError::AtLeast),
            }
            if !rest.is_empty() {
                defects.add(ArgError::Syntax);
            }
        }
        _ => defects.add(ArgError::Syntax),
    }
    defects.finish(args::FenceArgs {
        owner: argv[2],
        at_least,
    })
}

fn model_info(argv: &[&[u8]]) -> Expect<()> {
    match argv.len() {
        0 | 1 => Expect::Err(vec![ArgError::WrongArity]),
        2 => Expect::Ok(()),
        _ => Expect::Err(vec![ArgError::Syntax]),
    }
}

/// LOCK.APPLY is internal: six words, or eight ending in `SHARED limit`
/// (0..=u32::MAX, 0 for none); not held to this node's limits. Its value
/// errors are `Effect(..)`, matched by kind only.
fn model_apply<'a>(argv: &[&'a [u8]]) -> Expect<args::ApplyArgs<'a>> {
    if argv.len() < 6 {
        return Expect::Err(vec![ArgError::WrongArity]);
    }
    let mut defects = Defects::new();
    let mut shared = None;
    if argv.len() == 8 && keyword(argv[6], "SHARED") {
        match model_range(argv[7], 0, i64::from(u32::MAX)) {
            Some(n) => shared = Some(NonZeroU32::new(n as u32)),
            None => defects.add(ArgError::Effect("")),
        }
    } else if argv.len() > 6 {
        defects.add(ArgError::Syntax);
    }
    if argv[2].is_empty() {
        defects.add(ArgError::EmptyOwner);
    }
    let holds = model_range(argv[3], 1, i64::from(u32::MAX));
    let token = model_int(argv[4]).filter(|t| (1..=MAX_TOKEN).contains(t));
    let wall_end_ms = model_int(argv[5]);
    if holds.is_none() || token.is_none() || wall_end_ms.is_none() {
        defects.add(ArgError::Effect(""));
    }
    defects.finish(args::ApplyArgs {
        owner: argv[2],
        holds: holds.unwrap_or(1) as u32,
        token: token.unwrap_or(1),
        wall_end_ms: wall_end_ms.unwrap_or(0),
        shared,
    })
}

/// LOCK.HOLDERS key [COUNT n]: n a positive integer; all without COUNT.
fn model_holders(argv: &[&[u8]]) -> Expect<usize> {
    match argv.len() {
        0 | 1 => Expect::Err(vec![ArgError::WrongArity]),
        2 => Expect::Ok(usize::MAX),
        4 if keyword(argv[2], "COUNT") => match model_int(argv[3]).filter(|n| *n >= 1) {
            Some(n) => Expect::Ok(n as usize),
            None => Expect::Err(vec![ArgError::Count]),
        },
        _ => Expect::Err(vec![ArgError::Syntax]),
    }
}

/// LOCK.DROP key owner: internal, exactly one non-empty owner.
fn model_drop<'a>(argv: &[&'a [u8]]) -> Expect<&'a [u8]> {
    match argv.len() {
        0..=2 => Expect::Err(vec![ArgError::WrongArity]),
        3 if argv[2].is_empty() => Expect::Err(vec![ArgError::EmptyOwner]),
        3 => Expect::Ok(argv[2]),
        _ => Expect::Err(vec![ArgError::Syntax]),
    }
}

/// LOCK.COUNTER is internal: exactly one number, a token in 1..=MAX_TOKEN.
fn model_counter(argv: &[&[u8]]) -> Expect<i64> {
    if argv.len() != 2 {
        return Expect::Err(vec![ArgError::WrongArity]);
    }
    match model_int(argv[1]).filter(|t| (1..=MAX_TOKEN).contains(t)) {
        Some(n) => Expect::Ok(n),
        None => Expect::Err(vec![ArgError::Effect("")]),
    }
}

/// LOCK.FLOOR: exactly one number, in 0..=MAX_TOKEN.
fn model_floor(argv: &[&[u8]]) -> Expect<i64> {
    if argv.len() != 2 {
        return Expect::Err(vec![ArgError::WrongArity]);
    }
    match model_int(argv[1]).filter(|t| (0..=MAX_TOKEN).contains(t)) {
        Some(n) => Expect::Ok(n),
        None => Expect::Err(vec![ArgError::Floor]),
    }
}

fn allowed(error: &ArgError, allowed: &[ArgError]) -> bool {
    allowed.iter().any(|a| match (a, error) {
        (ArgError::Effect(_), ArgError::Effect(_)) => true,
        _ => a == error,
    })
}

fn compare<T: PartialEq + std::fmt::Debug>(
    what: &str,
    argv: &[&[u8]],
    got: Result<T, ArgError>,
    expect: Expect<T>,
) {
    match (got, expect) {
        (Ok(got), Expect::Ok(want)) => {
            assert_eq!(got, want, "{what} {argv:?}: parsed differently")
        }
        (Err(error), Expect::Err(allowed_errors)) => {
            assert!(
                allowed(&error, &allowed_errors),
                "{what} {argv:?}: error {error:?}, the model allows {allowed_errors:?}"
            );
            let line = error.to_string();
            assert!(
                line.starts_with("ERR ") && !line.contains(['\r', '\n']),
                "{line:?}"
            );
        }
        (Ok(got), Expect::Err(allowed_errors)) => {
            panic!(
                "{what} {argv:?}: accepted as {got:?}, the model refuses with {allowed_errors:?}"
            )
        }
        (Err(error), Expect::Ok(want)) => {
            panic!("{what} {argv:?}: refused with {error:?}, the model accepts {want:?}")
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 11 {
        return;
    }
    let (head, rest) = data.split_at(11);
    let limits = Limits {
        max_owner_bytes: 1 + usize::from(u16::from_le_bytes([head[1], head[2]])) % 1024,
        max_holders: 1 + u32::from(u16::from_le_bytes([head[2], head[1]])) % 200,
        max_ttl_ms: {
            // Half the time a small limit, so that its edges are easy to hit.
            let raw = u64::from_le_bytes(head[3..11].try_into().unwrap_or_default());
            if raw & 1 == 0 {
                1 + (raw >> 1) % 1_000
            } else {
                1 + (raw >> 1) % MAX_WAIT_MS
            }
        },
    };
    let mut argv: Vec<&[u8]> = vec![b"LOCK.X"];
    if !rest.is_empty() {
        argv.extend(rest.split(|b| *b == 0));
    }

    for arg in &argv {
        assert_eq!(args::parse_i64(arg), model_int(arg), "parse_i64({arg:?})");
        // A fence's token (LOCK.FENCED, LOCK.FENCECHECK): 0..=2^53-1.
        assert_eq!(
            fence::parse_token(arg).ok(),
            model_range(arg, 0, MAX_TOKEN),
            "fence::parse_token({arg:?})"
        );
    }
    match head[0] % 10 {
        0 => compare(
            "acquire",
            &argv,
            args::parse_acquire(&argv, &limits),
            model_acquire(&argv, &limits),
        ),
        1 => compare(
            "release",
            &argv,
            args::parse_release(&argv),
            model_release(&argv),
        ),
        2 => compare(
            "extend",
            &argv,
            args::parse_extend(&argv, &limits),
            model_extend(&argv, &limits),
        ),
        3 => compare(
            "fence",
            &argv,
            args::parse_fence(&argv),
            model_fence(&argv),
        ),
        4 => compare("info", &argv, args::parse_info(&argv), model_info(&argv)),
        5 => compare("apply", &argv, args::parse_apply(&argv), model_apply(&argv)),
        6 => compare(
            "holders",
            &argv,
            args::parse_holders(&argv),
            model_holders(&argv),
        ),
        7 => compare("drop", &argv, args::parse_drop(&argv), model_drop(&argv)),
        8 => compare("floor", &argv, args::parse_floor(&argv), model_floor(&argv)),
        _ => compare(
            "counter",
            &argv,
            args::parse_counter(&argv),
            model_counter(&argv),
        ),
    }
});
