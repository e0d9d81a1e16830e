//! The client threads: each takes locks on random keys of the key space
//! (and on a hundred hot keys, where it also waits with `WAIT`), re-enters
//! and extends some it holds, releases most, and leaves the rest to end by
//! their lease. Every call's latency but a wait's goes into the current
//! sample window.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::Value;
use testkit::RedisServer;

use crate::report::Report;
use crate::Settings;

/// Hot keys, where acquisitions contend and waits queue.
const HOT_KEYS: u64 = 100;
/// Holds a thread keeps track of; older ones are left to their leases.
const KEEP: usize = 2_000;

/// The running client threads.
pub struct Churn {
    threads: Vec<JoinHandle<Outcome>>,
    latencies: Arc<Mutex<Vec<u32>>>,
}

/// What one thread did.
#[derive(Default)]
struct Outcome {
    operations: u64,
    errors: Vec<String>,
}

impl Churn {
    pub fn start(primary: &RedisServer, settings: &Settings, stop: Arc<AtomicBool>) -> Churn {
        let latencies = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..settings.threads)
            .map(|id| {
                let client = primary.client();
                let settings = settings.clone();
                let (stop, latencies) = (stop.clone(), latencies.clone());
                std::thread::spawn(move || worker(id, client, &settings, &stop, &latencies))
            })
            .collect();
        Churn { threads, latencies }
    }

    /// The latencies (µs) recorded since the last call.
    pub fn take_latencies(&self) -> Vec<u32> {
        std::mem::take(&mut *self.latencies.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Waits for the threads; their errors fail the report. Returns the
    /// number of calls made.
    pub fn join(self, report: &mut Report) -> u64 {
        let mut operations = 0;
        for thread in self.threads {
            match thread.join() {
                Ok(outcome) => {
                    operations += outcome.operations;
                    for error in outcome.errors.into_iter().take(3) {
                        report.fail(format!("client error: {error}"));
                    }
                }
                Err(_) => report.fail("a client thread panicked".into()),
            }
        }
        operations
    }
}

fn worker(
    id: usize,
    client: redis::Client,
    settings: &Settings,
    stop: &AtomicBool,
    latencies: &Mutex<Vec<u32>>,
) -> Outcome {
    let mut outcome = Outcome::default();
    let mut conn = match client.get_connection() {
        Ok(conn) => conn,
        Err(error) => {
            outcome.errors.push(format!("connect: {error}"));
            return outcome;
        }
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(60)));
    let mut rng = StdRng::seed_from_u64(0x50AC_0000 + id as u64);
    let mut held: VecDeque<(String, String)> = VecDeque::new();
    let mut batch = Vec::with_capacity(256);
    let mut serial = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let ttl = rng.random_range(settings.ttl_ms.0..=settings.ttl_ms.1);
        let roll = rng.random_range(0..100);
        serial += 1;
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        let mut took: Option<(String, String)> = None;
        // A wait lasts as long as the lock is busy (up to 20 ms): its time
        // is not the server's latency, so it is left out of the figures.
        let mut waits = false;
        if roll < 40 || held.is_empty() {
            let key = if rng.random_bool(0.1) {
                format!("soak:hot:{}", rng.random_range(0..HOT_KEYS))
            } else {
                format!("soak:{}", rng.random_range(0..settings.keys))
            };
            let owner = format!("w{id}-{serial}");
            cmd.arg(&key).arg(&owner).arg(ttl);
            took = Some((key, owner));
        } else if roll < 50 {
            let (key, owner) = &held[rng.random_range(0..held.len())];
            cmd.arg(key).arg(owner).arg(ttl);
        } else if roll < 65 {
            let (key, owner) = &held[rng.random_range(0..held.len())];
            cmd = redis::cmd("LOCK.EXTEND");
            cmd.arg(key).arg(owner).arg(ttl);
        } else if roll < 90 {
            let Some((key, owner)) = held.pop_front() else {
                continue;
            };
            cmd = redis::cmd("LOCK.RELEASE");
            cmd.arg(key).arg(owner).arg("ALL");
        } else {
            let key = format!("soak:hot:{}", rng.random_range(0..HOT_KEYS));
            let owner = format!("w{id}-{serial}");
            cmd.arg(&key).arg(&owner).arg(ttl).arg("WAIT").arg(20);
            took = Some((key, owner));
            waits = true;
        }
        let started = Instant::now();
        let reply: redis::RedisResult<Value> = cmd.query(&mut conn);
        let micros = u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX);
        outcome.operations += 1;
        if !waits {
            batch.push(micros);
        }
        if batch.len() == batch.capacity() {
            latencies
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .append(&mut batch);
        }
        match reply {
            Ok(Value::Int(_)) => {
                if let Some(hold) = took {
                    held.push_back(hold);
                    if held.len() > KEEP {
                        held.pop_front();
                    }
                }
            }
            Ok(_) => {}
            Err(error) => {
                if outcome.errors.len() < 10 {
                    let sent =
                        String::from_utf8_lossy(&cmd.get_packed_command()).replace("\r\n", " ");
                    outcome.errors.push(format!("{sent}: {error}"));
                }
            }
        }
    }
    latencies
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .append(&mut batch);
    outcome
}
