//! Holds through the blocking API: in each client group one more client, on
//! a thread of its own (in the network phase, inside the group's
//! namespace, as is the runtime its `blocking::Redlock` starts), holds the
//! mutexes with `blocking::Lock` (acquire, token, work, fenced write,
//! release) or, one hold in three, `blocking::Redlock::with_lock`, whose
//! work sleeps in steps that wake on loss and stops without writing when
//! the guard reports the lock lost.

use std::ops::RangeInclusive;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis_lock_client::blocking::{Guard, Redlock};
use redis_lock_client::{Config, Error as LockError};

use crate::checker::{HoldKind, HolderId, WriteOutcome};
use crate::network::NetnsHandle;
use crate::workload::Shared;

/// Where a group's blocking client runs: the nodes as that group reaches
/// them, and its namespace in the network phase.
#[derive(Clone)]
pub struct Site {
    pub urls: Vec<String>,
    pub netns: Option<NetnsHandle>,
    pub config: Config,
}

/// What a blocking client holds and for how long.
#[derive(Clone)]
pub struct Plan {
    /// Its id in the checker's records (after the async clients' ids).
    pub client: usize,
    /// The mutexes it contends for.
    pub resources: Vec<String>,
    pub ttl_ms: RangeInclusive<u64>,
    pub seed: u64,
}

/// Starts a blocking client; it stops once `shared.stop` is set and its
/// current hold is over. The thread's panic is the caller's to count.
pub fn spawn(site: Site, plan: Plan, shared: Shared) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("chaos-blocking{}", plan.client))
        .spawn(move || run(&site, &plan, &shared))
}

fn run(site: &Site, plan: &Plan, shared: &Shared) {
    if let Some(netns) = &site.netns {
        // A failure is remembered and fails the phase (`ClientGroups::stop`).
        netns.enter();
    }
    let stats = &shared.stats;
    let redlock = match Redlock::with_config(site.urls.clone(), site.config.clone()) {
        Ok(redlock) => redlock,
        Err(error) => return stats.note_error(&error),
    };
    if let Err(error) = wait_ready(&redlock) {
        return stats.note_error(&error);
    }
    let mut rng = StdRng::seed_from_u64(plan.seed);
    while !shared.stop.load(Ordering::Relaxed) {
        let Some(resource) = plan
            .resources
            .get(rng.random_range(0..plan.resources.len().max(1)))
        else {
            return;
        };
        let ttl = Duration::from_millis(rng.random_range(plan.ttl_ms.clone()));
        let work = rng.random_range(0.05..=0.8);
        stats.acquire_calls.fetch_add(1, Ordering::Relaxed);
        stats.styles.blocking.fetch_add(1, Ordering::Relaxed);
        if rng.random_bool(1.0 / 3.0) {
            scoped(
                &redlock,
                shared,
                plan.client,
                resource,
                ttl,
                ttl.mul_f64(2.0 * work),
            );
        } else {
            plain(&redlock, shared, plan.client, resource, ttl, work);
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(0..=30)));
    }
}

/// Polls until every node answers through the client's own connections.
fn wait_ready(redlock: &Redlock) -> Result<(), LockError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let Some(failed) = crate::unreachable(&redlock.info("chaos:ready")?) else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            return Err(LockError::Runtime(failed));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Acquire, token, work for `work` of the validity, write, release.
fn plain(
    redlock: &Redlock,
    shared: &Shared,
    client: usize,
    resource: &str,
    ttl: Duration,
    work: f64,
) {
    let stats = &shared.stats;
    let acquire_started = Instant::now();
    let lock = match redlock.lock(resource, ttl) {
        Ok(lock) => lock,
        Err(error) => return stats.note_error(&error),
    };
    let acquired = match lock.acquire() {
        Ok(acquired) => acquired,
        Err(LockError::NotAcquired { .. }) => {
            stats.not_acquired.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(error) => return stats.note_error(&error),
    };
    let granted_by = shared.granting_nodes(&acquired);
    let id = begin(
        shared,
        resource,
        client,
        acquire_started,
        acquired.validity,
        granted_by,
    );
    match lock.fencing_token() {
        Ok(token) => {
            stats.tokens.fetch_add(1, Ordering::Relaxed);
            shared.checker.set_token(id, token);
            let left = lock.validity().unwrap_or(Duration::ZERO);
            std::thread::sleep(left.min(acquired.validity).mul_f64(work));
            let _: WriteOutcome = shared.checker.write(id, token);
            stats.styles.blocking_held.fetch_add(1, Ordering::Relaxed);
        }
        Err(error) => crate::workload::note_lost(stats, &error),
    }
    shared.checker.end_hold(id);
    stats.release_calls.fetch_add(1, Ordering::Relaxed);
    crate::workload::note_release(stats, lock.release());
}

/// `with_lock`: the work takes its token, sleeps `work` in steps that wake
/// on loss while its window follows the renewals, and writes unless the
/// guard reported the lock lost.
fn scoped(
    redlock: &Redlock,
    shared: &Shared,
    client: usize,
    resource: &str,
    ttl: Duration,
    work: Duration,
) {
    let stats = &shared.stats;
    let acquire_started = Instant::now();
    let mut had_token = false;
    let result = redlock.with_lock(resource, ttl, |guard: &Guard<'_>| {
        let Some(validity) = guard.validity() else {
            return;
        };
        // Granting nodes are not reported here: the window takes part in
        // the checks, not in the exposure figures.
        let id = begin(
            shared,
            resource,
            client,
            acquire_started,
            validity,
            Vec::new(),
        );
        let token = match guard.fencing_token() {
            Ok(token) => token,
            Err(error) => {
                crate::workload::note_lost(stats, &error);
                shared.checker.end_hold(id);
                return;
            }
        };
        stats.tokens.fetch_add(1, Ordering::Relaxed);
        shared.checker.set_token(id, token);
        had_token = true;
        let end = Instant::now() + work;
        while Instant::now() < end {
            let step = (Instant::now() + Duration::from_millis(20)).min(end);
            if !matches!(guard.sleep_until_lost(step), Ok(false)) {
                break;
            }
            shared.checker.renew_window(id, guard.validity());
        }
        if guard.check().is_ok() {
            let _: WriteOutcome = shared.checker.write(id, token);
            had_token = false;
            stats.styles.blocking_held.fetch_add(1, Ordering::Relaxed);
        }
        shared.checker.end_hold(id);
    });
    crate::scoped::note_result(stats, result, &stats.styles.blocking_lost);
    if had_token {
        // A token that was never written: the lock was lost first.
        stats.styles.watchdog_losses.fetch_add(1, Ordering::Relaxed);
    }
}

fn begin(
    shared: &Shared,
    resource: &str,
    client: usize,
    acquire_started: Instant,
    validity: Duration,
    granted_by: Vec<usize>,
) -> HolderId {
    let stats = &shared.stats;
    let id = shared.checker.begin_hold(
        resource,
        client,
        acquire_started,
        Instant::now(),
        validity,
        granted_by,
    );
    shared.checker.set_kind(id, HoldKind::Exclusive);
    stats.grants.fetch_add(1, Ordering::Relaxed);
    stats.fence_calls.fetch_add(1, Ordering::Relaxed);
    id
}
