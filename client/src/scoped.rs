//! Running a piece of work under a lock, cancelled when the lock is lost.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::client::Redlock;
use crate::error::{Error, Result};
use crate::handle::LockCore;

/// What the work running under [`Redlock::with_lock`] can ask about its
/// lock. Cheap to clone; it cannot release the lock (the helper does).
#[derive(Clone)]
pub struct LockContext {
    core: Arc<LockCore>,
}

impl LockContext {
    /// The hold's fencing token: pass it to the storage you write to, so it
    /// can reject writes from an earlier holder that overran its lease.
    pub async fn fencing_token(&self) -> Result<u64> {
        self.core.fencing_token().await
    }

    /// Time left in which the lock is certainly held.
    pub fn validity(&self) -> Option<Duration> {
        self.core.validity()
    }

    /// The resource locked.
    pub fn resource(&self) -> &str {
        self.core.resource()
    }

    /// The owner id on the nodes.
    pub fn owner(&self) -> &str {
        self.core.owner()
    }
}

impl std::fmt::Debug for LockContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockContext")
            .field("resource", &self.core.resource())
            .field("owner", &self.core.owner())
            .field("validity", &self.core.validity())
            .finish()
    }
}

impl Redlock {
    /// Acquires `resource`, runs `work` under a [`Watchdog`](crate::Watchdog)
    /// and releases the lock when it finishes. If the lock is lost first,
    /// the work's future is dropped at its next await point and the result is
    /// [`Error::LockLost`].
    ///
    /// ```no_run
    /// # async fn demo(redlock: redis_lock_client::Redlock) -> Result<(), redis_lock_client::Error> {
    /// use std::time::Duration;
    ///
    /// let rows = redlock
    ///     .with_lock("invoices:march", Duration::from_secs(10), |ctx| async move {
    ///         let token = ctx.fencing_token().await?;
    ///         // … write to storage, passing `token` along …
    ///         Ok::<_, redis_lock_client::Error>(token)
    ///     })
    ///     .await??;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<F, Fut, T>(
        &self,
        resource: impl Into<String>,
        ttl: Duration,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let lock = self.acquire(resource, ttl).await?;
        let context = LockContext {
            core: Arc::clone(&lock.core),
        };
        let watchdog = lock.watchdog()?;
        let lost = watchdog.lost();
        let output = tokio::select! {
            // A loss reported together with the work's end wins: the work may
            // have finished outside the lock.
            biased;
            // Only a loss ends the watch while we own the watchdog.
            _ = lost => {
                // Free whatever nodes still hold it for us (the nodes check
                // the owner, so this cannot free another holder's lock).
                let _ = watchdog.release().await;
                return Err(Error::LockLost);
            }
            output = work(context) => output,
        };
        let lost = watchdog.is_lost();
        watchdog.release().await?;
        if lost {
            return Err(Error::LockLost);
        }
        Ok(output)
    }
}
