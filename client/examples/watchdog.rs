//! A watchdog keeps a 2-second lock for 5 seconds of work, and the work
//! stops as soon as the lock is lost (stop a majority of nodes while it
//! runs to see it). Then the same with `with_lock`.
//!
//!     cargo run -p redis-lock-client --example watchdog [redis://host:port ...]

mod common;

use std::time::Duration;

use redis_lock_client::{Error, Redlock};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let redlock = Redlock::new(common::node_urls())?;
    let ttl = Duration::from_secs(2);

    let guard = redlock.acquire("example:watchdog", ttl).await?.watchdog()?;
    println!("holding with a {ttl:?} lease, renewed every {:?}", ttl / 3);
    let work = async {
        for step in 1..=5 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            println!(
                "  step {step}/5, lock valid for another {:?}",
                guard.validity()
            );
        }
    };
    tokio::select! {
        status = guard.lost() => println!("lock lost, work abandoned: {status:?}"),
        _ = work => println!("work done, still holding"),
    }
    let release = guard.release().await?;
    println!("released on {} node(s)", release.released);

    // The helper does the same: the future is dropped if the lock is lost.
    let result = redlock
        .with_lock("example:watchdog", ttl, |ctx| async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            ctx.validity()
        })
        .await;
    match result {
        Ok(validity) => println!("with_lock: finished with {validity:?} of validity left"),
        Err(Error::LockLost) => println!("with_lock: lock lost, work cancelled"),
        Err(other) => return Err(other.into()),
    }
    Ok(())
}
