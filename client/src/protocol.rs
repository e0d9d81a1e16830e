//! The module's wire contract: how each `LOCK.*` command is written and how
//! its reply is read. Anything outside the contract becomes a
//! [`NodeError`], never a panic.

use std::time::Duration;

use redis::{Cmd, Value};

use crate::error::NodeError;
use crate::kind::Kind;
use crate::outcome::Reply;

/// `LOCK.ACQUIRE key owner ttl-ms [SHARED [LIMIT n]] [WAIT timeout-ms]`
pub fn acquire(key: &str, owner: &str, ttl: Duration, kind: Kind, wait: Option<Duration>) -> Cmd {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key).arg(owner).arg(millis(ttl));
    if let Kind::Shared { permits } = kind {
        cmd.arg("SHARED");
        if let Some(n) = permits {
            cmd.arg("LIMIT").arg(n.get());
        }
    }
    if let Some(wait) = wait {
        // The server reads 0 as "wait forever": never send it by rounding.
        cmd.arg("WAIT").arg(millis(wait).max(1));
    }
    cmd
}

/// `LOCK.RELEASE key owner [ALL]`
pub fn release(key: &str, owner: &str, all: bool) -> Cmd {
    let mut cmd = redis::cmd("LOCK.RELEASE");
    cmd.arg(key).arg(owner);
    if all {
        cmd.arg("ALL");
    }
    cmd
}

/// `LOCK.EXTEND key owner ttl-ms`
pub fn extend(key: &str, owner: &str, ttl: Duration) -> Cmd {
    let mut cmd = redis::cmd("LOCK.EXTEND");
    cmd.arg(key).arg(owner).arg(millis(ttl));
    cmd
}

/// `LOCK.FENCE key owner [ATLEAST n]`
pub fn fence(key: &str, owner: &str, at_least: Option<u64>) -> Cmd {
    let mut cmd = redis::cmd("LOCK.FENCE");
    cmd.arg(key).arg(owner);
    if let Some(n) = at_least {
        cmd.arg("ATLEAST").arg(n);
    }
    cmd
}

/// `LOCK.FLOOR floor`: every later token of the node it reaches is above
/// `floor`. Touches no key: routed to a node by address.
pub fn floor(floor: u64) -> Cmd {
    let mut cmd = redis::cmd("LOCK.FLOOR");
    cmd.arg(floor);
    cmd
}

/// `LOCK.FLOOR`'s reply: the node's counter, which must be at least the
/// floor asked (an error reply, such as a floor too far ahead of the node's
/// clock or a module without the command, is the node's refusal).
pub fn parse_floor(value: Value, floor: u64) -> Result<(), NodeError> {
    match value {
        Value::Int(last) if u64::try_from(last).is_ok_and(|last| last >= floor) => Ok(()),
        Value::ServerError(error) => Err(NodeError::Reply(format!("LOCK.FLOOR {floor}: {error}"))),
        other => Err(NodeError::UnexpectedReply(format!(
            "LOCK.FLOOR {floor}: {other:?}"
        ))),
    }
}

/// `LOCK.FENCED fence-key token command [arg ...]`: `write` run by the
/// store only if `token` is not below the fence at `fence_key`. `None` for
/// an empty command or one with a cursor (or any non-plain) argument.
pub fn fenced(fence_key: &str, token: u64, write: &Cmd) -> Option<Cmd> {
    if write.args_iter().len() == 0 {
        return None;
    }
    let mut cmd = redis::cmd("LOCK.FENCED");
    cmd.arg(fence_key).arg(token);
    for arg in write.args_iter() {
        match arg {
            redis::Arg::Simple(bytes) => cmd.arg(bytes),
            _ => return None,
        };
    }
    Some(cmd)
}

/// The store refused a fenced write: its fence has accepted a higher token
/// (the error code `STALE`, from `LOCK.FENCED` or `LOCK.FENCECHECK`).
pub fn is_stale(error: &redis::RedisError) -> bool {
    error.code() == Some("STALE")
}

/// The same for an error as text (another language's client gives the
/// server's error line, its code first).
pub fn is_stale_message(message: &str) -> bool {
    message.split_whitespace().next() == Some("STALE")
}

/// `LOCK.INFO key`
pub fn info(key: &str) -> Cmd {
    let mut cmd = redis::cmd("LOCK.INFO");
    cmd.arg(key);
    cmd
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `LOCK.ACQUIRE`: a token (granted) or nil (busy).
pub fn parse_acquire(value: Value) -> Result<Reply, NodeError> {
    match value {
        Value::Nil => Ok(Reply::Busy),
        other => token(other).map(|token| Reply::Granted { token }),
    }
}

/// `LOCK.RELEASE`: holds left, or nil (not held).
pub fn parse_release(value: Value) -> Result<Reply, NodeError> {
    match value {
        Value::Nil => Ok(Reply::NotHeld),
        Value::Int(n) => u32::try_from(n)
            .map(|holds_left| Reply::Released { holds_left })
            .map_err(|_| unexpected("LOCK.RELEASE", &Value::Int(n))),
        other => Err(reply_error(other, "LOCK.RELEASE")),
    }
}

/// `LOCK.EXTEND`: 1 (extended) or 0 (not held).
pub fn parse_extend(value: Value) -> Result<Reply, NodeError> {
    match value {
        Value::Int(1) => Ok(Reply::Extended),
        Value::Int(0) => Ok(Reply::NotHeld),
        other => Err(reply_error(other, "LOCK.EXTEND")),
    }
}

/// `LOCK.FENCE`: the holder's token, or nil (not held).
pub fn parse_fence(value: Value) -> Result<Reply, NodeError> {
    match value {
        Value::Nil => Ok(Reply::NotHeld),
        other => token(other).map(|token| Reply::Fenced { token }),
    }
}

fn token(value: Value) -> Result<u64, NodeError> {
    match value {
        Value::Int(n) => {
            u64::try_from(n).map_err(|_| unexpected("a fencing token", &Value::Int(n)))
        }
        other => Err(reply_error(other, "a fencing token")),
    }
}

/// An error reply becomes [`NodeError::Reply`]; anything else the contract
/// does not allow becomes [`NodeError::UnexpectedReply`].
fn reply_error(value: Value, expected: &str) -> NodeError {
    match value {
        Value::ServerError(error) => NodeError::Reply(match error.details() {
            Some(details) => format!("{} {details}", error.code()),
            None => error.code().to_string(),
        }),
        other => unexpected(expected, &other),
    }
}

fn unexpected(expected: &str, value: &Value) -> NodeError {
    NodeError::UnexpectedReply(format!("expected {expected}, got {value:?}"))
}

/// A snapshot of a lock on one node, from `LOCK.INFO`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// The holder's owner id (lossily decoded if it is not UTF-8).
    pub owner: String,
    pub holds: u32,
    pub token: u64,
    /// Time left in the lease.
    pub pttl: Duration,
    /// Clients blocked in `LOCK.ACQUIRE … WAIT` for this lock.
    pub waiters: u64,
}

/// One node's `LOCK.INFO` answer: `Ok(None)` when the lock is free there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub node: String,
    pub info: Result<Option<LockInfo>, NodeError>,
}

/// `LOCK.INFO`: nil, or field/value pairs (a flat array under RESP2, a map
/// under RESP3).
pub fn parse_info(value: Value) -> Result<Option<LockInfo>, NodeError> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Nil => return Ok(None),
        Value::Map(pairs) => pairs,
        Value::Array(items) if items.len() % 2 == 0 => {
            let mut items = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(field), Some(value)) = (items.next(), items.next()) {
                pairs.push((field, value));
            }
            pairs
        }
        other => return Err(reply_error(other, "LOCK.INFO fields")),
    };
    let mut owner = None;
    let (mut holds, mut token, mut pttl, mut waiters) = (None, None, None, None);
    for (field, value) in pairs {
        match text(&field).as_deref() {
            Some("owner") => owner = text(&value),
            Some("holds") => holds = integer(&value).and_then(|n| u32::try_from(n).ok()),
            Some("token") => token = integer(&value).and_then(|n| u64::try_from(n).ok()),
            Some("pttl") => pttl = integer(&value).and_then(|n| u64::try_from(n).ok()),
            Some("waiters") => waiters = integer(&value).and_then(|n| u64::try_from(n).ok()),
            // Fields added by later module versions are not our concern.
            _ => {}
        }
    }
    match (owner, holds, token, pttl) {
        (Some(owner), Some(holds), Some(token), Some(pttl)) => Ok(Some(LockInfo {
            owner,
            holds,
            token,
            pttl: Duration::from_millis(pttl),
            waiters: waiters.unwrap_or(0),
        })),
        _ => Err(NodeError::UnexpectedReply(
            "LOCK.INFO lacks owner, holds, token or pttl".into(),
        )),
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => text(other)?.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_refusal_is_told_by_its_code_word() {
        assert!(is_stale_message(
            "STALE fencing token 5 refused: fence:7 has accepted 9"
        ));
        assert!(!is_stale_message("STALEMATE"));
        assert!(!is_stale_message("ERR STALE"));
        assert!(!is_stale_message(""));
    }

    fn args(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<not a plain argument>".into(),
            })
            .collect()
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn commands_follow_the_contract() {
        let ms = Duration::from_millis;
        let exclusive = Kind::Exclusive;
        assert_eq!(
            args(&acquire("k", "o", ms(30_000), exclusive, None)),
            ["LOCK.ACQUIRE", "k", "o", "30000"]
        );
        assert_eq!(
            args(&acquire("k", "o", ms(100), exclusive, Some(ms(2_500)))),
            ["LOCK.ACQUIRE", "k", "o", "100", "WAIT", "2500"]
        );
        // A sub-millisecond wait must not become WAIT 0 (wait forever).
        assert_eq!(
            args(&acquire(
                "k",
                "o",
                ms(100),
                exclusive,
                Some(Duration::from_micros(300))
            ))[5],
            "1"
        );
        assert_eq!(
            args(&acquire("k", "o", ms(100), Kind::SHARED, Some(ms(5)))),
            ["LOCK.ACQUIRE", "k", "o", "100", "SHARED", "WAIT", "5"]
        );
        let three = std::num::NonZeroU32::new(3).unwrap();
        assert_eq!(
            args(&acquire("k", "o", ms(100), Kind::permit_of(three), None)),
            ["LOCK.ACQUIRE", "k", "o", "100", "SHARED", "LIMIT", "3"]
        );
        assert_eq!(args(&release("k", "o", false)), ["LOCK.RELEASE", "k", "o"]);
        assert_eq!(
            args(&release("k", "o", true)),
            ["LOCK.RELEASE", "k", "o", "ALL"]
        );
        assert_eq!(
            args(&extend("k", "o", ms(7))),
            ["LOCK.EXTEND", "k", "o", "7"]
        );
        assert_eq!(args(&fence("k", "o", None)), ["LOCK.FENCE", "k", "o"]);
        assert_eq!(
            args(&fence("k", "o", Some(42))),
            ["LOCK.FENCE", "k", "o", "ATLEAST", "42"]
        );
        assert_eq!(args(&info("k")), ["LOCK.INFO", "k"]);
    }

    #[test]
    fn acquire_replies() {
        assert_eq!(
            parse_acquire(Value::Int(17)),
            Ok(Reply::Granted { token: 17 })
        );
        assert_eq!(parse_acquire(Value::Nil), Ok(Reply::Busy));
        assert!(matches!(
            parse_acquire(Value::Int(-1)),
            Err(NodeError::UnexpectedReply(_))
        ));
        assert!(matches!(
            parse_acquire(Value::Okay),
            Err(NodeError::UnexpectedReply(_))
        ));
    }

    #[test]
    fn release_extend_and_fence_replies() {
        assert_eq!(
            parse_release(Value::Int(0)),
            Ok(Reply::Released { holds_left: 0 })
        );
        assert_eq!(
            parse_release(Value::Int(2)),
            Ok(Reply::Released { holds_left: 2 })
        );
        assert_eq!(parse_release(Value::Nil), Ok(Reply::NotHeld));
        assert!(parse_release(Value::Int(-3)).is_err());
        assert_eq!(parse_extend(Value::Int(1)), Ok(Reply::Extended));
        assert_eq!(parse_extend(Value::Int(0)), Ok(Reply::NotHeld));
        assert!(parse_extend(Value::Int(2)).is_err());
        assert!(parse_extend(Value::Nil).is_err());
        assert_eq!(parse_fence(Value::Int(9)), Ok(Reply::Fenced { token: 9 }));
        assert_eq!(parse_fence(Value::Nil), Ok(Reply::NotHeld));
    }

    #[test]
    fn info_reads_flat_arrays_and_maps() {
        let fields = [
            ("owner", bulk("me")),
            ("holds", Value::Int(2)),
            ("token", Value::Int(99)),
            ("pttl", Value::Int(1500)),
            ("waiters", Value::Int(1)),
        ];
        let expected = LockInfo {
            owner: "me".into(),
            holds: 2,
            token: 99,
            pttl: Duration::from_millis(1500),
            waiters: 1,
        };
        let flat = Value::Array(
            fields
                .iter()
                .flat_map(|(f, v)| [bulk(f), v.clone()])
                .collect(),
        );
        assert_eq!(parse_info(flat), Ok(Some(expected.clone())));
        let map = Value::Map(fields.iter().map(|(f, v)| (bulk(f), v.clone())).collect());
        assert_eq!(parse_info(map), Ok(Some(expected)));
        assert_eq!(parse_info(Value::Nil), Ok(None));
        assert!(parse_info(Value::Array(vec![bulk("owner")])).is_err());
        assert!(parse_info(Value::Array(vec![bulk("owner"), bulk("x")])).is_err());
    }

    #[test]
    fn a_fenced_write_wraps_the_command_with_the_fence_and_token() {
        let mut write = redis::cmd("HSET");
        write.arg("h").arg("f").arg(b"v\0".as_slice());
        let cmd = fenced("fence:{a}", 42, &write).unwrap();
        assert_eq!(
            args(&cmd),
            ["LOCK.FENCED", "fence:{a}", "42", "HSET", "h", "f", "v\0"]
        );
        assert!(fenced("f", 1, &Cmd::new()).is_none());
        let mut scan = redis::cmd("SCAN");
        scan.cursor_arg(0);
        assert!(fenced("f", 1, &scan).is_none());
    }
}
