//! The soak: a module-loaded primary (AOF `everysec`) and its replica
//! under steady churn of acquires, re-entries, waits, extends and releases
//! over a million distinct keys with leases of 50 ms to 10 s, with an AOF
//! rewrite, a `DEBUG RELOAD` and a full replica resync in turn every
//! `maintenance` interval. Every 10 s it samples memory, the lease index
//! and the lock counters; the run passes when (see [`report`]):
//!
//! - memory stays within what the live locks explain,
//! - the counters agree with the dataset at every sample,
//! - p99 latency does not drift upward,
//! - once the churn stops and every lease has ended, nothing is left.
//!
//! - [`churn`]: the client threads;
//! - [`sample`]: reading the servers;
//! - [`report`]: the checks and the summary.

pub mod churn;
pub mod report;
pub mod sample;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use testkit::{RedisServer, ServerOptions};

use crate::churn::Churn;
use crate::report::Report;
use crate::sample::Sample;

/// How to run.
#[derive(Clone, Debug)]
pub struct Settings {
    pub duration: Duration,
    /// Client threads.
    pub threads: usize,
    /// Distinct keys the churn draws from.
    pub keys: u64,
    /// Lease lengths, ms.
    pub ttl_ms: (u64, u64),
    pub sample_every: Duration,
    /// An AOF rewrite, a `DEBUG RELOAD`, a replica resync: one of them,
    /// in turn, this often.
    pub maintenance: Duration,
    /// Whether a p99 that drifts up fails the run (`make soak`, on a
    /// machine given to it) or is only reported (`make test`'s minute,
    /// which shares the machine with other suites: a timed assertion
    /// there would test the machine's load, not the module).
    pub latency_check: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            duration: Duration::from_secs(30 * 60),
            threads: 6,
            keys: 1_000_000,
            ttl_ms: (50, 10_000),
            sample_every: Duration::from_secs(10),
            maintenance: Duration::from_secs(20),
            latency_check: true,
        }
    }
}

fn options() -> ServerOptions {
    ServerOptions::default().args(["--appendonly", "yes", "--appendfsync", "everysec"])
}

/// Runs the soak and returns its report (failed checks included).
pub fn run(settings: &Settings) -> Report {
    let primary = RedisServer::start_with(options());
    let replica = RedisServer::start_with(options());
    replica.replicate_from(&primary);
    let mut report = Report::new(settings.clone());
    let baseline = match Sample::take(&primary) {
        Ok(sample) => sample,
        Err(error) => {
            report.fail(format!("no baseline sample: {error}"));
            return report;
        }
    };
    report.baseline = Some(baseline);

    let stop = Arc::new(AtomicBool::new(false));
    let churn = Churn::start(&primary, settings, stop.clone());
    let started = Instant::now();
    let mut next_sample = started + settings.sample_every;
    let mut next_maintenance = started + settings.maintenance;
    let mut round = 0usize;
    while started.elapsed() < settings.duration {
        std::thread::sleep(Duration::from_millis(50));
        if Instant::now() >= next_maintenance {
            next_maintenance += settings.maintenance;
            let done = match round % 3 {
                0 => sample::rewrite_aof(&primary).map(|()| "BGREWRITEAOF"),
                1 => sample::debug_reload(&primary).map(|()| "DEBUG RELOAD"),
                _ => sample::resync(&primary, &replica).map(|()| "replica resync"),
            };
            round += 1;
            match done {
                Ok(what) => report.maintenance.push(what),
                Err(error) => report.fail(format!("maintenance: {error}")),
            }
        }
        if Instant::now() >= next_sample {
            next_sample += settings.sample_every;
            let latencies = churn.take_latencies();
            match Sample::take(&primary) {
                Ok(mut sample) => {
                    sample.at = started.elapsed();
                    sample.set_latencies(latencies);
                    report.add(sample);
                }
                Err(error) => report.fail(format!("sample: {error}")),
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    report.operations = churn.join(&mut report);

    // Every lease ends within the longest TTL: then nothing may be left.
    let deadline = Instant::now() + Duration::from_millis(settings.ttl_ms.1 + 5_000);
    let drained = loop {
        match Sample::take(&primary) {
            Ok(sample) if sample.held == 0 && sample.lease_index == 0 => break Some(sample),
            Ok(sample) if Instant::now() >= deadline => {
                report.fail(format!(
                    "{} locks and {} lease index entries left {} ms after the churn stopped",
                    sample.held,
                    sample.lease_index,
                    settings.ttl_ms.1 + 5_000
                ));
                break Some(sample);
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(200)),
            Err(error) => {
                report.fail(format!("final sample: {error}"));
                break None;
            }
        }
    };
    report.drained = drained;
    report.check();
    report
}
