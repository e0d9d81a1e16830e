//! `make bench`: the redis-lock module's commands against what users run
//! today, and the Redlock client against rslock and etcd, in one run on
//! servers this program starts and stops itself, every section on each
//! server of `BENCH_SERVERS` in turn (`redis7 valkey8 redis8 valkey9`,
//! default all four). Prints a table of ratios against the targets of
//! issues 6 and 35 and writes BENCHMARKS.md with one table (and chart) per
//! server.
//!
//! ```text
//! redis-lock-bench [--quick] [--out FILE] [--only 1,2,…]
//! ```
//!
//! `--quick` (or `QUICK=1`) runs every section with fewer requests, shorter
//! windows and one round (under five minutes for the four servers). `--only` runs some sections
//! (1 acquire, 2 release, 3 re-entry, 4 memory, 5 clients, 6 contention,
//! 7 scale, 8 do no harm, 9 shared locks and semaphores, 10 fenced writes, 11 native anchors,
//! 12 Node.js clients: needs node and npm, 13 against etcd).
//! `--out` writes the report elsewhere than BENCHMARKS.md at the workspace
//! root (the charts go beside it).

mod anchors;
mod callgrind;
mod churn;
mod clients;
mod contention;
mod etcd;
mod fenced;
mod host;
mod micro;
mod node;
mod report;
mod server;
mod shared;
mod tools;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use report::{Context, Report};
use server::Server;

pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every lock's owner / token: 36 bytes, the length of a UUID string.
pub const OWNER: &str = "7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c";

/// How much of everything a run does.
pub struct Plan {
    pub quick: bool,
    pub rounds: usize,
    pub acquire_p32: u64,
    pub acquire_p1: u64,
    pub release_locks: u64,
    pub release_ops: u64,
    /// Section 2 is the noisiest ratio (each run is short and its baseline
    /// moves most): more rounds, so that its median settles.
    pub release_rounds: usize,
    pub reentry_locks: u64,
    pub reentry_ops: u64,
    pub memory_locks: u64,
    pub scale_big: u64,
    pub scale_ops: u64,
    pub scale_window: Duration,
    pub expiry_locks: u64,
    pub client_warmup: Duration,
    pub client_window: Duration,
    pub contention_warmup: Duration,
    pub contention_window: Duration,
    pub fifo_rounds: usize,
    pub latency_trials: usize,
    /// Requests per redis-benchmark run of section 8.
    pub host_ops: u64,
}

impl Plan {
    fn full() -> Plan {
        Plan {
            quick: false,
            rounds: 3,
            acquire_p32: 2_000_000,
            acquire_p1: 300_000,
            release_locks: 2_000_000,
            release_ops: 400_000,
            release_rounds: 5,
            reentry_locks: 100_000,
            reentry_ops: 2_000_000,
            memory_locks: 1_000_000,
            scale_big: 1_000_000,
            scale_ops: 500_000,
            scale_window: Duration::from_secs(3),
            expiry_locks: 1_000_000,
            client_warmup: Duration::from_millis(500),
            client_window: Duration::from_secs(3),
            contention_warmup: Duration::from_millis(500),
            contention_window: Duration::from_secs(5),
            fifo_rounds: 3,
            latency_trials: 30,
            host_ops: 1_000_000,
        }
    }

    /// Every section on each of four servers in under five minutes: one
    /// round, a fifth to a tenth of the full run's locks, sub-second windows.
    fn quick() -> Plan {
        Plan {
            quick: true,
            rounds: 1,
            acquire_p32: 100_000,
            acquire_p1: 50_000,
            release_locks: 100_000,
            release_ops: 50_000,
            release_rounds: 1,
            reentry_locks: 50_000,
            reentry_ops: 100_000,
            memory_locks: 100_000,
            scale_big: 100_000,
            scale_ops: 100_000,
            scale_window: Duration::from_millis(500),
            expiry_locks: 100_000,
            client_warmup: Duration::from_millis(100),
            client_window: Duration::from_millis(300),
            contention_warmup: Duration::from_millis(100),
            contention_window: Duration::from_millis(600),
            fifo_rounds: 1,
            latency_trials: 5,
            host_ops: 20_000,
        }
    }
}

/// The median of `v` (0 when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The `q` quantile of sorted `v` (nearest rank; 0 when empty).
pub fn percentile(v: &[u32], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    f64::from(v[i.min(v.len() - 1)])
}

struct Args {
    quick: bool,
    out: PathBuf,
    only: Vec<u8>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        quick: std::env::var("QUICK").is_ok_and(|v| !v.is_empty() && v != "0"),
        out: server::workspace_root().join("BENCHMARKS.md"),
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--out" => args.out = PathBuf::from(it.next().ok_or("--out needs a file")?),
            "--only" => {
                for part in it.next().ok_or("--only needs a list")?.split(',') {
                    args.only.push(part.trim().parse()?);
                }
            }
            "-h" | "--help" => {
                println!(
                    "redis-lock-bench [--quick] [--out FILE] [--only 1,2,3,4,5,6,7,8,9,10,11,12,13]\n\
                     (BENCH_SERVERS=\"redis7 valkey8 redis8 valkey9\" picks the servers)"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (try --help)").into()),
        }
    }
    Ok(args)
}

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::exit(1);
        }
    }
}

/// Runs the sections; Ok(false) when some section failed (the report is
/// still written, with the error in it).
fn run() -> Result<bool> {
    let args = parse_args()?;
    let plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    let wanted = |s: u8| args.only.is_empty() || args.only.contains(&s);
    for tool in ["redis-cli", "redis-benchmark"] {
        if std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_err()
        {
            return Err(
                format!("{tool} is not installed (make bench installs redis-tools)").into(),
            );
        }
    }
    let kinds = server::Kind::from_env()?;
    let _ = std::fs::remove_dir_all(server::run_dir());
    let started = Instant::now();
    let started_load = report::loadavg();
    println!(
        "redis-lock bench, {} mode, load average {started_load}",
        if plan.quick { "quick" } else { "full" }
    );
    let mut report = Report::default();
    let mut ok = true;
    let mut fail = |report: &mut Report, section: u8, e: Error| {
        eprintln!("section {section} failed: {e}");
        report.detail(section, format!("**This section failed in this run:** {e}"));
        ok = false;
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    for kind in &kinds {
        server::select(kind);
        report.set_server(&kind.label);
        println!(
            "\n== {} ({}, {})",
            kind.label,
            kind.name,
            kind.binary.display()
        );
        let server_started = Instant::now();
        if let Err(e) = run_server(&plan, &runtime, &wanted, &mut report, &mut fail) {
            // Section 0: the server itself (it did not start, say).
            fail(&mut report, 0, e);
        }
        println!(
            "== {} done in {:.0} s",
            kind.label,
            server_started.elapsed().as_secs_f64()
        );
    }
    drop(runtime);

    let finished_load = report::loadavg();
    println!("\n{}", report.text_table());
    write_report(
        &args.out,
        &plan,
        &report,
        started,
        started_load,
        finished_load,
    )?;
    println!(
        "wrote {} ({:.0} s)",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(server::run_dir());
    Ok(ok)
}

/// Every wanted section on the selected server.
fn run_server(
    plan: &Plan,
    runtime: &tokio::runtime::Runtime,
    wanted: &dyn Fn(u8) -> bool,
    report: &mut Report,
    fail: &mut dyn FnMut(&mut Report, u8, Error),
) -> Result<()> {
    // One wanted section, its failure recorded, its time printed.
    let mut section =
        |n: u8, report: &mut Report, run: &mut dyn FnMut(&mut Report) -> Result<()>| {
            if !wanted(n) {
                return;
            }
            let started = Instant::now();
            if let Err(e) = run(report) {
                fail(report, n, e);
            }
            println!("   [section {n}: {:.0} s]", started.elapsed().as_secs_f64());
        };
    if [1, 2, 3, 4, 6, 7, 9, 10].into_iter().any(wanted) {
        // Sections 1-4, 6, 7, 9, 10: one module-loaded server, baselines on it too.
        let server = Server::start(&[])?;
        println!("server on port {} (pid {})", server.port(), server.pid());
        let scripts = micro::load_scripts(&server)?;
        section(1, report, &mut |r| micro::acquire(&server, plan, r));
        section(2, report, &mut |r| {
            micro::release(&server, &scripts, plan, r)
        });
        section(3, report, &mut |r| {
            micro::reentry(&server, &scripts, plan, r)
        });
        let mut load_time = Duration::from_secs(5);
        section(4, report, &mut |r| {
            load_time = micro::memory(plan, r)?;
            Ok(())
        });
        section(7, report, &mut |r| {
            micro::scale(&server, &scripts, plan, load_time, runtime, r)
        });
        section(9, report, &mut |r| shared::run(&server, plan, r));
        section(10, report, &mut |r| fenced::run(&server, plan, r));
        section(6, report, &mut |r| {
            runtime.block_on(contention::run(
                server.url(),
                scripts.unlock.clone(),
                plan,
                r,
            ))
        });
    }
    section(5, report, &mut |r| {
        let servers = (0..5)
            .map(|_| Server::start(&[]))
            .collect::<Result<Vec<Server>>>()?;
        let urls: Vec<String> = servers.iter().map(Server::url).collect();
        runtime.block_on(clients::run(urls, plan, r))
    });
    section(8, report, &mut |r| host::run(plan, r));
    section(11, report, &mut |r| anchors::run(plan, r));
    section(12, report, &mut |r| node::run(plan, r));
    section(13, report, &mut |r| etcd::run(plan, runtime, r));
    Ok(())
}

fn write_report(
    out: &Path,
    plan: &Plan,
    report: &Report,
    started: Instant,
    started_load: String,
    finished_load: String,
) -> Result<()> {
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let stem = out
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("BENCHMARKS")
        .to_lowercase();
    std::fs::create_dir_all(dir)?;
    // Beside the report, or in bench/ for the workspace's BENCHMARKS.md.
    let prefix = if dir.canonicalize().ok() == server::workspace_root().canonicalize().ok() {
        "bench/".to_string()
    } else {
        String::new()
    };
    // One ratio chart (and mass-expiry chart) per server.
    let mut charts = Vec::new();
    let kinds = server::Kind::from_env().unwrap_or_default();
    for (i, label) in report.servers.iter().enumerate() {
        let part = report.for_server(label);
        let tag = kinds
            .iter()
            .find(|k| &k.label == label)
            .map(|k| k.name.to_string())
            .unwrap_or_else(|| format!("server{i}"));
        let chart = format!("{prefix}{stem}-ratios-{tag}.svg");
        report::ratio_chart(&part, &dir.join(&chart))?;
        let expiry_chart = if part.expiry_series.is_empty() {
            None
        } else {
            let file = format!("{prefix}{stem}-expiry-{tag}.svg");
            report::expiry_chart(&part, &dir.join(&file))?;
            Some(file)
        };
        charts.push((label.clone(), chart, expiry_chart));
    }
    let ctx = Context {
        mode: if plan.quick { "quick" } else { "full" },
        machine: machine(),
        versions: versions(),
        commands: tools::recorded(),
        started_load,
        finished_load,
        duration_s: started.elapsed().as_secs_f64(),
        charts,
    };
    let analysis = analysis(report);
    std::fs::write(out, report::markdown(report, &ctx, &analysis))?;
    Ok(())
}

/// For each missed target: the row, and the profile notes kept in
/// bench/analysis.md under a heading for its section (`## 4`).
fn analysis(report: &Report) -> String {
    let notes = std::fs::read_to_string(server::workspace_root().join("bench/analysis.md"))
        .unwrap_or_default();
    let note_for = |section: u8| -> Option<String> {
        let heading = format!("## {section}");
        let start = notes.lines().position(|l| l.trim() == heading)?;
        let body: Vec<&str> = notes
            .lines()
            .skip(start + 1)
            .take_while(|l| !l.starts_with("## "))
            .collect();
        Some(body.join("\n").trim().to_string())
    };
    let mut out = String::new();
    let mut sections: Vec<u8> = Vec::new();
    for row in report.rows.iter().filter(|r| r.met() == Some(false)) {
        out.push_str(&format!(
            "- **{} {}. {}**: {} {} (ratio {}), target {}.\n",
            row.server,
            row.section,
            row.what,
            row.ours.round(),
            row.unit,
            row.ratio()
                .map(|r| format!("{r:.2}×"))
                .unwrap_or_else(|| "–".into()),
            match row.target {
                Some(report::Target::RatioAtLeast(x)) => format!("≥ {x}×"),
                Some(report::Target::RatioAtMost(x)) => format!("≤ {x}×"),
                Some(report::Target::ValueAtMost(x)) => format!("≤ {x}"),
                Some(report::Target::ValueAtLeast(x)) => format!("≥ {x}"),
                None => "–".into(),
            }
        ));
        if !sections.contains(&row.section) {
            sections.push(row.section);
        }
    }
    for section in sections {
        if let Some(note) = note_for(section) {
            out.push_str(&format!("\n**Section {section}.** {note}\n"));
        }
    }
    out
}

fn first_line_with(path: &str, prefix: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()?.lines().find_map(|l| {
        l.starts_with(prefix)
            .then(|| l.split(':').nth(1).unwrap_or("").trim().to_string())
    })
}

fn machine() -> Vec<(String, String)> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get().to_string())
        .unwrap_or_else(|_| "?".into());
    let memory = first_line_with("/proc/meminfo", "MemTotal")
        .and_then(|kb| kb.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0))
        .unwrap_or_else(|| "?".into());
    vec![
        ("cores (nproc)".into(), cores),
        (
            "CPU".into(),
            first_line_with("/proc/cpuinfo", "model name").unwrap_or_else(|| "?".into()),
        ),
        ("memory".into(), memory),
        (
            "kernel".into(),
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "?".into()),
        ),
    ]
}

/// Versions of the locked crates this benchmark compares.
fn lock_version(name: &str) -> String {
    let lock =
        std::fs::read_to_string(server::workspace_root().join("Cargo.lock")).unwrap_or_default();
    let needle = format!("name = \"{name}\"");
    lock.split("[[package]]")
        .find(|p| p.lines().any(|l| l.trim() == needle))
        .and_then(|p| {
            p.lines()
                .find_map(|l| l.trim().strip_prefix("version = \"")?.strip_suffix('"'))
                .map(str::to_string)
        })
        .unwrap_or_else(|| "?".into())
}

fn versions() -> Vec<(String, String)> {
    let git = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(server::workspace_root())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "?".into());
    let crates = [
        "redis-lock",
        "redis-lock-client",
        "rslock",
        "redis",
        "tokio",
        "plotters",
    ]
    .iter()
    .map(|c| format!("{c} {}", lock_version(c)))
    .collect::<Vec<_>>()
    .join(", ");
    let mut out: Vec<(String, String)> = server::Kind::from_env()
        .unwrap_or_default()
        .into_iter()
        .map(|k| {
            (
                format!("server `{}`", k.name),
                format!(
                    "{} ({})",
                    tools::version_of(&k.binary.to_string_lossy(), "--version"),
                    k.binary.display()
                ),
            )
        })
        .collect();
    out.push(("etcd".into(), tools::version_of("etcd", "--version")));
    out.extend([
        (
            "redis-benchmark".into(),
            tools::version_of("redis-benchmark", "--version"),
        ),
        ("rustc".into(), tools::version_of("rustc", "--version")),
        ("crates".into(), crates),
        ("this tree".into(), format!("git {git}")),
    ]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_percentiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 51.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn owner_is_36_bytes() {
        assert_eq!(OWNER.len(), 36);
        assert_eq!(micro::TEXT_OWNER.len(), 36);
    }

    #[test]
    fn versions_come_from_the_lock_file() {
        assert_ne!(lock_version("redis"), "?");
    }
}
