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
//! calls from waiting for a held lock (see the last test of this file).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use redis::{Connection, Value};
use testkit::{wait_until, RedisServer, ServerOptions};

const DEFAULT_SEED: u64 = 0x5eed_f10c;
const MIB: usize = 1 << 20;
const MAX_WAIT_MS: u64 = 315_360_000_000;
const MAX_ATLEAST: u64 = (1 << 53) - 1;
/// Calls per pipeline round trip.
const BATCH: usize = 500;
/// Each place that may put a 1 MiB string in a call does it about once in
/// this many times (some places far more often, some less): a few hundred
/// such calls in a run of 100,000.
const HUGE_ODDS: u64 = 400;

// ---------------------------------------------------------------- PRNG

/// xorshift64*: small, fast, and the same sequence for the same seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A value in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True with probability `num/den`.
    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next() % den < num
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }

    /// Random bytes, `lo..=hi` of them.
    fn some_bytes(&mut self, lo: usize, hi: usize) -> Vec<u8> {
        let len = self.range(lo as u64, hi as u64) as usize;
        self.bytes(len)
    }

    /// `word` with each letter in a random case.
    fn casing(&mut self, word: &str) -> Vec<u8> {
        word.bytes()
            .map(|b| {
                if self.chance(1, 2) {
                    b.to_ascii_lowercase()
                } else {
                    b
                }
            })
            .collect()
    }
}

// ---------------------------------------------------------------- expectations

/// A reason a call must be refused, with the error it calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Defect {
    Arity,
    Syntax,
    Ttl,
    WaitTimeout,
    AtLeast,
    EmptyOwner,
    OwnerTooLong,
    WrongType,
    /// LOCK.APPLY from an ordinary client.
    Internal,
    /// LOCK.DEBUG without `debug yes`.
    DebugDisabled,
    DebugOffset,
    DebugUnknown,
}

#[derive(Clone, Copy, Debug)]
struct Limits {
    max_ttl: u64,
    max_owner: usize,
    debug: bool,
}

impl Defect {
    fn accepts(self, line: &str, limits: &Limits) -> bool {
        let exact = |text: String| line == text;
        match self {
            Defect::Arity => line.starts_with("ERR wrong number of arguments for 'lock."),
            Defect::Syntax => line == "ERR syntax error",
            Defect::Ttl => exact(format!(
                "ERR ttl-ms must be an integer between 1 and {} (lock.max-ttl)",
                limits.max_ttl
            )),
            Defect::WaitTimeout => exact(format!(
                "ERR WAIT timeout-ms must be an integer between 0 and {MAX_WAIT_MS}"
            )),
            Defect::AtLeast => exact(format!(
                "ERR ATLEAST must be an integer between 0 and {MAX_ATLEAST} (2^53-1, so that every token is exact in JavaScript, Lua and JSON)"
            )),
            Defect::EmptyOwner => line == "ERR owner must not be empty",
            Defect::OwnerTooLong => exact(format!(
                "ERR owner must be at most {} bytes (lock.max-owner-bytes)",
                limits.max_owner
            )),
            Defect::WrongType => {
                line == "WRONGTYPE Operation against a key holding the wrong kind of value"
            }
            Defect::Internal => line.starts_with("ERR LOCK.APPLY is internal"),
            Defect::DebugDisabled => line.starts_with("ERR LOCK.DEBUG is disabled"),
            Defect::DebugOffset => line == "ERR the offset must be an integer (milliseconds)",
            Defect::DebugUnknown => line.starts_with("ERR unknown LOCK.DEBUG subcommand"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Command {
    Acquire,
    Release,
    Extend,
    Fence,
    Info,
    Apply,
    Debug,
}

const COMMANDS: [Command; 7] = [
    Command::Acquire,
    Command::Release,
    Command::Extend,
    Command::Fence,
    Command::Info,
    Command::Apply,
    Command::Debug,
];

impl Command {
    fn name(self) -> &'static str {
        match self {
            Command::Acquire => "LOCK.ACQUIRE",
            Command::Release => "LOCK.RELEASE",
            Command::Extend => "LOCK.EXTEND",
            Command::Fence => "LOCK.FENCE",
            Command::Info => "LOCK.INFO",
            Command::Apply => "LOCK.APPLY",
            Command::Debug => "LOCK.DEBUG",
        }
    }
}

#[derive(Clone, Debug)]
enum Expect {
    /// Must succeed with a reply of the command's shape.
    Valid,
    /// Must fail with an error one of these defects calls for.
    Invalid(Vec<Defect>),
    /// Junk: anything but a dead server.
    Unknown,
}

struct Call {
    command: Command,
    /// The command name (random case) and its arguments.
    args: Vec<Vec<u8>>,
    expect: Expect,
}

/// One argument and the defect it carries, if any.
type Arg = (Vec<u8>, Option<Defect>);

fn ok(bytes: impl Into<Vec<u8>>) -> Arg {
    (bytes.into(), None)
}

fn bad(bytes: impl Into<Vec<u8>>, defect: Defect) -> Arg {
    (bytes.into(), Some(defect))
}

/// Whether Redis would read `bytes` as an integer (the README's rule: an
/// optional `-`, digits without a leading zero, no `+`, no spaces, in i64).
fn redis_int(bytes: &[u8]) -> Option<i64> {
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

// ---------------------------------------------------------------- generator

/// What calls a phase makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Only calls that must be refused.
    Invalid,
    /// Valid, invalid and junk calls.
    Mixed,
}

struct Gen {
    rng: Rng,
    limits: Limits,
    /// Whether valid calls may wait (1-2 ms) for a lock held by another
    /// owner. `REDIS_LOCK_FUZZ_NO_WAIT` turns it off, to fuzz around the
    /// lost-reply race of a WAIT granted as it times out.
    valid_waits: bool,
    /// Keys that hold (or may come to hold) locks.
    lock_keys: Vec<Vec<u8>>,
    /// Keys that hold other types.
    wrong_keys: Vec<Vec<u8>>,
    /// Owners valid calls use: few, so that they contend and re-enter.
    owners: Vec<Vec<u8>>,
    huge: Vec<u8>,
    huge_digits: Vec<u8>,
}

const NON_NUMBERS: [&[u8]; 24] = [
    b"",
    b"-",
    b"+1",
    b"01",
    b"-0",
    b"00",
    b" 1",
    b"1 ",
    b"1.5",
    b"1e3",
    b"0x10",
    b"abc",
    b"NaN",
    b"inf",
    b"1_000",
    b"\x001",
    b"1\x00",
    b"\xd9\xa3",
    b"\xef\xbc\x91",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551616",
    b"99999999999999999999999999999",
    b"--1",
];

impl Gen {
    fn new(seed: u64, limits: Limits) -> Gen {
        let mut rng = Rng::new(seed);
        let mut huge = rng.bytes(MIB);
        huge[0] = b'x'; // never an integer, never a keyword
                        // Valid owners, cut to the limit: at most max-owner-bytes, the last
                        // exactly that long.
        let mut owners: Vec<Vec<u8>> = [&b"alice"[..], b"bob", b"\x00\xff\r\n owner"]
            .iter()
            .map(|o| o[..o.len().min(limits.max_owner)].to_vec())
            .collect();
        owners.push(vec![b'o'; limits.max_owner]);
        Gen {
            lock_keys: vec![
                b"lk:0".to_vec(),
                b"lk:1".to_vec(),
                b"lk:2".to_vec(),
                b"lk:3".to_vec(),
                b"lk:\x00bin\xff\r\n".to_vec(),
                b"{tag}lk".to_vec(),
                Vec::new(),
            ],
            wrong_keys: [
                "t:string", "t:list", "t:hash", "t:set", "t:zset", "t:stream",
            ]
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect(),
            owners,
            huge,
            huge_digits: vec![b'9'; MIB],
            rng,
            limits,
            valid_waits: std::env::var_os("REDIS_LOCK_FUZZ_NO_WAIT").is_none(),
        }
    }

    fn huge_key(&self) -> Vec<u8> {
        let mut key = b"lk:huge:".to_vec();
        key.extend_from_slice(&vec![b'K'; MIB]);
        key
    }

    // ---- pieces

    /// A key: a lock key, a missing one, a 1 MiB one, or (bad) another type.
    fn key(&mut self, make_bad: bool) -> Arg {
        if make_bad {
            return bad(self.rng.pick(&self.wrong_keys).clone(), Defect::WrongType);
        }
        if self.rng.chance(1, HUGE_ODDS * 4) {
            return ok(self.huge_key());
        }
        match self.rng.below(40) {
            0..=8 => ok(format!("nx:{}", self.rng.below(32))),
            _ => ok(self.rng.pick(&self.lock_keys).clone()),
        }
    }

    fn owner(&mut self, make_bad: bool) -> Arg {
        if make_bad {
            if self.rng.chance(1, HUGE_ODDS / 4) {
                return bad(self.huge.clone(), Defect::OwnerTooLong);
            }
            return match self.rng.below(5) {
                0 | 1 => bad(Vec::new(), Defect::EmptyOwner),
                2 => bad(vec![b'o'; self.limits.max_owner + 1], Defect::OwnerTooLong),
                _ => {
                    let len = self.rng.range(self.limits.max_owner as u64 + 1, 4096) as usize;
                    bad(self.rng.bytes(len), Defect::OwnerTooLong)
                }
            };
        }
        if self.rng.chance(1, 30) {
            let len = self.rng.range(1, self.limits.max_owner as u64) as usize;
            return ok(self.rng.bytes(len));
        }
        let owner = self.rng.pick(&self.owners).clone();
        ok(owner)
    }

    /// Something that is not a Redis integer at all.
    fn non_number(&mut self) -> Vec<u8> {
        if self.rng.chance(1, HUGE_ODDS / 4) {
            return if self.rng.chance(1, 2) {
                self.huge_digits.clone()
            } else {
                self.huge.clone()
            };
        }
        match self.rng.below(30) {
            0..=5 => {
                let mut junk = self.rng.some_bytes(1, 12);
                junk[0] = b'#';
                junk
            }
            _ => self.rng.pick(&NON_NUMBERS).to_vec(),
        }
    }

    /// An integer outside `lo..=hi` (which must leave room on some side), or
    /// not an integer at all.
    fn bad_number(&mut self, lo: i64, hi: i64) -> Vec<u8> {
        let value = match self.rng.below(8) {
            0 | 1 => return self.non_number(),
            2 if lo > i64::MIN => lo - 1,
            3 if lo > i64::MIN => i64::MIN,
            4 if lo > i64::MIN => lo - 1 - (self.rng.next() >> 2) as i64,
            5 if hi < i64::MAX => hi + 1,
            6 if hi < i64::MAX => i64::MAX,
            7 if hi < i64::MAX => hi.saturating_add(1 + (self.rng.next() >> 2) as i64),
            _ => return self.non_number(),
        };
        let text = value.to_string().into_bytes();
        assert!(
            redis_int(&text).is_some_and(|v| v < lo || v > hi),
            "{text:?}"
        );
        text
    }

    fn ttl(&mut self, make_bad: bool, phase: Phase) -> Arg {
        let max = self.limits.max_ttl;
        if make_bad {
            return bad(self.bad_number(1, max as i64), Defect::Ttl);
        }
        let ttl = match phase {
            // Nothing happens: any valid value.
            Phase::Invalid => self.rng.range(1, max),
            // Short leases end during the phase; long ones outlive the test.
            Phase::Mixed if self.rng.chance(1, 3) => self.rng.range(1, 30),
            Phase::Mixed => self.rng.range(max / 2, max),
        };
        ok(ttl.to_string())
    }

    /// An option word that is none of `keywords` (in any case).
    fn unknown_option(&mut self, keywords: &[&str]) -> Vec<u8> {
        loop {
            if self.rng.chance(1, HUGE_ODDS / 4) {
                return self.huge.clone();
            }
            let word = match self.rng.below(14) {
                0 => b"NOWAIT ".to_vec(),
                1 => self.rng.some_bytes(1, 8),
                2 => b"NOWAIT".to_vec(),
                3 => b"WAITS".to_vec(),
                4 => b"ALL".to_vec(),
                5 => b"ATLEAST".to_vec(),
                6 => b"PX".to_vec(),
                7 => Vec::new(),
                8 => b"WAIT\x00".to_vec(),
                9 => "ＷＡＩＴ".as_bytes().to_vec(),
                10 => b"ALLL".to_vec(),
                11 => b"ATLEAST ".to_vec(),
                12 => b"WAIT".to_vec(),
                _ => self.rng.pick(&NON_NUMBERS).to_vec(),
            };
            if !keywords
                .iter()
                .any(|k| word.eq_ignore_ascii_case(k.as_bytes()))
            {
                return word;
            }
        }
    }

    /// Any argument at all (for extra arguments and junk).
    fn anything(&mut self) -> Vec<u8> {
        match self.rng.below(12) {
            0 => self.rng.pick(&self.lock_keys).clone(),
            1 => self.rng.pick(&self.wrong_keys).clone(),
            2 => self.rng.pick(&self.owners).clone(),
            // Small numbers only: a junk lease must end soon or outlive the test.
            3 => self.rng.range(0, 30).to_string().into_bytes(),
            4 => self.non_number(),
            5 => self.bad_number(0, 0),
            6 => self.rng.casing("ALL"),
            7 => self.rng.casing("ATLEAST"),
            8 => self.rng.casing("WALLCLOCK-OFFSET"),
            9 if self.rng.chance(1, HUGE_ODDS / 4) => self.huge.clone(),
            _ => self.rng.some_bytes(0, 15),
        }
    }

    // ---- calls

    /// Builds a call from its arguments. An invalid call may also lose its
    /// tail (too few arguments), which drops the defects of what it lost.
    fn finish(
        &mut self,
        command: Command,
        mut args: Vec<Arg>,
        min_arity: usize,
        truncate: bool,
    ) -> Call {
        if truncate {
            args.truncate(self.rng.below(min_arity - 1));
        }
        let mut defects: Vec<Defect> = args.iter().filter_map(|(_, d)| *d).collect();
        if args.len() + 1 < min_arity {
            defects.push(Defect::Arity);
        }
        let mut words = vec![self.rng.casing(command.name())];
        words.extend(args.into_iter().map(|(bytes, _)| bytes));
        defects.sort();
        defects.dedup();
        let expect = if defects.is_empty() {
            Expect::Valid
        } else {
            Expect::Invalid(defects)
        };
        Call {
            command,
            args: words,
            expect,
        }
    }

    /// Which parts of a call to spoil: at least one when `invalid`, each of
    /// `parts` with some chance; the last part stands for "too few args".
    fn spoil(&mut self, invalid: bool, parts: usize) -> Vec<bool> {
        let mut spoiled = vec![false; parts];
        if invalid {
            spoiled[self.rng.below(parts)] = true;
            for part in spoiled.iter_mut() {
                *part |= self.rng.chance(1, 6);
            }
            // Too few arguments hides every other defect: keep it rarer.
            spoiled[parts - 1] &= self.rng.chance(1, 2);
            if !spoiled.contains(&true) {
                spoiled[self.rng.below(parts - 1)] = true;
            }
        }
        spoiled
    }

    fn acquire(&mut self, invalid: bool, phase: Phase) -> Call {
        let [key, owner, ttl, options, arity] = self.spoil(invalid, 5)[..] else {
            unreachable!()
        };
        let mut args = vec![self.key(key), self.owner(owner), self.ttl(ttl, phase)];
        let wait = |g: &mut Gen| ok(g.rng.casing("WAIT"));
        let good_timeout = |g: &mut Gen| {
            // A valid wait only where it cannot hold up the pipeline for
            // long: a refused call never blocks, a valid one waits 1-2 ms.
            let t = if invalid || options || key || owner || ttl {
                g.rng.range(0, MAX_WAIT_MS)
            } else {
                g.rng.range(1, 2)
            };
            ok(t.to_string())
        };
        if options {
            match self.rng.below(6) {
                0 => {
                    args.push(wait(self));
                    args.push(bad(
                        self.bad_number(0, MAX_WAIT_MS as i64),
                        Defect::WaitTimeout,
                    ));
                }
                1 => args.push(bad(self.rng.casing("WAIT"), Defect::Syntax)),
                2 => {
                    args.push(wait(self));
                    args.push(good_timeout(self));
                    args.push(bad(self.rng.casing("WAIT"), Defect::Syntax));
                    args.push(good_timeout(self));
                }
                3 => {
                    args.push(bad(self.unknown_option(&["WAIT"]), Defect::Syntax));
                    if self.rng.chance(1, 2) {
                        args.push(ok(self.anything()));
                    }
                }
                4 => {
                    args.push(wait(self));
                    args.push(good_timeout(self));
                    args.push(bad(self.anything(), Defect::Syntax));
                }
                _ => {
                    args.push(wait(self));
                    args.push(bad(
                        self.bad_number(0, MAX_WAIT_MS as i64),
                        Defect::WaitTimeout,
                    ));
                    args.push(bad(self.unknown_option(&["WAIT"]), Defect::Syntax));
                }
            }
        } else if self.rng.chance(1, 12) && (invalid || self.valid_waits) {
            args.push(wait(self));
            args.push(good_timeout(self));
        }
        self.finish(Command::Acquire, args, 4, arity)
    }

    fn release(&mut self, invalid: bool) -> Call {
        let [key, owner, options, arity] = self.spoil(invalid, 4)[..] else {
            unreachable!()
        };
        let mut args = vec![self.key(key), self.owner(owner)];
        if options {
            match self.rng.below(4) {
                0 => {
                    args.push(ok(self.rng.casing("ALL")));
                    args.push(bad(self.rng.casing("ALL"), Defect::Syntax));
                }
                1 => {
                    args.push(ok(self.rng.casing("ALL")));
                    args.push(bad(self.anything(), Defect::Syntax));
                }
                2 => args.push(bad(self.unknown_option(&["ALL"]), Defect::Syntax)),
                _ => {
                    args.push(bad(self.unknown_option(&["ALL"]), Defect::Syntax));
                    args.push(ok(self.anything()));
                }
            }
        } else if self.rng.chance(1, 3) {
            args.push(ok(self.rng.casing("ALL")));
        }
        self.finish(Command::Release, args, 3, arity)
    }

    fn extend(&mut self, invalid: bool, phase: Phase) -> Call {
        let [key, owner, ttl, options, arity] = self.spoil(invalid, 5)[..] else {
            unreachable!()
        };
        let mut args = vec![self.key(key), self.owner(owner), self.ttl(ttl, phase)];
        if options {
            args.push(bad(self.anything(), Defect::Syntax));
            for _ in 0..self.rng.below(3) {
                args.push(ok(self.anything()));
            }
        }
        self.finish(Command::Extend, args, 4, arity)
    }

    fn fence(&mut self, invalid: bool) -> Call {
        let [key, owner, options, arity] = self.spoil(invalid, 4)[..] else {
            unreachable!()
        };
        let mut args = vec![self.key(key), self.owner(owner)];
        let atleast = |g: &mut Gen| ok(g.rng.casing("ATLEAST"));
        let good_floor = |g: &mut Gen| {
            let n = match g.rng.below(10) {
                // Near the top, with room for every later grant of the run
                // (a raise to the top itself uses the node's tokens up; the
                // boundary has its own test in commands.rs).
                0 => MAX_ATLEAST - 1_000_000_000,
                1 => 0,
                _ => g.rng.range(1, 2_000_000_000_000_000),
            };
            ok(n.to_string())
        };
        if options {
            match self.rng.below(5) {
                0 => {
                    args.push(atleast(self));
                    args.push(bad(self.bad_number(0, MAX_ATLEAST as i64), Defect::AtLeast));
                }
                1 => args.push(bad(self.rng.casing("ATLEAST"), Defect::Syntax)),
                2 => {
                    args.push(atleast(self));
                    args.push(good_floor(self));
                    args.push(bad(self.anything(), Defect::Syntax));
                }
                3 => {
                    args.push(bad(self.unknown_option(&["ATLEAST"]), Defect::Syntax));
                    args.push(good_floor(self));
                }
                _ => args.push(bad(self.unknown_option(&["ATLEAST"]), Defect::Syntax)),
            }
        } else if self.rng.chance(1, 4) {
            args.push(atleast(self));
            args.push(good_floor(self));
        }
        self.finish(Command::Fence, args, 3, arity)
    }

    fn info(&mut self, invalid: bool) -> Call {
        let [key, options, arity] = self.spoil(invalid, 3)[..] else {
            unreachable!()
        };
        let mut args = vec![self.key(key)];
        if options {
            args.push(bad(self.anything(), Defect::Syntax));
            for _ in 0..self.rng.below(3) {
                args.push(ok(self.anything()));
            }
        }
        self.finish(Command::Info, args, 2, arity)
    }

    /// LOCK.APPLY is never accepted from a client, however plausible.
    fn apply(&mut self) -> Call {
        let mut args: Vec<Arg> = vec![ok(self.rng.pick(&self.lock_keys).clone())];
        args.push(ok(self.rng.pick(&self.owners).clone()));
        args.push(ok(self.rng.range(1, 5).to_string()));
        args.push(ok(self.rng.range(1, i64::MAX as u64).to_string()));
        args.push(ok((1_700_000_000_000 + self.rng.below(1 << 40)).to_string()));
        if self.rng.chance(1, 4) {
            let at = self.rng.below(args.len());
            args[at].0 = self.anything();
        }
        let len = self.rng.below(8);
        args.resize_with(len, || ok(self.anything()));
        let mut call = self.finish(Command::Apply, args, 6, false);
        let mut defects = match call.expect {
            Expect::Invalid(d) => d,
            _ => Vec::new(),
        };
        defects.push(Defect::Internal);
        call.expect = Expect::Invalid(defects);
        call
    }

    fn debug(&mut self, invalid: bool) -> Call {
        let sub = |g: &mut Gen| g.rng.casing("WALLCLOCK-OFFSET");
        let (args, defect): (Vec<Vec<u8>>, Option<Defect>) = if !invalid {
            if self.rng.chance(1, 3) {
                (vec![sub(self)], None)
            } else {
                // Small offsets only: a huge one would exhaust the tokens.
                let offset = self.rng.range(0, 172_800_000) as i64 - 86_400_000;
                (vec![sub(self), offset.to_string().into_bytes()], None)
            }
        } else {
            match self.rng.below(6) {
                0 => (Vec::new(), Some(Defect::Arity)),
                1 | 2 => {
                    let offset = self.non_number();
                    (vec![sub(self), offset], Some(Defect::DebugOffset))
                }
                3 => {
                    let extra = self.anything();
                    (
                        vec![sub(self), b"0".to_vec(), extra],
                        Some(Defect::DebugUnknown),
                    )
                }
                _ => {
                    let mut args = vec![self.unknown_option(&["WALLCLOCK-OFFSET"])];
                    for _ in 0..self.rng.below(3) {
                        args.push(self.anything());
                    }
                    (args, Some(Defect::DebugUnknown))
                }
            }
        };
        let mut words = vec![self.rng.casing(Command::Debug.name())];
        words.extend(args);
        let expect = if !self.limits.debug {
            // Disabled: every call is refused (the arity check may come first).
            let mut defects = vec![Defect::DebugDisabled];
            defects.extend(defect.filter(|d| *d == Defect::Arity));
            Expect::Invalid(defects)
        } else {
            match defect {
                None => Expect::Valid,
                Some(d) => Expect::Invalid(vec![d]),
            }
        };
        Call {
            command: Command::Debug,
            args: words,
            expect,
        }
    }

    /// A random command with random arguments and no expectation. Kept from
    /// blocking for long (a WAIT value becomes 1 ms) and from moving the
    /// wall clock (no LOCK.DEBUG: a huge offset would exhaust the tokens).
    fn junk(&mut self) -> Call {
        let command = *self.rng.pick(&COMMANDS[..6]);
        let mut args = vec![self.rng.casing(command.name())];
        for _ in 0..self.rng.below(9) {
            args.push(self.anything());
        }
        if command == Command::Acquire {
            for i in 1..args.len().saturating_sub(1) {
                if args[i].eq_ignore_ascii_case(b"WAIT") {
                    if self.valid_waits {
                        args[i + 1] = b"1".to_vec();
                    } else {
                        args[i] = b"NOWAIT".to_vec();
                    }
                }
            }
        }
        Call {
            command,
            args,
            expect: Expect::Unknown,
        }
    }

    fn call(&mut self, phase: Phase) -> Call {
        if phase == Phase::Mixed && self.rng.chance(1, 8) {
            return self.junk();
        }
        let invalid = phase == Phase::Invalid || self.rng.chance(2, 5);
        match self.rng.below(20) {
            0..=5 => self.acquire(invalid, phase),
            6..=8 => self.release(invalid),
            9..=11 => self.extend(invalid, phase),
            12..=14 => self.fence(invalid),
            15..=16 => self.info(invalid),
            17 => self.apply(),
            _ => self.debug(invalid),
        }
    }
}

// ---------------------------------------------------------------- checking

#[derive(Default)]
struct Tally {
    calls: usize,
    /// Calls with a 1 MiB argument.
    huge_calls: usize,
    /// (command, outcome) -> count
    outcomes: BTreeMap<(Command, &'static str), usize>,
    errors: BTreeMap<String, usize>,
}

impl Tally {
    fn summary(&self) -> String {
        let mut out = format!(
            "{} calls, {} of them with a 1 MiB argument\n",
            self.calls, self.huge_calls
        );
        for ((command, outcome), n) in &self.outcomes {
            let _ = writeln!(out, "  {:<13} {outcome:<22} {n}", command.name());
        }
        out
    }
}

fn show(args: &[Vec<u8>]) -> String {
    args.iter()
        .map(|a| {
            if a.len() > 40 {
                format!(
                    "<{} bytes {:?}…>",
                    a.len(),
                    String::from_utf8_lossy(&a[..20])
                )
            } else {
                format!("{:?}", String::from_utf8_lossy(a))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a successful reply has the shape its command promises.
fn well_formed(command: Command, reply: &Value) -> bool {
    match (command, reply) {
        (Command::Acquire, Value::Int(token)) => *token > 0,
        (Command::Acquire | Command::Release | Command::Fence | Command::Info, Value::Nil) => true,
        (Command::Release, Value::Int(left)) => *left >= 0,
        (Command::Extend, Value::Int(n)) => *n == 0 || *n == 1,
        (Command::Fence, Value::Int(token)) => *token > 0,
        (Command::Info, Value::Array(fields)) => fields.len() == 10,
        (Command::Debug, Value::Okay | Value::Int(_)) => true,
        _ => false,
    }
}

struct Fuzz {
    server: RedisServer,
    conn: Connection,
    gen: Gen,
    seed: u64,
    tally: Tally,
}

impl Fuzz {
    fn start(seed: u64, limits: Limits) -> Fuzz {
        let mut module_args = vec![
            "max-ttl".to_string(),
            limits.max_ttl.to_string(),
            "max-owner-bytes".to_string(),
            limits.max_owner.to_string(),
        ];
        if limits.debug {
            module_args.extend(["debug".to_string(), "yes".to_string()]);
        }
        // hz 500: a valid 1 ms WAIT that must time out does so within ~2 ms.
        let options = ServerOptions {
            module_args,
            ..ServerOptions::default()
        }
        .args(["--hz", "500"]);
        let server = RedisServer::start_with(options);
        let mut conn = server.conn();
        // Every reply comes within milliseconds; a missing one fails fast.
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        for (command, args) in [
            ("SET", vec!["t:string", "v"]),
            ("RPUSH", vec!["t:list", "a", "b"]),
            ("HSET", vec!["t:hash", "f", "v"]),
            ("SADD", vec!["t:set", "m"]),
            ("ZADD", vec!["t:zset", "1", "m"]),
            ("XADD", vec!["t:stream", "*", "f", "v"]),
            // The control lock: each mixed phase re-enters it.
            (
                "LOCK.ACQUIRE",
                vec!["ctl", "ctl", &limits.max_ttl.to_string()],
            ),
        ] {
            let mut cmd = redis::cmd(command);
            cmd.arg(args);
            let _: Value = cmd.query(&mut conn).unwrap();
        }
        Fuzz {
            server,
            conn,
            gen: Gen::new(seed, limits),
            seed,
            tally: Tally::default(),
        }
    }

    fn context(&self) -> String {
        format!(
            "seed {:#x} (REDIS_LOCK_FUZZ_SEED), after {} calls",
            self.seed, self.tally.calls
        )
    }

    fn digest(&mut self) -> String {
        redis::cmd("DEBUG")
            .arg("DIGEST")
            .query(&mut self.conn)
            .unwrap()
    }

    fn ping(&mut self) {
        let pong: String = redis::cmd("PING")
            .query(&mut self.conn)
            .unwrap_or_else(|e| panic!("server did not answer PING ({e}); {}", self.context()));
        assert_eq!(pong, "PONG");
        assert!(self.server.is_running(), "server died; {}", self.context());
    }

    /// Sends `calls` pipelined and checks every reply.
    fn run(&mut self, calls: &[Call]) {
        if std::env::var_os("REDIS_LOCK_FUZZ_SERIAL").is_some() {
            return self.run_serially(calls);
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for call in calls {
            let mut cmd = redis::cmd(std::str::from_utf8(&call.args[0]).unwrap());
            for arg in &call.args[1..] {
                cmd.arg(arg.as_slice());
            }
            pipe.add_command(cmd);
        }
        let replies: Value = pipe.query(&mut self.conn).unwrap_or_else(|e| {
            let mut other = self.server.conn();
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query(&mut other)
                .unwrap_or_default();
            let waits: Vec<String> = calls
                .iter()
                .filter(|c| c.args.iter().any(|a| a.eq_ignore_ascii_case(b"WAIT")))
                .map(|c| format!("{} {:?}", show(&c.args), c.expect))
                .collect();
            panic!(
                "pipeline failed ({e}): a call got no reply or the server died; {}\nclients:\n{clients}\ncalls with WAIT:\n{}\n{}",
                self.context(),
                waits.join("\n"),
                self.server.log()
            )
        });
        let Value::Array(replies) = replies else {
            panic!("pipeline reply {replies:?}");
        };
        assert_eq!(replies.len(), calls.len());
        for (call, reply) in calls.iter().zip(replies) {
            self.check(call, &reply);
            self.tally.calls += 1;
            if call.args.iter().any(|a| a.len() >= MIB) {
                self.tally.huge_calls += 1;
            }
        }
    }

    /// One call at a time, each with a short read timeout: slow, but names
    /// the call that gets no reply.
    fn run_serially(&mut self, calls: &[Call]) {
        self.conn
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut trace = std::env::var_os("REDIS_LOCK_FUZZ_TRACE").map(|path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap()
        });
        for call in calls {
            let mut cmd = redis::cmd(std::str::from_utf8(&call.args[0]).unwrap());
            for arg in &call.args[1..] {
                cmd.arg(arg.as_slice());
            }
            if let Some(file) = trace.as_mut() {
                use std::io::Write as _;
                file.write_all(&cmd.get_packed_command()).unwrap();
            }
            let reply = match cmd.query::<Value>(&mut self.conn) {
                Ok(value) => value,
                Err(e) => match e.code() {
                    Some(_) => Value::ServerError(e.try_into().unwrap()),
                    None => panic!(
                        "no reply to `{}` ({e}); {}",
                        show(&call.args),
                        self.context()
                    ),
                },
            };
            self.check(call, &reply);
            self.tally.calls += 1;
        }
    }

    fn check(&mut self, call: &Call, reply: &Value) {
        let limits = self.gen.limits;
        let error = match reply {
            Value::ServerError(e) => Some(format!("{} {}", e.code(), e.details().unwrap_or(""))),
            _ => None,
        };
        let outcome = match (&call.expect, &error) {
            (Expect::Valid, None) => {
                assert!(
                    well_formed(call.command, reply),
                    "valid call `{}` got a malformed reply {reply:?}; {}",
                    show(&call.args),
                    self.context()
                );
                "valid: ok"
            }
            (Expect::Valid, Some(line)) => panic!(
                "valid call `{}` was refused: {line}; {}",
                show(&call.args),
                self.context()
            ),
            (Expect::Invalid(defects), None) => panic!(
                "invalid call `{}` (defects {defects:?}) was accepted: {reply:?}; {}",
                show(&call.args),
                self.context()
            ),
            (Expect::Invalid(defects), Some(line)) => {
                assert!(
                    defects.iter().any(|d| d.accepts(line, &limits)),
                    "invalid call `{}` (defects {defects:?}) got the wrong error {line:?}; {}",
                    show(&call.args),
                    self.context()
                );
                "invalid: refused"
            }
            (Expect::Unknown, None) => "junk: ok",
            (Expect::Unknown, Some(_)) => "junk: refused",
        };
        if let Some(line) = error {
            let head: String = line.chars().take(40).collect();
            *self.tally.errors.entry(head).or_default() += 1;
        }
        *self
            .tally
            .outcomes
            .entry((call.command, outcome))
            .or_default() += 1;
    }

    fn run_batched(&mut self, phase: Phase, count: usize) {
        let mut left = count;
        while left > 0 {
            let n = left.min(BATCH);
            let calls: Vec<Call> = (0..n).map(|_| self.gen.call(phase)).collect();
            self.run(&calls);
            left -= n;
        }
    }

    /// Every key, by SCAN.
    fn keys(&mut self) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .query(&mut self.conn)
                .unwrap();
            keys.extend(batch);
            if next == 0 {
                return keys;
            }
            cursor = next;
        }
    }

    /// Waits until nothing will change by itself during the next phase: no
    /// client waits, every short lease has ended and its key is gone, and
    /// the wall-clock offset is back to 0.
    fn settle(&mut self) {
        if self.gen.limits.debug {
            let _: Value = redis::cmd("LOCK.DEBUG")
                .arg("WALLCLOCK-OFFSET")
                .arg(0)
                .query(&mut self.conn)
                .unwrap();
        }
        let floor = i64::try_from(self.gen.limits.max_ttl / 4).unwrap();
        let settled = wait_until(Duration::from_secs(30), || {
            let info: String = redis::cmd("INFO")
                .arg("lock")
                .query(&mut self.conn)
                .unwrap();
            if !info.contains("lock_waiting:0\r\n") {
                return false;
            }
            let keys = self.keys();
            keys.iter().all(|key| {
                let reply: Value = redis::cmd("LOCK.INFO")
                    .arg(key.as_slice())
                    .query(&mut self.conn)
                    .unwrap_or(Value::Okay);
                match reply {
                    // A lock that lives on for long.
                    Value::Array(fields) => matches!(fields[7], Value::Int(pttl) if pttl > floor),
                    // No lock, or a lease that ended but whose key is still there.
                    Value::Nil => false,
                    // Another type.
                    _ => true,
                }
            })
        });
        assert!(settled, "locks did not settle; {}", self.context());
    }

    /// Phases of mixed calls (which must change the digest: each re-enters
    /// the control lock) alternate with phases of invalid calls only (which
    /// must not change it).
    fn rounds(&mut self, rounds: usize, mixed: usize, invalid: usize) {
        for _ in 0..rounds {
            let before_mixed = self.digest();
            let control = Call {
                command: Command::Acquire,
                args: vec![
                    b"LOCK.ACQUIRE".to_vec(),
                    b"ctl".to_vec(),
                    b"ctl".to_vec(),
                    self.gen.limits.max_ttl.to_string().into_bytes(),
                ],
                expect: Expect::Valid,
            };
            self.run(&[control]);
            self.run_batched(Phase::Mixed, mixed);
            self.settle();
            self.ping();
            let before = self.digest();
            assert_ne!(
                before,
                before_mixed,
                "valid calls did not change the digest; {}",
                self.context()
            );
            let dbsize: i64 = redis::cmd("DBSIZE").query(&mut self.conn).unwrap();

            self.run_batched(Phase::Invalid, invalid);
            self.ping();
            let after = self.digest();
            assert_eq!(
                before,
                after,
                "rejected calls changed the dataset; {}",
                self.context()
            );
            let dbsize_after: i64 = redis::cmd("DBSIZE").query(&mut self.conn).unwrap();
            assert_eq!(dbsize, dbsize_after);
        }
        let log = self.server.log();
        assert!(
            !log.contains("panicked") && !log.contains("BUG REPORT"),
            "the server log reports a panic; {}\n{log}",
            self.context()
        );
        eprintln!("{}", self.tally.summary());
        eprintln!("error replies by kind:");
        for (head, n) in &self.tally.errors {
            eprintln!("  {head:<42} {n}");
        }
    }
}

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

/// What the fuzzer found, reduced: a `WAIT` whose lock frees (its lease
/// ends) in the same event-loop turn as the wait times out. Every such call
/// must get exactly one answer, and the answer must agree with the lock: a
/// token if and only if the waiter now holds it.
///
/// A regression test: when waits used Redis-side timeouts, the lease-end
/// timer could grant the lock to the waiter (`RedisModule_UnblockClient`
/// with the token) and Redis then time the same client out before running
/// the reply callback, find it already unblocked, skip the timeout callback
/// and clear the client's handle: the waiter got NO reply while it held the
/// lock, and after a few of these redis-server 7.0 died with SIGBUS in
/// `moduleTimerHandler -> moduleReleaseTempClient -> unwatchAllKeys`. The
/// module now ends waits with its own timer, so only it unblocks a waiter.
#[test]
fn a_wait_that_times_out_as_its_lock_frees_gets_one_consistent_answer() {
    let mut server = RedisServer::start();
    let mut holder = server.conn();
    let mut wrong = Vec::new();
    for round in 0..200u64 {
        let key = format!("race:{round}");
        let (ttl, wait) = (1 + round % 5, 1 + (round / 5) % 5);
        let Ok(_token) = redis::cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg("alice")
            .arg(ttl)
            .query::<i64>(&mut holder)
        else {
            break; // the server is gone: see below
        };
        let mut waiter = server.conn();
        waiter
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let answer: redis::RedisResult<Option<i64>> = redis::cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg("bob")
            .arg(60_000)
            .arg("WAIT")
            .arg(wait)
            .query(&mut waiter);
        let Ok(info) = redis::cmd("LOCK.INFO")
            .arg(&key)
            .query::<Value>(&mut holder)
        else {
            break;
        };
        let bob_holds =
            matches!(&info, Value::Array(f) if f[1] == Value::BulkString(b"bob".to_vec()));
        let problem = match answer {
            Ok(Some(_)) if !bob_holds => "a token, but bob does not hold the lock",
            Ok(None) if bob_holds => "nil, but bob holds the lock",
            Err(_) if bob_holds => "no answer at all, and bob holds the lock",
            Err(_) => "no answer at all",
            Ok(_) => continue,
        };
        wrong.push(format!(
            "round {round} (lease {ttl} ms, WAIT {wait} ms): {problem}"
        ));
    }
    let crashed = !server.is_running() || server.log().contains("BUG REPORT");
    assert!(
        wrong.is_empty() && !crashed,
        "{} wrong answers{}:\n{}\n{}",
        wrong.len(),
        if crashed {
            ", then redis-server crashed"
        } else {
            ""
        },
        wrong.join("\n"),
        if crashed { server.log() } else { String::new() }
    );
}
