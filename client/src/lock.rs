//! A lock handle: one resource, one owner id, and the Redlock rules for
//! acquiring, re-entering, extending, releasing and fencing it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::client::Redlock;
use redis::{Cmd, Value};

use crate::error::{Error, NodeError, Result};
use crate::fanout;
use crate::outcome::{Acquired, NodeOutcome, Release, Reply, Round};
use crate::protocol;
use crate::timing;
use crate::watchdog::Watchdog;

/// A lock on one resource, with its own random owner id.
///
/// Create it with [`Redlock::lock`] (or acquire in one step with
/// [`Redlock::acquire`]). All methods take `&self`; operations on one handle
/// run one at a time.
///
/// Dropping a handle that still holds the lock releases it in the
/// background (best effort, on the current tokio runtime); otherwise the
/// lease simply ends after its TTL.
pub struct Lock {
    pub(crate) core: Arc<LockCore>,
}

/// What the handle believes about its lock.
#[derive(Clone, Copy, Debug, Default)]
struct State {
    /// Nested acquisitions not yet released.
    holds: u32,
    /// Until when a quorum certainly holds the lock for us.
    valid_until: Option<Instant>,
    /// The highest token any node granted us during this hold.
    max_granted: Option<u64>,
    /// The fencing token handed out during this hold (already written back
    /// to a quorum).
    fence: Option<u64>,
}

pub(crate) struct LockCore {
    client: Redlock,
    resource: String,
    owner: String,
    ttl: Duration,
    state: Mutex<State>,
    /// Serializes the operations of this handle (a watchdog renewal and a
    /// release must not interleave).
    ops: tokio::sync::Mutex<()>,
}

impl Lock {
    pub(crate) fn new(client: Redlock, resource: String, owner: String, ttl: Duration) -> Lock {
        let core = LockCore {
            client,
            resource,
            owner,
            ttl,
            state: Mutex::new(State::default()),
            ops: tokio::sync::Mutex::new(()),
        };
        Lock {
            core: Arc::new(core),
        }
    }

    /// Acquires the lock, retrying until the retries or the acquire deadline
    /// run out (Redlock), or waiting on the node (single-node mode). When
    /// this handle already holds it, adds a hold instead (see reentrancy in
    /// the crate docs).
    pub async fn acquire(&self) -> Result<Acquired> {
        self.core.acquire(true).await
    }

    /// One attempt, no retry and no wait.
    pub async fn try_acquire(&self) -> Result<Acquired> {
        self.core.acquire(false).await
    }

    /// Renews the lease to the lock's TTL on every node that still holds it;
    /// succeeds when a majority confirms within the remaining validity, and
    /// returns the new validity.
    pub async fn extend(&self) -> Result<Duration> {
        self.core.extend(self.core.ttl).await
    }

    /// [`Lock::extend`] with another TTL.
    pub async fn extend_with(&self, ttl: Duration) -> Result<Duration> {
        self.core.client.config().validate_ttl(ttl)?;
        self.core.extend(ttl).await
    }

    /// Releases one hold; the last hold releases the lock on every node.
    pub async fn release(&self) -> Result<Release> {
        self.core.release(false).await
    }

    /// Releases every hold of this handle at once.
    pub async fn release_all(&self) -> Result<Release> {
        self.core.release(true).await
    }

    /// A fencing token greater than that of every earlier holder of this
    /// resource (see the crate docs for why). Computed on first use in each
    /// hold and then cached.
    pub async fn fencing_token(&self) -> Result<u64> {
        self.core.fencing_token().await
    }

    /// Time left in which the lock is certainly held, if it is.
    pub fn validity(&self) -> Option<Duration> {
        self.core.validity()
    }

    /// Whether the handle holds the lock and its validity has not ended.
    pub fn is_held(&self) -> bool {
        self.core.validity().is_some()
    }

    /// Nested acquisitions not yet released (0: not held).
    pub fn holds(&self) -> u32 {
        self.core.state().holds
    }

    /// The resource (the key on every node).
    pub fn resource(&self) -> &str {
        &self.core.resource
    }

    /// This handle's owner id, the same on every node.
    pub fn owner(&self) -> &str {
        &self.core.owner
    }

    /// The lease length used by acquire and extend.
    pub fn ttl(&self) -> Duration {
        self.core.ttl
    }

    /// Hands the held lock to a watchdog that renews it until it is
    /// released, dropped, or lost.
    pub fn watchdog(self) -> Result<Watchdog> {
        Watchdog::start(self)
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.core.state().holds == 0 {
            return;
        }
        // Free the resource for others now rather than after the TTL. Without
        // a runtime there is nothing to run the release on; the lease then
        // ends by itself.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let core = Arc::clone(&self.core);
            runtime.spawn(async move {
                let _ = core.release(true).await;
            });
        }
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.core.state();
        f.debug_struct("Lock")
            .field("resource", &self.core.resource)
            .field("owner", &self.core.owner)
            .field("ttl", &self.core.ttl)
            .field("holds", &state.holds)
            .field("validity", &self.core.validity())
            .finish()
    }
}

impl LockCore {
    fn state(&self) -> MutexGuard<'_, State> {
        // The state is plain data updated in single assignments: a panic
        // elsewhere cannot leave it half-written, so poisoning is ignored.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn resource(&self) -> &str {
        &self.resource
    }

    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    pub(crate) fn client(&self) -> &Redlock {
        &self.client
    }

    pub(crate) fn validity(&self) -> Option<Duration> {
        let state = self.state();
        if state.holds == 0 {
            return None;
        }
        state
            .valid_until?
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
    }

    pub(crate) fn valid_until(&self) -> Option<Instant> {
        let state = self.state();
        state.valid_until.filter(|_| state.holds > 0)
    }

    #[cfg_attr(
        feature = "tracing",
        tracing::instrument(level = "debug", skip(self), fields(resource = %self.resource, owner = %self.owner), err(Display))
    )]
    pub(crate) async fn acquire(&self, patient: bool) -> Result<Acquired> {
        let _op = self.ops.lock().await;
        if self.state().holds > 0 {
            return self.reenter().await;
        }
        if self.client.nodes().len() == 1 {
            self.acquire_single(patient).await
        } else {
            self.acquire_quorum(patient).await
        }
    }

    /// One acquisition round. On failure every node is released at once (also
    /// those that did not answer: they may have granted after all), so that
    /// the next attempt, ours or another client's, does not have to wait for
    /// leases to end.
    async fn attempt(&self) -> std::result::Result<(Round, Duration), Round> {
        let config = self.client.config();
        let cmd = protocol::acquire(&self.resource, &self.owner, self.ttl, None);
        let round = self.round(&cmd, protocol::parse_acquire).await;
        let granted = round.count(|r| matches!(r, Reply::Granted { .. }));
        let validity = timing::validity(self.ttl, round.elapsed, config.drift(self.ttl));
        match validity {
            Some(validity) if granted >= self.client.quorum() => Ok((round, validity)),
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

    /// Redlock: rounds with random pauses between them until one wins.
    async fn acquire_quorum(&self, patient: bool) -> Result<Acquired> {
        let config = self.client.config();
        let started = Instant::now();
        let deadline = config.acquire_timeout.map(|timeout| started + timeout);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let last = match self.attempt().await {
                Ok((round, validity)) => return Ok(self.granted(round, validity, attempts)),
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
            if !retries_left || !fits {
                return Err(Error::NotAcquired {
                    attempts,
                    elapsed: started.elapsed(),
                    outcomes: last,
                });
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// Single-node mode: one plain attempt, then (if the lock is busy and
    /// the caller is patient) a server-side wait with `WAIT`, which is
    /// granted in arrival order the moment the lock is free. There is no
    /// quorum to protect, so the node's failure is returned as such.
    async fn acquire_single(&self, patient: bool) -> Result<Acquired> {
        let config = self.client.config();
        let started = Instant::now();
        let round = match self.attempt().await {
            Ok((round, validity)) => return Ok(self.granted(round, validity, 1)),
            Err(round) => round,
        };
        let busy = round.count(|r| matches!(r, Reply::Busy)) == 1;
        if !busy {
            return Err(self.single_node_failure(round.outcomes));
        }
        let wait = config
            .acquire_timeout
            .unwrap_or_else(|| config.retry_budget())
            .saturating_sub(started.elapsed());
        if !patient || wait.is_zero() {
            return Err(Error::NotAcquired {
                attempts: 1,
                elapsed: started.elapsed(),
                outcomes: round.outcomes,
            });
        }
        let Some(node) = self.client.nodes().first() else {
            return Err(Error::InvalidConfig("no nodes".into()));
        };
        let cmd = protocol::acquire(&self.resource, &self.owner, self.ttl, Some(wait));
        let sent = Instant::now();
        let result = node
            .call_blocking(&cmd, wait + config.node_timeout)
            .await
            .and_then(protocol::parse_acquire);
        let outcome = NodeOutcome {
            node: node.name().to_string(),
            result: result.clone(),
        };
        match result {
            Ok(Reply::Granted { token }) => {
                self.granted_after_wait(outcome, token, sent, started).await
            }
            Ok(_) => Err(Error::NotAcquired {
                attempts: 2,
                elapsed: started.elapsed(),
                outcomes: vec![outcome],
            }),
            Err(_) => {
                // A wait cut short on our side may still have been granted.
                self.release_everywhere().await;
                Err(self.single_node_failure(vec![outcome]))
            }
        }
    }

    /// A grant after waiting started somewhere between sending and the
    /// reply. Sending time is a safe lower bound for the lease start; when
    /// the wait was long that bound is poor, so the lease is renewed once
    /// to measure it again from now.
    async fn granted_after_wait(
        &self,
        outcome: NodeOutcome,
        token: u64,
        sent: Instant,
        started: Instant,
    ) -> Result<Acquired> {
        let config = self.client.config();
        let drift = config.drift(self.ttl);
        let mut valid_from = sent;
        let mut outcomes = vec![outcome];
        if sent.elapsed() > config.node_timeout {
            let cmd = protocol::extend(&self.resource, &self.owner, self.ttl);
            let round = self.round(&cmd, protocol::parse_extend).await;
            if round.count(|r| matches!(r, Reply::Extended)) < 1 {
                self.release_everywhere().await;
                return Err(Error::NotAcquired {
                    attempts: 2,
                    elapsed: started.elapsed(),
                    outcomes: round.outcomes,
                });
            }
            valid_from = round.started;
            outcomes = round.outcomes;
        }
        let validity = timing::validity(self.ttl, valid_from.elapsed(), drift);
        let Some(validity) = validity else {
            self.release_everywhere().await;
            return Err(Error::NotAcquired {
                attempts: 2,
                elapsed: started.elapsed(),
                outcomes,
            });
        };
        let mut state = self.state();
        *state = State {
            holds: 1,
            valid_until: Some(Instant::now() + validity),
            max_granted: Some(token),
            fence: None,
        };
        Ok(Acquired {
            validity,
            holds: 1,
            attempts: 2,
            outcomes,
        })
    }

    fn single_node_failure(&self, outcomes: Vec<NodeOutcome>) -> Error {
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

    /// Records a won round as the start of a new hold.
    fn granted(&self, round: Round, validity: Duration, attempts: u32) -> Acquired {
        let max_granted = round
            .outcomes
            .iter()
            .filter_map(NodeOutcome::granted_token)
            .max();
        let mut state = self.state();
        *state = State {
            holds: 1,
            valid_until: Some(round.started + round.elapsed + validity),
            max_granted,
            fence: None,
        };
        trace_outcomes(&round.outcomes);
        Acquired {
            validity,
            holds: 1,
            attempts,
            outcomes: round.outcomes,
        }
    }

    /// A nested acquisition: one round of `LOCK.ACQUIRE` with our owner id,
    /// which re-enters where we hold the lock and grants afresh where we lost
    /// it. Winning a majority is a valid acquisition either way; failing it
    /// leaves the earlier hold as it was (nothing is undone: the final
    /// release frees every hold with `ALL`).
    async fn reenter(&self) -> Result<Acquired> {
        let config = self.client.config();
        let cmd = protocol::acquire(&self.resource, &self.owner, self.ttl, None);
        let round = self.round(&cmd, protocol::parse_acquire).await;
        let granted = round.count(|r| matches!(r, Reply::Granted { .. }));
        let quorum = self.client.quorum();
        let validity = timing::validity(self.ttl, round.elapsed, config.drift(self.ttl));
        let Some(validity) = validity.filter(|_| granted >= quorum) else {
            return Err(Error::QuorumLost {
                confirmed: granted,
                quorum,
                outcomes: round.outcomes,
            });
        };
        let tokens = round.outcomes.iter().filter_map(NodeOutcome::granted_token);
        let mut state = self.state();
        state.holds = state.holds.saturating_add(1);
        state.valid_until = Some(round.started + round.elapsed + validity);
        state.max_granted = state.max_granted.into_iter().chain(tokens).max();
        Ok(Acquired {
            validity,
            holds: state.holds,
            attempts: 1,
            outcomes: round.outcomes,
        })
    }

    #[cfg_attr(
        feature = "tracing",
        tracing::instrument(level = "debug", skip(self), fields(resource = %self.resource, owner = %self.owner), err(Display))
    )]
    pub(crate) async fn extend(&self, ttl: Duration) -> Result<Duration> {
        let _op = self.ops.lock().await;
        if self.state().holds == 0 {
            return Err(Error::NotHeld);
        }
        let config = self.client.config();
        let cmd = protocol::extend(&self.resource, &self.owner, ttl);
        let round = self.round(&cmd, protocol::parse_extend).await;
        trace_outcomes(&round.outcomes);
        let confirmed = round.count(|r| matches!(r, Reply::Extended));
        let quorum = self.client.quorum();
        let validity = timing::validity(ttl, round.elapsed, config.drift(ttl));
        let mut state = self.state();
        // Renewal counts only if it finished while the lock was still
        // certainly ours: after that, the confirmations prove nothing about
        // the time in between.
        let in_time = state
            .valid_until
            .is_some_and(|until| Instant::now() < until);
        match validity {
            Some(validity) if confirmed >= quorum && in_time => {
                state.valid_until = Some(round.started + round.elapsed + validity);
                Ok(validity)
            }
            _ => Err(Error::QuorumLost {
                confirmed,
                quorum,
                outcomes: round.outcomes,
            }),
        }
    }

    #[cfg_attr(
        feature = "tracing",
        tracing::instrument(level = "debug", skip(self), fields(resource = %self.resource, owner = %self.owner), err(Display))
    )]
    pub(crate) async fn release(&self, all: bool) -> Result<Release> {
        let _op = self.ops.lock().await;
        let quorum = self.client.quorum();
        {
            let mut state = self.state();
            match state.holds {
                0 => return Err(Error::NotHeld),
                1 => {}
                _ if all => {}
                holds => {
                    // Inner releases stay local: a node that missed an
                    // earlier acquisition would free the lock on a per-node
                    // RELEASE while the others kept it, and the holders could
                    // shrink below a quorum while we still believe we hold it.
                    state.holds = holds - 1;
                    return Ok(Release {
                        holds_left: state.holds,
                        released: 0,
                        not_held: 0,
                        quorum,
                        outcomes: Vec::new(),
                    });
                }
            }
            *state = State::default();
        }
        let round = self.release_everywhere().await;
        trace_outcomes(&round.outcomes);
        Ok(Release {
            holds_left: 0,
            released: round.count(|r| matches!(r, Reply::Released { .. })),
            not_held: round.count(|r| matches!(r, Reply::NotHeld)),
            quorum,
            outcomes: round.outcomes,
        })
    }

    /// `LOCK.RELEASE key owner ALL` on every node at once.
    async fn release_everywhere(&self) -> Round {
        let cmd = protocol::release(&self.resource, &self.owner, true);
        self.round(&cmd, protocol::parse_release).await
    }

    /// `cmd` to every node of this lock's client at once, each bounded by
    /// the configured per-node timeout.
    async fn round(
        &self,
        cmd: &Cmd,
        parse: fn(Value) -> std::result::Result<Reply, NodeError>,
    ) -> Round {
        fanout::round(
            self.client.nodes(),
            cmd,
            self.client.config().node_timeout,
            parse,
        )
        .await
    }

    /// The fencing token of this hold: the highest token the nodes granted
    /// us, written back with `LOCK.FENCE … ATLEAST` to a majority before it
    /// is returned. The write-back replies carry each node's current token;
    /// if one is higher (a node granted us afresh in a round whose reply we
    /// missed), that value is written back instead.
    #[cfg_attr(
        feature = "tracing",
        tracing::instrument(level = "debug", skip(self), fields(resource = %self.resource, owner = %self.owner), err(Display))
    )]
    pub(crate) async fn fencing_token(&self) -> Result<u64> {
        let _op = self.ops.lock().await;
        let mut candidate = {
            let state = self.state();
            if state.holds == 0 {
                return Err(Error::NotHeld);
            }
            if let Some(token) = state.fence {
                return Ok(token);
            }
            state.max_granted.unwrap_or(0)
        };
        let quorum = self.client.quorum();
        // Two rounds suffice while we hold the operation lock (no grant can
        // raise our tokens in between); the third is slack, not a loop.
        let mut last = Vec::new();
        for _ in 0..3 {
            let cmd = protocol::fence(&self.resource, &self.owner, Some(candidate));
            let round = self.round(&cmd, protocol::parse_fence).await;
            trace_outcomes(&round.outcomes);
            let tokens: Vec<u64> = round
                .outcomes
                .iter()
                .filter_map(|o| match o.result {
                    Ok(Reply::Fenced { token }) => Some(token),
                    _ => None,
                })
                .collect();
            if tokens.len() < quorum {
                return Err(Error::QuorumLost {
                    confirmed: tokens.len(),
                    quorum,
                    outcomes: round.outcomes,
                });
            }
            match tokens.iter().copied().max() {
                Some(highest) if highest > candidate => candidate = highest,
                _ => {
                    self.state().fence = Some(candidate);
                    return Ok(candidate);
                }
            }
            last = round.outcomes;
        }
        Err(Error::QuorumLost {
            confirmed: 0,
            quorum,
            outcomes: last,
        })
    }
}

#[cfg(feature = "tracing")]
fn trace_outcomes(outcomes: &[NodeOutcome]) {
    for outcome in outcomes {
        tracing::trace!(%outcome, "node outcome");
    }
}

#[cfg(not(feature = "tracing"))]
fn trace_outcomes(_: &[NodeOutcome]) {}
