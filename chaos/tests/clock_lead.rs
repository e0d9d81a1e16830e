//! The clock-lead control (rule 3 of the deployment rules alone): three
//! nodes without persistence whose wall clocks run 2.5 s ahead until a
//! restart sets them right, with a recovery window of the largest TTL but
//! not of the clocks' lead. Its one fault is deterministic: every node is
//! set ahead, a holder is granted a token with that lead, and all three are
//! killed at once; once their 0.8 s window ends they issue tokens about
//! 2.5 s below that one, so the next holders' tokens are below an earlier
//! holder's, while no lease is lost. Run as a same-seed pair: with a window
//! of the lead (2.5 s) no violation at all; without it, tokens out of order
//! (and what follows from them) and never an overlap. Apart from the chaos
//! suite's own binary so that it runs in `make test`'s lighter fault-suite
//! job (two 12 s runs of three nodes: about 30 s per server).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use chaos::checker::ViolationKind;
use chaos::plan::{FaultKind, Mix};
use common::pair;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clocks_ahead_set_right_by_a_restart_without_a_window_of_their_lead_report_token_order() {
    let (summary, total) = pair(
        Duration::from_secs(12),
        Mix::ClockLead,
        FaultKind::RestartMajority,
    )
    .await;
    assert_eq!(
        total.violations_of(ViolationKind::Overlap),
        0,
        "the window of the largest TTL keeps every lease:\n{summary}"
    );
    assert!(
        total.faults.injected(FaultKind::RestartMajority) >= 2,
        "fewer than two clock-lead restarts:\n{summary}"
    );
}
