//! Shared locks and semaphores through the client: Redlock over five
//! masters with `SHARED` and `SHARED LIMIT n`, and the single-node `WAIT`
//! path. Each holder has its own fencing token, written back to a quorum.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{info_int, raw, test_config, Cluster};
use redis::Value;
use redis_lock_client::{Config, Error, Kind, Redlock};

/// Holders of `key` on one node (`LOCK.HOLDERS`).
fn holders_on(cluster: &Cluster, node: usize, key: &str) -> usize {
    match raw(&cluster.servers[node], &["LOCK.HOLDERS", key]) {
        Value::Array(items) => items.len(),
        other => panic!("LOCK.HOLDERS: {other:?}"),
    }
}

/// A client that gives up quickly: a refused acquisition fails fast.
fn impatient(cluster: &Cluster) -> Redlock {
    cluster.client_with(Config {
        retry_count: 3,
        ..test_config()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_hold_together_and_a_writer_waits_for_them() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();
    let ttl = Duration::from_secs(30);
    let r1 = redlock.acquire_shared("cache", ttl).await.unwrap();
    let r2 = redlock.acquire_shared("cache", ttl).await.unwrap();
    assert_eq!(r1.kind(), Kind::SHARED);
    assert!(r1.validity().unwrap() > Duration::from_secs(25));
    let (t1, t2) = (
        r1.fencing_token().await.unwrap(),
        r2.fencing_token().await.unwrap(),
    );
    assert!(t2 > t1, "each reader has its own, later token");
    for node in 0..5 {
        assert_eq!(holders_on(&cluster, node, "cache"), 2);
    }
    let writer = impatient(&cluster).lock("cache", ttl).unwrap();
    assert!(
        matches!(writer.acquire().await, Err(Error::NotAcquired { .. })),
        "a writer got a lock readers hold"
    );
    r1.extend().await.unwrap();
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    writer.acquire().await.unwrap();
    let tw = writer.fencing_token().await.unwrap();
    assert!(tw > t2);
    let reader = impatient(&cluster).lock_shared("cache", ttl).unwrap();
    assert!(matches!(
        reader.acquire().await,
        Err(Error::NotAcquired { .. })
    ));
    writer.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_hands_out_its_permits_and_no_more() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();
    let pool = redlock.semaphore("downstream", 3).unwrap();
    assert_eq!(pool.permits(), 3);
    let ttl = Duration::from_secs(30);
    let mut permits = Vec::new();
    for _ in 0..3 {
        permits.push(pool.acquire(ttl).await.unwrap());
    }
    let mut tokens = Vec::new();
    for permit in &permits {
        tokens.push(permit.fencing_token().await.unwrap());
    }
    assert!(tokens.windows(2).all(|w| w[1] > w[0]));
    let fourth = impatient(&cluster)
        .semaphore("downstream", 3)
        .unwrap()
        .permit(ttl)
        .unwrap();
    assert!(matches!(
        fourth.acquire().await,
        Err(Error::NotAcquired { .. })
    ));
    permits.remove(0).release().await.unwrap();
    fourth.acquire().await.unwrap();
    assert!(fourth.fencing_token().await.unwrap() > tokens[2]);
    assert_eq!(
        info_int(&cluster.servers[0], "downstream", "holders"),
        Some(3)
    );
    // Another number of permits on the same resource is refused by every
    // node: the acquisition fails, nothing is granted.
    let other = impatient(&cluster).semaphore("downstream", 5).unwrap();
    assert!(other.acquire(ttl).await.is_err());
    assert_eq!(
        info_int(&cluster.servers[0], "downstream", "holders"),
        Some(3)
    );
    assert!(matches!(
        redlock.semaphore("none", 0),
        Err(Error::InvalidConfig(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_single_node_permit_waits_on_the_server_until_one_is_free() {
    let cluster = Cluster::start(1);
    let redlock = cluster.client_with(Config {
        acquire_timeout: Some(Duration::from_secs(10)),
        ..test_config()
    });
    let pool = redlock.semaphore("jobs", 1).unwrap();
    let first = pool.acquire(Duration::from_secs(30)).await.unwrap();
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.acquire(Duration::from_secs(30)).await })
    };
    // The second permit waits in the node's queue (LOCK.ACQUIRE … WAIT).
    let queued = async {
        loop {
            if info_int(&cluster.servers[0], "jobs", "waiters") == Some(1) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), queued)
        .await
        .expect("the second permit never queued");
    let t1 = first.fencing_token().await.unwrap();
    first.release().await.unwrap();
    let second = waiter.await.unwrap().unwrap();
    assert!(second.fencing_token().await.unwrap() > t1);
    second.release().await.unwrap();
}

#[test]
fn the_blocking_api_takes_shared_locks_and_permits() {
    let cluster = Cluster::start(3);
    let redlock =
        redis_lock_client::blocking::Redlock::with_config(cluster.urls(), test_config()).unwrap();
    let ttl = Duration::from_secs(30);
    let reader = redlock.acquire_shared("report", ttl).unwrap();
    let other = redlock.acquire_shared("report", ttl).unwrap();
    assert!(other.fencing_token().unwrap() > reader.fencing_token().unwrap());
    reader.release().unwrap();
    other.release().unwrap();
    let pool = redlock.semaphore("pool", 2).unwrap();
    let a = pool.acquire(ttl).unwrap();
    let b = pool.acquire(ttl).unwrap();
    assert_eq!(info_int(&cluster.servers[1], "pool", "holders"), Some(2));
    a.release().unwrap();
    b.release().unwrap();
    assert_eq!(info_int(&cluster.servers[1], "pool", "holders"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watchdogs_keep_each_reader_past_its_ttl() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client_with(Config {
        node_timeout: Duration::from_millis(100),
        ..test_config()
    });
    let ttl = Duration::from_millis(600);
    let r1 = redlock.acquire_shared("kept", ttl).await.unwrap();
    let r2 = redlock.acquire_shared("kept", ttl).await.unwrap();
    let (g1, g2) = (r1.watchdog().unwrap(), r2.watchdog().unwrap());
    // Three full TTLs pass: without renewals both leases would have ended.
    tokio::time::sleep(ttl * 3).await;
    assert!(!g1.is_lost() && !g2.is_lost());
    for node in 0..5 {
        assert_eq!(holders_on(&cluster, node, "kept"), 2, "node {node}");
    }
    let writer = impatient(&cluster).lock("kept", ttl).unwrap();
    assert!(matches!(
        writer.try_acquire().await,
        Err(Error::NotAcquired { .. })
    ));
    assert_eq!(g1.release().await.unwrap().released, 5);
    for node in 0..5 {
        assert_eq!(holders_on(&cluster, node, "kept"), 1, "node {node}");
    }
    g2.release().await.unwrap();
    writer.acquire().await.unwrap();
}

/// A client that reaches only the nodes in `reach` of `cluster`'s five: the
/// others' addresses refuse connections, as behind a partition.
fn partitioned(cluster: &Cluster, reach: &[usize], dead: &[String]) -> Redlock {
    let mut dead = dead.iter();
    let urls: Vec<String> = (0..cluster.servers.len())
        .map(|i| {
            if reach.contains(&i) {
                cluster.servers[i].url()
            } else {
                dead.next().unwrap().clone()
            }
        })
        .collect();
    Redlock::with_config(
        urls,
        Config {
            retry_count: 0,
            ..test_config()
        },
    )
    .unwrap()
}

/// Three clients that each reach a different three of the five nodes (what
/// a partition does): with a majority as the quorum they would each win a
/// permit of a semaphore of two ({0,1,2}, {0,3,4}, {1,2,3}: no node grants
/// more than two), three holders of two permits. A permit needs more than
/// nodes × permits / (permits + 1) grants (four of five here), so that
/// permits + 1 holders cannot all have won theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_that_reach_different_majorities_never_hold_more_permits_than_there_are() {
    let cluster = Cluster::start(5);
    let dead: Vec<String> = {
        let mut ports = Vec::new();
        while ports.len() < 2 {
            let port = testkit::free_port();
            if !ports.contains(&port) {
                ports.push(port);
            }
        }
        ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect()
    };
    let ttl = Duration::from_secs(30);
    let mut held = Vec::new();
    for reach in [[0, 1, 2], [0, 3, 4], [1, 2, 3]] {
        let client = partitioned(&cluster, &reach, &dead);
        let permit = client.semaphore("pool", 2).unwrap().permit(ttl).unwrap();
        if permit.acquire().await.is_ok() {
            assert!(permit.validity().is_some());
            held.push((reach, permit));
        }
    }
    let holders: Vec<_> = held.iter().map(|(reach, _)| reach).collect();
    assert!(
        held.len() <= 2,
        "{} holders of a semaphore of 2 permits, reaching {holders:?}",
        held.len()
    );
    // No node hands out more than its two permits either way.
    for server in &cluster.servers {
        assert!(info_int(server, "pool", "holders").unwrap_or(0) <= 2);
    }
    for (_, permit) in held {
        permit.release().await.unwrap();
    }
    // A client that reaches every node still gets both permits, and no third.
    let redlock = impatient(&cluster);
    let pool = redlock.semaphore("pool", 2).unwrap();
    let first = pool.acquire(ttl).await.unwrap();
    let second = pool.acquire(ttl).await.unwrap();
    assert!(pool.acquire(ttl).await.is_err());
    // One unreachable node leaves the four grants a permit needs.
    let four = partitioned(&cluster, &[0, 1, 2, 3], &dead);
    first.release().await.unwrap();
    let permit = four
        .semaphore("pool", 2)
        .unwrap()
        .acquire(ttl)
        .await
        .unwrap();
    permit.release().await.unwrap();
    second.release().await.unwrap();
}
