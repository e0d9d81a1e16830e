//! The soak's short version for `make test`: one minute of churn on each
//! server (two minutes in all), sampled every 5 s, with maintenance every
//! 12 s. `make soak` runs the long one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

#[test]
fn a_minute_of_churn_leaves_memory_and_counters_in_bounds() {
    let settings = soak::Settings {
        duration: Duration::from_secs(60),
        sample_every: Duration::from_secs(5),
        maintenance: Duration::from_secs(12),
        // Reported, not checked: make test runs other suites beside it.
        latency_check: false,
        ..soak::Settings::default()
    };
    let report = soak::run(&settings);
    println!("{report}");
    assert!(report.passed(), "{report}");
    assert!(report.operations > 10_000, "too little churn:\n{report}");
    assert!(
        report.maintenance.contains(&"BGREWRITEAOF")
            && report.maintenance.contains(&"DEBUG RELOAD")
            && report.maintenance.contains(&"replica resync"),
        "{report}"
    );
    assert!(
        report.samples.iter().map(|s| s.holders).max().unwrap_or(0) > 100,
        "too few locks held at once:\n{report}"
    );
}
