//! `make soak`: steady lock churn for `--minutes N` (default 30, or
//! `SOAK_MINUTES`), sampled every 10 s; exits non-zero when a check fails.

use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let minutes: f64 = std::env::args()
        .skip_while(|arg| arg != "--minutes")
        .nth(1)
        .or_else(|| std::env::var("SOAK_MINUTES").ok())
        .and_then(|m| m.parse().ok())
        .unwrap_or(30.0);
    let settings = soak::Settings {
        duration: Duration::from_secs_f64(minutes.max(0.1) * 60.0),
        ..soak::Settings::default()
    };
    let report = soak::run(&settings);
    println!("{report}");
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
