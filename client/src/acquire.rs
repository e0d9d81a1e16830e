//! Acquisition: Redlock rounds with retries, the single-node server-side
//! wait, and re-entry. Every path runs as a task of its own (`detached`),
//! so a caller that stops waiting never leaves grants behind: a grant won
//! for a caller that is gone is released in the background (`Won`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::handle::{answers, detached, trace_outcomes, LockCore, OpGuard, State};
use crate::ledger::Ledger;
use crate::outcome::{Acquired, NodeOutcome, Reply, Round};
use crate::protocol;
use crate::timing;

/// A fresh grant, not yet recorded in the handle's state.
struct Grant {
    ledger: Ledger,
    max_granted: Option<u64>,
    acquired: Acquired,
}

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

impl LockCore {
    #[cfg_attr(
        feature = "tracing",
        tracing::instrument(level = "debug", skip(self), fields(resource = %self.resource(), owner = %self.owner()), err(Display))
    )]
    pub(crate) async fn acquire(self: &Arc<Self>, patient: bool) -> Result<Acquired> {
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
                core.acquire_single(patient, gone, op).await
            } else {
                (core.acquire_quorum(patient, gone).await, Some(op))
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

    /// One acquisition round. On failure every node is released at once (also
    /// those that did not answer: they may have granted after all), so that
    /// the next attempt, ours or another client's, does not have to wait for
    /// leases to end.
    async fn attempt(&self) -> std::result::Result<Grant, Round> {
        let cmd = protocol::acquire(self.resource(), self.owner(), self.ttl(), None);
        let round = self.round(&cmd, protocol::parse_acquire).await;
        let granted = round.count(|r| matches!(r, Reply::Granted { .. }));
        let mut ledger = self.new_ledger();
        ledger.apply(
            round.started,
            self.ttl(),
            self.drift(self.ttl()),
            &answers(&round),
        );
        let validity = ledger
            .valid_until(self.quorum())
            .and_then(|until| until.checked_duration_since(Instant::now()))
            .filter(|left| !left.is_zero());
        match validity {
            Some(validity) if granted >= self.quorum() => Ok(self.grant(round, ledger, validity)),
            _ => {
                // Nodes that all answered "busy" granted nothing to undo.
                if round
                    .outcomes
                    .iter()
                    .any(|o| o.granted_token().is_some() || o.is_failure())
                {
                    self.release_everywhere().await;
                }
                Err(round)
            }
        }
    }

    fn grant(&self, round: Round, ledger: Ledger, validity: Duration) -> Grant {
        trace_outcomes(&round.outcomes);
        Grant {
            ledger,
            max_granted: round
                .outcomes
                .iter()
                .filter_map(NodeOutcome::granted_token)
                .max(),
            acquired: Acquired {
                validity,
                holds: 1,
                attempts: 1,
                outcomes: round.outcomes,
            },
        }
    }

    /// Redlock: rounds with random pauses between them until one wins.
    async fn acquire_quorum(
        &self,
        patient: bool,
        mut gone: oneshot::Receiver<()>,
    ) -> Result<Grant> {
        let config = self.client().config();
        let started = Instant::now();
        let deadline = config.acquire_timeout.map(|timeout| started + timeout);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let last = match self.attempt().await {
                Ok(mut grant) => {
                    grant.acquired.attempts = attempts;
                    return Ok(grant);
                }
                Err(round) => round.outcomes,
            };
            trace_outcomes(&last);
            let retries_left = patient && attempts <= config.retry_count;
            let delay = timing::random_retry_delay(config.retry_delay, config.retry_jitter);
            // Another attempt is one acquire round and one undo round after
            // the pause: start it only if it can end before the deadline.
            let fits = deadline.map_or(true, |deadline| {
                Instant::now() + delay + config.node_timeout * 2 <= deadline
            });
            let not_acquired = || Error::NotAcquired {
                attempts,
                elapsed: started.elapsed(),
                outcomes: last.clone(),
            };
            if !retries_left || !fits {
                return Err(not_acquired());
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                // The caller is gone: no further attempt.
                _ = &mut gone => return Err(not_acquired()),
            }
        }
    }

    /// Single-node mode: one plain attempt, then (if the lock is busy and
    /// the caller is patient) a server-side wait with `WAIT`, which is
    /// granted in arrival order the moment the lock is free. There is no
    /// quorum to protect, so the node's failure is returned as such.
    ///
    /// The wait ends by the acquire deadline: the server waits for the time
    /// left minus one per-node timeout (the allowance for the reply). A wait
    /// whose reply does not come in time, or whose caller is gone, is undone
    /// on its own connection, after the wait there, so the undo can never
    /// reach the node before a late grant.
    ///
    /// Returns the operation lock unless an undo in the background took it.
    async fn acquire_single(
        &self,
        patient: bool,
        gone: oneshot::Receiver<()>,
        op: OpGuard,
    ) -> (Result<Grant>, Option<OpGuard>) {
        let mut op = Some(op);
        let result = self.acquire_single_with(patient, gone, &mut op).await;
        (result, op)
    }

    async fn acquire_single_with(
        &self,
        patient: bool,
        mut gone: oneshot::Receiver<()>,
        op: &mut Option<OpGuard>,
    ) -> Result<Grant> {
        let config = self.client().config();
        let started = Instant::now();
        let round = match self.attempt().await {
            Ok(grant) => return Ok(grant),
            Err(round) => round,
        };
        let busy = round.count(|r| matches!(r, Reply::Busy)) == 1;
        if !busy {
            return Err(single_node_failure(round.outcomes));
        }
        let deadline = started
            + config
                .acquire_timeout
                .unwrap_or_else(|| config.retry_budget());
        let not_acquired = |attempts, outcomes| Error::NotAcquired {
            attempts,
            elapsed: started.elapsed(),
            outcomes,
        };
        let Some(node) = self.client().nodes().first() else {
            return Err(Error::InvalidConfig("no nodes".into()));
        };
        let room = deadline.saturating_duration_since(Instant::now());
        if !patient || room <= config.node_timeout {
            return Err(not_acquired(1, round.outcomes));
        }
        let outcome = |result| NodeOutcome {
            node: node.name().to_string(),
            result,
        };
        let mut conn = match node
            .open_waiting(config.node_timeout.min(room - config.node_timeout))
            .await
        {
            Ok(conn) => conn,
            Err(error) => return Err(single_node_failure(vec![outcome(Err(error))])),
        };
        // The timer starts once the connection is there.
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(config.node_timeout);
        if wait.is_zero() {
            return Err(not_acquired(1, round.outcomes));
        }
        let cmd = protocol::acquire(self.resource(), self.owner(), self.ttl(), Some(wait));
        let sent = Instant::now();
        let reply = tokio::select! {
            reply = tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), conn.send(&cmd)) => match reply {
                Ok(reply) => Some(reply.and_then(protocol::parse_acquire)),
                Err(_) => None,
            },
            _ = &mut gone => None,
        };
        match reply {
            Some(Ok(Reply::Granted { token })) => {
                let grant = self
                    .granted_after_wait(
                        outcome(Ok(Reply::Granted { token })),
                        token,
                        sent,
                        deadline,
                    )
                    .await;
                if grant.is_err() {
                    self.release_everywhere().await;
                }
                grant
            }
            Some(Ok(reply)) => Err(not_acquired(2, vec![outcome(Ok(reply))])),
            other => {
                // No answer in time (or the caller left): the wait may
                // still be granted. End it on the server and undo after it,
                // in the background, so that this returns by the deadline.
                // The undo keeps the operation lock until it is done.
                let unblock = conn.unblock_command();
                let release = protocol::release(self.resource(), self.owner(), true);
                let timeout = config.node_timeout;
                let op = op.take();
                let mut shared = node.shared();
                tokio::spawn(async move {
                    if let Some(unblock) = unblock {
                        let _ = tokio::time::timeout(timeout, shared.send(&unblock)).await;
                    }
                    let undone = tokio::time::timeout(timeout, conn.send(&release)).await;
                    if !matches!(undone, Ok(Ok(_))) {
                        // The waiting connection broke: its wait ended with
                        // it, and a grant made before that is released here.
                        let _ = tokio::time::timeout(timeout, shared.send(&release)).await;
                    }
                    drop(op);
                });
                let error = match other {
                    Some(Err(error)) => error,
                    _ => crate::error::NodeError::Timeout(sent.elapsed()),
                };
                Err(single_node_failure(vec![outcome(Err(error))]))
            }
        }
    }

    /// A grant after waiting started somewhere between sending and the
    /// reply. Sending time is a safe lower bound for the lease start; when
    /// the wait was long that bound is poor, so the lease is renewed once
    /// to measure it again from now, if that round fits before the deadline.
    async fn granted_after_wait(
        &self,
        outcome: NodeOutcome,
        token: u64,
        sent: Instant,
        deadline: Instant,
    ) -> Result<Grant> {
        let config = self.client().config();
        let drift = self.drift(self.ttl());
        let mut ledger = self.new_ledger();
        ledger.apply(
            sent,
            self.ttl(),
            drift,
            &[crate::ledger::Answer::Holds(Some(token))],
        );
        let mut outcomes = vec![outcome];
        if sent.elapsed() > config.node_timeout && Instant::now() + config.node_timeout <= deadline
        {
            let cmd = protocol::extend(self.resource(), self.owner(), self.ttl());
            let round = self.round(&cmd, protocol::parse_extend).await;
            ledger.apply(round.started, self.ttl(), drift, &answers(&round));
            outcomes = round.outcomes;
        }
        let validity = ledger
            .valid_until(1)
            .and_then(|until| until.checked_duration_since(Instant::now()))
            .filter(|left| !left.is_zero());
        let Some(validity) = validity else {
            return Err(Error::NotAcquired {
                attempts: 2,
                elapsed: sent.elapsed(),
                outcomes,
            });
        };
        Ok(Grant {
            ledger,
            max_granted: Some(token),
            acquired: Acquired {
                validity,
                holds: 1,
                attempts: 2,
                outcomes,
            },
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
        let cmd = protocol::acquire(self.resource(), self.owner(), self.ttl(), None);
        let round = self.round(&cmd, protocol::parse_acquire).await;
        trace_outcomes(&round.outcomes);
        let granted = round.count(|r| matches!(r, Reply::Granted { .. }));
        let quorum = self.quorum();
        let mut state = self.state();
        let before = state.ledger.clone();
        let fresh = state.ledger.apply(
            round.started,
            self.ttl(),
            self.drift(self.ttl()),
            &answers(&round),
        );
        if fresh {
            state.fence = None;
        }
        let tokens = round.outcomes.iter().filter_map(NodeOutcome::granted_token);
        state.max_granted = state.max_granted.into_iter().chain(tokens).max();
        let validity = state
            .ledger
            .valid_until(quorum)
            .and_then(|until| until.checked_duration_since(Instant::now()))
            .filter(|left| !left.is_zero());
        match validity {
            Some(validity) if granted >= quorum => Ok(Acquired {
                validity,
                holds: state.holds,
                attempts: 1,
                outcomes: round.outcomes,
            }),
            _ => {
                if self.client().config().unsafe_keep_validity_on_failure {
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

fn single_node_failure(outcomes: Vec<NodeOutcome>) -> Error {
    match outcomes.into_iter().next() {
        Some(NodeOutcome {
            node,
            result: Err(error),
        }) => Error::Node { node, error },
        Some(outcome) => Error::NotAcquired {
            attempts: 1,
            elapsed: Duration::ZERO,
            outcomes: vec![outcome],
        },
        None => Error::InvalidConfig("no nodes".into()),
    }
}
