//! The `with_lock` hold style: the client acquires, runs the work under its
//! watchdog and releases; the work is dropped at its next await if the
//! watchdog reports the lock lost. The work takes its token, works for up
//! to twice the TTL while its window follows the renewals, and writes.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_lock_client::Error as LockError;

use crate::checker::{Checker, HolderId, WriteOutcome};
use crate::workload::{ClientStats, Shared};

/// How far the work got: no token yet, a token, a write made.
const NO_TOKEN: u8 = 0;
const TOKEN: u8 = 1;
const WROTE: u8 = 2;

/// Ends a hold's window when dropped.
struct EndOnDrop<'a> {
    checker: &'a Checker,
    id: HolderId,
}

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        self.checker.end_hold(self.id);
    }
}

/// One hold of `resource` through `Redlock::with_lock`, working `work`.
pub async fn hold(shared: &Shared, client: usize, resource: &str, ttl: Duration, work: Duration) {
    let stats = &shared.stats;
    stats.acquire_calls.fetch_add(1, Ordering::Relaxed);
    stats.styles.scoped.fetch_add(1, Ordering::Relaxed);
    let acquire_started = Instant::now();
    let progress = Arc::new(AtomicU8::new(NO_TOKEN));
    let reached = progress.clone();
    let result = shared
        .redlock
        .with_lock(resource.to_string(), ttl, |ctx| async move {
            let checker = &shared.checker;
            let window_start = Instant::now();
            let Some(validity) = ctx.validity() else {
                return;
            };
            stats.grants.fetch_add(1, Ordering::Relaxed);
            let id = checker.begin_hold(
                resource,
                client,
                acquire_started,
                window_start,
                validity,
                // Granting nodes are not reported here: the window takes
                // part in the checks, not in the exposure figures.
                Vec::new(),
            );
            // If the lock is lost, `with_lock` drops this future (at its
            // next await) before it releases the lock: the work stops
            // acting there, and so does its window.
            let _ends = EndOnDrop { checker, id };
            stats.fence_calls.fetch_add(1, Ordering::Relaxed);
            let token = match ctx.fencing_token().await {
                Ok(token) => token,
                Err(error) => {
                    crate::workload::note_lost(stats, &error);
                    checker.end_hold(id);
                    return;
                }
            };
            stats.tokens.fetch_add(1, Ordering::Relaxed);
            checker.set_token(id, token);
            reached.store(TOKEN, Ordering::Relaxed);
            let end = Instant::now() + work;
            while let Some(left) = end.checked_duration_since(Instant::now()) {
                tokio::time::sleep(left.min(Duration::from_millis(20))).await;
                checker.renew_window(id, ctx.validity());
            }
            // The checker counts the write as accepted or rejected.
            let _: WriteOutcome = checker.write(id, token);
            reached.store(WROTE, Ordering::Relaxed);
            stats.styles.scoped_ran.fetch_add(1, Ordering::Relaxed);
            checker.end_hold(id);
        })
        .await;
    // Lost with a token and before its write: counted with the watchdog
    // losses (every token writes once, or was lost).
    if note_result(stats, result, &stats.styles.scoped_lost)
        && progress.load(Ordering::Relaxed) == TOKEN
    {
        stats.styles.watchdog_losses.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts how a `with_lock` ended (it released the lock; a refusal; a loss,
/// in `lost`; an error) and returns whether the lock was lost.
pub(crate) fn note_result(
    stats: &ClientStats,
    result: Result<(), LockError>,
    lost: &AtomicU64,
) -> bool {
    stats.release_calls.fetch_add(1, Ordering::Relaxed);
    match result {
        Ok(()) => false,
        Err(LockError::NotAcquired { .. }) => {
            stats.not_acquired.fetch_add(1, Ordering::Relaxed);
            false
        }
        Err(LockError::LockLost) => {
            lost.fetch_add(1, Ordering::Relaxed);
            true
        }
        Err(error) => {
            stats.note_error(&error);
            false
        }
    }
}
