//! The clients: tasks that contend for a few resources through the Redlock
//! client, and make a fenced write to the checker in every hold.
//!
//! One hold: `acquire` (the window opens when it returns and lasts the
//! reported validity), `fencing_token`, work for part of the validity, the
//! fenced write, a little more work, then the window is closed and the lock
//! released. When the fault injector has asked for a client pause, the next
//! holder sleeps past its validity after taking its token and only then
//! writes: the GC pause of the Redlock debate.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis_lock_client::{Error as LockError, Redlock};

use crate::checker::{Checker, WriteOutcome};

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
    /// Errors other than "not acquired" / "quorum lost".
    pub other_errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientStats {
    fn note_error(&self, error: &LockError) {
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

/// What the clients do.
#[derive(Clone, Debug)]
pub struct Workload {
    pub clients: usize,
    pub resources: Vec<String>,
    pub ttl_ms: RangeInclusive<u64>,
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
        }
    }
}

fn take_pause_request(requests: &AtomicU64) -> bool {
    requests
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

/// Starts the client tasks; they stop after `shared.stop` is set, once
/// their current hold is over.
pub fn spawn(workload: &Workload, shared: &Shared) -> Vec<tokio::task::JoinHandle<()>> {
    (0..workload.clients)
        .map(|client| {
            let shared = shared.clone();
            let workload = workload.clone();
            let seed = workload
                .seed
                .wrapping_add(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(client as u64 + 1));
            tokio::spawn(async move {
                client_loop(client, workload, shared, StdRng::seed_from_u64(seed)).await;
            })
        })
        .collect()
}

async fn client_loop(client: usize, workload: Workload, shared: Shared, mut rng: StdRng) {
    let stats = &shared.stats;
    while !shared.stop.load(Ordering::Relaxed) {
        let resource = &workload.resources[rng.random_range(0..workload.resources.len())];
        let ttl = Duration::from_millis(rng.random_range(workload.ttl_ms.clone()));
        let lock = match shared.redlock.lock(resource.as_str(), ttl) {
            Ok(lock) => lock,
            Err(error) => {
                stats.note_error(&error);
                return;
            }
        };
        let acquire_started = Instant::now();
        stats.acquire_calls.fetch_add(1, Ordering::Relaxed);
        let acquired = match lock.acquire().await {
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
        let validity = lock.validity().unwrap_or(Duration::ZERO);
        let granted_by = acquired
            .outcomes
            .iter()
            .filter(|o| o.granted_token().is_some())
            .filter_map(|o| (shared.node_index)(&o.node))
            .collect();
        let id = shared.checker.begin_hold(
            resource,
            client,
            acquire_started,
            window_start,
            validity,
            granted_by,
        );
        stats.grants.fetch_add(1, Ordering::Relaxed);

        stats.fence_calls.fetch_add(1, Ordering::Relaxed);
        let token = match lock.fencing_token().await {
            Ok(token) => token,
            Err(error) => {
                if matches!(error, LockError::QuorumLost { .. }) {
                    stats.tokens_lost.fetch_add(1, Ordering::Relaxed);
                } else {
                    stats.note_error(&error);
                }
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
        if take_pause_request(&shared.pause_requests) {
            stats.pauses.fetch_add(1, Ordering::Relaxed);
            let left = lock.validity().unwrap_or(Duration::ZERO);
            tokio::time::sleep(left + overrun).await;
        } else {
            tokio::time::sleep(validity.mul_f64(work_before)).await;
        }
        match shared.checker.write(id, token) {
            WriteOutcome::Accepted { .. } => {
                tokio::time::sleep(validity.mul_f64(work_after)).await;
            }
            WriteOutcome::RejectedStale | WriteOutcome::RejectedWhileValid => {}
        }
        shared.checker.end_hold(id);
        release(&lock, stats).await;
        pause(&mut rng, 0..=30).await;
    }
}

async fn release(lock: &redis_lock_client::Lock, stats: &ClientStats) {
    stats.release_calls.fetch_add(1, Ordering::Relaxed);
    match lock.release().await {
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
