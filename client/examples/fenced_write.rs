//! Why fencing tokens: a holder pauses past its lease (a GC pause, a stopped
//! VM), another client takes the lock and writes, and then the first one
//! wakes up and writes too. The lock cannot stop that late write; storage
//! that checks tokens can.
//!
//!     cargo run -p redis-lock-client --example fenced_write [redis://host:port ...]

mod common;

use std::sync::Mutex;
use std::time::Duration;

use redis_lock_client::Redlock;

/// A storage stand-in that accepts a write only with a token above the
/// highest it has accepted.
#[derive(Default)]
struct Storage {
    state: Mutex<(u64, Vec<String>)>,
}

impl Storage {
    fn write(&self, token: u64, value: &str) -> Result<(), String> {
        let mut state = self
            .state
            .lock()
            .map_err(|_| "storage poisoned".to_string())?;
        let (highest, values) = &mut *state;
        if token <= *highest {
            return Err(format!(
                "rejected {value:?}: token {token} is not above {highest}"
            ));
        }
        *highest = token;
        values.push(value.to_string());
        Ok(())
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let redlock = Redlock::new(common::node_urls())?;
    let storage = Storage::default();
    let ttl = Duration::from_millis(500);

    let a = redlock.acquire("example:fenced", ttl).await?;
    let a_token = a.fencing_token().await?;
    println!("A holds the lock, token {a_token}; A now pauses past its {ttl:?} lease");
    tokio::time::sleep(ttl * 2).await;
    println!("A's lease has lapsed: still valid? {}", a.is_held());

    let b = redlock
        .acquire("example:fenced", Duration::from_secs(10))
        .await?;
    let b_token = b.fencing_token().await?;
    println!("B holds the lock, token {b_token}");
    match storage.write(b_token, "written by B") {
        Ok(()) => println!("B's write accepted"),
        Err(why) => println!("B's write {why}"),
    }

    println!("A wakes up and writes with its old token");
    match storage.write(a_token, "written by A") {
        Ok(()) => println!("A's write accepted: the storage would be corrupted!"),
        Err(why) => println!("A's write {why}"),
    }

    let late = a.release().await?;
    println!(
        "A's release: lapsed = {} (reported, not hidden)",
        late.lapsed()
    );
    b.release().await?;
    Ok(())
}
