//! Redlock with failed nodes: a minority down or paused does not stop it, a
//! majority down makes it fail within its deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{holder, test_config, Cluster};
use redis_lock_client::{Config, Error, NodeError, Reply};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_down_still_grants() {
    let mut cluster = Cluster::start(5);
    let redlock = cluster.client();
    cluster.servers[0].kill9();
    cluster.servers[3].kill9();

    let lock = redlock.lock("two-down", Duration::from_secs(10)).unwrap();
    let acquired = lock.acquire().await.unwrap();
    let granted: Vec<usize> = (0..5)
        .filter(|&i| matches!(acquired.outcomes[i].result, Ok(Reply::Granted { .. })))
        .collect();
    assert_eq!(granted, [1, 2, 4]);
    assert!(acquired.outcomes[0].is_failure() && acquired.outcomes[3].is_failure());
    for i in [1, 2, 4] {
        assert_eq!(
            holder(&cluster.servers[i], "two-down").as_deref(),
            Some(lock.owner())
        );
    }
    // Fencing and extension work on the surviving majority too.
    assert!(lock.fencing_token().await.unwrap() > 0);
    assert!(lock.extend().await.is_ok());

    let release = lock.release().await.unwrap();
    assert_eq!((release.released, release.not_held), (3, 0));
    assert!(!release.lapsed());
    for i in [1, 2, 4] {
        assert_eq!(holder(&cluster.servers[i], "two-down"), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_down_fails_within_the_deadline() {
    let mut cluster = Cluster::start(5);
    let deadline = Duration::from_millis(3_000);
    let config = Config {
        node_timeout: Duration::from_millis(100),
        retry_count: 1_000,
        retry_delay: Duration::from_millis(50),
        retry_jitter: Duration::from_millis(50),
        acquire_timeout: Some(deadline),
        ..Config::default()
    };
    let redlock = cluster.client_with(config);
    for i in [0, 2, 4] {
        cluster.servers[i].kill9();
    }

    let lock = redlock.lock("three-down", Duration::from_secs(10)).unwrap();
    let started = Instant::now();
    let error = lock.acquire().await.unwrap_err();
    let elapsed = started.elapsed();
    eprintln!("three nodes down: gave up after {elapsed:?}: {error}");

    let Error::NotAcquired {
        attempts, outcomes, ..
    } = error
    else {
        panic!("expected NotAcquired, got {error}")
    };
    assert!(attempts > 1, "it should have retried within the deadline");
    // The two live nodes granted, the three dead ones failed: no majority.
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| o.granted_token().is_some())
            .count(),
        2
    );
    assert_eq!(outcomes.iter().filter(|o| o.is_failure()).count(), 3);
    // A correctness bound, not a benchmark: the deadline is a promise.
    assert!(
        elapsed < deadline + Duration::from_millis(500),
        "took {elapsed:?}, deadline {deadline:?}"
    );
    // The partial grants were undone on the live nodes.
    assert!(!lock.is_held());
    for i in [1, 3] {
        assert_eq!(holder(&cluster.servers[i], "three-down"), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_node_costs_no_more_than_the_node_timeout() {
    let cluster = Cluster::start(5);
    let node_timeout = Duration::from_millis(200);
    let ttl = Duration::from_secs(10);
    let redlock = cluster.client_with(Config {
        node_timeout,
        ..test_config()
    });
    // Let the connections come up before one node freezes.
    let warm = redlock.acquire("warm-up", ttl).await.unwrap();
    warm.release().await.unwrap();

    cluster.servers[2].pause();
    let lock = redlock.lock("paused", ttl).unwrap();
    let started = Instant::now();
    let acquired = lock.acquire().await;
    let elapsed = started.elapsed();
    let acquired = acquired.unwrap();
    eprintln!("acquire with one paused node took {elapsed:?} (node timeout {node_timeout:?})");

    assert_eq!(acquired.attempts, 1);
    assert_eq!(
        acquired.outcomes[2].result,
        Err(NodeError::Timeout(node_timeout))
    );
    assert_eq!(
        acquired
            .outcomes
            .iter()
            .filter(|o| o.granted_token().is_some())
            .count(),
        4
    );
    // The round waited for the paused node once, not per retry or forever.
    assert!(elapsed < ttl, "took {elapsed:?}");
    assert!(acquired.validity > ttl / 2);

    let release = lock.release().await.unwrap();
    assert_eq!(release.released, 4);
    // The paused node gets the acquire and then the release, in order, once
    // it runs again: it must end up free, not locked until the TTL.
    cluster.servers[2].resume();
    let server = &cluster.servers[2];
    assert!(testkit::wait_until(Duration::from_secs(5), || holder(
        server, "paused"
    )
    .is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_node_is_used_again() {
    let mut cluster = Cluster::start(5);
    let redlock = cluster.client();
    let ttl = Duration::from_secs(10);
    let warm = redlock.acquire("warm-up", ttl).await.unwrap();
    warm.release().await.unwrap();

    cluster.servers[4].kill9();
    let lock = redlock.acquire("restarted", ttl).await.unwrap();
    lock.release().await.unwrap();
    cluster.servers[4].restart();

    // The node's connection reconnects on its own: within a few rounds it
    // grants again.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut rounds = 0;
    loop {
        rounds += 1;
        let lock = redlock.acquire("restarted", ttl).await.unwrap();
        let back = lock.release().await.unwrap().released == 5;
        if back {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted node never granted again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("restarted node granted again after {rounds} round(s)");
}
