//! A lock handle: one resource, one owner id, and the Redlock rules for
//! acquiring, re-entering, extending, releasing and fencing it.

use std::sync::Arc;
use std::time::Duration;

use crate::acquire::Patience;
use crate::error::Result;
use crate::handle::LockCore;
use crate::kind::Kind;
use crate::outcome::{Acquired, Extended, Release};
use crate::quorum::Quorum;

/// A lock on one resource, with its own random owner id.
///
/// Create it with [`Redlock::lock`](crate::Redlock::lock) (or acquire in one step with
/// [`Redlock::acquire`](crate::Redlock::acquire)). All methods take `&self`; operations on one handle
/// run one at a time.
///
/// Dropping a handle that still holds the lock releases it in the
/// background (best effort, on the current tokio runtime); otherwise the
/// lease simply ends after its TTL.
pub struct Lock {
    pub(crate) core: Arc<LockCore>,
}

impl Lock {
    pub(crate) fn new(
        client: Arc<Quorum>,
        resource: String,
        owner: String,
        ttl: Duration,
        kind: Kind,
    ) -> Lock {
        Lock {
            core: Arc::new(LockCore::new(client, resource, owner, ttl, kind)),
        }
    }

    /// Exclusive, shared, or a semaphore permit.
    pub fn kind(&self) -> Kind {
        self.core.kind()
    }

    /// Acquires the lock, retrying until the retries or the acquire deadline
    /// run out (Redlock), or waiting on the node (single-node mode). When
    /// this handle already holds it, adds a hold instead (see reentrancy in
    /// the crate docs).
    pub async fn acquire(&self) -> Result<Acquired> {
        self.core.acquire(Patience::Config).await
    }

    /// [`Lock::acquire`] with a deadline of its own: tries (or, on one
    /// node, waits on the server) until `wait` has passed, however many
    /// attempts that takes, in place of the client's `retry_count` and
    /// `acquire_timeout`. One client serves every deadline.
    pub async fn acquire_for(&self, wait: Duration) -> Result<Acquired> {
        self.core.acquire(Patience::For(wait)).await
    }

    /// One attempt, no retry and no wait.
    pub async fn try_acquire(&self) -> Result<Acquired> {
        self.core.acquire(Patience::Once).await
    }

    /// Renews the lease to the lock's TTL on every node that still holds it;
    /// succeeds when a majority confirms within the remaining validity, and
    /// reports the new validity and which nodes no longer hold the lock.
    ///
    /// A renewal sets each node's lease to the TTL from now, so it can also
    /// shorten leases: whatever the outcome, the handle's validity becomes
    /// what the nodes' answers vouch for (see the crate docs). A failure is
    /// [`Error::QuorumLost`](crate::Error::QuorumLost) (fewer than a majority confirmed in time) or
    /// [`Error::Expired`](crate::Error::Expired) (the validity ended first).
    pub async fn extend(&self) -> Result<Extended> {
        self.core.extend(self.core.ttl()).await
    }

    /// [`Lock::extend`] with another TTL.
    pub async fn extend_with(&self, ttl: Duration) -> Result<Extended> {
        self.core.client().config().validate_ttl(ttl)?;
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

    /// Runs `write` on `store` as a fenced write: `LOCK.FENCED fence_key
    /// <this lock's fencing token> write...`, in one round trip. The store
    /// (a Redis or Valkey with the module, not necessarily a lock node)
    /// runs it only if no write through `fence_key` was accepted with a
    /// higher token, and then raises the fence to this token.
    ///
    /// The outer `Result` is the lock's: nothing is sent without a fencing
    /// token ([`Error::NotHeld`](crate::Error::NotHeld),
    /// [`Error::Expired`](crate::Error::Expired), ...), nor for an empty
    /// command ([`Error::InvalidConfig`](crate::Error::InvalidConfig)). The
    /// inner one is the store's reply: the write's own reply, or its error;
    /// a stale token is an error with code `STALE` ([`is_stale`](crate::is_stale)).
    pub async fn fenced(
        &self,
        store: &mut impl redis::aio::ConnectionLike,
        fence_key: &str,
        write: &redis::Cmd,
    ) -> Result<redis::RedisResult<redis::Value>> {
        let token = self.fencing_token().await?;
        let Some(cmd) = crate::protocol::fenced(fence_key, token, write) else {
            return Err(crate::Error::InvalidConfig(
                "a fenced write needs a command without cursor arguments".into(),
            ));
        };
        Ok(cmd.query_async(store).await)
    }

    /// The fencing token of this hold if [`Lock::fencing_token`] has
    /// already computed it (and nothing since made it stale), without a
    /// round trip; `None` when not held, not yet computed, or once the
    /// hold's validity has ended (as [`Lock::fencing_token`] then fails).
    pub fn known_fencing_token(&self) -> Option<u64> {
        let fence = {
            let state = self.core.state();
            if state.holds == 0 {
                return None;
            }
            state.fence
        };
        fence.filter(|_| self.core.validity().is_some())
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
        self.core.resource()
    }

    /// This handle's owner id, the same on every node.
    pub fn owner(&self) -> &str {
        self.core.owner()
    }

    /// The lease length used by acquire and extend.
    pub fn ttl(&self) -> Duration {
        self.core.ttl()
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
            .field("resource", &self.core.resource())
            .field("owner", &self.core.owner())
            .field("ttl", &self.core.ttl())
            .field("holds", &state.holds)
            .field("validity", &self.core.validity())
            .finish()
    }
}
