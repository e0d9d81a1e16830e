//! Serves the client's lock metrics on `/metrics` (Prometheus' text format)
//! while ten tasks take turns on two locks. Scrape it while it runs:
//!
//!     cargo run -p redis-lock-client --features metrics --example metrics [redis://host:port ...]
//!     curl -s http://127.0.0.1:9464/metrics | grep redis_lock_client
//!
//! `METRICS_ADDR` sets the listening address (default 127.0.0.1:9464) and
//! `METRICS_SECONDS` how long it runs (default 30).

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;
use redis_lock_client::Redlock;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::var("METRICS_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:9464".into())
        .parse()?;
    let seconds: u64 = std::env::var("METRICS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()?;
    println!("serving http://{addr}/metrics for {seconds} s");

    let redlock = Redlock::new(common::node_urls())?;
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for task in 0..10 {
        let redlock = redlock.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let name = format!("metrics:demo:{}", task % 2);
                let lock = redlock.acquire(name, Duration::from_secs(2)).await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                lock.release().await?;
            }
            Ok::<(), redis_lock_client::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}
