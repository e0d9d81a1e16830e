//! The blocking API, for code without an async runtime.
//!
//! The client owns a small tokio runtime (one worker thread) on which the
//! connections and watchdogs run; each call blocks the calling thread until
//! the async operation it wraps finishes. It works from any thread that
//! does not run an async runtime's tasks, including inside
//! `tokio::task::spawn_blocking` (the usual way to call blocking code from
//! async code). On a runtime's worker thread (inside an async task, or a
//! current-thread runtime's `block_on`) it would stall that runtime, so it
//! is refused there with [`Error::Runtime`].
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::blocking::Redlock;
//!
//! # fn main() -> Result<(), redis_lock_client::Error> {
//! let redlock = Redlock::new(["redis://127.0.0.1:7101"])?;
//! let lock = redlock.acquire("cron:cleanup", Duration::from_secs(30))?;
//! println!("token {}", lock.fencing_token()?);
//! lock.release()?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::node::IntoClient;
use crate::outcome::{Acquired, Extended, Release};
use crate::protocol::NodeInfo;
use crate::watchdog::LockStatus;

/// The runtime the blocking client runs on. Shut down without waiting when
/// the last handle goes, so that dropping a client never blocks or panics
/// (even inside another runtime).
struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn new() -> Result<Runtime> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redis-lock-client")
            .enable_all()
            .build()
            .map(|runtime| Runtime(Some(runtime)))
            .map_err(|e| Error::Runtime(format!("cannot start the client's runtime: {e}")))
    }

    fn get(&self) -> Result<&tokio::runtime::Runtime> {
        self.0
            .as_ref()
            .ok_or_else(|| Error::Runtime("the client's runtime is gone".into()))
    }

    /// Runs `future` to completion, blocking the calling thread.
    ///
    /// On a thread with no runtime it runs right here. A thread inside a
    /// runtime's context that does not run its tasks (a
    /// `tokio::task::spawn_blocking` closure, the thread of a multi-thread
    /// runtime's `block_on`, a thread that entered a runtime handle) may
    /// block, but tokio does not let a runtime be driven there, so the
    /// future runs on a helper thread while this one waits. A runtime's
    /// worker thread is refused: blocking it would stall every task
    /// scheduled on it.
    fn block_on<F>(&self, future: F) -> Result<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        if tokio::runtime::worker_index().is_some() {
            return Err(Error::Runtime(
                "the blocking API was called on an async runtime's worker thread; use the async API there, or call it inside tokio::task::spawn_blocking"
                    .into(),
            ));
        }
        let runtime = self.get()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Ok(runtime.block_on(future));
        }
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("redis-lock-client-call".into())
                .spawn_scoped(scope, || runtime.block_on(future))
                .map_err(|e| Error::Runtime(format!("cannot start a thread for the call: {e}")))?
                .join()
                .map_err(|_| Error::Runtime("the blocking call panicked".into()))
        })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// A blocking semaphore of leased permits (see [`crate::Semaphore`]).
#[derive(Clone)]
pub struct Semaphore {
    inner: crate::Semaphore,
    runtime: Arc<Runtime>,
}

impl Semaphore {
    /// A handle for one permit, not yet acquired.
    pub fn permit(&self, ttl: Duration) -> Result<Lock> {
        Ok(Lock {
            inner: Some(self.inner.permit(ttl)?),
            runtime: Arc::clone(&self.runtime),
        })
    }

    /// Takes a permit (see [`crate::Semaphore::acquire`]).
    pub fn acquire(&self, ttl: Duration) -> Result<Lock> {
        let permit = self.permit(ttl)?;
        permit.acquire()?;
        Ok(permit)
    }

    pub fn permits(&self) -> u32 {
        self.inner.permits()
    }
}

/// A blocking Redlock client: the same rules as [`crate::Redlock`].
#[derive(Clone)]
pub struct Redlock {
    inner: crate::Redlock,
    runtime: Arc<Runtime>,
}

impl Redlock {
    /// A client with the default [`Config`].
    pub fn new<I>(nodes: I) -> Result<Redlock>
    where
        I: IntoIterator,
        I::Item: IntoClient,
    {
        Self::with_config(nodes, Config::default())
    }

    /// A client with the given settings.
    pub fn with_config<I>(nodes: I, config: Config) -> Result<Redlock>
    where
        I: IntoIterator,
        I::Item: IntoClient,
    {
        Self::on_runtime(|| crate::Redlock::with_config(nodes, config))
    }

    /// A Redis Cluster as the lock service ([`crate::Redlock::cluster`]).
    pub fn cluster<I>(seeds: I) -> Result<Redlock>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Self::cluster_with_config(seeds, Config::default())
    }

    /// [`Redlock::cluster`] with the given settings.
    pub fn cluster_with_config<I>(seeds: I, config: Config) -> Result<Redlock>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Self::on_runtime(|| crate::Redlock::cluster_with_config(seeds, config))
    }

    /// [`Redlock::cluster`] over TLS ([`crate::Redlock::cluster_tls`]).
    #[cfg(feature = "tls")]
    pub fn cluster_tls<I>(seeds: I, tls: &crate::Tls, config: Config) -> Result<Redlock>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Self::on_runtime(|| crate::Redlock::cluster_tls(seeds, tls, config))
    }

    /// Makes the async client inside a runtime of its own.
    fn on_runtime(make: impl FnOnce() -> Result<crate::Redlock>) -> Result<Redlock> {
        let runtime = Arc::new(Runtime::new()?);
        let inner = {
            let _entered = runtime.get()?.enter();
            make()?
        };
        Ok(Redlock { inner, runtime })
    }

    /// A handle for `resource` with a fresh owner id, not yet acquired.
    pub fn lock(&self, resource: impl Into<String>, ttl: Duration) -> Result<Lock> {
        let inner = self.inner.lock(resource, ttl)?;
        Ok(Lock {
            inner: Some(inner),
            runtime: Arc::clone(&self.runtime),
        })
    }

    /// [`Redlock::lock`] and [`Lock::acquire`] in one step.
    pub fn acquire(&self, resource: impl Into<String>, ttl: Duration) -> Result<Lock> {
        let lock = self.lock(resource, ttl)?;
        lock.acquire()?;
        Ok(lock)
    }

    /// A handle for a shared (read) lock on `resource`, not yet acquired
    /// (see [`crate::Redlock::lock_shared`]).
    pub fn lock_shared(&self, resource: impl Into<String>, ttl: Duration) -> Result<Lock> {
        let inner = self.inner.lock_shared(resource, ttl)?;
        Ok(Lock {
            inner: Some(inner),
            runtime: Arc::clone(&self.runtime),
        })
    }

    /// [`Redlock::lock_shared`] and [`Lock::acquire`] in one step.
    pub fn acquire_shared(&self, resource: impl Into<String>, ttl: Duration) -> Result<Lock> {
        let lock = self.lock_shared(resource, ttl)?;
        lock.acquire()?;
        Ok(lock)
    }

    /// A semaphore of `permits` leased permits on `resource` (see
    /// [`crate::Redlock::semaphore`]).
    pub fn semaphore(&self, resource: impl Into<String>, permits: u32) -> Result<Semaphore> {
        Ok(Semaphore {
            inner: self.inner.semaphore(resource, permits)?,
            runtime: Arc::clone(&self.runtime),
        })
    }

    /// Acquires `resource`, runs `work` on this thread under a watchdog and
    /// releases the lock. Synchronous code cannot be interrupted, so `work`
    /// gets a [`Guard`] to check at safe points ([`Guard::check`]); if the
    /// lock was lost at any time before `work` returned, the result is
    /// [`Error::LockLost`].
    pub fn with_lock<T>(
        &self,
        resource: impl Into<String>,
        ttl: Duration,
        work: impl FnOnce(&Guard<'_>) -> T,
    ) -> Result<T> {
        let watchdog = self.acquire(resource, ttl)?.watchdog()?;
        let output = work(&Guard {
            watchdog: &watchdog,
        });
        let lost = watchdog.is_lost();
        watchdog.release()?;
        if lost {
            return Err(Error::LockLost);
        }
        Ok(output)
    }

    /// `LOCK.INFO` on every node (diagnostics).
    pub fn info(&self, resource: &str) -> Result<Vec<NodeInfo>> {
        self.runtime.block_on(self.inner.info(resource))
    }

    /// Nodes that must agree: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.inner.quorum()
    }

    /// The nodes' names (`host:port`).
    pub fn node_names(&self) -> Vec<String> {
        self.inner.node_names()
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        self.inner.config()
    }
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

/// A blocking lock handle: see [`crate::Lock`]. Dropping it while it holds
/// the lock releases it, waiting at most two per-node timeouts (one for an
/// operation of the handle still in flight, one for the release round); a
/// release not finished by then still finishes in the background while the
/// client's runtime lives.
pub struct Lock {
    // `None` only after `watchdog` moved the lock into a watchdog.
    inner: Option<crate::Lock>,
    runtime: Arc<Runtime>,
}

impl Lock {
    fn inner(&self) -> Result<&crate::Lock> {
        self.inner.as_ref().ok_or(Error::NotHeld)
    }

    /// See [`crate::Lock::acquire`].
    pub fn acquire(&self) -> Result<Acquired> {
        self.runtime.block_on(self.inner()?.acquire())?
    }

    /// See [`crate::Lock::acquire_for`].
    pub fn acquire_for(&self, wait: Duration) -> Result<Acquired> {
        self.runtime.block_on(self.inner()?.acquire_for(wait))?
    }

    /// See [`crate::Lock::try_acquire`].
    pub fn try_acquire(&self) -> Result<Acquired> {
        self.runtime.block_on(self.inner()?.try_acquire())?
    }

    /// See [`crate::Lock::extend`].
    pub fn extend(&self) -> Result<Extended> {
        self.runtime.block_on(self.inner()?.extend())?
    }

    /// See [`crate::Lock::extend_with`].
    pub fn extend_with(&self, ttl: Duration) -> Result<Extended> {
        self.runtime.block_on(self.inner()?.extend_with(ttl))?
    }

    /// See [`crate::Lock::release`].
    pub fn release(&self) -> Result<Release> {
        self.runtime.block_on(self.inner()?.release())?
    }

    /// See [`crate::Lock::release_all`].
    pub fn release_all(&self) -> Result<Release> {
        self.runtime.block_on(self.inner()?.release_all())?
    }

    /// See [`crate::Lock::fencing_token`].
    pub fn fencing_token(&self) -> Result<u64> {
        self.runtime.block_on(self.inner()?.fencing_token())?
    }

    /// See [`crate::Lock::fenced`]: `write` on `store` (a blocking
    /// connection) through `LOCK.FENCED fence_key <token>`.
    pub fn fenced(
        &self,
        store: &mut dyn redis::ConnectionLike,
        fence_key: &str,
        write: &redis::Cmd,
    ) -> Result<redis::RedisResult<redis::Value>> {
        let token = self.fencing_token()?;
        let Some(cmd) = crate::protocol::fenced(fence_key, token, write) else {
            return Err(Error::InvalidConfig(
                "a fenced write needs a command without cursor arguments".into(),
            ));
        };
        Ok(cmd.query(store))
    }

    /// Time left in which the lock is certainly held.
    pub fn validity(&self) -> Option<Duration> {
        self.inner.as_ref().and_then(crate::Lock::validity)
    }

    /// Whether the lock is held and valid.
    pub fn is_held(&self) -> bool {
        self.validity().is_some()
    }

    /// Nested holds not yet released.
    pub fn holds(&self) -> u32 {
        self.inner.as_ref().map_or(0, crate::Lock::holds)
    }

    /// The resource.
    pub fn resource(&self) -> &str {
        self.inner.as_ref().map_or("", crate::Lock::resource)
    }

    /// The owner id.
    pub fn owner(&self) -> &str {
        self.inner.as_ref().map_or("", crate::Lock::owner)
    }

    /// Hands the held lock to a watchdog renewing it in the background.
    pub fn watchdog(mut self) -> Result<Watchdog> {
        let inner = self.inner.take().ok_or(Error::NotHeld)?;
        let runtime = Arc::clone(&self.runtime);
        let watchdog = {
            let _entered = runtime.get()?.enter();
            inner.watchdog()?
        };
        Ok(Watchdog {
            inner: Some(watchdog),
            runtime,
        })
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        if inner.holds() > 0 {
            // The async handle would release in the background, but this
            // runtime may be shut down right after; release here instead.
            let timeout = inner.core.client().config().node_timeout * 2;
            let _ = self.runtime.block_on(async {
                let _ = tokio::time::timeout(timeout, inner.release_all()).await;
            });
        }
        // Dropped inside our runtime, so that its own release (if the one
        // above could not run) still has a runtime to run on.
        if let Ok(runtime) = self.runtime.get() {
            let _entered = runtime.enter();
            drop(inner);
        }
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

/// A blocking watchdog: see [`crate::Watchdog`]. Dropping it stops renewal
/// and releases the lock.
pub struct Watchdog {
    // `None` only inside `release` and `stop`.
    inner: Option<crate::Watchdog>,
    runtime: Arc<Runtime>,
}

impl Watchdog {
    fn inner(&self) -> Result<&crate::Watchdog> {
        self.inner.as_ref().ok_or(Error::NotHeld)
    }

    /// Whether the lock has been lost.
    pub fn is_lost(&self) -> bool {
        self.inner.as_ref().is_some_and(crate::Watchdog::is_lost)
    }

    /// Whether the lock is held and certainly valid, and no loss has been
    /// reported (see [`crate::Watchdog::is_held`]).
    pub fn is_held(&self) -> bool {
        self.inner.as_ref().is_some_and(crate::Watchdog::is_held)
    }

    /// The current status. `Lost` as soon as [`Watchdog::is_lost`] is
    /// true, even if the renewal task has not reported it yet.
    pub fn status(&self) -> LockStatus {
        let Some(inner) = self.inner.as_ref() else {
            return LockStatus::Stopped;
        };
        let status = inner.status().borrow().clone();
        match status {
            LockStatus::Held if inner.is_lost() => LockStatus::Lost {
                outcomes: Vec::new(),
            },
            status => status,
        }
    }

    /// Blocks until the lock is lost or `timeout` passes; returns whether
    /// it was lost.
    pub fn wait_lost(&self, timeout: Duration) -> Result<bool> {
        let lost = self.inner()?.lost();
        // The timer must be created inside the runtime.
        let outcome = self
            .runtime
            .block_on(async move { tokio::time::timeout(timeout, lost).await })?;
        Ok(matches!(outcome, Ok(LockStatus::Lost { .. })))
    }

    /// See [`crate::Lock::fencing_token`].
    pub fn fencing_token(&self) -> Result<u64> {
        self.runtime.block_on(self.inner()?.fencing_token())?
    }

    /// Time left in which the lock is certainly held.
    pub fn validity(&self) -> Option<Duration> {
        self.inner.as_ref().and_then(|w| w.validity())
    }

    /// Stops renewing and releases every hold.
    pub fn release(mut self) -> Result<Release> {
        let inner = self.inner.take().ok_or(Error::NotHeld)?;
        self.runtime.block_on(inner.release())?
    }

    /// Stops renewing and hands the lock back.
    pub fn stop(mut self) -> Result<Lock> {
        let inner = self.inner.take().ok_or(Error::NotHeld)?;
        let lock = self.runtime.block_on(inner.stop())?;
        Ok(Lock {
            inner: Some(lock),
            runtime: Arc::clone(&self.runtime),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let timeout = inner.core.client().config().node_timeout * 2;
            // Inside another runtime this runs nothing and the async
            // watchdog's own drop releases in the background instead.
            let _ = self.runtime.block_on(async {
                let _ = tokio::time::timeout(timeout, inner.release()).await;
            });
        }
    }
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

/// What synchronous work under [`Redlock::with_lock`] can ask.
pub struct Guard<'a> {
    watchdog: &'a Watchdog,
}

impl Guard<'_> {
    /// `Err(Error::LockLost)` once the lock is lost: call it between steps
    /// and stop when it fails.
    pub fn check(&self) -> Result<()> {
        if self.watchdog.is_lost() {
            return Err(Error::LockLost);
        }
        Ok(())
    }

    /// Whether the lock has been lost.
    pub fn is_lost(&self) -> bool {
        self.watchdog.is_lost()
    }

    /// The hold's fencing token.
    pub fn fencing_token(&self) -> Result<u64> {
        self.watchdog.fencing_token()
    }

    /// Time left in which the lock is certainly held.
    pub fn validity(&self) -> Option<Duration> {
        self.watchdog.validity()
    }

    /// Blocks until `deadline` unless the lock is lost first (a sleep that
    /// wakes up on loss); returns whether it was lost.
    pub fn sleep_until_lost(&self, deadline: Instant) -> Result<bool> {
        self.watchdog
            .wait_lost(deadline.saturating_duration_since(Instant::now()))
    }
}
