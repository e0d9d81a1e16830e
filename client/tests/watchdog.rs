//! The watchdog keeps a lock past its TTL, stops on release or drop, and
//! reports the loss when a majority of nodes dies; `with_lock` cancels the
//! work when that happens.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{eventually, holder, raw, test_config, Cluster};
use redis_lock_client::{Config, Error, LockStatus};

fn short_lease_config() -> Config {
    Config {
        node_timeout: Duration::from_millis(100),
        ..test_config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_watchdog_keeps_the_lock_past_its_ttl() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client_with(short_lease_config());
    let ttl = Duration::from_millis(600);
    let guard = redlock
        .acquire("kept", ttl)
        .await
        .unwrap()
        .watchdog()
        .unwrap();

    // Three full TTLs pass: without renewal the lease would have ended.
    tokio::time::sleep(ttl * 3).await;

    assert!(!guard.is_lost());
    assert!(guard.is_held(), "validity {:?}", guard.validity());
    for server in &cluster.servers {
        assert_eq!(holder(server, "kept").as_deref(), Some(guard.owner()));
    }
    let rival = cluster.client().lock("kept", ttl).unwrap();
    assert!(matches!(
        rival.try_acquire().await,
        Err(Error::NotAcquired { .. })
    ));

    let release = guard.release().await.unwrap();
    assert_eq!(release.released, 5);
    for server in &cluster.servers {
        assert_eq!(holder(server, "kept"), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_watchdog_signals_loss_when_a_majority_dies() {
    let mut cluster = Cluster::start(5);
    let redlock = cluster.client_with(short_lease_config());
    let ttl = Duration::from_millis(1_000);
    let guard = redlock
        .acquire("doomed", ttl)
        .await
        .unwrap()
        .watchdog()
        .unwrap();
    let mut status = guard.status();
    assert_eq!(*status.borrow_and_update(), LockStatus::Held);

    let killed = Instant::now();
    for i in [0, 1, 2] {
        cluster.servers[i].kill9();
    }
    let lost = tokio::time::timeout(Duration::from_secs(10), guard.lost()).await;
    eprintln!(
        "loss reported {:?} after the majority died (ttl {ttl:?})",
        killed.elapsed()
    );
    assert!(matches!(lost, Ok(LockStatus::Lost { .. })), "{lost:?}");
    assert!(guard.is_lost());
    // Reported at most the margin before the validity ends (not after it:
    // work stopped on the signal stops while the lock is still held).
    let margin = short_lease_config().watchdog_margin;
    assert!(
        guard.validity().is_none_or(|left| left <= margin),
        "loss reported {:?} before the validity ends (margin {margin:?})",
        guard.validity()
    );
    // The channel saw it too.
    assert!(matches!(
        *status.borrow_and_update(),
        LockStatus::Lost { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropping_the_watchdog_stops_renewal_and_frees_the_lock() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client_with(short_lease_config());
    let guard = redlock
        .acquire("dropped", Duration::from_secs(30))
        .await
        .unwrap()
        .watchdog()
        .unwrap();
    drop(guard);
    for server in &cluster.servers {
        assert!(testkit::wait_until(Duration::from_secs(5), || holder(
            server, "dropped"
        )
        .is_none()));
    }
}

/// A lock released through the guard (which derefs to the lock) is no
/// longer watched, and the status says `Stopped`, not `Held` (the renewal
/// task used to end without a word, and `status()` read `Held` for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_through_the_guard_stops_the_watchdog_with_that_status() {
    let cluster = Cluster::start(3);
    let redlock = cluster.client_with(short_lease_config());
    let guard = redlock
        .acquire("released-under", Duration::from_secs(30))
        .await
        .unwrap()
        .watchdog()
        .unwrap();
    let status = guard.status();
    assert_eq!(*status.borrow(), LockStatus::Held);
    guard.release_all().await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || *status.borrow()
            == LockStatus::Stopped)
        .await,
        "status after the release: {:?}",
        *status.borrow()
    );
    assert!(!guard.is_held());
    assert!(!guard.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_lock_runs_the_work_and_releases() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();
    let servers = &cluster.servers;
    let (token, owner) = redlock
        .with_lock("scoped", Duration::from_secs(10), |ctx| async move {
            assert!(ctx.validity().is_some());
            (ctx.fencing_token().await.unwrap(), ctx.owner().to_string())
        })
        .await
        .unwrap();
    assert!(token > 0);
    assert!(!owner.is_empty());
    for server in servers {
        assert_eq!(holder(server, "scoped"), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_lock_cancels_the_work_when_the_lock_is_lost() {
    let mut cluster = Cluster::start(5);
    let redlock = cluster.client_with(short_lease_config());
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let work = tokio::spawn(async move {
        redlock
            .with_lock(
                "cancelled",
                Duration::from_millis(1_000),
                |_ctx| async move {
                    started_tx.send(()).unwrap();
                    // Work that would never end by itself.
                    std::future::pending::<()>().await;
                },
            )
            .await
    });
    started_rx.await.unwrap();
    for i in [1, 2, 3] {
        cluster.servers[i].kill9();
    }
    let result = tokio::time::timeout(Duration::from_secs(10), work).await;
    assert!(matches!(result, Ok(Ok(Err(Error::LockLost)))), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_loss_is_signalled_while_the_lock_is_still_certainly_held() {
    let mut cluster = Cluster::start(5);
    let margin = Duration::from_millis(300);
    let config = Config {
        watchdog_margin: margin,
        ..short_lease_config()
    };
    let redlock = cluster.client_with(config);
    let guard = redlock
        .acquire("margin", Duration::from_millis(2_000))
        .await
        .unwrap()
        .watchdog()
        .unwrap();
    for i in [0, 1, 2] {
        cluster.servers[i].kill9();
    }
    let lost = tokio::time::timeout(Duration::from_secs(10), guard.lost()).await;
    assert!(matches!(lost, Ok(LockStatus::Lost { .. })), "{lost:?}");
    // Signalled the margin before the end: some validity is left, so work
    // that stops on the signal stops inside the guarantee.
    let left = guard.validity();
    assert!(
        left.is_some_and(|left| left <= margin),
        "validity left at the loss signal: {left:?} (margin {margin:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watchdog_started_late_renews_before_it_reports_anything() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client_with(short_lease_config());
    let ttl = Duration::from_millis(1_200);
    let lock = redlock.acquire("late", ttl).await.unwrap();
    // Less validity is left than the renewal interval (a third of the TTL):
    // the watchdog must renew at once, not sleep to the end and give up.
    let shorter_than_interval = eventually(Duration::from_secs(10), || {
        lock.validity().is_some_and(|v| v < ttl / 4)
    })
    .await;
    assert!(shorter_than_interval, "validity {:?}", lock.validity());
    let guard = lock.watchdog().unwrap();
    tokio::time::sleep(ttl * 2).await;
    assert!(!guard.is_lost(), "the watchdog gave up without renewing");
    assert!(guard.is_held(), "validity {:?}", guard.validity());
    guard.release().await.unwrap();
}

/// Issue #29, item 3: a renewal that fails without a majority of outright
/// denials used to leave fewer than a quorum of lease bounds, and the loop
/// then ended as if the lock had been released: `lost()` resolved
/// `Stopped`, `status` said `Held`, and `is_lost` stayed false while
/// another client could take the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renewal_that_leaves_no_quorum_of_leases_is_reported_lost() {
    let mut cluster = Cluster::start(3);
    // One node down from the start: the lock is won on the other two.
    cluster.servers[2].kill9();
    let redlock = cluster.client();
    let guard = redlock
        .acquire("silent", Duration::from_secs(3))
        .await
        .unwrap()
        .watchdog()
        .unwrap();
    let owner = guard.owner().to_string();
    // Node 0 forgets the lock (one outright denial, not a majority of
    // them); node 1 freezes (its renewal times out).
    raw(
        &cluster.servers[0],
        &["LOCK.RELEASE", "silent", &owner, "ALL"],
    );
    cluster.servers[1].pause();
    let lost = tokio::time::timeout(Duration::from_secs(30), guard.lost()).await;
    cluster.servers[1].resume();
    assert!(matches!(lost, Ok(LockStatus::Lost { .. })), "{lost:?}");
    assert!(guard.is_lost());
    assert!(!guard.is_held());
    assert!(matches!(*guard.status().borrow(), LockStatus::Lost { .. }));
}

/// Issue #29, item 4: `extend_with` a shorter TTL under a watchdog used to
/// leave the renewal planned for the longer lease, so the shortened lease
/// ended on the nodes (and another client could acquire) long before the
/// watchdog woke up. Now the watchdog re-plans at once and keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shortened_lease_replans_the_watchdog_at_once() {
    let cluster = Cluster::start(3);
    let redlock = cluster.client();
    // Renewals every 20 s (a third of the TTL).
    let guard = redlock
        .acquire("shortened", Duration::from_secs(60))
        .await
        .unwrap()
        .watchdog()
        .unwrap();
    let shorter = Duration::from_secs(3);
    guard.extend_with(shorter).await.unwrap();
    let owner = guard.owner().to_string();
    // Twice the shortened lease: without a renewal it would have ended on
    // every node by then.
    let until = Instant::now() + shorter * 2;
    while Instant::now() < until {
        for server in &cluster.servers {
            assert_eq!(
                holder(server, "shortened").as_deref(),
                Some(owner.as_str()),
                "the shortened lease ended on a node while the watchdog slept"
            );
        }
        assert!(guard.is_held(), "validity {:?}", guard.validity());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
}
