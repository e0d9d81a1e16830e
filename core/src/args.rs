//! Parsing and validating command arguments. Every check happens here, before
//! the command touches the dataset, so a rejected command changes nothing.
//!
//! `argv` is the whole command line: `argv[0]` is the command name and
//! `argv[1]` the key. Too few arguments is an arity error; anything after the
//! fixed arguments that is not a known option is a syntax error.

use std::fmt;

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
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_ttl_ms: 86_400_000,
            max_owner_bytes: 256,
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
    EmptyOwner,
    OwnerTooLong {
        max: usize,
    },
    /// A malformed internal `LOCK.APPLY` effect.
    Effect(&'static str),
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
            ArgError::EmptyOwner => write!(f, "ERR owner must not be empty"),
            ArgError::OwnerTooLong { max } => {
                write!(
                    f,
                    "ERR owner must be at most {max} bytes (lock.max-owner-bytes)"
                )
            }
            ArgError::Effect(what) => write!(f, "ERR malformed LOCK.APPLY: {what}"),
        }
    }
}

/// `LOCK.ACQUIRE key owner ttl-ms [WAIT timeout-ms]`
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub owner: &'a [u8],
    pub ttl_ms: u64,
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

/// `LOCK.APPLY key owner holds token wall-end-ms`: the internal effect that
/// replicas and the AOF replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApplyArgs<'a> {
    pub owner: &'a [u8],
    pub holds: u32,
    pub token: i64,
    pub wall_end_ms: i64,
}

pub fn parse_acquire<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<AcquireArgs<'a>, ArgError> {
    let [_, _, owner, ttl, options @ ..] = argv else {
        return Err(ArgError::WrongArity);
    };
    let owner = parse_owner(owner, limits)?;
    let ttl_ms = parse_ttl(ttl, limits)?;
    let mut wait_ms = None;
    let mut rest = options;
    while let [option, tail @ ..] = rest {
        match (option.to_ascii_uppercase().as_slice(), tail) {
            (b"WAIT", [timeout, tail @ ..]) if wait_ms.is_none() => {
                wait_ms = Some(parse_range(timeout, 0, MAX_WAIT_MS).ok_or(ArgError::WaitTimeout)?);
                rest = tail;
            }
            _ => return Err(ArgError::Syntax),
        }
    }
    Ok(AcquireArgs {
        owner,
        ttl_ms,
        wait_ms,
    })
}

pub fn parse_release<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<ReleaseArgs<'a>, ArgError> {
    let [_, _, owner, options @ ..] = argv else {
        return Err(ArgError::WrongArity);
    };
    let owner = parse_owner(owner, limits)?;
    match options {
        [] => Ok(ReleaseArgs { owner, all: false }),
        [all] if all.eq_ignore_ascii_case(b"ALL") => Ok(ReleaseArgs { owner, all: true }),
        _ => Err(ArgError::Syntax),
    }
}

pub fn parse_extend<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<ExtendArgs<'a>, ArgError> {
    let [_, _, owner, ttl, options @ ..] = argv else {
        return Err(ArgError::WrongArity);
    };
    let owner = parse_owner(owner, limits)?;
    let ttl_ms = parse_ttl(ttl, limits)?;
    if !options.is_empty() {
        return Err(ArgError::Syntax);
    }
    Ok(ExtendArgs { owner, ttl_ms })
}

pub fn parse_fence<'a>(argv: &[&'a [u8]], limits: &Limits) -> Result<FenceArgs<'a>, ArgError> {
    let [_, _, owner, options @ ..] = argv else {
        return Err(ArgError::WrongArity);
    };
    let owner = parse_owner(owner, limits)?;
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
    let [_, _, owner, holds, token, wall_end] = argv else {
        return Err(ArgError::WrongArity);
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
    })
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

fn parse_owner<'a>(owner: &'a [u8], limits: &Limits) -> Result<&'a [u8], ArgError> {
    if owner.is_empty() {
        Err(ArgError::EmptyOwner)
    } else if owner.len() > limits.max_owner_bytes {
        Err(ArgError::OwnerTooLong {
            max: limits.max_owner_bytes,
        })
    } else {
        Ok(owner)
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
    fn acquire_arguments() {
        let ok = parse_acquire(&argv("ACQ k me 1000"), &LIMITS).unwrap();
        assert_eq!(
            ok,
            AcquireArgs {
                owner: b"me",
                ttl_ms: 1000,
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
            parse_release(&argv("R k me"), &LIMITS),
            Ok(ReleaseArgs {
                owner: b"me",
                all: false
            })
        );
        assert_eq!(
            parse_release(&argv("R k me all"), &LIMITS),
            Ok(ReleaseArgs {
                owner: b"me",
                all: true
            })
        );
        assert_eq!(
            parse_release(&argv("R k me ALL ALL"), &LIMITS),
            Err(ArgError::Syntax)
        );
        assert_eq!(
            parse_release(&argv("R k"), &LIMITS),
            Err(ArgError::WrongArity)
        );
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
            parse_fence(&argv("F k me"), &LIMITS),
            Ok(FenceArgs {
                owner: b"me",
                at_least: None
            })
        );
        assert_eq!(
            parse_fence(&argv("F k me atleast 9"), &LIMITS),
            Ok(FenceArgs {
                owner: b"me",
                at_least: Some(9)
            })
        );
        assert_eq!(
            parse_fence(&argv("F k me ATLEAST"), &LIMITS),
            Err(ArgError::Syntax)
        );
        assert_eq!(
            parse_fence(&argv("F k me ATLEAST -1"), &LIMITS),
            Err(ArgError::AtLeast)
        );
        assert_eq!(
            parse_fence(&argv("F k me ATLEAST 9007199254740991"), &LIMITS),
            Ok(FenceArgs {
                owner: b"me",
                at_least: Some(9_007_199_254_740_991)
            })
        );
        for too_big in ["9007199254740992", "4611686018427387905"] {
            assert_eq!(
                parse_fence(&argv(&format!("F k me ATLEAST {too_big}")), &LIMITS),
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
                wall_end_ms: -5
            }
        );
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
