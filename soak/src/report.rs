//! The soak's checks and summary.
//!
//! - **Memory**: at every sample, `used_memory` less the replication
//!   backlog (which grows to its configured size: 1 MiB on Redis 7.0,
//!   10 MiB on Valkey 8) above the baseline (the two servers up, nothing
//!   held) is at most [`PER_HOLDER`] bytes per live
//!   holder plus [`SLACK`] (AOF rewrite and replication buffers, client
//!   buffers); at the end, RSS is at most 1.5× the peak RSS of the run's
//!   first half plus [`SLACK`].
//! - **Counters**: `lock_held` equals `DBSIZE` (every key is a lock) and
//!   the lease index has one entry per holder (`lock_lease_index` =
//!   `lock_holders`), read in one `MULTI`.
//! - **Latency** (calls that do not wait): the median p99 of the last
//!   third of the samples is at most twice that of the first third plus
//!   2 ms (`Settings::latency_check`: `make soak` checks it; `make test`'s
//!   minute only reports the samples, since other suites share the
//!   machine with it).
//! - **Drained**: after the churn stops and the longest lease has ended, no
//!   lock, holder or lease index entry is left, the index keeps at most
//!   [`INDEX_LEFT`] bytes, and `used_memory` (less the backlog) is within
//!   [`DRAINED_SLACK`] of the baseline.

use std::fmt;

use crate::sample::Sample;
use crate::Settings;

/// Bytes a live holder may account for: the key (names up to 16 bytes),
/// the lock with its owner, the keyspace entry and the lease index entry
/// (about 250 bytes measured), with room for allocator rounding.
pub const PER_HOLDER: u64 = 600;
/// Memory not explained by locks that the server may use at any time.
pub const SLACK: u64 = 16 << 20;
/// What may stay above the baseline once every lease has ended (the
/// replication backlog, buffers).
pub const DRAINED_SLACK: u64 = 4 << 20;
/// What the lease index may keep once every lease has ended.
pub const INDEX_LEFT: u64 = 1 << 20;

/// A soak run's figures and verdict.
#[derive(Debug)]
pub struct Report {
    pub settings: Settings,
    pub baseline: Option<Sample>,
    pub samples: Vec<Sample>,
    pub maintenance: Vec<&'static str>,
    pub operations: u64,
    pub drained: Option<Sample>,
    pub failures: Vec<String>,
}

fn median(mut values: Vec<u32>) -> u32 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

impl Report {
    pub fn new(settings: Settings) -> Report {
        Report {
            settings,
            baseline: None,
            samples: Vec::new(),
            maintenance: Vec::new(),
            operations: 0,
            drained: None,
            failures: Vec::new(),
        }
    }

    pub fn fail(&mut self, why: String) {
        self.failures.push(why);
    }

    /// Records a sample and checks the counters and memory at it.
    pub fn add(&mut self, sample: Sample) {
        let at = sample.at.as_secs();
        if sample.held != sample.dbsize {
            self.fail(format!(
                "at {at} s: lock_held {} but DBSIZE {}",
                sample.held, sample.dbsize
            ));
        }
        if sample.lease_index != sample.holders {
            self.fail(format!(
                "at {at} s: {} lease index entries for {} holders",
                sample.lease_index, sample.holders
            ));
        }
        let base = self.baseline.as_ref().map_or(0, Sample::memory);
        let bound = sample.holders * PER_HOLDER + SLACK;
        if sample.memory().saturating_sub(base) > bound {
            self.fail(format!(
                "at {at} s: used_memory {} above the baseline, more than {bound} for {} holders",
                sample.memory() - base,
                sample.holders
            ));
        }
        self.samples.push(sample);
    }

    /// The checks over the whole run.
    pub fn check(&mut self) {
        let n = self.samples.len();
        if n < 3 {
            self.fail(format!("only {n} samples: run longer"));
            return;
        }
        let third = (n / 3).max(1);
        let first = median(self.samples[..third].iter().map(|s| s.p99_us).collect());
        let last = median(self.samples[n - third..].iter().map(|s| s.p99_us).collect());
        if last > 2 * first + 2_000 && self.settings.latency_check {
            self.fail(format!(
                "p99 drifted up: {first} µs in the first third, {last} µs in the last"
            ));
        }
        let peak_early = self.samples[..n / 2]
            .iter()
            .map(|s| s.rss)
            .max()
            .unwrap_or(0);
        let rss_end = self.samples[n - 1].rss;
        if rss_end > peak_early + peak_early / 2 + SLACK {
            self.fail(format!(
                "RSS grew: {rss_end} at the end, {peak_early} at most in the first half"
            ));
        }
        let base = self.baseline.as_ref().map_or(0, Sample::memory);
        if let Some(drained) = self.drained.clone() {
            if drained.lease_index_bytes > INDEX_LEFT {
                let kept = drained.lease_index_bytes;
                self.fail(format!(
                    "the lease index keeps {kept} bytes with no lease left"
                ));
            }
            let left = drained.memory().saturating_sub(base);
            if left > DRAINED_SLACK {
                self.fail(format!("{left} bytes above the baseline with no lock left"));
            }
        }
        if self.samples.iter().all(|s| s.calls == 0) {
            self.fail("no calls were made".into());
        }
    }

    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        let maintenance: Vec<String> = ["BGREWRITEAOF", "DEBUG RELOAD", "replica resync"]
            .iter()
            .map(|what| {
                let times = self.maintenance.iter().filter(|m| *m == what).count();
                format!("{what} ×{times}")
            })
            .collect();
        writeln!(
            f,
            "soak: {:.0} s, {} threads, {} keys, leases {}..{} ms; {} calls; maintenance: {}",
            self.settings.duration.as_secs_f64(),
            self.settings.threads,
            self.settings.keys,
            self.settings.ttl_ms.0,
            self.settings.ttl_ms.1,
            self.operations,
            maintenance.join(", ")
        )?;
        if let Some(base) = &self.baseline {
            writeln!(
                f,
                "baseline: used_memory {:.1} MiB, RSS {:.1} MiB",
                mib(base.used_memory),
                mib(base.rss)
            )?;
        }
        writeln!(
            f,
            "| at s | calls/s | p50 µs | p99 µs | locks | holders | lease index | index KiB | used_memory MiB | of it backlog MiB | RSS MiB |"
        )?;
        writeln!(
            f,
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        )?;
        let every = self.settings.sample_every.as_secs_f64().max(1e-3);
        for s in &self.samples {
            writeln!(
                f,
                "| {} | {:.0} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {:.1} | {:.1} |",
                s.at.as_secs(),
                s.calls as f64 / every,
                s.p50_us,
                s.p99_us,
                s.held,
                s.holders,
                s.lease_index,
                s.lease_index_bytes as f64 / 1024.0,
                mib(s.used_memory),
                mib(s.backlog),
                mib(s.rss)
            )?;
        }
        if let Some(d) = &self.drained {
            writeln!(
                f,
                "drained: {} locks, {} index entries ({:.0} KiB kept), used_memory {:.1} MiB, RSS {:.1} MiB",
                d.held,
                d.lease_index,
                d.lease_index_bytes as f64 / 1024.0,
                mib(d.used_memory),
                mib(d.rss)
            )?;
        }
        if self.failures.is_empty() {
            write!(f, "RESULT: PASS")
        } else {
            writeln!(f, "RESULT: FAIL")?;
            for failure in &self.failures {
                writeln!(f, "  {failure}")?;
            }
            Ok(())
        }
    }
}
