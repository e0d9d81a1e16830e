//! The watchdog: a guard that keeps renewing a held lock and says so the
//! moment it can no longer be sure it holds it.

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::handle::LockCore;
use crate::lock::Lock;
use crate::outcome::{NodeOutcome, Release, Reply};

/// What a watchdog knows about its lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockStatus {
    /// Renewals keep succeeding.
    Held,
    /// Renewal could not reach a majority before the validity ended (or a
    /// majority said outright that we no longer hold it). `outcomes` are
    /// the last renewal's answers, if one finished.
    Lost { outcomes: Vec<NodeOutcome> },
    /// The watchdog was stopped or released; it no longer watches.
    Stopped,
}

/// A held lock whose lease is renewed every `ttl / 3` (configurable with
/// [`Config::watchdog_interval`](crate::Config::watchdog_interval)).
///
/// Renewal stops when the watchdog is released, stopped or dropped;
/// dropping it also releases the lock in the background (the watched
/// [`Lock`] is dropped with it). Select on
/// [`Watchdog::lost`] (or a [`Watchdog::status`] receiver) in the critical
/// section to stop working the moment the lock is gone:
///
/// ```no_run
/// # async fn demo(redlock: redis_lock_client::Redlock) -> Result<(), redis_lock_client::Error> {
/// use std::time::Duration;
///
/// let guard = redlock.acquire("reports:nightly", Duration::from_secs(5)).await?.watchdog()?;
/// tokio::select! {
///     status = guard.lost() => eprintln!("lock lost: {status:?}"),
///     _ = async { /* long work, well past the 5 s TTL */ } => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct Watchdog {
    // Dropped in this order: renewal stops before the lock releases itself.
    renewal: Renewal,
    lock: Lock,
    status: watch::Receiver<LockStatus>,
}

/// The renewal task, aborted when dropped. (A separate type so that
/// `Watchdog` needs no `Drop` of its own and can give its lock back.)
struct Renewal {
    task: Option<JoinHandle<()>>,
}

impl Renewal {
    /// Aborts the task and waits until it is gone, so that no renewal runs
    /// after this returns.
    async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

// The entry point lives here, so that the handle does not depend on the
// watchdog built on it.
impl Lock {
    /// Hands the held lock to a watchdog that renews it until it is
    /// released, dropped, or lost.
    pub fn watchdog(self) -> Result<Watchdog> {
        Watchdog::start(self)
    }
}

impl Watchdog {
    pub(crate) fn start(lock: Lock) -> Result<Watchdog> {
        if !lock.is_held() {
            return Err(Error::NotHeld);
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::Runtime("the watchdog needs a tokio runtime".into()))?;
        let (sender, status) = watch::channel(LockStatus::Held);
        let task = runtime.spawn(renew(Arc::clone(&lock.core), sender));
        Ok(Watchdog {
            renewal: Renewal { task: Some(task) },
            lock,
            status,
        })
    }

    /// Resolves when the watchdog stops watching: with [`LockStatus::Lost`]
    /// when the lock is lost, [`LockStatus::Stopped`] when it was stopped.
    /// The future is independent of `self`, so it can be selected on while
    /// the lock is used.
    pub fn lost(&self) -> impl Future<Output = LockStatus> + Send + 'static {
        let mut status = self.status.clone();
        async move {
            match status.wait_for(|s| *s != LockStatus::Held).await {
                Ok(status) => status.clone(),
                // The renewal task ended without reporting a loss: stopped.
                Err(_) => LockStatus::Stopped,
            }
        }
    }

    /// A receiver of status changes, for code that prefers a channel.
    pub fn status(&self) -> watch::Receiver<LockStatus> {
        self.status.clone()
    }

    /// Whether the lock has been lost: the watchdog reported the loss, or
    /// the handle still holds the lock but its validity has ended (the
    /// report may be a moment behind). Agrees with [`Watchdog::is_held`]:
    /// while the handle holds the lock, exactly one of them is true.
    pub fn is_lost(&self) -> bool {
        matches!(*self.status.borrow(), LockStatus::Lost { .. })
            || (self.lock.holds() > 0 && self.lock.validity().is_none())
    }

    /// Whether the lock is held and certainly valid, and no loss has been
    /// reported. The loss is reported the watchdog's margin before the
    /// validity ends, so from then on this is false while
    /// [`Lock::validity`] still shows the (honest) time left.
    pub fn is_held(&self) -> bool {
        !self.is_lost() && self.lock.is_held()
    }

    /// Stops renewing and releases every hold.
    pub async fn release(self) -> Result<Release> {
        let Watchdog { lock, renewal, .. } = self;
        renewal.stop().await;
        lock.release_all().await
    }

    /// Stops renewing and hands the lock back (still held until its lease
    /// ends or it is released).
    pub async fn stop(self) -> Lock {
        let Watchdog { lock, renewal, .. } = self;
        renewal.stop().await;
        lock
    }
}

impl Deref for Watchdog {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.lock
    }
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog")
            .field("lock", &self.lock)
            .field("status", &*self.status.borrow())
            .finish()
    }
}

/// What a watchdog keeps alive: a lease held on a quorum of nodes, renewed
/// by one round, that can say until when it is certainly held. A lock is
/// one; the shared locks and permits of the same command family are others.
pub(crate) trait Renewable: Send + Sync + 'static {
    /// Whether the handle still holds the lock (it did not release it),
    /// whether or not its validity has ended.
    fn holding(&self) -> bool;
    /// Until when the lease is certainly held; `None` once released or
    /// once no quorum of nodes certainly holds it any more.
    fn valid_until(&self) -> Option<std::time::Instant>;
    /// A receiver that wakes when the lease changed outside the watchdog's
    /// plan (an extension with another TTL, a re-entry, a release).
    fn changes(&self) -> watch::Receiver<()>;
    /// One renewal round: `Err(QuorumLost)` when fewer than a majority
    /// confirmed, `Err(Expired)` when the validity ended first.
    fn renew(self: &Arc<Self>) -> impl Future<Output = Result<()>> + Send;
    /// The renewal period, the per-node timeout, the loss margin and the
    /// quorum.
    fn timing(&self) -> Timing;
}

/// See [`Renewable::timing`].
pub(crate) struct Timing {
    pub interval: Duration,
    pub node_timeout: Duration,
    pub margin: Duration,
    pub quorum: usize,
}

impl Renewable for LockCore {
    fn holding(&self) -> bool {
        LockCore::holding(self)
    }

    fn valid_until(&self) -> Option<std::time::Instant> {
        LockCore::valid_until(self)
    }

    fn changes(&self) -> watch::Receiver<()> {
        LockCore::changes(self)
    }

    fn renew(self: &Arc<Self>) -> impl Future<Output = Result<()>> + Send {
        let core = Arc::clone(self);
        async move { core.extend(core.ttl()).await.map(|_| ()) }
    }

    fn timing(&self) -> Timing {
        let config = self.client().config();
        Timing {
            interval: config.watchdog_interval_for(self.ttl()),
            // A renewal round waits for its acknowledgements too.
            node_timeout: config.round_timeout(),
            margin: config.watchdog_margin,
            quorum: self.quorum(),
        }
    }
}

/// The renewal loop. Each renewal starts at the earlier of `interval`
/// after the last success and the last moment from which a renewal (one
/// per-node timeout) can still finish before the loss signal; after a
/// failure it retries quickly. The loss is signalled `margin` before the
/// validity ends, so that work selected on [`Watchdog::lost`] stops while
/// the lock is still certainly held, and at once when so many nodes deny
/// holding the lock that no majority is left to confirm it, or when the
/// handle, still holding, has no validity left (a failed round left fewer
/// than a quorum of lease bounds). However little validity is left, a
/// renewal is tried before a loss is reported. The loop re-plans whenever
/// the lease changes under it (an `extend_with` with a shorter TTL).
///
/// The loop ends without a loss only when the handle no longer holds the
/// lock (released through another handle): then the status says
/// [`LockStatus::Stopped`].
async fn renew<L: Renewable>(core: Arc<L>, status: watch::Sender<LockStatus>) {
    let Timing {
        interval,
        node_timeout,
        margin,
        quorum,
    } = core.timing();
    let retry_pause = (interval / 4).max(Duration::from_millis(1));
    let mut next = Instant::now() + interval;
    let mut last_outcomes = Vec::new();
    let mut changes = core.changes();
    loop {
        changes.borrow_and_update();
        if !core.holding() {
            // Released under us (through the guard's lock, or a context
            // handle): nothing to watch, and the status says so.
            let _ = status.send(LockStatus::Stopped);
            return;
        }
        let Some(until) = core.valid_until().map(Instant::from_std) else {
            // Still held, but no quorum certainly holds it any more.
            return report_lost(&status, last_outcomes);
        };
        let signal_at = until.checked_sub(margin).unwrap_or(until);
        let latest_start = signal_at.checked_sub(node_timeout).unwrap_or(signal_at);
        tokio::select! {
            () = tokio::time::sleep_until(next.min(latest_start)) => {}
            // The lease changed: plan again from the new validity.
            Ok(()) = changes.changed() => continue,
        }
        if Instant::now() >= signal_at {
            return report_lost(&status, last_outcomes);
        }
        tokio::select! {
            result = core.renew() => match result {
                Ok(_) => {
                    next = Instant::now() + interval;
                    last_outcomes.clear();
                }
                Err(Error::QuorumLost { outcomes, .. }) => {
                    if majority_denies(&outcomes, quorum) {
                        return report_lost(&status, outcomes);
                    }
                    last_outcomes = outcomes;
                    next = Instant::now() + retry_pause;
                }
                Err(Error::Expired) => {
                    return report_lost(&status, last_outcomes);
                }
                Err(_) => {
                    // Released through another handle (the loop's next turn
                    // sees it), or the round could not run: retry soon.
                    next = Instant::now() + retry_pause;
                }
            },
            () = tokio::time::sleep_until(signal_at) => {
                return report_lost(&status, last_outcomes);
            }
        }
    }
}

/// Tells the holder its lock is lost, with the last round's outcomes.
fn report_lost(status: &watch::Sender<LockStatus>, outcomes: Vec<NodeOutcome>) {
    crate::metrics::lost();
    let _ = status.send(LockStatus::Lost { outcomes });
}

/// Whether enough nodes answered "not held" that the rest cannot form a
/// majority: then the lock is gone now, whatever the validity says (for
/// example after nodes restarted without their data).
fn majority_denies(outcomes: &[NodeOutcome], quorum: usize) -> bool {
    let denied = outcomes
        .iter()
        .filter(|o| matches!(o.result, Ok(Reply::NotHeld)))
        .count();
    outcomes.len() - denied < quorum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NodeError;

    fn outcomes(replies: &[Option<Reply>]) -> Vec<NodeOutcome> {
        replies
            .iter()
            .map(|reply| NodeOutcome {
                node: "n".into(),
                result: reply.ok_or(NodeError::Timeout(Duration::from_millis(1))),
            })
            .collect()
    }

    #[test]
    fn only_a_majority_of_denials_is_a_certain_loss() {
        let not_held = Some(Reply::NotHeld);
        let extended = Some(Reply::Extended);
        // Two denials of five: three could still confirm.
        assert!(!majority_denies(
            &outcomes(&[not_held, not_held, extended, None, None]),
            3
        ));
        // Three denials of five: at most two can confirm.
        assert!(majority_denies(
            &outcomes(&[not_held, not_held, not_held, extended, extended]),
            3
        ));
        // Timeouts are not denials: the nodes may come back in time.
        assert!(!majority_denies(
            &outcomes(&[None, None, None, None, None]),
            3
        ));
    }
}
