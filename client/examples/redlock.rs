//! Redlock over five independent masters: acquire, look at what each node
//! answered, get a fencing token, extend, release.
//!
//!     scripts/cluster.sh start
//!     cargo run -p redis-lock-client --example redlock [redis://host:port ...]

mod common;

use std::time::Duration;

use redis_lock_client::{Config, Redlock};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = common::node_urls();
    let redlock = Redlock::with_config(&nodes, Config::default())?;
    println!("{} nodes, quorum {}", nodes.len(), redlock.quorum());

    let lock = redlock.lock("example:redlock", Duration::from_secs(10))?;
    let acquired = lock.acquire().await?;
    println!(
        "acquired after {} attempt(s), valid for {:?}",
        acquired.attempts, acquired.validity
    );
    for outcome in &acquired.outcomes {
        println!("  {outcome}");
    }

    // The token is computed on first use: written back to a majority, it
    // is above every earlier holder's.
    println!("fencing token: {}", lock.fencing_token().await?);

    let extended = lock.extend().await?;
    println!(
        "extended on {} node(s): valid for {:?}",
        extended.confirmed, extended.validity
    );

    let release = lock.release().await?;
    println!(
        "released on {} node(s), {} no longer held it{}",
        release.released,
        release.not_held,
        if release.lapsed() {
            " (the lease had lapsed!)"
        } else {
            ""
        }
    );
    Ok(())
}
