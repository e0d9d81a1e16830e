//! Several workers contend for one resource on the cluster; each prints
//! when it holds the lock and which fencing token it got. A shared check
//! confirms no two held it at once and tokens only went up.
//!
//!     make cluster && make demo
//!     cargo run --release -p redis-lock-client --example demo [redis://host:port ...]
//!
//! `DEMO_WORKERS` (default 4) and `DEMO_ROUNDS` (default 3) size the run.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_lock_client::{Config, Redlock};

const RESOURCE: &str = "demo:printer";

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = common::node_urls();
    let workers = env_number("DEMO_WORKERS", 4);
    let rounds = env_number("DEMO_ROUNDS", 3);
    let config = Config {
        retry_count: 1_000,
        retry_delay: Duration::from_millis(20),
        retry_jitter: Duration::from_millis(80),
        acquire_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    };
    println!(
        "{workers} workers, {rounds} rounds each, on {} nodes: {}",
        nodes.len(),
        nodes.join(" ")
    );

    let started = Instant::now();
    let inside = Arc::new(AtomicBool::new(false));
    let last_token = Arc::new(Mutex::new(0u64));
    let mut tasks = Vec::new();
    for worker in 1..=workers {
        // Each worker is its own client, with its own connections.
        let redlock = Redlock::with_config(&nodes, config.clone())?;
        let (inside, last_token) = (inside.clone(), last_token.clone());
        tasks.push(tokio::spawn(async move {
            for round in 1..=rounds {
                let lock = redlock.acquire(RESOURCE, Duration::from_secs(5)).await?;
                let token = lock.fencing_token().await?;
                let overlap = inside.swap(true, Ordering::SeqCst);
                let previous = {
                    let mut last = last_token.lock().map_err(|_| "poisoned")?;
                    std::mem::replace(&mut *last, token)
                };
                println!(
                    "[{:>6.3}s] worker {worker} holds {RESOURCE} (round {round}) token {token}{}{}",
                    started.elapsed().as_secs_f64(),
                    if overlap { "  !! OVERLAP" } else { "" },
                    if token <= previous {
                        "  !! TOKEN WENT BACK"
                    } else {
                        ""
                    },
                );
                // The "work": hold the resource for a moment.
                tokio::time::sleep(Duration::from_millis(100)).await;
                inside.store(false, Ordering::SeqCst);
                lock.release().await?;
                if overlap || token <= previous {
                    return Err("mutual exclusion or token order violated".into());
                }
                // Think before asking again, so the others get their turn.
                tokio::time::sleep(Duration::from_millis(rand::random_range(50..250))).await;
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    let mut failed = false;
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                eprintln!("worker failed: {error}");
                failed = true;
            }
            Err(error) => {
                eprintln!("worker crashed: {error}");
                failed = true;
            }
        }
    }
    if failed {
        return Err("the demo saw a failure (is the cluster running? `make cluster`)".into());
    }
    println!(
        "{} grants in {:.2}s, one holder at a time, tokens strictly increasing",
        workers * rounds,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
