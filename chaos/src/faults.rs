//! The fault injector: at random intervals it picks a fault kind by the
//! phase's weights (every allowed kind once first, in random order, so that
//! even a short run injects each), draws its parameters from the seeded
//! random generator, claims the node(s) and runs the fault in a task of its
//! own, so faults overlap (a node can be stopped while another restarts).
//! A fault whose nodes are all booked by other faults is skipped: booked by
//! the schedule ([`Calendar`]), so that whether it starts depends on the
//! seed alone, not on how long the faults before it took.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use tokio::task::JoinSet;

use crate::checker::{ms_since, Checker};
use crate::cluster::{self, Claimed, ClaimedLink, Cluster};
use crate::network::{Shape, Way};
use crate::plan::{FaultKind, Persistence, Phase};
use crate::Error;

/// One injected fault, for the report and for context around violations.
#[derive(Clone, Debug)]
pub struct FaultEvent {
    pub at: Instant,
    pub kind: FaultKind,
    pub nodes: Vec<usize>,
    pub detail: String,
}

/// Every fault of a phase, in order.
pub struct FaultLog {
    origin: Instant,
    verbose: bool,
    events: Mutex<Vec<FaultEvent>>,
}

impl FaultLog {
    pub fn new(origin: Instant, verbose: bool) -> FaultLog {
        FaultLog {
            origin,
            verbose,
            events: Mutex::new(Vec::new()),
        }
    }

    fn record(&self, kind: FaultKind, nodes: Vec<usize>, detail: String) {
        let event = FaultEvent {
            at: Instant::now(),
            kind,
            nodes,
            detail,
        };
        if self.verbose {
            eprintln!("fault {}", self.describe(&event));
        }
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    pub fn describe(&self, event: &FaultEvent) -> String {
        format!(
            "[{}] {} on nodes {:?}: {}",
            ms_since(self.origin, event.at),
            event.kind.name(),
            event.nodes,
            event.detail
        )
    }

    /// Every fault injected so far.
    pub fn events(&self) -> Vec<FaultEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Faults injected between `from` and `to`.
    pub fn between(&self, from: Instant, to: Instant) -> Vec<FaultEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|e| e.at >= from && e.at <= to)
            .cloned()
            .collect()
    }
}

/// Faults by kind.
#[derive(Clone, Debug, Default)]
pub struct FaultCounts {
    /// Started (for a client pause: requested).
    pub injected: BTreeMap<FaultKind, u64>,
    /// Not started: every eligible node was booked by another fault.
    pub skipped: BTreeMap<FaultKind, u64>,
    /// Started but an operation failed (a server that did not come back, a
    /// command that got no answer in time).
    pub failed: BTreeMap<FaultKind, u64>,
    pub first_failure: Option<String>,
    /// The fault schedule as drawn from the seed, in order: each fault's
    /// wait before it, kind and parameters, whether it was then started or
    /// skipped. A function of the seed and the phase's fault settings
    /// alone, so two runs with the same seed and plan draw the same list
    /// (one may draw more of it than the other: the run's length and the
    /// retries of skipped faults depend on timing).
    pub drawn: Vec<String>,
    /// What actually ran: every fault started, in order, with the draw it
    /// came from and when it started ([`same_faults_started`] compares two
    /// runs' lists).
    pub started: Vec<StartedFault>,
    /// How many draws had their moment come before the injector stopped
    /// (started, skipped or waiting for a retry): the part of the schedule
    /// the run reached.
    pub reached: usize,
    /// Lease-clock skews that failed partway (a `LOCK.DEBUG` without an
    /// answer): the nodes whose rates were then set back to 0, and those
    /// whose reset failed too (their rate may still be off).
    pub skew_resets: u64,
    pub skew_resets_failed: u64,
}

/// A fault that started: which draw of the schedule, its kind, the
/// schedule's moment it was started for (`due_ms`: the draw's wait, plus
/// half the mean interval for each retry of a skipped prelude fault; the
/// same in two runs with one seed that started it at the same turn), and
/// when it began to act (`at_ms`: once it had claimed its nodes, which may
/// wait for a fault that overran its booking; ms after the injector began).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartedFault {
    pub draw: usize,
    pub kind: FaultKind,
    pub due_ms: u64,
    pub at_ms: u64,
}

/// How far apart two runs of one schedule may begin the same fault, started
/// for the same moment: the injector sleeps to the schedule's moments, but
/// a fault claims its nodes first, waiting for one that overran its
/// booking (a restart that took longer), and the injector's own timer runs
/// late on a loaded machine: 292, 441 and 617 ms apart were seen on this
/// project's 2-core machine with benchmarks running beside the tests. A
/// fault skipped or retried in one run differs by its schedule moment
/// (`due_ms`), compared exactly.
pub const SAME_START_MS: u64 = 2_000;

/// Whether two runs with one seed and fault settings started the same
/// faults, by kind and time, over the part of the schedule both reached:
/// every draw started in one was started in the other, as the same kind,
/// within `tolerance_ms`. A fault that one run skipped (its nodes busy) or
/// did not start for any other reason, or started at another moment, is a
/// difference. Returns how many started faults were compared, or the first
/// difference.
pub fn same_faults_started(
    a: &FaultCounts,
    b: &FaultCounts,
    tolerance_ms: u64,
) -> Result<usize, String> {
    let reached = a.reached.min(b.reached);
    let within = |counts: &FaultCounts| -> Vec<StartedFault> {
        counts
            .started
            .iter()
            .filter(|s| s.draw < reached)
            .cloned()
            .collect()
    };
    let (a, b) = (within(a), within(b));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        if x.draw != y.draw
            || x.kind != y.kind
            || x.due_ms != y.due_ms
            || x.at_ms.abs_diff(y.at_ms) > tolerance_ms
        {
            return Err(format!(
                "started fault {i} differs: draw {} ({}) due at {} ms, began at {} ms, and draw {} ({}) due at {} ms, began at {} ms",
                x.draw,
                x.kind.name(),
                x.due_ms,
                x.at_ms,
                y.draw,
                y.kind.name(),
                y.due_ms,
                y.at_ms
            ));
        }
    }
    if a.len() != b.len() {
        let (longer, shorter) = if a.len() > b.len() {
            (&a, &b)
        } else {
            (&b, &a)
        };
        let extra = longer.get(shorter.len()).map_or(String::new(), |s| {
            format!(": draw {} ({}) at {} ms", s.draw, s.kind.name(), s.at_ms)
        });
        return Err(format!(
            "{} and {} faults started in the {reached} draws both reached; the first only one started{extra}",
            a.len(),
            b.len()
        ));
    }
    Ok(a.len())
}

impl FaultCounts {
    pub fn injected(&self, kind: FaultKind) -> u64 {
        self.injected.get(&kind).copied().unwrap_or(0)
    }

    pub fn total_injected(&self) -> u64 {
        self.injected.values().sum()
    }

    pub fn add(&mut self, other: &FaultCounts) {
        for (kind, n) in &other.injected {
            *self.injected.entry(*kind).or_default() += n;
        }
        for (kind, n) in &other.skipped {
            *self.skipped.entry(*kind).or_default() += n;
        }
        for (kind, n) in &other.failed {
            *self.failed.entry(*kind).or_default() += n;
        }
        if self.first_failure.is_none() {
            self.first_failure.clone_from(&other.first_failure);
        }
        self.drawn.extend(other.drawn.iter().cloned());
        self.started.extend(other.started.iter().cloned());
        self.reached += other.reached;
        self.skew_resets += other.skew_resets;
        self.skew_resets_failed += other.skew_resets_failed;
    }
}

/// The injector of one phase: faults at the schedule's moments, each
/// started or skipped by the [`Calendar`].
pub struct Injector {
    pub cluster: Arc<Cluster>,
    pub phase: Phase,
    pub seed: u64,
    pub log: Arc<FaultLog>,
    pub pause_requests: Arc<AtomicU64>,
    pub stop: Arc<AtomicBool>,
    /// The holders' record: a clock-lead restart
    /// ([`Phase::restart_after_lead`]) waits for a token issued with the
    /// lead in it.
    pub checker: Arc<Checker>,
    /// Lease-clock rates set back after a skew that failed partway, and
    /// those whose reset failed (see [`FaultCounts::skew_resets`]).
    pub skew_resets: Arc<(AtomicU64, AtomicU64)>,
}

/// A fault under way.
type FaultFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Error>> + Send>>;

/// A fault with its parameters drawn, before its nodes are claimed.
#[derive(Clone, Debug)]
enum Planned {
    Kill9 {
        candidates: Vec<usize>,
        downtime: Duration,
        cut_bytes: Option<u64>,
        /// Where in its offset range a node whose clock always runs behind
        /// is set again after the restart.
        reoffset: f64,
    },
    Majority {
        candidates: Vec<usize>,
        downtime: Duration,
        /// How many: a majority, or one more (what a permit of a semaphore
        /// of two or more needs).
        count: usize,
        /// A power loss: bytes cut off the AOF tail of each `everysec` node.
        cut_bytes: u64,
        reoffset: f64,
        /// A clock-lead restart ([`Phase::restart_after_lead`]): every
        /// node's wall clock set to the top of its range first, until a
        /// holder has a token issued with that lead.
        lead: bool,
    },
    Stop {
        candidates: Vec<usize>,
        duration: Duration,
    },
    Slow {
        candidates: Vec<usize>,
        /// (DEBUG SLEEP, gap after it)
        bursts: Vec<(Duration, Duration)>,
    },
    Offset {
        candidates: Vec<usize>,
        /// Drawn per node, as a fraction of the node's offset range.
        unit: f64,
        reset: bool,
    },
    Pause,
    /// Lease clocks of `nodes` nodes skewed (rate, jump) for a while.
    Skew {
        candidates: Vec<usize>,
        /// (rate ppm, jump ms) per node, in claim order.
        skews: Vec<(i64, u64)>,
        duration: Duration,
    },
    /// A node's client proxy stalled (every byte held) or delaying each
    /// chunk by `delay`, for `duration`.
    ClientSlow {
        candidates: Vec<usize>,
        stall: bool,
        delay: Duration,
        duration: Duration,
    },
    /// A node's client connections cut; with `held`, the reconnection
    /// held (the proxy stalled) that long.
    ClientCut {
        candidates: Vec<usize>,
        held: Option<Duration>,
    },
    /// Shapes on (group, node, way) for a while, then healed.
    Network {
        shapes: Vec<(usize, usize, Way, Shape)>,
        duration: Duration,
        detail: String,
    },
}

impl Injector {
    /// Injects faults until `stop` is set, then waits for the running ones
    /// to finish (every stopped node resumed, every killed one restarted).
    pub async fn run(self) -> FaultCounts {
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut counts = FaultCounts::default();
        let mut prelude: Vec<FaultKind> = self
            .phase
            .faults
            .iter()
            .filter(|(_, w)| *w > 0)
            .map(|(k, _)| *k)
            .collect();
        prelude.shuffle(&mut rng);
        let mut running: JoinSet<(FaultKind, Result<(), Error>)> = JoinSet::new();
        let mean = self.phase.fault_interval_ms.max(2);
        // A prelude fault that was skipped, tried again as drawn (the same
        // parameters) after half the mean interval, without drawing
        // anything: the schedule drawn from the seed stays the same
        // whatever the nodes' state.
        let mut retry: Option<(FaultKind, Planned, usize)> = None;
        // The schedule's moments, kept to the injector's clock (each wait
        // counted from the moment the last one was due, not from when the
        // fault's start returned), so that two runs of one seed start each
        // fault at nearly the same moment (see [`same_faults_started`]).
        let origin = tokio::time::Instant::now();
        let mut due = Duration::ZERO;
        let links = self
            .cluster
            .lab
            .as_ref()
            .map_or(0, |lab| lab.groups() * lab.nodes());
        let mut calendar = Calendar::new(self.cluster.nodes.len(), links);
        let starts = Arc::new(Starts {
            origin,
            list: Mutex::new(Vec::new()),
        });
        loop {
            let (wait, kind, planned, prelude_kind, draw) = match retry.take() {
                Some((kind, planned, draw)) => (mean / 2, kind, planned, true, draw),
                None => {
                    let wait = rng.random_range(mean / 2..=mean * 3 / 2);
                    let prelude_kind = !prelude.is_empty();
                    let kind = match prelude.pop() {
                        Some(kind) => kind,
                        None => self.pick_kind(&mut rng),
                    };
                    let planned = self.plan(kind, &mut rng);
                    let draw = counts.drawn.len();
                    counts
                        .drawn
                        .push(format!("after {wait} ms: {kind:?} {planned:?}"));
                    (wait, kind, planned, prelude_kind, draw)
                }
            };
            due += Duration::from_millis(wait);
            tokio::time::sleep_until(origin + due).await;
            while let Some(done) = running.try_join_next() {
                note_done(&mut counts, done);
            }
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            counts.reached = counts.reached.max(draw + 1);
            let again = prelude_kind.then(|| planned.clone());
            let due_ms = ms_of(due);
            match self.start(kind, planned, draw, due_ms, &mut calendar, &starts) {
                Some(fault) => {
                    *counts.injected.entry(kind).or_default() += 1;
                    running.spawn(async move { (kind, fault.await) });
                }
                None => {
                    *counts.skipped.entry(kind).or_default() += 1;
                    // Every kind must happen once: try it again next.
                    retry = again.map(|planned| (kind, planned, draw));
                }
            }
        }
        while let Some(done) = running.join_next().await {
            note_done(&mut counts, done);
        }
        let mut started =
            std::mem::take(&mut *starts.list.lock().unwrap_or_else(|p| p.into_inner()));
        started.sort_by_key(|s| s.draw);
        counts.started = started;
        counts.skew_resets = self.skew_resets.0.load(Ordering::Relaxed);
        counts.skew_resets_failed = self.skew_resets.1.load(Ordering::Relaxed);
        counts
    }

    fn pick_kind(&self, rng: &mut StdRng) -> FaultKind {
        let total: u32 = self.phase.faults.iter().map(|(_, w)| *w).sum();
        let mut pick = rng.random_range(0..total.max(1));
        for (kind, weight) in &self.phase.faults {
            if pick < *weight {
                return *kind;
            }
            pick -= weight;
        }
        FaultKind::ClientPause
    }

    /// Draws every parameter of a fault from `rng` (the same draws whatever
    /// state the nodes are in, so a seed gives the same schedule).
    fn plan(&self, kind: FaultKind, rng: &mut StdRng) -> Planned {
        let mut all: Vec<usize> = (0..self.cluster.nodes.len()).collect();
        all.shuffle(rng);
        let ms =
            |rng: &mut StdRng, lo: u64, hi: u64| Duration::from_millis(rng.random_range(lo..=hi));
        match kind {
            FaultKind::Kill9Restart => Planned::Kill9 {
                candidates: all,
                downtime: ms(rng, 0, 500),
                cut_bytes: None,
                reoffset: rng.random_range(0.0..=1.0),
            },
            FaultKind::PowerLoss => {
                let candidates = all
                    .into_iter()
                    .filter(|&i| {
                        self.cluster.nodes[i].profile.persistence == Persistence::AofEverysec
                    })
                    .collect();
                Planned::Kill9 {
                    candidates,
                    downtime: ms(rng, 0, 500),
                    cut_bytes: Some(rng.random_range(1..=16_384)),
                    reoffset: rng.random_range(0.0..=1.0),
                }
            }
            FaultKind::RestartMajority => {
                let quorum = all.len() / 2 + 1;
                let mut count = (quorum + usize::from(rng.random_bool(0.5))).min(all.len());
                let lead = self.phase.restart_after_lead;
                if lead {
                    // Every node: none left ahead to lift the next tokens.
                    count = all.len();
                }
                Planned::Majority {
                    candidates: all,
                    downtime: ms(rng, 0, 300),
                    count,
                    cut_bytes: rng.random_range(1..=16_384),
                    reoffset: rng.random_range(0.0..=1.0),
                    lead,
                }
            }
            FaultKind::StopNode => Planned::Stop {
                candidates: all,
                duration: ms(rng, 200, 2_500),
            },
            FaultKind::SlowNode => {
                let bursts = (0..rng.random_range(3..=8))
                    .map(|_| (ms(rng, 50, 300), ms(rng, 10, 100)))
                    .collect();
                Planned::Slow {
                    candidates: all,
                    bursts,
                }
            }
            FaultKind::ClockOffset => Planned::Offset {
                candidates: all,
                unit: rng.random_range(0.0..=1.0),
                reset: rng.random_bool(0.25),
            },
            FaultKind::ClientPause => Planned::Pause,
            FaultKind::LeaseClockSkew => {
                let bounds = self.phase.lease_skew;
                let most = bounds.max_nodes.min(all.len()).max(1);
                let count = rng.random_range(bounds.min_nodes.clamp(1, most)..=most);
                let skews = (0..count)
                    .map(|_| {
                        (
                            rng.random_range(bounds.min_rate_ppm..=bounds.max_rate_ppm),
                            rng.random_range(0..=bounds.max_jump_ms),
                        )
                    })
                    .collect();
                Planned::Skew {
                    candidates: all,
                    skews,
                    duration: ms(rng, crate::plan::SKEW_MIN_MS, 3_000),
                }
            }
            FaultKind::ClientSlowLink => {
                let stall = rng.random_bool(0.5);
                let delay = ms(rng, 20, 250);
                let duration = ms(rng, 100, 2_000);
                Planned::ClientSlow {
                    candidates: all,
                    stall,
                    delay,
                    duration,
                }
            }
            FaultKind::ClientReconnect => {
                let hold = ms(rng, 50, 800);
                let held = rng.random_bool(0.5).then_some(hold);
                Planned::ClientCut {
                    candidates: all,
                    held,
                }
            }
            kind => self.plan_network(kind, all, rng),
        }
    }

    /// A network fault's links, shapes and duration (`all`: the nodes in a
    /// random order).
    fn plan_network(&self, kind: FaultKind, all: Vec<usize>, rng: &mut StdRng) -> Planned {
        let groups = self.phase.client_groups.max(1);
        let group = rng.random_range(0..groups);
        let duration = Duration::from_millis(rng.random_range(200..=3_000));
        let both = |group: usize, node: usize, shape: &Shape| {
            [Way::Requests, Way::Replies].map(|way| (group, node, way, shape.clone()))
        };
        let mut shapes = Vec::new();
        let detail = match kind {
            FaultKind::Partition => {
                let cut = &all[..rng.random_range(1..=3).min(all.len())];
                for &node in cut {
                    shapes.extend(both(group, node, &Shape::Cut));
                }
                format!("client group {group} cut from nodes {cut:?}")
            }
            FaultKind::SplitMajorities => {
                // all = [shared, a, a, b, b]: group 0 loses the b's, group 1
                // the a's; each still reaches three nodes.
                let half = all.len().saturating_sub(1) / 2;
                let (a, b) = all.get(1..).unwrap_or_default().split_at(half);
                for &node in b {
                    shapes.extend(both(0, node, &Shape::Cut));
                }
                for &node in a {
                    shapes.extend(both(1 % groups, node, &Shape::Cut));
                }
                format!(
                    "group 0 reaches {:?}, group 1 reaches {:?}",
                    all.iter().filter(|n| !b.contains(n)).collect::<Vec<_>>(),
                    all.iter().filter(|n| !a.contains(n)).collect::<Vec<_>>()
                )
            }
            FaultKind::OneWayLoss => {
                let node = all.first().copied().unwrap_or(0);
                shapes.push((group, node, Way::Replies, Shape::Cut));
                format!("node {node}'s replies to client group {group} dropped")
            }
            FaultKind::Delay => {
                let node = all.first().copied().unwrap_or(0);
                let delay_ms = rng.random_range(20..=400);
                let jitter_ms = rng.random_range(0..=delay_ms / 4);
                let shape = Shape::Delay {
                    delay_ms,
                    jitter_ms,
                };
                for group in 0..groups {
                    shapes.push((group, node, Way::Replies, shape.clone()));
                }
                format!("node {node}'s replies delayed {delay_ms} ± {jitter_ms} ms")
            }
            _ => {
                let node = all.first().copied().unwrap_or(0);
                let percent = rng.random_range(5..=30);
                for group in 0..groups {
                    shapes.extend(both(group, node, &Shape::Loss { percent }));
                }
                format!("node {node}'s links lose {percent}% of packets")
            }
        };
        Planned::Network {
            shapes,
            duration,
            detail,
        }
    }

    /// Books the fault's nodes (or links) on the calendar from `due` (ms
    /// after the injector began) and returns the fault's future, which
    /// claims them (waiting for a fault that overran its booking) and notes
    /// its start in `starts`; `None` when the calendar has its nodes busy.
    fn start(
        &self,
        kind: FaultKind,
        planned: Planned,
        draw: usize,
        due: u64,
        calendar: &mut Calendar,
        starts: &Arc<Starts>,
    ) -> Option<FaultFuture> {
        let cluster = self.cluster.clone();
        let log = self.log.clone();
        let starts = starts.clone();
        match planned {
            Planned::Kill9 {
                candidates,
                downtime,
                cut_bytes,
                reoffset,
            } => {
                let booking = ms_of(downtime) + RESTART_BOOKING_MS;
                let i = calendar.book_one(&candidates, due, booking)?;
                Some(Box::pin(async move {
                    let claim = claim(&cluster, i).await?;
                    starts.note(draw, kind, due);
                    let dir = cluster.nodes[i].dir().to_path_buf();
                    let watch = cluster.clone();
                    let claim = cluster::blocking(claim, move |s| {
                        watch.check_server(i, s, "when a kill -9 came");
                        s.kill9();
                    })
                    .await?;
                    let detail = match cut_bytes {
                        Some(bytes) => {
                            let cut = cut_aof_tail(&dir, bytes)?;
                            format!(
                                "cut {cut} bytes of the AOF tail, down {} ms",
                                downtime.as_millis()
                            )
                        }
                        None => format!("down {} ms", downtime.as_millis()),
                    };
                    log.record(kind, vec![i], detail);
                    tokio::time::sleep(downtime).await;
                    let claim = cluster::blocking(claim, |s| s.restart()).await?;
                    restarted(&cluster, i, reoffset).await?;
                    drop(claim);
                    Ok(())
                }))
            }
            Planned::Majority {
                candidates,
                downtime,
                count,
                cut_bytes,
                reoffset,
                lead,
            } => {
                // A power loss of a majority: the nodes a restart hurts
                // first (in the drawn order: they can forget, or their
                // clocks run behind now), so that those are a majority
                // whenever the phase has that many.
                let mut candidates = candidates;
                candidates.sort_by_key(|&i| !cluster.nodes[i].restart_hurts());
                let lead_booking = if lead { ms_of(LEAD_WAIT) } else { 0 };
                let booking = ms_of(downtime) + RESTART_BOOKING_MS + lead_booking;
                let nodes = calendar.book_many(&candidates, count, due, booking)?;
                let checker = self.checker.clone();
                Some(Box::pin(async move {
                    let mut claims = Vec::new();
                    for &i in &nodes {
                        claims.push((i, claim(&cluster, i).await?));
                    }
                    starts.note(draw, kind, due);
                    let led = if lead {
                        format!(", {}", lead_clocks(&cluster, &nodes, &checker).await?)
                    } else {
                        String::new()
                    };
                    // Killed together, in one blocking call.
                    let watch = cluster.clone();
                    let claims = tokio::task::spawn_blocking(move || {
                        let mut claims = claims;
                        for (i, claim) in &mut claims {
                            watch.check_server(*i, claim, "when a kill -9 came");
                        }
                        for (_, claim) in &mut claims {
                            claim.kill9();
                        }
                        claims
                    })
                    .await
                    .map_err(|e| Error::Fault(format!("kill failed: {e}")))?;
                    let mut cuts = Vec::new();
                    for &i in &nodes {
                        let node = &cluster.nodes[i];
                        if node.profile.persistence == Persistence::AofEverysec {
                            let cut = cut_aof_tail(node.dir(), cut_bytes)?;
                            cuts.push(format!("{cut} bytes of node {i}'s AOF tail"));
                        }
                    }
                    let cut = if cuts.is_empty() {
                        String::new()
                    } else {
                        format!(", cut {}", cuts.join(", "))
                    };
                    log.record(
                        kind,
                        nodes,
                        format!("down {} ms{cut}{led}", downtime.as_millis()),
                    );
                    tokio::time::sleep(downtime).await;
                    let restarts: Vec<_> = claims
                        .into_iter()
                        .map(|(i, claim)| {
                            (i, tokio::spawn(cluster::blocking(claim, |s| s.restart())))
                        })
                        .collect();
                    for (i, restart) in restarts {
                        let claim = restart
                            .await
                            .map_err(|e| Error::Fault(format!("restart failed: {e}")))??;
                        restarted(&cluster, i, reoffset).await?;
                        drop(claim);
                    }
                    Ok(())
                }))
            }
            Planned::ClientSlow {
                candidates,
                stall,
                delay,
                duration,
            } => {
                let i = calendar.book_one(&candidates, due, ms_of(duration))?;
                Some(Box::pin(async move {
                    let claim = claim(&cluster, i).await?;
                    starts.note(draw, kind, due);
                    let proxy = cluster
                        .proxy(i)
                        .ok_or_else(|| Error::Fault(format!("node {i} has no client proxy")))?;
                    let ms = duration.as_millis();
                    if stall {
                        proxy.stall();
                        log.record(kind, vec![i], format!("client link held {ms} ms"));
                    } else {
                        proxy.delay(delay);
                        log.record(
                            kind,
                            vec![i],
                            format!(
                                "client link delays each chunk {} ms for {ms} ms",
                                delay.as_millis()
                            ),
                        );
                    }
                    tokio::time::sleep(duration).await;
                    proxy.resume();
                    proxy.delay(Duration::ZERO);
                    drop(claim);
                    Ok(())
                }))
            }
            Planned::ClientCut { candidates, held } => {
                let i = calendar.book_one(&candidates, due, held.map_or(0, ms_of))?;
                Some(Box::pin(async move {
                    let claim = claim(&cluster, i).await?;
                    starts.note(draw, kind, due);
                    let proxy = cluster
                        .proxy(i)
                        .ok_or_else(|| Error::Fault(format!("node {i} has no client proxy")))?;
                    match held {
                        Some(hold) => {
                            proxy.stall();
                            proxy.cut();
                            log.record(
                                kind,
                                vec![i],
                                format!(
                                    "client connections cut, reconnection held {} ms",
                                    hold.as_millis()
                                ),
                            );
                            tokio::time::sleep(hold).await;
                            proxy.resume();
                        }
                        None => {
                            proxy.cut();
                            log.record(kind, vec![i], "client connections cut".to_string());
                        }
                    }
                    drop(claim);
                    Ok(())
                }))
            }
            Planned::Stop {
                candidates,
                duration,
            } => {
                let i = calendar.book_one(&candidates, due, ms_of(duration))?;
                Some(Box::pin(async move {
                    let mut claim = claim(&cluster, i).await?;
                    starts.note(draw, kind, due);
                    cluster.check_server(i, &mut claim, "when a SIGSTOP came");
                    claim.pause();
                    log.record(
                        kind,
                        vec![i],
                        format!("stopped for {} ms", duration.as_millis()),
                    );
                    tokio::time::sleep(duration).await;
                    claim.resume();
                    Ok(())
                }))
            }
            Planned::Slow { candidates, bursts } => {
                let length: u64 = bursts.iter().map(|(s, g)| ms_of(*s) + ms_of(*g)).sum();
                let i = calendar.book_one(&candidates, due, length)?;
                Some(Box::pin(async move {
                    let claim = claim(&cluster, i).await?;
                    starts.note(draw, kind, due);
                    let url = cluster.nodes[i].url.clone();
                    let total: Duration = bursts.iter().map(|(s, _)| *s).sum();
                    log.record(
                        kind,
                        vec![i],
                        format!(
                            "{} DEBUG SLEEPs, {} ms in all",
                            bursts.len(),
                            total.as_millis()
                        ),
                    );
                    for (sleep, gap) in bursts {
                        let cmd = redis::cmd("DEBUG")
                            .arg("SLEEP")
                            .arg(format!("{:.3}", sleep.as_secs_f64()))
                            .to_owned();
                        cluster::command(&url, &cmd, sleep + Duration::from_secs(5)).await?;
                        tokio::time::sleep(gap).await;
                    }
                    drop(claim);
                    Ok(())
                }))
            }
            Planned::Offset {
                candidates,
                unit,
                reset,
            } => {
                let i = calendar.book_one(&candidates, due, 0)?;
                let range = cluster.nodes[i].profile.offsets_ms.clone();
                let offset = if reset { 0 } else { offset_in(&range, unit) };
                Some(Box::pin(async move {
                    let claim = claim(&cluster, i).await?;
                    starts.note(draw, kind, due);
                    lock_debug(&cluster.nodes[i].url, "WALLCLOCK-OFFSET", offset).await?;
                    cluster.nodes[i].offset_ms.store(offset, Ordering::Relaxed);
                    log.record(kind, vec![i], format!("offset {offset:+} ms"));
                    drop(claim);
                    Ok(())
                }))
            }
            Planned::Skew {
                candidates,
                skews,
                duration,
            } => {
                let nodes = calendar.book_many(&candidates, skews.len(), due, ms_of(duration))?;
                let resets = self.skew_resets.clone();
                Some(Box::pin(async move {
                    let mut claims = Vec::new();
                    for &i in &nodes {
                        claims.push(claim(&cluster, i).await?);
                    }
                    starts.note(draw, kind, due);
                    let urls: Vec<String> = nodes
                        .iter()
                        .map(|&i| cluster.nodes[i].url.clone())
                        .collect();
                    let skewed = skew_lease_clocks(&urls, &skews, duration, |skewed| {
                        let details: Vec<String> = nodes
                            .iter()
                            .zip(skewed)
                            .map(|(i, (rate, jump))| format!("node {i} {rate:+} ppm, +{jump} ms"))
                            .collect();
                        log.record(
                            kind,
                            nodes.clone(),
                            format!("{} for {} ms", details.join(", "), duration.as_millis()),
                        );
                    })
                    .await;
                    drop(claims);
                    skewed.map_err(|(error, reset, reset_failed)| {
                        resets.0.fetch_add(reset, Ordering::Relaxed);
                        resets.1.fetch_add(reset_failed, Ordering::Relaxed);
                        error
                    })
                }))
            }
            Planned::Network {
                shapes,
                duration,
                detail,
            } => {
                let lab = cluster.lab.clone()?;
                let mut links: Vec<(usize, usize)> =
                    shapes.iter().map(|(g, n, _, _)| (*g, *n)).collect();
                links.sort_unstable();
                links.dedup();
                let slots: Vec<usize> = links
                    .iter()
                    .map(|&(g, n)| g * cluster.nodes.len() + n)
                    .collect();
                if !calendar.book_links(&slots, due, ms_of(duration)) {
                    return None;
                }
                let mut nodes: Vec<usize> = links.iter().map(|(_, n)| *n).collect();
                nodes.sort_unstable();
                nodes.dedup();
                Some(Box::pin(async move {
                    let mut claims = Vec::new();
                    for &(g, n) in &links {
                        claims.push(claim_link(&cluster, g, n).await?);
                    }
                    starts.note(draw, kind, due);
                    let shaped = shapes.clone();
                    let on = lab.clone();
                    let shaping = tokio::task::spawn_blocking(move || {
                        shaped
                            .iter()
                            .try_for_each(|(g, n, way, shape)| on.shape(*g, *n, *way, shape))
                    })
                    .await
                    .unwrap_or_else(|e| Err(Error::Fault(format!("tc failed: {e}"))));
                    if shaping.is_ok() {
                        log.record(
                            kind,
                            nodes,
                            format!("{detail} for {} ms", duration.as_millis()),
                        );
                        tokio::time::sleep(duration).await;
                    }
                    // Healed whatever happened, every way of every link.
                    let healing = tokio::task::spawn_blocking(move || {
                        let mut first = Ok(());
                        for (g, n, way, _) in &shapes {
                            let healed = lab.heal(*g, *n, *way);
                            if first.is_ok() {
                                first = healed;
                            }
                        }
                        first
                    })
                    .await
                    .unwrap_or_else(|e| Err(Error::Fault(format!("tc failed: {e}"))));
                    drop(claims);
                    shaping.and(healing)
                }))
            }
            Planned::Pause => {
                starts.note(draw, kind, due);
                self.pause_requests.fetch_add(1, Ordering::Relaxed);
                log.record(
                    kind,
                    Vec::new(),
                    "the next holder sleeps past its validity".into(),
                );
                Some(Box::pin(async { Ok(()) }))
            }
        }
    }
}

/// A fault's booking of its nodes beyond its own planned length (its
/// commands, connections, a restart's process start), ms.
const BOOKING_SLACK_MS: u64 = 300;

/// What a restart is booked for besides its downtime: the process start
/// and the module's load (an AOF replay included), ms.
const RESTART_BOOKING_MS: u64 = 700;

/// How long a fault waits for a node or link still held by an earlier
/// fault that overran its booking before it fails.
const CLAIM_WAIT: Duration = Duration::from_secs(30);

fn ms_of(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// When each node, and each (client group, node) link, is free again by
/// the schedule: ms after the injector began. Whether a fault starts or is
/// skipped (its nodes busy) is decided here, from the schedule alone (each
/// fault books its nodes from its moment for its planned length and some
/// slack), not from whether the fault before it has happened to finish
/// yet: so two runs of one seed start and skip the same faults, whatever
/// their timing ([`same_faults_started`]). The fault then claims its nodes
/// for real, waiting for one that overran its booking.
pub struct Calendar {
    nodes: Vec<u64>,
    links: Vec<u64>,
}

impl Calendar {
    pub fn new(nodes: usize, links: usize) -> Calendar {
        Calendar {
            nodes: vec![0; nodes],
            links: vec![0; links],
        }
    }

    fn book(until: &mut u64, due: u64, length: u64) {
        *until = due.saturating_add(length).saturating_add(BOOKING_SLACK_MS);
    }

    /// The first of `candidates` free at `due`, booked for `length` ms.
    fn book_one(&mut self, candidates: &[usize], due: u64, length: u64) -> Option<usize> {
        self.book_many(candidates, 1, due, length)?.first().copied()
    }

    /// The first `count` of `candidates` free at `due`, booked for
    /// `length` ms; `None` (nothing booked) if fewer are free.
    fn book_many(
        &mut self,
        candidates: &[usize],
        count: usize,
        due: u64,
        length: u64,
    ) -> Option<Vec<usize>> {
        let free: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&i| self.nodes.get(i).is_some_and(|&until| until <= due))
            .take(count)
            .collect();
        if free.len() < count {
            return None;
        }
        for &i in &free {
            if let Some(until) = self.nodes.get_mut(i) {
                Calendar::book(until, due, length);
            }
        }
        Some(free)
    }

    /// Books every link of `slots` if all are free at `due`.
    fn book_links(&mut self, slots: &[usize], due: u64, length: u64) -> bool {
        let free = slots
            .iter()
            .all(|&i| self.links.get(i).is_some_and(|&until| until <= due));
        if free {
            for &i in slots {
                if let Some(until) = self.links.get_mut(i) {
                    Calendar::book(until, due, length);
                }
            }
        }
        free
    }
}

/// The faults that started, each noted when it had claimed its nodes (the
/// moment it began to act).
pub struct Starts {
    origin: tokio::time::Instant,
    list: Mutex<Vec<StartedFault>>,
}

impl Starts {
    fn note(&self, draw: usize, kind: FaultKind, due_ms: u64) {
        let at_ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.list
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(StartedFault {
                draw,
                kind,
                due_ms,
                at_ms,
            });
    }
}

/// Node `i`, claimed for a fault (see [`Calendar`]).
async fn claim(cluster: &Cluster, i: usize) -> Result<Claimed, Error> {
    let node = cluster
        .nodes
        .get(i)
        .ok_or_else(|| Error::Fault(format!("no node {i}")))?;
    tokio::time::timeout(CLAIM_WAIT, node.claim())
        .await
        .map_err(|_| {
            Error::Fault(format!(
                "node {i} still busy after {} s",
                CLAIM_WAIT.as_secs()
            ))
        })
}

/// The link of client group `g` to node `n`, claimed for a network fault.
async fn claim_link(cluster: &Cluster, g: usize, n: usize) -> Result<ClaimedLink, Error> {
    let link = cluster
        .claim_link(g, n)
        .ok_or_else(|| Error::Fault(format!("no link from group {g} to node {n}")))?;
    tokio::time::timeout(CLAIM_WAIT, link).await.map_err(|_| {
        Error::Fault(format!(
            "the link from group {g} to node {n} still busy after {} s",
            CLAIM_WAIT.as_secs()
        ))
    })
}

/// A lease-clock skew: each node of `urls` gets its rate and jump
/// (`skews`, in order), `started` is told once every node has it, and
/// after `duration` every rate is set back to 0. If a `LOCK.DEBUG` fails
/// on the way (a node that does not answer), every node's rate is set back
/// to 0 at once, best effort, so that no node is left skewed past its
/// fault: the error, with how many nodes were set back and how many of
/// those resets failed too.
pub async fn skew_lease_clocks(
    urls: &[String],
    skews: &[(i64, u64)],
    duration: Duration,
    started: impl FnOnce(&[(i64, u64)]),
) -> Result<(), (Error, u64, u64)> {
    let skewed = async {
        for (url, (rate, jump)) in urls.iter().zip(skews) {
            lock_debug(url, "MONOTONIC-RATE", rate).await?;
            lock_debug(url, "MONOTONIC-JUMP", jump).await?;
        }
        started(skews);
        tokio::time::sleep(duration).await;
        for url in urls {
            lock_debug(url, "MONOTONIC-RATE", 0).await?;
        }
        Ok::<(), Error>(())
    };
    let Err(error) = skewed.await else {
        return Ok(());
    };
    let (mut reset, mut failed) = (0, 0);
    for url in urls {
        match lock_debug(url, "MONOTONIC-RATE", 0).await {
            Ok(()) => reset += 1,
            Err(_) => failed += 1,
        }
    }
    Err((error, reset, failed))
}

/// How long a clock-lead restart waits, at most, for a holder's token
/// issued with the lead before it kills the nodes anyway (a node in its
/// recovery window grants nothing).
pub const LEAD_WAIT: Duration = Duration::from_millis(700);

/// The wall clock, µs since the epoch (what a node's token floor reads,
/// without its offset).
fn wall_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A clock-lead restart's first half: every node of `nodes` gets its wall
/// clock set to the top of its offset range (ahead), then this waits until
/// a holder has a token issued with that lead in it (above the wall clock
/// by half the lead; tokens are the granting nodes' wall clocks in µs), or
/// [`LEAD_WAIT`] has passed. Killed right after, the nodes come back with
/// their counters at their own clocks, below that token by about the
/// lead: the recovery window covers it or the next holders' tokens are
/// lower. What it saw, for the fault's detail.
async fn lead_clocks(
    cluster: &Cluster,
    nodes: &[usize],
    checker: &Checker,
) -> Result<String, Error> {
    let mut least = i64::MAX;
    for &i in nodes {
        let node = &cluster.nodes[i];
        let lead = *node.profile.offsets_ms.end();
        lock_debug(&node.url, "WALLCLOCK-OFFSET", lead).await?;
        node.offset_ms.store(lead, Ordering::Relaxed);
        least = least.min(lead);
    }
    let half_lead_us = u64::try_from(least.max(0)).unwrap_or(0).saturating_mul(500);
    // Above every token before (an earlier restart's led ones) too.
    let floor = wall_us()
        .saturating_add(half_lead_us)
        .max(checker.highest_token().saturating_add(1));
    let set = Instant::now();
    loop {
        if checker.highest_token() >= floor {
            return Ok(format!(
                "clocks set {least:+} ms, a holder's token had the lead {} ms later",
                set.elapsed().as_millis()
            ));
        }
        if set.elapsed() >= LEAD_WAIT {
            return Ok(format!(
                "clocks set {least:+} ms, no holder's token had the lead within {} ms",
                LEAD_WAIT.as_millis()
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// After node `i` restarted: its wall-clock offset is 0 again, unless its
/// clock always runs behind (an offset range below 0, the clock-step mix),
/// in which case it is set back again at once, `unit` of the way into its
/// range: a clock that a restart syncs and that falls behind again.
async fn restarted(cluster: &Cluster, i: usize, unit: f64) -> Result<(), Error> {
    let node = &cluster.nodes[i];
    node.offset_ms.store(0, Ordering::Relaxed);
    let range = node.profile.offsets_ms.clone();
    if *range.end() >= 0 {
        return Ok(());
    }
    let offset = offset_in(&range, unit);
    lock_debug(&node.url, "WALLCLOCK-OFFSET", offset).await?;
    node.offset_ms.store(offset, Ordering::Relaxed);
    Ok(())
}

/// The offset `unit` (0..=1) of the way into `range`, ms.
fn offset_in(range: &std::ops::RangeInclusive<i64>, unit: f64) -> i64 {
    let span = range.end().saturating_sub(*range.start()) as f64;
    range.start() + (span * unit).round() as i64
}

/// `LOCK.DEBUG sub value` on the node at `url` (its debug knobs: clock
/// offsets, lease-clock rate and jumps).
async fn lock_debug(url: &str, sub: &str, value: impl redis::ToRedisArgs) -> Result<(), Error> {
    let cmd = redis::cmd("LOCK.DEBUG").arg(sub).arg(value).to_owned();
    cluster::command(url, &cmd, Duration::from_secs(5)).await?;
    Ok(())
}

fn note_done(
    counts: &mut FaultCounts,
    done: Result<(FaultKind, Result<(), Error>), tokio::task::JoinError>,
) {
    let failure = match done {
        Ok((_, Ok(()))) => return,
        Ok((kind, Err(error))) => {
            *counts.failed.entry(kind).or_default() += 1;
            error.to_string()
        }
        Err(join) => join.to_string(),
    };
    if counts.first_failure.is_none() {
        counts.first_failure = Some(failure);
    }
}

/// The file written now: the last `type i` (incremental) file of an AOF
/// manifest. Its lines are `file NAME` followed by key-value pairs: `seq N
/// type i|b|h` on Redis 7.0 and Valkey, and `startoffset N` (`endoffset N`)
/// as well on Redis 7.4+.
fn newest_incremental_aof(manifest: &str) -> Option<String> {
    manifest.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (["file", name], pairs) = (fields.get(..2)?, fields.get(2..)?) else {
            return None;
        };
        let incremental = pairs.chunks(2).any(|pair| matches!(pair, ["type", "i"]));
        incremental.then(|| (*name).to_string())
    })
}

/// Cuts up to `bytes` off the newest incremental AOF file (what an
/// `everysec` node loses in a power cut: writes not yet fsynced). Redis
/// loads the truncated file (`aof-load-truncated yes`, the default).
/// Returns how many bytes were cut.
fn cut_aof_tail(dir: &Path, bytes: u64) -> Result<u64, Error> {
    let aof_dir = dir.join("appendonlydir");
    let manifest = std::fs::read_dir(&aof_dir)
        .map_err(|e| Error::Fault(format!("{}: {e}", aof_dir.display())))?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "manifest"))
        .ok_or_else(|| Error::Fault(format!("no AOF manifest in {}", aof_dir.display())))?;
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| Error::Fault(format!("{}: {e}", manifest.display())))?;
    let Some(name) = newest_incremental_aof(&text) else {
        return Err(Error::Fault(format!(
            "no incremental AOF file in {}:\n{text}",
            manifest.display()
        )));
    };
    let path = aof_dir.join(name);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| Error::Fault(format!("{}: {e}", path.display())))?;
    let len = file
        .metadata()
        .map_err(|e| Error::Fault(format!("{}: {e}", path.display())))?
        .len();
    let cut = bytes.min(len);
    file.set_len(len - cut)
        .map_err(|e| Error::Fault(format!("{}: {e}", path.display())))?;
    Ok(cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Faults started as `(draw, kind, due, began)` (ms).
    fn started(list: &[(usize, FaultKind, u64, u64)], reached: usize) -> FaultCounts {
        FaultCounts {
            started: list
                .iter()
                .map(|&(draw, kind, due_ms, at_ms)| StartedFault {
                    draw,
                    kind,
                    due_ms,
                    at_ms,
                })
                .collect(),
            reached,
            ..FaultCounts::default()
        }
    }

    #[test]
    fn two_runs_started_the_same_faults_only_if_none_was_dropped() {
        use FaultKind::{ClockOffset, Kill9Restart, RestartMajority};
        let run = [
            (0, RestartMajority, 700, 702),
            (1, Kill9Restart, 1_500, 1_501),
            (2, ClockOffset, 2_300, 2_300),
            (3, Kill9Restart, 3_000, 3_004),
        ];
        let a = started(&run, 4);
        // The same faults, begun a few ms apart.
        let later: Vec<_> = run
            .iter()
            .map(|&(d, k, due, t)| (d, k, due, t + 40))
            .collect();
        assert_eq!(
            same_faults_started(&a, &started(&later, 4), SAME_START_MS),
            Ok(4)
        );
        // Begun 617 ms late (a claim that waited for an overrun restart,
        // a late timer on a loaded machine): the same fault.
        let mut late = run.to_vec();
        late[3].3 += 617;
        assert_eq!(
            same_faults_started(&a, &started(&late, 4), SAME_START_MS),
            Ok(4)
        );
        // ...but not seconds late.
        late[3].3 += SAME_START_MS;
        assert!(same_faults_started(&a, &started(&late, 4), SAME_START_MS).is_err());
        // A run that reached one draw more (it ran a little longer) is
        // compared over the draws both reached.
        let mut longer = run.to_vec();
        longer.push((4, ClockOffset, 3_600, 3_600));
        assert_eq!(
            same_faults_started(&a, &started(&longer, 5), SAME_START_MS),
            Ok(4)
        );
        // A fault dropped, in the middle or at the end of what both reached
        // (skipped, or never started): a difference, whichever it was.
        for dropped in 0..run.len() {
            let mut fewer = run.to_vec();
            fewer.remove(dropped);
            assert!(
                same_faults_started(&a, &started(&fewer, 4), SAME_START_MS).is_err(),
                "fault {dropped} dropped"
            );
            assert!(same_faults_started(&started(&fewer, 4), &a, SAME_START_MS).is_err());
        }
        // Started for another moment of the schedule (a prelude fault
        // retried, half an interval later), however close it began, or as
        // another kind.
        let mut moved = run.to_vec();
        moved[2].2 += 150;
        assert!(same_faults_started(&a, &started(&moved, 4), SAME_START_MS).is_err());
        let mut other = run.to_vec();
        other[1].1 = ClockOffset;
        assert!(same_faults_started(&a, &started(&other, 4), SAME_START_MS).is_err());
    }

    #[test]
    fn the_calendar_starts_or_skips_by_the_schedule_alone() {
        let mut calendar = Calendar::new(3, 0);
        // Node 1 booked from 100 ms for 500 ms (and the slack).
        assert_eq!(calendar.book_one(&[1, 0], 100, 500), Some(1));
        let free_again = 100 + 500 + BOOKING_SLACK_MS;
        // Busy until then, whatever has happened meanwhile: the next
        // candidate, or nothing.
        assert_eq!(calendar.book_one(&[1, 0], 200, 0), Some(0));
        assert_eq!(calendar.book_one(&[1], free_again - 1, 0), None);
        assert_eq!(calendar.book_one(&[1], free_again, 0), Some(1));
        // A majority needs every one of its nodes free, or books none.
        let mut calendar = Calendar::new(3, 0);
        assert_eq!(calendar.book_one(&[2], 0, 1_000), Some(2));
        assert_eq!(calendar.book_many(&[0, 1, 2], 3, 10, 0), None);
        assert_eq!(calendar.book_many(&[0, 1], 2, 10, 0), Some(vec![0, 1]));
        // Links likewise.
        let mut calendar = Calendar::new(2, 4);
        assert!(calendar.book_links(&[0, 3], 0, 100));
        assert!(!calendar.book_links(&[1, 3], 50, 100));
        assert!(calendar.book_links(&[1, 2], 50, 100));
    }

    #[test]
    fn a_skew_that_fails_partway_sets_every_rate_back() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // The first node takes its skew; the second has no module, so its
        // LOCK.DEBUG fails: the first must not be left running fast.
        let skewed = testkit::RedisServer::start();
        let broken =
            testkit::RedisServer::start_with(testkit::ServerOptions::default().without_module());
        let rate = |server: &testkit::RedisServer| -> i64 {
            redis::cmd("LOCK.DEBUG")
                .arg("MONOTONIC-RATE")
                .query(&mut server.conn())
                .unwrap_or(i64::MIN)
        };
        let urls = [skewed.url(), broken.url()];
        let mut told = false;
        let result = runtime.block_on(skew_lease_clocks(
            &urls,
            &[(8_000, 0), (-8_000, 0)],
            Duration::from_secs(60),
            |_| told = true,
        ));
        let Err((error, reset, failed)) = result else {
            panic!("the second node cannot be skewed")
        };
        assert!(matches!(error, Error::Fault(_)), "{error}");
        assert!(!told, "the skew was never in force on every node");
        assert_eq!(rate(&skewed), 0, "the first node's rate was left set");
        assert_eq!((reset, failed), (1, 1));
        // A skew that goes through sets every rate back at its end.
        let both = testkit::RedisServer::start();
        let urls = [skewed.url(), both.url()];
        let result = runtime.block_on(skew_lease_clocks(
            &urls,
            &[(8_000, 1), (-8_000, 0)],
            Duration::from_millis(20),
            |_| told = true,
        ));
        assert!(result.is_ok() && told);
        assert_eq!((rate(&skewed), rate(&both)), (0, 0));
    }

    #[test]
    fn the_newest_incremental_aof_is_found_in_every_manifest_format() {
        let redis7 = "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n";
        assert_eq!(
            newest_incremental_aof(redis7).as_deref(),
            Some("appendonly.aof.1.incr.aof")
        );
        // Redis 7.4+ adds offsets (Redis 8.6.3's own manifest).
        let redis8 = "file appendonly.aof.1.base.rdb seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i startoffset 0\nfile appendonly.aof.2.incr.aof seq 2 type i startoffset 1843 endoffset 2000\n";
        assert_eq!(
            newest_incremental_aof(redis8).as_deref(),
            Some("appendonly.aof.2.incr.aof")
        );
        assert_eq!(newest_incremental_aof("file a.rdb seq 1 type b\n"), None);
        assert_eq!(newest_incremental_aof(""), None);
    }
}
