//! Release, reentrancy and extension on five masters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{holder, info_int, test_config, Cluster};
use redis_lock_client::{Config, Error};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_after_expiry_is_reported_and_frees_nothing_of_others() {
    let cluster = Cluster::start(5);
    let config = Config {
        node_timeout: Duration::from_millis(50),
        ..test_config()
    };
    let redlock = cluster.client_with(config);
    let lock = redlock
        .acquire("overrun", Duration::from_millis(200))
        .await
        .unwrap();
    // The critical section overruns: wait until every node let the lease go.
    for server in &cluster.servers {
        assert!(testkit::wait_until(Duration::from_secs(5), || holder(
            server, "overrun"
        )
        .is_none()));
    }
    assert!(!lock.is_held());
    // Someone else takes the resource meanwhile.
    let next = redlock
        .acquire("overrun", Duration::from_secs(10))
        .await
        .unwrap();

    let release = lock.release().await.unwrap();
    assert!(release.lapsed(), "{release:?}");
    assert_eq!((release.released, release.not_held), (0, 5));
    for server in &cluster.servers {
        assert_eq!(holder(server, "overrun").as_deref(), Some(next.owner()));
    }
    // Releasing again is a caller bug, reported as such.
    assert!(matches!(lock.release().await, Err(Error::NotHeld)));
    assert!(!next.release().await.unwrap().lapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_are_released_one_by_one() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();
    let lock = redlock.lock("nested", Duration::from_secs(10)).unwrap();
    assert_eq!(lock.acquire().await.unwrap().holds, 1);
    assert_eq!(lock.acquire().await.unwrap().holds, 2);
    assert_eq!(lock.holds(), 2);
    for server in &cluster.servers {
        assert_eq!(info_int(server, "nested", "holds"), Some(2));
    }

    let inner = lock.release().await.unwrap();
    assert_eq!(inner.holds_left, 1);
    assert!(inner.outcomes.is_empty(), "inner releases stay local");
    assert!(lock.is_held());
    let rival = redlock.lock("nested", Duration::from_secs(10)).unwrap();
    assert!(matches!(
        rival.try_acquire().await,
        Err(Error::NotAcquired { .. })
    ));

    let outer = lock.release().await.unwrap();
    assert_eq!((outer.holds_left, outer.released), (0, 5));
    for server in &cluster.servers {
        assert_eq!(holder(server, "nested"), None);
    }
    assert!(rival.try_acquire().await.is_ok());
    rival.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn extend_renews_the_lease_on_the_nodes() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();
    let lock = redlock
        .acquire("extended", Duration::from_millis(2_000))
        .await
        .unwrap();
    let extended = lock.extend_with(Duration::from_secs(60)).await.unwrap();
    assert!(extended.validity > Duration::from_secs(50));
    assert_eq!(
        (extended.confirmed, extended.not_held, extended.missing()),
        (5, 0, 0)
    );
    for server in &cluster.servers {
        assert!(info_int(server, "extended", "pttl").unwrap() > 50_000);
    }
    lock.release().await.unwrap();
    assert!(matches!(lock.extend().await, Err(Error::NotHeld)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_invalid_ttl_is_a_configuration_error() {
    let cluster = Cluster::start(1);
    let redlock = cluster.client();
    assert!(matches!(
        redlock.lock("x", Duration::from_millis(100)),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        redlock.lock("x", Duration::ZERO),
        Err(Error::InvalidConfig(_))
    ));
}
