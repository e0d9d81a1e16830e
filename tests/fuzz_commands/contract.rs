//! The oracle: the commands, what each call must get (defects and the
//! errors they call for), and the shape of a valid reply.

#![allow(unused_imports)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::generator::*;
use crate::rng::*;
use crate::runner::*;
use crate::*;
use redis::{Connection, Value};
use testkit::{wait_until, RedisServer, ServerOptions};

/// A reason a call must be refused, with the error it calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Defect {
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
pub(crate) struct Limits {
    pub(crate) max_ttl: u64,
    pub(crate) max_owner: usize,
    pub(crate) debug: bool,
}

impl Defect {
    pub(crate) fn accepts(self, line: &str, limits: &Limits) -> bool {
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
pub(crate) enum Command {
    Acquire,
    Release,
    Extend,
    Fence,
    Info,
    Apply,
    Debug,
}

pub(crate) const COMMANDS: [Command; 7] = [
    Command::Acquire,
    Command::Release,
    Command::Extend,
    Command::Fence,
    Command::Info,
    Command::Apply,
    Command::Debug,
];

impl Command {
    pub(crate) fn name(self) -> &'static str {
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
pub(crate) enum Expect {
    /// Must succeed with a reply of the command's shape.
    Valid,
    /// Must fail with an error one of these defects calls for.
    Invalid(Vec<Defect>),
    /// Junk: anything but a dead server.
    Unknown,
}

pub(crate) struct Call {
    pub(crate) command: Command,
    /// The command name (random case) and its arguments.
    pub(crate) args: Vec<Vec<u8>>,
    pub(crate) expect: Expect,
}

/// One argument and the defect it carries, if any.
pub(crate) type Arg = (Vec<u8>, Option<Defect>);

pub(crate) fn ok(bytes: impl Into<Vec<u8>>) -> Arg {
    (bytes.into(), None)
}

pub(crate) fn bad(bytes: impl Into<Vec<u8>>, defect: Defect) -> Arg {
    (bytes.into(), Some(defect))
}

/// Whether Redis would read `bytes` as an integer (docs/src/commands.md's rule: an
/// optional `-`, digits without a leading zero, no `+`, no spaces, in i64).
pub(crate) fn redis_int(bytes: &[u8]) -> Option<i64> {
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

/// Whether a successful reply has the shape its command promises.
pub(crate) fn well_formed(command: Command, reply: &Value) -> bool {
    match (command, reply) {
        (Command::Acquire, Value::Int(token)) => *token > 0,
        (Command::Acquire | Command::Release | Command::Fence | Command::Info, Value::Nil) => true,
        (Command::Release, Value::Int(left)) => *left >= 0,
        (Command::Extend, Value::Int(n)) => *n == 0 || *n == 1,
        (Command::Fence, Value::Int(token)) => *token > 0,
        // An exclusive lock: owner, holds, token, pttl, waiters, mode.
        (Command::Info, Value::Array(fields)) => fields.len() == 12,
        (Command::Debug, Value::Okay | Value::Int(_)) => true,
        _ => false,
    }
}
