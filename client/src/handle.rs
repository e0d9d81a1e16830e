//! The shared core of a lock handle: what it believes about its lock (holds,
//! the per-node ledger, tokens) and the rounds it sends. Acquisition is in
//! `acquire.rs`, the operations on a held lock in `hold.rs`, the public
//! handle in `lock.rs`.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::{Cmd, Value};
use tokio::sync::OwnedMutexGuard;

use crate::error::{Error, NodeError, Result};
use crate::kind::Kind;
use crate::ledger::{Answer, Ledger};
use crate::outcome::{NodeOutcome, Reply, Round};
use crate::protocol;
use crate::quorum::Quorum;
use crate::timing;

/// What the handle believes about its lock.
#[derive(Clone, Debug, Default)]
pub(crate) struct State {
    /// Nested acquisitions not yet released.
    pub holds: u32,
    /// Per node: how long its lease certainly lasts, and its token.
    pub ledger: Ledger,
    /// The highest token any node granted us during this hold.
    pub max_granted: Option<u64>,
    /// The fencing token handed out during this hold (already written back
    /// to a quorum); cleared when a node may have granted afresh.
    pub fence: Option<u64>,
}

/// A fresh grant (Redlock or single-node), not yet recorded in the
/// handle's state (`acquire.rs` records it, or undoes it).
pub(crate) struct Grant {
    pub ledger: Ledger,
    pub max_granted: Option<u64>,
    pub acquired: crate::outcome::Acquired,
}

pub(crate) struct LockCore {
    client: Arc<Quorum>,
    resource: String,
    owner: String,
    ttl: Duration,
    kind: Kind,
    state: Mutex<State>,
    /// Serializes the operations of this handle (a watchdog renewal and a
    /// release must not interleave). Owned guards, so that an operation
    /// that outlives its caller (see `detached`) keeps it to the end.
    ops: Arc<tokio::sync::Mutex<()>>,
    /// Ticks whenever the ledger changed (an extension, a re-entry, a
    /// release), so that a watchdog re-plans at once (a shortened lease
    /// must not wait for a renewal planned for the longer one). Made when
    /// a watchdog first subscribes: most handles have none, and a channel
    /// (its allocation, its wake-up list walked on every change) was a
    /// part of each lock+unlock of the language packages.
    changes: std::sync::OnceLock<tokio::sync::watch::Sender<()>>,
}

/// The guard of a handle's operation lock.
pub(crate) type OpGuard = OwnedMutexGuard<()>;

impl LockCore {
    pub fn new(
        client: Arc<Quorum>,
        resource: String,
        owner: String,
        ttl: Duration,
        kind: Kind,
    ) -> LockCore {
        LockCore {
            client,
            resource,
            owner,
            ttl,
            kind,
            state: Mutex::new(State::default()),
            ops: Arc::new(tokio::sync::Mutex::new(())),
            changes: std::sync::OnceLock::new(),
        }
    }

    /// Tells the watchdog (if any) that the ledger changed. Before one
    /// subscribed there is no one to tell: a subscriber starts from the
    /// ledger as it is then.
    pub fn changed(&self) {
        if let Some(changes) = self.changes.get() {
            changes.send_modify(|_| {});
        }
    }

    /// A receiver that wakes on each [`LockCore::changed`] after this
    /// call.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<()> {
        self.changes
            .get_or_init(|| tokio::sync::watch::Sender::new(()))
            .subscribe()
    }

    /// Whether the handle holds the lock (released or not: its validity
    /// may have ended).
    pub fn holding(&self) -> bool {
        self.state().holds > 0
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        // The state is plain data updated in single assignments: a panic
        // elsewhere cannot leave it half-written, so poisoning is ignored.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits for the handle's other operations to finish.
    pub async fn op(&self) -> OpGuard {
        Arc::clone(&self.ops).lock_owned().await
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The nodes, the majority and the settings of the client.
    pub fn client(&self) -> &Quorum {
        &self.client
    }

    /// Nodes that must grant, extend or fence this lock: a majority, or
    /// for a permit of a semaphore enough that one holder more than the
    /// permits could not have won as many (`timing::permit_quorum`).
    pub fn quorum(&self) -> usize {
        match self.kind {
            Kind::Shared {
                permits: Some(permits),
            } if self.client.config().unsafe_quorum.is_none() => {
                timing::permit_quorum(self.client.nodes().len(), permits.get())
            }
            _ => self.client.quorum(),
        }
    }

    /// A ledger for this client's nodes.
    pub fn new_ledger(&self) -> Ledger {
        Ledger::new(self.client.nodes().len())
    }

    /// The drift allowance for leases of `ttl`.
    pub fn drift(&self, ttl: Duration) -> Duration {
        self.client.config().drift(ttl)
    }

    /// Until when a quorum certainly holds the lock for us, while held.
    pub fn valid_until(&self) -> Option<Instant> {
        let state = self.state();
        if state.holds == 0 {
            return None;
        }
        state.ledger.valid_until(self.quorum())
    }

    /// Time left in which the lock is certainly held, if any.
    pub fn validity(&self) -> Option<Duration> {
        let state = self.state();
        if state.holds == 0 {
            return None;
        }
        state.ledger.validity(self.quorum())
    }

    /// `cmd`, which sets leases or tokens (acquire, extend, fence), to
    /// every node of this lock's client at once, each bounded by the
    /// configured per-node timeout, with the acknowledgements the settings
    /// ask for.
    pub async fn round(
        &self,
        cmd: &Cmd,
        parse: fn(Value) -> std::result::Result<Reply, NodeError>,
    ) -> Round {
        self.client.round(cmd, parse, true).await
    }

    /// `LOCK.RELEASE key owner ALL` on every node at once.
    pub async fn release_everywhere(&self) -> Round {
        let cmd = protocol::release(&self.resource, &self.owner, true);
        self.client
            .round(&cmd, protocol::parse_release, false)
            .await
    }
}

impl Drop for LockCore {
    fn drop(&mut self) {
        // A hold nobody released (no runtime to release it on): the handle
        // stops holding with it.
        if self.state().holds > 0 {
            crate::metrics::held(-1.0);
        }
    }
}

/// What a node's answer to a lease-setting command (`ACQUIRE`, `EXTEND`)
/// tells the ledger.
pub(crate) fn answer(outcome: &NodeOutcome) -> Answer {
    match outcome.result {
        Ok(Reply::Granted { token }) => Answer::Holds(Some(token)),
        Ok(Reply::Extended) => Answer::Holds(None),
        Ok(Reply::Busy | Reply::NotHeld) => Answer::Denied,
        Ok(Reply::Released { .. } | Reply::Fenced { .. }) | Err(_) => Answer::Unknown,
    }
}

/// The answers of a round, for the ledger.
pub(crate) fn answers(round: &Round) -> Vec<Answer> {
    round.outcomes.iter().map(answer).collect()
}

/// Runs `work` as a task of its own and waits for it. If the caller stops
/// waiting (its future is dropped: a `select!`, a timeout, an aborted
/// task), the task still runs to its end, so a round that may have changed
/// the nodes is always followed by the bookkeeping (or the undo) that
/// belongs to it.
pub(crate) async fn detached<T: Send + 'static>(
    work: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    match tokio::spawn(work).await {
        Ok(result) => result,
        Err(error) => Err(Error::Runtime(format!("lock operation failed: {error}"))),
    }
}

/// Logs a node's outcomes (with the `tracing` feature).
#[cfg(feature = "tracing")]
pub(crate) fn trace_outcomes(outcomes: &[NodeOutcome]) {
    for outcome in outcomes {
        tracing::trace!(%outcome, "node outcome");
    }
}

#[cfg(not(feature = "tracing"))]
pub(crate) fn trace_outcomes(_: &[NodeOutcome]) {}
