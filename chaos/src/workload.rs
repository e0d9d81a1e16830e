//! The clients: tasks that contend for a few resources through the Redlock
//! client, and make a fenced write to the checker in every hold.
//!
//! One hold: `acquire` (the window opens when it returns and lasts the
//! reported validity), `fencing_token`, work for part of the validity, the
//! fenced write, a little more work, then the window is closed and the lock
//! released. When the fault injector has asked for a client pause, the next
//! holder sleeps past its validity after taking its token and only then
//! writes: the GC pause of the Redlock debate.
//!
//! Resources are mutexes, read-write locks (a third of the holds write
//! under the exclusive lock and make the fenced write; the others read
//! under a shared lock and make a fenced read) and semaphores (each hold is
//! one permit; it does not use the store, the checker counts open permits).
//!
//! Holds come in styles: plain; extended to a shorter or longer TTL; a
//! re-entry (a second `acquire` on the held handle, then two releases); or
//! under a watchdog that renews across more than a TTL of work. After every
//! extension, re-entry or renewal, failed or not, the checker's window is
//! set to the validity the client reports then. Each style counts its
//! successes apart from its attempts (the floors are on successes), and an
//! extension or re-entry that fails otherwise than by losing the lock
//! (quorum lost, validity ended) is an unexpected error. Some acquisitions and
//! releases are cancelled mid-round (their futures dropped), as a
//! `select!` or a timeout would.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis_lock_client::{Error as LockError, Lock, LockStatus, NodeError, Redlock};

use crate::checker::{Checker, HoldKind, WriteOutcome};

/// How close to the end of the validity the client reported an edge hold
/// makes its fenced write.
pub const EDGE: Duration = Duration::from_millis(5);

/// Counters shared by the client tasks.
#[derive(Debug, Default)]
pub struct ClientStats {
    pub acquire_calls: AtomicU64,
    pub grants: AtomicU64,
    pub not_acquired: AtomicU64,
    pub fence_calls: AtomicU64,
    pub tokens: AtomicU64,
    /// `fencing_token` could not reach a quorum: the holder gave up.
    pub tokens_lost: AtomicU64,
    pub release_calls: AtomicU64,
    /// Releases after the lease had ended on a majority.
    pub releases_lapsed: AtomicU64,
    /// Client pauses performed (sleep past the validity before writing).
    pub pauses: AtomicU64,
    /// Of `grants`: readers of read-write locks, and semaphore permits.
    pub shared_grants: AtomicU64,
    pub permit_grants: AtomicU64,
    /// Errors other than "not acquired" / "quorum lost".
    pub other_errors: AtomicU64,
    /// A single node's "cannot reach it" (connection failed or timed out):
    /// with no quorum to fall back on the client returns it, and a killed
    /// or stopped node is expected to cause it. Counted apart.
    pub node_unavailable: AtomicU64,
    /// Client tasks that panicked (counted when the phase ends).
    pub panicked: AtomicU64,
    first_error: Mutex<Option<String>>,
    pub styles: StyleStats,
}

/// How often each hold style and cancellation happened.
#[derive(Debug, Default)]
pub struct StyleStats {
    /// Extensions tried; of them, those a majority confirmed, and those
    /// that lost the lock (quorum lost, validity ended: any other error is
    /// an unexpected one and fails the run).
    pub extends: AtomicU64,
    pub extended: AtomicU64,
    pub extends_failed: AtomicU64,
    /// Re-entries tried, those that added a hold, and those that lost the
    /// lock.
    pub reentries: AtomicU64,
    pub reentered: AtomicU64,
    pub reentries_failed: AtomicU64,
    /// Holds under a watchdog, those it kept to the end of their work, and
    /// those it reported lost.
    pub watchdogs: AtomicU64,
    pub watchdogs_kept: AtomicU64,
    pub watchdog_losses: AtomicU64,
    pub cancelled_acquires: AtomicU64,
    pub cancelled_releases: AtomicU64,
    /// Holds through `Redlock::with_lock`, those whose body ran to its
    /// write, and those it reported lost.
    pub scoped: AtomicU64,
    pub scoped_ran: AtomicU64,
    pub scoped_lost: AtomicU64,
    /// Holds through the blocking API, those that held the lock to their
    /// write, and its `with_lock`s reported lost.
    pub blocking: AtomicU64,
    pub blocking_held: AtomicU64,
    pub blocking_lost: AtomicU64,
    /// Plain holds kept to within [`EDGE`] of the end of the validity the
    /// client reported, then left to lapse (the next holder gets the lock
    /// when the nodes' leases end, not on a release), and of those, the
    /// ones whose fenced write at the edge was accepted.
    pub edge_holds: AtomicU64,
    pub edge_written: AtomicU64,
}

/// [`StyleStats`] read out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StyleFigures {
    pub extends: u64,
    pub extended: u64,
    pub extends_failed: u64,
    pub reentries: u64,
    pub reentered: u64,
    pub reentries_failed: u64,
    pub watchdogs: u64,
    pub watchdogs_kept: u64,
    pub watchdog_losses: u64,
    pub cancelled_acquires: u64,
    pub cancelled_releases: u64,
    pub scoped: u64,
    pub scoped_ran: u64,
    pub scoped_lost: u64,
    pub blocking: u64,
    pub blocking_held: u64,
    pub blocking_lost: u64,
    pub edge_holds: u64,
    pub edge_written: u64,
}

impl StyleStats {
    pub fn figures(&self) -> StyleFigures {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StyleFigures {
            extends: get(&self.extends),
            extended: get(&self.extended),
            extends_failed: get(&self.extends_failed),
            reentries: get(&self.reentries),
            reentered: get(&self.reentered),
            reentries_failed: get(&self.reentries_failed),
            watchdogs: get(&self.watchdogs),
            watchdogs_kept: get(&self.watchdogs_kept),
            watchdog_losses: get(&self.watchdog_losses),
            cancelled_acquires: get(&self.cancelled_acquires),
            cancelled_releases: get(&self.cancelled_releases),
            scoped: get(&self.scoped),
            scoped_ran: get(&self.scoped_ran),
            scoped_lost: get(&self.scoped_lost),
            blocking: get(&self.blocking),
            blocking_held: get(&self.blocking_held),
            blocking_lost: get(&self.blocking_lost),
            edge_holds: get(&self.edge_holds),
            edge_written: get(&self.edge_written),
        }
    }
}

impl StyleFigures {
    pub fn add(&mut self, other: &StyleFigures) {
        self.extends += other.extends;
        self.extended += other.extended;
        self.extends_failed += other.extends_failed;
        self.reentries += other.reentries;
        self.reentered += other.reentered;
        self.reentries_failed += other.reentries_failed;
        self.watchdogs += other.watchdogs;
        self.watchdogs_kept += other.watchdogs_kept;
        self.watchdog_losses += other.watchdog_losses;
        self.cancelled_acquires += other.cancelled_acquires;
        self.cancelled_releases += other.cancelled_releases;
        self.scoped += other.scoped;
        self.scoped_ran += other.scoped_ran;
        self.scoped_lost += other.scoped_lost;
        self.blocking += other.blocking;
        self.blocking_held += other.blocking_held;
        self.blocking_lost += other.blocking_lost;
        self.edge_holds += other.edge_holds;
        self.edge_written += other.edge_written;
    }
}

impl std::fmt::Display for StyleFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "extend {} ({} extended, {} lost the lock), re-entry {} ({} re-entered, {} lost), watchdog {} ({} kept, {} lost), with_lock {} ({} ran, {} lost), blocking API {} ({} held, {} with_lock lost), to the validity's edge {} ({} wrote); cancelled acquires {}, releases {}",
            self.extends,
            self.extended,
            self.extends_failed,
            self.reentries,
            self.reentered,
            self.reentries_failed,
            self.watchdogs,
            self.watchdogs_kept,
            self.watchdog_losses,
            self.scoped,
            self.scoped_ran,
            self.scoped_lost,
            self.blocking,
            self.blocking_held,
            self.blocking_lost,
            self.edge_holds,
            self.edge_written,
            self.cancelled_acquires,
            self.cancelled_releases
        )
    }
}

impl ClientStats {
    pub(crate) fn note_error(&self, error: &LockError) {
        // Only a single node's client reports a node's own error: one that
        // is down, stopped or still loading its data after a restart.
        if let LockError::Node { error, .. } = error {
            let unavailable = match error {
                NodeError::Connection(_) | NodeError::Timeout(_) => true,
                NodeError::Reply(text) => text.contains("LOADING"),
                _ => false,
            };
            if unavailable {
                self.node_unavailable.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        self.other_errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(error.to_string());
        }
    }

    pub fn first_error(&self) -> Option<String> {
        self.first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A resource the clients contend for.
#[derive(Clone, Debug)]
pub struct Resource {
    pub name: String,
    pub kind: ResourceKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceKind {
    Mutex,
    /// Writers exclusive, readers shared.
    ReadWrite,
    /// A semaphore of this many permits.
    Semaphore(u32),
}

/// What the clients do.
#[derive(Clone, Debug)]
pub struct Workload {
    pub clients: usize,
    pub resources: Vec<Resource>,
    pub ttl_ms: RangeInclusive<u64>,
    /// The share of plain holds kept to the edge of their validity.
    pub edge_share: f64,
    pub seed: u64,
}

/// Maps a node name in the client's outcomes (`host:port`) to its index.
pub type NodeIndex = Arc<dyn Fn(&str) -> Option<usize> + Send + Sync>;

/// Shared by the client tasks and the fault injector.
pub struct Shared {
    pub redlock: Redlock,
    pub checker: Arc<Checker>,
    pub stats: Arc<ClientStats>,
    /// Client pauses the injector asked for and no holder performed yet.
    pub pause_requests: Arc<AtomicU64>,
    pub stop: Arc<AtomicBool>,
    /// Node index for a node name in the client's outcomes.
    pub node_index: NodeIndex,
    /// The held-after-validity control's defect: the holders answer "do
    /// you hold it" with `holds() > 0`, which ignores the validity (what an
    /// `is_held()` that forgot the clock would say).
    pub held_ignores_validity: bool,
}

impl Clone for Shared {
    fn clone(&self) -> Self {
        Shared {
            redlock: self.redlock.clone(),
            checker: self.checker.clone(),
            stats: self.stats.clone(),
            pause_requests: self.pause_requests.clone(),
            stop: self.stop.clone(),
            node_index: self.node_index.clone(),
            held_ignores_validity: self.held_ignores_validity,
        }
    }
}

impl Shared {
    /// Asks `lock` whether it holds the lock (`is_held()`) and tells the
    /// checker, which finds a yes after the validity a violation. For a
    /// handle that nothing renews in the background.
    pub(crate) fn ask_held(&self, id: crate::checker::HolderId, lock: &Lock) {
        let asked = Instant::now();
        let says = if self.held_ignores_validity {
            lock.holds() > 0
        } else {
            lock.is_held()
        };
        self.checker.held_claim(id, asked, says);
    }

    /// The indexes of the nodes that granted `acquired`.
    pub(crate) fn granting_nodes(&self, acquired: &redis_lock_client::Acquired) -> Vec<usize> {
        acquired
            .outcomes
            .iter()
            .filter(|o| o.granted_token().is_some())
            .filter_map(|o| (self.node_index)(&o.node))
            .collect()
    }
}

fn take_pause_request(requests: &AtomicU64) -> bool {
    requests
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

/// Starts the client tasks; they stop after `shared.stop` is set, once
/// their current hold is over.
/// Starts the client tasks, client `c` in group `c % groups.len()`: on that
/// group's runtime (in the network phase, one per client namespace) with
/// that group's client object.
pub fn spawn(
    workload: &Workload,
    groups: &[(Shared, tokio::runtime::Handle)],
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..workload.clients)
        .filter_map(|client| {
            let (shared, runtime) = groups.get(client % groups.len().max(1))?;
            let shared = shared.clone();
            let workload = workload.clone();
            let seed = workload
                .seed
                .wrapping_add(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(client as u64 + 1));
            Some(runtime.spawn(async move {
                client_loop(client, workload, shared, StdRng::seed_from_u64(seed)).await;
            }))
        })
        .collect()
}

async fn client_loop(client: usize, workload: Workload, shared: Shared, mut rng: StdRng) {
    let stats = &shared.stats;
    while !shared.stop.load(Ordering::Relaxed) {
        let Resource { name, kind } =
            &workload.resources[rng.random_range(0..workload.resources.len())];
        let resource = name.as_str();
        let ttl = Duration::from_millis(rng.random_range(workload.ttl_ms.clone()));
        let write = rng.random_bool(1.0 / 3.0);
        // One mutex hold in sixteen goes through `Redlock::with_lock`.
        let scoped_work = ttl.mul_f64(rng.random_range(0.1..=2.0));
        if *kind == ResourceKind::Mutex && rng.random_bool(1.0 / 16.0) {
            crate::scoped::hold(&shared, client, resource, ttl, scoped_work).await;
            pause(&mut rng, 0..=30).await;
            continue;
        }
        let (made, kind) = match *kind {
            ResourceKind::Mutex => (shared.redlock.lock(resource, ttl), HoldKind::Exclusive),
            ResourceKind::ReadWrite if write => {
                (shared.redlock.lock(resource, ttl), HoldKind::Exclusive)
            }
            ResourceKind::ReadWrite => {
                (shared.redlock.lock_shared(resource, ttl), HoldKind::Shared)
            }
            ResourceKind::Semaphore(permits) => (
                shared
                    .redlock
                    .semaphore(resource, permits)
                    .and_then(|s| s.permit(ttl)),
                HoldKind::Permit(permits),
            ),
        };
        let mut lock = match made {
            Ok(lock) => lock,
            Err(error) => {
                // Counted (and failing the run); the task goes on.
                stats.note_error(&error);
                pause(&mut rng, 0..=50).await;
                continue;
            }
        };
        let acquire_started = Instant::now();
        stats.acquire_calls.fetch_add(1, Ordering::Relaxed);
        // One acquisition in eight is abandoned after up to 30 ms (often in
        // the middle of a round): it must leave no grant behind.
        let cancel_after = rng
            .random_bool(0.125)
            .then(|| Duration::from_millis(rng.random_range(0..=30)));
        let attempt = match cancel_after {
            Some(after) => match tokio::time::timeout(after, lock.acquire()).await {
                Ok(result) => result,
                Err(_) => {
                    stats
                        .styles
                        .cancelled_acquires
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            },
            None => lock.acquire().await,
        };
        let acquired = match attempt {
            Ok(acquired) => acquired,
            Err(LockError::NotAcquired { .. }) => {
                stats.not_acquired.fetch_add(1, Ordering::Relaxed);
                pause(&mut rng, 0..=50).await;
                continue;
            }
            Err(error) => {
                stats.note_error(&error);
                pause(&mut rng, 0..=50).await;
                continue;
            }
        };
        let window_start = Instant::now();
        // The validity the client reported with the grant: never empty (an
        // acquisition succeeds only with some left), so every holder's
        // window takes part in the checks.
        let validity = acquired.validity;
        let granted_by = shared.granting_nodes(&acquired);
        let id = shared.checker.begin_hold(
            resource,
            client,
            acquire_started,
            window_start,
            validity,
            granted_by,
        );
        shared.checker.set_kind(id, kind);
        stats.grants.fetch_add(1, Ordering::Relaxed);
        match kind {
            HoldKind::Exclusive => {}
            HoldKind::Shared => {
                stats.shared_grants.fetch_add(1, Ordering::Relaxed);
            }
            HoldKind::Permit(_) => {
                stats.permit_grants.fetch_add(1, Ordering::Relaxed);
            }
        }

        stats.fence_calls.fetch_add(1, Ordering::Relaxed);
        let token = match lock.fencing_token().await {
            Ok(token) => token,
            Err(error) => {
                note_lost(stats, &error);
                shared.ask_held(id, &lock);
                shared.checker.end_hold(id);
                release(&lock, stats).await;
                continue;
            }
        };
        stats.tokens.fetch_add(1, Ordering::Relaxed);
        shared.checker.set_token(id, token);

        // Draw every random value of the hold whether or not it pauses, so
        // that a task's choices do not depend on the injector's timing.
        let work_before = rng.random_range(0.05..=0.6);
        let work_after = rng.random_range(0.0..=0.3);
        let overrun = Duration::from_millis(rng.random_range(100..=600));
        let style = rng.random_range(0..8u8);
        let factor = rng.random_range(0.3..=2.0);
        let cancel_release = rng.random_bool(0.125);
        // A plain hold (no extension, re-entry or watchdog) is kept to the
        // edge of its validity this often.
        let edge_draw = rng.random_bool(workload.edge_share);
        let to_the_edge = style >= 4 && edge_draw;
        let mut at_the_edge = false;
        let mut holds = 1;
        let mut token = token;
        let hold = Hold {
            shared: &shared,
            id,
            ttl,
            ttl_max: Duration::from_millis(*workload.ttl_ms.end()),
        };
        match style {
            // Extended to a shorter or longer TTL.
            0 | 1 => hold.extend(&lock, ttl.mul_f64(factor)).await,
            // A re-entry: one more hold, and the token asked for again.
            2 => {
                let reentered = hold.reenter(&lock).await;
                if reentered {
                    holds += 1;
                    // The write uses the token asked for now; the checker
                    // keeps the grant's first one for its order checks.
                    match lock.fencing_token().await {
                        Ok(again) => token = again,
                        Err(error) => note_lost(stats, &error),
                    }
                }
            }
            _ => {}
        }
        if style == 3 {
            // Under a watchdog, work for up to twice the TTL; the lock goes
            // back to the handle (still held) for the write and release.
            match hold.watched(lock, ttl.mul_f64(factor)).await {
                Some(back) => lock = back,
                None => {
                    shared.checker.end_hold(id);
                    pause(&mut rng, 0..=30).await;
                    continue;
                }
            }
        } else if take_pause_request(&shared.pause_requests) {
            stats.pauses.fetch_add(1, Ordering::Relaxed);
            let left = lock.validity().unwrap_or(Duration::ZERO);
            tokio::time::sleep(left + overrun).await;
        } else if to_the_edge {
            // Work until just before the validity the client reports ends:
            // a node whose lease ends sooner than the client's drift
            // allowance covers lets the next holder in while this one
            // still holds, and this one's write comes after it.
            stats.styles.edge_holds.fetch_add(1, Ordering::Relaxed);
            at_the_edge = true;
            let left = lock.validity().unwrap_or(Duration::ZERO);
            tokio::time::sleep(left.saturating_sub(EDGE)).await;
        } else {
            let left = lock.validity().unwrap_or(Duration::ZERO);
            tokio::time::sleep(left.min(validity).mul_f64(work_before)).await;
        }
        let carry_on = match kind {
            HoldKind::Exclusive => matches!(
                shared.checker.write(id, token),
                WriteOutcome::Accepted { .. }
            ),
            HoldKind::Shared => shared.checker.read(id, token),
            HoldKind::Permit(_) => {
                shared.checker.permit_work();
                true
            }
        };
        if at_the_edge {
            if carry_on {
                stats.styles.edge_written.fetch_add(1, Ordering::Relaxed);
            }
            // Not released: the lock lapses, and the next holder gets it
            // when the nodes' own leases end (every lease the acquisition
            // set, on a clock at most a few percent slow, has ended by
            // then). The window stays what the client reported.
            let lapsed = acquire_started + ttl.mul_f64(1.1) + Duration::from_millis(50);
            tokio::time::sleep_until(lapsed.into()).await;
        } else if carry_on {
            let left = lock.validity().unwrap_or(Duration::ZERO);
            tokio::time::sleep(left.min(validity).mul_f64(work_after)).await;
        }
        // Past the validity for a paused holder and one left to lapse at
        // the edge: it must not say it holds the lock.
        shared.ask_held(id, &lock);
        shared.checker.end_hold(id);
        for _ in 1..holds {
            release(&lock, stats).await;
        }
        if cancel_release && !at_the_edge {
            // Abandoned at once: the release must still free every node.
            stats.release_calls.fetch_add(1, Ordering::Relaxed);
            match tokio::time::timeout(Duration::ZERO, lock.release()).await {
                Ok(result) => note_release(stats, result),
                Err(_) => {
                    stats
                        .styles
                        .cancelled_releases
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        } else {
            release(&lock, stats).await;
        }
        pause(&mut rng, 0..=30).await;
    }
}

/// A lock that could not be confirmed any more (quorum lost, validity
/// ended, a watchdog's guard that reported the loss) is an expected outcome
/// under faults; anything else is an error.
pub(crate) fn note_lost(stats: &ClientStats, error: &LockError) {
    if matches!(
        error,
        LockError::QuorumLost { .. } | LockError::Expired | LockError::LockLost
    ) {
        stats.tokens_lost.fetch_add(1, Ordering::Relaxed);
    } else {
        stats.note_error(error);
    }
}

/// One hold's checker record, for the styles that change its validity.
/// The TTL an extension asks for when `wanted` is drawn for a hold of
/// `ttl` in a phase whose largest TTL is `ttl_max`: whole milliseconds, at
/// least half the TTL (half of an odd TTL is not whole: the client refuses
/// it as an invalid configuration, which an attempt-counting floor once
/// took for a lost lock), and at most the phase's largest TTL: the rules
/// size a recovery window by the largest TTL in use, and an extension to
/// twice the TTL (up to 4 s in the safe mix, against its first phase's 3 s
/// window; 1.6 s in the clock-lead control, against 0.8 s) asked for a
/// lease the window did not cover.
fn extension_ttl(wanted: Duration, ttl: Duration, ttl_max: Duration) -> Duration {
    let wanted = wanted.max(ttl / 2).min(ttl_max.max(ttl));
    Duration::from_millis(u64::try_from(wanted.as_millis()).unwrap_or(u64::MAX).max(1))
}

struct Hold<'a> {
    shared: &'a Shared,
    id: crate::checker::HolderId,
    ttl: Duration,
    /// The phase's largest TTL: no extension asks for more (the recovery
    /// windows are sized by it, rule 1).
    ttl_max: Duration,
}

impl Hold<'_> {
    fn stats(&self) -> &StyleStats {
        &self.shared.stats.styles
    }

    /// The checker's window follows what the client reports now.
    fn renew_window(&self, lock: &Lock) {
        self.shared.checker.renew_window(self.id, lock.validity());
    }

    async fn extend(&self, lock: &Lock, ttl: Duration) {
        self.stats().extends.fetch_add(1, Ordering::Relaxed);
        let ttl = extension_ttl(ttl, self.ttl, self.ttl_max);
        match lock.extend_with(ttl).await {
            Ok(_) => {
                self.stats().extended.fetch_add(1, Ordering::Relaxed);
            }
            Err(LockError::QuorumLost { .. } | LockError::Expired) => {
                self.stats().extends_failed.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => self.shared.stats.note_error(&error),
        }
        self.renew_window(lock);
    }

    /// Whether the re-entry added a hold.
    async fn reenter(&self, lock: &Lock) -> bool {
        self.stats().reentries.fetch_add(1, Ordering::Relaxed);
        let ok = match lock.acquire().await {
            Ok(_) => {
                self.stats().reentered.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(LockError::QuorumLost { .. } | LockError::Expired) => {
                self.stats()
                    .reentries_failed
                    .fetch_add(1, Ordering::Relaxed);
                false
            }
            Err(error) => {
                self.shared.stats.note_error(&error);
                false
            }
        };
        self.renew_window(lock);
        ok
    }

    /// Works for `work` under a watchdog; gives the lock back if it was
    /// never reported lost (the window then follows the last renewal), or
    /// `None` after releasing it when it was (the holder then stops without
    /// writing, as work stopped on the signal does).
    async fn watched(&self, lock: Lock, work: Duration) -> Option<Lock> {
        self.stats().watchdogs.fetch_add(1, Ordering::Relaxed);
        let guard = match lock.watchdog() {
            Ok(guard) => guard,
            Err(error) => {
                // The validity ended before the watchdog started: as lost.
                self.stats().watchdog_losses.fetch_add(1, Ordering::Relaxed);
                if !matches!(error, LockError::NotHeld) {
                    self.shared.stats.note_error(&error);
                }
                self.shared.checker.end_hold(self.id);
                return None;
            }
        };
        // The window follows the validity the watchdog's renewals give,
        // read every 10 ms.
        let lost = guard.lost();
        tokio::pin!(lost);
        let end = Instant::now() + work;
        let mut was_lost = false;
        while Instant::now() < end {
            let step = end
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(10));
            tokio::select! {
                _ = &mut lost => {
                    was_lost = true;
                    break;
                }
                () = tokio::time::sleep(step) => self.renew_window(&guard),
            }
        }
        if was_lost {
            // Reported lost, it renews no more: its validity now is the
            // last, and neither `status()` nor `is_held()` may say held
            // after it.
            self.renew_window(&guard);
            let asked = Instant::now();
            let says = if self.shared.held_ignores_validity {
                guard.validity().is_some()
            } else {
                guard.is_held() || matches!(*guard.status().borrow(), LockStatus::Held)
            };
            self.shared.checker.held_claim(self.id, asked, says);
            self.stats().watchdog_losses.fetch_add(1, Ordering::Relaxed);
            self.shared.checker.end_hold(self.id);
            self.shared
                .stats
                .release_calls
                .fetch_add(1, Ordering::Relaxed);
            note_release(&self.shared.stats, guard.release().await);
            return None;
        }
        let lock = guard.stop().await;
        self.stats().watchdogs_kept.fetch_add(1, Ordering::Relaxed);
        self.renew_window(&lock);
        Some(lock)
    }
}

async fn release(lock: &redis_lock_client::Lock, stats: &ClientStats) {
    stats.release_calls.fetch_add(1, Ordering::Relaxed);
    note_release(stats, lock.release().await);
}

/// Counts how a release ended: after the lease had ended on a majority, or
/// with an error.
pub(crate) fn note_release(
    stats: &ClientStats,
    result: Result<redis_lock_client::Release, LockError>,
) {
    match result {
        Ok(release) if release.lapsed() => {
            stats.releases_lapsed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(_) => {}
        Err(error) => stats.note_error(&error),
    }
}

async fn pause(rng: &mut StdRng, ms: RangeInclusive<u64>) {
    let ms = rng.random_range(ms);
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extension_never_asks_for_more_than_the_largest_ttl() {
        let ms = Duration::from_millis;
        // Twice a 2 s TTL in a phase whose TTLs reach 2 s: 2 s, not 4 s.
        assert_eq!(extension_ttl(ms(4_000), ms(2_000), ms(2_000)), ms(2_000));
        // Longer than its own TTL, within the largest: as drawn.
        assert_eq!(extension_ttl(ms(900), ms(500), ms(2_000)), ms(900));
        // Shorter: at least half the TTL, in whole milliseconds.
        assert_eq!(extension_ttl(ms(100), ms(801), ms(2_000)), ms(400));
        assert_eq!(extension_ttl(ms(1), ms(1), ms(2_000)), ms(1));
    }
}
