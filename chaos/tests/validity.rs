//! The checker against the validity rule after a failed extension, on five
//! real nodes: a holder extends to a shorter TTL while a majority of nodes
//! is paused (the extension fails, yet every node shortens its lease once it
//! runs the command); the checker's window then follows the validity the
//! client reports, and a rival acquires once the leases end.
//!
//! With the client's rule (validity falls to what the nodes vouch for) the
//! checker finds no overlap. With the earlier rule (keep the old validity),
//! switched on through the hidden `unsafe_keep_validity_on_failure`, it
//! must find one: the negative control that shows the checker catches it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use chaos::checker::{Checker, ViolationKind};
use redis_lock_client::{Config, Redlock};
use testkit::RedisServer;

async fn overlaps_after_a_failed_shorter_extension(keep_old_validity: bool) -> usize {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let config = Config {
        node_timeout: Duration::from_millis(200),
        retry_count: 0,
        unsafe_keep_validity_on_failure: keep_old_validity,
        ..Config::default()
    };
    let redlock = Redlock::with_config(urls.clone(), config).unwrap();
    let checker = Checker::new();

    let started = Instant::now();
    let a = redlock
        .acquire("doc", Duration::from_secs(20))
        .await
        .unwrap();
    let a_hold = checker.begin_hold(
        "doc",
        0,
        started,
        Instant::now(),
        a.validity().unwrap(),
        vec![0, 1, 2, 3, 4],
    );
    for server in &servers[2..] {
        server.pause();
    }
    let extended = a.extend_with(Duration::from_millis(500)).await;
    for server in &servers[2..] {
        server.resume();
    }
    assert!(extended.is_err(), "{extended:?}");
    checker.renew_window(a_hold, a.validity());

    // The rival polls until the shortened leases have ended everywhere.
    let rival = Redlock::with_config(urls, Config::default()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let b = loop {
        let lock = rival.lock("doc", Duration::from_secs(5)).unwrap();
        let tried = Instant::now();
        if lock.try_acquire().await.is_ok() {
            let hold = checker.begin_hold(
                "doc",
                1,
                tried,
                Instant::now(),
                lock.validity().unwrap(),
                vec![],
            );
            break (lock, hold);
        }
        assert!(Instant::now() < deadline, "the rival never got the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    checker.end_hold(b.1);
    b.0.release().await.unwrap();
    checker.end_hold(a_hold);
    checker.findings().count(ViolationKind::Overlap)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_validity_after_a_failed_extension_never_overlaps_the_next_holder() {
    assert_eq!(overlaps_after_a_failed_shorter_extension(false).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_checker_catches_the_old_rule_that_kept_the_validity() {
    assert_eq!(overlaps_after_a_failed_shorter_extension(true).await, 1);
}
