//! Acquisition: the entry point, re-entry, and what happens to a fresh
//! grant (Redlock rounds in `redlock.rs`, the single-node wait in
//! `single.rs`). Every path runs as a task of its own (`detached`), so a
//! caller that stops waiting never leaves grants behind: a grant won for a
//! caller that is gone is released in the background (`Won`).

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::handle::{answers, detached, trace_outcomes, Grant, LockCore, OpGuard, State};
use crate::metrics::{self, AcquireOutcome};
use crate::outcome::{Acquired, NodeOutcome, Reply};
use crate::protocol;

/// A fresh grant on its way to the caller, with the handle's operation
/// lock. Recording it makes it the handle's hold; dropping it unrecorded
/// (the caller's future was dropped before it saw the result) releases the
/// grant on every node in the background, still under the operation lock,
/// so that no later operation of the handle runs before the undo.
struct Won {
    core: Arc<LockCore>,
    op: Option<OpGuard>,
    grant: Option<Grant>,
}

impl Won {
    fn record(mut self) -> Acquired {
        let grant = self.grant.take();
        let op = self.op.take();
        let Some(grant) = grant else {
            // Unreachable: a Won is recorded once, right after it is made.
            return Acquired::default();
        };
        metrics::held(1.0);
        *self.core.state() = State {
            holds: 1,
            ledger: grant.ledger,
            max_granted: grant.max_granted,
            fence: None,
        };
        drop(op);
        grant.acquired
    }
}

impl Drop for Won {
    fn drop(&mut self) {
        if self.grant.take().is_none() {
            return;
        }
        let (core, op) = (Arc::clone(&self.core), self.op.take());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let round = core.release_everywhere().await;
                trace_outcomes(&round.outcomes);
                drop(op);
            });
        }
    }
}

/// What an acquisition task hands back.
enum Taken {
    Fresh(Won),
    /// A re-entry; the caller adds the hold under the operation lock.
    Reentered(Acquired, OpGuard),
}

/// How long an acquisition may take.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Patience {
    /// One attempt, no retry and no wait.
    Once,
    /// The client's `retry_count` and `acquire_timeout`.
    Config,
    /// Until this long has passed (retries unbounded in number).
    For(std::time::Duration),
}

impl Patience {
    pub(crate) fn patient(self) -> bool {
        !matches!(self, Patience::Once)
    }

    /// The deadline's length: this call's (at most a year, as the
    /// client's settings), else the client's.
    pub(crate) fn timeout(self, config: &crate::Config) -> Option<std::time::Duration> {
        match self {
            Patience::For(wait) => Some(wait.min(crate::config::MAX_DURATION)),
            _ => config.acquire_timeout,
        }
    }

    /// Whether attempt number `attempts` may be followed by another.
    pub(crate) fn retries_left(self, config: &crate::Config, attempts: u32) -> bool {
        match self {
            Patience::Once => false,
            Patience::Config => attempts <= config.retry_count,
            Patience::For(_) => true,
        }
    }
}

impl LockCore {
    #[cfg_attr(
        feature = "tracing",
        tracing::instrument(level = "debug", skip(self), fields(resource = %self.resource(), owner = %self.owner()), err(Display))
    )]
    pub(crate) async fn acquire(self: &Arc<Self>, patience: Patience) -> Result<Acquired> {
        let started = Instant::now();
        let result = self.acquire_unrecorded(patience).await;
        let waited = match &result {
            Ok(acquired) => acquired.attempts > 1,
            Err(Error::NotAcquired { attempts, .. }) => *attempts > 1,
            Err(_) => false,
        };
        metrics::acquire(AcquireOutcome::of(&result), started.elapsed(), waited);
        result
    }

    async fn acquire_unrecorded(self: &Arc<Self>, patience: Patience) -> Result<Acquired> {
        let core = Arc::clone(self);
        // Dropped with the caller's future: the task stops retrying or
        // waiting when it sees the sender gone.
        let (_caller, gone) = oneshot::channel::<()>();
        let taken = detached(async move {
            let op = core.op().await;
            if core.state().holds > 0 {
                let acquired = core.reenter().await?;
                return Ok(Taken::Reentered(acquired, op));
            }
            let (grant, op) = if core.client().nodes().len() == 1 {
                core.acquire_single(patience, gone, op).await
            } else {
                (core.acquire_quorum(patience, gone).await, Some(op))
            };
            Ok(Taken::Fresh(Won {
                core,
                op,
                grant: Some(grant?),
            }))
        })
        .await?;
        Ok(match taken {
            Taken::Fresh(won) => won.record(),
            Taken::Reentered(mut acquired, op) => {
                let mut state = self.state();
                state.holds = state.holds.saturating_add(1);
                acquired.holds = state.holds;
                drop(op);
                acquired
            }
        })
    }

    /// A nested acquisition: one round of `LOCK.ACQUIRE` with our owner id,
    /// which re-enters where we hold the lock and grants afresh where we lost
    /// it. Winning a majority is a valid acquisition either way; failing it
    /// adds no hold (nothing is undone: the final release frees every hold
    /// with `ALL`). Either way the round reset leases (possibly shorter than
    /// before), which the ledger takes in; a node that may have granted
    /// afresh makes the cached fencing token stale.
    async fn reenter(&self) -> Result<Acquired> {
        let cmd = protocol::acquire(self.resource(), self.owner(), self.ttl(), self.kind(), None);
        let round = self.round(&cmd, protocol::parse_acquire).await;
        trace_outcomes(&round.outcomes);
        let granted = round.count(|r| matches!(r, Reply::Granted { .. }));
        let quorum = self.quorum();
        let mut state = self.state();
        // The negative control's old rule needs the ledger of before.
        let before = self
            .client()
            .config()
            .unsafe_keep_validity_on_failure
            .then(|| state.ledger.clone());
        let fresh = state.ledger.apply(
            round.started,
            self.ttl(),
            self.drift(self.ttl()),
            &answers(&round),
        );
        if fresh {
            state.fence = None;
        }
        self.changed();
        let tokens = round.outcomes.iter().filter_map(NodeOutcome::granted_token);
        state.max_granted = state.max_granted.into_iter().chain(tokens).max();
        let validity = state.ledger.validity(quorum);
        match validity {
            Some(validity) if granted >= quorum => Ok(Acquired {
                validity,
                holds: state.holds,
                attempts: 1,
                outcomes: round.outcomes,
            }),
            _ => {
                if let Some(before) = before {
                    state.ledger = before;
                }
                Err(Error::QuorumLost {
                    confirmed: granted,
                    quorum,
                    outcomes: round.outcomes,
                })
            }
        }
    }
}
