//! `redislock-native`'s addon: the native classes under the TypeScript
//! wrapper (`node/ts/index.ts`). Every lock rule (quorum, validity, drift,
//! fencing write-back, re-entry, the watchdog) stays in redis-lock-client;
//! this layer converts arguments (milliseconds to `Duration`), runs every
//! network round as a future on napi's tokio runtime (Node's event loop never
//! waits on the network), hands the outcomes of acquire, extend and release
//! back through one completion queue (`NativeHub`: one wake-up of Node's loop
//! settles every outcome queued by then), forwards a watchdog's loss to
//! JavaScript through a weak threadsafe function, and encodes the crate's
//! typed errors so that the wrapper can throw the matching error class.
//!
//! Errors cross as a JavaScript `Error` whose message is
//! `REDISLOCK:{"code":…,"message":…,…}` (JSON); the wrapper parses it.

// The addon's own allocator (Rust allocations only; Node's and V8's are
// their own): most of an operation's allocations are made on one thread
// and freed on the other (Node's thread makes a handle, the runtime frees
// its future, and the other way round), which glibc's malloc serves through
// its arena locks. mimalloc frees them into the owning thread's page
// without a lock: on one node, 16 and 64 tasks, 9-12% less process CPU
// per lock+unlock cycle and 7-9% more cycles/s (bench/analysis.md, section
// 12). Its thread-locals use the local-dynamic TLS model, as a library
// loaded with dlopen needs (the initial-exec default takes room from
// glibc's static TLS surplus, which a process with many native addons may
// not have: "cannot allocate memory in static TLS block" at require()).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use napi::bindgen_prelude::{within_runtime_if_available, Buffer, Either};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use napi_derive::napi;
use redis_lock_client::{
    Acknowledge, Acquired, Error, Extended, Lock, LockStatus, NodeOutcome, Release, Watchdog,
};
use tokio::sync::Notify;

// ---------------------------------------------------------------------------
// Runtime

/// napi's tokio runtime with `REDISLOCK_NATIVE_THREADS` worker threads
/// (default 1; napi's own default is one per core). Every future here waits
/// on the network; more workers mostly add cross-thread wake-ups (futex,
/// eventfd) to each operation. Built when the addon is loaded; if building
/// fails, napi's default runtime is used.
#[napi_derive::module_init]
fn init() {
    let threads = std::env::var("REDISLOCK_NATIVE_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or(1);
    if let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("redislock-rt")
        .enable_all()
        .build()
    {
        napi::bindgen_prelude::create_custom_tokio_runtime(runtime);
    }
}

// ---------------------------------------------------------------------------
// Errors

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn outcomes_json(outcomes: &[NodeOutcome]) -> String {
    let items: Vec<String> = outcomes
        .iter()
        .map(|o| {
            let text = o.to_string();
            let detail = text
                .strip_prefix(&format!("{}: ", o.node))
                .unwrap_or(&text)
                .to_string();
            format!(
                "{{\"node\":{},\"detail\":{},\"failed\":{}}}",
                json_str(&o.node),
                json_str(&detail),
                o.is_failure()
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

/// An error for the wrapper: `code` names the class, `fields` are extra
/// JSON members (already encoded).
fn coded(code: &str, message: &str, fields: &[(&str, String)]) -> napi::Error {
    let mut json = format!(
        "{{\"code\":{},\"message\":{}",
        json_str(code),
        json_str(message)
    );
    for (name, value) in fields {
        json.push_str(&format!(",{}:{}", json_str(name), value));
    }
    json.push('}');
    napi::Error::new(Status::GenericFailure, format!("REDISLOCK:{json}"))
}

/// The crate's error as the coded error that says what to do.
fn map_err(error: Error) -> napi::Error {
    let message = error.to_string();
    match error {
        Error::NotAcquired {
            attempts,
            elapsed,
            outcomes,
        } => coded(
            "NOT_ACQUIRED",
            &format!("{message}; it is held elsewhere or too few nodes answered: wait longer ({{ wait }}) or retry later"),
            &[
                ("attempts", attempts.to_string()),
                ("elapsedMs", elapsed.as_millis().to_string()),
                ("outcomes", outcomes_json(&outcomes)),
            ],
        ),
        Error::QuorumLost {
            confirmed,
            quorum,
            outcomes,
        } => coded(
            "LOCK_LOST",
            &format!("{message}; stop the work done under this lock and acquire it again"),
            &[
                ("confirmed", confirmed.to_string()),
                ("quorum", quorum.to_string()),
                ("outcomes", outcomes_json(&outcomes)),
            ],
        ),
        Error::Expired => coded(
            "EXPIRED",
            &format!("{message}; acquire it again (a longer ttl, or extend() sooner)"),
            &[],
        ),
        Error::LockLost => coded("LOCK_LOST", &format!("{message}; acquire it again"), &[]),
        Error::Node { node, error } => coded(
            "NODE_ERROR",
            &format!("{message}; check that the node is up and has the redis-lock module loaded"),
            &[
                ("node", json_str(&node)),
                ("detail", json_str(&error.to_string())),
            ],
        ),
        Error::NotHeld => coded(
            "NOT_HELD",
            &format!("{message}: acquire it first (it was never acquired, or already released)"),
            &[],
        ),
        Error::InvalidConfig(_) => coded("CONFIG", &message, &[]),
        Error::Runtime(_) => coded("RUNTIME", &message, &[]),
        // A variant added to the crate later.
        #[allow(unreachable_patterns)]
        _ => coded("REDISLOCK", &message, &[]),
    }
}

fn config_err(message: String) -> napi::Error {
    coded("CONFIG", &message, &[])
}

fn aborted() -> napi::Error {
    coded(
        "ABORTED",
        "the acquisition was aborted; anything it was granted is released",
        &[],
    )
}

fn busy() -> napi::Error {
    coded(
        "BUSY",
        "another operation on this lock handle is still running: await it first",
        &[],
    )
}

// ---------------------------------------------------------------------------
// Milliseconds

/// Milliseconds (a JavaScript number) to a Duration: negative, NaN and
/// infinite values are refused.
fn millis(name: &str, value: f64) -> napi::Result<Duration> {
    if !value.is_finite() || value < 0.0 {
        return Err(config_err(format!(
            "{name} must be a finite number of milliseconds >= 0, not {value}"
        )));
    }
    Duration::try_from_secs_f64(value / 1000.0)
        .map_err(|e| config_err(format!("{name} is out of range ({value}): {e}")))
}

/// A TTL: whole milliseconds (what the module takes).
fn ttl_millis(value: f64) -> napi::Result<Duration> {
    let duration = millis("ttl", value)?;
    Ok(Duration::from_millis(
        duration.as_millis().min(u64::MAX as u128) as u64,
    ))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------
// Options

/// Client settings (see the Rust crate's `Config`), durations in ms, plus
/// how to reach the nodes (cluster, TLS).
#[napi(object)]
#[derive(Default)]
pub struct NativeOptions {
    pub node_timeout: Option<f64>,
    pub retry_count: Option<u32>,
    pub retry_delay: Option<f64>,
    pub retry_jitter: Option<f64>,
    pub acquire_timeout: Option<f64>,
    pub drift_factor: Option<f64>,
    pub drift_min: Option<f64>,
    pub watchdog_interval: Option<f64>,
    pub watchdog_margin: Option<f64>,
    pub acknowledge_replicas: Option<u32>,
    pub acknowledge_fsync: Option<bool>,
    pub acknowledge_replica_fsyncs: Option<u32>,
    pub acknowledge_timeout: Option<f64>,
    /// The nodes are seeds of one Redis Cluster (one logical node).
    pub cluster: Option<bool>,
    /// PEM of the CA that signed the nodes' certificates (rediss://).
    pub tls_ca: Option<String>,
    /// PEM of a client certificate and its key (mutual TLS).
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
}

fn make_config(o: &NativeOptions) -> napi::Result<redis_lock_client::Config> {
    let d = redis_lock_client::Config::default();
    let opt = |name: &str, v: Option<f64>, default: Duration| -> napi::Result<Duration> {
        v.map_or(Ok(default), |v| millis(name, v))
    };
    let replicas = o.acknowledge_replicas.unwrap_or(0);
    let fsync = o.acknowledge_fsync.unwrap_or(false);
    let replica_fsyncs = o.acknowledge_replica_fsyncs.unwrap_or(0);
    let acknowledge = if replicas > 0 || fsync || replica_fsyncs > 0 {
        Some(Acknowledge {
            replicas,
            local_fsync: fsync,
            replica_fsyncs,
            timeout: opt(
                "acknowledgeTimeout",
                o.acknowledge_timeout,
                Duration::from_millis(100),
            )?,
        })
    } else {
        None
    };
    let drift_factor = o.drift_factor.unwrap_or(d.drift_factor);
    if !drift_factor.is_finite() {
        return Err(config_err(format!(
            "driftFactor must be in 0.0..1.0, not {drift_factor}"
        )));
    }
    let config = redis_lock_client::Config {
        node_timeout: opt("nodeTimeout", o.node_timeout, d.node_timeout)?,
        retry_count: o.retry_count.unwrap_or(d.retry_count),
        retry_delay: opt("retryDelay", o.retry_delay, d.retry_delay)?,
        retry_jitter: opt("retryJitter", o.retry_jitter, d.retry_jitter)?,
        acquire_timeout: o
            .acquire_timeout
            .map(|v| millis("acquireTimeout", v))
            .transpose()?,
        drift_factor,
        drift_min: opt("driftMin", o.drift_min, d.drift_min)?,
        watchdog_interval: o
            .watchdog_interval
            .map(|v| millis("watchdogInterval", v))
            .transpose()?,
        watchdog_margin: opt("watchdogMargin", o.watchdog_margin, d.watchdog_margin)?,
        acknowledge,
        ..d
    };
    config.validate().map_err(map_err)?;
    Ok(config)
}

fn make_tls(o: &NativeOptions) -> napi::Result<Option<redis_lock_client::Tls>> {
    if o.tls_ca.is_none() && o.tls_cert.is_none() && o.tls_key.is_none() {
        return Ok(None);
    }
    let mut tls = redis_lock_client::Tls::new();
    if let Some(ca) = &o.tls_ca {
        tls = tls.ca_pem(ca.as_bytes().to_vec());
    }
    match (&o.tls_cert, &o.tls_key) {
        (Some(cert), Some(key)) => {
            tls = tls.client_pem(cert.as_bytes().to_vec(), key.as_bytes().to_vec())
        }
        (None, None) => {}
        _ => {
            return Err(config_err(
                "tls.cert and tls.key go together (a client certificate and its key)".into(),
            ))
        }
    }
    Ok(Some(tls))
}

// ---------------------------------------------------------------------------
// Redlock

/// How to reach the nodes.
struct Recipe {
    nodes: Vec<String>,
    cluster: bool,
    tls: Option<redis_lock_client::Tls>,
}

impl Recipe {
    fn make(&self, config: redis_lock_client::Config) -> Result<redis_lock_client::Redlock, Error> {
        // The client spawns its connection tasks on the current runtime.
        within_runtime_if_available(|| match (&self.tls, self.cluster) {
            (None, false) => redis_lock_client::Redlock::with_config(self.nodes.clone(), config),
            (None, true) => {
                redis_lock_client::Redlock::cluster_with_config(self.nodes.clone(), config)
            }
            (Some(tls), false) => redis_lock_client::Redlock::with_config(
                self.nodes.iter().map(|n| tls.node(n.clone())),
                config,
            ),
            (Some(tls), true) => {
                redis_lock_client::Redlock::cluster_tls(self.nodes.clone(), tls, config)
            }
        })
    }
}

/// The client of one `Redlock`: one for every `wait` (a handle carries its
/// own acquire deadline, `Lock::acquire_for`), so the number of clients
/// and connections does not grow with the distinct waits asked for.
#[napi]
pub struct NativeRedlock {
    /// napi's runtime, for what a finalizer on Node's thread drops.
    runtime: Option<tokio::runtime::Handle>,
    default: redis_lock_client::Redlock,
    /// Where its handles' operations settle.
    hub: Arc<Hub>,
}

#[napi]
impl NativeRedlock {
    #[napi(constructor, catch_unwind)]
    pub fn new(
        nodes: Vec<String>,
        hub: &NativeHub,
        options: Option<NativeOptions>,
    ) -> napi::Result<Self> {
        let options = options.unwrap_or_default();
        let config = make_config(&options)?;
        let cluster = options.cluster.unwrap_or(false);
        if nodes.is_empty() {
            return Err(config_err("give at least one node URL".into()));
        }
        let tls = make_tls(&options)?;
        let recipe = Recipe {
            nodes,
            cluster,
            tls,
        };
        let default = recipe.make(config).map_err(map_err)?;
        let runtime = within_runtime_if_available(|| tokio::runtime::Handle::try_current().ok());
        Ok(NativeRedlock {
            runtime,
            default,
            hub: Arc::clone(&hub.hub),
        })
    }

    /// A handle (not yet acquired): kind "exclusive", "shared" or "permit"
    /// (with `permits`); `wait` (ms) bounds its acquisitions.
    #[napi(catch_unwind)]
    pub fn handle(
        &self,
        resource: String,
        ttl: f64,
        kind: String,
        permits: Option<u32>,
        wait: Option<f64>,
    ) -> napi::Result<NativeLock> {
        let client = &self.default;
        // No wait (or 0): the client's retry_count and acquireTimeout.
        let wait = wait
            .map(|w| millis("wait", w))
            .transpose()?
            .filter(|w| !w.is_zero());
        let ttl = ttl_millis(ttl)?;
        let lock = match kind.as_str() {
            "exclusive" => client.lock(resource, ttl),
            "shared" => client.lock_shared(resource, ttl),
            "permit" => client
                .semaphore(resource, permits.unwrap_or(0))
                .and_then(|s| s.permit(ttl)),
            other => {
                return Err(config_err(format!(
                    "kind must be exclusive, shared or permit, not {other:?}"
                )))
            }
        }
        .map_err(map_err)?;
        Ok(NativeLock::new(
            lock,
            wait,
            self.runtime.clone(),
            Arc::clone(&self.hub),
        ))
    }

    /// Checks that every answering node has the module loaded (and WAITAOF
    /// when fsyncs are acknowledged).
    #[napi]
    pub async fn verify(&self) -> napi::Result<()> {
        let client = self.default.clone();
        client.verify().await.map_err(map_err)
    }

    /// Nodes that must agree: N/2 + 1.
    #[napi(getter, catch_unwind)]
    pub fn quorum(&self) -> napi::Result<u32> {
        Ok(self.default.quorum() as u32)
    }

    /// The nodes' names (host:port), in the order given.
    #[napi(getter, catch_unwind)]
    pub fn node_names(&self) -> napi::Result<Vec<String>> {
        Ok(self.default.node_names())
    }
}

// ---------------------------------------------------------------------------
// Lock

/// The handle, plain or under a watchdog (which derefs to it).
enum Held {
    Plain(Lock),
    Watched(Watchdog),
}

impl Held {
    fn lock(&self) -> &Lock {
        match self {
            Held::Plain(lock) => lock,
            Held::Watched(watchdog) => watchdog,
        }
    }
}

struct Slot {
    held: Option<Arc<Held>>,
    /// Set once the handle was released (or its watchdog stopped): a later
    /// loss report is not forwarded.
    quiet: Arc<AtomicBool>,
}

/// The acquisition's outcome.
pub struct NativeAcquired {
    pub validity: f64,
    pub holds: u32,
    pub attempts: u32,
}

impl From<Acquired> for NativeAcquired {
    fn from(a: Acquired) -> Self {
        NativeAcquired {
            validity: ms(a.validity),
            holds: a.holds,
            attempts: a.attempts,
        }
    }
}

/// An extension's outcome.
pub struct NativeExtended {
    pub validity: f64,
    pub confirmed: u32,
    pub not_held: u32,
    pub quorum: u32,
}

impl From<Extended> for NativeExtended {
    fn from(e: Extended) -> Self {
        NativeExtended {
            validity: ms(e.validity),
            confirmed: e.confirmed as u32,
            not_held: e.not_held as u32,
            quorum: e.quorum as u32,
        }
    }
}

/// A release's outcome.
pub struct NativeRelease {
    pub holds_left: u32,
    pub released: u32,
    pub not_held: u32,
    pub failed: u32,
    pub quorum: u32,
    /// Fewer than a quorum can have held it when released: the work overran.
    pub lapsed: bool,
}

impl From<Release> for NativeRelease {
    fn from(r: Release) -> Self {
        NativeRelease {
            holds_left: r.holds_left,
            released: r.released as u32,
            not_held: r.not_held as u32,
            failed: r.failed as u32,
            quorum: r.quorum as u32,
            lapsed: r.lapsed(),
        }
    }
}

// ---------------------------------------------------------------------------
// Completions

/// What a finished operation hands to JavaScript.
enum Outcome {
    Acquired(NativeAcquired),
    Released(NativeRelease),
    Extended(NativeExtended),
}

/// Numbers per finished operation in a drain's records: the promise's id,
/// the kind, then up to six fields (unused ones 0). The wrapper builds the
/// outcome objects from them (`outcomeAt` in ts/index.ts): one array of
/// numbers per drain costs far less than objects with named properties made
/// through napi (each name looked up in V8's string table, each property a
/// map transition: a fifth of a cycle's CPU).
const RECORD: usize = 8;
/// Kinds: an error (field 0: its index in `errors()`), then the outcomes.
const KIND_ERROR: f64 = 0.0;
const KIND_ACQUIRED: f64 = 1.0;
const KIND_RELEASED: f64 = 2.0;
const KIND_EXTENDED: f64 = 3.0;

/// One finished operation's record (`RECORD` numbers); an error's message
/// goes to `errors`.
fn record(id: u32, outcome: Result<Outcome, String>, errors: &mut Vec<String>) -> [f64; RECORD] {
    let n = f64::from;
    let mut r = [0.0; RECORD];
    r[0] = n(id);
    let (kind, fields): (f64, &[f64]) = match &outcome {
        Ok(Outcome::Acquired(a)) => (KIND_ACQUIRED, &[a.validity, n(a.holds), n(a.attempts)]),
        Ok(Outcome::Released(x)) => (
            KIND_RELEASED,
            &[
                n(x.holds_left),
                n(x.released),
                n(x.not_held),
                n(x.failed),
                n(x.quorum),
                if x.lapsed { 1.0 } else { 0.0 },
            ],
        ),
        Ok(Outcome::Extended(e)) => (
            KIND_EXTENDED,
            &[e.validity, n(e.confirmed), n(e.not_held), n(e.quorum)],
        ),
        Err(_) => (KIND_ERROR, &[errors.len() as f64]),
    };
    r[1] = kind;
    for (slot, value) in r[2..].iter_mut().zip(fields) {
        *slot = *value;
    }
    if let Err(message) = outcome {
        errors.push(message);
    }
    r
}

struct Done {
    id: u32,
    /// An error is its coded message.
    outcome: Result<Outcome, String>,
}

/// Where finished operations wait for Node's thread. A `#[napi] async fn`
/// settles each promise through a threadsafe function of its own (created
/// on Node's thread, called from the runtime, one wake-up of Node's loop
/// each, then closed); here every operation's outcome goes into one queue,
/// and only the outcome that finds the queue empty wakes Node's loop, whose
/// callback drains everything queued by then (`NativeHub.drain`): under
/// load, one wake-up settles many promises. The queue is in completion
/// order, and the callback settles in that order.
struct Hub {
    queue: Mutex<Vec<Done>>,
    /// The ids the last `drain` returned: if handing them to JavaScript
    /// failed, `failDrained` settles them with an error (they are no longer
    /// queued, and their promises would wait forever).
    drained: Mutex<Vec<u32>>,
    /// The messages of the last drain's failed operations (`errors()`).
    errors: Mutex<Vec<String>>,
    /// Test hook: the next `drain` fails after taking the queue, as a
    /// failed conversion to JavaScript values does.
    fail_next_drain: AtomicBool,
    /// Weak: it never keeps Node's loop alive (the JavaScript side keeps it
    /// alive while operations are pending).
    ready: ThreadsafeFunction<(), (), (), Status, false, true>,
}

impl Hub {
    fn complete(&self, id: u32, outcome: napi::Result<Outcome>) {
        let first = {
            let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            queue.push(Done {
                id,
                outcome: outcome.map_err(|e| e.reason.clone()),
            });
            queue.len() == 1
        };
        // A push onto a non-empty queue needs no signal: the outcome that
        // found it empty signalled, and the drain that takes that one
        // (under the same mutex, so after this push) takes this one too.
        if first {
            self.ready.call((), ThreadsafeFunctionCallMode::NonBlocking);
        }
    }
}

/// A future whose panic is caught and returned (it is not polled again):
/// an operation that panics settles its promise with a message that says
/// so, not as if the runtime had shut down.
struct CatchUnwind<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let future = self.get_mut().0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(value)) => std::task::Poll::Ready(Ok(value)),
            Err(panic) => std::task::Poll::Ready(Err(panic)),
        }
    }
}

/// The error of an operation that panicked, with the panic's message.
fn panicked(panic: &(dyn std::any::Any + Send)) -> napi::Error {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_string());
    coded(
        "RUNTIME",
        &format!(
            "the operation panicked in the addon ({what}); this is a bug in redislock-native: \
             please report it. The lock's lease ends by itself"
        ),
        &[],
    )
}

/// The promise of one operation, settled exactly once: with the outcome,
/// or, when the future is dropped unfinished (the runtime shut down), with
/// an error, so that no promise is left pending forever.
struct Promised {
    hub: Arc<Hub>,
    id: u32,
    settled: bool,
}

impl Promised {
    fn settle(mut self, outcome: napi::Result<Outcome>) {
        self.settled = true;
        self.hub.complete(self.id, outcome);
    }
}

impl Drop for Promised {
    fn drop(&mut self) {
        if !self.settled {
            self.hub.complete(
                self.id,
                Err(coded(
                    "RUNTIME",
                    "the operation was dropped before it finished (the addon's runtime shut down)",
                    &[],
                )),
            );
        }
    }
}

/// The completion queue of this JavaScript environment (one per module
/// instance: the wrapper makes it once, with the callback that drains it).
#[napi]
pub struct NativeHub {
    hub: Arc<Hub>,
}

#[napi]
impl NativeHub {
    /// `ready()` is called (on Node's thread) when outcomes are queued;
    /// it calls `drain()`.
    #[napi(constructor, catch_unwind)]
    pub fn new(ready: ThreadsafeFunction<(), (), (), Status, false, true>) -> napi::Result<Self> {
        Ok(NativeHub {
            hub: Arc::new(Hub {
                queue: Mutex::new(Vec::new()),
                drained: Mutex::new(Vec::new()),
                errors: Mutex::new(Vec::new()),
                fail_next_drain: AtomicBool::new(false),
                ready,
            }),
        })
    }

    /// The operations finished since the last drain, in completion order,
    /// as records of `RECORD` numbers each (see `record`); the messages of
    /// those that failed are then taken with `errors()`. Their ids are kept
    /// until the next drain, for `failDrained`.
    #[napi(catch_unwind)]
    pub fn drain(&self) -> napi::Result<Vec<f64>> {
        let done = std::mem::take(&mut *self.hub.queue.lock().unwrap_or_else(|p| p.into_inner()));
        *self.hub.drained.lock().unwrap_or_else(|p| p.into_inner()) =
            done.iter().map(|d| d.id).collect();
        if self.hub.fail_next_drain.swap(false, Ordering::SeqCst) {
            return Err(napi::Error::new(
                Status::GenericFailure,
                "a failed conversion (test hook)",
            ));
        }
        let mut errors = Vec::new();
        let mut records = Vec::with_capacity(done.len() * RECORD);
        for Done { id, outcome } in done {
            records.extend_from_slice(&record(id, outcome, &mut errors));
        }
        *self.hub.errors.lock().unwrap_or_else(|p| p.into_inner()) = errors;
        Ok(records)
    }

    /// The messages of the last drain's failed operations, by the index in
    /// their records.
    #[napi(catch_unwind)]
    pub fn errors(&self) -> napi::Result<Vec<String>> {
        Ok(std::mem::take(
            &mut *self.hub.errors.lock().unwrap_or_else(|p| p.into_inner()),
        ))
    }

    /// The last drain's outcomes did not reach JavaScript (`drain` threw
    /// while converting them): each of those operations is settled again,
    /// with an error that says so, through the queue.
    #[napi(catch_unwind)]
    pub fn fail_drained(&self, why: String) -> napi::Result<()> {
        let ids = std::mem::take(&mut *self.hub.drained.lock().unwrap_or_else(|p| p.into_inner()));
        for id in ids {
            self.hub.complete(
                id,
                Err(coded(
                    "RUNTIME",
                    &format!(
                        "the operation finished but its outcome could not be handed to \
                         JavaScript ({why}); a lock it acquired is released by release() or \
                         ends with its lease"
                    ),
                    &[],
                )),
            );
        }
        Ok(())
    }

    /// Test hook: the next `drain` takes the queue and then fails, as a
    /// failed conversion would.
    #[napi(catch_unwind)]
    pub fn fail_next_drain(&self) -> napi::Result<()> {
        self.hub.fail_next_drain.store(true, Ordering::SeqCst);
        Ok(())
    }
}

/// One lock handle (one owner id). Operations run as futures on the tokio
/// runtime; `abort()` drops a pending acquisition (the crate then releases
/// whatever it won, in the background, before the handle's next operation).
/// `acquire`, `extend` and `release` settle through the hub: each takes the
/// id of its promise on the JavaScript side and returns at once.
#[napi]
pub struct NativeLock {
    state: Arc<LockState>,
    hub: Arc<Hub>,
    resource: String,
    owner: String,
    ttl: Duration,
}

/// The aborts of a handle's pending acquisitions, each by its own ticket:
/// one signal may abort many acquisitions on one handle in one turn, and
/// each must see its own abort (a channel that kept only the latest ticket
/// lost all but the last).
#[derive(Default)]
struct Aborts {
    /// Tickets of acquisitions in flight, and whether each was aborted.
    tickets: Mutex<std::collections::HashMap<u64, bool>>,
    changed: Notify,
}

impl Aborts {
    fn tickets(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, bool>> {
        self.tickets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An acquisition with `ticket` starts (before its abort can come).
    fn expect(&self, ticket: u64) {
        self.tickets().insert(ticket, false);
    }

    /// The acquisition with `ticket` settled: its ticket is forgotten (an
    /// abort after this finds nothing to abort).
    fn done(&self, ticket: u64) {
        self.tickets().remove(&ticket);
    }

    fn abort(&self, ticket: u64) {
        if let Some(aborted) = self.tickets().get_mut(&ticket) {
            *aborted = true;
            self.changed.notify_waiters();
        }
    }

    /// Whether `ticket` was aborted.
    fn is_aborted(&self, ticket: u64) -> bool {
        self.tickets().get(&ticket).copied().unwrap_or(false)
    }

    /// Returns once `ticket` is aborted.
    async fn aborted(&self, ticket: u64) {
        loop {
            // Registered before the check, so an abort between the two
            // still wakes this.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.is_aborted(ticket) {
                return;
            }
            changed.await;
        }
    }
}

/// A pending acquisition's ticket in its handle's [`Aborts`], for as long
/// as the acquisition lives.
struct Expected {
    state: Arc<LockState>,
    ticket: u64,
}

impl Expected {
    fn new(state: Arc<LockState>, ticket: u64) -> Expected {
        state.aborts.expect(ticket);
        Expected { state, ticket }
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        self.state.aborts.done(self.ticket);
    }
}

/// What an operation in flight shares with the handle.
struct LockState {
    slot: Mutex<Slot>,
    aborts: Aborts,
    /// The acquire deadline of `acquire` (None: the client's settings).
    wait: Option<Duration>,
    runtime: Option<tokio::runtime::Handle>,
}

impl NativeLock {
    fn new(
        lock: Lock,
        wait: Option<Duration>,
        runtime: Option<tokio::runtime::Handle>,
        hub: Arc<Hub>,
    ) -> NativeLock {
        NativeLock {
            resource: lock.resource().to_string(),
            owner: lock.owner().to_string(),
            ttl: lock.ttl(),
            hub,
            state: Arc::new(LockState {
                runtime,
                wait,
                slot: Mutex::new(Slot {
                    held: Some(Arc::new(Held::Plain(lock))),
                    quiet: Arc::new(AtomicBool::new(false)),
                }),
                aborts: Aborts::default(),
            }),
        }
    }

    fn held(&self) -> napi::Result<Arc<Held>> {
        self.state.held()
    }

    /// Runs `op` on the runtime; its outcome settles promise `id`.
    fn start<F>(&self, id: u32, op: F) -> napi::Result<()>
    where
        F: std::future::Future<Output = napi::Result<Outcome>> + Send + 'static,
    {
        let Some(runtime) = &self.state.runtime else {
            return Err(coded(
                "RUNTIME",
                "the addon's runtime is not available",
                &[],
            ));
        };
        let promised = Promised {
            hub: Arc::clone(&self.hub),
            id,
            settled: false,
        };
        // Boxed: the task then moves a pointer, not the operation's whole
        // state machine, through the runtime's spawn path.
        let op = CatchUnwind(Box::pin(op));
        runtime.spawn(async move {
            let outcome = op.await.unwrap_or_else(|panic| Err(panicked(&*panic)));
            promised.settle(outcome)
        });
        Ok(())
    }
}

impl Drop for LockState {
    fn drop(&mut self) {
        // The crate's Lock releases a still-held lock in the background when
        // dropped inside a tokio runtime; a finalizer runs on Node's thread,
        // so enter napi's runtime for it. (Once the runtime has shut down, as
        // at the process's exit, the release task is dropped unrun and the
        // lease ends by itself.)
        let held = self.slot.get_mut().ok().and_then(|s| s.held.take());
        match (held, &self.runtime) {
            (Some(held), Some(runtime)) => {
                let _entered = runtime.enter();
                drop(held);
            }
            (held, _) => drop(held),
        }
    }
}

#[napi]
impl NativeLock {
    /// Acquires (or re-enters): `tryOnce` makes one attempt without retry or
    /// wait. Settles promise `id` with the outcome; with code ABORTED after
    /// `abort(ticket)` with this call's `ticket`.
    #[napi(catch_unwind)]
    pub fn acquire(&self, try_once: bool, ticket: u32, id: u32) -> napi::Result<()> {
        let state = Arc::clone(&self.state);
        let ticket = u64::from(ticket);
        // Forgets the ticket when the acquisition ends or is dropped
        // (unpolled too).
        let expected = Expected::new(Arc::clone(&state), ticket);
        self.start(id, async move {
            let result = state.acquire(try_once, ticket).await;
            drop(expected);
            result.map(Outcome::Acquired)
        })
    }

    /// Test hook: an operation that panics on the runtime; settles promise
    /// `id` with the panic's error.
    #[napi(catch_unwind)]
    pub fn test_panic(&self, id: u32) -> napi::Result<()> {
        self.start(id, async {
            if std::hint::black_box(true) {
                // The one deliberate panic: what the hook is for.
                #[allow(clippy::panic)]
                std::panic::panic_any("the package's test hook panics here");
            }
            Err(coded("RUNTIME", "not reached", &[]))
        })
    }

    /// Test hook: settles promise `id` through the runtime and the
    /// completion queue with the outcome of `kind` (as in `record`: 1
    /// acquired, 2 released, 3 extended) whose fields are `fields` in the
    /// record's order, or with the error `error` (code RUNTIME).
    #[napi(catch_unwind)]
    pub fn test_settle(
        &self,
        id: u32,
        kind: u32,
        fields: Vec<f64>,
        error: Option<String>,
    ) -> napi::Result<()> {
        let field = |i: usize| fields.get(i).copied().unwrap_or(0.0);
        // Out-of-range numbers saturate: the test passes u32s.
        let count = |i: usize| field(i) as u32;
        let outcome = match (error, kind) {
            (Some(message), _) => Err(coded("RUNTIME", &message, &[])),
            (None, 1) => Ok(Outcome::Acquired(NativeAcquired {
                validity: field(0),
                holds: count(1),
                attempts: count(2),
            })),
            (None, 2) => Ok(Outcome::Released(NativeRelease {
                holds_left: count(0),
                released: count(1),
                not_held: count(2),
                failed: count(3),
                quorum: count(4),
                lapsed: field(5) != 0.0,
            })),
            (None, 3) => Ok(Outcome::Extended(NativeExtended {
                validity: field(0),
                confirmed: count(1),
                not_held: count(2),
                quorum: count(3),
            })),
            (None, other) => Err(coded(
                "RUNTIME",
                &format!("no outcome of kind {other}"),
                &[],
            )),
        };
        self.start(id, async move { outcome })
    }

    /// Bench hook (`make bench` section 12's floor): an operation that
    /// takes the path of every other one (spawned on the runtime, settled
    /// through the completion queue with a release's outcome) and does no
    /// network work.
    #[napi(catch_unwind)]
    pub fn bench_round_trip(&self, id: u32) -> napi::Result<()> {
        self.start(id, async {
            Ok(Outcome::Released(NativeRelease {
                holds_left: 1,
                released: 0,
                not_held: 0,
                failed: 0,
                quorum: 1,
                lapsed: false,
            }))
        })
    }

    /// Drops the pending acquisition started with `ticket`.
    #[napi(catch_unwind)]
    pub fn abort(&self, ticket: u32) -> napi::Result<()> {
        self.state.aborts.abort(u64::from(ticket));
        Ok(())
    }

    /// Renews the lease to the TTL (or `ttl` ms) on every node still
    /// holding it; settles promise `id`.
    #[napi(catch_unwind)]
    pub fn extend(&self, ttl: Option<f64>, id: u32) -> napi::Result<()> {
        let ttl = ttl.map(ttl_millis).transpose()?;
        let state = Arc::clone(&self.state);
        self.start(id, async move {
            let held = state.held()?;
            let lock = held.lock();
            let result = match ttl {
                None => lock.extend().await,
                Some(ttl) => lock.extend_with(ttl).await,
            };
            result.map(|e| Outcome::Extended(e.into())).map_err(map_err)
        })
    }

    /// Releases one hold (`all`: every hold); the last one releases the
    /// lock on every node, and stops the watchdog first. Settles promise
    /// `id`.
    #[napi(catch_unwind)]
    pub fn release(&self, all: bool, id: u32) -> napi::Result<()> {
        let state = Arc::clone(&self.state);
        self.start(id, async move {
            state.release(all).await.map(Outcome::Released)
        })
    }

    /// The fencing token of this hold once `token()` computed it (no round
    /// trip); null when not held or not computed yet.
    #[napi(getter, catch_unwind)]
    pub fn known_token(&self) -> napi::Result<Option<u64>> {
        Ok(self
            .held()
            .ok()
            .and_then(|h| h.lock().known_fencing_token()))
    }

    /// A fencing token greater than that of every earlier holder (a
    /// bigint; written back to a quorum on first use in each hold).
    #[napi]
    pub async fn token(&self) -> napi::Result<u64> {
        let held = self.held()?;
        let token = held.lock().fencing_token().await;
        token.map_err(map_err)
    }

    /// `LOCK.FENCED fenceKey <token> command...` on `store`; resolves with
    /// the store's reply as JSON text; a store's refusal rejects with code
    /// STALE (a stale token) or STORE (any other error reply).
    #[napi]
    pub async fn fenced(
        &self,
        store: &NativeStore,
        fence_key: String,
        command: Vec<Either<String, Buffer>>,
    ) -> napi::Result<String> {
        let held = self.held()?;
        let Some((name, args)) = command.split_first() else {
            return Err(config_err(
                "a fenced write needs a command: [name, ...args]".into(),
            ));
        };
        let mut cmd = redis::cmd(&arg_text(name));
        for arg in args {
            match arg {
                Either::A(text) => cmd.arg(text.as_str()),
                Either::B(bytes) => cmd.arg(bytes.as_ref()),
            };
        }
        let mut connection = store.connection().await?;
        let reply = held
            .lock()
            .fenced(&mut connection, &fence_key, &cmd)
            .await
            .map_err(map_err)?;
        if let Err(e) = &reply {
            if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                // The connection broke: the next write opens a new one.
                store.forget().await;
            }
        }
        match reply {
            Ok(value) => Ok(value_json(&value)),
            Err(e) => {
                let message = e.to_string();
                if redis_lock_client::is_stale(&e) {
                    Err(coded(
                        "STALE",
                        &format!("{message}: a write with a higher fencing token went through this fence key; this holder is stale, stop and acquire the lock again"),
                        &[],
                    ))
                } else {
                    Err(coded("STORE", &message, &[]))
                }
            }
        }
    }

    /// Hands the held lock to the crate's watchdog, which renews it until
    /// it is released or lost; `onLoss(outcomesJson)` is called once if it
    /// is lost (a weak callback: it keeps no event loop alive).
    #[napi(catch_unwind)]
    pub fn watch(
        &self,
        on_loss: ThreadsafeFunction<String, (), String, Status, false, true>,
    ) -> napi::Result<()> {
        let state = &self.state;
        let (taken, quiet) = {
            let mut slot = state.slot()?;
            let quiet = Arc::new(AtomicBool::new(false));
            slot.quiet = Arc::clone(&quiet);
            (slot.held.take(), quiet)
        };
        let Some(taken) = taken else {
            return Err(map_err(Error::NotHeld));
        };
        let held = match Arc::try_unwrap(taken) {
            Ok(held) => held,
            Err(shared) => {
                state.put_back(shared)?;
                return Err(busy());
            }
        };
        let lock = match held {
            Held::Plain(lock) => lock,
            watched @ Held::Watched(_) => {
                state.put_back(Arc::new(watched))?;
                return Ok(());
            }
        };
        if !lock.is_held() {
            state.put_back(Arc::new(Held::Plain(lock)))?;
            return Err(map_err(Error::NotHeld));
        }
        let watchdog = within_runtime_if_available(|| lock.watchdog()).map_err(map_err)?;
        let lost = watchdog.lost();
        state.put_back(Arc::new(Held::Watched(watchdog)))?;
        napi::bindgen_prelude::spawn(async move {
            if let LockStatus::Lost { outcomes } = lost.await {
                if !quiet.load(Ordering::SeqCst) {
                    on_loss.call(
                        outcomes_json(&outcomes),
                        ThreadsafeFunctionCallMode::NonBlocking,
                    );
                }
            }
        });
        Ok(())
    }

    /// Time left (ms) in which the lock is certainly held, if it is.
    #[napi(getter, catch_unwind)]
    pub fn validity(&self) -> napi::Result<Option<f64>> {
        Ok(self.held().ok().and_then(|h| h.lock().validity()).map(ms))
    }

    /// Held and certainly valid (and, under a watchdog, no loss reported).
    #[napi(getter, catch_unwind)]
    pub fn is_held(&self) -> napi::Result<bool> {
        Ok(match self.held().ok().as_deref() {
            Some(Held::Plain(lock)) => lock.is_held(),
            Some(Held::Watched(watchdog)) => watchdog.is_held(),
            None => false,
        })
    }

    /// Under a watchdog that reported the loss (or whose validity ended).
    #[napi(getter, catch_unwind)]
    pub fn is_lost(&self) -> napi::Result<bool> {
        Ok(match self.held().ok().as_deref() {
            Some(Held::Watched(watchdog)) => watchdog.is_lost(),
            Some(Held::Plain(lock)) => lock.holds() > 0 && lock.validity().is_none(),
            None => false,
        })
    }

    /// Nested acquisitions not yet released (0: not held).
    #[napi(getter, catch_unwind)]
    pub fn holds(&self) -> napi::Result<u32> {
        Ok(self.held().map_or(0, |h| h.lock().holds()))
    }

    #[napi(getter, catch_unwind)]
    pub fn resource(&self) -> napi::Result<String> {
        Ok(self.resource.clone())
    }

    /// This handle's owner id, the same on every node.
    #[napi(getter, catch_unwind)]
    pub fn owner(&self) -> napi::Result<String> {
        Ok(self.owner.clone())
    }

    /// The lease length (ms) used by acquire and extend.
    #[napi(getter, catch_unwind)]
    pub fn ttl(&self) -> napi::Result<f64> {
        Ok(ms(self.ttl))
    }
}

impl LockState {
    fn slot(&self) -> napi::Result<std::sync::MutexGuard<'_, Slot>> {
        self.slot
            .lock()
            .map_err(|_| coded("RUNTIME", "a thread panicked holding a lock handle", &[]))
    }

    fn held(&self) -> napi::Result<Arc<Held>> {
        self.slot()?
            .held
            .clone()
            .ok_or_else(|| map_err(Error::NotHeld))
    }

    fn put_back(&self, held: Arc<Held>) -> napi::Result<()> {
        self.slot()?.held = Some(held);
        Ok(())
    }

    async fn acquire(&self, try_once: bool, ticket: u64) -> napi::Result<NativeAcquired> {
        // Not raced with the abort: stopping a watchdog left from an earlier
        // hold takes the handle out of its slot until the watchdog has
        // stopped, and an abort that dropped this halfway would leave the
        // handle empty (every later operation NotHeld).
        let held = match self.unwatched_if_idle().await {
            Ok(held) => held,
            // Aborted meanwhile: the caller asked to stop, and is told so
            // (not of a handle that another operation keeps busy).
            Err(_) if self.aborts.is_aborted(ticket) => return Err(aborted()),
            Err(error) => return Err(error),
        };
        let wait = self.wait;
        let acquire = async {
            let lock = held.lock();
            let result = if try_once {
                lock.try_acquire().await
            } else if let Some(wait) = wait {
                lock.acquire_for(wait).await
            } else {
                lock.acquire().await
            };
            result.map(NativeAcquired::from).map_err(map_err)
        };
        tokio::select! {
            // An abort that came first sends nothing.
            biased;
            () = self.aborts.aborted(ticket) => Err(aborted()),
            result = acquire => result,
        }
    }

    async fn release(&self, all: bool) -> napi::Result<NativeRelease> {
        let held = self.held()?;
        let last = all || held.lock().holds() <= 1;
        if !(last && matches!(*held, Held::Watched(_))) {
            let lock = held.lock();
            let result = if all {
                lock.release_all().await
            } else {
                lock.release().await
            };
            return result.map(NativeRelease::from).map_err(map_err);
        }
        drop(held);
        let taken = {
            let mut slot = self.slot()?;
            slot.quiet.store(true, Ordering::SeqCst);
            slot.held.take()
        };
        let Some(taken) = taken else {
            return Err(map_err(Error::NotHeld));
        };
        match Arc::try_unwrap(taken) {
            Ok(held) => {
                let lock = match held {
                    Held::Watched(watchdog) => watchdog.stop().await,
                    Held::Plain(lock) => lock,
                };
                let result = lock.release_all().await;
                self.put_back(Arc::new(Held::Plain(lock)))?;
                result.map(NativeRelease::from).map_err(map_err)
            }
            // Another operation (a token, a fenced write) still uses the
            // handle: release through it; the watchdog stops when the last
            // user is done, and its loss report is no longer forwarded.
            Err(shared) => {
                let result = shared.lock().release_all().await;
                self.put_back(shared)?;
                result.map(NativeRelease::from).map_err(map_err)
            }
        }
    }

    /// The handle for a new acquisition. A watchdog left from an earlier
    /// hold (a release that raced another operation could not stop it)
    /// watches nothing any more: stop it, so that this hold starts plain
    /// and `watch()` can hand it to a new watchdog. (A re-entry keeps the
    /// running watchdog.)
    async fn unwatched_if_idle(&self) -> napi::Result<Arc<Held>> {
        let held = self.held()?;
        if !matches!(*held, Held::Watched(_)) || held.lock().holds() > 0 {
            return Ok(held);
        }
        drop(held);
        let Some(taken) = self.slot()?.held.take() else {
            return Err(map_err(Error::NotHeld));
        };
        match Arc::try_unwrap(taken) {
            Ok(Held::Watched(watchdog)) => {
                let plain = Arc::new(Held::Plain(watchdog.stop().await));
                self.put_back(Arc::clone(&plain))?;
                Ok(plain)
            }
            Ok(plain) => {
                let plain = Arc::new(plain);
                self.put_back(Arc::clone(&plain))?;
                Ok(plain)
            }
            Err(shared) => {
                self.put_back(shared)?;
                Err(busy())
            }
        }
    }
}

fn arg_text(arg: &Either<String, Buffer>) -> String {
    match arg {
        Either::A(text) => text.clone(),
        Either::B(bytes) => String::from_utf8_lossy(bytes.as_ref()).into_owned(),
    }
}

/// A reply as JSON: nil as null, integers as numbers (as strings beyond
/// 2^53, which a JavaScript number cannot hold exactly), bulk strings as
/// text (binary data as lossy UTF-8), arrays and maps as arrays.
fn value_json(value: &redis::Value) -> String {
    use redis::Value as V;
    const SAFE: i64 = (1 << 53) - 1;
    match value {
        V::Nil => "null".into(),
        V::Int(n) if (-SAFE..=SAFE).contains(n) => n.to_string(),
        V::Int(n) => json_str(&n.to_string()),
        V::BulkString(bytes) => json_str(&String::from_utf8_lossy(bytes)),
        V::SimpleString(s) => json_str(s),
        V::Okay => json_str("OK"),
        V::Boolean(b) => b.to_string(),
        V::Double(d) if d.is_finite() => d.to_string(),
        V::Double(d) => json_str(&d.to_string()),
        V::Array(items) | V::Set(items) => {
            let items: Vec<String> = items.iter().map(value_json).collect();
            format!("[{}]", items.join(","))
        }
        V::Map(pairs) => {
            let items: Vec<String> = pairs
                .iter()
                .flat_map(|(k, v)| [value_json(k), value_json(v)])
                .collect();
            format!("[{}]", items.join(","))
        }
        other => json_str(&format!("{other:?}")),
    }
}

// ---------------------------------------------------------------------------
// Store

/// The store of fenced writes: a Redis or Valkey with the module loaded,
/// reached over one multiplexed connection (opened on first use).
#[napi]
pub struct NativeStore {
    client: redis::Client,
    connection: tokio::sync::Mutex<Option<redis::aio::MultiplexedConnection>>,
}

#[napi]
impl NativeStore {
    #[napi(constructor, catch_unwind)]
    pub fn new(url: String) -> napi::Result<Self> {
        let client = redis::Client::open(url.as_str())
            .map_err(|e| config_err(format!("store URL {url:?}: {e}")))?;
        Ok(NativeStore {
            client,
            connection: tokio::sync::Mutex::new(None),
        })
    }
}

impl NativeStore {
    /// Drops the cached connection (a write through it failed on the
    /// connection itself), so that the next write opens a new one.
    async fn forget(&self) {
        *self.connection.lock().await = None;
    }

    async fn connection(&self) -> napi::Result<redis::aio::MultiplexedConnection> {
        let mut connection = self.connection.lock().await;
        if let Some(c) = connection.as_ref() {
            return Ok(c.clone());
        }
        let made = self
            .client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| coded("STORE", &format!("cannot reach the store: {e}"), &[]))?;
        *connection = Some(made.clone());
        Ok(made)
    }
}
