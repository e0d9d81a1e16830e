//! Section 8: do no harm. What loading the module costs the server's other
//! commands, measured as instructions per command under callgrind
//! (`bench/callgrind-host.sh`: the whole server, with the module loaded and
//! without, interleaved rounds, median, on every server it finds; the
//! target is ≤ 1.01×), with the time per command beside it; then, as a
//! figure, throughput of the same plain workload (`SET`, `GET`, `EXPIRE`,
//! `RENAME`, `DEL` on keys that are not locks) with redis-benchmark.

use crate::callgrind;
use crate::micro::{alternate, runs_detail};
use crate::report::{Report, Target};
use crate::server::Server;
use crate::tools::{pipe_load, redis_benchmark, resp, CLIENTS};
use crate::{median, Plan, Result};
use std::fmt::Write as _;

/// Keys the workload spreads over (preloaded, so every command finds one);
/// a fifth of them in a quick run.
const KEYSPACE: u64 = 100_000;
/// Pipelined, so that the server's own work shows rather than syscalls.
const PIPELINE: u32 = 16;

/// The callgrind measure (`bench/callgrind-host.sh`), one row per server
/// and command.
fn instructions(plan: &Plan, report: &mut Report) -> Result<()> {
    let out = callgrind::run("callgrind-host.sh", &[], plan)?;
    for row in &out.rows {
        // server version command ir_with ir_without ratio ns_with ns_without ns_ratio
        let (Some(with), Some(without)) = (callgrind::number(row, 3), callgrind::number(row, 4))
        else {
            continue;
        };
        report.row(
            8,
            format!(
                "{} {} {} instructions/command with the module vs without",
                callgrind::text(row, 0),
                callgrind::text(row, 1),
                callgrind::text(row, 2)
            ),
            with,
            Some(without),
            "instr/cmd",
            Some(Target::RatioAtMost(1.01)),
        );
    }
    report.detail(
        8,
        format!(
            "Instructions and time per command (`bench/callgrind-host.sh`):\n\n{}",
            out.table
        ),
    );
    Ok(())
}

pub fn run(plan: &Plan, report: &mut Report) -> Result<()> {
    println!("8. do no harm: plain commands with and without the module");
    instructions(plan, report)?;
    let with = Server::start(&[])?;
    let without = Server::start_plain(&[])?;
    let workloads: [(&str, &[&str]); 4] = [
        ("SET", &["SET", "key:__rand_int__", "value"]),
        ("GET", &["GET", "key:__rand_int__"]),
        ("EXPIRE", &["EXPIRE", "key:__rand_int__", "100000"]),
        ("DEL", &["DEL", "key:__rand_int__"]),
    ];
    let mut details = String::new();
    let keyspace = if plan.quick { KEYSPACE / 5 } else { KEYSPACE };
    // Keys written before each run (random, so four times the keyspace).
    let fill = keyspace * 4;
    for (name, command) in workloads {
        let (ours, base, lines) = alternate(plan.rounds * 2, |loaded| {
            let server = if loaded { &with } else { &without };
            // Every key present, as the commands expect.
            redis_benchmark(
                server.port(),
                fill,
                PIPELINE,
                Some(keyspace),
                &["SET", "key:__rand_int__", "value"],
            )?;
            redis_benchmark(
                server.port(),
                plan.host_ops,
                PIPELINE,
                Some(keyspace),
                command,
            )
        })?;
        report.row(
            8,
            format!("{name} with the module vs without, P{PIPELINE}"),
            ours,
            Some(base),
            "ops/s",
            None,
        );
        let _ = writeln!(
            details,
            "`{}`:\n\n{}",
            command.join(" "),
            runs_detail(&lines)
        );
    }
    // RENAME needs a key that exists each time: `redis-cli --pipe` renames
    // preloaded keys `a:N` to `b:N`, and the rate is commands / elapsed.
    let renames = plan.host_ops / 2;
    let mut lines = Vec::new();
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for round in 0..plan.rounds * 2 {
        let loaded = round % 2 == (round / 2) % 2;
        let server = if loaded { &with } else { &without };
        server.flushall()?;
        pipe_load(server.port(), renames, "SET a:N v", |i, buf| {
            resp(buf, &[b"SET", format!("a:{i}").as_bytes(), b"v"]);
        })?;
        let took = pipe_load(server.port(), renames, "RENAME a:N b:N", |i, buf| {
            resp(
                buf,
                &[
                    b"RENAME",
                    format!("a:{i}").as_bytes(),
                    format!("b:{i}").as_bytes(),
                ],
            );
        })?;
        let rate = renames as f64 / took.as_secs_f64();
        let line = format!(
            "  {}: {rate:.0} ops/s (RENAME via redis-cli --pipe)",
            if loaded { "ours" } else { "base" }
        );
        println!("{line}");
        lines.push(line);
        if loaded {
            ours.push(rate)
        } else {
            base.push(rate)
        }
    }
    report.row(
        8,
        "RENAME with the module vs without, redis-cli --pipe",
        median(&ours),
        Some(median(&base)),
        "ops/s",
        None,
    );
    let _ = writeln!(
        details,
        "`RENAME a:N b:N` ({renames} per run):\n\n{}",
        runs_detail(&lines)
    );
    report.detail(
        8,
        format!(
            "Throughput (a figure): redis-benchmark, {CLIENTS} clients, pipeline {PIPELINE}, `-r {keyspace}`, \
             {} requests per run, {} rounds (median), on two servers started the same way, \
             one with the module loaded and one without; the keyspace is filled with \
             `SET` before each run. \"ours\" is the server with the module.\n\n{details}",
            plan.host_ops, plan.rounds
        ),
    );
    Ok(())
}
