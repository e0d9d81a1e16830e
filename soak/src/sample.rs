//! Reading the servers: one atomic snapshot of the dataset size, memory and
//! the module's counters per sample, and the maintenance operations.

use std::time::Duration;

use testkit::{wait_until, RedisServer};

/// What the primary looked like at one moment (and the latencies of the
/// window that ended then).
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// Since the churn started.
    pub at: Duration,
    pub dbsize: u64,
    pub used_memory: u64,
    /// Of `used_memory`: the replication backlog, which grows to its
    /// configured size whatever the locks do (1 MiB on Redis 7.0, 10 MiB on
    /// Valkey 8).
    pub backlog: u64,
    pub rss: u64,
    pub held: u64,
    pub holders: u64,
    pub lease_index: u64,
    pub lease_index_bytes: u64,
    /// Calls in the window, and their p50 and p99 latency, µs.
    pub calls: u64,
    pub p50_us: u32,
    pub p99_us: u32,
}

fn field(info: &str, name: &str) -> Result<u64, String> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| format!("INFO has no {name}"))
}

impl Sample {
    /// `DBSIZE`, `INFO memory` and `INFO lock` in one `MULTI`: the counters
    /// and the dataset at the same instant.
    pub fn take(server: &RedisServer) -> Result<Sample, String> {
        let mut conn = server.conn();
        let (dbsize, memory, lock): (u64, String, String) = redis::pipe()
            .atomic()
            .cmd("DBSIZE")
            .cmd("INFO")
            .arg("memory")
            .cmd("INFO")
            .arg("lock")
            .query(&mut conn)
            .map_err(|e| e.to_string())?;
        Ok(Sample {
            dbsize,
            used_memory: field(&memory, "used_memory")?,
            backlog: field(&memory, "mem_replication_backlog")?,
            rss: field(&memory, "used_memory_rss")?,
            held: field(&lock, "lock_held")?,
            holders: field(&lock, "lock_holders")?,
            lease_index: field(&lock, "lock_lease_index")?,
            lease_index_bytes: field(&lock, "lock_lease_index_bytes")?,
            ..Sample::default()
        })
    }

    /// `used_memory` without the replication backlog.
    pub fn memory(&self) -> u64 {
        self.used_memory.saturating_sub(self.backlog)
    }

    pub fn set_latencies(&mut self, mut micros: Vec<u32>) {
        micros.sort_unstable();
        let at = |q: f64| {
            let index = ((micros.len() as f64 - 1.0) * q).round() as usize;
            micros.get(index).copied().unwrap_or(0)
        };
        self.calls = micros.len() as u64;
        self.p50_us = at(0.50);
        self.p99_us = at(0.99);
    }
}

fn info(server: &RedisServer, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(&mut server.conn())
        .unwrap_or_default()
}

/// `BGREWRITEAOF`, then waits for it to finish.
pub fn rewrite_aof(primary: &RedisServer) -> Result<(), String> {
    let _: String = redis::cmd("BGREWRITEAOF")
        .query(&mut primary.conn())
        .map_err(|e| format!("BGREWRITEAOF: {e}"))?;
    let done = wait_until(Duration::from_secs(120), || {
        let persistence = info(primary, "persistence");
        field(&persistence, "aof_rewrite_in_progress") == Ok(0)
            && field(&persistence, "aof_rewrite_scheduled") == Ok(0)
    });
    done.then_some(())
        .ok_or_else(|| "the AOF rewrite did not finish in 120 s".into())
}

/// `DEBUG RELOAD`: save, empty and load the dataset again, locks included.
pub fn debug_reload(primary: &RedisServer) -> Result<(), String> {
    redis::cmd("DEBUG")
        .arg("RELOAD")
        .query::<String>(&mut primary.conn())
        .map(|_| ())
        .map_err(|e| format!("DEBUG RELOAD: {e}"))
}

/// A full resync: the replica leaves and follows the primary again.
pub fn resync(primary: &RedisServer, replica: &RedisServer) -> Result<(), String> {
    redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query::<String>(&mut replica.conn())
        .map_err(|e| format!("REPLICAOF NO ONE: {e}"))?;
    replica.replicate_from(primary);
    Ok(())
}
