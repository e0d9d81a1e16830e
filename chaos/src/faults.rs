//! The fault injector: at random intervals it picks a fault kind by the
//! phase's weights (every allowed kind once first, in random order, so that
//! even a short run injects each), draws its parameters from the seeded
//! random generator, claims the node(s) and runs the fault in a task of its
//! own, so faults overlap (a node can be stopped while another restarts).
//! A fault whose nodes are all busy with other faults is skipped.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use tokio::task::JoinSet;

use crate::checker::ms_since;
use crate::cluster::{self, Claimed, Cluster};
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
    /// Not started: every eligible node was busy with another fault.
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
    }
}

/// The injector of one phase.
pub struct Injector {
    pub cluster: Arc<Cluster>,
    pub phase: Phase,
    pub seed: u64,
    pub log: Arc<FaultLog>,
    pub pause_requests: Arc<AtomicU64>,
    pub stop: Arc<AtomicBool>,
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
        let mut retry: Option<(FaultKind, Planned)> = None;
        loop {
            let (wait, kind, planned, prelude_kind) = match retry.take() {
                Some((kind, planned)) => (mean / 2, kind, planned, true),
                None => {
                    let wait = rng.random_range(mean / 2..=mean * 3 / 2);
                    let prelude_kind = !prelude.is_empty();
                    let kind = match prelude.pop() {
                        Some(kind) => kind,
                        None => self.pick_kind(&mut rng),
                    };
                    let planned = self.plan(kind, &mut rng);
                    counts
                        .drawn
                        .push(format!("after {wait} ms: {kind:?} {planned:?}"));
                    (wait, kind, planned, prelude_kind)
                }
            };
            tokio::time::sleep(Duration::from_millis(wait)).await;
            while let Some(done) = running.try_join_next() {
                note_done(&mut counts, done);
            }
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            let again = prelude_kind.then(|| planned.clone());
            match self.start(kind, planned) {
                Some(fault) => {
                    *counts.injected.entry(kind).or_default() += 1;
                    running.spawn(async move { (kind, fault.await) });
                }
                None => {
                    *counts.skipped.entry(kind).or_default() += 1;
                    // Every kind must happen once: try it again next.
                    retry = again.map(|planned| (kind, planned));
                }
            }
        }
        while let Some(done) = running.join_next().await {
            note_done(&mut counts, done);
        }
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
                let count = (quorum + usize::from(rng.random_bool(0.5))).min(all.len());
                Planned::Majority {
                    candidates: all,
                    downtime: ms(rng, 0, 300),
                    count,
                    cut_bytes: rng.random_range(1..=16_384),
                    reoffset: rng.random_range(0.0..=1.0),
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
                    duration: ms(rng, 500, 3_000),
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

    /// Claims the nodes and returns the fault's future, or `None` when its
    /// nodes are busy.
    fn start(&self, kind: FaultKind, planned: Planned) -> Option<FaultFuture> {
        let cluster = self.cluster.clone();
        let log = self.log.clone();
        let claim_one = |candidates: &[usize]| {
            candidates
                .iter()
                .find_map(|&i| cluster.nodes[i].try_claim().map(|c| (i, c)))
        };
        // `count` of the candidates, or none if fewer are free.
        let claim_many = |candidates: &[usize], count: usize| {
            let claims: Vec<(usize, Claimed)> = candidates
                .iter()
                .filter_map(|&i| cluster.nodes[i].try_claim().map(|c| (i, c)))
                .take(count)
                .collect();
            (claims.len() == count).then_some(claims)
        };
        match planned {
            Planned::Kill9 {
                candidates,
                downtime,
                cut_bytes,
                reoffset,
            } => {
                let (i, claim) = claim_one(&candidates)?;
                Some(Box::pin(async move {
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
            } => {
                // A power loss of a majority: the nodes a restart hurts
                // first (in the drawn order: they can forget, or their
                // clocks run behind now), so that those are a majority
                // whenever the phase has that many.
                let mut candidates = candidates;
                candidates.sort_by_key(|&i| !cluster.nodes[i].restart_hurts());
                let claims = claim_many(&candidates, count)?;
                Some(Box::pin(async move {
                    let nodes: Vec<usize> = claims.iter().map(|(i, _)| *i).collect();
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
                        format!("down {} ms{cut}", downtime.as_millis()),
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
                let (i, claim) = claim_one(&candidates)?;
                Some(Box::pin(async move {
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
                let (i, claim) = claim_one(&candidates)?;
                Some(Box::pin(async move {
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
                let (i, mut claim) = claim_one(&candidates)?;
                Some(Box::pin(async move {
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
                let (i, claim) = claim_one(&candidates)?;
                Some(Box::pin(async move {
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
                let (i, claim) = claim_one(&candidates)?;
                let range = cluster.nodes[i].profile.offsets_ms.clone();
                let offset = if reset { 0 } else { offset_in(&range, unit) };
                Some(Box::pin(async move {
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
                let claims = claim_many(&candidates, skews.len())?;
                Some(Box::pin(async move {
                    let mut details = Vec::new();
                    for ((i, _), (rate, jump)) in claims.iter().zip(&skews) {
                        let url = &cluster.nodes[*i].url;
                        lock_debug(url, "MONOTONIC-RATE", rate).await?;
                        lock_debug(url, "MONOTONIC-JUMP", jump).await?;
                        details.push(format!("node {i} {rate:+} ppm, +{jump} ms"));
                    }
                    let nodes = claims.iter().map(|(i, _)| *i).collect();
                    log.record(
                        kind,
                        nodes,
                        format!("{} for {} ms", details.join(", "), duration.as_millis()),
                    );
                    tokio::time::sleep(duration).await;
                    for (i, _) in &claims {
                        lock_debug(&cluster.nodes[*i].url, "MONOTONIC-RATE", 0).await?;
                    }
                    drop(claims);
                    Ok(())
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
                let claims = links
                    .iter()
                    .map(|&(g, n)| cluster.try_claim_link(g, n))
                    .collect::<Option<Vec<_>>>()?;
                let mut nodes: Vec<usize> = links.iter().map(|(_, n)| *n).collect();
                nodes.sort_unstable();
                nodes.dedup();
                Some(Box::pin(async move {
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
