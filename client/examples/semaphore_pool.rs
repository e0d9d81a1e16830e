//! A pool of 3 permits for a rate-limited downstream: ten tasks want to call
//! it, at most three hold a permit at once. Each permit is a lease with its
//! own fencing token; one held by a crashed task ends with its lease.
//!
//!     cargo run -p redis-lock-client --example semaphore_pool [redis://host:port ...]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis_lock_client::Redlock;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let redlock = Redlock::new(common::node_urls())?;
    let pool = redlock.semaphore("downstream:api", 3)?;
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..10 {
        let (pool, inside, most) = (pool.clone(), Arc::clone(&inside), Arc::clone(&most));
        tasks.push(tokio::spawn(async move {
            let permit = pool.acquire(Duration::from_secs(5)).await?;
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let token = permit.fencing_token().await?;
            println!("task {task} calls the downstream ({now} inside, token {token})");
            tokio::time::sleep(Duration::from_millis(100)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            permit.release().await?;
            Ok::<(), redis_lock_client::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let most = most.load(Ordering::SeqCst);
    println!("at most {most} of 10 tasks held a permit at once");
    if most > pool.permits() as usize {
        return Err(format!("{most} holders for {} permits", pool.permits()).into());
    }
    Ok(())
}
