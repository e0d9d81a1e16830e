//! How one node can fail to answer. Below every other file of the crate:
//! outcomes and errors both speak of it.

use std::fmt;
use std::time::Duration;

/// Why one node did not give a usable answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeError {
    /// No reply within the per-node timeout (a slow, paused or partitioned
    /// node). The command may still run on the node later.
    Timeout(Duration),
    /// The connection failed (refused, dropped, reset).
    Connection(String),
    /// The node replied with an error, e.g. a syntax error, `WRONGTYPE`, or a
    /// node still in its recovery window refusing new acquisitions.
    Reply(String),
    /// The node replied with something the module contract does not allow
    /// (for example a module that is not loaded, or another version).
    UnexpectedReply(String),
    /// The node made the change but did not acknowledge it as
    /// [`Config::acknowledge`](crate::Config::acknowledge) asks (too few
    /// replicas, or not fsynced, within the timeout): counted as failed.
    Unacknowledged(String),
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Timeout(after) => write!(f, "no reply within {} ms", after.as_millis()),
            NodeError::Connection(why) => write!(f, "connection failed: {why}"),
            NodeError::Reply(message) => write!(f, "error reply: {message}"),
            NodeError::UnexpectedReply(what) => write!(f, "unexpected reply: {what}"),
            NodeError::Unacknowledged(why) => write!(f, "not acknowledged: {why}"),
        }
    }
}

impl NodeError {
    /// Whether this is a refusal the node will repeat for the same command
    /// whatever happens meanwhile: an argument the module rejects (a TTL
    /// above `lock.max-ttl`, permits above `lock.max-holders`, an owner
    /// above `lock.max-owner-bytes`, a malformed command). Retrying it only
    /// hides the node's message; transient errors (a node in its recovery
    /// window, `LOADING`, `BUSY`, `TRYAGAIN`, `OOM`, a replica's `READONLY`)
    /// are not refusals.
    pub(crate) fn is_refusal(&self) -> bool {
        const REFUSALS: [&str; 8] = [
            "(lock.max-ttl)",
            "(lock.max-holders)",
            "(lock.max-owner-bytes)",
            "ttl-ms must be",
            "LIMIT must be",
            "LIMIT requires SHARED",
            "owner must not be empty",
            "wrong number of arguments",
        ];
        match self {
            NodeError::Reply(message) => REFUSALS.iter().any(|r| message.contains(r)),
            _ => false,
        }
    }
}

impl std::error::Error for NodeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_modules_argument_errors_are_refusals() {
        let refusals = [
            "ERR ttl-ms must be an integer between 1 and 5000 (lock.max-ttl)",
            "ERR LIMIT must be an integer between 1 and 4 (lock.max-holders)",
            "ERR owner must be at most 8 bytes (lock.max-owner-bytes)",
            "ERR wrong number of arguments",
        ];
        for message in refusals {
            assert!(NodeError::Reply(message.into()).is_refusal(), "{message}");
        }
        let transient = [
            "LOADING Redis is loading the dataset in memory",
            "BUSY Redis is busy running a script",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "READONLY You can't write against a read only replica.",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "RECOVERING this node refuses new locks for another 1200 ms (lock.recovery-ms)",
            "ERR LIMIT 2 does not match the lock's LIMIT 3",
        ];
        for message in transient {
            assert!(!NodeError::Reply(message.into()).is_refusal(), "{message}");
        }
        assert!(!NodeError::Connection("(lock.max-ttl)".into()).is_refusal());
    }
}
