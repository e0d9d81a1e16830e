//! Single-node mode with the blocking API: one node, two threads. The
//! second waits inside the server (`LOCK.ACQUIRE … WAIT`) and gets the lock
//! the moment the first releases it, without polling.
//!
//!     cargo run -p redis-lock-client --example single_node [redis://host:port]

mod common;

use std::time::{Duration, Instant};

use redis_lock_client::blocking::Redlock;
use redis_lock_client::Config;

fn main() -> std::process::ExitCode {
    common::exit_code(run())
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let node = common::node_urls().remove(0);
    let config = Config {
        acquire_timeout: Some(Duration::from_secs(10)),
        ..Config::default()
    };
    let redlock = Redlock::with_config([node.as_str()], config)?;
    println!("single node {node}");

    let first = redlock.acquire("example:single", Duration::from_secs(30))?;
    println!("[main]   holds the lock, token {}", first.fencing_token()?);

    let waiter = {
        let redlock = redlock.clone();
        std::thread::spawn(move || -> Result<(), redis_lock_client::Error> {
            let started = Instant::now();
            let lock = redlock.acquire("example:single", Duration::from_secs(30))?;
            println!(
                "[waiter] got it after waiting {:?}, token {}",
                started.elapsed(),
                lock.fencing_token()?
            );
            lock.release()?;
            Ok(())
        })
    };

    // Hold it for a moment while the waiter is queued on the server.
    std::thread::sleep(Duration::from_millis(500));
    for node in redlock.info("example:single")? {
        if let Ok(Some(info)) = node.info {
            println!(
                "[main]   {}: holds {}, {} waiter(s)",
                node.node, info.holds, info.waiters
            );
        }
    }
    println!("[main]   releasing");
    first.release()?;
    waiter.join().map_err(|_| "the waiter thread panicked")??;
    Ok(())
}
