//! The generator: valid, invalid and junk calls, each with its expectation.

#![allow(unused_imports)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::contract::*;
use crate::rng::*;
use crate::runner::*;
use crate::*;
use redis::{Connection, Value};
use testkit::{wait_until, RedisServer, ServerOptions};

/// What calls a phase makes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Only calls that must be refused.
    Invalid,
    /// Valid, invalid and junk calls.
    Mixed,
}

pub(crate) struct Gen {
    pub(crate) rng: Rng,
    pub(crate) limits: Limits,
    /// Whether valid calls may wait (1-2 ms) for a lock held by another
    /// owner. `REDIS_LOCK_FUZZ_NO_WAIT` turns it off, to fuzz around the
    /// lost-reply race of a WAIT granted as it times out.
    pub(crate) valid_waits: bool,
    /// Keys that hold (or may come to hold) locks.
    pub(crate) lock_keys: Vec<Vec<u8>>,
    /// Keys that hold other types.
    pub(crate) wrong_keys: Vec<Vec<u8>>,
    /// Owners valid calls use: few, so that they contend and re-enter.
    pub(crate) owners: Vec<Vec<u8>>,
    pub(crate) huge: Vec<u8>,
    pub(crate) huge_digits: Vec<u8>,
}

pub(crate) const NON_NUMBERS: [&[u8]; 24] = [
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
    pub(crate) fn new(seed: u64, limits: Limits) -> Gen {
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

    pub(crate) fn huge_key(&self) -> Vec<u8> {
        let mut key = b"lk:huge:".to_vec();
        key.extend_from_slice(&vec![b'K'; MIB]);
        key
    }

    // ---- pieces

    /// A key: a lock key, a missing one, a 1 MiB one, or (bad) another type.
    pub(crate) fn key(&mut self, make_bad: bool) -> Arg {
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

    pub(crate) fn owner(&mut self, make_bad: bool) -> Arg {
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
    pub(crate) fn non_number(&mut self) -> Vec<u8> {
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
    pub(crate) fn bad_number(&mut self, lo: i64, hi: i64) -> Vec<u8> {
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

    pub(crate) fn ttl(&mut self, make_bad: bool, phase: Phase) -> Arg {
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
    pub(crate) fn unknown_option(&mut self, keywords: &[&str]) -> Vec<u8> {
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
    pub(crate) fn anything(&mut self) -> Vec<u8> {
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
    pub(crate) fn finish(
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
    pub(crate) fn spoil(&mut self, invalid: bool, parts: usize) -> Vec<bool> {
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

    pub(crate) fn acquire(&mut self, invalid: bool, phase: Phase) -> Call {
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

    pub(crate) fn release(&mut self, invalid: bool) -> Call {
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

    pub(crate) fn extend(&mut self, invalid: bool, phase: Phase) -> Call {
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

    pub(crate) fn fence(&mut self, invalid: bool) -> Call {
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

    pub(crate) fn info(&mut self, invalid: bool) -> Call {
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
    pub(crate) fn apply(&mut self) -> Call {
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

    pub(crate) fn debug(&mut self, invalid: bool) -> Call {
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
    pub(crate) fn junk(&mut self) -> Call {
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

    pub(crate) fn call(&mut self, phase: Phase) -> Call {
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
