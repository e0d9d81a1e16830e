//! The client's validity and fencing rules and its behaviour on
//! cancellation, on real module-loaded masters: each test reproduces a
//! defect of an earlier client (issue #15) and checks the fixed rule.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{eventually, holder, info_int, test_config, Cluster};
use redis_lock_client::{Config, Error, Redlock};

fn nobody_holds(cluster: &Cluster, key: &str, nodes: &[usize]) -> bool {
    nodes
        .iter()
        .all(|&i| holder(&cluster.servers[i], key).is_none())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_shorter_extension_shortens_the_validity() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();
    let lock = redlock
        .acquire("shorter", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(lock.validity().unwrap() > Duration::from_secs(25));
    // Three of five nodes are paused: the extension to 1 s runs on two
    // nodes only and fails. Those two now end their leases within 1 s.
    for i in [2, 3, 4] {
        cluster.servers[i].pause();
    }
    let result = lock.extend_with(Duration::from_millis(1_000)).await;
    for i in [2, 3, 4] {
        cluster.servers[i].resume();
    }
    assert!(
        matches!(result, Err(Error::QuorumLost { confirmed: 2, .. })),
        "{result:?}"
    );
    // The paused nodes ran the extension when they resumed: every lease now
    // ends within a second of the round, and so must the validity.
    let validity = lock.validity();
    assert!(
        validity.is_none_or(|left| left <= Duration::from_millis(1_000)),
        "validity {validity:?} outlasts the 1 s leases the nodes now hold"
    );
    for server in &cluster.servers {
        let pttl = info_int(server, "shorter", "pttl");
        assert!(pttl.is_none_or(|pttl| pttl <= 1_000), "pttl {pttl:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_renewal_after_a_longer_extension_comes_back_to_the_ttl() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();
    let ttl = Duration::from_millis(1_500);
    let lock = redlock.acquire("longer", ttl).await.unwrap();
    lock.extend_with(Duration::from_secs(60)).await.unwrap();
    assert!(lock.validity().unwrap() > Duration::from_secs(50));
    // A renewal at the original TTL reaches two nodes only.
    for i in [0, 1, 2] {
        cluster.servers[i].pause();
    }
    let result = lock.extend().await;
    for i in [0, 1, 2] {
        cluster.servers[i].resume();
    }
    assert!(result.is_err(), "{result:?}");
    let validity = lock.validity();
    assert!(
        validity.is_none_or(|left| left <= ttl),
        "validity {validity:?} after a failed renewal at {ttl:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_re_entry_after_a_lapse_gets_a_token_above_the_holder_in_between() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();
    let ttl = Duration::from_millis(400);
    let a = redlock.lock("lapse", ttl).unwrap();
    a.acquire().await.unwrap();
    let first = a.fencing_token().await.unwrap();
    // A's leases end everywhere; B takes the lock, fences and releases.
    assert!(
        eventually(Duration::from_secs(10), || nobody_holds(
            &cluster,
            "lapse",
            &[0, 1, 2, 3, 4]
        ))
        .await
    );
    let b = redlock.acquire("lapse", ttl).await.unwrap();
    let between = b.fencing_token().await.unwrap();
    assert!(between > first);
    b.release().await.unwrap();
    // A still believes it holds one hold: acquiring again re-enters, and
    // the nodes grant afresh with new tokens.
    assert_eq!(a.holds(), 1);
    let again = a.acquire().await.unwrap();
    assert_eq!(again.holds, 2);
    let token = a.fencing_token().await.unwrap();
    assert!(
        token > between,
        "A's token {token} after re-entry is not above B's {between} (A's first was {first})"
    );
    a.release_all().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_acquisition_cancelled_mid_round_leaves_no_grant_behind() {
    let cluster = Cluster::start(3);
    let redlock = cluster.client();
    let lock = redlock.lock("cancelled", Duration::from_secs(30)).unwrap();
    // One node is paused, so the round waits the node timeout for it while
    // the other two have granted; the caller gives up long before that.
    cluster.servers[2].pause();
    let result = tokio::time::timeout(Duration::from_millis(30), lock.acquire()).await;
    assert!(
        result.is_err(),
        "the acquisition was not cancelled: {result:?}"
    );
    assert_eq!(lock.holds(), 0);
    // The abandoned round finishes in the background and undoes its grants.
    let freed = eventually(Duration::from_secs(5), || {
        nobody_holds(&cluster, "cancelled", &[0, 1])
    })
    .await;
    cluster.servers[2].resume();
    assert!(
        freed,
        "the cancelled acquisition left its grants on the nodes"
    );
    assert!(
        eventually(Duration::from_secs(5), || nobody_holds(
            &cluster,
            "cancelled",
            &[0, 1, 2]
        ))
        .await
    );
    // The handle is usable again, and a rival gets the lock at once.
    let rival = redlock.lock("cancelled", Duration::from_secs(30)).unwrap();
    rival.try_acquire().await.unwrap();
    rival.release().await.unwrap();
    lock.acquire().await.unwrap();
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_cancelled_at_once_still_frees_every_node() {
    let cluster = Cluster::start(3);
    let redlock = cluster.client();
    let lock = redlock
        .acquire("let-go", Duration::from_secs(30))
        .await
        .unwrap();
    cluster.servers[2].pause();
    let result = tokio::time::timeout(Duration::from_millis(1), lock.release()).await;
    assert!(result.is_err(), "the release was not cancelled: {result:?}");
    let freed = eventually(Duration::from_secs(5), || {
        nobody_holds(&cluster, "let-go", &[0, 1])
    })
    .await;
    cluster.servers[2].resume();
    assert!(freed);
    assert!(
        eventually(Duration::from_secs(5), || nobody_holds(
            &cluster,
            "let-go",
            &[0, 1, 2]
        ))
        .await
    );
    assert_eq!(lock.holds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_single_node_wait_is_not_granted_later() {
    let cluster = Cluster::start(1);
    let server = &cluster.servers[0];
    common::block(server, "queue");
    let redlock = cluster.client();
    let lock = redlock.lock("queue", Duration::from_secs(30)).unwrap();
    let result = tokio::time::timeout(Duration::from_millis(200), lock.acquire()).await;
    assert!(result.is_err());
    assert!(
        eventually(Duration::from_secs(5), || info_int(
            server, "queue", "waiters"
        ) == Some(0))
        .await
    );
    common::unblock(server, "queue");
    // Nobody is waiting, so nobody is granted: the key stays free.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(holder(server, "queue"), None);
    assert_eq!(lock.holds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_single_node_wait_ends_by_the_acquire_deadline_and_is_undone_after() {
    let cluster = Cluster::start(1);
    let server = &cluster.servers[0];
    common::block(server, "slow");
    let deadline = Duration::from_millis(600);
    let config = Config {
        acquire_timeout: Some(deadline),
        ..test_config()
    };
    let redlock = Redlock::with_config(cluster.urls(), config).unwrap();
    let lock = redlock.lock("slow", Duration::from_secs(30)).unwrap();
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        let result = lock.acquire().await;
        (result, lock)
    });
    // The wait is under way on the server; then the server stops answering.
    assert!(
        eventually(Duration::from_secs(5), || info_int(
            server, "slow", "waiters"
        ) == Some(1))
        .await
    );
    server.pause();
    let (result, lock) = waiting.await.unwrap();
    let took = started.elapsed();
    server.resume();
    assert!(result.is_err(), "{result:?}");
    assert!(
        took < deadline + Duration::from_millis(150),
        "acquire took {took:?} with acquire_timeout {deadline:?}"
    );
    // After the server resumes, the wait ends and the undo follows it: no
    // waiter is left and, once the blocker leaves, nobody holds the key.
    assert!(
        eventually(Duration::from_secs(5), || info_int(
            server, "slow", "waiters"
        ) == Some(0))
        .await
    );
    common::unblock(server, "slow");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(holder(server, "slow"), None);
    assert_eq!(lock.holds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fencing_token_after_the_validity_is_refused_as_expired() {
    let cluster = Cluster::start(3);
    let redlock = cluster.client();
    let lock = redlock
        .acquire("late-token", Duration::from_millis(400))
        .await
        .unwrap();
    let token = lock.fencing_token().await.unwrap();
    assert!(eventually(Duration::from_secs(5), || lock.validity().is_none()).await);
    // Cached or not, a token is worth nothing once the lock may be held by
    // someone else.
    let late = lock.fencing_token().await;
    assert!(
        matches!(late, Err(Error::Expired)),
        "{late:?} (token was {token})"
    );
    assert!(matches!(lock.extend().await, Err(Error::Expired)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn silent_nodes_do_not_make_a_release_look_lapsed() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();
    let lock = redlock
        .acquire("intact", Duration::from_secs(30))
        .await
        .unwrap();
    let extended = lock.extend().await.unwrap();
    assert_eq!((extended.confirmed, extended.not_held), (5, 0));
    for i in [2, 3, 4] {
        cluster.servers[i].pause();
    }
    let release = lock.release().await.unwrap();
    for i in [2, 3, 4] {
        cluster.servers[i].resume();
    }
    assert_eq!(
        (release.released, release.not_held, release.failed),
        (2, 0, 3)
    );
    assert!(!release.lapsed(), "{release:?}");
    assert!(!release.confirmed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_extension_reports_the_nodes_that_lost_the_lock() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();
    let lock = redlock
        .acquire("partial", Duration::from_secs(30))
        .await
        .unwrap();
    // Two nodes lose the lock (deleted behind the client's back).
    for i in [0, 1] {
        common::raw(&cluster.servers[i], &["DEL", "partial"]);
    }
    let extended = lock.extend().await.unwrap();
    assert_eq!(
        (extended.confirmed, extended.not_held, extended.missing()),
        (3, 2, 2)
    );
    lock.release().await.unwrap();
}
