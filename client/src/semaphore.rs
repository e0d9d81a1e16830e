//! A semaphore of leased permits: a shared lock on one resource whose
//! holders are limited to a number of permits. Each permit is a [`Lock`]
//! with its own owner id, fencing token, lease and watchdog. A permit needs
//! more grants than a majority once there are two permits or more (more
//! than `nodes × permits / (permits + 1)`): otherwise clients that each
//! reach a different majority could hold one permit too many.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::kind::Kind;
use crate::lock::Lock;
use crate::owner::new_owner_id;
use crate::quorum::Quorum;

/// `permits` leased permits on a resource (see
/// [`Redlock::semaphore`](crate::Redlock::semaphore)).
///
/// ```no_run
/// # async fn demo(redlock: redis_lock_client::Redlock) -> Result<(), redis_lock_client::Error> {
/// use std::time::Duration;
///
/// let pool = redlock.semaphore("downstream:api", 3)?;
/// let permit = pool.acquire(Duration::from_secs(10)).await?;
/// // At most three holders of "downstream:api" run this at once.
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    quorum: Arc<Quorum>,
    resource: String,
    permits: NonZeroU32,
}

impl Semaphore {
    pub(crate) fn new(quorum: Arc<Quorum>, resource: String, permits: NonZeroU32) -> Semaphore {
        Semaphore {
            quorum,
            resource,
            permits,
        }
    }

    /// A handle for one permit with a fresh owner id, not yet acquired.
    pub fn permit(&self, ttl: Duration) -> Result<Lock> {
        self.quorum.config().validate_ttl(ttl)?;
        Ok(Lock::new(
            Arc::clone(&self.quorum),
            self.resource.clone(),
            new_owner_id(),
            ttl,
            Kind::permit_of(self.permits),
        ))
    }

    /// Takes a permit: waits for one (single node) or retries (Redlock)
    /// as [`Lock::acquire`] does.
    pub async fn acquire(&self, ttl: Duration) -> Result<Lock> {
        let permit = self.permit(ttl)?;
        permit.acquire().await?;
        Ok(permit)
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    pub fn permits(&self) -> u32 {
        self.permits.get()
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("resource", &self.resource)
            .field("permits", &self.permits)
            .finish()
    }
}
