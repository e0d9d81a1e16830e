//! Typed errors. A failing node is never an error on its own: its failure is
//! recorded as a [`NodeOutcome`] and only decides the result through the
//! quorum count. The variants say which rule was not met.

use std::fmt;
use std::time::Duration;

pub use crate::node_error::NodeError;
use crate::outcome::NodeOutcome;

/// Everything the client can fail with.
#[derive(Debug)]
pub enum Error {
    /// No attempt won a majority with positive validity before the retries
    /// or the acquire deadline ran out. `outcomes` are the last attempt's.
    NotAcquired {
        attempts: u32,
        elapsed: Duration,
        outcomes: Vec<NodeOutcome>,
    },
    /// An operation on a held lock (extend, re-entry, fencing token) could
    /// not be confirmed by a majority within the lock's validity: the caller
    /// must assume the lock is lost.
    QuorumLost {
        confirmed: usize,
        quorum: usize,
        outcomes: Vec<NodeOutcome>,
    },
    /// The lock's validity ended before the operation (extend, fencing
    /// token) could be confirmed, or before it started: another owner may
    /// hold the lock now. Acquire it again.
    Expired,
    /// The only node of a single-node client failed (with one node there is
    /// no quorum to fall back on, so its failure is the answer), or so many
    /// nodes refused the command itself that no majority is left (a TTL
    /// above their `lock.max-ttl`, permits above `lock.max-holders`): such
    /// a refusal is not retried, and `error` is the node's message.
    Node { node: String, error: NodeError },
    /// The lock was lost while a closure ran under it; the closure was
    /// cancelled (async) or finished after the loss (blocking).
    LockLost,
    /// The handle holds nothing: it was never acquired, or already released.
    /// Releasing twice is a bug in the caller, so it is not silently accepted.
    NotHeld,
    /// A configuration or argument that can never work (no nodes, a bad URL,
    /// a TTL shorter than the per-node timeout plus drift, …).
    InvalidConfig(String),
    /// No usable async runtime: the async API was called outside tokio, or
    /// the blocking API on a runtime's worker thread (inside an async task;
    /// use `tokio::task::spawn_blocking` there).
    Runtime(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotAcquired {
                attempts,
                elapsed,
                outcomes,
            } => {
                write!(
                    f,
                    "lock not acquired after {attempts} attempt(s) in {} ms",
                    elapsed.as_millis()
                )?;
                write_outcomes(f, outcomes)
            }
            Error::QuorumLost {
                confirmed,
                quorum,
                outcomes,
            } => {
                write!(
                    f,
                    "lock lost: {confirmed} node(s) confirmed, {quorum} needed"
                )?;
                write_outcomes(f, outcomes)
            }
            Error::Node { node, error } => write!(f, "node {node}: {error}"),
            Error::Expired => write!(
                f,
                "the lock's validity has ended: another owner may hold it now"
            ),
            Error::LockLost => write!(f, "the lock was lost while the critical section ran"),
            Error::NotHeld => write!(f, "the lock handle holds nothing"),
            Error::InvalidConfig(why) => write!(f, "invalid configuration: {why}"),
            Error::Runtime(why) => write!(f, "runtime: {why}"),
        }
    }
}

fn write_outcomes(f: &mut fmt::Formatter<'_>, outcomes: &[NodeOutcome]) -> fmt::Result {
    if outcomes.is_empty() {
        return Ok(());
    }
    write!(f, " (")?;
    for (i, outcome) in outcomes.iter().enumerate() {
        if i > 0 {
            write!(f, ", ")?;
        }
        write!(f, "{outcome}")?;
    }
    write!(f, ")")
}

impl std::error::Error for Error {}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
