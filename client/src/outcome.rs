//! What each node answered, and the reports built from those answers.

use std::fmt;
use std::time::{Duration, Instant};

use crate::node_error::NodeError;

/// A node's answer to one lock command, in the module's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `LOCK.ACQUIRE`: we hold the lock there; its fencing token on that node.
    Granted { token: u64 },
    /// `LOCK.ACQUIRE`: another owner holds it there.
    Busy,
    /// `LOCK.EXTEND`: the lease there now lasts the full TTL again.
    Extended,
    /// `LOCK.RELEASE`: this many holds are left there (0: freed).
    Released { holds_left: u32 },
    /// `LOCK.FENCE`: our lock's token there (after any `ATLEAST` raise).
    Fenced { token: u64 },
    /// `LOCK.RELEASE`, `LOCK.EXTEND` or `LOCK.FENCE`: we do not hold the lock
    /// there (its lease ended, it was never granted there, or the node lost it).
    NotHeld,
}

/// One node's part in a round: its name (`host:port`) and what it answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeOutcome {
    pub node: String,
    pub result: Result<Reply, NodeError>,
}

impl NodeOutcome {
    /// The fencing token this node granted, if it granted the lock.
    pub fn granted_token(&self) -> Option<u64> {
        match self.result {
            Ok(Reply::Granted { token }) => Some(token),
            _ => None,
        }
    }

    /// Whether the node failed (timeout, connection, error reply) rather
    /// than answering the lock question.
    pub fn is_failure(&self) -> bool {
        self.result.is_err()
    }
}

impl fmt::Display for NodeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.result {
            Ok(Reply::Granted { token }) => write!(f, "{}: granted (token {token})", self.node),
            Ok(Reply::Busy) => write!(f, "{}: held by another owner", self.node),
            Ok(Reply::Extended) => write!(f, "{}: extended", self.node),
            Ok(Reply::Released { holds_left }) => {
                write!(f, "{}: released ({holds_left} left)", self.node)
            }
            Ok(Reply::Fenced { token }) => write!(f, "{}: token {token}", self.node),
            Ok(Reply::NotHeld) => write!(f, "{}: not held", self.node),
            Err(error) => write!(f, "{}: {error}", self.node),
        }
    }
}

/// The answers of every node to one command sent to all of them at once.
#[derive(Clone, Debug)]
pub(crate) struct Round {
    pub outcomes: Vec<NodeOutcome>,
    /// Just before the first command was sent: every node that ran the
    /// command ran it after this (the ledger's lease bounds start here).
    pub started: Instant,
}

impl Round {
    /// How many nodes answered with a reply for which `wanted` holds.
    pub fn count(&self, wanted: impl Fn(&Reply) -> bool) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.result.as_ref().is_ok_and(&wanted))
            .count()
    }
}

/// The result of a successful [`acquire`](crate::Lock::acquire).
#[derive(Clone, Debug, Default)]
pub struct Acquired {
    /// How long the lock is certainly ours from now on (at the time the
    /// acquisition finished): round start + ttl − drift − now.
    pub validity: Duration,
    /// Holds of this handle after this acquisition (1 for a fresh one).
    pub holds: u32,
    /// Attempts it took (1 when the first round won).
    pub attempts: u32,
    /// The winning round's answers, node by node.
    pub outcomes: Vec<NodeOutcome>,
}

/// The result of a successful [`extend`](crate::Lock::extend): a majority
/// renewed the lease in time. Nodes that no longer hold the lock are
/// counted, so that a lock kept by a bare majority is visible.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extended {
    /// How long the lock is certainly held from now on: until the
    /// `quorum`-th latest lease end the client can vouch for.
    pub validity: Duration,
    /// Nodes that renewed the lease.
    pub confirmed: usize,
    /// Nodes that answered that they do not hold it (lease ended there, or
    /// the node lost it).
    pub not_held: usize,
    /// The quorum of this client.
    pub quorum: usize,
    /// Every node's answer.
    pub outcomes: Vec<NodeOutcome>,
}

impl Extended {
    /// Nodes that did not renew: they said they do not hold the lock, or
    /// did not answer.
    pub fn missing(&self) -> usize {
        self.outcomes.len().saturating_sub(self.confirmed)
    }
}

/// The result of a [`release`](crate::Lock::release).
///
/// A release after the lease ended is not an error: it is reported here with
/// [`Release::lapsed`], so a critical section that overran its validity is
/// visible instead of hidden.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Release {
    /// Holds of this handle left. When it is above 0 the nodes were not
    /// contacted (see the reentrancy notes in the crate docs).
    pub holds_left: u32,
    /// Nodes that still held our lock and freed it now.
    pub released: usize,
    /// Nodes that answered that they did not hold it any more (lease ended
    /// or state lost).
    pub not_held: usize,
    /// Nodes that did not answer (timeout, connection, error reply): what
    /// they held is unknown; a lease there ends by itself.
    pub failed: usize,
    /// The quorum of this client.
    pub quorum: usize,
    /// Every node's answer (empty when the nodes were not contacted).
    pub outcomes: Vec<NodeOutcome>,
}

impl Release {
    /// Whether so many nodes answered "not held" that fewer than a quorum
    /// can have held the lock when it was released: its lease had certainly
    /// ended, so another owner may have held it before this release. Nodes
    /// that did not answer are not counted as lapsed (see
    /// [`Release::confirmed`]).
    pub fn lapsed(&self) -> bool {
        self.holds_left == 0
            && !self.outcomes.is_empty()
            && self.outcomes.len().saturating_sub(self.not_held) < self.quorum
    }

    /// Whether a majority confirmed that they held the lock until this
    /// release freed it.
    pub fn confirmed(&self) -> bool {
        self.holds_left > 0 || self.released >= self.quorum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(result: Result<Reply, NodeError>) -> NodeOutcome {
        NodeOutcome {
            node: "n".into(),
            result,
        }
    }

    #[test]
    fn round_counts_only_matching_replies() {
        let round = Round {
            outcomes: vec![
                outcome(Ok(Reply::Granted { token: 5 })),
                outcome(Ok(Reply::Busy)),
                outcome(Err(NodeError::Timeout(Duration::from_millis(5)))),
                outcome(Ok(Reply::Granted { token: 7 })),
            ],
            started: Instant::now(),
        };
        assert_eq!(round.count(|r| matches!(r, Reply::Granted { .. })), 2);
        assert_eq!(round.count(|r| matches!(r, Reply::Busy)), 1);
        assert_eq!(round.outcomes[3].granted_token(), Some(7));
        assert!(round.outcomes[2].is_failure());
        assert!(!round.outcomes[1].is_failure());
    }

    #[test]
    fn a_release_is_lapsed_only_when_the_denials_leave_no_quorum() {
        let freed = |released, not_held, failed| Release {
            holds_left: 0,
            released,
            not_held,
            failed,
            quorum: 3,
            outcomes: vec![outcome(Ok(Reply::NotHeld)); released + not_held + failed],
        };
        assert!(!freed(3, 2, 0).lapsed());
        assert!(freed(3, 2, 0).confirmed());
        assert!(freed(2, 3, 0).lapsed());
        assert!(freed(0, 5, 0).lapsed());
        // Slow nodes are not lapsed ones: the lock may be intact there.
        assert!(!freed(2, 0, 3).lapsed());
        assert!(!freed(2, 0, 3).confirmed());
        assert!(!freed(0, 2, 3).lapsed());
        let nested = Release {
            holds_left: 1,
            quorum: 3,
            ..Release::default()
        };
        assert!(!nested.lapsed());
        assert!(nested.confirmed());
    }
}
