//! Operations on a held lock: extend, release, fencing token. Extend and
//! release run as tasks of their own (`detached`): a caller that stops
//! waiting still gets the ledger updated after an extension that may have
//! shortened leases, and a release that has begun always finishes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::handle::{answers, detached, trace_outcomes, LockCore, State};
use crate::ledger::Answer;
use crate::metrics;
use crate::outcome::{Extended, Release, Reply};
use crate::protocol;

impl LockCore {
    #[cfg_attr(
        feature = "tracing",
        tracing::instrument(level = "debug", skip(self), fields(resource = %self.resource(), owner = %self.owner()), err(Display))
    )]
    pub(crate) async fn extend(self: &Arc<Self>, ttl: Duration) -> Result<Extended> {
        let core = Arc::clone(self);
        let result = detached(async move {
            let _op = core.op().await;
            if core.state().holds == 0 {
                return Err(Error::NotHeld);
            }
            if core.validity().is_none() {
                return Err(Error::Expired);
            }
            let cmd = protocol::extend(core.resource(), core.owner(), ttl);
            let round = core.round(&cmd, protocol::parse_extend).await;
            trace_outcomes(&round.outcomes);
            let confirmed = round.count(|r| matches!(r, Reply::Extended));
            let not_held = round.count(|r| matches!(r, Reply::NotHeld));
            let quorum = core.quorum();
            let drift = core.drift(ttl);
            let mut state = core.state();
            // A renewal counts only if it finished while the lock was still
            // certainly ours: after that, the confirmations prove nothing
            // about the time in between. Either way the round may have
            // shortened leases, and the ledger takes that in.
            let in_time = state
                .ledger
                .valid_until(quorum)
                .is_some_and(|until| Instant::now() < until);
            let mut answers = answers(&round);
            if !in_time {
                for answer in &mut answers {
                    if matches!(answer, Answer::Holds(_)) {
                        *answer = Answer::Unknown;
                    }
                }
            }
            // The negative control's old rule needs the ledger of before.
            let before = core
                .client()
                .config()
                .unsafe_keep_validity_on_failure
                .then(|| state.ledger.clone());
            state.ledger.apply(round.started, ttl, drift, &answers);
            core.changed();
            let validity = state.ledger.validity(quorum);
            match validity {
                Some(validity) if confirmed >= quorum && in_time => Ok(Extended {
                    validity,
                    confirmed,
                    not_held,
                    quorum,
                    outcomes: round.outcomes,
                }),
                _ if !in_time => Err(Error::Expired),
                _ => {
                    if let Some(before) = before {
                        state.ledger = before;
                    }
                    Err(Error::QuorumLost {
                        confirmed,
                        quorum,
                        outcomes: round.outcomes,
                    })
                }
            }
        })
        .await;
        if !matches!(result, Err(Error::NotHeld)) {
            metrics::extension(result.is_ok());
        }
        result
    }

    #[cfg_attr(
        feature = "tracing",
        tracing::instrument(level = "debug", skip(self), fields(resource = %self.resource(), owner = %self.owner()), err(Display))
    )]
    pub(crate) async fn release(self: &Arc<Self>, all: bool) -> Result<Release> {
        let core = Arc::clone(self);
        detached(async move {
            let _op = core.op().await;
            let quorum = core.quorum();
            {
                let mut state = core.state();
                match state.holds {
                    0 => return Err(Error::NotHeld),
                    1 => {}
                    _ if all => {}
                    holds => {
                        // Inner releases stay local: a node that missed an
                        // earlier acquisition would free the lock on a
                        // per-node RELEASE while the others kept it, and the
                        // holders could shrink below a quorum while we still
                        // believe we hold it.
                        state.holds = holds - 1;
                        return Ok(Release {
                            holds_left: state.holds,
                            released: 0,
                            not_held: 0,
                            failed: 0,
                            quorum,
                            outcomes: Vec::new(),
                        });
                    }
                }
                *state = State::default();
                metrics::held(-1.0);
            }
            core.changed();
            let round = core.release_everywhere().await;
            trace_outcomes(&round.outcomes);
            let release = Ok(Release {
                holds_left: 0,
                released: round.count(|r| matches!(r, Reply::Released { .. })),
                not_held: round.count(|r| matches!(r, Reply::NotHeld)),
                failed: round.outcomes.iter().filter(|o| o.is_failure()).count(),
                quorum,
                outcomes: round.outcomes,
            });
            metrics::release(&release);
            release
        })
        .await
    }

    /// The fencing token of this hold: the highest token the nodes granted
    /// us, written back with `LOCK.FENCE … ATLEAST` to a majority before it
    /// is returned. The write-back replies carry each node's current token;
    /// if one is higher (a node granted us afresh in a round whose reply we
    /// missed), that value is written back instead. In cluster mode the
    /// token is then raised into every master's counter
    /// ([`Config::raise_cluster_counters`](crate::Config)). Refused once the
    /// validity has ended: a token is only worth something while the lock
    /// is certainly held.
    #[cfg_attr(
        feature = "tracing",
        tracing::instrument(level = "debug", skip(self), fields(resource = %self.resource(), owner = %self.owner()), err(Display))
    )]
    pub(crate) async fn fencing_token(&self) -> Result<u64> {
        let _op = self.op().await;
        let mut candidate = {
            let state = self.state();
            if state.holds == 0 {
                return Err(Error::NotHeld);
            }
            if state
                .ledger
                .valid_until(self.quorum())
                .map_or(true, |until| Instant::now() >= until)
            {
                return Err(Error::Expired);
            }
            if let Some(token) = state.fence {
                return Ok(token);
            }
            state.max_granted.unwrap_or(0)
        };
        let quorum = self.quorum();
        // Two rounds suffice while we hold the operation lock (no grant of
        // ours can raise our tokens in between); the validity bounds the
        // loop in any case.
        loop {
            let cmd = protocol::fence(self.resource(), self.owner(), Some(candidate));
            let round = self.round(&cmd, protocol::parse_fence).await;
            trace_outcomes(&round.outcomes);
            let settled = {
                let mut state = self.state();
                let mut tokens = Vec::new();
                for (node, outcome) in round.outcomes.iter().enumerate() {
                    if let Ok(Reply::Fenced { token }) = outcome.result {
                        state.ledger.saw_token(node, token);
                        tokens.push(token);
                    }
                }
                if state
                    .ledger
                    .valid_until(quorum)
                    .map_or(true, |until| Instant::now() >= until)
                {
                    return Err(Error::Expired);
                }
                if tokens.len() < quorum {
                    return Err(Error::QuorumLost {
                        confirmed: tokens.len(),
                        quorum,
                        outcomes: round.outcomes,
                    });
                }
                match tokens.iter().copied().max() {
                    Some(highest) if highest > candidate => {
                        candidate = highest;
                        state.max_granted = state.max_granted.max(Some(highest));
                        false
                    }
                    _ => true,
                }
            };
            if settled {
                break;
            }
        }
        // Cluster mode: every master's counter above the token before it is
        // handed out (the write-back's part there), so that a later grant
        // of the key on another master, after its slot moved, is higher. A
        // caller gone meanwhile leaves nothing cached: the next call raises
        // again.
        self.client().raise_cluster_counters(candidate).await;
        let mut state = self.state();
        if state
            .ledger
            .valid_until(quorum)
            .map_or(true, |until| Instant::now() >= until)
        {
            return Err(Error::Expired);
        }
        state.fence = Some(candidate);
        Ok(candidate)
    }
}
