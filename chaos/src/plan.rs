//! The fault mix: how each node persists, its recovery window, which clock
//! offsets it may be given, which faults are injected, and the TTLs in use;
//! and the check that a mix obeys the documented safety rules.
//!
//! The rules (docs/src/operations.md):
//!
//! 1. A node that can forget a lock on restart (AOF `everysec` that lost its
//!    unsynced tail, no persistence) needs `lock.recovery-ms` ≥ the largest
//!    TTL in use.
//! 2. A node whose wall clock may step *forward* across a restart (it ran
//!    with a backward offset, which the restart resets to 0) sees its saved
//!    leases as shorter than they are: it needs the recovery window too,
//!    whatever its persistence.
//! 3. A node that can forget its token counter restarts with the wall clock
//!    as its floor; tokens issued before may be ahead of that by the largest
//!    difference between two nodes' clocks. Its recovery window must also
//!    cover that difference (the largest offset minus the smallest).
//!
//! A node with `appendonly yes` + `appendfsync always` that never runs with
//! a backward offset forgets nothing across `kill -9` and needs no window.

use std::fmt;
use std::ops::RangeInclusive;

use crate::checker::ViolationKind;

/// How a node keeps its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// `appendonly yes`, `appendfsync always`: fsynced before the reply.
    AofAlways,
    /// `appendonly yes`, `appendfsync everysec` (the Redis default): a power
    /// loss may drop the last second, which the chaos suite simulates by
    /// cutting the AOF's tail after `kill -9`.
    AofEverysec,
    /// Nothing on disk: a restart forgets every lock and the token counter.
    None,
}

impl Persistence {
    /// Whether a restart can lose acknowledged lock state.
    pub fn can_forget(self) -> bool {
        !matches!(self, Persistence::AofAlways)
    }

    /// `redis-server` arguments.
    pub fn server_args(self) -> Vec<String> {
        let args: &[&str] = match self {
            Persistence::AofAlways => &["--appendonly", "yes", "--appendfsync", "always"],
            Persistence::AofEverysec => &["--appendonly", "yes", "--appendfsync", "everysec"],
            Persistence::None => &["--appendonly", "no"],
        };
        args.iter().map(|a| a.to_string()).collect()
    }
}

impl fmt::Display for Persistence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Persistence::AofAlways => "AOF always",
            Persistence::AofEverysec => "AOF everysec",
            Persistence::None => "no persistence",
        })
    }
}

/// One node's configuration for a phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeProfile {
    pub persistence: Persistence,
    /// `lock.recovery-ms`.
    pub recovery_ms: u64,
    /// Wall-clock offsets (ms) the injector may set with `LOCK.DEBUG`.
    pub offsets_ms: RangeInclusive<i64>,
}

impl NodeProfile {
    /// Whether a restart can cost the node leases: it can forget them, or
    /// its clock may be set back (the restart then steps it forward and
    /// shortens what it reloads).
    pub fn restart_can_cost_leases(&self) -> bool {
        self.persistence.can_forget() || *self.offsets_ms.start() < 0
    }
}

impl fmt::Display for NodeProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, recovery {} ms, clock offsets {:+}..{:+} ms",
            self.persistence,
            self.recovery_ms,
            self.offsets_ms.start(),
            self.offsets_ms.end()
        )
    }
}

/// What the injector does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// `kill -9` of one node, a short downtime, restart.
    Kill9Restart,
    /// `kill -9` of an `everysec` node, cut the AOF's unsynced tail, restart.
    PowerLoss,
    /// `kill -9` of three or four nodes at once (a majority, or the four
    /// grants a permit of a semaphore of two needs), restart them.
    RestartMajority,
    /// SIGSTOP a node for up to about a TTL, then SIGCONT.
    StopNode,
    /// A slow node: a few `DEBUG SLEEP`s longer than the client's per-node
    /// timeout.
    SlowNode,
    /// Step a node's wall clock with `LOCK.DEBUG WALLCLOCK-OFFSET`.
    ClockOffset,
    /// A client task sleeps past its validity before its fenced write (a
    /// GC pause).
    ClientPause,
    /// One client group loses one to three nodes, both ways (network phase).
    Partition,
    /// Two client groups each reach a different majority, the two
    /// majorities sharing one node (network phase).
    SplitMajorities,
    /// One client group's requests reach a node and its replies are
    /// dropped: the command runs, the client never learns it.
    OneWayLoss,
    /// A node's replies to every group delayed past the client's per-node
    /// timeout, with jitter (`tc netem delay`).
    Delay,
    /// A node's links to every group drop 5–30% of packets both ways.
    FlakyLink,
    /// The lease clock (the module's monotonic clock) of one or more nodes
    /// runs fast or slow for a while and jumps forward
    /// (`LOCK.DEBUG MONOTONIC-RATE` / `MONOTONIC-JUMP`).
    LeaseClockSkew,
    /// The clients' own link to a node (a fault proxy between them) is
    /// slow: held for a while (every byte, both ways) or each chunk
    /// delayed, beyond the per-node timeout or not (loopback phases).
    ClientSlowLink,
    /// The clients' connections to a node are cut (a fault proxy between
    /// them), sometimes with their reconnection held for a while: the
    /// client reconnects (loopback phases).
    ClientReconnect,
}

impl FaultKind {
    pub const ALL: [FaultKind; 15] = [
        FaultKind::Kill9Restart,
        FaultKind::PowerLoss,
        FaultKind::RestartMajority,
        FaultKind::StopNode,
        FaultKind::SlowNode,
        FaultKind::ClockOffset,
        FaultKind::ClientPause,
        FaultKind::Partition,
        FaultKind::SplitMajorities,
        FaultKind::OneWayLoss,
        FaultKind::Delay,
        FaultKind::FlakyLink,
        FaultKind::LeaseClockSkew,
        FaultKind::ClientSlowLink,
        FaultKind::ClientReconnect,
    ];

    /// Whether the fault acts on the network lab's links.
    pub fn is_network(self) -> bool {
        matches!(
            self,
            FaultKind::Partition
                | FaultKind::SplitMajorities
                | FaultKind::OneWayLoss
                | FaultKind::Delay
                | FaultKind::FlakyLink
        )
    }

    /// Whether the fault can undo a node's grants: make it forget one (a
    /// restart of a node that can lose acknowledged writes, `forgets`; a
    /// power loss) or end its lease early (the lease clock run fast or
    /// jumped). The others (a stopped, slow or cut-off node, a wall-clock
    /// step, a lost reply, a client's pause) leave every grant in force.
    pub fn can_undo_grants(self, forgets: bool) -> bool {
        match self {
            FaultKind::Kill9Restart | FaultKind::RestartMajority => forgets,
            FaultKind::PowerLoss | FaultKind::LeaseClockSkew => true,
            FaultKind::StopNode
            | FaultKind::SlowNode
            | FaultKind::ClockOffset
            | FaultKind::ClientPause
            | FaultKind::Partition
            | FaultKind::SplitMajorities
            | FaultKind::OneWayLoss
            | FaultKind::Delay
            | FaultKind::FlakyLink
            | FaultKind::ClientSlowLink
            | FaultKind::ClientReconnect => false,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill9Restart => "kill -9 + restart",
            FaultKind::PowerLoss => "kill -9 + AOF tail cut",
            FaultKind::RestartMajority => "kill -9 of 3 or 4 nodes",
            FaultKind::StopNode => "SIGSTOP/SIGCONT",
            FaultKind::SlowNode => "slow node (DEBUG SLEEP)",
            FaultKind::ClockOffset => "wall-clock offset",
            FaultKind::ClientPause => "client pause > validity",
            FaultKind::Partition => "partition (group from nodes)",
            FaultKind::SplitMajorities => "split: two majorities, one shared node",
            FaultKind::OneWayLoss => "replies lost (one way)",
            FaultKind::Delay => "delay past the node timeout",
            FaultKind::FlakyLink => "flaky link (packet loss)",
            FaultKind::LeaseClockSkew => "lease clock fast/slow + jump",
            FaultKind::ClientSlowLink => "client link stalled/delayed (proxy)",
            FaultKind::ClientReconnect => "client link cut, reconnect (proxy)",
        }
    }
}

/// One phase of a run: a fresh set of nodes, a fault mix, a share of the
/// run's time.
#[derive(Clone, Debug)]
pub struct Phase {
    pub name: &'static str,
    /// Fraction of the run's duration.
    pub share: f64,
    pub nodes: Vec<NodeProfile>,
    /// Fault kinds with their relative weights.
    pub faults: Vec<(FaultKind, u32)>,
    /// TTLs the clients draw from, ms.
    pub ttl_ms: RangeInclusive<u64>,
    /// Mean time between injected faults, ms.
    pub fault_interval_ms: u64,
    /// 0: nodes and clients share the loopback interface. More: every node
    /// in a network namespace of its own and the clients split over this
    /// many client namespaces (the network faults need at least 2).
    pub client_groups: usize,
    /// The network negative control's client: nodes that must grant, in
    /// place of a majority (`None`: the client's own rule).
    pub client_quorum: Option<usize>,
    /// How far `LeaseClockSkew` may skew the nodes' lease clocks.
    pub lease_skew: LeaseSkew,
    /// The clients' drift allowance (`Config::drift_factor`, `drift_min`):
    /// the client's default, or zero (the no-drift control's client), or
    /// wider (the fast-clocks control with its mechanism).
    pub drift: DriftAllowance,
    /// The share of plain holds (no extension, re-entry or watchdog) kept
    /// to the edge of their validity and left to lapse.
    pub edge_share: f64,
    /// The held-after-validity control's defect (see
    /// [`crate::workload::Shared::held_ignores_validity`]).
    pub held_ignores_validity: bool,
    /// The clock-lead control's trigger: a majority restart takes every
    /// node, sets their wall clocks to the top of their offset ranges
    /// first and kills them once a holder has a token issued with that
    /// lead (or after [`crate::faults::LEAD_WAIT`]), so that the nodes come
    /// back with their counters about the lead below a token just issued.
    pub restart_after_lead: bool,
}

/// The bounds of the lease-clock faults of a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseSkew {
    /// Rates drawn from min..=max parts per million (positive: fast, the
    /// lease ends early).
    pub min_rate_ppm: i64,
    pub max_rate_ppm: i64,
    /// Forward jumps drawn from 0..=max, ms.
    pub max_jump_ms: u64,
    /// Nodes skewed at once: drawn from min_nodes..=max_nodes (at most
    /// the phase's nodes).
    pub min_nodes: usize,
    pub max_nodes: usize,
}

/// The client's drift allowance: `ppm` parts per million of the TTL plus
/// `min_ms` (`Config::drift_factor`, `Config::drift_min`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriftAllowance {
    pub ppm: i64,
    pub min_ms: u64,
}

impl DriftAllowance {
    /// The client's default: 1% of the TTL + 2 ms.
    pub const DEFAULT: DriftAllowance = DriftAllowance {
        ppm: 10_000,
        min_ms: 2,
    };
    /// None at all (the no-drift control's client).
    pub const NONE: DriftAllowance = DriftAllowance { ppm: 0, min_ms: 0 };
}

/// Just inside the client's default drift allowance (1% of the TTL + 2 ms):
/// clocks up to 0.8% fast or slow, jumps up to 1 ms, on one to three nodes
/// at once: a majority of five at times, so that a client whose allowance
/// were too small would meet leases that ended before its validity on a
/// majority. A node's jumps come at least [`SKEW_MIN_MS`] apart (its next
/// skew waits for the current one to end), so a lease of `ttl` meets at
/// most `ttl / SKEW_MIN_MS + 1` of them: for the longest safe lease (2 s),
/// 16 ms of rate and 5 ms of jumps, inside its 22 ms allowance
/// ([`LeaseSkew::worst_shortening_us`], checked for every safe TTL by a
/// unit test).
pub const SAFE_LEASE_SKEW: LeaseSkew = LeaseSkew {
    min_rate_ppm: -8_000,
    max_rate_ppm: 8_000,
    max_jump_ms: 1,
    min_nodes: 1,
    max_nodes: 3,
};

/// The shortest lease-clock skew fault, ms: a node's next skew (and jump)
/// comes at least this long after the previous one.
pub const SKEW_MIN_MS: u64 = 500;

impl LeaseSkew {
    /// The most a lease of `ttl_ms` can be cut short on one node, µs: the
    /// fastest rate over the whole lease plus every jump that can fall
    /// inside it (one per [`SKEW_MIN_MS`], and one at its start).
    pub fn worst_shortening_us(&self, ttl_ms: u64) -> u64 {
        let rate = u64::try_from(self.max_rate_ppm.max(0)).unwrap_or(0);
        let jumps = ttl_ms / SKEW_MIN_MS + 1;
        ttl_ms * rate / 1_000 + jumps * self.max_jump_ms * 1_000
    }
}

impl DriftAllowance {
    /// What the client takes off a lease of `ttl_ms`, µs.
    pub fn of_us(&self, ttl_ms: u64) -> u64 {
        let ppm = u64::try_from(self.ppm.max(0)).unwrap_or(0);
        ttl_ms * ppm / 1_000 + self.min_ms * 1_000
    }
}

/// The share of plain holds kept to the edge of their validity, unless a
/// phase says otherwise.
const EDGE_SHARE: f64 = 0.3;

impl Phase {
    /// The widest wall-clock difference the phase's offsets allow between
    /// two nodes (a node without an offset counts as 0).
    fn clock_skew_ms(&self) -> u64 {
        let offsets = || self.nodes.iter().map(|n| &n.offsets_ms);
        let offset_max = offsets().map(|o| *o.end()).chain([0]).max().unwrap_or(0);
        let offset_min = offsets().map(|o| *o.start()).chain([0]).min().unwrap_or(0);
        u64::try_from(offset_max.saturating_sub(offset_min)).unwrap_or(u64::MAX)
    }

    /// Every documented rule this phase's nodes break (empty: safe).
    pub fn broken_rules(&self) -> Vec<String> {
        let ttl_max = *self.ttl_ms.end();
        let skew = self.clock_skew_ms();
        let mut broken = Vec::new();
        let (drift_ppm, drift_min_ms) = (self.drift.ppm, self.drift.min_ms);
        let cut_short = |ttl: u64| self.lease_skew.worst_shortening_us(ttl) > self.drift.of_us(ttl);
        if self.allows(FaultKind::LeaseClockSkew)
            && (self.lease_skew.max_rate_ppm > drift_ppm || self.ttl_ms.clone().any(cut_short))
        {
            broken.push(format!(
                "lease clocks up to {} ppm fast with jumps up to {} ms exceed the client's drift allowance ({drift_ppm} ppm + {drift_min_ms} ms)",
                self.lease_skew.max_rate_ppm, self.lease_skew.max_jump_ms
            ));
        }
        if self.held_ignores_validity {
            broken.push("the holders' is_held() ignores the validity (holds() > 0)".to_string());
        }
        if let Some(quorum) = self.client_quorum {
            if 2 * quorum <= self.nodes.len() {
                broken.push(format!(
                    "the client's quorum of {quorum} is not a majority of {} nodes",
                    self.nodes.len()
                ));
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let forgets = node.persistence.can_forget();
            if node.restart_can_cost_leases() && node.recovery_ms < ttl_max {
                broken.push(format!(
                    "node {i} ({node}) may lose or shorten leases on restart but its recovery window is shorter than the largest TTL ({ttl_max} ms)"
                ));
            }
            if forgets && node.recovery_ms < skew {
                broken.push(format!(
                    "node {i} ({node}) may forget its token counter but its recovery window is shorter than the clock skew between nodes ({skew} ms)"
                ));
            }
        }
        broken
    }

    /// The shortest recovery window that keeps every node within rules 1
    /// to 3: the largest TTL, and for nodes that can forget their token
    /// counter the clock skew between nodes too.
    pub fn needed_recovery_ms(&self) -> u64 {
        let skew = self.clock_skew_ms();
        let forgets = self.nodes.iter().any(|n| n.persistence.can_forget());
        let ttl_max = *self.ttl_ms.end();
        if forgets {
            ttl_max.max(skew)
        } else {
            ttl_max
        }
    }

    /// Whether the clients' links go through fault proxies.
    pub fn has_client_link_faults(&self) -> bool {
        self.allows(FaultKind::ClientSlowLink) || self.allows(FaultKind::ClientReconnect)
    }

    pub fn allows(&self, kind: FaultKind) -> bool {
        self.faults.iter().any(|(k, w)| *k == kind && *w > 0)
    }
}

/// Which mix a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// Every node configured by the rules: must show no violation.
    Safe,
    /// No persistence, no recovery window: must show violations.
    NegativeControl,
    /// `AOF always` without a recovery window, but wall clocks stepped back
    /// before restarts (rule 2 broken): shows that the rule is needed.
    ClockStep,
    /// The network phase with a client whose quorum is 2 of 5 and only
    /// network faults: shows that partitions alone break a quorum below a
    /// majority.
    NetworkControl,
    /// `AOF always` nodes whose lease clocks run 2-4% fast, all at once:
    /// beyond the client's drift allowance.
    FastClocks,
    /// Lease clocks 0.8-1% fast, all at once (within the default
    /// allowance), and a client whose drift allowance is zero.
    NoDrift,
    /// The safe mix's first phase with one change: `lock.recovery-ms 0` on
    /// every node. Shows that the window, alone, is what keeps it safe.
    NoWindow,
    /// The safe mix's `AOF always` phase with client pauses and the
    /// client-side link faults, and holders whose `is_held()` ignores the
    /// validity: shows that the checker's held-after-validity check works.
    HeldIgnoresValidity,
    /// Three nodes without persistence whose wall clocks run 1.5-2.5 s
    /// ahead (a restart sets them right), with a recovery window of the
    /// largest TTL but not of the clocks' lead (rule 3 broken, rules 1 and
    /// 2 kept): shows that the window's clock-skew rule is needed.
    ClockLead,
    /// The safe mix's single-node phase (server-side `WAIT`) on a node
    /// without persistence: shows that its persistence is what keeps it
    /// safe.
    SingleNodeForgets,
}

impl Mix {
    pub const ALL: [Mix; 10] = [
        Mix::Safe,
        Mix::NegativeControl,
        Mix::ClockStep,
        Mix::NetworkControl,
        Mix::NoWindow,
        Mix::FastClocks,
        Mix::NoDrift,
        Mix::HeldIgnoresValidity,
        Mix::ClockLead,
        Mix::SingleNodeForgets,
    ];

    /// The single-mechanism controls: each removes one mechanism of the
    /// safe mix, and [`Mix::mechanism_plan`] puts it back.
    pub const CONTROLS: [Mix; 7] = [
        Mix::NoWindow,
        Mix::ClockStep,
        Mix::NetworkControl,
        Mix::FastClocks,
        Mix::NoDrift,
        Mix::ClockLead,
        Mix::SingleNodeForgets,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mix::Safe => "safe",
            Mix::NegativeControl => "negative-control",
            Mix::ClockStep => "clock-step",
            Mix::NetworkControl => "network-control",
            Mix::NoWindow => "no-window",
            Mix::FastClocks => "fast-clocks",
            Mix::NoDrift => "no-drift",
            Mix::HeldIgnoresValidity => "held-ignores-validity",
            Mix::ClockLead => "clock-lead",
            Mix::SingleNodeForgets => "single-node-forgets",
        }
    }

    pub fn parse(name: &str) -> Option<Mix> {
        Mix::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether the mix breaks the rules on purpose, so that a run must
    /// find violations to show the checker works.
    pub fn expects_violations(self) -> bool {
        self != Mix::Safe
    }

    pub fn plan(self) -> Plan {
        match self {
            Mix::Safe => Plan::safe(),
            Mix::NegativeControl => Plan::negative_control(),
            Mix::ClockStep => Plan::clock_step(),
            Mix::NetworkControl => Plan::network_control(),
            Mix::NoWindow => Plan::no_window(),
            Mix::FastClocks => Plan::fast_clocks(),
            Mix::NoDrift => Plan::no_drift(),
            Mix::HeldIgnoresValidity => Plan::held_ignores_validity(),
            Mix::ClockLead => Plan::clock_lead(),
            Mix::SingleNodeForgets => Plan::single_node_forgets(),
        }
    }

    /// The mechanism a single-mechanism control removes, in words; `None`
    /// for the other mixes.
    pub fn mechanism(self) -> Option<&'static str> {
        match self {
            Mix::NoWindow => Some("the recovery window (lock.recovery-ms 3000)"),
            Mix::ClockStep => Some("a recovery window of the largest TTL"),
            Mix::NetworkControl => Some("a quorum of a majority"),
            Mix::FastClocks => Some("a drift allowance that covers the skew (5% + 2 ms)"),
            Mix::NoDrift => Some("the client's default drift allowance (1% + 2 ms)"),
            Mix::ClockLead => Some("a recovery window that covers the clocks' lead"),
            Mix::SingleNodeForgets => Some("appendfsync always"),
            Mix::Safe | Mix::NegativeControl | Mix::HeldIgnoresValidity => None,
        }
    }

    /// A single-mechanism control's plan with its mechanism put back and
    /// nothing else changed: the same nodes, faults, fault parameters,
    /// TTLs and workload, so that the same seed draws the same fault
    /// schedule. `None` for the other mixes.
    pub fn mechanism_plan(self) -> Option<Plan> {
        let mut plan = self.plan();
        for phase in &mut plan.phases {
            match self {
                Mix::NoWindow => {
                    for node in &mut phase.nodes {
                        node.recovery_ms = SAFE_RECOVERY_MS;
                    }
                }
                Mix::ClockStep | Mix::ClockLead => {
                    let needed = phase.needed_recovery_ms();
                    for node in &mut phase.nodes {
                        node.recovery_ms = needed;
                    }
                }
                Mix::NetworkControl => phase.client_quorum = None,
                Mix::FastClocks => {
                    phase.drift = DriftAllowance {
                        ppm: phase.lease_skew.max_rate_ppm.saturating_add(10_000),
                        min_ms: DriftAllowance::DEFAULT.min_ms,
                    }
                }
                Mix::NoDrift => phase.drift = DriftAllowance::DEFAULT,
                Mix::SingleNodeForgets => {
                    for node in &mut phase.nodes {
                        node.persistence = Persistence::AofAlways;
                    }
                }
                Mix::Safe | Mix::NegativeControl | Mix::HeldIgnoresValidity => return None,
            }
        }
        Some(plan)
    }

    /// The kinds of violation the mechanism that a single-mechanism control
    /// removes prevents: the control must find some of the first (its
    /// primary kind) and none of any kind not listed. A lease that ends
    /// early or a lock a node forgot lets two holders overlap (and then one
    /// writes after the other, inside its window, or reads the other's
    /// newer write); only a lost token counter or a quorum below a majority
    /// can also hand out a token below an earlier holder's; a token counter
    /// behind the clocks' lead does only that. Empty for the other mixes.
    pub fn prevented(self) -> &'static [ViolationKind] {
        use ViolationKind::*;
        match self {
            Mix::NoWindow | Mix::NetworkControl | Mix::SingleNodeForgets => &[
                Overlap,
                TooManyPermits,
                TokenOrder,
                FencedOutWhileValid,
                ReadSawNewerWrite,
            ],
            Mix::ClockStep | Mix::FastClocks | Mix::NoDrift => &[
                Overlap,
                TooManyPermits,
                FencedOutWhileValid,
                ReadSawNewerWrite,
            ],
            Mix::ClockLead => &[TokenOrder, FencedOutWhileValid, ReadSawNewerWrite],
            Mix::Safe | Mix::NegativeControl | Mix::HeldIgnoresValidity => &[],
        }
    }
}

/// The phases of a run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub mix: Mix,
    pub phases: Vec<Phase>,
}

/// Largest TTL of the safe run, ms.
const SAFE_TTL_MAX: u64 = 2_000;
/// Largest clock offset of the safe run, either way, ms.
const SAFE_OFFSET: i64 = 1_500;
/// The largest TTL of the clock-lead control, ms: its recovery window
/// without the mechanism.
const CLOCK_LEAD_TTL_MAX: u64 = 800;
/// The recovery window of the first phase: at least the largest TTL and the
/// largest clock skew (2 × SAFE_OFFSET).
const SAFE_RECOVERY_MS: u64 = 3_000;

impl Plan {
    /// The safe mix, in four phases.
    ///
    /// 1. *recovery window* (35% of the time): one `AOF always`, two
    ///    `everysec` (whose `kill -9` may cut the AOF tail), two without
    ///    persistence; every node has a 3 s recovery window, clock offsets
    ///    up to ±1.5 s; every fault kind.
    /// 2. *AOF always* (20%): five `AOF always` nodes without a
    ///    recovery window, so only the fsynced AOF keeps the locks across
    ///    `kill -9`, including three nodes at once; clock offsets only
    ///    forward (a backward offset before a restart would need the
    ///    window).
    /// 3. *network* (30%): five `AOF always` nodes, each in a network
    ///    namespace of its own, the clients in two client namespaces, and
    ///    faults on the links between them: partitions (also two groups
    ///    each reaching a different majority), replies lost after the
    ///    command ran, delays past the node timeout, lossy links.
    /// 4. *single node* (15%): one `AOF always` node, where the client
    ///    waits on the server (`LOCK.ACQUIRE … WAIT`) instead of retrying.
    pub fn safe() -> Plan {
        let window = |persistence| NodeProfile {
            persistence,
            recovery_ms: SAFE_RECOVERY_MS,
            offsets_ms: -SAFE_OFFSET..=SAFE_OFFSET,
        };
        let always = NodeProfile {
            persistence: Persistence::AofAlways,
            recovery_ms: 0,
            offsets_ms: 0..=SAFE_OFFSET,
        };
        Plan {
            mix: Mix::Safe,
            phases: vec![
                Phase {
                    name: "recovery window",
                    share: 0.35,
                    nodes: vec![
                        window(Persistence::AofAlways),
                        window(Persistence::AofEverysec),
                        window(Persistence::AofEverysec),
                        window(Persistence::None),
                        window(Persistence::None),
                    ],
                    faults: vec![
                        (FaultKind::Kill9Restart, 3),
                        (FaultKind::PowerLoss, 2),
                        (FaultKind::RestartMajority, 1),
                        (FaultKind::StopNode, 3),
                        (FaultKind::SlowNode, 3),
                        (FaultKind::ClockOffset, 3),
                        (FaultKind::ClientPause, 3),
                        (FaultKind::LeaseClockSkew, 2),
                        (FaultKind::ClientSlowLink, 2),
                        (FaultKind::ClientReconnect, 2),
                    ],
                    ttl_ms: 300..=SAFE_TTL_MAX,
                    fault_interval_ms: 700,
                    client_groups: 0,
                    client_quorum: None,
                    lease_skew: SAFE_LEASE_SKEW,
                    drift: DriftAllowance::DEFAULT,
                    edge_share: EDGE_SHARE,
                    held_ignores_validity: false,
                    restart_after_lead: false,
                },
                Phase {
                    name: "AOF always",
                    share: 0.2,
                    nodes: vec![always; 5],
                    faults: vec![
                        (FaultKind::Kill9Restart, 3),
                        (FaultKind::RestartMajority, 2),
                        (FaultKind::StopNode, 3),
                        (FaultKind::SlowNode, 3),
                        (FaultKind::ClockOffset, 3),
                        (FaultKind::ClientPause, 3),
                        (FaultKind::LeaseClockSkew, 2),
                        (FaultKind::ClientSlowLink, 2),
                        (FaultKind::ClientReconnect, 2),
                    ],
                    ttl_ms: 300..=SAFE_TTL_MAX,
                    fault_interval_ms: 700,
                    client_groups: 0,
                    client_quorum: None,
                    lease_skew: SAFE_LEASE_SKEW,
                    drift: DriftAllowance::DEFAULT,
                    edge_share: EDGE_SHARE,
                    held_ignores_validity: false,
                    restart_after_lead: false,
                },
                Plan::network_phase(),
                Phase {
                    name: "single node (server-side WAIT)",
                    share: 0.15,
                    nodes: vec![NodeProfile {
                        persistence: Persistence::AofAlways,
                        recovery_ms: 0,
                        offsets_ms: 0..=SAFE_OFFSET,
                    }],
                    faults: vec![
                        (FaultKind::Kill9Restart, 2),
                        (FaultKind::StopNode, 2),
                        (FaultKind::SlowNode, 2),
                        (FaultKind::ClockOffset, 1),
                        (FaultKind::ClientPause, 2),
                        (FaultKind::LeaseClockSkew, 2),
                        (FaultKind::ClientSlowLink, 2),
                        (FaultKind::ClientReconnect, 2),
                    ],
                    ttl_ms: 300..=SAFE_TTL_MAX,
                    fault_interval_ms: 900,
                    client_groups: 0,
                    client_quorum: None,
                    lease_skew: SAFE_LEASE_SKEW,
                    drift: DriftAllowance::DEFAULT,
                    edge_share: EDGE_SHARE,
                    held_ignores_validity: false,
                    restart_after_lead: false,
                },
            ],
        }
    }

    /// The negative control: the same faults on nodes that keep nothing
    /// and have no recovery window, with majority restarts frequent and
    /// TTLs long enough that a restarted majority grants a lock someone
    /// still holds.
    pub fn negative_control() -> Plan {
        let forgetful = NodeProfile {
            persistence: Persistence::None,
            recovery_ms: 0,
            offsets_ms: -SAFE_OFFSET..=SAFE_OFFSET,
        };
        Plan {
            mix: Mix::NegativeControl,
            phases: vec![Phase {
                name: "negative control",
                share: 1.0,
                nodes: vec![forgetful; 5],
                faults: vec![
                    (FaultKind::Kill9Restart, 1),
                    (FaultKind::RestartMajority, 4),
                    (FaultKind::StopNode, 1),
                    (FaultKind::SlowNode, 1),
                    (FaultKind::ClockOffset, 1),
                    (FaultKind::ClientPause, 1),
                ],
                ttl_ms: 1_000..=3_000,
                fault_interval_ms: 800,
                client_groups: 0,
                client_quorum: None,
                lease_skew: SAFE_LEASE_SKEW,
                drift: DriftAllowance::DEFAULT,
                edge_share: EDGE_SHARE,
                held_ignores_validity: false,
                restart_after_lead: false,
            }],
        }
    }

    /// `AOF always` nodes without a recovery window whose wall clocks are
    /// stepped *back* (0.5 to 2 s) while they run: the restart resets the
    /// offset, the clock steps forward, and the leases saved with the old
    /// clock end early. Majority restarts are frequent.
    pub fn clock_step() -> Plan {
        let stepped = NodeProfile {
            persistence: Persistence::AofAlways,
            recovery_ms: 0,
            offsets_ms: -2_000..=-500,
        };
        Plan {
            mix: Mix::ClockStep,
            phases: vec![Phase {
                name: "clock step back, AOF always, no window",
                share: 1.0,
                nodes: vec![stepped; 5],
                faults: vec![
                    (FaultKind::Kill9Restart, 1),
                    (FaultKind::RestartMajority, 3),
                    (FaultKind::StopNode, 1),
                    (FaultKind::SlowNode, 1),
                    (FaultKind::ClockOffset, 4),
                    (FaultKind::ClientPause, 1),
                ],
                ttl_ms: 1_000..=2_000,
                fault_interval_ms: 600,
                client_groups: 0,
                client_quorum: None,
                lease_skew: SAFE_LEASE_SKEW,
                drift: DriftAllowance::DEFAULT,
                edge_share: EDGE_SHARE,
                held_ignores_validity: false,
                restart_after_lead: false,
            }],
        }
    }

    /// Five `AOF always` nodes in namespaces, clients in two groups whose
    /// client needs only 2 of the 5 nodes, and only network faults: each
    /// group's partitions leave it a minority that another group's holder
    /// does not share.
    pub fn network_control() -> Plan {
        let mut phase = Plan::network_phase();
        phase.name = "network negative control (quorum 2 of 5)";
        phase.share = 1.0;
        phase.faults = vec![
            (FaultKind::Partition, 3),
            (FaultKind::SplitMajorities, 2),
            (FaultKind::OneWayLoss, 1),
            (FaultKind::Delay, 1),
            (FaultKind::FlakyLink, 1),
        ];
        phase.client_quorum = Some(2);
        Plan {
            mix: Mix::NetworkControl,
            phases: vec![phase],
        }
    }

    /// The safe mix's first phase with `lock.recovery-ms 0` on every node
    /// and nothing else changed that can lose a lock (the clients' link
    /// faults are left out).
    pub fn no_window() -> Plan {
        let mut phase = Plan::safe().phases.remove(0);
        phase.name = "recovery window phase without the window";
        phase.share = 1.0;
        for node in &mut phase.nodes {
            node.recovery_ms = 0;
        }
        // The clients' link faults (which only slow the clients down) are
        // left out: with them a 16 s control once drew a single majority
        // restart and saw no overlap.
        phase.faults.retain(|(kind, _)| {
            !matches!(kind, FaultKind::ClientSlowLink | FaultKind::ClientReconnect)
        });
        Plan {
            mix: Mix::NoWindow,
            phases: vec![phase],
        }
    }

    /// The safe mix's `AOF always` phase with frequent client pauses (each
    /// paused holder is asked whether it holds the lock after its
    /// validity) and the client-side link faults, whose holders answer
    /// with `holds() > 0`: the checker must find them saying held after
    /// their validity.
    pub fn held_ignores_validity() -> Plan {
        let mut phase = Plan::safe().phases.remove(1);
        phase.name = "holders whose is_held() ignores the validity";
        phase.share = 1.0;
        phase.faults = vec![
            (FaultKind::ClientPause, 4),
            (FaultKind::ClientSlowLink, 1),
            (FaultKind::ClientReconnect, 1),
        ];
        phase.fault_interval_ms = 400;
        phase.held_ignores_validity = true;
        Plan {
            mix: Mix::HeldIgnoresValidity,
            phases: vec![phase],
        }
    }

    /// Rule 3 alone: three nodes without persistence whose wall clocks run
    /// ahead (2.5 s, the top of their 1.5-2.5 s range) and are set right
    /// by a restart, and a recovery window of the largest TTL (0.8 s: rule
    /// 1 kept) but not of the clocks' lead (2.5 s: rule 3 broken). Its one
    /// fault is the clock-lead restart ([`Phase::restart_after_lead`]):
    /// every node set ahead, a holder granted a token with that lead, then
    /// all three killed together and restarted (down 0-300 ms). They come
    /// back with their counters at their own clocks, 2.5 s below that
    /// token; 0.8 s later the window ends, and every lock granted in the
    /// next second or so gets a token below an earlier holder's, though no
    /// lease is lost (each earlier lease ended within the window). With a
    /// window of the lead (2.5 s), the first token after it is above every
    /// one issued before the kill. Restarts come 2-6 s apart, so the
    /// nodes are never set ahead again before the low tokens were issued.
    pub fn clock_lead() -> Plan {
        let ahead = NodeProfile {
            persistence: Persistence::None,
            recovery_ms: CLOCK_LEAD_TTL_MAX,
            offsets_ms: 1_500..=2_500,
        };
        let mut phase = Plan::network_phase();
        phase.name = "clocks 2.5 s ahead, set right by restarts, no persistence, a window of the largest TTL";
        phase.share = 1.0;
        phase.client_groups = 0;
        phase.nodes = vec![ahead; 3];
        phase.faults = vec![(FaultKind::RestartMajority, 1)];
        phase.ttl_ms = 300..=CLOCK_LEAD_TTL_MAX;
        phase.fault_interval_ms = 4_000;
        phase.restart_after_lead = true;
        Plan {
            mix: Mix::ClockLead,
            phases: vec![phase],
        }
    }

    /// The safe mix's single-node phase (the client waits on the server)
    /// on a node without persistence, and nothing else changed but kills
    /// more often (weight 6 in place of 2).
    pub fn single_node_forgets() -> Plan {
        let mut phase = Plan::safe().phases.remove(3);
        phase.name = "single node without persistence";
        phase.share = 1.0;
        for node in &mut phase.nodes {
            node.persistence = Persistence::None;
        }
        // Restarts alone: they are what persistence answers, and every
        // other kind would first take its turn in the schedule's prelude
        // (each kind once), leaving a 12 s run one restart, which can fall
        // where no lock is held and prove nothing either way.
        phase.faults = vec![(FaultKind::Kill9Restart, 1)];
        Plan {
            mix: Mix::SingleNodeForgets,
            phases: vec![phase],
        }
    }

    /// Lease clocks a few percent fast on every node (leases that end 2-4%
    /// early, beyond the 1% + 2 ms allowance, no jumps), and nothing else
    /// that could lose a lock (`AOF always`, no restarts): the holds kept
    /// to the edge of their validity meet the next holder.
    pub fn fast_clocks() -> Plan {
        Plan {
            mix: Mix::FastClocks,
            phases: vec![Plan::skewed_phase(
                "lease clocks 2-4% fast, beyond the drift allowance",
                20_000..=40_000,
                DriftAllowance::DEFAULT,
            )],
        }
    }

    /// Lease clocks within the client's default allowance (0.8-1% fast
    /// on every node) and a client with no drift allowance: the allowance,
    /// alone, is what keeps a hold safe at the edge of its validity.
    pub fn no_drift() -> Plan {
        Plan {
            mix: Mix::NoDrift,
            phases: vec![Plan::skewed_phase(
                "lease clocks 0.8-1% fast, a client without a drift allowance",
                8_000..=10_000,
                DriftAllowance::NONE,
            )],
        }
    }

    /// Five `AOF always` nodes whose lease clocks are skewed (all five at
    /// once, nearly always: faults every 300 ms lasting 0.5-3 s) by `ppm`,
    /// without jumps, and no other fault; TTLs of 1-3 s, so that a lease
    /// that ends a fraction of a percent early ends milliseconds early.
    fn skewed_phase(name: &'static str, ppm: RangeInclusive<i64>, drift: DriftAllowance) -> Phase {
        let mut phase = Plan::network_phase();
        phase.name = name;
        phase.share = 1.0;
        phase.client_groups = 0;
        phase.faults = vec![(FaultKind::LeaseClockSkew, 1)];
        phase.lease_skew = LeaseSkew {
            min_rate_ppm: *ppm.start(),
            max_rate_ppm: *ppm.end(),
            max_jump_ms: 0,
            min_nodes: 5,
            max_nodes: 5,
        };
        phase.ttl_ms = 1_000..=3_000;
        phase.fault_interval_ms = 300;
        phase.drift = drift;
        phase.edge_share = 1.0;
        phase
    }

    /// The safe mix's network phase: five `AOF always` nodes (no clock
    /// offsets) in namespaces, clients in two groups, the network faults
    /// with a few restarts and client pauses.
    fn network_phase() -> Phase {
        Phase {
            name: "network",
            share: 0.3,
            nodes: vec![
                NodeProfile {
                    persistence: Persistence::AofAlways,
                    recovery_ms: 0,
                    offsets_ms: 0..=0,
                };
                5
            ],
            faults: vec![
                (FaultKind::Partition, 3),
                (FaultKind::SplitMajorities, 2),
                (FaultKind::OneWayLoss, 3),
                (FaultKind::Delay, 3),
                (FaultKind::FlakyLink, 3),
                (FaultKind::Kill9Restart, 1),
                (FaultKind::ClientPause, 1),
            ],
            ttl_ms: 300..=SAFE_TTL_MAX,
            fault_interval_ms: 500,
            client_groups: 2,
            client_quorum: None,
            lease_skew: SAFE_LEASE_SKEW,
            drift: DriftAllowance::DEFAULT,
            edge_share: EDGE_SHARE,
            held_ignores_validity: false,
            restart_after_lead: false,
        }
    }

    /// Fault kinds any phase injects.
    pub fn fault_kinds(&self) -> Vec<FaultKind> {
        FaultKind::ALL
            .into_iter()
            .filter(|k| self.phases.iter().any(|p| p.allows(*k)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_safe_mix_obeys_every_rule() {
        for phase in Plan::safe().phases {
            assert_eq!(phase.broken_rules(), Vec::<String>::new(), "{}", phase.name);
        }
    }

    #[test]
    fn the_mixes_that_expect_violations_break_the_rules() {
        for mix in Mix::ALL {
            let plan = mix.plan();
            assert_eq!(plan.mix, mix);
            assert_eq!(Mix::parse(mix.name()), Some(mix));
            for phase in plan.phases {
                assert_eq!(
                    !phase.broken_rules().is_empty(),
                    mix.expects_violations(),
                    "{}",
                    phase.name
                );
            }
        }
    }

    #[test]
    fn each_control_with_its_mechanism_keeps_the_rules_and_changes_nothing_else() {
        for mix in Mix::ALL {
            let Some(with) = mix.mechanism_plan() else {
                assert!(!Mix::CONTROLS.contains(&mix), "{}", mix.name());
                assert!(mix.mechanism().is_none());
                continue;
            };
            assert!(Mix::CONTROLS.contains(&mix), "{}", mix.name());
            assert!(mix.mechanism().is_some());
            assert!(!mix.prevented().is_empty());
            let without = mix.plan();
            assert_eq!(with.phases.len(), without.phases.len());
            for (with, without) in with.phases.iter().zip(&without.phases) {
                assert_eq!(with.broken_rules(), Vec::<String>::new(), "{}", mix.name());
                assert!(!without.broken_rules().is_empty(), "{}", mix.name());
                // What the fault schedule and the workload are drawn from.
                assert_eq!(with.faults, without.faults);
                assert_eq!(with.ttl_ms, without.ttl_ms);
                assert_eq!(with.fault_interval_ms, without.fault_interval_ms);
                assert_eq!(with.lease_skew, without.lease_skew);
                assert_eq!(with.client_groups, without.client_groups);
                assert_eq!(with.edge_share, without.edge_share);
                assert_eq!(with.restart_after_lead, without.restart_after_lead);
                assert_eq!(with.share, without.share);
                assert_eq!(with.nodes.len(), without.nodes.len());
                for (a, b) in with.nodes.iter().zip(&without.nodes) {
                    assert_eq!(a.offsets_ms, b.offsets_ms);
                }
            }
        }
    }

    #[test]
    fn the_clock_lead_control_breaks_only_the_clock_skew_rule() {
        let phase = Plan::clock_lead().phases.remove(0);
        let broken = phase.broken_rules();
        assert!(!broken.is_empty());
        for rule in &broken {
            assert!(rule.contains("clock skew between nodes"), "{rule}");
        }
        assert!(phase.nodes[0].recovery_ms >= *phase.ttl_ms.end());
    }

    #[test]
    fn the_safe_lease_skew_reaches_a_majority_within_the_allowance() {
        let skew = SAFE_LEASE_SKEW;
        assert!(skew.max_nodes >= 3, "a majority of five");
        assert!(skew.max_rate_ppm < DriftAllowance::DEFAULT.ppm);
        for ttl in 1..=SAFE_TTL_MAX {
            assert!(
                skew.worst_shortening_us(ttl) <= DriftAllowance::DEFAULT.of_us(ttl),
                "a {ttl} ms lease can end {} µs early, beyond the allowance's {} µs",
                skew.worst_shortening_us(ttl),
                DriftAllowance::DEFAULT.of_us(ttl)
            );
        }
        // The old bound (0.9%, two jumps per lease) missed that a 2 s
        // lease can meet five jumps.
        let old = LeaseSkew {
            max_rate_ppm: 9_000,
            ..skew
        };
        assert!(
            old.worst_shortening_us(SAFE_TTL_MAX) > DriftAllowance::DEFAULT.of_us(SAFE_TTL_MAX)
        );
    }

    #[test]
    fn the_rules_catch_each_unsafe_setting() {
        let mut phase = Plan::safe().phases.remove(0);
        phase.nodes[3].recovery_ms = 1_000;
        assert_eq!(phase.broken_rules().len(), 2, "TTL and skew");
        let mut phase = Plan::safe().phases.remove(1);
        phase.nodes[0].offsets_ms = -1..=0;
        assert_eq!(
            phase.broken_rules().len(),
            1,
            "backward offset before a restart"
        );
        let mut phase = Plan::safe().phases.remove(1);
        phase.nodes[2].persistence = Persistence::AofEverysec;
        assert!(
            !phase.broken_rules().is_empty(),
            "everysec without a window"
        );
    }
}
