//! Section 6: 32 tasks on one key, server-side waiting (`LOCK.ACQUIRE …
//! WAIT`, one connection per task since Redis holds a blocked connection's
//! later commands) against what users do today: `SET NX PX`, retried every
//! 10 ms, released with the Lua compare-and-delete.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};

use crate::report::{Report, Target};
use crate::{percentile, Plan, Result};

const KEY: &str = "contended";
const TASKS: usize = 32;
const POLL: Duration = Duration::from_millis(10);
const LEASE_MS: u64 = 10_000;
/// The holder's lease in the grant-after-lease-end trials.
const LEASE_END_MS: u64 = 100;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Wait,
    /// Retries every 10 ms; asks again at once after releasing.
    Poll,
    /// Retries every 10 ms; pauses 10 ms after releasing before asking again.
    PollPolite,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Wait => "LOCK.ACQUIRE … WAIT",
            Mode::Poll => "SET NX PX, poll every 10 ms",
            Mode::PollPolite => "same, 10 ms pause after release",
        }
    }
}

pub(crate) async fn connect(url: &str) -> Result<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new().set_response_timeout(None);
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

fn owner(i: usize) -> String {
    format!("contender-{i:026}")
}

/// Takes the lock for `owner` the way `mode` does; false if it gave up
/// (the WAIT timed out, or polling went past `give_up`).
async fn take(
    conn: &mut MultiplexedConnection,
    mode: Mode,
    owner: &str,
    lease_ms: u64,
    give_up: Instant,
) -> Result<bool> {
    match mode {
        Mode::Wait => {
            let wait_ms = give_up
                .saturating_duration_since(Instant::now())
                .as_millis()
                .max(1) as u64;
            let reply: Value = redis::cmd("LOCK.ACQUIRE")
                .arg(KEY)
                .arg(owner)
                .arg(lease_ms)
                .arg("WAIT")
                .arg(wait_ms)
                .query_async(conn)
                .await?;
            Ok(matches!(reply, Value::Int(_)))
        }
        Mode::Poll | Mode::PollPolite => loop {
            let reply: Value = redis::cmd("SET")
                .arg(KEY)
                .arg(owner)
                .arg("NX")
                .arg("PX")
                .arg(lease_ms)
                .query_async(conn)
                .await?;
            if reply == Value::Okay {
                return Ok(true);
            }
            if Instant::now() >= give_up {
                return Ok(false);
            }
            tokio::time::sleep(poll_interval()).await;
        },
    }
}

/// 10 ms on average, uniformly 8–12 ms: without jitter, pollers in one
/// process fall into lockstep (timers fire on whole milliseconds), which
/// would make polling look worse than it is.
fn poll_interval() -> Duration {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(0x9e37_79b9_7f4a_7c15 ^ u64::from(std::process::id()));
    }
    let r = STATE.with(|s| {
        // xorshift64*
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    });
    POLL - Duration::from_millis(2) + Duration::from_micros(r % 4_001)
}

async fn give_back(
    conn: &mut MultiplexedConnection,
    mode: Mode,
    owner: &str,
    sha: &str,
) -> Result<()> {
    let _: Value = match mode {
        Mode::Wait => {
            redis::cmd("LOCK.RELEASE")
                .arg(KEY)
                .arg(owner)
                .query_async(conn)
                .await?
        }
        Mode::Poll | Mode::PollPolite => {
            redis::cmd("EVALSHA")
                .arg(sha)
                .arg(1)
                .arg(KEY)
                .arg(owner)
                .query_async(conn)
                .await?
        }
    };
    Ok(())
}

#[derive(Clone, Copy)]
struct Grant {
    seq: u64,
    task: usize,
    wait_us: u32,
    at: Instant,
}

#[derive(Default, Clone, Copy)]
struct HandoffStats {
    acquisitions_per_s: f64,
    handoffs_per_s: f64,
    wait_p50_ms: f64,
    wait_p90_ms: f64,
    wait_p99_ms: f64,
    wait_max_ms: f64,
    round_robin: f64,
}

/// 32 tasks take the lock, release it at once, and ask again, for the
/// window; every grant is numbered in the order the tasks received them,
/// which is the order they were granted (the next grant needs this one's
/// release).
async fn handoffs(mode: Mode, url: &str, sha: &str, plan: &Plan) -> Result<HandoffStats> {
    let from = Instant::now() + plan.contention_warmup;
    let until = from + plan.contention_window;
    let seq = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for task in 0..TASKS {
        let mut conn = connect(url).await?;
        let seq = Arc::clone(&seq);
        let sha = sha.to_string();
        handles.push(tokio::spawn(async move {
            let owner = owner(task);
            let mut grants = Vec::new();
            if mode != Mode::Wait {
                // Pollers spread evenly over the 10 ms period (tasks started
                // together would otherwise poll in lockstep).
                tokio::time::sleep(POLL * task as u32 / TASKS as u32).await;
            }
            loop {
                let asked = Instant::now();
                if asked >= until {
                    break;
                }
                let got = take(
                    &mut conn,
                    mode,
                    &owner,
                    LEASE_MS,
                    until + Duration::from_secs(5),
                )
                .await?;
                if !got {
                    continue;
                }
                let at = Instant::now();
                grants.push(Grant {
                    seq: seq.fetch_add(1, Ordering::SeqCst),
                    task,
                    wait_us: at.duration_since(asked).as_micros().min(u32::MAX as u128) as u32,
                    at,
                });
                give_back(&mut conn, mode, &owner, &sha).await?;
                if mode == Mode::PollPolite {
                    tokio::time::sleep(poll_interval()).await;
                }
            }
            Ok::<_, crate::Error>(grants)
        }));
    }
    let mut grants = Vec::new();
    for handle in handles {
        grants.extend(handle.await??);
    }
    grants.sort_by_key(|g| g.seq);
    let mut last_of = vec![None::<u64>; TASKS];
    let (mut counted, mut handoffs, mut round_robin) = (0u64, 0u64, 0u64);
    let mut waits = Vec::new();
    let mut wait_max_us = 0;
    let mut previous_task = None;
    for g in &grants {
        let in_window = g.at >= from && g.at < until;
        if in_window {
            counted += 1;
            // The wait of a contender: grants that changed hands.
            if previous_task.is_some_and(|p| p != g.task) {
                handoffs += 1;
                waits.push(g.wait_us);
            }
            if last_of[g.task].is_some_and(|s| g.seq - s == TASKS as u64) {
                round_robin += 1;
            }
            wait_max_us = wait_max_us.max(g.wait_us);
        }
        previous_task = Some(g.task);
        last_of[g.task] = Some(g.seq);
    }
    waits.sort_unstable();
    let secs = plan.contention_window.as_secs_f64();
    Ok(HandoffStats {
        acquisitions_per_s: counted as f64 / secs,
        handoffs_per_s: handoffs as f64 / secs,
        wait_p50_ms: percentile(&waits, 0.50) / 1000.0,
        wait_p90_ms: percentile(&waits, 0.90) / 1000.0,
        wait_p99_ms: percentile(&waits, 0.99) / 1000.0,
        wait_max_ms: f64::from(wait_max_us) / 1000.0,
        round_robin: round_robin as f64 / counted.max(1) as f64,
    })
}

/// `waiters` from `LOCK.INFO` (0 when there is no lock).
async fn waiters(conn: &mut MultiplexedConnection, key: &str) -> Result<i64> {
    let info: Value = redis::cmd("LOCK.INFO").arg(key).query_async(conn).await?;
    let pairs: Vec<(Value, Value)> = match info {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|c| Some((c.first()?.clone(), c.get(1)?.clone())))
            .collect(),
        Value::Map(pairs) => pairs,
        _ => Vec::new(),
    };
    Ok(pairs
        .into_iter()
        .find_map(|(k, v)| match (k, v) {
            (Value::BulkString(k), Value::Int(n)) if k == b"waiters" => Some(n),
            (Value::SimpleString(k), Value::Int(n)) if k == "waiters" => Some(n),
            _ => None,
        })
        .unwrap_or(0))
}

pub(crate) async fn until_waiters(
    conn: &mut MultiplexedConnection,
    key: &str,
    n: i64,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while waiters(conn, key).await? < n {
        if Instant::now() > deadline {
            return Err(format!("never saw {n} waiters queued").into());
        }
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    Ok(())
}

/// Queues 32 waiters one by one (each seen in the queue before the next
/// asks), frees the lock, and counts the grants that follow the queue order.
async fn fifo_check(url: &str) -> Result<(usize, usize)> {
    let mut holder = connect(url).await?;
    let _: Value = redis::cmd("LOCK.ACQUIRE")
        .arg(KEY)
        .arg("fifo-holder")
        .arg(30_000)
        .query_async(&mut holder)
        .await?;
    let seq = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for i in 0..TASKS {
        let mut conn = connect(url).await?;
        let seq = Arc::clone(&seq);
        handles.push(tokio::spawn(async move {
            let owner = owner(i);
            let got = take(
                &mut conn,
                Mode::Wait,
                &owner,
                30_000,
                Instant::now() + Duration::from_secs(10),
            )
            .await?;
            let n = seq.fetch_add(1, Ordering::SeqCst);
            give_back(&mut conn, Mode::Wait, &owner, "").await?;
            Ok::<_, crate::Error>((got, n))
        }));
        until_waiters(&mut holder, KEY, i as i64 + 1).await?;
    }
    give_back(&mut holder, Mode::Wait, "fifo-holder", "").await?;
    let mut in_order = 0;
    for (i, handle) in handles.into_iter().enumerate() {
        let (got, n) = handle.await??;
        if got && n == i as u64 {
            in_order += 1;
        }
    }
    Ok((in_order, TASKS))
}

/// Time from the holder's release (or its lease end) to the waiter's grant.
async fn grant_latency(
    mode: Mode,
    after_lease_end: bool,
    url: &str,
    sha: &str,
) -> Result<Option<f64>> {
    let mut holder = connect(url).await?;
    let mut watcher = connect(url).await?;
    let mut waiter_conn = connect(url).await?;
    let lease_ms = if after_lease_end {
        LEASE_END_MS
    } else {
        30_000
    };
    let sent = Instant::now();
    let took = take(&mut holder, mode, "holder", lease_ms, Instant::now()).await?;
    if !took {
        return Err("the holder did not get the free lock".into());
    }
    let waiter = tokio::spawn(async move {
        let got = take(
            &mut waiter_conn,
            mode,
            "waiter",
            30_000,
            Instant::now() + Duration::from_secs(10),
        )
        .await?;
        let at = Instant::now();
        Ok::<_, crate::Error>((got, at, waiter_conn))
    });
    let from = if after_lease_end {
        // The waiter asks well within the lease, so it is queued (or polling)
        // when the lease ends.
        sent + Duration::from_millis(lease_ms)
    } else {
        match mode {
            Mode::Wait => until_waiters(&mut watcher, KEY, 1).await?,
            // A poller in its steady rhythm, at a random phase.
            Mode::Poll | Mode::PollPolite => {
                let phase = u64::from(sent.elapsed().subsec_nanos() % 10);
                tokio::time::sleep(Duration::from_millis(15 + phase)).await;
            }
        }
        let t = Instant::now();
        give_back(&mut holder, mode, "holder", sha).await?;
        t
    };
    let (got, at, mut waiter_conn) = waiter.await??;
    give_back(&mut waiter_conn, mode, "waiter", sha).await?;
    if !got || at < from {
        return Ok(None);
    }
    Ok(Some(at.duration_since(from).as_secs_f64() * 1000.0))
}

async fn grant_latencies(
    mode: Mode,
    after_lease_end: bool,
    trials: usize,
    url: &str,
    sha: &str,
) -> Result<Vec<f64>> {
    let mut all = Vec::new();
    for _ in 0..trials {
        if let Some(ms) = grant_latency(mode, after_lease_end, url, sha).await? {
            all.push(ms);
        }
    }
    all.sort_by(f64::total_cmp);
    Ok(all)
}

fn pct_f(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i.min(v.len() - 1)]
}

pub async fn run(url: String, unlock_sha: String, plan: &Plan, report: &mut Report) -> Result<()> {
    println!("6. contention");
    let mut table = String::from(
        "| mode | acquisitions/s | hand-offs/s (owner changes) | hand-off wait p50 ms | p90 | p99 | max wait, all grants | next grant after exactly 31 others | load avg |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let mut stats = [HandoffStats::default(); 3];
    for (i, mode) in [Mode::Wait, Mode::Poll, Mode::PollPolite]
        .into_iter()
        .enumerate()
    {
        let s = handoffs(mode, &url, &unlock_sha, plan).await?;
        let load = crate::report::loadavg();
        println!(
            "  {:<28} {:>7.0} acquisitions/s {:>7.0} hand-offs/s  wait p50 {:.2} p99 {:.2} max {:.2} ms  round-robin {:.1}%  (load {load})",
            mode.name(),
            s.acquisitions_per_s,
            s.handoffs_per_s,
            s.wait_p50_ms,
            s.wait_p99_ms,
            s.wait_max_ms,
            s.round_robin * 100.0
        );
        let _ = writeln!(
            table,
            "| {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1}% | {load} |",
            mode.name(),
            s.acquisitions_per_s,
            s.handoffs_per_s,
            s.wait_p50_ms,
            s.wait_p90_ms,
            s.wait_p99_ms,
            s.wait_max_ms,
            s.round_robin * 100.0
        );
        stats[i] = s;
    }
    // The better polling variant is the baseline.
    let poll = if stats[2].handoffs_per_s > stats[1].handoffs_per_s {
        stats[2]
    } else {
        stats[1]
    };
    report.row(
        6,
        "hand-offs/s, 32 tasks: WAIT vs best polling (10 ms)",
        stats[0].handoffs_per_s,
        Some(poll.handoffs_per_s),
        "hand-offs/s",
        Some(Target::RatioAtLeast(5.0)),
    );
    report.row(
        6,
        "wait p99 (hand-offs), 32 tasks: WAIT vs best polling",
        stats[0].wait_p99_ms,
        Some(poll.wait_p99_ms),
        "ms",
        None,
    );

    let (mut in_order, mut total) = (0, 0);
    for _ in 0..plan.fifo_rounds {
        let (ok, n) = fifo_check(&url).await?;
        in_order += ok;
        total += n;
    }
    report.row(
        6,
        format!("FIFO: grants in queue order ({total} queued waiters)"),
        in_order as f64 * 100.0 / total.max(1) as f64,
        None,
        "%",
        Some(Target::ValueAtLeast(100.0)),
    );

    let mut latency = String::from(
        "| grant latency | mode | trials | p50 ms | p99 ms | max ms |\n|---|---|---:|---:|---:|---:|\n",
    );
    for (after_lease_end, label) in [(false, "after release"), (true, "after lease end")] {
        let mut p50 = [0.0; 2];
        for (i, mode) in [Mode::Wait, Mode::Poll].into_iter().enumerate() {
            let trials = match (mode, after_lease_end) {
                (Mode::Wait, false) => plan.latency_trials * 4,
                _ => plan.latency_trials,
            };
            let v = grant_latencies(mode, after_lease_end, trials, &url, &unlock_sha).await?;
            let _ = writeln!(
                latency,
                "| {label} | {} | {} | {:.3} | {:.3} | {:.3} |",
                mode.name(),
                v.len(),
                pct_f(&v, 0.5),
                pct_f(&v, 0.99),
                v.last().copied().unwrap_or(0.0)
            );
            println!(
                "  grant latency {label:<16} {:<28} p50 {:.3} ms  p99 {:.3} ms  ({} trials)",
                mode.name(),
                pct_f(&v, 0.5),
                pct_f(&v, 0.99),
                v.len()
            );
            p50[i] = pct_f(&v, 0.5);
        }
        report.row(
            6,
            format!("grant latency p50 {label}: WAIT vs polling"),
            p50[0],
            Some(p50[1]),
            "ms",
            None,
        );
    }
    report.detail(
        6,
        format!(
            "One module-loaded server. 32 tasks on one tokio runtime, one connection each, \
             lock `{KEY}` with a {LEASE_MS} ms lease: take it, release it at once, ask again, \
             for {:.1} s after {:.1} s of warm-up. `WAIT`: `LOCK.ACQUIRE {KEY} owner \
             {LEASE_MS} WAIT t` then `LOCK.RELEASE`. Polling: `SET {KEY} owner NX PX \
             {LEASE_MS}`, on nil sleep 10 ms (uniformly 8–12 ms, so that pollers do not fall into lockstep) and retry, then `EVALSHA` compare-and-delete; \
             the 32 pollers spread evenly over the 10 ms period, either asking again at once after the release (then the releaser mostly takes \
             the lock straight back, since the others only look every 10 ms), or pausing \
             10 ms first. The ratio is against the polling variant with more hand-offs. \
             Grants are numbered in the order tasks receive them, which is the order they \
             were granted (the next grant needs this one's release). A hand-off is a grant \
             to another task than the previous one; its wait is from asking to being \
             granted (percentiles over hand-offs; the max over every grant). The last column is the share of grants that came exactly 31 \
             others after the same task's previous grant, i.e. perfect round robin.\n\n{table}\n\
             **FIFO check.** A holder takes the lock; 32 tasks ask with `WAIT` one after \
             another, each seen queued (`LOCK.INFO … waiters`) before the next asks; the \
             holder releases and each task releases as soon as it is granted. {in_order} of \
             {total} grants came in queue order ({} rounds).\n\n\
             **Grant latency** (figures, not assertions): after release, from sending the \
             holder's release to the waiter's grant reply, the waiter queued with `WAIT` or \
             polling every 10 ms; after lease end, from the holder's lease end (its acquire \
             sent + {LEASE_END_MS} ms, an upper bound of the lease end) to the grant.\n\n{latency}",
            plan.contention_window.as_secs_f64(),
            plan.contention_warmup.as_secs_f64(),
            plan.fifo_rounds
        ),
    );
    Ok(())
}
