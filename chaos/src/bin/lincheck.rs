//! `lincheck`: records a history of one node under `kill -9` and checks it
//! for linearizability with `todc-utils`' Wing–Gong–Lowe checker (see
//! `chaos::linear`).
//!
//! ```text
//! lincheck [--seconds N] [--seed N] [--connections N] [--keys N] [--waiters N]
//!          [--shared | --exclusive] [--negative-control | --fast-lease-clock PPM]
//! ```
//!
//! Exit status: 0 when the history is linearizable and its corrupted copy
//! is not (a negative control: when the history is not linearizable), 1
//! otherwise, 2 on a usage or setup error.

use std::process::ExitCode;
use std::time::Duration;

use chaos::linear::{self, recorder::Settings};

const USAGE: &str = "usage: lincheck [--seconds N] [--seed N] [--connections N] [--keys N]
                [--waiters N] [--shared | --exclusive] [--negative-control | --fast-lease-clock PPM]

Records single-node histories (many connections, pipelines, MULTI, kill -9 and
restarts with appendfsync always) and checks each key's history for
linearizability against the re-entrant lock's timed sequential
specification (leases of 100 to 800 ms end within their bounds).

  --seconds N       recording length (default: $LINCHECK_SECONDS or 30)
  --seed N          seed of the commands and the kills (default 20261124)
  --connections N   connections (default 8)
  --keys N          lock keys (default 18 for each 8 s started, the first
                    6 of each 18 taken by the WAIT clients too: each key's
                    history as long as in make test's 8 s run, whatever the
                    length; the checker's work grows steeply with each
                    key's steps)
  --waiters N       clients that take locks with WAIT (default 3, at most 6;
                    0 in the negative controls, given after them to change)
  --shared          keys are exclusive locks, read-write locks and
                    semaphores of 2 permits in turn (the default)
  --exclusive       every key an exclusive lock
  --negative-control  the node without persistence (restarts forget every
                    lock): the history must NOT be linearizable
  --fast-lease-clock PPM  a negative control: the node's lease clock runs PPM
                    parts per million fast (LOCK.DEBUG MONOTONIC-RATE), no
                    kills: leases end early, the history must NOT be
                    linearizable";

fn parse(mut args: impl Iterator<Item = String>) -> Result<Settings, String> {
    let mut settings = Settings {
        duration: Duration::from_secs(30),
        ..Settings::default()
    };
    if let Ok(seconds) = std::env::var("LINCHECK_SECONDS") {
        if !seconds.trim().is_empty() {
            settings.duration = Duration::from_secs(number("LINCHECK_SECONDS", Some(seconds))?);
        }
    }
    let mut keys = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => settings.duration = Duration::from_secs(number(&arg, args.next())?),
            "--seed" => settings.seed = number(&arg, args.next())?,
            "--connections" => settings.connections = number(&arg, args.next())?,
            "--keys" => keys = Some(number(&arg, args.next())?),
            "--waiters" => settings.waiters = number(&arg, args.next())?,
            "--shared" => settings.shared = true,
            "--exclusive" => settings.shared = false,
            "--negative-control" => {
                settings.persistence = false;
                settings.waiters = 0;
            }
            "--fast-lease-clock" => {
                settings = settings.fast_lease_clock(number(&arg, args.next())?);
            }
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    // The keys of an 8 s run (Settings::default) for each 8 s started, and
    // as many of them waited on, unless given (then a third waited on).
    let eights = usize::try_from(settings.duration.as_secs().div_ceil(8))
        .unwrap_or(usize::MAX)
        .max(1);
    let default = Settings::default();
    settings.keys = keys.unwrap_or_else(|| eights.saturating_mul(default.keys));
    settings.waited_keys = match keys {
        Some(keys) => keys.div_ceil(3),
        None => eights.saturating_mul(default.waited_keys),
    };
    if settings.keys == 0 || settings.connections == 0 {
        return Err("--keys and --connections must be at least 1".into());
    }
    if settings.waiters > 6 {
        return Err("--waiters: at most 6 (the model's queue)".into());
    }
    Ok(settings)
}

fn number<T: std::str::FromStr>(name: &str, value: Option<String>) -> Result<T, String> {
    let value = value.ok_or_else(|| format!("{name} needs a value"))?;
    value
        .trim()
        .parse()
        .map_err(|_| format!("{name}: not a valid number: {value:?}"))
}

fn main() -> ExitCode {
    let settings = match parse(std::env::args().skip(1)) {
        Ok(settings) => settings,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("lincheck: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("lincheck: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "lincheck: {} s, {} connections, {} keys, seed {}",
        settings.duration.as_secs(),
        settings.connections,
        settings.keys,
        settings.seed
    );
    match runtime.block_on(linear::run(&settings)) {
        Ok(report) => {
            println!("{report}");
            let passed = if settings.persistence && settings.lease_clock_ppm == 0 {
                report.passed()
            } else {
                !report.verdict.failed.is_empty()
            };
            if passed {
                println!("RESULT: PASS");
                ExitCode::SUCCESS
            } else {
                println!("RESULT: FAIL");
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("lincheck: {e}");
            ExitCode::from(2)
        }
    }
}
