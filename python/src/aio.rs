//! The native asyncio core: the async Rust client on a tokio runtime of
//! its own (pyo3-async-runtimes'), each network call an awaitable that
//! resolves on the event loop when the Rust future finishes (delivered in
//! batches: `deliver.rs`). No thread per call; cancelling the awaiting task
//! drops the Rust future, and the client finishes or undoes what it had
//! started (an acquisition whose caller is gone stops retrying, a grant it
//! won anyway is released, a single-node wait is ended on the server);
//! releases and `stop_watchdog` run to their end instead, and put the
//! handle's state back. `redislock_native.aio` wraps these classes.

use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use redis_lock_client::{Error, Lock, Watchdog};

use crate::deliver::{self, OnCancel};
use crate::{fork_check, map_err, pid, raise, seconds, ttl_seconds, Release};

pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    RUNTIME_PID.get_or_init(pid);
    pyo3_async_runtimes::tokio::get_runtime()
}

/// The process that started pyo3-async-runtimes' tokio runtime (one per
/// process, never made again): a child forked after that has the runtime
/// without its threads, where every awaitable would wait forever.
static RUNTIME_PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// Refuses at once, in a process forked after the asyncio runtime started,
/// instead of returning awaitables that never resolve.
fn runtime_check(py: Python<'_>) -> PyResult<()> {
    match RUNTIME_PID.get() {
        Some(&started) if started != pid() => Err(raise(
            py,
            "ForkedProcessError",
            format!(
                "the asyncio client's runtime was started in process {started} and has no threads in process {} (a fork): an AsyncRedlock cannot work here; start worker processes with multiprocessing's 'spawn' or 'forkserver' method, or use the asyncio client only after the fork",
                pid()
            ),
            vec![],
        )),
        _ => Ok(()),
    }
}

fn state_err(py: Python<'_>, why: &str) -> PyErr {
    raise(py, "RedisLockError", why.to_string(), vec![])
}

/// The outcome of a finished operation: its value, or the exception that
/// says what to do (made on the loop's thread, with the GIL).
fn reply<T>(result: Result<T, Error>) -> impl FnOnce(Python<'_>) -> PyResult<PyObject> + Send
where
    T: for<'py> IntoPyObject<'py> + Send,
{
    move |py: Python<'_>| match result {
        Ok(value) => value.into_py_any(py),
        Err(error) => Err(map_err(py, error)),
    }
}

/// The async client of one AsyncRedlock (one for every `wait`: a handle's
/// own deadline goes to `Lock::acquire_for`).
struct Clients {
    default: ManuallyDrop<redis_lock_client::Redlock>,
    pid: u32,
}

impl Clients {
    /// `work` on the runtime, as an awaitable of the running loop.
    fn spawn<'py, F, O>(
        &self,
        py: Python<'py>,
        on_cancel: OnCancel,
        work: F,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = O> + Send + 'static,
        O: FnOnce(Python<'_>) -> PyResult<PyObject> + Send + 'static,
    {
        deliver::spawn(py, runtime(), on_cancel, work)
    }
}

fn make(
    nodes: &[String],
    cluster: bool,
    tls: Option<&redis_lock_client::Tls>,
    config: redis_lock_client::Config,
) -> Result<redis_lock_client::Redlock, Error> {
    // Connections spawn their tasks on the runtime they are made in.
    let _entered = runtime().enter();
    match (cluster, tls) {
        (true, None) => redis_lock_client::Redlock::cluster_with_config(nodes.to_vec(), config),
        (true, Some(tls)) => redis_lock_client::Redlock::cluster_tls(nodes.to_vec(), tls, config),
        (false, None) => redis_lock_client::Redlock::with_config(nodes.to_vec(), config),
        (false, Some(tls)) => redis_lock_client::Redlock::with_config(
            nodes.iter().map(|n| tls.node(n.as_str())),
            config,
        ),
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        // In a forked child the runtime's threads do not exist: leave it.
        if pid() != self.pid {
            return;
        }
        let _entered = runtime().enter();
        // SAFETY: each ManuallyDrop is taken once, here, and not used again.
        drop(unsafe { ManuallyDrop::take(&mut self.default) });
    }
}

/// The native core of `redislock_native.aio.AsyncRedlock`.
#[pyclass(module = "redislock_native", frozen)]
pub struct AsyncRedlockCore {
    clients: Arc<Clients>,
    ttl: Duration,
}

#[pymethods]
impl AsyncRedlockCore {
    /// The same nodes, settings and TTL as `sync` (a Redlock), with TLS
    /// settings given again (they are not readable back from it).
    #[new]
    #[pyo3(signature = (sync, tls_ca = None, tls_cert = None, tls_key = None))]
    fn new(
        py: Python<'_>,
        sync: PyRef<'_, crate::Redlock>,
        tls_ca: Option<std::path::PathBuf>,
        tls_cert: Option<std::path::PathBuf>,
        tls_key: Option<std::path::PathBuf>,
    ) -> PyResult<AsyncRedlockCore> {
        runtime_check(py)?;
        let tls = crate::tls_settings(py, tls_ca, tls_cert, tls_key)?;
        let (nodes, cluster, config) = sync.parts();
        let default = py
            .allow_threads(move || make(&nodes, cluster, tls.as_ref(), config))
            .map_err(|e| map_err(py, e))?;
        Ok(AsyncRedlockCore {
            clients: Arc::new(Clients {
                default: ManuallyDrop::new(default),
                pid: pid(),
            }),
            ttl: sync.default_ttl(),
        })
    }

    /// A handle, not acquired: kind "exclusive", "shared" or "permit"
    /// (with `permits`).
    #[pyo3(signature = (kind, resource, *, ttl = None, wait = None, permits = 0))]
    fn handle(
        &self,
        py: Python<'_>,
        kind: &str,
        resource: String,
        ttl: Option<f64>,
        wait: Option<f64>,
        permits: u32,
    ) -> PyResult<AsyncLockCore> {
        fork_check(py, self.clients.pid)?;
        let ttl = ttl.map_or(Ok(self.ttl), ttl_seconds)?;
        let wait = wait.map(|w| seconds("wait", w)).transpose()?;
        let client = &*self.clients.default;
        let _entered = runtime().enter();
        let lock = match kind {
            "exclusive" => client.lock(resource, ttl),
            "shared" => client.lock_shared(resource, ttl),
            "permit" => client
                .semaphore(resource, permits)
                .and_then(|s| s.permit(ttl)),
            _ => Err(Error::InvalidConfig(format!("unknown lock kind {kind:?}"))),
        }
        .map_err(|e| map_err(py, e))?;
        Ok(AsyncLockCore {
            resource: lock.resource().to_string(),
            owner: lock.owner().to_string(),
            state: ManuallyDrop::new(Arc::new(Mutex::new(State::Plain(Arc::new(lock))))),
            settled: Arc::new(tokio::sync::Notify::new()),
            try_only: wait.is_some_and(|w| w.is_zero()),
            wait: wait.filter(|w| !w.is_zero()),
            pid: self.clients.pid,
            clients: Arc::clone(&self.clients),
        })
    }
}

enum State {
    Plain(Arc<Lock>),
    /// The holds it had when the watchdog took it.
    Watched(Arc<Watchdog>, u32),
    /// Between states: a watchdog stopping (a release or stop_watchdog()
    /// finishing, in the background if its task was cancelled). Operations
    /// say so (not NotHeld: the lock may still be held).
    Gone,
}

const IN_FLIGHT: &str =
    "another operation on this lock is in flight: await it before starting or stopping the watchdog";
const WATCHED: &str = "a watchdog renews this lock: call stop_watchdog() first";
const STOPPING: &str = "this lock's watchdog is stopping (a release() or stop_watchdog() still \
     finishing, perhaps after its task was cancelled): await it, or try again once `stopping` is \
     False";

/// The native core of `redislock_native.aio.AsyncLock`.
#[pyclass(module = "redislock_native", frozen)]
pub struct AsyncLockCore {
    state: ManuallyDrop<Arc<Mutex<State>>>,
    /// Told when a stop that went on in the background (the state `Gone`)
    /// has handed the lock back (`settled()`).
    settled: Arc<tokio::sync::Notify>,
    resource: String,
    owner: String,
    try_only: bool,
    /// Made with a `wait` above 0: each acquisition's own deadline.
    wait: Option<Duration>,
    pid: u32,
    clients: Arc<Clients>,
}

impl AsyncLockCore {
    fn plain(&self, py: Python<'_>) -> PyResult<Arc<Lock>> {
        fork_check(py, self.pid)?;
        match &*self.lock_state()? {
            State::Plain(lock) => Ok(Arc::clone(lock)),
            State::Watched(..) => Err(raise(py, "RedisLockError", WATCHED.into(), vec![])),
            // Between states: a release or stop of the watchdog finishing.
            State::Gone => Err(state_err(py, STOPPING)),
        }
    }

    fn lock_state(&self) -> PyResult<std::sync::MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| {
            Python::with_gil(|py| state_err(py, "a thread panicked while using this lock handle"))
        })
    }

    fn read<T>(
        &self,
        plain: impl Fn(&Lock) -> T,
        watched: impl Fn(&Watchdog, u32) -> T,
        gone: T,
    ) -> PyResult<T> {
        Ok(match &*self.lock_state()? {
            State::Plain(lock) => plain(lock),
            State::Watched(w, holds) => watched(w, *holds),
            State::Gone => gone,
        })
    }
}

impl Drop for AsyncLockCore {
    fn drop(&mut self) {
        if pid() != self.pid {
            return;
        }
        // SAFETY: taken once, here; the field is not used again.
        let state = unsafe { ManuallyDrop::take(&mut self.state) };
        // A held lock (or a watchdog) releases itself in the background on
        // the runtime when dropped.
        let _entered = runtime().enter();
        drop(state);
    }
}

#[pymethods]
impl AsyncLockCore {
    /// Awaitable: acquires (or adds a hold); with wait=0 one attempt.
    /// Cancelling it drops the acquisition (a grant won anyway is released).
    fn acquire<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let lock = self.plain(py)?;
        let (try_only, wait) = (self.try_only, self.wait);
        let resource = self.resource.clone();
        self.clients.spawn(py, OnCancel::Abort, async move {
            let acquired = if try_only {
                lock.try_acquire().await
            } else {
                match wait {
                    Some(wait) => lock.acquire_for(wait).await,
                    None => lock.acquire().await,
                }
            };
            move |py: Python<'_>| match acquired {
                Ok(_) => Ok(py.None()),
                Err(Error::NotAcquired { .. }) if try_only => Err(raise(
                    py,
                    "LockNotAcquired",
                    format!("{resource} is held elsewhere (one attempt, wait=0): pass wait=... to wait for it"),
                    vec![],
                )),
                Err(e) => Err(map_err(py, e)),
            }
        })
    }

    /// Awaitable: one attempt; True when acquired.
    fn try_acquire<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let lock = self.plain(py)?;
        self.clients.spawn(py, OnCancel::Abort, async move {
            reply(match lock.try_acquire().await {
                Ok(_) => Ok(true),
                Err(Error::NotAcquired { .. }) => Ok(false),
                Err(e) => Err(e),
            })
        })
    }

    /// Awaitable: renews the lease; the new validity in seconds.
    #[pyo3(signature = (ttl = None))]
    fn extend<'py>(&self, py: Python<'py>, ttl: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let ttl = ttl.map(ttl_seconds).transpose()?;
        let lock = self.plain(py)?;
        self.clients.spawn(py, OnCancel::Abort, async move {
            let extended = match ttl {
                Some(ttl) => lock.extend_with(ttl).await,
                None => lock.extend().await,
            };
            reply(extended.map(|e| e.validity.as_secs_f64()))
        })
    }

    /// Awaitable: releases one hold (`all`: every hold); under a watchdog
    /// stops it and releases every hold. Runs to its end even when the
    /// awaiting task is cancelled (as if shielded): the lock is released
    /// and the handle usable again afterwards.
    #[pyo3(signature = (all = false))]
    fn release<'py>(&self, py: Python<'py>, all: bool) -> PyResult<Bound<'py, PyAny>> {
        fork_check(py, self.pid)?;
        let state = Arc::clone(&self.state);
        let watched = {
            let mut guard = self.lock_state()?;
            match &*guard {
                State::Watched(..) => match std::mem::replace(&mut *guard, State::Gone) {
                    State::Watched(w, holds) => match Arc::try_unwrap(w) {
                        Ok(w) => Some(w),
                        Err(w) => {
                            *guard = State::Watched(w, holds);
                            return Err(state_err(py, IN_FLIGHT));
                        }
                    },
                    _ => None,
                },
                _ => None,
            }
        };
        if let Some(watchdog) = watched {
            let settled = Arc::clone(&self.settled);
            return self.clients.spawn(py, OnCancel::Finish, async move {
                let lock = watchdog.stop().await;
                let released = lock.release_all().await;
                if let Ok(mut guard) = state.lock() {
                    *guard = State::Plain(Arc::new(lock));
                }
                settled.notify_waiters();
                reply(released.map(Release::from))
            });
        }
        let lock = self.plain(py)?;
        self.clients.spawn(py, OnCancel::Finish, async move {
            let released = if all {
                lock.release_all().await
            } else {
                lock.release().await
            };
            reply(released.map(Release::from))
        })
    }

    /// Awaitable: the fencing token of this hold.
    fn token<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        fork_check(py, self.pid)?;
        let (plain, watched) = match &*self.lock_state()? {
            State::Plain(lock) => (Some(Arc::clone(lock)), None),
            State::Watched(w, _) => (None, Some(Arc::clone(w))),
            State::Gone => return Err(state_err(py, STOPPING)),
        };
        self.clients.spawn(py, OnCancel::Abort, async move {
            reply(match (plain, watched) {
                (Some(lock), _) => lock.fencing_token().await,
                (_, Some(w)) => w.fencing_token().await,
                _ => Err(Error::NotHeld),
            })
        })
    }

    /// Awaitable: hands the held lock to a watchdog.
    fn start_watchdog<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        fork_check(py, self.pid)?;
        {
            let mut guard = self.lock_state()?;
            match std::mem::replace(&mut *guard, State::Gone) {
                State::Plain(lock) => {
                    if !lock.is_held() {
                        *guard = State::Plain(lock);
                        return Err(map_err(py, Error::NotHeld));
                    }
                    let holds = lock.holds();
                    let lock = match Arc::try_unwrap(lock) {
                        Ok(lock) => lock,
                        Err(lock) => {
                            *guard = State::Plain(lock);
                            return Err(state_err(py, IN_FLIGHT));
                        }
                    };
                    let _entered = runtime().enter();
                    match lock.watchdog() {
                        Ok(w) => *guard = State::Watched(Arc::new(w), holds),
                        Err(e) => return Err(map_err(py, e)),
                    }
                }
                // A stop still finishing: no watchdog can start now (the
                // caller would think the lock renewed).
                State::Gone => return Err(state_err(py, STOPPING)),
                other => *guard = other,
            }
        }
        deliver::ready(py, py.None())
    }

    /// Awaitable: stops the watchdog; the lock stays held. Runs to its end
    /// even when the awaiting task is cancelled (the handle then holds the
    /// lock without a watchdog, as after a completed call).
    fn stop_watchdog<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        fork_check(py, self.pid)?;
        let state = Arc::clone(&self.state);
        let watchdog = {
            let mut guard = self.lock_state()?;
            match std::mem::replace(&mut *guard, State::Gone) {
                State::Watched(w, holds) => match Arc::try_unwrap(w) {
                    Ok(w) => Some(w),
                    Err(w) => {
                        *guard = State::Watched(w, holds);
                        return Err(state_err(py, IN_FLIGHT));
                    }
                },
                other => {
                    *guard = other;
                    None
                }
            }
        };
        let Some(watchdog) = watchdog else {
            return deliver::ready(py, py.None());
        };
        let settled = Arc::clone(&self.settled);
        self.clients.spawn(py, OnCancel::Finish, async move {
            let lock = watchdog.stop().await;
            if let Ok(mut guard) = state.lock() {
                *guard = State::Plain(Arc::new(lock));
            }
            settled.notify_waiters();
            reply(Ok(()))
        })
    }

    /// Awaitable: resolves once no release or stop_watchdog() of a watched
    /// lock is still finishing (at once when none is): `stopping` is False
    /// then, and `holds` says what the handle holds.
    fn settled<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        fork_check(py, self.pid)?;
        let state = Arc::clone(&self.state);
        let settled = Arc::clone(&self.settled);
        self.clients.spawn(py, OnCancel::Abort, async move {
            loop {
                // Registered before the look, so that a hand-back between
                // the two is not missed (`notify_waiters` wakes every
                // `Notified` made before it).
                let handed_back = settled.notified();
                let stopping = state
                    .lock()
                    .is_ok_and(|guard| matches!(*guard, State::Gone));
                if !stopping {
                    break;
                }
                handed_back.await;
            }
            reply(Ok(()))
        })
    }

    /// Awaitable: resolves when the watchdog stops watching: True when the
    /// lock was lost, False when the watchdog was stopped.
    fn lost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        fork_check(py, self.pid)?;
        let lost =
            match &*self.lock_state()? {
                State::Watched(w, _) => w.lost(),
                _ => return Err(raise(
                    py,
                    "RedisLockError",
                    "no watchdog renews this lock: lost() needs watchdog=True or start_watchdog()"
                        .into(),
                    vec![],
                )),
            };
        self.clients.spawn(py, OnCancel::Abort, async move {
            reply(Ok(matches!(
                lost.await,
                redis_lock_client::LockStatus::Lost { .. }
            )))
        })
    }

    #[getter]
    fn watched(&self) -> PyResult<bool> {
        self.read(|_| false, |_, _| true, false)
    }

    /// A release or stop_watchdog() is finishing (perhaps in the
    /// background, its task cancelled): the handle's other operations
    /// wait for it to end. `watched` is already False then.
    #[getter]
    fn stopping(&self) -> PyResult<bool> {
        self.read(|_| false, |_, _| false, true)
    }

    #[getter]
    fn is_lost(&self) -> PyResult<bool> {
        self.read(|_| false, |w, _| w.is_lost(), false)
    }

    #[getter]
    fn is_held(&self) -> PyResult<bool> {
        self.read(|l| l.is_held(), |w, _| w.is_held(), false)
    }

    #[getter]
    fn validity(&self) -> PyResult<f64> {
        self.read(
            |l| l.validity().map_or(0.0, |v| v.as_secs_f64()),
            |w, _| w.validity().map_or(0.0, |v| v.as_secs_f64()),
            0.0,
        )
    }

    #[getter]
    fn holds(&self) -> PyResult<u32> {
        self.read(|l| l.holds(), |_, holds| holds, 0)
    }

    #[getter]
    fn resource(&self) -> &str {
        &self.resource
    }

    #[getter]
    fn owner(&self) -> &str {
        &self.owner
    }
}
