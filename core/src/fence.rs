//! Fences: the store's own check of fencing tokens (`LOCK.FENCED`,
//! `LOCK.FENCECHECK`, `LOCK.FENCEGET`, the `LOCK.FENCEAPPLY` effect).
//!
//! A fence is one integer under its own key: the highest token a write
//! through it has been accepted with. A write with a token below it is
//! refused (the writer's lock has passed to someone who already wrote);
//! an equal or higher token is accepted and raises the fence to it. A
//! missing fence accepts any token.
//!
//! Which inner commands `LOCK.FENCED` runs is decided here too, from the
//! command's name and the flags `COMMAND INFO` lists for it: writes only,
//! never one that can block, never a transaction, a script or function,
//! and never one of the module's own commands.

use std::fmt;

use crate::args::parse_i64;
use crate::token::MAX_TOKEN;

/// The largest token a fence accepts or holds: the module's own bound on
/// tokens (2^53 − 1, exact in a double).
pub const MAX_FENCE_TOKEN: i64 = MAX_TOKEN;

/// The distinctive first word of the refusal of a stale token.
pub const STALE_PREFIX: &str = "STALE";

/// What can be wrong with a fence command before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceError {
    /// The token is not an integer in 0..=2^53−1.
    Token,
    /// The token is below the fence's value.
    Stale {
        key: Vec<u8>,
        token: i64,
        accepted: i64,
    },
    /// The inner command is refused (`reason` says why).
    Refused { command: Vec<u8>, reason: Refusal },
    /// The inner command names the fence key among its keys.
    UsesFenceKey,
}

/// Why an inner command of `LOCK.FENCED` is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NotWrite,
    Blocking,
    Transaction,
    Script,
    OwnCommand,
    Unknown,
    /// A write of no key (`FLUSHALL`, `SWAPDB`): nothing a fence protects.
    NoKeys,
    /// Other commands a fence has no business running: `admin`,
    /// `noscript`, `pubsub`, `no_multi`.
    Other(&'static str),
}

impl fmt::Display for FenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceError::Token => write!(
                f,
                "ERR the fencing token must be an integer from 0 to {MAX_FENCE_TOKEN}"
            ),
            FenceError::Stale {
                key,
                token,
                accepted,
            } => write!(
                f,
                "{STALE_PREFIX} fencing token {token} refused: {} has accepted {accepted}",
                String::from_utf8_lossy(key)
            ),
            FenceError::Refused { command, reason } => {
                let name = String::from_utf8_lossy(command);
                let why = match reason {
                    Refusal::NotWrite => "it is not a write",
                    Refusal::Blocking => "it can block",
                    Refusal::Transaction => "transactions cannot run inside it",
                    Refusal::Script => "scripts and functions call LOCK.FENCECHECK instead",
                    Refusal::OwnCommand => "it is a LOCK.* command",
                    Refusal::Unknown => "unknown command",
                    Refusal::NoKeys => "it writes no key",
                    Refusal::Other(flag) => flag,
                };
                write!(f, "ERR LOCK.FENCED cannot run '{name}': {why}")
            }
            FenceError::UsesFenceKey => write!(
                f,
                "ERR LOCK.FENCED: the inner command cannot use the fence key"
            ),
        }
    }
}

/// A token argument: an integer in 0..=[`MAX_FENCE_TOKEN`].
pub fn parse_token(bytes: &[u8]) -> Result<i64, FenceError> {
    parse_i64(bytes)
        .filter(|token| (0..=MAX_FENCE_TOKEN).contains(token))
        .ok_or(FenceError::Token)
}

/// A fence's value as loaded (RDB, `RESTORE`): `None` outside the range.
pub fn loaded(value: i64) -> Option<i64> {
    (0..=MAX_FENCE_TOKEN).contains(&value).then_some(value)
}

/// The verdict on a write with `token` through a fence holding `current`
/// (`None`: no fence yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted; `raise` says whether the fence changes (it does not for
    /// an equal token).
    Accept { raise: bool },
    /// Refused: the fence has accepted a higher token.
    Stale { accepted: i64 },
}

pub fn check(current: Option<i64>, token: i64) -> Verdict {
    match current {
        Some(accepted) if accepted > token => Verdict::Stale { accepted },
        Some(accepted) => Verdict::Accept {
            raise: token > accepted,
        },
        None => Verdict::Accept { raise: true },
    }
}

/// The fence's value after a raise to `token` (the higher of the two; a
/// missing fence becomes `token`).
pub fn raised(current: Option<i64>, token: i64) -> i64 {
    current.map_or(token, |current| current.max(token))
}

/// [`check`] as a result carrying the refusal's message fields.
pub fn admit(key: &[u8], current: Option<i64>, token: i64) -> Result<bool, FenceError> {
    match check(current, token) {
        Verdict::Accept { raise } => Ok(raise),
        Verdict::Stale { accepted } => Err(FenceError::Stale {
            key: key.to_vec(),
            token,
            accepted,
        }),
    }
}

/// Commands refused by name whatever their flags.
pub fn refused_by_name(name: &[u8]) -> Option<Refusal> {
    let is = |candidates: &[&str]| {
        candidates
            .iter()
            .any(|c| name.eq_ignore_ascii_case(c.as_bytes()))
    };
    if name
        .get(..5)
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(b"lock."))
    {
        Some(Refusal::OwnCommand)
    } else if is(&["multi", "exec", "watch", "unwatch", "discard"]) {
        Some(Refusal::Transaction)
    } else if is(&[
        "eval",
        "evalsha",
        "eval_ro",
        "evalsha_ro",
        "fcall",
        "fcall_ro",
        "function",
        "script",
    ]) {
        Some(Refusal::Script)
    } else {
        None
    }
}

/// Whether `LOCK.FENCED` may run command `name`, whose `COMMAND INFO`
/// flags are `flags` (`None`: the server does not know the command).
pub fn allowed(name: &[u8], flags: Option<&[Vec<u8>]>) -> Result<(), Refusal> {
    if let Some(refusal) = refused_by_name(name) {
        return Err(refusal);
    }
    let Some(flags) = flags else {
        return Err(Refusal::Unknown);
    };
    let has = |flag: &str| {
        flags
            .iter()
            .any(|f| f.eq_ignore_ascii_case(flag.as_bytes()))
    };
    if has("blocking") {
        return Err(Refusal::Blocking);
    }
    for (flag, why) in [
        ("admin", "it is an admin command"),
        ("noscript", "it cannot run from a script or module"),
        ("pubsub", "it is a pub/sub command"),
        ("no_multi", "it cannot run in a transaction"),
    ] {
        if has(flag) {
            return Err(Refusal::Other(why));
        }
    }
    if !has("write") {
        return Err(Refusal::NotWrite);
    }
    Ok(())
}

/// Whether an inner command whose keys stand at `positions` of
/// `inner` (its command line, the name first) may run behind the fence
/// key `fence`: it must write some key, and never the fence itself.
pub fn check_inner_keys(
    inner: &[&[u8]],
    positions: impl IntoIterator<Item = usize>,
    fence: &[u8],
) -> Result<(), FenceError> {
    let mut any = false;
    for pos in positions {
        any = true;
        if inner.get(pos) == Some(&fence) {
            return Err(FenceError::UsesFenceKey);
        }
    }
    if any {
        Ok(())
    } else {
        Err(FenceError::Refused {
            command: inner.first().map(|name| name.to_vec()).unwrap_or_default(),
            reason: Refusal::NoKeys,
        })
    }
}

/// Where a command's keys are, as `COMMAND INFO` tells it for a command
/// without the `movablekeys` flag: its arity and its legacy key range
/// (first key, last key — negative counts from the end — and step). For
/// such a command the range is exact (the server marks a command whose
/// keys it cannot state as a range `movablekeys`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRange {
    pub arity: i64,
    pub first: i64,
    pub last: i64,
    pub step: i64,
}

impl KeyRange {
    /// The key positions in a command line of `argc` arguments (the
    /// command's name first), as the server finds them; `None` when the
    /// line does not have the command's arity or ends before its keys do
    /// (the server answers that when the command runs).
    pub fn positions(self, argc: usize) -> Option<impl Iterator<Item = usize>> {
        let argc = i64::try_from(argc).ok()?;
        let fits = if self.arity >= 0 {
            argc == self.arity
        } else {
            argc >= self.arity.checked_neg()?
        };
        if !fits {
            return None;
        }
        let (first, last) = if self.first <= 0 {
            (1, 0)
        } else if self.last < 0 {
            (self.first, argc.checked_add(self.last)?)
        } else {
            (self.first, self.last)
        };
        if last >= argc {
            return None;
        }
        let step = usize::try_from(self.step.max(1)).ok()?;
        let first = usize::try_from(first).ok()?;
        // An empty range when `last` is below `first` (also negative).
        let last = usize::try_from(last).unwrap_or(0);
        Some((first..=last).step_by(step))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|f| f.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_raise_keeps_the_higher_token() {
        assert_eq!(raised(None, 7), 7);
        assert_eq!(raised(Some(5), 7), 7);
        assert_eq!(raised(Some(9), 7), 9);
    }

    #[test]
    fn tokens_are_integers_from_zero_to_the_module_bound() {
        assert_eq!(parse_token(b"0"), Ok(0));
        assert_eq!(parse_token(b"42"), Ok(42));
        assert_eq!(parse_token(b"9007199254740991"), Ok(MAX_FENCE_TOKEN));
        for bad in [
            &b"-1"[..],
            b"9007199254740992",
            b"99999999999999999999999",
            b"",
            b"1.5",
            b"abc",
            b"01",
            b" 1",
        ] {
            assert_eq!(parse_token(bad), Err(FenceError::Token), "{bad:?}");
        }
    }

    #[test]
    fn a_loaded_value_out_of_range_is_refused() {
        assert_eq!(loaded(0), Some(0));
        assert_eq!(loaded(MAX_FENCE_TOKEN), Some(MAX_FENCE_TOKEN));
        assert_eq!(loaded(-1), None);
        assert_eq!(loaded(MAX_FENCE_TOKEN + 1), None);
        assert_eq!(loaded(i64::MIN), None);
    }

    #[test]
    fn lower_tokens_are_stale_equal_ones_accepted_without_a_raise() {
        assert_eq!(check(None, 0), Verdict::Accept { raise: true });
        assert_eq!(check(Some(5), 6), Verdict::Accept { raise: true });
        assert_eq!(check(Some(5), 5), Verdict::Accept { raise: false });
        assert_eq!(check(Some(5), 4), Verdict::Stale { accepted: 5 });
    }

    #[test]
    fn the_stale_message_names_the_key_and_both_tokens() {
        let error = admit(b"fence:{a}", Some(7), 3).unwrap_err();
        assert_eq!(
            error.to_string(),
            "STALE fencing token 3 refused: fence:{a} has accepted 7"
        );
        assert_eq!(admit(b"f", Some(7), 7), Ok(false));
        assert_eq!(admit(b"f", None, 7), Ok(true));
    }

    #[test]
    fn only_plain_writes_are_allowed() {
        assert_eq!(
            allowed(b"HSET", Some(&flags(&["write", "denyoom", "fast"]))),
            Ok(())
        );
        assert_eq!(allowed(b"set", Some(&flags(&["WRITE"]))), Ok(()));
        assert_eq!(
            allowed(b"get", Some(&flags(&["readonly", "fast"]))),
            Err(Refusal::NotWrite)
        );
        assert_eq!(
            allowed(b"blmove", Some(&flags(&["write", "blocking"]))),
            Err(Refusal::Blocking)
        );
        assert_eq!(
            allowed(b"flushall", Some(&flags(&["write", "admin"]))),
            Err(Refusal::Other("it is an admin command"))
        );
        assert_eq!(allowed(b"nosuch", None), Err(Refusal::Unknown));
    }

    #[test]
    fn transactions_scripts_and_our_own_commands_are_refused_by_name() {
        let write = flags(&["write"]);
        for (name, refusal) in [
            (&b"MULTI"[..], Refusal::Transaction),
            (b"exec", Refusal::Transaction),
            (b"Watch", Refusal::Transaction),
            (b"EVAL", Refusal::Script),
            (b"evalsha", Refusal::Script),
            (b"FCALL", Refusal::Script),
            (b"fcall_ro", Refusal::Script),
            (b"LOCK.ACQUIRE", Refusal::OwnCommand),
            (b"lock.fenced", Refusal::OwnCommand),
            (b"lock.fenceapply", Refusal::OwnCommand),
        ] {
            assert_eq!(allowed(name, Some(&write)), Err(refusal), "{name:?}");
        }
    }

    #[test]
    fn refusals_name_the_command() {
        let error = FenceError::Refused {
            command: b"get".to_vec(),
            reason: Refusal::NotWrite,
        };
        assert_eq!(
            error.to_string(),
            "ERR LOCK.FENCED cannot run 'get': it is not a write"
        );
        assert!(FenceError::Token.to_string().contains("9007199254740991"));
    }

    #[test]
    fn key_ranges_give_the_positions_the_server_finds() {
        let range = |arity, first, last, step| KeyRange {
            arity,
            first,
            last,
            step,
        };
        let keys = |r: KeyRange, argc| r.positions(argc).map(|p| p.collect::<Vec<_>>());
        // HSET key field value [field value ...]
        let hset = range(-4, 1, 1, 1);
        assert_eq!(keys(hset, 4), Some(vec![1]));
        assert_eq!(keys(hset, 6), Some(vec![1]));
        assert_eq!(keys(hset, 3), None, "below the arity");
        // MSET key value [key value ...]
        let mset = range(-3, 1, -1, 2);
        assert_eq!(keys(mset, 5), Some(vec![1, 3]));
        assert_eq!(keys(mset, 3), Some(vec![1]));
        // DEL key [key ...]
        assert_eq!(keys(range(-2, 1, -1, 1), 4), Some(vec![1, 2, 3]));
        // SET key value (exact arity elsewhere: GETSET key value)
        let getset = range(3, 1, 1, 1);
        assert_eq!(keys(getset, 3), Some(vec![1]));
        assert_eq!(keys(getset, 4), None);
        // A command without keys (FLUSHALL)
        assert_eq!(keys(range(-1, 0, 0, 0), 1), Some(vec![]));
        // SMOVE source destination member
        assert_eq!(keys(range(4, 1, 2, 1), 4), Some(vec![1, 2]));
        // A line too short for its keys (a module command, arity -1)
        assert_eq!(keys(range(-1, 1, 2, 1), 2), None);
        // Hostile values from a command table never panic.
        for (arity, first, last, step) in [
            (i64::MIN, 1, 1, 1),
            (-1, i64::MAX, i64::MAX, i64::MAX),
            (-1, 1, i64::MIN, 1),
            (-1, 3, 1, 0),
            (-1, 1, -1, -5),
        ] {
            let _ = keys(range(arity, first, last, step), 4);
        }
    }

    #[test]
    fn an_inner_command_must_write_a_key_and_never_the_fence() {
        let line: &[&[u8]] = &[b"MSET", b"a", b"1", b"f", b"2"];
        assert_eq!(check_inner_keys(line, [1], b"f"), Ok(()));
        assert_eq!(
            check_inner_keys(line, [1, 3], b"f"),
            Err(FenceError::UsesFenceKey)
        );
        // A position past the line is no key of it.
        assert_eq!(check_inner_keys(line, [9], b"f"), Ok(()));
        let flush: &[&[u8]] = &[b"FLUSHALL"];
        assert_eq!(
            check_inner_keys(flush, [], b"f"),
            Err(FenceError::Refused {
                command: b"FLUSHALL".to_vec(),
                reason: Refusal::NoKeys
            })
        );
        assert_eq!(
            FenceError::UsesFenceKey.to_string(),
            "ERR LOCK.FENCED: the inner command cannot use the fence key"
        );
    }
}
