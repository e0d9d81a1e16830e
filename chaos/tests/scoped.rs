//! The checker's window of a `with_lock` hold ends when the client drops
//! the work, not at the validity the client last reported: when the
//! watchdog reports the lock lost, `with_lock` drops the work (at its next
//! await) and only then releases the nodes that still hold the lock, so the
//! next holder may be granted at once. (A 180 s chaos run on Valkey found
//! that overlap in the checker's records, not in the system.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chaos::checker::{Checker, ViolationKind};
use chaos::workload::{ClientStats, NodeIndex, Shared};
use redis_lock_client::Redlock;
use testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_with_lock_hold_lost_and_released_does_not_overlap_the_next_holder() {
    let nodes: Vec<RedisServer> =
        tokio::task::spawn_blocking(|| (0..3).map(|_| RedisServer::start()).collect::<Vec<_>>())
            .await
            .unwrap();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let redlock = Redlock::with_config(urls, chaos::client_config()).unwrap();
    let checker = Arc::new(Checker::new());
    let stats = Arc::new(ClientStats::default());
    let node_index: NodeIndex = Arc::new(|_: &str| None);
    let shared = Shared {
        redlock: redlock.clone(),
        checker: checker.clone(),
        stats: stats.clone(),
        pause_requests: Arc::new(AtomicU64::new(0)),
        stop: Arc::new(AtomicBool::new(false)),
        node_index,
        held_ignores_validity: false,
    };
    let ttl = Duration::from_secs(3);
    let hold = tokio::spawn({
        let shared = shared.clone();
        async move { chaos::scoped::hold(&shared, 0, "r", ttl, Duration::from_secs(6)).await }
    });
    // The work took its token: the hold is under way.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !checker.holders().iter().any(|h| h.token.is_some()) {
        assert!(Instant::now() < deadline, "the hold never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Two of the three nodes forget the lock: the watchdog's next renewal
    // misses the quorum, the work is dropped and the lock released.
    for node in &nodes[..2] {
        let mut con = node
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("FLUSHALL").query_async(&mut con).await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(10), hold)
        .await
        .expect("the hold ended")
        .unwrap();
    assert_eq!(
        stats.styles.figures().scoped_lost,
        1,
        "the watchdog reported the loss"
    );
    // The next holder is granted at once, well inside the first one's last
    // reported validity.
    let lock = redlock.lock("r", ttl).unwrap();
    let acquired = lock.acquire().await.unwrap();
    let now = Instant::now();
    checker.begin_hold("r", 1, now, now, acquired.validity, Vec::new());
    let first = &checker.holders()[0];
    assert!(
        first.window_end <= now,
        "the first window must end when the work was dropped"
    );
    assert_eq!(checker.findings().count(ViolationKind::Overlap), 0);
    lock.release().await.unwrap();
}
