//! Chaos suite for redis-lock: Redlock over five module-loaded masters
//! (real `redis-server` processes) while nodes are killed and restarted,
//! stopped, slowed and have their clocks stepped, clients pause past their
//! validity, and (the network phase, nodes and clients in network
//! namespaces) links are partitioned, delayed and made lossy; every holder
//! makes a fenced write to a checker that
//! reports any violation of mutual exclusion or of fencing-token order.
//!
//! - [`plan`]: the fault mix and the safety rules it must obey;
//! - [`cluster`]: the nodes;
//! - [`network`]: the network namespaces and links of the network phase;
//! - [`wire`]: a link's packet forwarder (drops, delays);
//! - [`workload`]: the clients; [`scoped`]: their `with_lock` holds;
//!   [`blocking`]: a client per group on the blocking API;
//! - [`faults`]: the injector;
//! - [`checker`]: the fenced store and the violation checks;
//! - [`exposure`]: how many validity windows the faults threatened;
//! - [`report`]: the summary.
//!
//! [`run`] runs every phase of the safe mix, or of a mix that breaks the
//! rules on purpose (the negative control).

pub mod blocking;
pub mod checker;
pub mod cluster;
pub mod exposure;
pub mod faults;
pub mod linear;
pub mod network;
pub mod node_errors;
pub mod plan;
pub mod report;
pub mod scoped;
pub mod store;
pub mod wire;
pub mod workload;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_lock_client::{Config, Redlock};

use crate::checker::{Checker, ViolationKind};
use crate::cluster::Cluster;
use crate::exposure::Exposure;
use crate::faults::{FaultLog, Injector};
use crate::network::{Lab, NetnsHandle};
use crate::plan::{Mix, Phase};
use crate::report::{ClientFigures, NetworkFigures, PhaseSummary, Summary};
use crate::store::Store;
use crate::workload::{ClientStats, Resource, ResourceKind, Shared, Workload};

/// What can stop a run (violations do not: they are its result).
#[derive(Debug)]
pub enum Error {
    /// Nodes or the client could not be set up.
    Setup(String),
    /// A fault could not be carried out.
    Fault(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Setup(why) => write!(f, "setup: {why}"),
            Error::Fault(why) => write!(f, "fault: {why}"),
        }
    }
}

impl std::error::Error for Error {}

/// How to run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The whole run, split over the phases.
    pub duration: Duration,
    /// Seeds the fault schedule and the clients' choices.
    pub seed: u64,
    /// Concurrent client tasks.
    pub clients: usize,
    /// Mutexes they contend for.
    pub resources: usize,
    /// Read-write locks (a third of the holds write, the rest read).
    pub read_write: usize,
    /// Semaphores of `permits` permits.
    pub semaphores: usize,
    pub permits: u32,
    /// The safe mix, or one that breaks the rules on purpose.
    pub mix: Mix,
    /// A single-mechanism control with its mechanism put back
    /// ([`Mix::mechanism_plan`]): the same fault schedule for the same seed,
    /// and it must show no violation.
    pub with_mechanism: bool,
    /// Print every fault as it is injected (stderr).
    pub verbose: bool,
    /// Set from outside (Ctrl-C) to end the run early.
    pub interrupt: Arc<AtomicBool>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            duration: Duration::from_secs(180),
            seed: 1,
            clients: 32,
            resources: 4,
            read_write: 1,
            semaphores: 1,
            permits: 2,
            mix: Mix::Safe,
            with_mechanism: false,
            verbose: false,
            interrupt: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl Settings {
    /// Phase `phase`'s resources: mutexes `r<i>`, read-write locks `rw<i>`,
    /// semaphores `sem<i>`.
    pub fn resource_list(&self, phase: usize) -> Vec<Resource> {
        let named = |prefix: &str, count: usize, kind: ResourceKind| {
            (0..count)
                .map(|i| Resource {
                    name: format!("chaos:phase{phase}:{prefix}{i}"),
                    kind,
                })
                .collect::<Vec<_>>()
        };
        let mut all = named("r", self.resources, ResourceKind::Mutex);
        all.extend(named("rw", self.read_write, ResourceKind::ReadWrite));
        all.extend(named(
            "sem",
            self.semaphores,
            ResourceKind::Semaphore(self.permits),
        ));
        all
    }

    /// "4 mutexes, 1 read-write lock, 1 semaphore of 2 permits"
    pub fn describe_resources(&self) -> String {
        let count =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        format!(
            "{}, {}, {} of {} permits",
            count(self.resources, "mutex", "mutexes"),
            count(self.read_write, "read-write lock", "read-write locks"),
            count(self.semaphores, "semaphore", "semaphores"),
            self.permits
        )
    }
}

/// The client settings: the default per-node timeout (100 ms, so a stopped
/// or slow node costs a round little), and quick retries with a wide jitter
/// so that 8 contenders per resource split up.
pub fn client_config() -> Config {
    Config {
        retry_count: 5,
        retry_delay: Duration::from_millis(50),
        retry_jitter: Duration::from_millis(150),
        ..Config::default()
    }
}

/// Runs the safe mix (or the negative control) and returns its summary.
pub async fn run(settings: &Settings) -> Result<Summary, Error> {
    let plan = if settings.with_mechanism {
        settings.mix.mechanism_plan().ok_or_else(|| {
            Error::Setup(format!(
                "the {} mix is not a single-mechanism control",
                settings.mix.name()
            ))
        })?
    } else {
        settings.mix.plan()
    };
    let expects_violations = plan.mix.expects_violations() && !settings.with_mechanism;
    let mut phases = Vec::new();
    for (index, phase) in plan.phases.iter().enumerate() {
        if settings.interrupt.load(Ordering::Relaxed) {
            break;
        }
        let broken = phase.broken_rules();
        if !expects_violations && !broken.is_empty() {
            return Err(Error::Setup(format!(
                "the {} mix{} breaks the safety rules: {}",
                plan.mix.name(),
                if settings.with_mechanism {
                    " with its mechanism"
                } else {
                    ""
                },
                broken.join("; ")
            )));
        }
        let duration = settings.duration.mul_f64(phase.share);
        phases.push(run_phase(index, phase, duration, settings).await?);
    }
    Ok(Summary {
        seed: settings.seed,
        mix: plan.mix,
        with_mechanism: settings.with_mechanism,
        clients: settings.clients,
        resources: settings.describe_resources(),
        phases,
        interrupted: settings.interrupt.load(Ordering::Relaxed),
    })
}

/// The client objects of a phase and the runtimes their tasks run on: the
/// caller's runtime and one client on loopback, or in the network phase one
/// runtime per client namespace whose every thread lives in that namespace
/// (so every socket its client opens is opened there), with a client that
/// reaches the nodes over that group's links.
struct ClientGroups {
    groups: Vec<(Redlock, tokio::runtime::Handle)>,
    /// Where each group's blocking client runs.
    sites: Vec<blocking::Site>,
    runtimes: Vec<(tokio::runtime::Runtime, NetnsHandle)>,
}

impl ClientGroups {
    async fn start(
        cluster: &Cluster,
        lab: Option<&Lab>,
        config: &Config,
    ) -> Result<ClientGroups, Error> {
        let setup = |e: String| Error::Setup(e);
        let Some(lab) = lab else {
            let redlock = Redlock::with_config(cluster.client_urls(), config.clone())
                .map_err(|e| setup(e.to_string()))?;
            wait_ready(&redlock).await?;
            return Ok(ClientGroups {
                groups: vec![(redlock, tokio::runtime::Handle::current())],
                sites: vec![blocking::Site {
                    urls: cluster.client_urls(),
                    netns: None,
                    config: config.clone(),
                }],
                runtimes: Vec::new(),
            });
        };
        let mut made = ClientGroups {
            groups: Vec::new(),
            sites: Vec::new(),
            runtimes: Vec::new(),
        };
        for group in 0..lab.groups() {
            let netns = lab.group_handle(group)?;
            let enter = netns.clone();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name(format!("chaos-group{group}"))
                .on_thread_start(move || enter.enter())
                .enable_all()
                .build()
                .map_err(|e| setup(format!("client group {group}'s runtime: {e}")))?;
            let redlock = {
                let _inside = runtime.enter();
                Redlock::with_config(cluster.group_urls(group), config.clone())
                    .map_err(|e| setup(e.to_string()))?
            };
            let ready = runtime.spawn({
                let redlock = redlock.clone();
                async move { wait_ready(&redlock).await }
            });
            let handle = runtime.handle().clone();
            made.runtimes.push((runtime, netns.clone()));
            ready
                .await
                .map_err(|e| setup(format!("client group {group}: {e}")))??;
            netns.check()?;
            made.groups.push((redlock, handle));
            made.sites.push(blocking::Site {
                urls: cluster.group_urls(group),
                netns: Some(netns),
                config: config.clone(),
            });
        }
        Ok(made)
    }

    /// Ends the client groups' runtimes; fails if any of their threads ran
    /// outside its namespace.
    fn stop(mut self) -> Result<(), Error> {
        self.groups.clear();
        let mut result = Ok(());
        for (runtime, netns) in self.runtimes.drain(..) {
            runtime.shutdown_background();
            if result.is_ok() {
                result = netns.check();
            }
        }
        result
    }
}

impl Drop for ClientGroups {
    fn drop(&mut self) {
        // An early return: runtimes cannot be dropped inside the caller's.
        for (runtime, _) in self.runtimes.drain(..) {
            runtime.shutdown_background();
        }
    }
}

/// Polls until every node answers `LOCK.INFO` through the client's own
/// connections, so the first rounds do not count connection set-up.
async fn wait_ready(redlock: &Redlock) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let Some(failed) = unreachable(&redlock.info("chaos:ready").await) else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            return Err(Error::Setup(failed));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The nodes whose `LOCK.INFO` failed, with their errors; `None` if none.
pub(crate) fn unreachable(infos: &[redis_lock_client::NodeInfo]) -> Option<String> {
    let failed: Vec<String> = infos
        .iter()
        .filter_map(|i| i.info.as_ref().err().map(|e| format!("{}: {e}", i.node)))
        .collect();
    (!failed.is_empty()).then(|| format!("nodes not reachable: {}", failed.join(", ")))
}

async fn run_phase(
    index: usize,
    phase: &Phase,
    duration: Duration,
    settings: &Settings,
) -> Result<PhaseSummary, Error> {
    let phase_seed = settings
        .seed
        .wrapping_add(0xA076_1D64_78BD_642Fu64.wrapping_mul(index as u64));
    let lab = if phase.client_groups > 0 {
        let (nodes, groups) = (phase.nodes.len(), phase.client_groups);
        let lab = tokio::task::spawn_blocking(move || Lab::new(nodes, groups))
            .await
            .map_err(|e| Error::Setup(format!("the network lab: {e}")))??;
        Some(Arc::new(lab))
    } else {
        None
    };
    let mut cluster = Cluster::start(&phase.nodes, lab.clone()).await?;
    if lab.is_none() && phase.has_client_link_faults() {
        cluster.proxy_clients();
    }
    let cluster = Arc::new(cluster);
    // Every node error the clients meet from now on, in every round.
    let node_watch = node_errors::Watch::start(cluster.client_ports());
    let mut config = Config {
        unsafe_quorum: phase.client_quorum,
        ..client_config()
    };
    // The phase's drift allowance (the client's default but in the clock
    // controls).
    config.drift_factor = phase.drift.ppm as f64 / 1e6;
    config.drift_min = Duration::from_millis(phase.drift.min_ms);
    let groups = ClientGroups::start(&cluster, lab.as_deref(), &config).await?;

    let origin = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let pause_requests = Arc::new(AtomicU64::new(0));
    let log = Arc::new(FaultLog::new(origin, settings.verbose));
    let checker = Arc::new(Checker::with_store(Store::start()));
    let stats = Arc::new(ClientStats::default());
    let indexer = cluster.clone();
    let node_index: workload::NodeIndex = Arc::new(move |name: &str| indexer.index_of(name));
    let shared: Vec<(Shared, tokio::runtime::Handle)> = groups
        .groups
        .iter()
        .map(|(redlock, runtime)| {
            let shared = Shared {
                redlock: redlock.clone(),
                checker: checker.clone(),
                stats: stats.clone(),
                pause_requests: pause_requests.clone(),
                stop: stop.clone(),
                node_index: node_index.clone(),
                held_ignores_validity: phase.held_ignores_validity,
            };
            (shared, runtime.clone())
        })
        .collect();
    let workload = Workload {
        clients: settings.clients,
        resources: settings.resource_list(index + 1),
        ttl_ms: phase.ttl_ms.clone(),
        edge_share: phase.edge_share,
        seed: phase_seed.wrapping_add(1),
    };
    let mutexes: Vec<String> = workload
        .resources
        .iter()
        .filter(|r| r.kind == ResourceKind::Mutex)
        .map(|r| r.name.clone())
        .collect();
    let mut blocking_clients = Vec::new();
    for (group, (site, (shared, _))) in groups.sites.iter().zip(&shared).enumerate() {
        let plan = blocking::Plan {
            client: workload.clients + group,
            resources: mutexes.clone(),
            ttl_ms: phase.ttl_ms.clone(),
            seed: phase_seed.wrapping_add(3 + group as u64),
        };
        match blocking::spawn(site.clone(), plan, shared.clone()) {
            Ok(thread) => blocking_clients.push(thread),
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                return Err(Error::Setup(format!("a blocking client's thread: {e}")));
            }
        }
    }
    let clients = workload::spawn(&workload, &shared);
    drop(shared);
    drop(node_index);
    let injector = tokio::spawn(
        Injector {
            cluster: cluster.clone(),
            phase: phase.clone(),
            seed: phase_seed.wrapping_add(2),
            log: log.clone(),
            pause_requests,
            stop: stop.clone(),
            checker: checker.clone(),
            skew_resets: Arc::default(),
        }
        .run(),
    );

    let end = origin + duration;
    while Instant::now() < end && !settings.interrupt.load(Ordering::Relaxed) {
        let left = end.saturating_duration_since(Instant::now());
        tokio::time::sleep(left.min(Duration::from_millis(100))).await;
    }
    stop.store(true, Ordering::Relaxed);
    let faults = injector
        .await
        .map_err(|e| Error::Fault(format!("the injector failed: {e}")))?;
    for client in clients {
        // A client task that panicked fails the run (the checker's record
        // stays valid, but the task's later holds are missing).
        if client.await.is_err() {
            stats.panicked.fetch_add(1, Ordering::Relaxed);
        }
    }
    let blocking_panics = tokio::task::spawn_blocking(move || {
        blocking_clients
            .into_iter()
            .map(|thread| u64::from(thread.join().is_err()))
            .sum::<u64>()
    })
    .await
    .map_err(|e| Error::Setup(format!("joining the blocking clients: {e}")))?;
    stats.panicked.fetch_add(blocking_panics, Ordering::Relaxed);
    let seconds = origin.elapsed().as_secs_f64();
    cluster.settle().await;
    groups.stop()?;
    cluster.check_servers().await;
    let node_errors = node_watch.errors.figures();
    drop(node_watch);
    // A single node: how many grants its server-side queue made (since its
    // last restart), to show the clients waited there.
    let server_wait_grants = if cluster.nodes.len() == 1 {
        let mut grants = 0;
        for node in &cluster.nodes {
            let info = redis::cmd("INFO").arg("lock").to_owned();
            if let Ok(redis::Value::BulkString(text)) =
                cluster::command(&node.url, &info, Duration::from_secs(5)).await
            {
                grants += String::from_utf8_lossy(&text)
                    .lines()
                    .find_map(|line| line.strip_prefix("lock_wait_grants:"))
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        Some(grants)
    } else {
        None
    };
    let network = lab.as_ref().map(|lab| {
        let (packets_carried, packets_dropped) = lab.packets();
        NetworkFigures {
            client_groups: lab.groups(),
            packets_carried,
            packets_dropped,
        }
    });

    let findings = checker.findings();
    let exposure = Exposure::of(
        &checker.holders(),
        &log.events(),
        cluster.nodes.len(),
        |node| {
            cluster
                .nodes
                .get(node)
                .map_or(true, |n| n.profile.restart_can_cost_leases())
        },
    );
    let mut examples = Vec::new();
    for kind in ViolationKind::ALL {
        for violation in findings
            .violations
            .iter()
            .filter(|v| v.kind == kind)
            .take(2)
        {
            let (from, to) = violation.span();
            let mut text = violation.describe(origin);
            let context = log.between(from.checked_sub(Duration::from_secs(4)).unwrap_or(from), to);
            text.push_str("\n    faults from 4 s before the first acquisition to the end:");
            if context.is_empty() {
                text.push_str(" none");
            }
            for event in &context {
                text.push_str("\n      ");
                text.push_str(&log.describe(event));
            }
            examples.push(text);
        }
    }
    Ok(PhaseSummary {
        name: phase.name.to_string(),
        nodes: phase.nodes.clone(),
        ttl_ms: (*phase.ttl_ms.start(), *phase.ttl_ms.end()),
        seconds,
        clients: ClientFigures::of(&stats),
        node_errors,
        server_troubles: cluster.troubles(),
        fault_kinds: plan::FaultKind::ALL
            .into_iter()
            .filter(|k| phase.allows(*k))
            .collect(),
        faults,
        findings,
        examples,
        network,
        exposure,
        server_wait_grants,
    })
}
