//! Section 10: fenced writes (issue #31). `LOCK.FENCED fence token HSET …`
//! against the plain `HSET` it wraps and against the Lua script a client
//! runs today to fence a write in Redis (GET the fence, compare, SET it,
//! HSET), on the same module-loaded server.

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
            Some(Target::RatioAtLeast(1.0)),
        ),
    ] {
        let (ours, base, lines) = alternate(plan.rounds, |native| {
            let cmd: &[&str] = if native { &fenced } else { baseline };
            redis_benchmark(port, requests, 32, Some(KEYSPACE), cmd)
        })?;
        report.row(
            10,
            format!("LOCK.FENCED HSET vs {what}, P32"),
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
            "redis-benchmark, 50 clients, pipeline 32, {requests} requests per run, data keys \
             `order:__rand_int__` with `-r {KEYSPACE}`. The fenced write passes the same token \
             each time (redis-benchmark cannot raise it), so the fence is checked and not \
             raised: the check, the inner call as the caller and its reply, without the \
             `LOCK.FENCEAPPLY` a raise adds. {} rounds (median).\n\n{details}",
            plan.rounds
        ),
    );
    server.flushall()
}
