//! Section 12: the Node.js package against the Node.js clients users run
//! today, on servers started here: lock+unlock cycles per second and process
//! CPU per cycle at 1, 16 and 64 concurrent tasks, redislock-native against
//! `redlock` on five masters and against `redis-semaphore`'s Mutex on one
//! node, in one run of `bench/node/bench.mjs` (through
//! `scripts/node-bench.sh`, which builds the package and installs the others);
//! beside the one-node rows, the addon's floor: a cycle's two operations
//! through its runtime and completion queue without the network.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::report::{Report, Target};
use crate::server::{workspace_root, Server};
use crate::{Plan, Result};

/// One figure printed by bench.mjs.
struct Figure {
    client: String,
    nodes: u32,
    tasks: u32,
    cycles_per_sec: f64,
    cpu_us_per_cycle: f64,
    /// Cycles that failed (not counted in the figures).
    failed: u64,
}

/// The value of `"name":` in a flat JSON object line (a string or a number).
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(&format!("\"{name}\":"))? + name.len() + 3;
    let rest = &line[at..];
    if let Some(text) = rest.strip_prefix('"') {
        return text.find('"').map(|end| &text[..end]);
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

fn parse(line: &str) -> Option<Figure> {
    Some(Figure {
        client: field(line, "client")?.to_string(),
        nodes: field(line, "nodes")?.parse().ok()?,
        tasks: field(line, "tasks")?.parse().ok()?,
        cycles_per_sec: field(line, "cyclesPerSec")?.parse().ok()?,
        cpu_us_per_cycle: field(line, "cpuUsPerCycle")?.parse().ok()?,
        failed: field(line, "failed")
            .and_then(|f| f.parse().ok())
            .unwrap_or(0),
    })
}

/// Whether an earlier server's run built the Node.js package already.
static NODE_BUILT: AtomicBool = AtomicBool::new(false);

pub fn run(plan: &Plan, report: &mut Report) -> Result<()> {
    let five = (0..5)
        .map(|_| Server::start(&[]))
        .collect::<Result<Vec<Server>>>()?;
    let one = Server::start(&[])?;
    let urls: Vec<String> = five.iter().map(Server::url).collect();
    let rounds = if plan.quick { 1 } else { 3 };
    println!("12. Node.js clients: five masters and one node (rounds: {rounds})");
    let mut command = Command::new(workspace_root().join("scripts/node-bench.sh"));
    // The package is built by cargo (through napi): without the variables
    // `cargo run` set for this program (`CARGO_MANIFEST_DIR` and the
    // like), which build scripts read (`ring`'s does) and would otherwise
    // see change between this build and every other, rebuilding the TLS
    // stack and the client on each side (a minute of every `make bench`).
    // The user's own Cargo settings (`CARGO_HOME`, `CARGO_NET_*`,
    // `CARGO_PROFILE_*`, ...) are kept.
    for (name, _) in std::env::vars_os() {
        let name_str = name.to_string_lossy();
        let set_by_cargo_run = name_str.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_MANIFEST_LINKS",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_RUSTC_CURRENT_DIR",
            ]
            .contains(&name_str.as_ref());
        if set_by_cargo_run {
            command.env_remove(&name);
        }
    }
    // The package is built (and its benchmark's clients installed) by the
    // first server's run; the others take it as it is.
    if NODE_BUILT.load(Ordering::Relaxed) {
        command.env("NODE_BENCH_BUILT", "1");
    }
    let output = command
        .arg("--five")
        .arg(urls.join(","))
        .arg("--one")
        .arg(one.url())
        .arg("--warmup")
        .arg(plan.client_warmup.as_millis().to_string())
        .arg("--window")
        .arg(plan.client_window.as_millis().to_string())
        .arg("--rounds")
        .arg(rounds.to_string())
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if output.status.success() {
        NODE_BUILT.store(true, Ordering::Relaxed);
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: String = stderr
            .lines()
            .rev()
            .take(15)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        return Err(format!("scripts/node-bench.sh failed ({}):\n{tail}", output.status).into());
    }
    let figures: Vec<Figure> = stdout.lines().filter_map(parse).collect();
    const NATIVE: &str = "redislock-native";
    const FLOOR: &str = "redislock-native floor";
    // The other client of a row: any but ours and our floor.
    let find = |client: Option<&str>, nodes: u32, tasks: u32| {
        figures.iter().find(|f| {
            f.nodes == nodes
                && f.tasks == tasks
                && match client {
                    Some(name) => f.client == name,
                    None => f.client != NATIVE && f.client != FLOOR,
                }
        })
    };
    let mut table = String::from(
        "`bench/node/bench.mjs`, one Node process, all clients interleaved per task count. \
         Every task locks and unlocks a key of its own (no contention), TTL 10 s, no retries \
         (the floor: two operations that send nothing, on a handle each task took once); \
         redis-semaphore's Mutex without its refresh timer (none of the clients renews). \
         CPU is the whole Node process's (`process.cpuUsage()`, the addon's runtime threads \
         included) per cycle; medians of the rounds. The other clients' versions are pinned \
         in `bench/node/package-lock.json` (`redlock` 5.0.0-beta.2 over ioredis; its fork \
         `@sesamecare-oss/redlock` is used only if it does not load).\n\n\
         | client | nodes | tasks | cycles/s | CPU µs/cycle | failed cycles |\n|---|---|---|---|---|---|\n",
    );
    for f in &figures {
        table.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.1} | {} |\n",
            f.client, f.nodes, f.tasks, f.cycles_per_sec, f.cpu_us_per_cycle, f.failed
        ));
    }
    for (nodes, base_name) in [(5, "redlock"), (1, "redis-semaphore Mutex")] {
        for tasks in [1, 16, 64] {
            let (Some(ours), Some(base)) =
                (find(Some(NATIVE), nodes, tasks), find(None, nodes, tasks))
            else {
                return Err(format!(
                    "bench.mjs printed no figure for {nodes} node(s), {tasks} tasks"
                )
                .into());
            };
            let targeted = tasks >= 16;
            let base_label = if nodes == 5 {
                base.client.as_str()
            } else {
                base_name
            };
            report.row(
                12,
                format!("lock+unlock cycles/s, {nodes} node(s), {tasks} tasks: redislock-native vs {base_label}"),
                ours.cycles_per_sec,
                Some(base.cycles_per_sec),
                "cycles/s",
                targeted.then_some(Target::RatioAtLeast(2.0)),
            );
            report.row(
                12,
                format!("CPU per cycle, {nodes} node(s), {tasks} tasks: redislock-native vs {base_label}"),
                ours.cpu_us_per_cycle,
                Some(base.cpu_us_per_cycle),
                "µs",
                targeted.then_some(Target::RatioAtMost(0.5)),
            );
            if let (1, Some(floor)) = (nodes, find(Some(FLOOR), nodes, tasks)) {
                report.row(
                    12,
                    format!(
                        "(figure) CPU per cycle, 1 node(s), {tasks} tasks: the addon's floor \
                         (two operations through its runtime, no network) vs {base_label}"
                    ),
                    floor.cpu_us_per_cycle,
                    Some(base.cpu_us_per_cycle),
                    "µs",
                    None,
                );
            }
        }
    }
    report.detail(12, table);
    drop((five, one));
    Ok(())
}
