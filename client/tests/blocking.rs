//! The blocking API, used from plain threads without a runtime.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{holder, Cluster};
use redis_lock_client::blocking::Redlock;
use redis_lock_client::{Config, Error};

fn config() -> Config {
    Config {
        node_timeout: Duration::from_millis(100),
        ..common::test_config()
    }
}

#[test]
fn acquire_fence_and_release_without_a_runtime() {
    let cluster = Cluster::start(3);
    let redlock = Redlock::with_config(cluster.urls(), config()).unwrap();
    let lock = redlock
        .acquire("blocking", Duration::from_secs(10))
        .unwrap();
    let first = lock.fencing_token().unwrap();
    for server in &cluster.servers {
        assert_eq!(holder(server, "blocking").as_deref(), Some(lock.owner()));
    }
    let rival = redlock.lock("blocking", Duration::from_secs(10)).unwrap();
    assert!(matches!(
        rival.try_acquire(),
        Err(Error::NotAcquired { .. })
    ));
    assert_eq!(lock.release().unwrap().released, 3);

    rival.acquire().unwrap();
    assert!(rival.fencing_token().unwrap() > first);
    // Dropping a held blocking lock releases it before returning.
    drop(rival);
    for server in &cluster.servers {
        assert_eq!(holder(server, "blocking"), None);
    }
}

#[test]
fn with_lock_and_a_watchdog_that_loses_its_majority() {
    let mut cluster = Cluster::start(3);
    let redlock = Redlock::with_config(cluster.urls(), config()).unwrap();
    let value = redlock.with_lock("work", Duration::from_secs(5), |guard| {
        guard.check().unwrap();
        guard.fencing_token().unwrap()
    });
    assert!(value.unwrap() > 0);

    let watchdog = redlock
        .acquire("watched", Duration::from_millis(600))
        .unwrap()
        .watchdog()
        .unwrap();
    assert!(
        !watchdog.wait_lost(Duration::from_millis(1_500)).unwrap(),
        "lost while all nodes were up"
    );
    cluster.servers[0].kill9();
    cluster.servers[1].kill9();
    assert!(watchdog.wait_lost(Duration::from_secs(10)).unwrap());
    assert!(watchdog.is_lost());
}

#[tokio::test]
async fn the_blocking_api_refuses_to_block_an_async_runtime() {
    let cluster = Cluster::start(1);
    let urls = cluster.urls();
    // Built outside, used inside a runtime.
    let redlock = std::thread::spawn(move || Redlock::with_config(urls, config()).unwrap())
        .join()
        .unwrap();
    assert!(matches!(
        redlock.acquire("inside", Duration::from_secs(5)),
        Err(Error::Runtime(_))
    ));
    // Dropping it here must not panic either.
    drop(redlock);
}

/// Issue #29, item 7: the blocking API used to refuse every thread with a
/// runtime handle, including `spawn_blocking`'s, the normal place to call
/// blocking code from async code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blocking_api_works_inside_spawn_blocking() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let servers: Vec<String> = cluster.urls();
    // Built outside, used inside spawn_blocking.
    let outside = std::thread::spawn(move || Redlock::with_config(urls, config()).unwrap())
        .join()
        .unwrap();
    let urls = servers.clone();
    let result = tokio::task::spawn_blocking(move || {
        let lock = outside.acquire("spawned", Duration::from_secs(10))?;
        let token = lock.fencing_token()?;
        let owner = lock.owner().to_string();
        let released = lock.release()?.released;
        // Built inside, used and dropped inside (a held lock's drop
        // releases it before returning).
        let inside = Redlock::with_config(urls, config())?;
        let work = inside.with_lock("spawned", Duration::from_secs(10), |guard| {
            guard.check().and_then(|()| guard.fencing_token())
        })??;
        let held = inside.acquire("dropped", Duration::from_secs(10))?;
        drop(held);
        Ok::<_, Error>((token, owner, released, work))
    })
    .await
    .unwrap();
    let (token, owner, released, work) = result.unwrap();
    assert!(token > 0 && !owner.is_empty());
    assert_eq!(released, 3);
    assert!(work > token);
    for server in &cluster.servers {
        assert_eq!(holder(server, "spawned"), None);
        assert_eq!(holder(server, "dropped"), None);
    }
}

/// Issue #29, item 3 through `with_lock`: a renewal that left fewer than a
/// quorum of lease bounds used to end the watchdog silently, so
/// `guard.check()` stayed `Ok` and `with_lock` returned the work's result
/// although the lock was gone.
#[test]
fn with_lock_reports_a_renewal_that_leaves_no_quorum_of_leases() {
    let mut cluster = Cluster::start(3);
    cluster.servers[2].kill9();
    let redlock = Redlock::with_config(cluster.urls(), common::test_config()).unwrap();
    let servers = &cluster.servers;
    let result = redlock.with_lock("silent", Duration::from_secs(3), |guard| {
        // One outright denial (node 0 forgot the lock) and one frozen node:
        // the renewal fails without a majority of denials.
        let owner = match common::field(&servers[0], "silent", "owner") {
            Some(redis::Value::BulkString(owner)) => String::from_utf8(owner).unwrap(),
            other => panic!("owner is {other:?}"),
        };
        common::raw(&servers[0], &["LOCK.RELEASE", "silent", &owner, "ALL"]);
        servers[1].pause();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut checked = Ok(());
        while std::time::Instant::now() < deadline {
            checked = guard.check();
            if checked.is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        servers[1].resume();
        checked
    });
    assert!(matches!(result, Err(Error::LockLost)), "{result:?}");
}

/// `blocking::Lock::fenced`: the write goes through the store's fence with
/// the lock's token; without a hold nothing is sent.
#[test]
fn a_fenced_write_without_a_runtime() {
    let cluster = Cluster::start(3);
    let redlock = Redlock::with_config(cluster.urls(), config()).unwrap();
    let mut store = cluster.servers[0].conn();
    let mut write = redis::cmd("SET");
    write.arg("data").arg("v");
    let lock = redlock.lock("fenced", Duration::from_secs(10)).unwrap();
    assert!(matches!(
        lock.fenced(&mut store, "fence", &write),
        Err(Error::NotHeld)
    ));
    lock.acquire().unwrap();
    let token = lock.fencing_token().unwrap();
    assert_eq!(
        lock.fenced(&mut store, "fence", &write).unwrap().unwrap(),
        redis::Value::Okay
    );
    let fence: i64 = redis::cmd("LOCK.FENCEGET")
        .arg("fence")
        .query(&mut store)
        .unwrap();
    assert_eq!(fence, token as i64);
    lock.release().unwrap();
}
