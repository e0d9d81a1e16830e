//! Parsing and validating command arguments. Every check happens here, before
//! the command touches the dataset, so a rejected command changes nothing.
//!
//! `argv` is the whole command line: `argv[0]` is the command name and
//! `argv[1]` the key. Too few arguments is an arity error; anything after the
//! fixed arguments that is not a known option is a syntax error.

use std::fmt;
use std::num::NonZeroU32;

use crate::lock::Mode;
use crate::token::MAX_TOKEN;

/// The longest `WAIT` timeout: ten years, far beyond any real wait, small
/// enough that deadline arithmetic cannot overflow.
pub const MAX_WAIT_MS: u64 = 315_360_000_000;

/// Limits from the module configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `lock.max-ttl`: the longest lease, in milliseconds.
    pub max_ttl_ms: u64,
    /// `lock.max-owner-bytes`: the longest owner id.
    pub max_owner_bytes: usize,
    /// `lock.max-holders`: the largest `LIMIT`, and the most holders of a
    /// shared lock without one.
    pub max_holders: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_ttl_ms: 86_400_000,
            max_owner_bytes: 256,
            max_holders: 10_000,
        }
    }
}

/// Why arguments were rejected. [`fmt::Display`] gives the error reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgError {
    /// Too few arguments: the standard Redis arity error.
    WrongArity,
    /// An unknown or repeated option.
    Syntax,
    /// `ttl-ms` not an integer in 1..=max.
    Ttl {
        max: u64,
    },
    /// `WAIT` timeout not an integer in 0..=[`MAX_WAIT_MS`].
    WaitTimeout,
    /// `ATLEAST` not an integer in 0..=[`MAX_TOKEN`].
    AtLeast,
    /// `LIMIT` not an integer in 1..=max.
    Limit {
        max: u32,
    },
    /// `LIMIT` without `SHARED`.
    LimitWithoutShared,
    /// `COUNT` not a positive integer.
    Count,
    EmptyOwner,
    OwnerTooLong {
        max: usize,
    },
    /// A malformed internal `LOCK.APPLY` effect.
    Effect(&'static str),
    /// `LOCK.FLOOR`'s value not an integer in 0..=[`MAX_TOKEN`].
    Floor,
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgError::WrongArity => write!(f, "ERR wrong number of arguments"),
            ArgError::Syntax => write!(f, "ERR syntax error"),
            ArgError::Ttl { max } => {
                write!(
                    f,
                    "ERR ttl-ms must be an integer between 1 and {max} (lock.max-ttl)"
                )
            }
            ArgError::WaitTimeout => {
                write!(
                    f,
                    "ERR WAIT timeout-ms must be an integer between 0 and {MAX_WAIT_MS}"
                )
            }
            ArgError::AtLeast => write!(
                f,
                "ERR ATLEAST must be an integer between 0 and {MAX_TOKEN} (2^53-1, so that every token is exact in JavaScript, Lua and JSON)"
            ),
            ArgError::Limit { max } => write!(
                f,
                "ERR LIMIT must be an integer between 1 and {max} (lock.max-holders)"
            ),
            ArgError::LimitWithoutShared => write!(f, "ERR LIMIT requires SHARED"),
            ArgError::Count => write!(f, "ERR COUNT must be a positive integer"),
            ArgError::EmptyOwner => write!(f, "ERR owner must not be empty"),
            ArgError::OwnerTooLong { max } => {
                write!(
                    f,
                    "ERR owner must be at most {max} bytes (lock.max-owner-bytes)"
                )
            }
            ArgError::Effect(what) => write!(f, "ERR malformed LOCK.APPLY: {what}"),
            ArgError::Floor => write!(
                f,
                "ERR floor must be an integer between 0 and {MAX_TOKEN} (2^53-1)"
            ),
        }
    }
}

/// `LOCK.ACQUIRE key owner ttl-ms [SHARED [LIMIT n]] [WAIT timeout-ms]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub owner: &'a [u8],
    pub ttl_ms: u64,
    /// Exclusive, or `SHARED`.
    pub mode: Mode,
    /// `LIMIT n` (only with `SHARED`).
    pub limit: Option<NonZeroU32>,
    /// `Some(0)` waits forever.
    pub wait_ms: Option<u64>,
}

/// `LOCK.RELEASE key owner [ALL]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReleaseArgs<'a> {
    pub owner: &'a [u8],
    pub all: bool,
}

/// `LOCK.EXTEND key owner ttl-ms`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtendArgs<'a> {
    pub owner: &'a [u8],
    pub ttl_ms: u64,
}

/// `LOCK.FENCE key owner [ATLEAST n]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FenceArgs<'a> {
    pub owner: &'a [u8],
    pub at_least: Option<i64>,
}

/// `LOCK.APPLY key owner holds token wall-end-ms [SHARED limit]`: the
/// internal effect that replicas and the AOF replay (the owner's hold as it
/// now is; `SHARED` for a holder of a shared lock, `limit` 0 for none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApplyArgs<'a> {
    pub owner: &'a [u8],
    pub holds: u32,
    pub token: i64,
    pub wall_end_ms: i64,
    /// `None`: exclusive; `Some(limit)` for a shared lock.
    pub shared: Option<Option<NonZeroU32>>,
}

pub fn parse_acquire<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<AcquireArgs<'a>, ArgError> {
    let [_, _, owner, ttl, options @ ..] = argv else {
        return Err(ArgError::WrongArity);
    };
    let owner = parse_owner(owner, limits)?;
    let ttl_ms = parse_ttl(ttl, limits)?;
    let (mut wait_ms, mut shared, mut limit) = (None, false, None);
    let mut rest = options;
    while let [option, tail @ ..] = rest {
        match (option.to_ascii_uppercase().as_slice(), tail) {
            (b"WAIT", [timeout, tail @ ..]) if wait_ms.is_none() => {
                wait_ms = Some(parse_range(timeout, 0, MAX_WAIT_MS).ok_or(ArgError::WaitTimeout)?);
                rest = tail;
            }
            (b"SHARED", tail) if !shared => {
                shared = true;
                rest = tail;
            }
            (b"LIMIT", [n, tail @ ..]) if limit.is_none() => {
                let max = limits.max_holders;
                let n = parse_range(n, 1, u64::from(max)).ok_or(ArgError::Limit { max })?;
                let n = u32::try_from(n).ok().and_then(NonZeroU32::new);
                limit = Some(n.ok_or(ArgError::Limit { max })?);
                rest = tail;
            }
            _ => return Err(ArgError::Syntax),
        }
    }
    if limit.is_some() && !shared {
        return Err(ArgError::LimitWithoutShared);
    }
    Ok(AcquireArgs {
        owner,
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

/// The owner is not held to `lock.max-owner-bytes` here: a holder is never
/// locked out by a lowered limit ([`crate::ops::as_holder`] refuses a
/// longer owner only when it does not hold the lock).
pub fn parse_release<'a>(argv: &[&'a [u8]]) -> Result<ReleaseArgs<'a>, ArgError> {
    let [_, _, owner, options @ ..] = argv else {
        return Err(ArgError::WrongArity);
    };
    let owner = parse_holder_owner(owner)?;
    match options {
        [] => Ok(ReleaseArgs { owner, all: false }),
        [all] if all.eq_ignore_ascii_case(b"ALL") => Ok(ReleaseArgs { owner, all: true }),
        _ => Err(ArgError::Syntax),
    }
}

/// The owner as for [`parse_release`]; `ttl-ms` is held to `lock.max-ttl`.
pub fn parse_extend<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<ExtendArgs<'a>, ArgError> {
    let [_, _, owner, ttl, options @ ..] = argv else {
        return Err(ArgError::WrongArity);
    };
    let owner = parse_holder_owner(owner)?;
    let ttl_ms = parse_ttl(ttl, limits)?;
    if !options.is_empty() {
        return Err(ArgError::Syntax);
    }
    Ok(ExtendArgs { owner, ttl_ms })
}

/// The owner as for [`parse_release`].
pub fn parse_fence<'a>(argv: &[&'a [u8]]) -> Result<FenceArgs<'a>, ArgError> {
    let [_, _, owner, options @ ..] = argv else {
        return Err(ArgError::WrongArity);
    };
    let owner = parse_holder_owner(owner)?;
    match options {
        [] => Ok(FenceArgs {
            owner,
            at_least: None,
        }),
        [option, n] if option.eq_ignore_ascii_case(b"ATLEAST") => {
            let n = parse_range(n, 0, MAX_TOKEN.unsigned_abs()).ok_or(ArgError::AtLeast)?;
            let n = i64::try_from(n).map_err(|_| ArgError::AtLeast)?;
            Ok(FenceArgs {
                owner,
                at_least: Some(n),
            })
        }
        _ => Err(ArgError::Syntax),
    }
}

/// `LOCK.INFO key`
pub fn parse_info(argv: &[&[u8]]) -> Result<(), ArgError> {
    match argv {
        [_, _] => Ok(()),
        [_, _, _, ..] => Err(ArgError::Syntax),
        _ => Err(ArgError::WrongArity),
    }
}

/// The effect is trusted less than a user command would be: it comes from
/// the primary or the AOF, but a corrupt AOF must not corrupt the dataset. It
/// is not held to this node's limits, which may differ from the primary's.
pub fn parse_apply<'a>(argv: &[&'a [u8]]) -> Result<ApplyArgs<'a>, ArgError> {
    let (owner, holds, token, wall_end, shared) = match argv {
        [_, _, owner, holds, token, wall_end] => (owner, holds, token, wall_end, None),
        [_, _, owner, holds, token, wall_end, mode, limit]
            if mode.eq_ignore_ascii_case(b"SHARED") =>
        {
            let limit =
                parse_range(limit, 0, u64::from(u32::MAX)).ok_or(ArgError::Effect("limit"))?;
            let limit = u32::try_from(limit).map_err(|_| ArgError::Effect("limit"))?;
            (owner, holds, token, wall_end, Some(NonZeroU32::new(limit)))
        }
        [_, _, _, _, _, _, _, ..] => return Err(ArgError::Syntax),
        _ => return Err(ArgError::WrongArity),
    };
    if owner.is_empty() {
        return Err(ArgError::EmptyOwner);
    }
    let holds = parse_range(holds, 1, u64::from(u32::MAX)).ok_or(ArgError::Effect("holds"))?;
    let token = parse_i64(token)
        .filter(|t| (1..=MAX_TOKEN).contains(t))
        .ok_or(ArgError::Effect("token"))?;
    let wall_end_ms = parse_i64(wall_end).ok_or(ArgError::Effect("lease end"))?;
    Ok(ApplyArgs {
        owner,
        holds: u32::try_from(holds).map_err(|_| ArgError::Effect("holds"))?,
        token,
        wall_end_ms,
        shared,
    })
}

/// `LOCK.HOLDERS key [COUNT n]`: the most holders to list (all without
/// `COUNT`).
pub fn parse_holders(argv: &[&[u8]]) -> Result<usize, ArgError> {
    match argv {
        [_, _] => Ok(usize::MAX),
        [_, _, option, n] if option.eq_ignore_ascii_case(b"COUNT") => {
            let n = parse_range(n, 1, u64::MAX).ok_or(ArgError::Count)?;
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        }
        [_] | [] => Err(ArgError::WrongArity),
        _ => Err(ArgError::Syntax),
    }
}

/// `LOCK.DROP key owner`: the internal effect of an owner's hold leaving a
/// shared lock that others still hold.
pub fn parse_drop<'a>(argv: &[&'a [u8]]) -> Result<&'a [u8], ArgError> {
    match argv {
        [_, _, owner] if !owner.is_empty() => Ok(owner),
        [_, _, _] => Err(ArgError::EmptyOwner),
        [_, _, _, _, ..] => Err(ArgError::Syntax),
        _ => Err(ArgError::WrongArity),
    }
}

/// `LOCK.COUNTER n`: the counter value, a token in `1..=MAX_TOKEN`.
pub fn parse_counter(argv: &[&[u8]]) -> Result<i64, ArgError> {
    let [_, last] = argv else {
        return Err(ArgError::WrongArity);
    };
    parse_i64(last)
        .filter(|t| (1..=MAX_TOKEN).contains(t))
        .ok_or(ArgError::Effect("token"))
}

/// `LOCK.FLOOR n`: the value every later token of the node must exceed, an
/// integer in `0..=MAX_TOKEN` (0 raises nothing: it reads the counter).
pub fn parse_floor(argv: &[&[u8]]) -> Result<i64, ArgError> {
    let [_, floor] = argv else {
        return Err(ArgError::WrongArity);
    };
    parse_i64(floor)
        .filter(|t| (0..=MAX_TOKEN).contains(t))
        .ok_or(ArgError::Floor)
}

fn parse_owner<'a>(owner: &'a [u8], limits: &Limits) -> Result<&'a [u8], ArgError> {
    if owner.is_empty() {
        Err(ArgError::EmptyOwner)
    } else {
        check_owner_length(owner, limits.max_owner_bytes).map(|()| owner)
    }
}

/// A holder's owner: only non-empty (its length is checked against the lock).
fn parse_holder_owner(owner: &[u8]) -> Result<&[u8], ArgError> {
    if owner.is_empty() {
        Err(ArgError::EmptyOwner)
    } else {
        Ok(owner)
    }
}

/// `ArgError::OwnerTooLong` for an owner longer than `max` bytes.
pub fn check_owner_length(owner: &[u8], max: usize) -> Result<(), ArgError> {
    if owner.len() > max {
        Err(ArgError::OwnerTooLong { max })
    } else {
        Ok(())
    }
}

fn parse_ttl(ttl: &[u8], limits: &Limits) -> Result<u64, ArgError> {
    parse_range(ttl, 1, limits.max_ttl_ms).ok_or(ArgError::Ttl {
        max: limits.max_ttl_ms,
    })
}

fn parse_range(bytes: &[u8], min: u64, max: u64) -> Option<u64> {
    let value = u64::try_from(parse_i64(bytes)?).ok()?;
    (min..=max).contains(&value).then_some(value)
}

/// Parses an integer exactly as Redis does (`string2ll`): an optional `-`,
/// then digits without a leading zero, no sign `+`, no spaces, no overflow.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, bytes),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!negative).then_some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    let mut value: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(digit - b'0');
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<&[u8]> {
        line.split(' ').map(str::as_bytes).collect()
    }

    const LIMITS: Limits = Limits {
        max_ttl_ms: 1_000,
        max_owner_bytes: 4,
        max_holders: 50,
    };

    #[test]
    fn integers_parse_like_redis() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-7"), Some(-7));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            "",
            "-",
            "+1",
            "01",
            "-0",
            " 1",
            "1 ",
            "1.5",
            "1e3",
            "9223372036854775808",
            "0x10",
        ] {
            assert_eq!(parse_i64(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn shared_and_limit_in_any_order_once_each() {
        let shared = parse_acquire(&argv("ACQ k me 5 SHARED"), &LIMITS).unwrap();
        assert_eq!((shared.mode, shared.limit), (Mode::Shared, None));
        for line in [
            "ACQ k me 5 shared limit 3 wait 10",
            "ACQ k me 5 WAIT 10 LIMIT 3 SHARED",
            "ACQ k me 5 LIMIT 3 SHARED WAIT 10",
        ] {
            let parsed = parse_acquire(&argv(line), &LIMITS).unwrap();
            assert_eq!(
                (parsed.mode, parsed.limit, parsed.wait_ms),
                (Mode::Shared, NonZeroU32::new(3), Some(10)),
                "{line}"
            );
        }
        assert_eq!(
            parse_acquire(&argv("ACQ k me 5 LIMIT 3"), &LIMITS),
            Err(ArgError::LimitWithoutShared)
        );
        for bad in ["0", "51", "-1", "x", "1.5"] {
            assert_eq!(
                parse_acquire(&argv(&format!("ACQ k me 5 SHARED LIMIT {bad}")), &LIMITS),
                Err(ArgError::Limit { max: 50 }),
                "{bad}"
            );
        }
        assert_eq!(
            ArgError::Limit { max: 50 }.to_string(),
            "ERR LIMIT must be an integer between 1 and 50 (lock.max-holders)"
        );
        for bad in [
            "ACQ k me 5 SHARED SHARED",
            "ACQ k me 5 SHARED LIMIT 2 LIMIT 2",
            "ACQ k me 5 SHARED LIMIT",
        ] {
            assert_eq!(
                parse_acquire(&argv(bad), &LIMITS),
                Err(ArgError::Syntax),
                "{bad}"
            );
        }
    }

    #[test]
    fn acquire_arguments() {
        let ok = parse_acquire(&argv("ACQ k me 1000"), &LIMITS).unwrap();
        assert_eq!(
            ok,
            AcquireArgs {
                owner: b"me",
                ttl_ms: 1000,
                mode: Mode::Exclusive,
                limit: None,
                wait_ms: None
            }
        );
        let wait = parse_acquire(&argv("ACQ k me 5 wait 0"), &LIMITS).unwrap();
        assert_eq!(wait.wait_ms, Some(0));
        assert_eq!(
            parse_acquire(&argv("ACQ k me"), &LIMITS),
            Err(ArgError::WrongArity)
        );
        assert_eq!(
            parse_acquire(&argv("ACQ k me 0"), &LIMITS),
            Err(ArgError::Ttl { max: 1000 })
        );
        assert_eq!(
            parse_acquire(&argv("ACQ k me 1001"), &LIMITS),
            Err(ArgError::Ttl { max: 1000 })
        );
        assert_eq!(
            parse_acquire(&argv("ACQ k me -1"), &LIMITS),
            Err(ArgError::Ttl { max: 1000 })
        );
        assert_eq!(
            parse_acquire(&argv("ACQ k me x"), &LIMITS),
            Err(ArgError::Ttl { max: 1000 })
        );
        assert_eq!(
            parse_acquire(&argv("ACQ k me 5 WAIT"), &LIMITS),
            Err(ArgError::Syntax)
        );
        assert_eq!(
            parse_acquire(&argv("ACQ k me 5 WAIT 1 WAIT 1"), &LIMITS),
            Err(ArgError::Syntax)
        );
        assert_eq!(
            parse_acquire(&argv("ACQ k me 5 NOPE"), &LIMITS),
            Err(ArgError::Syntax)
        );
        assert_eq!(
            parse_acquire(&argv("ACQ k me 5 WAIT -1"), &LIMITS),
            Err(ArgError::WaitTimeout)
        );
        assert_eq!(
            parse_acquire(&argv("ACQ k toolong 5"), &LIMITS),
            Err(ArgError::OwnerTooLong { max: 4 })
        );
        assert_eq!(
            parse_acquire(&[b"ACQ", b"k", b"", b"5"], &LIMITS),
            Err(ArgError::EmptyOwner)
        );
    }

    #[test]
    fn release_extend_fence_info_arguments() {
        assert_eq!(
            parse_release(&argv("R k me")),
            Ok(ReleaseArgs {
                owner: b"me",
                all: false
            })
        );
        assert_eq!(
            parse_release(&argv("R k me all")),
            Ok(ReleaseArgs {
                owner: b"me",
                all: true
            })
        );
        assert_eq!(
            parse_release(&argv("R k me ALL ALL")),
            Err(ArgError::Syntax)
        );
        assert_eq!(parse_release(&argv("R k")), Err(ArgError::WrongArity));
        assert_eq!(
            parse_extend(&argv("E k me 10"), &LIMITS),
            Ok(ExtendArgs {
                owner: b"me",
                ttl_ms: 10
            })
        );
        assert_eq!(
            parse_extend(&argv("E k me 10 X"), &LIMITS),
            Err(ArgError::Syntax)
        );
        assert_eq!(
            parse_extend(&argv("E k me"), &LIMITS),
            Err(ArgError::WrongArity)
        );
        assert_eq!(
            parse_fence(&argv("F k me")),
            Ok(FenceArgs {
                owner: b"me",
                at_least: None
            })
        );
        assert_eq!(
            parse_fence(&argv("F k me atleast 9")),
            Ok(FenceArgs {
                owner: b"me",
                at_least: Some(9)
            })
        );
        assert_eq!(parse_fence(&argv("F k me ATLEAST")), Err(ArgError::Syntax));
        assert_eq!(
            parse_fence(&argv("F k me ATLEAST -1")),
            Err(ArgError::AtLeast)
        );
        assert_eq!(
            parse_fence(&argv("F k me ATLEAST 9007199254740991")),
            Ok(FenceArgs {
                owner: b"me",
                at_least: Some(9_007_199_254_740_991)
            })
        );
        for too_big in ["9007199254740992", "4611686018427387905"] {
            assert_eq!(
                parse_fence(&argv(&format!("F k me ATLEAST {too_big}"))),
                Err(ArgError::AtLeast)
            );
        }
        assert_eq!(parse_info(&argv("I k")), Ok(()));
        assert_eq!(parse_info(&argv("I")), Err(ArgError::WrongArity));
        assert_eq!(parse_info(&argv("I k x")), Err(ArgError::Syntax));
    }

    #[test]
    fn apply_arguments() {
        let ok = parse_apply(&argv("A k me 2 77 -5")).unwrap();
        assert_eq!(
            ok,
            ApplyArgs {
                owner: b"me",
                holds: 2,
                token: 77,
                wall_end_ms: -5,
                shared: None,
            }
        );
        let shared = parse_apply(&argv("A k me 2 77 5 SHARED 3")).unwrap();
        assert_eq!(shared.shared, Some(NonZeroU32::new(3)));
        let unlimited = parse_apply(&argv("A k me 2 77 5 shared 0")).unwrap();
        assert_eq!(unlimited.shared, Some(None));
        assert_eq!(
            parse_apply(&argv("A k me 2 77 5 SHARED -1")),
            Err(ArgError::Effect("limit"))
        );
        assert_eq!(
            parse_apply(&argv("A k me 2 77 5 OTHER 1")),
            Err(ArgError::Syntax)
        );
        assert_eq!(
            parse_apply(&argv("A k me 2 77 5 SHARED")),
            Err(ArgError::Syntax)
        );
        assert_eq!(parse_drop(&argv("D k me")), Ok(&b"me"[..]));
        assert_eq!(parse_holders(&argv("H k")), Ok(usize::MAX));
        assert_eq!(parse_holders(&argv("H k count 5")), Ok(5));
        for bad in ["H k COUNT 0", "H k COUNT -1", "H k COUNT x"] {
            assert_eq!(parse_holders(&argv(bad)), Err(ArgError::Count), "{bad}");
        }
        assert_eq!(parse_holders(&argv("H k COUNT")), Err(ArgError::Syntax));
        assert_eq!(parse_holders(&argv("H")), Err(ArgError::WrongArity));
        assert_eq!(parse_drop(&argv("D k")), Err(ArgError::WrongArity));
        assert_eq!(parse_drop(&argv("D k me x")), Err(ArgError::Syntax));
        assert!(parse_apply(&argv("A k me 0 77 5")).is_err());
        assert!(parse_apply(&argv("A k me 1 0 5")).is_err());
        assert!(parse_apply(&argv("A k me 4294967296 1 5")).is_err());
        assert_eq!(parse_apply(&argv("A k me 1 1")), Err(ArgError::WrongArity));
    }

    #[test]
    fn counter_records_are_tokens_within_the_cap() {
        assert_eq!(parse_counter(&argv("C 42")), Ok(42));
        assert_eq!(
            parse_counter(&argv(&format!("C {MAX_TOKEN}"))),
            Ok(MAX_TOKEN)
        );
        for bad in ["C 0", "C -1", "C x", &format!("C {}", MAX_TOKEN + 1)] {
            assert_eq!(parse_counter(&argv(bad)), Err(ArgError::Effect("token")));
        }
        assert_eq!(parse_counter(&argv("C")), Err(ArgError::WrongArity));
        assert_eq!(parse_counter(&argv("C 1 2")), Err(ArgError::WrongArity));
    }

    #[test]
    fn floor_takes_one_token_from_zero() {
        assert_eq!(parse_floor(&argv("F 0")), Ok(0));
        assert_eq!(parse_floor(&argv("F 42")), Ok(42));
        assert_eq!(parse_floor(&argv(&format!("F {MAX_TOKEN}"))), Ok(MAX_TOKEN));
        for bad in [
            "F -1",
            "F x",
            "F 01",
            "F +5",
            "F 1.5",
            &format!("F {}", MAX_TOKEN + 1),
            "F 99999999999999999999",
        ] {
            assert_eq!(parse_floor(&argv(bad)), Err(ArgError::Floor), "{bad}");
        }
        assert_eq!(parse_floor(&argv("F")), Err(ArgError::WrongArity));
        assert_eq!(parse_floor(&argv("F 1 2")), Err(ArgError::WrongArity));
        assert_eq!(
            ArgError::Floor.to_string(),
            "ERR floor must be an integer between 0 and 9007199254740991 (2^53-1)"
        );
    }

    #[test]
    fn error_messages_name_the_range() {
        assert_eq!(
            ArgError::Ttl { max: 86_400_000 }.to_string(),
            "ERR ttl-ms must be an integer between 1 and 86400000 (lock.max-ttl)"
        );
        assert_eq!(
            ArgError::OwnerTooLong { max: 256 }.to_string(),
            "ERR owner must be at most 256 bytes (lock.max-owner-bytes)"
        );
    }
}
