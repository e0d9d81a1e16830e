//! Short chaos runs against real servers: the safe mix must show no
//! violation while doing real work under every fault kind (mutexes,
//! readers and writers of a read-write lock, semaphore permits; in its
//! network phase, partitions, lost replies, delays and lossy links between
//! network namespaces, which needs root and iproute2), and the
//! negative control (no persistence, no recovery window) must show
//! violations of each kind of resource, or the checker proves nothing; and
//! each single-mechanism control runs twice with the same seed and fault
//! schedule, with its mechanism (no violation) and without it (violations
//! of the kinds that mechanism prevents, and of no other kind). `make
//! chaos` runs the long version.
//!
//! The seed is fixed (override with `CHAOS_SEED`) so the fault schedule is
//! the same each time; the summary is printed either way.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use chaos::checker::ViolationKind;
use chaos::plan::{FaultKind, Mix, Plan};
use chaos::Settings;
use common::{pair, seed};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_safe_mix_has_no_violations_under_every_fault() {
    let settings = Settings {
        duration: Duration::from_secs(36),
        seed: seed(),
        ..Settings::default()
    };
    let summary = chaos::run(&settings).await.unwrap();
    println!("{summary}");
    let total = summary.total();
    assert_eq!(total.violations(), 0, "violations:\n{summary}");
    assert!(summary.passed());
    // Real work: holders, tokens and accepted writes in both phases.
    assert!(total.clients.grants >= 30, "too few grants:\n{summary}");
    for phase in &summary.phases {
        assert!(
            phase.clients.grants >= 10 && phase.findings.writes.accepted >= 10,
            "phase {} did too little:\n{summary}",
            phase.name
        );
    }
    assert_eq!(
        total.writes.accepted
            + total.writes.rejected()
            + total.writes.reads
            + total.writes.permits
            + total.clients.styles.watchdog_losses,
        total.clients.tokens,
        "every holder with a token writes, reads or works once, unless its watchdog reported the lock lost"
    );
    // Readers and permit holders ran under the faults too.
    assert!(
        total.clients.shared_grants >= 5 && total.writes.reads >= 5,
        "too few readers:\n{summary}"
    );
    assert!(
        total.clients.permit_grants >= 5 && total.writes.permits >= 5,
        "too few permits:\n{summary}"
    );
    // Every fault kind of the mix was injected, and the pauses happened.
    for kind in Plan::safe().fault_kinds() {
        assert!(
            total.faults.injected(kind) >= 1,
            "{} never injected:\n{summary}",
            kind.name()
        );
    }
    assert_eq!(Plan::safe().fault_kinds().len(), FaultKind::ALL.len());
    assert!(total.clients.pauses >= 1, "no client pause:\n{summary}");
    // The holders were asked whether they hold the lock after their
    // validity had ended (paused holders, holds left to lapse), and none
    // said yes (the violations above include those).
    assert!(
        total.writes.held_asked_after >= 5,
        "too few holders asked after their validity:\n{summary}"
    );
    assert_eq!(
        total.violations_of(ViolationKind::HeldAfterValidity),
        0,
        "{summary}"
    );
    // The faults reached the holds: windows in which faults that can undo
    // a grant (a restart that loses writes, a power loss, a lease clock
    // run fast or jumped; not a slow, stopped or cut-off node) left fewer
    // than a majority of the nodes untouched among the granters, so that
    // the run cannot pass by faults that missed every lock or could not
    // hurt one (runs of this length and seed saw 25-34 threatened, 6-11
    // of them without a majority).
    assert!(
        total.exposure.lost_majority >= 3 && total.exposure.threatened >= 12,
        "too few windows threatened by the faults:\n{summary}"
    );
    // The single-node phase's clients waited on the server.
    let waited: Vec<u64> = summary
        .phases
        .iter()
        .filter_map(|p| p.server_wait_grants)
        .collect();
    assert!(
        waited.len() == 1 && waited[0] >= 1,
        "no single-node phase, or no grant from its queue:\n{summary}"
    );
    // The network phase ran with its nodes and clients in namespaces of
    // their own, and its faults dropped packets on the links.
    let network: Vec<_> = summary.phases.iter().filter_map(|p| p.network).collect();
    assert_eq!(network.len(), 1, "no network phase:\n{summary}");
    assert!(network[0].client_groups >= 2);
    assert!(
        network[0].packets_carried > 1_000 && network[0].packets_dropped > 0,
        "the links did not carry the work or drop anything:\n{summary}"
    );
    // Every hold style succeeded under the faults (an extension that
    // extended, a re-entry that re-entered, a watchdog that kept its lock
    // to the end of the work, a with_lock body that ran to its write, a
    // blocking hold that wrote), and rounds were abandoned: floors on
    // successes, which `passed()` checks too.
    let styles = total.clients.styles;
    assert!(
        styles.extended >= 1
            && styles.reentered >= 1
            && styles.watchdogs_kept >= 1
            && styles.scoped_ran >= 1
            && styles.blocking_held >= 1
            && styles.cancelled_acquires >= 1
            && styles.cancelled_releases >= 1,
        "a hold style never succeeded:\n{summary}"
    );
    // No node answered with an error the faults did not provoke, in any
    // round of any phase; no server died by itself or logged a panic.
    assert_eq!(total.node_errors.unprovoked, 0, "{summary}");
    assert!(
        summary.phases.iter().all(|p| p.server_troubles.is_empty()),
        "{summary}"
    );
    assert_eq!(
        total.faults.failed.values().sum::<u64>(),
        0,
        "faults failed:\n{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_negative_control_reports_violations() {
    // 24 s: it must show every kind of violation, and a 16 s run once saw
    // 20 violations but no reader overlapping a writer (they come with the
    // few majority restarts such a run has; 180 s runs see about 120).
    let settings = Settings {
        duration: Duration::from_secs(24),
        seed: seed(),
        mix: Mix::NegativeControl,
        ..Settings::default()
    };
    let summary = chaos::run(&settings).await.unwrap();
    println!("{summary}");
    let total = summary.total();
    assert!(
        total.violations_of(ViolationKind::Overlap) > 0,
        "restarted nodes without their locks must let two holders overlap:\n{summary}"
    );
    assert!(summary.passed(), "{summary}");
    assert!(total.faults.injected(FaultKind::RestartMajority) >= 1);
    assert!(
        total.violations_of(ViolationKind::TooManyPermits) > 0,
        "restarted nodes without their locks must hand out more permits than a semaphore has:\n{summary}"
    );
    assert!(
        total.reader_writer > 0,
        "restarted nodes without their locks must let a reader and a writer overlap:\n{summary}"
    );
    // The real store (LOCK.FENCED) refused the writes that came out of
    // token order, and its unfenced copy took them: what the fence is for.
    assert_eq!(
        total.violations_of(ViolationKind::StoreDisagreed),
        0,
        "the store's fence must agree with the token order even when the locks fail:\n{summary}"
    );
    assert!(
        total.writes.rejected() == 0 || total.writes.store_refused > 0,
        "writes came out of token order and the store's fence refused none:\n{summary}"
    );
}

/// The network negative control: the network phase's faults alone, with a
/// client that needs only 2 of the 5 nodes. Two groups behind a partition
/// each win a different minority: holders must overlap, or the network
/// phase's zero proves nothing; with the client's own majority, the same
/// schedule shows none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_network_negative_control_reports_violations() {
    let (_, total) = pair(
        Duration::from_secs(16),
        Mix::NetworkControl,
        FaultKind::Partition,
    )
    .await;
    assert!(total.faults.injected(FaultKind::SplitMajorities) >= 1);
    for kind in [
        FaultKind::Kill9Restart,
        FaultKind::RestartMajority,
        FaultKind::StopNode,
        FaultKind::ClockOffset,
    ] {
        assert_eq!(total.faults.injected(kind), 0, "{}", kind.name());
    }
}

/// Holders whose `is_held()` ignores the validity (they answer with
/// `holds() > 0`), under client pauses and the client-side link faults:
/// the checker must find holders that say held after their validity, or
/// the safe mix's zero for that check proves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holders_that_say_held_after_their_validity_are_reported() {
    let settings = Settings {
        duration: Duration::from_secs(8),
        seed: seed(),
        mix: Mix::HeldIgnoresValidity,
        ..Settings::default()
    };
    let summary = chaos::run(&settings).await.unwrap();
    println!("{summary}");
    let total = summary.total();
    assert!(
        total.violations_of(ViolationKind::HeldAfterValidity) > 0,
        "holders whose is_held() ignores the validity must be reported:\n{summary}"
    );
    assert!(summary.passed(), "{summary}");
    assert!(total.faults.injected(FaultKind::ClientPause) >= 1);
}

/// The safe mix's first phase with `lock.recovery-ms 0` and nothing else
/// changed, and with its 3 s window: the recovery window alone keeps it
/// safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_safe_mix_without_the_recovery_window_reports_violations() {
    pair(
        Duration::from_secs(16),
        Mix::NoWindow,
        FaultKind::RestartMajority,
    )
    .await;
}

/// `AOF always` without a window, clocks set back before restarts (rule
/// 2), and the same with a window of the largest TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clocks_stepped_forward_by_restarts_without_the_window_report_violations() {
    pair(
        Duration::from_secs(16),
        Mix::ClockStep,
        FaultKind::RestartMajority,
    )
    .await;
}

/// Lease clocks 2-4% fast, on every node, and nothing else: leases end
/// sooner than the client's default drift allowance covers, which the holds
/// kept to the edge of their validity show; a client whose allowance covers
/// the skew (5% + 2 ms) sees none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_clocks_beyond_the_drift_allowance_report_violations() {
    pair(
        Duration::from_secs(16),
        Mix::FastClocks,
        FaultKind::LeaseClockSkew,
    )
    .await;
}

/// Lease clocks within the default allowance (0.8-1% fast, every node)
/// and a client whose drift allowance is zero, then the default client: the
/// allowance is what keeps a hold at the edge of its validity safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_without_a_drift_allowance_reports_violations() {
    // Leases end 8-30 ms before the client's window (0.8-1% of 1-3 s):
    // 16 s runs found 1-3 overlaps, so this control runs longer.
    pair(
        Duration::from_secs(30),
        Mix::NoDrift,
        FaultKind::LeaseClockSkew,
    )
    .await;
}

/// The single-node phase (the client waits on the server) without
/// persistence, and with `appendfsync always`: the node's persistence is
/// what keeps its waiters from being granted a lock still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_single_node_without_persistence_reports_violations() {
    let (summary, _) = pair(
        Duration::from_secs(12),
        Mix::SingleNodeForgets,
        FaultKind::Kill9Restart,
    )
    .await;
    assert!(
        summary
            .phases
            .iter()
            .any(|p| p.server_wait_grants.is_some()),
        "not the single-node phase:\n{summary}"
    );
}
