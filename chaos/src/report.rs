//! The summary of a run: per phase and in total, operations, grants, faults
//! by kind, fenced writes accepted and rejected, and violations.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::Ordering;

use crate::checker::{Findings, ViolationKind, WriteCounts};
use crate::exposure::Exposure;
use crate::faults::FaultCounts;
use crate::plan::{FaultKind, Mix, NodeProfile};
use crate::workload::ClientStats;

/// The client counters of a phase, as plain numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientFigures {
    pub acquire_calls: u64,
    pub grants: u64,
    pub not_acquired: u64,
    pub fence_calls: u64,
    pub tokens: u64,
    pub tokens_lost: u64,
    pub release_calls: u64,
    pub releases_lapsed: u64,
    pub pauses: u64,
    pub shared_grants: u64,
    pub permit_grants: u64,
    pub other_errors: u64,
    pub node_unavailable: u64,
    pub panicked: u64,
    pub first_error: Option<String>,
    /// Holds that extended, re-entered, ran a watchdog; cancellations.
    pub styles: crate::workload::StyleFigures,
}

impl ClientFigures {
    pub fn of(stats: &ClientStats) -> ClientFigures {
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        ClientFigures {
            acquire_calls: get(&stats.acquire_calls),
            grants: get(&stats.grants),
            not_acquired: get(&stats.not_acquired),
            fence_calls: get(&stats.fence_calls),
            tokens: get(&stats.tokens),
            tokens_lost: get(&stats.tokens_lost),
            release_calls: get(&stats.release_calls),
            releases_lapsed: get(&stats.releases_lapsed),
            pauses: get(&stats.pauses),
            shared_grants: get(&stats.shared_grants),
            permit_grants: get(&stats.permit_grants),
            other_errors: get(&stats.other_errors),
            node_unavailable: get(&stats.node_unavailable),
            panicked: get(&stats.panicked),
            first_error: stats.first_error(),
            styles: stats.styles.figures(),
        }
    }

    /// Client calls: acquire, fencing_token, release.
    pub fn operations(&self) -> u64 {
        self.acquire_calls + self.fence_calls + self.release_calls
    }

    fn add(&mut self, other: &ClientFigures) {
        self.acquire_calls += other.acquire_calls;
        self.grants += other.grants;
        self.not_acquired += other.not_acquired;
        self.fence_calls += other.fence_calls;
        self.tokens += other.tokens;
        self.tokens_lost += other.tokens_lost;
        self.release_calls += other.release_calls;
        self.releases_lapsed += other.releases_lapsed;
        self.pauses += other.pauses;
        self.shared_grants += other.shared_grants;
        self.permit_grants += other.permit_grants;
        self.other_errors += other.other_errors;
        self.node_unavailable += other.node_unavailable;
        self.panicked += other.panicked;
        self.styles.add(&other.styles);
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
    }
}

/// One phase's results.
#[derive(Clone, Debug)]
pub struct PhaseSummary {
    pub name: String,
    pub nodes: Vec<NodeProfile>,
    pub ttl_ms: (u64, u64),
    pub seconds: f64,
    pub clients: ClientFigures,
    pub faults: FaultCounts,
    pub findings: Findings,
    /// A few violations, described with the faults around them.
    pub examples: Vec<String>,
    /// The network phase: its client namespaces, and the IP packets its
    /// wires carried and dropped.
    pub network: Option<NetworkFigures>,
    /// The validity windows the faults threatened.
    pub exposure: Exposure,
    /// A single-node phase: grants made by the node's server-side queue
    /// (`LOCK.ACQUIRE … WAIT`) since its last restart.
    pub server_wait_grants: Option<u64>,
}

/// What the network lab of a phase did.
#[derive(Clone, Copy, Debug, Default)]
pub struct NetworkFigures {
    pub client_groups: usize,
    pub packets_carried: u64,
    pub packets_dropped: u64,
}

/// Figures added up over phases.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub seconds: f64,
    pub clients: ClientFigures,
    pub faults: FaultCounts,
    pub writes: WriteCounts,
    pub violations: BTreeMap<ViolationKind, usize>,
    /// Of `violations`: between a reader and a writer.
    pub reader_writer: usize,
    pub exposure: Exposure,
}

impl Figures {
    pub fn violations(&self) -> usize {
        self.violations.values().sum()
    }

    pub fn violations_of(&self, kind: ViolationKind) -> usize {
        self.violations.get(&kind).copied().unwrap_or(0)
    }

    fn add_phase(&mut self, phase: &PhaseSummary) {
        self.seconds += phase.seconds;
        self.clients.add(&phase.clients);
        self.faults.add(&phase.faults);
        self.writes.add(&phase.findings.writes);
        for kind in ViolationKind::ALL {
            *self.violations.entry(kind).or_default() += phase.findings.count(kind);
        }
        self.reader_writer += phase.findings.reader_writer();
        self.exposure.add(&phase.exposure);
    }
}

impl PhaseSummary {
    pub fn figures(&self) -> Figures {
        let mut figures = Figures::default();
        figures.add_phase(self);
        figures
    }
}

/// A whole run.
#[derive(Clone, Debug)]
pub struct Summary {
    pub seed: u64,
    pub mix: Mix,
    pub clients: usize,
    /// What the clients contend for.
    pub resources: String,
    pub phases: Vec<PhaseSummary>,
    /// Stopped early (Ctrl-C).
    pub interrupted: bool,
}

impl Summary {
    pub fn total(&self) -> Figures {
        let mut figures = Figures::default();
        for phase in &self.phases {
            figures.add_phase(phase);
        }
        figures
    }

    /// The safe run passes with no violation; a mix that breaks the rules
    /// (the negative control) passes when it found some. Either way a run
    /// whose clients hit unexpected errors or panicked, or whose faults
    /// failed, proves nothing and does not pass.
    pub fn passed(&self) -> bool {
        let total = self.total();
        let violations = total.violations();
        let found = if self.mix.expects_violations() {
            violations > 0
        } else {
            violations == 0
        };
        found && self.troubles(&total).is_empty()
    }

    /// What makes the run's verdict worthless, if anything.
    pub fn troubles(&self, total: &Figures) -> Vec<String> {
        let mut troubles = Vec::new();
        if total.clients.other_errors > 0 {
            troubles.push(format!(
                "{} unexpected client errors",
                total.clients.other_errors
            ));
        }
        if total.clients.panicked > 0 {
            troubles.push(format!("{} client tasks panicked", total.clients.panicked));
        }
        let failed: u64 = total.faults.failed.values().sum();
        if failed > 0 {
            troubles.push(format!("{failed} faults failed"));
        }
        troubles
    }
}

fn write_figures(f: &mut fmt::Formatter<'_>, figures: &Figures) -> fmt::Result {
    let c = &figures.clients;
    writeln!(
        f,
        "  operations  {} (acquire {}, fencing_token {}, release {})",
        c.operations(),
        c.acquire_calls,
        c.fence_calls,
        c.release_calls
    )?;
    writeln!(
        f,
        "  grants      {} (not acquired {}; tokens lost {}; lapsed releases {}; other errors {})",
        c.grants, c.not_acquired, c.tokens_lost, c.releases_lapsed, c.other_errors
    )?;
    if c.node_unavailable > 0 {
        writeln!(
            f,
            "              (a single node down or stopped: {} calls failed with its connection error, as they must)",
            c.node_unavailable
        )?;
    }
    if c.panicked > 0 {
        writeln!(f, "  PANICKED    {} client tasks", c.panicked)?;
    }
    writeln!(
        f,
        "  kinds       exclusive {}, shared (readers) {}, semaphore permits {}",
        c.grants - c.shared_grants - c.permit_grants,
        c.shared_grants,
        c.permit_grants
    )?;
    writeln!(f, "  holds       {}", c.styles)?;
    let faults = &figures.faults;
    let by_kind: Vec<String> = FaultKind::ALL
        .iter()
        .filter(|k| faults.injected.contains_key(k))
        .map(|k| {
            let n = faults.injected(*k);
            match *k {
                FaultKind::ClientPause => format!("{} {n} ({} performed)", k.name(), c.pauses),
                _ => format!("{} {n}", k.name()),
            }
        })
        .collect();
    writeln!(
        f,
        "  faults      {}: {}",
        faults.total_injected(),
        by_kind.join(", ")
    )?;
    let skipped: u64 = faults.skipped.values().sum();
    let failed: u64 = faults.failed.values().sum();
    if skipped > 0 || failed > 0 {
        writeln!(
            f,
            "              (skipped, nodes busy: {skipped}; failed: {failed})"
        )?;
    }
    let e = &figures.exposure;
    writeln!(
        f,
        "  exposure    {} of {} validity windows had a fault on a granting node inside them; {} lost their majority (fewer than a majority of the nodes left untouched among their granters)",
        e.threatened, e.windows, e.lost_majority
    )?;
    let w = &figures.writes;
    writeln!(
        f,
        "  store       reads {}, permit holds at work {}",
        w.reads, w.permits
    )?;
    writeln!(
        f,
        "  writes      accepted {} (after the window: {}), rejected {} (stale holders: {}, inside the window: {})",
        w.accepted,
        w.accepted_late,
        w.rejected(),
        w.rejected_stale,
        w.rejected_while_valid
    )?;
    let kinds: Vec<String> = ViolationKind::ALL
        .iter()
        .map(|k| format!("{} {}", k.name(), figures.violations_of(*k)))
        .collect();
    writeln!(
        f,
        "  VIOLATIONS  {} ({}; between a reader and a writer: {})",
        figures.violations(),
        kinds.join(", "),
        figures.reader_writer
    )
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total();
        writeln!(
            f,
            "chaos summary: seed {}, {:.0} s, {} clients, {}, {}{}",
            self.seed,
            total.seconds,
            self.clients,
            self.resources,
            match self.mix {
                Mix::Safe => "safe mix",
                Mix::NegativeControl => "NEGATIVE CONTROL (no persistence, no recovery window)",
                Mix::ClockStep =>
                    "UNSAFE MIX clock-step (AOF always, no recovery window, clocks stepped back)",
                Mix::NetworkControl =>
                    "NETWORK NEGATIVE CONTROL (a client quorum of 2 of 5, network faults only)",
                Mix::NoWindow =>
                    "UNSAFE MIX no-window (the safe mix's first phase with lock.recovery-ms 0)",
                Mix::FastClocks =>
                    "UNSAFE MIX fast-clocks (lease clocks beyond the client's drift allowance)",
            },
            if self.interrupted {
                ", interrupted"
            } else {
                ""
            }
        )?;
        for (i, phase) in self.phases.iter().enumerate() {
            writeln!(
                f,
                "phase {}/{} \"{}\": {:.1} s, TTL {}..{} ms",
                i + 1,
                self.phases.len(),
                phase.name,
                phase.seconds,
                phase.ttl_ms.0,
                phase.ttl_ms.1
            )?;
            for (n, node) in phase.nodes.iter().enumerate() {
                writeln!(f, "  node {n}: {node}")?;
            }
            if let Some(grants) = phase.server_wait_grants {
                writeln!(
                    f,
                    "  waiting     {grants} grants from the node's server-side queue (LOCK.ACQUIRE … WAIT) since its last restart"
                )?;
            }
            if let Some(network) = &phase.network {
                writeln!(
                    f,
                    "  network     every node in a namespace of its own, clients in {} namespaces; the links carried {} packets and dropped {}",
                    network.client_groups, network.packets_carried, network.packets_dropped
                )?;
            }
            write_figures(f, &phase.figures())?;
            if let Some(error) = &phase.clients.first_error {
                writeln!(f, "  first client error: {error}")?;
            }
            if let Some(failure) = &phase.faults.first_failure {
                writeln!(f, "  first fault failure: {failure}")?;
            }
            for example in &phase.examples {
                writeln!(f, "  {example}")?;
            }
        }
        if self.phases.len() > 1 {
            writeln!(f, "total:")?;
            write_figures(f, &total)?;
        }
        let violations = total.violations();
        let troubles = self.troubles(&total);
        if !troubles.is_empty() {
            return write!(
                f,
                "RESULT: FAIL, the run proves nothing: {} ({violations} violation(s))",
                troubles.join(", ")
            );
        }
        match (self.mix.expects_violations(), self.passed()) {
            (false, true) => write!(f, "RESULT: PASS, no violations"),
            (false, false) => write!(f, "RESULT: FAIL, {violations} violation(s)"),
            (true, true) => write!(
                f,
                "RESULT: the {} mix breaks the rules and {violations} violation(s) were detected, as they must be",
                self.mix.name()
            ),
            (true, false) => write!(
                f,
                "RESULT: FAIL, the {} mix breaks the rules but no violation was detected",
                self.mix.name()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(mix: Mix, clients: ClientFigures, violations: usize) -> Summary {
        let mut findings = Findings::default();
        let holder = crate::checker::Holder {
            resource: "r".into(),
            client: 0,
            acquire_started: std::time::Instant::now(),
            window_start: std::time::Instant::now(),
            window_end: std::time::Instant::now(),
            token: None,
            granted_by: Vec::new(),
            kind: crate::checker::HoldKind::Exclusive,
        };
        for _ in 0..violations {
            findings.violations.push(crate::checker::Violation {
                kind: ViolationKind::Overlap,
                earlier: holder.clone(),
                later: holder.clone(),
                at: None,
            });
        }
        Summary {
            seed: 1,
            mix,
            clients: 1,
            resources: String::new(),
            phases: vec![PhaseSummary {
                name: "p".into(),
                nodes: Vec::new(),
                ttl_ms: (1, 2),
                seconds: 1.0,
                clients,
                faults: FaultCounts::default(),
                findings,
                examples: Vec::new(),
                network: None,
                exposure: Exposure::default(),
                server_wait_grants: None,
            }],
            interrupted: false,
        }
    }

    #[test]
    fn errors_or_panics_make_any_verdict_a_failure() {
        assert!(summary(Mix::Safe, ClientFigures::default(), 0).passed());
        assert!(!summary(Mix::Safe, ClientFigures::default(), 1).passed());
        assert!(summary(Mix::NegativeControl, ClientFigures::default(), 1).passed());
        let errors = ClientFigures {
            other_errors: 1,
            ..ClientFigures::default()
        };
        assert!(!summary(Mix::Safe, errors.clone(), 0).passed());
        assert!(!summary(Mix::NegativeControl, errors, 3).passed());
        let panicked = ClientFigures {
            panicked: 1,
            ..ClientFigures::default()
        };
        let run = summary(Mix::Safe, panicked, 0);
        assert!(!run.passed());
        assert!(run
            .to_string()
            .contains("proves nothing: 1 client tasks panicked"));
    }
}
