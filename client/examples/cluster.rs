//! A Redis Cluster as the lock service: `Redlock::cluster` sends each
//! lock to the shard that serves its key, waits on the server when a lock
//! is busy, and asks the shard's replica to acknowledge every grant, so a
//! failover keeps the locks.
//!
//!     REDIS_CLUSTER=1 scripts/cluster.sh start    # 3 masters + 3 replicas on 7201..7206
//!     cargo run -p redis-lock-client --example cluster [redis://host:port ...]
//!     REDIS_CLUSTER=1 scripts/cluster.sh stop
//!
//! Seeds: the arguments, else the comma-separated `REDIS_LOCK_CLUSTER`,
//! else 127.0.0.1:7201..7206.

mod common;

use std::time::Duration;

use redis_lock_client::{Acknowledge, Config, Redlock};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit_code(run().await)
}

fn seeds() -> Vec<String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.is_empty() {
        return args;
    }
    match std::env::var("REDIS_LOCK_CLUSTER") {
        Ok(list) => list.split(',').map(|s| s.trim().to_string()).collect(),
        Err(_) => (7201..=7206)
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect(),
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config {
        node_timeout: Duration::from_millis(500),
        acknowledge: Some(Acknowledge::replicas(1).within(Duration::from_millis(500))),
        ..Config::default()
    };
    let redlock = Redlock::cluster_with_config(seeds(), config)?;
    redlock.verify().await?;
    let mut held = Vec::new();
    for order in 0..6 {
        let lock = redlock
            .acquire(format!("orders:{order}"), Duration::from_secs(10))
            .await?;
        let token = lock.fencing_token().await?;
        println!(
            "orders:{order}: held by {} with token {token} (acknowledged by a replica)",
            lock.owner()
        );
        held.push(lock);
    }
    // A second client waits on the server for a busy lock, and gets it
    // when the first releases.
    let waiter = {
        let redlock = redlock.clone();
        tokio::spawn(async move { redlock.acquire("orders:0", Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    for lock in held {
        lock.release().await?;
    }
    let next = waiter.await??;
    println!(
        "orders:0: handed to the waiter with token {}",
        next.fencing_token().await?
    );
    next.release().await?;
    Ok(())
}
