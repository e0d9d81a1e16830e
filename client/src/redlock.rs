//! Redlock acquisition: one round to every node, won with a majority and a
//! positive validity, undone everywhere when lost; rounds retried with
//! random pauses until one wins, the retries or the deadline run out, or
//! the caller is gone.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::acquire::Patience;
use crate::error::{Error, NodeError, Result};
use crate::handle::{answers, trace_outcomes, Grant, LockCore};
use crate::ledger::Ledger;
use crate::outcome::{Acquired, NodeOutcome, Reply, Round};
use crate::protocol;
use crate::timing;

impl LockCore {
    /// One acquisition round. On failure every node is released at once (also
    /// those that did not answer: they may have granted after all), so that
    /// the next attempt, ours or another client's, does not have to wait for
    /// leases to end.
    pub(crate) async fn attempt(&self) -> std::result::Result<Grant, Round> {
        let cmd = protocol::acquire(self.resource(), self.owner(), self.ttl(), self.kind(), None);
        let round = self.round(&cmd, protocol::parse_acquire).await;
        let granted = round.count(|r| matches!(r, Reply::Granted { .. }));
        let mut ledger = self.new_ledger();
        ledger.apply(
            round.started,
            self.ttl(),
            self.drift(self.ttl()),
            &answers(&round),
        );
        let validity = ledger.validity(self.quorum());
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

    pub(crate) fn grant(&self, round: Round, ledger: Ledger, validity: Duration) -> Grant {
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
    pub(crate) async fn acquire_quorum(
        &self,
        patience: Patience,
        gone: oneshot::Receiver<()>,
    ) -> Result<Grant> {
        self.acquire_quorum_since(patience, gone, Instant::now())
            .await
    }

    /// [`LockCore::acquire_quorum`] for an acquisition that `started`
    /// earlier: its deadline counts from then.
    pub(crate) async fn acquire_quorum_since(
        &self,
        patience: Patience,
        mut gone: oneshot::Receiver<()>,
        started: Instant,
    ) -> Result<Grant> {
        let config = self.client().config();
        let deadline = patience.timeout(config).map(|timeout| started + timeout);
        let mut attempts = 0;
        loop {
            // Unbounded in number under `acquire_for`'s deadline.
            attempts = u32::saturating_add(attempts, 1);
            let last = match self.attempt().await {
                Ok(mut grant) => {
                    grant.acquired.attempts = attempts;
                    return Ok(grant);
                }
                Err(round) => round.outcomes,
            };
            trace_outcomes(&last);
            // Nodes that refuse the command itself (a TTL above their
            // `lock.max-ttl`, permits above `lock.max-holders`) refuse it
            // again: when the others cannot make a majority, no retry can
            // win, so the first refusal is the answer.
            let refusals: Vec<&NodeOutcome> = last
                .iter()
                .filter(|o| o.result.as_ref().is_err_and(NodeError::is_refusal))
                .collect();
            if refusals.len() > last.len().saturating_sub(self.quorum()) {
                if let Some(NodeOutcome {
                    node,
                    result: Err(error),
                }) = refusals.first().map(|o| (*o).clone())
                {
                    return Err(Error::Node { node, error });
                }
            }
            let retries_left = patience.retries_left(config, attempts);
            let delay = timing::random_retry_delay(config.retry_delay, config.retry_jitter);
            // Another attempt is one acquire round and one undo round after
            // the pause: start it only if it can end before the deadline.
            let fits = deadline.map_or(true, |deadline| {
                Instant::now() + delay + config.round_timeout() * 2 <= deadline
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
}
