//! The summary of a run: per phase and in total, operations, grants, faults
//! by kind, fenced writes accepted and rejected, and violations.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::Ordering;

use crate::checker::{Findings, ViolationKind, WriteCounts};
use crate::exposure::Exposure;
use crate::faults::FaultCounts;
use crate::node_errors::NodeErrorFigures;
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
    /// Every node error the clients met, in every round.
    pub node_errors: NodeErrorFigures,
    /// A node that died without a fault; a panic, assertion or crash line
    /// in a server's log.
    pub server_troubles: Vec<String>,
    /// The fault kinds the phase's plan injects.
    pub fault_kinds: Vec<FaultKind>,
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
    pub node_errors: NodeErrorFigures,
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
        self.node_errors.add(&phase.node_errors);
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
    /// A single-mechanism control run with its mechanism put back: must
    /// show no violation.
    pub with_mechanism: bool,
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
    /// that hit an unexpected client or node error, a client panic, a
    /// server that died without a fault or logged a panic or assertion, or
    /// a fault that failed, or that did too little (see
    /// [`Summary::shortfalls`]), or was interrupted, proves nothing and
    /// does not pass.
    pub fn passed(&self) -> bool {
        let total = self.total();
        let violations = total.violations();
        let found = if self.expects_violations() {
            violations > 0
        } else {
            violations == 0
        };
        found && self.troubles(&total).is_empty()
    }

    /// Whether the run must find violations: a mix that breaks the rules,
    /// unless a single-mechanism control ran with its mechanism.
    pub fn expects_violations(&self) -> bool {
        self.mix.expects_violations() && !self.with_mechanism
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
        if total.node_errors.unprovoked > 0 {
            troubles.push(format!(
                "{} node errors no fault provoked (first: {})",
                total.node_errors.unprovoked,
                total.node_errors.first_unprovoked.as_deref().unwrap_or("?")
            ));
        }
        if total.clients.panicked > 0 {
            troubles.push(format!("{} client tasks panicked", total.clients.panicked));
        }
        for phase in &self.phases {
            for trouble in &phase.server_troubles {
                troubles.push(format!("phase \"{}\": {trouble}", phase.name));
            }
        }
        let failed: u64 = total.faults.failed.values().sum();
        if failed > 0 {
            troubles.push(format!("{failed} faults failed"));
        }
        if total.faults.skew_resets_failed > 0 {
            troubles.push(format!(
                "{} lease clock rates could not be set back after a skew failed (they may have run skewed to the phase's end)",
                total.faults.skew_resets_failed
            ));
        }
        if self.interrupted {
            troubles.push("interrupted before its end".to_string());
        }
        if total.writes.store_errors > 0 {
            troubles.push(format!(
                "{} writes or reads the fenced store could not serve",
                total.writes.store_errors
            ));
        }
        troubles.extend(self.shortfalls(total));
        troubles
    }

    /// The floors every run must reach, whatever its mix and length: each
    /// phase granted locks, handed out tokens and accepted fenced writes,
    /// and injected faults (every kind its plan has, over the run); some
    /// validity window had a fault that can undo a grant (a restart that
    /// loses writes, a power loss, a lease clock fault) on a granting node,
    /// where the plan has such faults; and, in the safe
    /// mix, every hold style succeeded at least once (an extension that
    /// extended, a re-entry that re-entered, a watchdog that kept its lock
    /// to the end of the work, a `with_lock` body that ran to its write, a
    /// blocking hold that wrote), and acquisitions and releases were
    /// abandoned.
    pub fn shortfalls(&self, total: &Figures) -> Vec<String> {
        let mut short = Vec::new();
        if self.phases.is_empty() {
            short.push("no phase ran".to_string());
        }
        for phase in &self.phases {
            let name = &phase.name;
            let c = &phase.clients;
            if c.grants == 0 {
                short.push(format!("phase \"{name}\" granted no lock"));
            }
            if c.tokens == 0 {
                short.push(format!("phase \"{name}\" handed out no fencing token"));
            }
            if phase.findings.writes.accepted == 0 {
                short.push(format!("phase \"{name}\" accepted no fenced write"));
            }
            if !phase.fault_kinds.is_empty() && phase.faults.total_injected() == 0 {
                short.push(format!("phase \"{name}\" injected no fault"));
            }
        }
        for kind in FaultKind::ALL {
            let planned = self.phases.iter().any(|p| p.fault_kinds.contains(&kind));
            if planned && total.faults.injected(kind) == 0 {
                short.push(format!("{} never injected", kind.name()));
            }
        }
        // Only where a fault of the plan can undo a grant on the phase's
        // own nodes: a restart of a node that cannot forget (`AOF always`,
        // no clock set back) threatens no hold, so a run of such nodes
        // (a single-mechanism control with persistence put back) has
        // nothing for this floor to count.
        let node_faults = self.phases.iter().any(|p| {
            p.fault_kinds.iter().any(|k| {
                p.nodes
                    .iter()
                    .any(|n| k.can_undo_grants(n.restart_can_cost_leases()))
            })
        });
        if node_faults && total.exposure.threatened == 0 {
            short.push(
                "no validity window had a fault that can undo a grant on a granting node"
                    .to_string(),
            );
        }
        // The hold styles: in the safe mix. A mix that breaks the rules on
        // purpose loses locks by design, and its short control runs may see
        // no success of a rare style.
        let s = &total.clients.styles;
        let styles = if self.mix.expects_violations() {
            Vec::new()
        } else {
            vec![
                (s.extended, "no extension extended"),
                (s.reentered, "no re-entry re-entered"),
                (
                    s.watchdogs_kept,
                    "no watchdog kept its lock to the end of the work",
                ),
                (s.scoped_ran, "no with_lock body ran to its write"),
                (s.blocking_held, "no blocking-API hold wrote"),
                (s.cancelled_acquires, "no acquisition was abandoned"),
                (s.cancelled_releases, "no release was abandoned"),
            ]
        };
        for (n, what) in styles {
            if n == 0 {
                short.push(what.to_string());
            }
        }
        short
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
    let n = &figures.node_errors;
    writeln!(
        f,
        "  node errors {} provoked by the faults (timeouts, connections, LOADING, RECOVERING), {} not{}",
        n.provoked,
        n.unprovoked,
        n.first_unprovoked
            .as_deref()
            .map_or(String::new(), |first| format!(" (first: {first})"))
    )?;
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
            "              (skipped, nodes booked by earlier faults: {skipped}; failed: {failed})"
        )?;
    }
    if faults.skew_resets > 0 || faults.skew_resets_failed > 0 {
        writeln!(
            f,
            "              (lease clock skews that failed partway: {} rates set back to 0, {} that could not be)",
            faults.skew_resets, faults.skew_resets_failed
        )?;
    }
    let e = &figures.exposure;
    writeln!(
        f,
        "  exposure    {} of {} validity windows had a fault that can undo a grant on a granting node inside them; {} lost their majority (fewer than a majority of the nodes left untouched among their granters)",
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
    writeln!(
        f,
        "  LOCK.FENCED the store's fence refused {} writes; without it (the unfenced copy) {} resources ended on an older write than their highest token",
        w.store_refused, w.unfenced_stale
    )?;
    writeln!(
        f,
        "  is_held     asked {} times, {} of them after the validity ended",
        w.held_asked, w.held_asked_after
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
            "chaos summary: seed {}, {:.0} s, {} clients, {}, {}{}{}",
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
                    "UNSAFE MIX fast-clocks (lease clocks 2-4% fast, beyond the client's drift allowance)",
                Mix::NoDrift =>
                    "UNSAFE MIX no-drift (lease clocks 0.8-1% fast, a client without a drift allowance)",
                Mix::HeldIgnoresValidity =>
                    "CHECKER CONTROL held-ignores-validity (holders whose is_held() ignores the validity)",
                Mix::ClockLead =>
                    "UNSAFE MIX clock-lead (no persistence, clocks 2.5 s ahead until every node restarts, a recovery window of the largest TTL only)",
                Mix::SingleNodeForgets =>
                    "UNSAFE MIX single-node-forgets (the single-node phase without persistence)",
            },
            match (self.with_mechanism, self.mix.mechanism()) {
                (true, Some(mechanism)) => format!(", WITH its mechanism put back: {mechanism}"),
                _ => String::new(),
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
            for trouble in &phase.server_troubles {
                writeln!(f, "  SERVER      {trouble}")?;
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
        match (self.expects_violations(), self.passed()) {
            (false, true) if self.with_mechanism => write!(
                f,
                "RESULT: PASS, the {} mix with its mechanism ({}) saw no violations",
                self.mix.name(),
                self.mix.mechanism().unwrap_or("?")
            ),
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

    /// What a run that did enough shows: grants, tokens, writes, one fault
    /// of its one kind that reached a window, every hold style's success.
    fn busy() -> (ClientFigures, FaultCounts, Exposure, WriteCounts) {
        let styles = crate::workload::StyleFigures {
            extended: 1,
            reentered: 1,
            watchdogs_kept: 1,
            scoped_ran: 1,
            blocking_held: 1,
            cancelled_acquires: 1,
            cancelled_releases: 1,
            ..Default::default()
        };
        let clients = ClientFigures {
            grants: 10,
            tokens: 10,
            styles,
            ..ClientFigures::default()
        };
        let mut faults = FaultCounts::default();
        faults.injected.insert(FaultKind::Kill9Restart, 1);
        let exposure = Exposure {
            windows: 10,
            threatened: 1,
            ..Exposure::default()
        };
        let writes = WriteCounts {
            accepted: 10,
            ..WriteCounts::default()
        };
        (clients, faults, exposure, writes)
    }

    fn summary(mix: Mix, clients: ClientFigures, violations: usize) -> Summary {
        let (_, faults, exposure, writes) = busy();
        let mut findings = Findings {
            writes,
            ..Findings::default()
        };
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
            with_mechanism: false,
            clients: 1,
            resources: String::new(),
            phases: vec![PhaseSummary {
                name: "p".into(),
                nodes: vec![crate::plan::NodeProfile {
                    persistence: crate::plan::Persistence::None,
                    recovery_ms: 0,
                    offsets_ms: 0..=0,
                }],
                ttl_ms: (1, 2),
                seconds: 1.0,
                clients,
                node_errors: NodeErrorFigures::default(),
                server_troubles: Vec::new(),
                fault_kinds: vec![FaultKind::Kill9Restart],
                faults,
                findings,
                examples: Vec::new(),
                network: None,
                exposure,
                server_wait_grants: None,
            }],
            interrupted: false,
        }
    }

    #[test]
    fn errors_or_panics_make_any_verdict_a_failure() {
        let ok = busy().0;
        assert!(summary(Mix::Safe, ok.clone(), 0).passed());
        assert!(!summary(Mix::Safe, ok.clone(), 1).passed());
        assert!(summary(Mix::NegativeControl, ok.clone(), 1).passed());
        let errors = ClientFigures {
            other_errors: 1,
            ..ok.clone()
        };
        assert!(!summary(Mix::Safe, errors.clone(), 0).passed());
        assert!(!summary(Mix::NegativeControl, errors, 3).passed());
        let panicked = ClientFigures { panicked: 1, ..ok };
        let run = summary(Mix::Safe, panicked, 0);
        assert!(!run.passed());
        assert!(run
            .to_string()
            .contains("proves nothing: 1 client tasks panicked"));
    }

    /// A node's error reply no fault provoked, a server that died by
    /// itself or logged a panic: the run fails, whatever it found.
    #[test]
    fn node_errors_and_server_troubles_fail_the_run() {
        let mut run = summary(Mix::Safe, busy().0, 0);
        run.phases[0].node_errors = NodeErrorFigures {
            provoked: 100,
            unprovoked: 0,
            first_unprovoked: None,
        };
        assert!(run.passed(), "{run}");
        run.phases[0].node_errors.unprovoked = 1;
        run.phases[0].node_errors.first_unprovoked =
            Some("127.0.0.1:7000: error reply: ERR internal error in LOCK.FENCE: boom".into());
        assert!(!run.passed());
        assert!(run.to_string().contains("1 node errors no fault provoked"));
        let mut run = summary(Mix::NegativeControl, busy().0, 3);
        assert!(run.passed());
        run.phases[0]
            .server_troubles
            .push("node 2 was not running when a kill -9 came: it died without a fault".into());
        assert!(!run.passed());
        assert!(run.to_string().contains("died without a fault"));
    }

    /// A run with no grant and no fault proves nothing, in every mix.
    #[test]
    fn a_run_that_did_too_little_fails_with_the_reason() {
        for mix in [Mix::Safe, Mix::NegativeControl] {
            let violations = usize::from(mix.expects_violations());
            let mut idle = summary(mix, ClientFigures::default(), violations);
            idle.phases[0].faults = FaultCounts::default();
            idle.phases[0].findings.writes = WriteCounts::default();
            idle.phases[0].exposure = Exposure::default();
            assert!(!idle.passed());
            let text = idle.to_string();
            for reason in [
                "granted no lock",
                "handed out no fencing token",
                "accepted no fenced write",
                "injected no fault",
                "kill -9 + restart never injected",
                "no validity window had a fault that can undo a grant on a granting node",
            ] {
                assert!(text.contains(reason), "{reason}: {text}");
            }
            for reason in [
                "no extension extended",
                "no with_lock body ran to its write",
            ] {
                assert_eq!(text.contains(reason), mix == Mix::Safe, "{reason}: {text}");
            }
        }
        // Each floor alone.
        let style_short = |f: fn(&mut crate::workload::StyleFigures)| {
            let mut clients = busy().0;
            f(&mut clients.styles);
            !summary(Mix::Safe, clients, 0).passed()
        };
        assert!(style_short(|s| s.extended = 0));
        assert!(style_short(|s| s.reentered = 0));
        assert!(style_short(|s| s.watchdogs_kept = 0));
        assert!(style_short(|s| s.scoped_ran = 0));
        assert!(style_short(|s| s.blocking_held = 0));
        let mut run = summary(Mix::Safe, busy().0, 0);
        run.interrupted = true;
        assert!(!run.passed());
    }

    /// The floor on windows threatened by a fault applies where a fault can
    /// undo a grant on the phase's nodes: restarts of nodes that cannot
    /// forget (`AOF always`, no clock set back) threaten nothing, and a run
    /// of such nodes is not held to it; a lease-clock fault threatens any.
    #[test]
    fn the_exposure_floor_counts_only_faults_that_can_undo_on_these_nodes() {
        let unthreatened = |persistence, kinds: Vec<FaultKind>| {
            let mut run = summary(Mix::Safe, busy().0, 0);
            run.phases[0].nodes[0].persistence = persistence;
            run.phases[0].fault_kinds = kinds;
            run.phases[0].exposure.threatened = 0;
            run.to_string()
                .contains("no validity window had a fault that can undo a grant")
        };
        let kills = || vec![FaultKind::Kill9Restart];
        assert!(unthreatened(crate::plan::Persistence::None, kills()));
        assert!(unthreatened(crate::plan::Persistence::AofEverysec, kills()));
        assert!(!unthreatened(crate::plan::Persistence::AofAlways, kills()));
        assert!(unthreatened(
            crate::plan::Persistence::AofAlways,
            vec![FaultKind::Kill9Restart, FaultKind::LeaseClockSkew]
        ));
    }
}
