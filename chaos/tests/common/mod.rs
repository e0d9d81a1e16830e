//! What the chaos tests share: the seed, and a single-mechanism control
//! run as a same-seed pair.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::time::Duration;

use chaos::checker::ViolationKind;
use chaos::faults::{same_faults_started, SAME_START_MS};
use chaos::plan::{FaultKind, Mix};
use chaos::report::{Figures, Summary};
use chaos::Settings;

/// The run's seed: fixed, so the fault schedule is the same each time
/// (override with `CHAOS_SEED`).
pub fn seed() -> u64 {
    std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_260_522)
}

/// A single-mechanism control, run twice with the same seed for
/// `duration`: once with the mechanism it removes put back and nothing else
/// changed (the same nodes, faults, fault parameters and workload), which
/// must show no violation, and once without it, which must show violations
/// of the mechanism's primary kind and of no kind the mechanism does not
/// prevent ([`Mix::prevented`]), so that the violations are tied to the
/// mechanism, not to the faults or the checker. Both runs must draw the
/// same fault schedule (the parameters of every fault, in order; the
/// shorter list a prefix of the longer) and start the same faults, by kind
/// and moment, over the part of the schedule both reached
/// ([`same_faults_started`]: a fault one run skipped or did not start is a
/// difference), both must be otherwise sound, and
/// `fault` must have been injected in both. Returns the run without the
/// mechanism and its totals.
pub async fn pair(duration: Duration, mix: Mix, fault: FaultKind) -> (Summary, Figures) {
    let mechanism = mix.mechanism().unwrap();
    let run = |with_mechanism| {
        let settings = Settings {
            duration,
            seed: seed(),
            mix,
            with_mechanism,
            ..Settings::default()
        };
        async move {
            let summary = chaos::run(&settings).await.unwrap();
            println!("{summary}");
            summary
        }
    };
    let with = run(true).await;
    let without = run(false).await;
    assert_eq!(with.phases.len(), without.phases.len());
    for (a, b) in with.phases.iter().zip(&without.phases) {
        let common = a.faults.drawn.len().min(b.faults.drawn.len());
        assert_eq!(
            a.faults.drawn[..common],
            b.faults.drawn[..common],
            "the same seed must draw the same fault schedule with and without {mechanism}"
        );
        // What ran, not only what was drawn: the same faults started, by
        // kind and moment (a fault one run skipped or never started fails).
        let started = same_faults_started(&a.faults, &b.faults, SAME_START_MS).unwrap_or_else(|why| {
            panic!(
                "the same seed must start the same faults with and without {mechanism} (phase {}): {why}\nwith:\n{with}\nwithout:\n{without}",
                a.name
            )
        });
        assert!(
            started >= 2,
            "too few faults started in phase {}: {started}",
            a.name
        );
    }
    let kept = with.total();
    assert_eq!(
        kept.violations(),
        0,
        "with {mechanism}, the {} control must show no violation:\n{with}",
        mix.name()
    );
    assert!(with.passed(), "{with}");
    assert!(
        kept.faults.injected(fault) >= 1,
        "{}:\n{with}",
        fault.name()
    );
    let total = without.total();
    let prevented = mix.prevented();
    assert!(
        total.violations_of(prevented[0]) > 0,
        "without {mechanism}, the {} control must show {}:\n{without}",
        mix.name(),
        prevented[0].name()
    );
    for kind in ViolationKind::ALL {
        if !prevented.contains(&kind) {
            assert_eq!(
                total.violations_of(kind),
                0,
                "without {mechanism}, {} is not what the mechanism prevents:\n{without}",
                kind.name()
            );
        }
    }
    assert!(without.passed(), "{without}");
    assert!(
        total.faults.injected(fault) >= 1,
        "{}:\n{without}",
        fault.name()
    );
    (without, total)
}
