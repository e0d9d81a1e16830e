//! Section 5: Redlock clients on the same five module-loaded masters:
//! `redis-lock-client`, `rslock`, and a hand-written ideal script client.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};

use crate::micro::UNLOCK_LUA;
use crate::report::{Report, Target};
use crate::{median, percentile, Plan, Result};

const TTL: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Which {
    Ours = 0,
    Rslock,
    Ideal,
}

impl Which {
    fn key(self) -> &'static str {
        match self {
            Which::Ours => "ours",
            Which::Rslock => "rslock",
            Which::Ideal => "ideal",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Which::Ours => "redis-lock-client",
            Which::Rslock => "rslock",
            Which::Ideal => "ideal script client",
        }
    }
}

/// The hand-written minimum: `SET key token NX PX ttl` to every node at
/// once on one multiplexed connection per node, a quorum and validity check,
/// `EVALSHA` compare-and-delete to every node at once.
struct Ideal {
    conns: Vec<MultiplexedConnection>,
    sha: String,
    quorum: usize,
}

impl Ideal {
    async fn connect(urls: &[String]) -> Result<Ideal> {
        let config = AsyncConnectionConfig::new().set_response_timeout(None);
        let mut conns = Vec::new();
        let mut sha = String::new();
        for url in urls {
            let mut conn = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            sha = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(UNLOCK_LUA)
                .query_async(&mut conn)
                .await?;
            conns.push(conn);
        }
        Ok(Ideal {
            quorum: conns.len() / 2 + 1,
            conns,
            sha,
        })
    }

    /// One lock + unlock; false if the lock was not won.
    async fn cycle(&self, key: &str, task: usize, n: u64) -> bool {
        let started = Instant::now();
        let token = format!("{task:08x}{n:012x}");
        let mut set = redis::cmd("SET");
        set.arg(key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64);
        let granted = join_all(self.conns.iter().map(|conn| {
            let mut conn = conn.clone();
            let set = &set;
            async move { matches!(conn.send_packed_command(set).await, Ok(Value::Okay)) }
        }))
        .await
        .into_iter()
        .filter(|ok| *ok)
        .count();
        let drift = TTL / 100 + Duration::from_millis(2);
        let won = granted >= self.quorum && started.elapsed() + drift < TTL;
        let mut del = redis::cmd("EVALSHA");
        del.arg(&self.sha).arg(1).arg(key).arg(&token);
        join_all(self.conns.iter().map(|conn| {
            let mut conn = conn.clone();
            let del = &del;
            async move {
                let _ = conn.send_packed_command(del).await;
            }
        }))
        .await;
        won
    }
}

enum Client {
    Ours(redis_lock_client::Redlock),
    Rslock(rslock::LockManager),
    Ideal(Ideal),
}

impl Client {
    async fn new(which: Which, urls: &[String]) -> Result<Client> {
        Ok(match which {
            Which::Ours => Client::Ours(redis_lock_client::Redlock::new(urls)?),
            Which::Rslock => Client::Rslock(rslock::LockManager::new(urls.to_vec())),
            Which::Ideal => Client::Ideal(Ideal::connect(urls).await?),
        })
    }

    /// Acquire then release `resource`; false when not acquired.
    async fn cycle(&self, resource: &str, task: usize, n: u64) -> bool {
        match self {
            Client::Ours(redlock) => match redlock.acquire(resource, TTL).await {
                Ok(lock) => lock.release().await.is_ok(),
                Err(_) => false,
            },
            Client::Rslock(manager) => match manager.lock(resource, TTL).await {
                Ok(lock) => {
                    manager.unlock(&lock).await;
                    true
                }
                Err(_) => false,
            },
            Client::Ideal(ideal) => ideal.cycle(resource, task, n).await,
        }
    }
}

/// CPU time (user + system) of this process so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    cycles_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    cpu_us: f64,
    failures: u64,
}

async fn measure(which: Which, urls: &[String], tasks: usize, plan: &Plan) -> Result<Stats> {
    let client = Arc::new(Client::new(which, urls).await?);
    let started = Instant::now();
    let from = started + plan.client_warmup;
    let until = from + plan.client_window;
    let mut handles = Vec::new();
    for task in 0..tasks {
        let client = Arc::clone(&client);
        let resource = format!("res:{}:{task}", which.name());
        handles.push(tokio::spawn(async move {
            let mut latencies: Vec<u32> = Vec::new();
            let mut failures = 0u64;
            let mut n = 0u64;
            loop {
                let t = Instant::now();
                if t >= until {
                    break;
                }
                n += 1;
                let ok = client.cycle(&resource, task, n).await;
                if t >= from {
                    latencies.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    failures += u64::from(!ok);
                }
            }
            (latencies, failures)
        }));
    }
    tokio::time::sleep_until(from.into()).await;
    let cpu0 = cpu_time();
    tokio::time::sleep_until(until.into()).await;
    let cpu1 = cpu_time();
    let (all, failures) = gather(handles).await?;
    let cycles = all.len().max(1) as f64;
    Ok(Stats {
        cycles_per_s: all.len() as f64 / plan.client_window.as_secs_f64(),
        p50_us: percentile(&all, 0.50),
        p99_us: percentile(&all, 0.99),
        cpu_us: (cpu1 - cpu0).as_secs_f64() * 1e6 / cycles,
        failures,
    })
}

pub async fn run(urls: Vec<String>, plan: &Plan, report: &mut Report) -> Result<()> {
    println!("5. Redlock clients on five masters");
    let mut table = String::from(
        "| tasks | client | cycles/s | p50 µs | p99 µs | client CPU µs/cycle | failed | load avg |\n\
         |---:|---|---:|---:|---:|---:|---:|---|\n",
    );
    // BENCH_CLIENTS=ours,rslock,ideal and BENCH_TASKS=1,16,64 narrow the
    // run (to profile one client: `perf record -g -p <bench pid>`).
    let all: Vec<Which> = [Which::Ours, Which::Rslock, Which::Ideal]
        .into_iter()
        .filter(|w| {
            std::env::var("BENCH_CLIENTS").map_or(true, |list| {
                list.split(',').any(|c| {
                    let c = c.trim();
                    c == w.key()
                })
            })
        })
        .collect();
    let task_counts: Vec<usize> = std::env::var("BENCH_TASKS")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|t| t.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![1, 16, 64]);
    for (i, tasks) in task_counts.into_iter().enumerate() {
        let mut runs: [Vec<Stats>; 3] = Default::default();
        for round in 0..plan.rounds {
            // Rotate who goes first, so drift in the machine's load spreads evenly.
            for k in 0..all.len() {
                let which = all[(i + round + k) % all.len()];
                let s = measure(which, &urls, tasks, plan).await?;
                let load = crate::report::loadavg();
                println!(
                    "  {tasks:>2} tasks {:<20} {:>8.0} cycles/s  p50 {:>6.0} µs  p99 {:>6.0} µs  cpu {:>5.1} µs/cycle  failed {}  (load {load})",
                    which.name(),
                    s.cycles_per_s,
                    s.p50_us,
                    s.p99_us,
                    s.cpu_us,
                    s.failures
                );
                let _ = writeln!(
                    table,
                    "| {tasks} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {} | {load} |",
                    which.name(),
                    s.cycles_per_s,
                    s.p50_us,
                    s.p99_us,
                    s.cpu_us,
                    s.failures
                );
                runs[which as usize].push(s);
            }
        }
        let med = |w: Which, f: fn(&Stats) -> f64| {
            let v: Vec<f64> = runs[w as usize].iter().map(f).collect();
            (!v.is_empty()).then(|| median(&v))
        };
        let Some(ours) = med(Which::Ours, |s| s.cycles_per_s) else {
            continue;
        };
        let ours_cpu = med(Which::Ours, |s| s.cpu_us).unwrap_or(0.0);
        report.row(
            5,
            format!("client vs rslock, {tasks} tasks"),
            ours,
            med(Which::Rslock, |s| s.cycles_per_s),
            "cycles/s",
            (tasks > 1).then_some(Target::RatioAtLeast(1.25)),
        );
        report.row(
            5,
            format!("client vs ideal script client, {tasks} tasks"),
            ours,
            med(Which::Ideal, |s| s.cycles_per_s),
            "cycles/s",
            Some(Target::RatioAtLeast(1.0)),
        );
        report.row(
            5,
            format!("client CPU/cycle vs rslock, {tasks} tasks"),
            ours_cpu,
            med(Which::Rslock, |s| s.cpu_us),
            "µs",
            Some(Target::RatioAtMost(0.5)),
        );
        report.row(
            5,
            format!("(figure) client CPU/cycle vs ideal, {tasks} tasks"),
            ours_cpu,
            med(Which::Ideal, |s| s.cpu_us),
            "µs",
            None,
        );
    }
    report.detail(
        5,
        format!(
            "Five module-loaded masters on loopback (no persistence), one client object \
             per run shared by all tasks, each task locking and unlocking its own resource \
             in a loop (lease {} s): `Redlock::acquire` + `Lock::release` \
             (`LOCK.ACQUIRE`/`LOCK.RELEASE … ALL`), `rslock::LockManager::lock` + `unlock` \
             (`SET NX PX` + `EVALSHA`, 20-byte random value), and the ideal client (`SET NX PX` \
             to all five nodes at once on one multiplexed connection per node, majority and \
             validity check, `EVALSHA` compare-and-delete to all five at once). All on one \
             tokio multi-thread runtime (worker threads = cores). {:.1} s warm-up, then \
             {:.1} s measured: cycles/s, latency of one lock+unlock cycle, and client CPU \
             (user+system `getrusage` of the benchmark process over the window) per cycle; \
             {} rounds, the clients' order rotating, medians in the summary. The servers \
             share the machine's cores with the client, so client CPU also costs \
             throughput.\n\n{table}",
            TTL.as_secs(),
            plan.client_warmup.as_secs_f64(),
            plan.client_window.as_secs_f64(),
            plan.rounds
        ),
    );
    Ok(())
}

/// The latencies (µs, sorted) and failed cycles of a run's tasks, each
/// task's `(latencies, failures)` put together.
pub(crate) async fn gather(
    handles: Vec<tokio::task::JoinHandle<(Vec<u32>, u64)>>,
) -> Result<(Vec<u32>, u64)> {
    let mut all = Vec::new();
    let mut failures = 0;
    for handle in handles {
        let (latencies, failed) = handle.await?;
        all.extend(latencies);
        failures += failed;
    }
    all.sort_unstable();
    Ok((all, failures))
}
