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

impl std::error::Error for NodeError {}
