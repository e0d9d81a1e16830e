//! Many clients, each with its own connections, contend for one resource on
//! five masters; a shared holder slot and a deliberately racy counter show
//! whether two of them were ever inside the critical section together.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{test_config, Cluster};
use redis_lock_client::{Error, Redlock};

const WORKERS: usize = 8;
const ROUNDS: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_two_clients_hold_the_lock_at_once() {
    let cluster = Cluster::start(5);
    // 0: nobody inside; otherwise the worker's number + 1.
    let holder = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    // Read, pause, write: without mutual exclusion increments get lost.
    let counter = Arc::new(AtomicUsize::new(0));
    // Tokens in the order the holders held the lock.
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let not_acquired = Arc::new(AtomicUsize::new(0));

    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let redlock = Redlock::with_config(cluster.urls(), test_config()).unwrap();
        let (holder, overlaps, counter, tokens, not_acquired) = (
            holder.clone(),
            overlaps.clone(),
            counter.clone(),
            tokens.clone(),
            not_acquired.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut done = 0;
            while done < ROUNDS {
                let lock = redlock
                    .lock("shared-resource", Duration::from_secs(10))
                    .unwrap();
                match lock.acquire().await {
                    Ok(_) => {}
                    Err(Error::NotAcquired { .. }) => {
                        not_acquired.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(other) => panic!("worker {worker}: {other}"),
                }
                if holder.swap(worker + 1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let token = lock.fencing_token().await.unwrap();
                tokens.lock().unwrap().push(token);
                let seen = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                counter.store(seen + 1, Ordering::SeqCst);
                if holder.swap(0, Ordering::SeqCst) != worker + 1 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let release = lock.release().await.unwrap();
                assert!(
                    !release.lapsed(),
                    "worker {worker}: lease ended inside a 2 ms section: {release:?}"
                );
                done += 1;
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }

    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    assert_eq!(
        counter.load(Ordering::SeqCst),
        WORKERS * ROUNDS,
        "lost increments"
    );
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), WORKERS * ROUNDS);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens not increasing: {tokens:?}"
    );
    eprintln!(
        "{} grants to {WORKERS} contending clients, {} acquire calls ran out of retries",
        tokens.len(),
        not_acquired.load(Ordering::Relaxed)
    );
}
