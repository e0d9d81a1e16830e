//! Section 10: fenced writes (issue #31). `LOCK.FENCED fence token HSET …`
//! against the plain `HSET` it wraps and against the Lua script a client
//! runs today to fence a write in Redis (GET the fence, compare, SET it,
//! HSET), on the same module-loaded server: throughput at P16 with
//! redis-benchmark, and the server's instructions per operation under
//! callgrind on every server found (`bench/callgrind-ops.sh --set fenced`,
//! shared with section 11).

use crate::callgrind;
use crate::micro::{alternate, runs_detail, script_load};
use crate::report::{Report, Target};
use crate::server::Server;
use crate::tools::redis_benchmark;
use crate::{Plan, Result};

/// The fence a script keeps in a string: refuse a lower token, else store
/// the token and write.
const FENCE_LUA: &str = r#"local accepted = redis.call('GET', KEYS[1])
if accepted and tonumber(accepted) > tonumber(ARGV[1]) then
    return redis.error_reply('STALE fencing token')
end
redis.call('SET', KEYS[1], ARGV[1])
return redis.call('HSET', KEYS[2], 'status', 'shipped')"#;

/// Data keys the writes spread over (`-r`).
const KEYSPACE: u64 = 100_000;
/// Issue #31's pipeline depth.
const PIPELINE: u32 = 16;

pub fn run(server: &Server, plan: &Plan, report: &mut Report) -> Result<()> {
    println!("10. fenced writes");
    let port = server.port();
    let [sha] = script_load(server, [FENCE_LUA])?;
    let requests = plan.acquire_p1;
    let fenced = [
        "LOCK.FENCED",
        "fence",
        "1",
        "HSET",
        "order:__rand_int__",
        "status",
        "shipped",
    ];
    let plain = ["HSET", "order:__rand_int__", "status", "shipped"];
    let script = ["EVALSHA", &sha, "2", "fence:lua", "order:__rand_int__", "1"];
    let mut details = String::new();
    for (what, baseline, target) in [
        ("plain HSET", &plain[..], None),
        (
            "Lua fence script (GET, compare, SET, HSET) by EVALSHA",
            &script[..],
            Some(Target::RatioAtLeast(2.0)),
        ),
    ] {
        let (ours, base, lines) = alternate(plan.rounds, |native| {
            let cmd: &[&str] = if native { &fenced } else { baseline };
            redis_benchmark(port, requests, PIPELINE, Some(KEYSPACE), cmd)
        })?;
        report.row(
            10,
            format!("LOCK.FENCED HSET vs {what}, P{PIPELINE}"),
            ours,
            Some(base),
            "ops/s",
            target,
        );
        details.push_str(&format!("Against {what}:\n\n{}\n", runs_detail(&lines)));
    }
    report.detail(
        10,
        format!(
            "redis-benchmark, 50 clients, pipeline {PIPELINE}, {requests} requests per run, data keys \
             `order:__rand_int__` with `-r {KEYSPACE}`. The fenced write passes the same token \
             each time (redis-benchmark cannot raise it), so the fence is checked and not \
             raised: the check, the inner call as the caller and its reply, without the \
             `LOCK.FENCEAPPLY` a raise adds. {} rounds (median).\n\n{details}",
            plan.rounds
        ),
    );
    server.flushall()?;
    instructions(plan, report)
}

/// The same comparison in the server's instructions per operation.
fn instructions(plan: &Plan, report: &mut Report) -> Result<()> {
    let out = callgrind::run("callgrind-ops.sh", &["--set", "fenced"], plan)?;
    ops_rows(10, &out, report);
    report.detail(
        10,
        format!(
            "Instructions and time per operation (`bench/callgrind-ops.sh --set fenced`; \
             the same token on every call, as above):\n\n{}",
            out.table
        ),
    );
    Ok(())
}

/// One report row per line of `bench/callgrind-ops.sh`'s TSV: set server
/// version ours baseline ir_ours ir_base ratio ns_ours ns_base ns_ratio.
pub fn ops_rows(section: u8, out: &callgrind::Output, report: &mut Report) {
    for row in &out.rows {
        let (Some(ours), Some(base)) = (callgrind::number(row, 5), callgrind::number(row, 6))
        else {
            continue;
        };
        let (ours_name, base_name) = (callgrind::text(row, 3), callgrind::text(row, 4));
        let target = match base_name {
            "plain HSET" => Some(Target::RatioAtMost(1.3)),
            name if name.starts_with("Lua") => None,
            _ => Some(Target::RatioAtMost(1.0)),
        };
        report.row(
            section,
            format!(
                "{} {} {ours_name} vs {base_name}: instructions/op",
                callgrind::text(row, 1),
                callgrind::text(row, 2)
            ),
            ours,
            Some(base),
            "instr/op",
            target,
        );
    }
}
