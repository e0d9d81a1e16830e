//! `redislock_native._native`: the Python classes over
//! `redis_lock_client::blocking`. Every lock rule (quorum, validity, drift,
//! fencing write-back, re-entry) stays in the Rust client; this layer only
//! converts arguments, releases the GIL around every network round, maps
//! errors to the exceptions of `redislock_native._errors`, and refuses a
//! handle used in a process forked from the one that made it.

mod aio;
mod deliver;

use std::mem::ManuallyDrop;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use redis_lock_client::blocking;
use redis_lock_client::{Acknowledge, Error, NodeOutcome};

// ---------------------------------------------------------------------------
// Errors

/// Raises `redislock_native._errors.<class>(message, **attrs)`.
fn raise(py: Python<'_>, class: &str, message: String, attrs: Vec<(&str, PyObject)>) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let module = py.import("redislock_native._errors")?;
        let exception = module.getattr(class)?.call1((message.clone(),))?;
        for (name, value) in attrs {
            exception.setattr(name, value)?;
        }
        Ok(PyErr::from_value(exception))
    })();
    made.unwrap_or_else(|e| e)
}

/// A store's refusal of a stale fencing token (`STALE …`, whatever
/// exception class the store's client raised it as) as StaleToken, chained
/// to the original; any other error as it is.
fn stale_or(py: Python<'_>, error: PyErr) -> PyErr {
    let message = error.value(py).to_string();
    if !redis_lock_client::is_stale_message(&message) {
        return error;
    }
    let stale = raise(py, "StaleToken", message, Vec::new());
    stale.set_cause(py, Some(error));
    stale
}

fn outcomes(py: Python<'_>, outcomes: &[NodeOutcome]) -> PyObject {
    let list: Vec<(String, String)> = outcomes
        .iter()
        .map(|o| {
            let text = o.to_string();
            let detail = text
                .strip_prefix(&format!("{}: ", o.node))
                .unwrap_or(&text)
                .to_string();
            (o.node.clone(), detail)
        })
        .collect();
    to_py(py, list)
}

fn to_py<'py, T: IntoPyObject<'py>>(py: Python<'py>, value: T) -> PyObject {
    value
        .into_bound_py_any(py)
        .map(Bound::unbind)
        .unwrap_or_else(|_| py.None())
}

/// The crate's error as the Python exception that says what to do.
fn map_err(py: Python<'_>, error: Error) -> PyErr {
    let message = error.to_string();
    match error {
        Error::NotAcquired {
            attempts,
            elapsed,
            outcomes: o,
        } => raise(
            py,
            "LockNotAcquired",
            format!("{message}; it is held elsewhere or too few nodes answered: wait longer (wait=...) or retry later"),
            vec![
                ("attempts", to_py(py, attempts)),
                ("elapsed", to_py(py, elapsed.as_secs_f64())),
                ("outcomes", outcomes(py, &o)),
            ],
        ),
        Error::QuorumLost {
            confirmed,
            quorum,
            outcomes: o,
        } => raise(
            py,
            "LockLost",
            format!("{message}; stop the work done under this lock and acquire it again"),
            vec![
                ("confirmed", to_py(py, confirmed)),
                ("quorum", to_py(py, quorum)),
                ("outcomes", outcomes(py, &o)),
            ],
        ),
        Error::Expired => raise(
            py,
            "LockExpired",
            format!("{message}; acquire it again (a longer ttl, or extend() sooner)"),
            vec![],
        ),
        Error::LockLost => raise(
            py,
            "LockLost",
            format!("{message}; acquire it again"),
            vec![],
        ),
        Error::Node { node, error } => raise(
            py,
            "NodeError",
            format!("{message}; check that the node is up and has the redis-lock module loaded"),
            vec![
                ("node", to_py(py, node)),
                ("detail", to_py(py, error.to_string())),
            ],
        ),
        Error::NotHeld => raise(
            py,
            "NotHeld",
            format!("{message}: acquire it first (it was never acquired, or already released)"),
            vec![],
        ),
        Error::InvalidConfig(_) => raise(py, "ConfigError", message, vec![]),
        Error::Runtime(_) => raise(py, "RedisLockError", message, vec![]),
        // A variant added to the crate later.
        #[allow(unreachable_patterns)]
        _ => raise(py, "RedisLockError", message, vec![]),
    }
}

trait OrRaise<T> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> OrRaise<T> for Result<T, Error> {
    fn or_raise(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| map_err(py, e))
    }
}

// ---------------------------------------------------------------------------
// Seconds

/// Seconds as a float to a Duration: negative, NaN and infinite values are
/// refused with ValueError.
fn seconds(name: &str, value: f64) -> PyResult<Duration> {
    if !value.is_finite() || value < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{name} must be a finite number of seconds >= 0, not {value}"
        )));
    }
    Duration::try_from_secs_f64(value)
        .map_err(|e| PyValueError::new_err(format!("{name} is out of range ({value}): {e}")))
}

/// A TTL in seconds, rounded to whole milliseconds (what the module takes).
fn ttl_seconds(value: f64) -> PyResult<Duration> {
    let duration = seconds("ttl", value)?;
    let millis = (duration.as_secs_f64() * 1000.0).round();
    if millis > u64::MAX as f64 {
        return Err(PyValueError::new_err("ttl is too large"));
    }
    Ok(Duration::from_millis(millis as u64))
}

fn pid() -> u32 {
    std::process::id()
}

fn fork_check(py: Python<'_>, made_in: u32) -> PyResult<()> {
    let now = pid();
    if now == made_in {
        return Ok(());
    }
    Err(raise(
        py,
        "ForkedProcessError",
        format!(
            "this handle was made in process {made_in} and cannot be used in process {now} (a fork): its connections and background threads stay in the parent; create a new Redlock in the child"
        ),
        vec![],
    ))
}

// ---------------------------------------------------------------------------
// Config

/// Client settings (see the Rust crate's `Config`); durations in seconds.
#[pyclass(module = "redislock_native", frozen)]
#[derive(Clone)]
pub struct Config {
    inner: redis_lock_client::Config,
}

#[pymethods]
impl Config {
    #[new]
    #[pyo3(signature = (
        *,
        node_timeout = 0.1,
        retry_count = 3,
        retry_delay = 0.2,
        retry_jitter = 0.1,
        acquire_timeout = None,
        drift_factor = 0.01,
        drift_min = 0.002,
        watchdog_interval = None,
        watchdog_margin = 0.01,
        acknowledge_replicas = 0,
        acknowledge_fsync = false,
        acknowledge_replica_fsyncs = 0,
        acknowledge_timeout = 0.1,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        node_timeout: f64,
        retry_count: u32,
        retry_delay: f64,
        retry_jitter: f64,
        acquire_timeout: Option<f64>,
        drift_factor: f64,
        drift_min: f64,
        watchdog_interval: Option<f64>,
        watchdog_margin: f64,
        acknowledge_replicas: u32,
        acknowledge_fsync: bool,
        acknowledge_replica_fsyncs: u32,
        acknowledge_timeout: f64,
    ) -> PyResult<Config> {
        if !drift_factor.is_finite() {
            return Err(raise(
                py,
                "ConfigError",
                format!("drift_factor must be in 0.0..1.0, not {drift_factor}"),
                vec![],
            ));
        }
        let acknowledge =
            if acknowledge_replicas > 0 || acknowledge_fsync || acknowledge_replica_fsyncs > 0 {
                Some(Acknowledge {
                    replicas: acknowledge_replicas,
                    local_fsync: acknowledge_fsync,
                    replica_fsyncs: acknowledge_replica_fsyncs,
                    timeout: seconds("acknowledge_timeout", acknowledge_timeout)?,
                })
            } else {
                None
            };
        let inner = redis_lock_client::Config {
            node_timeout: seconds("node_timeout", node_timeout)?,
            retry_count,
            retry_delay: seconds("retry_delay", retry_delay)?,
            retry_jitter: seconds("retry_jitter", retry_jitter)?,
            acquire_timeout: acquire_timeout
                .map(|t| seconds("acquire_timeout", t))
                .transpose()?,
            drift_factor,
            drift_min: seconds("drift_min", drift_min)?,
            watchdog_interval: watchdog_interval
                .map(|t| seconds("watchdog_interval", t))
                .transpose()?,
            watchdog_margin: seconds("watchdog_margin", watchdog_margin)?,
            acknowledge,
            ..redis_lock_client::Config::default()
        };
        inner.validate().or_raise(py)?;
        Ok(Config { inner })
    }

    #[getter]
    fn node_timeout(&self) -> f64 {
        self.inner.node_timeout.as_secs_f64()
    }
    #[getter]
    fn retry_count(&self) -> u32 {
        self.inner.retry_count
    }
    #[getter]
    fn retry_delay(&self) -> f64 {
        self.inner.retry_delay.as_secs_f64()
    }
    #[getter]
    fn retry_jitter(&self) -> f64 {
        self.inner.retry_jitter.as_secs_f64()
    }
    #[getter]
    fn acquire_timeout(&self) -> Option<f64> {
        self.inner.acquire_timeout.map(|d| d.as_secs_f64())
    }
    #[getter]
    fn drift_factor(&self) -> f64 {
        self.inner.drift_factor
    }
    #[getter]
    fn drift_min(&self) -> f64 {
        self.inner.drift_min.as_secs_f64()
    }
    #[getter]
    fn watchdog_interval(&self) -> Option<f64> {
        self.inner.watchdog_interval.map(|d| d.as_secs_f64())
    }
    #[getter]
    fn watchdog_margin(&self) -> f64 {
        self.inner.watchdog_margin.as_secs_f64()
    }
    #[getter]
    fn acknowledge_replicas(&self) -> u32 {
        self.inner.acknowledge.map_or(0, |a| a.replicas)
    }
    #[getter]
    fn acknowledge_fsync(&self) -> bool {
        self.inner.acknowledge.is_some_and(|a| a.local_fsync)
    }
    #[getter]
    fn acknowledge_replica_fsyncs(&self) -> u32 {
        self.inner.acknowledge.map_or(0, |a| a.replica_fsyncs)
    }

    /// The clock-drift allowance for a TTL, in seconds.
    fn drift(&self, ttl: f64) -> PyResult<f64> {
        Ok(self.inner.drift(ttl_seconds(ttl)?).as_secs_f64())
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }
}

// ---------------------------------------------------------------------------
// Redlock

/// The client of one `Redlock` (one for every `wait`: a handle's own
/// deadline goes to `Lock::acquire_for`).
struct Clients {
    /// What it was made from (for the asyncio client made from it).
    nodes: Vec<String>,
    cluster: bool,
    config: redis_lock_client::Config,
    default: ManuallyDrop<blocking::Redlock>,
    pid: u32,
}

impl Drop for Clients {
    fn drop(&mut self) {
        // In a forked child the runtime's threads do not exist: leave it.
        if pid() != self.pid {
            return;
        }
        // SAFETY: each ManuallyDrop is taken once, here, and not used again.
        let default = unsafe { ManuallyDrop::take(&mut self.default) };
        drop(default);
    }
}

fn make_client(
    nodes: &[String],
    cluster: bool,
    tls: Option<&redis_lock_client::Tls>,
    config: redis_lock_client::Config,
) -> Result<blocking::Redlock, Error> {
    match (cluster, tls) {
        (true, None) => blocking::Redlock::cluster_with_config(nodes.to_vec(), config),
        (true, Some(tls)) => blocking::Redlock::cluster_tls(nodes.to_vec(), tls, config),
        (false, None) => blocking::Redlock::with_config(nodes.to_vec(), config),
        (false, Some(tls)) => {
            blocking::Redlock::with_config(nodes.iter().map(|n| tls.node(n.as_str())), config)
        }
    }
}

/// A PEM file named by a `tls_*` argument.
fn read_pem(py: Python<'_>, name: &str, path: &std::path::Path) -> PyResult<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        raise(
            py,
            "ConfigError",
            format!("{name}: cannot read the PEM file {}: {e}", path.display()),
            vec![],
        )
    })
}

/// The TLS settings of the `tls_*` arguments; None when none is given
/// (a `rediss://` URL then trusts the system's roots).
fn tls_settings(
    py: Python<'_>,
    ca: Option<std::path::PathBuf>,
    cert: Option<std::path::PathBuf>,
    key: Option<std::path::PathBuf>,
) -> PyResult<Option<redis_lock_client::Tls>> {
    let mut tls = redis_lock_client::Tls::new();
    let mut any = false;
    if let Some(ca) = ca {
        tls = tls.ca_pem(read_pem(py, "tls_ca", &ca)?);
        any = true;
    }
    match (cert, key) {
        (Some(cert), Some(key)) => {
            tls = tls.client_pem(
                read_pem(py, "tls_cert", &cert)?,
                read_pem(py, "tls_key", &key)?,
            );
            any = true;
        }
        (None, None) => {}
        _ => {
            return Err(raise(
                py,
                "ConfigError",
                "tls_cert and tls_key go together: give both (mutual TLS) or neither".into(),
                vec![],
            ))
        }
    }
    Ok(any.then_some(tls))
}

/// Locks over one Redis node or N independent masters with the redis-lock
/// module loaded (Redlock), or over a Redis Cluster (`cluster=True`).
#[pyclass(module = "redislock_native", frozen)]
pub struct Redlock {
    clients: Arc<Clients>,
    ttl: Duration,
}

#[derive(FromPyObject)]
enum Nodes {
    One(String),
    Many(Vec<String>),
}

impl Redlock {
    /// Nodes, cluster mode and settings, for the asyncio core.
    fn parts(&self) -> (Vec<String>, bool, redis_lock_client::Config) {
        (
            self.clients.nodes.clone(),
            self.clients.cluster,
            self.clients.config.clone(),
        )
    }

    fn default_ttl(&self) -> Duration {
        self.ttl
    }

    fn check(&self, py: Python<'_>) -> PyResult<()> {
        fork_check(py, self.clients.pid)
    }

    fn ttl_or_default(&self, ttl: Option<f64>) -> PyResult<Duration> {
        ttl.map_or(Ok(self.ttl), ttl_seconds)
    }

    /// A handle; with `then_acquire` also acquired, in the same stretch
    /// without the GIL (one GIL hand-off fewer per lock: they are the
    /// client's main CPU cost when many threads lock at once). A handle
    /// whose acquisition fails is dropped holding nothing.
    #[allow(clippy::too_many_arguments)]
    fn handle(
        &self,
        py: Python<'_>,
        kind: HandleKind,
        ttl: Option<f64>,
        wait: Option<f64>,
        watchdog: bool,
        then_acquire: bool,
    ) -> PyResult<Lock> {
        self.check(py)?;
        let ttl = self.ttl_or_default(ttl)?;
        let wait = wait.map(|w| seconds("wait", w)).transpose()?;
        let clients = Arc::clone(&self.clients);
        let inner = py
            .allow_threads(|| -> Result<blocking::Lock, Error> {
                let client = &*clients.default;
                let lock = match kind {
                    HandleKind::Exclusive(resource) => client.lock(resource, ttl),
                    HandleKind::Shared(resource) => client.lock_shared(resource, ttl),
                    HandleKind::Permit(resource, permits) => {
                        client.semaphore(resource, permits)?.permit(ttl)
                    }
                }?;
                if then_acquire {
                    match wait.filter(|w| !w.is_zero()) {
                        Some(wait) => lock.acquire_for(wait)?,
                        None => lock.acquire()?,
                    };
                }
                Ok(lock)
            })
            .or_raise(py)?;
        Ok(Lock::new(inner, wait, watchdog, &self.clients))
    }
}

enum HandleKind {
    Exclusive(String),
    Shared(String),
    Permit(String, u32),
}

#[pymethods]
impl Redlock {
    #[new]
    #[pyo3(signature = (
        nodes, *, ttl = 10.0, config = None, cluster = false,
        tls_ca = None, tls_cert = None, tls_key = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        nodes: Nodes,
        ttl: f64,
        config: Option<PyRef<'_, Config>>,
        cluster: bool,
        tls_ca: Option<std::path::PathBuf>,
        tls_cert: Option<std::path::PathBuf>,
        tls_key: Option<std::path::PathBuf>,
    ) -> PyResult<Redlock> {
        let tls = tls_settings(py, tls_ca, tls_cert, tls_key)?;
        let nodes = match nodes {
            Nodes::One(node) => vec![node],
            Nodes::Many(nodes) => nodes,
        };
        let config = config.map_or_else(redis_lock_client::Config::default, |c| c.inner.clone());
        let ttl = ttl_seconds(ttl)?;
        config.validate_ttl(ttl).or_raise(py)?;
        let default = {
            let (nodes, config) = (nodes.clone(), config.clone());
            py.allow_threads(move || make_client(&nodes, cluster, tls.as_ref(), config))
                .or_raise(py)?
        };
        Ok(Redlock {
            clients: Arc::new(Clients {
                nodes,
                cluster,
                config,
                default: ManuallyDrop::new(default),
                pid: pid(),
            }),
            ttl,
        })
    }

    /// A handle for an exclusive lock on `resource`, not yet acquired: use
    /// it in a `with` block (acquires on entry, releases on exit) or call
    /// `acquire()`.
    /// With `watchdog=True` the `with` block also hands the lock to a
    /// watchdog renewing it in the background.
    #[pyo3(signature = (resource, *, ttl = None, wait = None, watchdog = false))]
    fn lock(
        &self,
        py: Python<'_>,
        resource: String,
        ttl: Option<f64>,
        wait: Option<f64>,
        watchdog: bool,
    ) -> PyResult<Lock> {
        self.handle(
            py,
            HandleKind::Exclusive(resource),
            ttl,
            wait,
            watchdog,
            false,
        )
    }

    /// Acquires an exclusive lock on `resource` and returns it.
    #[pyo3(signature = (resource, *, ttl = None, wait = None))]
    fn acquire(
        &self,
        py: Python<'_>,
        resource: String,
        ttl: Option<f64>,
        wait: Option<f64>,
    ) -> PyResult<Lock> {
        // wait=0: one attempt, with the message of Lock.acquire.
        if wait == Some(0.0) {
            let lock = self.handle(py, HandleKind::Exclusive(resource), ttl, wait, false, false)?;
            lock.acquire(py)?;
            return Ok(lock);
        }
        self.handle(py, HandleKind::Exclusive(resource), ttl, wait, false, true)
    }

    /// One attempt at an exclusive lock, no waiting: the Lock, or None when
    /// it is held elsewhere.
    #[pyo3(signature = (resource, *, ttl = None))]
    fn try_lock(
        &self,
        py: Python<'_>,
        resource: String,
        ttl: Option<f64>,
    ) -> PyResult<Option<Lock>> {
        let lock = self.handle(
            py,
            HandleKind::Exclusive(resource),
            ttl,
            Some(0.0),
            false,
            false,
        )?;
        Ok(lock.try_acquire(py)?.then_some(lock))
    }

    /// A handle for a shared (read) lock on `resource`, not yet acquired:
    /// shared holders exclude exclusive ones, not each other.
    #[pyo3(signature = (resource, *, ttl = None, wait = None, watchdog = false))]
    fn read_lock(
        &self,
        py: Python<'_>,
        resource: String,
        ttl: Option<f64>,
        wait: Option<f64>,
        watchdog: bool,
    ) -> PyResult<Lock> {
        self.handle(py, HandleKind::Shared(resource), ttl, wait, watchdog, false)
    }

    /// A semaphore of `permits` leased permits on `resource`.
    #[pyo3(signature = (resource, *, permits))]
    fn semaphore(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        resource: String,
        permits: u32,
    ) -> PyResult<Semaphore> {
        slf.check(py)?;
        // The crate's own check of `permits` (and of the resource).
        let client = (*slf.clients.default).clone();
        py.allow_threads(|| client.semaphore(resource.clone(), permits).map(|_| ()))
            .or_raise(py)?;
        Ok(Semaphore {
            redlock: slf.into(),
            resource,
            permits,
        })
    }

    /// Nodes that must agree: N/2 + 1.
    #[getter]
    fn quorum(&self, py: Python<'_>) -> PyResult<usize> {
        self.check(py)?;
        Ok(self.clients.default.quorum())
    }

    /// The nodes' names (`host:port`).
    #[getter]
    fn nodes(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.check(py)?;
        Ok(self.clients.default.node_names())
    }

    /// The default TTL in seconds.
    #[getter]
    fn ttl(&self) -> f64 {
        self.ttl.as_secs_f64()
    }

    /// The settings.
    #[getter]
    fn config(&self) -> Config {
        Config {
            inner: self.clients.config.clone(),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Redlock(nodes={:?}, ttl={}, quorum={})",
            self.clients.nodes,
            self.ttl.as_secs_f64(),
            self.clients.default.quorum()
        )
    }
}

// ---------------------------------------------------------------------------
// Semaphore

/// `permits` leased permits on one resource: at most that many holders.
#[pyclass(module = "redislock_native", frozen)]
pub struct Semaphore {
    redlock: Py<Redlock>,
    resource: String,
    permits: u32,
}

#[pymethods]
impl Semaphore {
    /// A handle for one permit, not yet acquired (a context manager).
    #[pyo3(signature = (*, ttl = None, wait = None, watchdog = false))]
    fn permit(
        &self,
        py: Python<'_>,
        ttl: Option<f64>,
        wait: Option<f64>,
        watchdog: bool,
    ) -> PyResult<Lock> {
        self.redlock.get().handle(
            py,
            HandleKind::Permit(self.resource.clone(), self.permits),
            ttl,
            wait,
            watchdog,
            false,
        )
    }

    /// Takes a permit, waiting as `Redlock.acquire` does.
    #[pyo3(signature = (*, ttl = None, wait = None))]
    fn acquire(&self, py: Python<'_>, ttl: Option<f64>, wait: Option<f64>) -> PyResult<Lock> {
        let permit = self.permit(py, ttl, wait, false)?;
        permit.acquire(py)?;
        Ok(permit)
    }

    /// One attempt at a permit: the Lock, or None when all are taken.
    #[pyo3(signature = (*, ttl = None))]
    fn try_acquire(&self, py: Python<'_>, ttl: Option<f64>) -> PyResult<Option<Lock>> {
        let permit = self.permit(py, ttl, Some(0.0), false)?;
        Ok(permit.try_acquire(py)?.then_some(permit))
    }

    #[getter]
    fn permits(&self) -> u32 {
        self.permits
    }

    #[getter]
    fn resource(&self) -> &str {
        &self.resource
    }
}

// ---------------------------------------------------------------------------
// Lock

/// What a release reported.
#[pyclass(module = "redislock_native", frozen, get_all)]
pub struct Release {
    /// Holds of this handle still left (re-entry).
    holds_left: u32,
    /// Nodes that released.
    released: usize,
    /// Nodes that no longer held the lock.
    not_held: usize,
    /// Nodes that did not answer.
    failed: usize,
    /// So many nodes answered "not held" that fewer than a quorum can have
    /// held the lock: the lease ended before the release (work overran).
    lapsed: bool,
}

#[pymethods]
impl Release {
    fn __repr__(&self) -> String {
        format!(
            "Release(holds_left={}, released={}, not_held={}, failed={}, lapsed={})",
            self.holds_left,
            self.released,
            self.not_held,
            self.failed,
            if self.lapsed { "True" } else { "False" }
        )
    }
}

impl From<redis_lock_client::Release> for Release {
    fn from(r: redis_lock_client::Release) -> Release {
        Release {
            holds_left: r.holds_left,
            released: r.released,
            not_held: r.not_held,
            failed: r.failed,
            lapsed: r.lapsed(),
        }
    }
}

/// What a handle wraps: the lock itself, or the watchdog renewing it.
enum State {
    Plain(blocking::Lock),
    /// The holds it had when the watchdog took it.
    Watched(blocking::Watchdog, u32),
    /// The lock was handed to a watchdog that could not start (its
    /// validity ended in between): nothing is held any more.
    Gone,
}

/// Why an operation on a handle failed.
enum Fail {
    Client(Error),
    /// Not possible in the handle's state (under a watchdog, or not).
    State(&'static str),
    Poisoned,
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::Client(e)
    }
}

fn map_fail(py: Python<'_>, fail: Fail) -> PyErr {
    match fail {
        Fail::Client(e) => map_err(py, e),
        Fail::State(why) => raise(py, "RedisLockError", why.into(), vec![]),
        Fail::Poisoned => raise(
            py,
            "RedisLockError",
            "a thread panicked while using this lock handle".into(),
            vec![],
        ),
    }
}

const WATCHED: &str = "a watchdog renews this lock: call stop_watchdog() first";

/// A lock handle (exclusive, shared, or a semaphore permit).
#[pyclass(module = "redislock_native", frozen)]
pub struct Lock {
    // ManuallyDrop: left alone (never dropped) in a forked child.
    state: ManuallyDrop<RwLock<State>>,
    resource: String,
    owner: String,
    /// Made with `wait=0`: acquisitions are single attempts.
    try_only: bool,
    /// Made with a `wait` above 0: each acquisition's own deadline.
    wait: Option<Duration>,
    /// Made with `watchdog=True`: `with` hands the lock to a watchdog.
    watchdog_in_with: bool,
    pid: u32,
    // Keeps the clients (and so their runtimes) alive while the handle lives.
    _clients: Arc<Clients>,
}

impl Lock {
    fn new(
        inner: blocking::Lock,
        wait: Option<Duration>,
        watchdog: bool,
        clients: &Arc<Clients>,
    ) -> Lock {
        Lock {
            resource: inner.resource().to_string(),
            owner: inner.owner().to_string(),
            state: ManuallyDrop::new(RwLock::new(State::Plain(inner))),
            try_only: wait.is_some_and(|w| w.is_zero()),
            wait: wait.filter(|w| !w.is_zero()),
            watchdog_in_with: watchdog,
            pid: clients.pid,
            _clients: Arc::clone(clients),
        }
    }

    /// Runs `f` on the state without the GIL (also the quick reads: a
    /// state change waits for operations in flight, and nothing may wait
    /// for it holding the GIL).
    fn with_state<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&State) -> Result<T, Fail> + Send,
    ) -> PyResult<T> {
        fork_check(py, self.pid)?;
        let state = &*self.state;
        py.allow_threads(|| {
            let guard = state.read().map_err(|_| Fail::Poisoned)?;
            f(&guard)
        })
        .map_err(|e| map_fail(py, e))
    }

    fn change_state<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut State) -> Result<T, Fail> + Send,
    ) -> PyResult<T> {
        fork_check(py, self.pid)?;
        let state = &*self.state;
        py.allow_threads(|| {
            let mut guard = state.write().map_err(|_| Fail::Poisoned)?;
            f(&mut guard)
        })
        .map_err(|e| map_fail(py, e))
    }

    /// One attempt: true when acquired, false when held elsewhere.
    fn try_acquire(&self, py: Python<'_>) -> PyResult<bool> {
        self.with_state(py, |state| match state {
            State::Plain(lock) => match lock.try_acquire() {
                Ok(_) => Ok(true),
                Err(Error::NotAcquired { .. }) => Ok(false),
                Err(e) => Err(e.into()),
            },
            State::Watched(..) => Err(Fail::State(WATCHED)),
            State::Gone => Err(Error::NotHeld.into()),
        })
    }

    fn release_with(&self, py: Python<'_>, all: bool) -> PyResult<Release> {
        self.change_state(py, |state| {
            // A watched lock: stop the watchdog, then release every hold.
            if let State::Watched(..) = state {
                let State::Watched(watchdog, _) = std::mem::replace(state, State::Gone) else {
                    return Err(Fail::Poisoned);
                };
                *state = State::Plain(watchdog.stop()?);
                let State::Plain(lock) = state else {
                    return Err(Fail::Poisoned);
                };
                return Ok(lock.release_all()?.into());
            }
            match state {
                State::Plain(lock) if all => Ok(lock.release_all()?.into()),
                State::Plain(lock) => Ok(lock.release()?.into()),
                _ => Err(Error::NotHeld.into()),
            }
        })
    }

    fn is_watched(&self, py: Python<'_>) -> PyResult<bool> {
        self.with_state(py, |state| Ok(matches!(state, State::Watched(..))))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // In a forked child the client's runtime has no threads: releasing
        // would hang. The parent still holds (and releases) the lock.
        if pid() != self.pid {
            return;
        }
        // SAFETY: taken once, here; the field is not used again.
        let mut state = unsafe { ManuallyDrop::take(&mut self.state) };
        // A handle that holds nothing has nothing to release: dropped here,
        // without a GIL hand-off.
        let idle = match state.get_mut() {
            Ok(State::Plain(lock)) => lock.holds() == 0,
            Ok(State::Gone) => true,
            _ => false,
        };
        if idle {
            drop(state);
            return;
        }
        // Dropping a held handle (or a watchdog) releases it, a network
        // round: without the GIL.
        Python::with_gil(|py| py.allow_threads(move || drop(state)));
    }
}

#[pymethods]
impl Lock {
    /// Acquires the lock (retrying, or waiting on the server with one
    /// node), or adds a hold when this handle already holds it (re-entry).
    /// Raises LockNotAcquired when it cannot.
    fn acquire(&self, py: Python<'_>) -> PyResult<()> {
        if self.try_only {
            if self.try_acquire(py)? {
                return Ok(());
            }
            return Err(raise(
                py,
                "LockNotAcquired",
                format!(
                    "{} is held elsewhere (one attempt, wait=0): pass wait=... to wait for it",
                    self.resource
                ),
                vec![],
            ));
        }
        let wait = self.wait;
        self.with_state(py, |state| match state {
            State::Plain(lock) => Ok(match wait {
                Some(wait) => lock.acquire_for(wait),
                None => lock.acquire(),
            }
            .map(|_| ())?),
            State::Watched(..) => Err(Fail::State(WATCHED)),
            State::Gone => Err(Error::NotHeld.into()),
        })
    }

    /// Renews the lease to `ttl` seconds (default: the lock's TTL) on every
    /// node still holding it; returns the new validity in seconds. Raises
    /// LockLost / LockExpired when a majority could not confirm in time.
    #[pyo3(signature = (ttl = None))]
    fn extend(&self, py: Python<'_>, ttl: Option<f64>) -> PyResult<f64> {
        let ttl = ttl.map(ttl_seconds).transpose()?;
        self.with_state(py, |state| match state {
            State::Plain(lock) => {
                let extended = match ttl {
                    Some(ttl) => lock.extend_with(ttl),
                    None => lock.extend(),
                }?;
                Ok(extended.validity.as_secs_f64())
            }
            State::Watched(..) => Err(Fail::State(WATCHED)),
            State::Gone => Err(Error::NotHeld.into()),
        })
    }

    /// Releases one hold (the last one frees the lock on the nodes). Under
    /// a watchdog: stops it and releases every hold.
    fn release(&self, py: Python<'_>) -> PyResult<Release> {
        self.release_with(py, false)
    }

    /// Releases every hold of this handle at once (stopping its watchdog).
    fn release_all(&self, py: Python<'_>) -> PyResult<Release> {
        self.release_with(py, true)
    }

    /// Hands the held lock to a watchdog that renews it in the background
    /// (every third of the TTL unless Config.watchdog_interval says
    /// otherwise) until it is released or lost; see `is_lost` and `check()`.
    fn start_watchdog(&self, py: Python<'_>) -> PyResult<()> {
        self.change_state(py, |state| match state {
            State::Plain(lock) if lock.is_held() => {
                let holds = lock.holds();
                let State::Plain(lock) = std::mem::replace(state, State::Gone) else {
                    return Err(Fail::Poisoned);
                };
                *state = State::Watched(lock.watchdog()?, holds);
                Ok(())
            }
            State::Plain(_) | State::Gone => Err(Error::NotHeld.into()),
            State::Watched(..) => Ok(()),
        })
    }

    /// Stops the watchdog; the lock stays held (until its lease ends).
    fn stop_watchdog(&self, py: Python<'_>) -> PyResult<()> {
        self.change_state(py, |state| {
            if let State::Watched(..) = state {
                let State::Watched(watchdog, _) = std::mem::replace(state, State::Gone) else {
                    return Err(Fail::Poisoned);
                };
                *state = State::Plain(watchdog.stop()?);
            }
            Ok(())
        })
    }

    /// Whether a watchdog renews this lock.
    #[getter]
    fn watched(&self, py: Python<'_>) -> PyResult<bool> {
        self.is_watched(py)
    }

    /// Whether the watchdog has found the lock lost (reported a margin
    /// before the validity ends). Always False without a watchdog: then
    /// check `is_held`, or `extend()`.
    #[getter]
    fn is_lost(&self, py: Python<'_>) -> PyResult<bool> {
        self.with_state(py, |state| {
            Ok(matches!(state, State::Watched(w, _) if w.is_lost()))
        })
    }

    /// Raises LockLost once the watchdog has found the lock lost: call it
    /// between steps of long work and stop when it raises.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        if self.is_lost(py)? {
            return Err(map_err(py, Error::LockLost));
        }
        Ok(())
    }

    /// The fencing token of this hold: greater than every earlier holder's.
    /// Pass it to the storage you write to.
    #[getter]
    fn token(&self, py: Python<'_>) -> PyResult<u64> {
        self.with_state(py, |state| match state {
            State::Plain(lock) => Ok(lock.fencing_token()?),
            State::Watched(w, _) => Ok(w.fencing_token()?),
            State::Gone => Err(Error::NotHeld.into()),
        })
    }

    /// Runs a write on `store` only while this hold's fencing token is
    /// current there: sends `LOCK.FENCED fence_key <token> *command` through
    /// `store.execute_command` (any client that has it, e.g. redis-py's
    /// `Redis`, connected to a server with the module) and returns the
    /// command's reply. Raises StaleToken when the store's fence has
    /// accepted a newer token (another holder wrote: stop), NotHeld or
    /// LockExpired without a current token (nothing is sent).
    #[pyo3(signature = (store, fence_key, *command))]
    fn fenced(
        &self,
        py: Python<'_>,
        store: &Bound<'_, PyAny>,
        fence_key: &Bound<'_, PyAny>,
        command: &Bound<'_, pyo3::types::PyTuple>,
    ) -> PyResult<PyObject> {
        if command.is_empty() {
            return Err(PyValueError::new_err(
                "fenced() needs the write to run: a command and its arguments",
            ));
        }
        let token = self.token(py)?;
        let mut args: Vec<Bound<'_, PyAny>> = Vec::with_capacity(command.len() + 3);
        args.push("LOCK.FENCED".into_bound_py_any(py)?);
        args.push(fence_key.clone());
        args.push(token.into_bound_py_any(py)?);
        args.extend(command.iter());
        let args = pyo3::types::PyTuple::new(py, args)?;
        match store.call_method1("execute_command", args) {
            Ok(reply) => Ok(reply.unbind()),
            Err(error) => Err(stale_or(py, error)),
        }
    }

    /// Seconds in which the lock is certainly held (0.0 when not held).
    #[getter]
    fn validity(&self, py: Python<'_>) -> PyResult<f64> {
        self.with_state(py, |state| {
            let validity = match state {
                State::Plain(lock) => lock.validity(),
                State::Watched(w, _) => w.validity(),
                State::Gone => None,
            };
            Ok(validity.map_or(0.0, |v| v.as_secs_f64()))
        })
    }

    /// Whether the lock is held and its validity has not ended (under a
    /// watchdog: and no loss has been reported).
    #[getter]
    fn is_held(&self, py: Python<'_>) -> PyResult<bool> {
        self.with_state(py, |state| {
            Ok(match state {
                State::Plain(lock) => lock.is_held(),
                State::Watched(w, _) => w.is_held(),
                State::Gone => false,
            })
        })
    }

    /// Holds of this handle not yet released (re-entry).
    #[getter]
    fn holds(&self, py: Python<'_>) -> PyResult<u32> {
        self.with_state(py, |state| {
            Ok(match state {
                State::Plain(lock) => lock.holds(),
                State::Watched(_, holds) => *holds,
                State::Gone => 0,
            })
        })
    }

    #[getter]
    fn resource(&self) -> &str {
        &self.resource
    }

    /// The random owner id this handle uses on the nodes.
    #[getter]
    fn owner(&self) -> &str {
        &self.owner
    }

    fn __enter__<'a>(slf: PyRef<'a, Self>, py: Python<'a>) -> PyResult<PyRef<'a, Self>> {
        if slf.holds(py)? == 0 {
            slf.acquire(py)?;
        }
        if slf.watchdog_in_with {
            slf.start_watchdog(py)?;
        }
        Ok(slf)
    }

    /// Releases every hold. With a watchdog that found the lock lost while
    /// the block ran (and the block raised nothing else), raises LockLost,
    /// as the Rust client's `with_lock` does.
    #[pyo3(signature = (exc_type = None, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let lost = self.is_lost(py)?;
        if self.holds(py)? > 0 || self.is_watched(py)? {
            self.release_all(py)?;
        }
        let raised = matches!(exc_type, Some(t) if !t.is_none());
        if lost && !raised {
            return Err(map_err(py, Error::LockLost));
        }
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let holds = self.holds(py).unwrap_or(0);
        let validity = self.validity(py).unwrap_or(0.0);
        format!(
            "Lock(resource={:?}, holds={holds}, validity={validity:.3})",
            self.resource
        )
    }
}

/// For the asyncio front end: the StaleToken a store's exception `error`
/// stands for (chained to it), or None when it is not a stale-token
/// refusal.
#[pyfunction]
fn stale_token_from(py: Python<'_>, error: &Bound<'_, PyAny>) -> PyResult<Option<PyObject>> {
    let message = error.str()?.to_string();
    if !redis_lock_client::is_stale_message(&message) {
        return Ok(None);
    }
    let stale = raise(py, "StaleToken", message, Vec::new());
    stale.set_cause(py, Some(PyErr::from_value(error.clone())));
    Ok(Some(stale.into_value(py).into_any()))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(stale_token_from, m)?)?;
    m.add_function(wrap_pyfunction!(deliver::_delivery_channels, m)?)?;
    m.add_class::<Config>()?;
    m.add_class::<Redlock>()?;
    m.add_class::<Semaphore>()?;
    m.add_class::<Lock>()?;
    m.add_class::<Release>()?;
    m.add_class::<aio::AsyncRedlockCore>()?;
    m.add_class::<aio::AsyncLockCore>()?;
    Ok(())
}
