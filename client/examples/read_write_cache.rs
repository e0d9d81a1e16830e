//! A cache rebuilt under a write lock while readers read under shared
//! locks: readers hold "cache:report" together; the rebuild takes it
//! exclusively, so no reader sees a half-built cache, and readers that
//! arrive while it waits do not starve it. Each holder's fencing token says
//! which rebuild it saw.
//!
//!     cargo run -p redis-lock-client --example read_write_cache [redis://host:port ...]

mod common;

use std::sync::Arc;
use std::time::Duration;

use redis_lock_client::Redlock;
use tokio::sync::Mutex;

/// The cache: its contents and the token of the rebuild that wrote them.
#[derive(Default)]
struct Cache {
    built_with: u64,
    rows: Vec<String>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let redlock = Redlock::new(common::node_urls())?;
    let cache = Arc::new(Mutex::new(Cache::default()));
    let ttl = Duration::from_secs(5);

    // The first build.
    rebuild(&redlock, &cache, "first build").await?;

    // Three readers hold the lock together.
    let mut readers = Vec::new();
    for reader in 0..3 {
        let (redlock, cache) = (redlock.clone(), Arc::clone(&cache));
        readers.push(tokio::spawn(async move {
            let lock = redlock.acquire_shared("cache:report", ttl).await?;
            let token = lock.fencing_token().await?;
            let rows = {
                let cache = cache.lock().await;
                format!(
                    "{} rows from the build with token {}",
                    cache.rows.len(),
                    cache.built_with
                )
            };
            println!("reader {reader} (token {token}) reads {rows}");
            tokio::time::sleep(Duration::from_millis(200)).await;
            lock.release().await?;
            Ok::<(), redis_lock_client::Error>(())
        }));
    }
    for reader in readers {
        reader.await??;
    }

    // A rebuild: it waits for the readers, and holds the lock alone.
    rebuild(&redlock, &cache, "second build").await?;
    let cache = cache.lock().await;
    println!(
        "the cache now has {:?} (token {})",
        cache.rows, cache.built_with
    );
    Ok(())
}

async fn rebuild(
    redlock: &Redlock,
    cache: &Mutex<Cache>,
    what: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let lock = redlock
        .acquire("cache:report", Duration::from_secs(5))
        .await?;
    let token = lock.fencing_token().await?;
    {
        let mut cache = cache.lock().await;
        // A store checks tokens: a rebuild older than the last one is
        // refused (a writer that paused past its lease cannot overwrite).
        if token <= cache.built_with {
            return Err(format!("stale rebuild: token {token} <= {}", cache.built_with).into());
        }
        cache.built_with = token;
        cache.rows = vec![format!("{what}: row 1"), format!("{what}: row 2")];
    }
    println!("rebuilt the cache under the write lock, token {token}");
    lock.release().await?;
    Ok(())
}
