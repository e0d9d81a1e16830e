//! Single-node mode: a busy lock is waited for on the server (`WAIT`), not
//! polled, and the node's failure is reported as such.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{block, holder, info_int, test_config, Cluster};
use redis_lock_client::{Config, Error, NodeError};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_is_granted_when_the_holder_releases() {
    let cluster = Cluster::start(1);
    let config = Config {
        acquire_timeout: Some(Duration::from_secs(20)),
        ..test_config()
    };
    let redlock = cluster.client_with(config);
    let first = redlock
        .acquire("queue", Duration::from_secs(10))
        .await
        .unwrap();
    let released = Arc::new(AtomicBool::new(false));

    let second = redlock.lock("queue", Duration::from_secs(10)).unwrap();
    let released_seen = released.clone();
    let waiter = tokio::spawn(async move {
        let acquired = second.acquire().await;
        (acquired, released_seen.load(Ordering::SeqCst), second)
    });

    // The second client waits inside the server: the lock shows a waiter.
    let server = &cluster.servers[0];
    assert!(
        testkit::wait_until(Duration::from_secs(10), || info_int(
            server, "queue", "waiters"
        ) == Some(1)),
        "no server-side waiter appeared"
    );
    released.store(true, Ordering::SeqCst);
    first.release().await.unwrap();

    let (acquired, after_release, second) = waiter.await.unwrap();
    let acquired = acquired.unwrap();
    assert!(after_release, "granted before the holder released");
    assert_eq!(acquired.attempts, 2, "one plain attempt, then one wait");
    assert_eq!(holder(server, "queue").as_deref(), Some(second.owner()));
    assert!(second.fencing_token().await.unwrap() > 0);
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wait_that_times_out_leaves_no_waiter() {
    let cluster = Cluster::start(1);
    let server = &cluster.servers[0];
    block(server, "busy");
    let config = Config {
        acquire_timeout: Some(Duration::from_millis(300)),
        ..test_config()
    };
    let redlock = cluster.client_with(config);
    let lock = redlock.lock("busy", Duration::from_secs(10)).unwrap();
    let error = lock.acquire().await.unwrap_err();
    assert!(
        matches!(error, Error::NotAcquired { attempts: 2, .. }),
        "{error}"
    );
    assert_eq!(info_int(server, "busy", "waiters"), Some(0));
    assert_eq!(holder(server, "busy").as_deref(), Some("blocker"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_node_is_the_answer_in_single_node_mode() {
    let mut cluster = Cluster::start(1);
    let redlock = cluster.client();
    cluster.servers[0].kill9();
    let lock = redlock.lock("gone", Duration::from_secs(10)).unwrap();
    match lock.acquire().await {
        Err(Error::Node {
            error: NodeError::Connection(_) | NodeError::Timeout(_),
            ..
        }) => {}
        other => panic!("expected a node error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_error_reply_is_surfaced() {
    let cluster = Cluster::start(1);
    let server = &cluster.servers[0];
    common::raw(server, &["SET", "plain", "value"]);
    let redlock = cluster.client();
    let lock = redlock.lock("plain", Duration::from_secs(10)).unwrap();
    match lock.acquire().await {
        Err(Error::Node {
            error: NodeError::Reply(message),
            ..
        }) => {
            assert!(message.starts_with("WRONGTYPE"), "{message}")
        }
        other => panic!("expected WRONGTYPE, got {other:?}"),
    }
    // The plain key is untouched.
    assert_eq!(
        common::raw(server, &["GET", "plain"]),
        redis::Value::BulkString(b"value".to_vec())
    );
}

/// `Lock::acquire_for`: a deadline of the call's own, whatever the client's
/// `retry_count` and `acquire_timeout` say, on one node (a server-side
/// wait) and on three (retries).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acquire_for_waits_its_own_deadline_whatever_the_config() {
    for nodes in [1, 3] {
        let cluster = Cluster::start(nodes);
        // The client's own patience: no retry, no wait at all.
        let config = Config {
            retry_count: 0,
            acquire_timeout: None,
            ..test_config()
        };
        let redlock = cluster.client_with(config);
        let first = redlock
            .acquire("own-deadline", Duration::from_secs(30))
            .await
            .unwrap();
        let second = redlock
            .lock("own-deadline", Duration::from_secs(10))
            .unwrap();
        // With the client's settings (its retry budget: no retry, on one
        // node a wait of a few ms on the server): refused.
        match second.acquire().await {
            Err(Error::NotAcquired { .. }) => {}
            other => panic!("{nodes} nodes: {other:?}"),
        }
        // With a deadline of its own: still refused while held, and only
        // near that deadline (it returns by it: a server-side wait ends a
        // reply allowance before it, and the last retry is the last whose
        // rounds and pause fit before it).
        let started = std::time::Instant::now();
        match second.acquire_for(Duration::from_secs(2)).await {
            Err(Error::NotAcquired { .. }) => {}
            other => panic!("{nodes} nodes: {other:?}"),
        }
        let config = test_config();
        let allowance = config.node_timeout * 3 + config.retry_delay + config.retry_jitter;
        assert!(
            started.elapsed() >= Duration::from_secs(2) - allowance,
            "{nodes} nodes: gave up after {:?}, well before its 2 s",
            started.elapsed()
        );
        // Granted once the holder lets go, within a long deadline.
        let waiter = tokio::spawn(async move {
            let acquired = second.acquire_for(Duration::from_secs(20)).await;
            (acquired, second)
        });
        let server = &cluster.servers[0];
        if nodes == 1 {
            assert!(
                testkit::wait_until(Duration::from_secs(10), || info_int(
                    server,
                    "own-deadline",
                    "waiters"
                ) == Some(1)),
                "no server-side waiter appeared"
            );
        }
        first.release().await.unwrap();
        let (acquired, second) = waiter.await.unwrap();
        acquired.unwrap_or_else(|e| panic!("{nodes} nodes: {e}"));
        assert_eq!(
            holder(server, "own-deadline").as_deref(),
            Some(second.owner())
        );
        second.release().await.unwrap();
    }
}

/// `Lock::known_fencing_token`: nothing before the token is computed or
/// once the lock is released; the computed token, without a round trip,
/// in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_known_fencing_token_is_the_computed_one_while_held() {
    let cluster = Cluster::start(3);
    let redlock = cluster.client();
    let lock = redlock.lock("known", Duration::from_secs(10)).unwrap();
    assert_eq!(lock.known_fencing_token(), None, "not held");
    lock.acquire().await.unwrap();
    assert_eq!(lock.known_fencing_token(), None, "not computed yet");
    let token = lock.fencing_token().await.unwrap();
    assert_eq!(lock.known_fencing_token(), Some(token));
    lock.release().await.unwrap();
    assert_eq!(lock.known_fencing_token(), None, "released");
    // A new hold has a new token, unknown until computed again.
    lock.acquire().await.unwrap();
    assert_eq!(lock.known_fencing_token(), None, "a new hold's token");
    let next = lock.fencing_token().await.unwrap();
    assert!(next > token);
    assert_eq!(lock.known_fencing_token(), Some(next));
    lock.release().await.unwrap();
    // A hold whose validity ended (its lease left to lapse): no token, as
    // fencing_token() then fails, though the handle still counts a hold.
    let short = redlock.lock("known-lapse", Duration::from_secs(2)).unwrap();
    short.acquire().await.unwrap();
    let token = short.fencing_token().await.unwrap();
    assert_eq!(short.known_fencing_token(), Some(token));
    assert!(
        common::eventually(Duration::from_secs(10), || short.validity().is_none()).await,
        "the validity never ended"
    );
    assert_eq!(short.holds(), 1);
    assert_eq!(short.known_fencing_token(), None, "validity ended");
    assert!(short.fencing_token().await.is_err());
}

/// A wait whose timeout reply comes after the acquire deadline (a loaded
/// machine; here the server is paused across the deadline) is "not
/// acquired", with the node's timeout as its outcome: the node said busy,
/// it did not fail. It was a node error before (`no reply within …`, "check
/// that the node is up"), seen as a flaky error of the Python client's
/// `acquire(wait=1.0)` on a loaded CI machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wait_answered_after_the_deadline_is_not_acquired() {
    let cluster = Cluster::start(1);
    let server = &cluster.servers[0];
    block(server, "late");
    let config = Config {
        acquire_timeout: Some(Duration::from_secs(1)),
        ..test_config()
    };
    let redlock = cluster.client_with(config);
    let lock = redlock.lock("late", Duration::from_secs(10)).unwrap();
    let waiting = tokio::spawn(async move { (lock.acquire().await, lock) });
    assert!(
        testkit::wait_until(Duration::from_secs(10), || info_int(
            server, "late", "waiters"
        ) == Some(1)),
        "no server-side waiter appeared"
    );
    // Paused before its wait times out: the reply comes after the deadline.
    server.pause();
    let (result, lock) = waiting.await.unwrap();
    server.resume();
    match result {
        Err(Error::NotAcquired {
            attempts: 2,
            outcomes,
            ..
        }) => assert!(
            matches!(
                outcomes.as_slice(),
                [o] if matches!(o.result, Err(NodeError::Timeout(_)))
            ),
            "{outcomes:?}"
        ),
        other => panic!("expected NotAcquired after the deadline, got {other:?}"),
    }
    // The wait is ended and undone once the server runs again.
    assert!(testkit::wait_until(Duration::from_secs(10), || info_int(
        server, "late", "waiters"
    ) == Some(
        0
    )));
    assert_eq!(holder(server, "late").as_deref(), Some("blocker"));
    assert_eq!(lock.holds(), 0);
}

/// The id and address of the one blocked client on `server` (`CLIENT
/// LIST`, flag `b`).
fn blocked_client(server: &testkit::RedisServer) -> Option<(i64, String)> {
    let list = match common::raw(server, &["CLIENT", "LIST"]) {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        other => panic!("CLIENT LIST replied {other:?}"),
    };
    let line = list.lines().find(|line| {
        line.split(' ')
            .any(|f| f.strip_prefix("flags=").is_some_and(|f| f.contains('b')))
    })?;
    let field = |name: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
    };
    Some((field("id")?.parse().ok()?, field("addr")?.to_string()))
}

/// A handle whose wait runs on another server process than its shared
/// connection, as after a restart on the same address: the shared
/// connection reaches `new` (through `proxy`), the waiting connection
/// `old`, where it waits for `RESOURCE` (taken on both by "blocker").
/// `foreign` is a client of `new` with the waiting connection's id there
/// (ids are per process).
struct TwoProcesses {
    old: testkit::RedisServer,
    new: testkit::RedisServer,
    proxy: testkit::FaultProxy,
    lock: Arc<redis_lock_client::Lock>,
    waiting_id: i64,
    foreign: redis::Connection,
}

const RESOURCE: &str = "two-processes";

impl TwoProcesses {
    /// Starts the wait (`acquire_for(wait)`, in a task) and returns once it
    /// is queued on `old` and `foreign` exists; `hold_kill`: a `CLIENT
    /// KILL` the handle sends is held by the proxy until delivered.
    async fn start(
        wait: Duration,
        hold_kill: bool,
    ) -> (
        TwoProcesses,
        tokio::task::JoinHandle<redis_lock_client::Result<redis_lock_client::Acquired>>,
    ) {
        let old = testkit::RedisServer::start();
        let new = testkit::RedisServer::start();
        let proxy = testkit::FaultProxy::start(new.port());
        let redlock =
            redis_lock_client::Redlock::with_config([proxy.url()], test_config()).unwrap();
        // The shared connection opens, to `new`.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while redlock.info("warm").await[0].info.is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the node did not answer"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        proxy.retarget(old.port());
        // `old`'s ids ahead of `new`'s, so that `new` reaches the waiting
        // connection's id with a client of its own.
        for _ in 0..20 {
            let _: i64 = redis::cmd("CLIENT")
                .arg("ID")
                .query(&mut old.conn())
                .unwrap();
        }
        block(&old, RESOURCE);
        block(&new, RESOURCE);
        if hold_kill {
            proxy.hold_from("$4\r\nKILL\r\n");
        }
        let lock = Arc::new(redlock.lock(RESOURCE, Duration::from_secs(30)).unwrap());
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move { lock.acquire_for(wait).await })
        };
        assert!(
            testkit::wait_until(Duration::from_secs(10), || info_int(
                &old, RESOURCE, "waiters"
            ) == Some(1)),
            "no server-side waiter appeared on the old process"
        );
        let (waiting_id, _) = blocked_client(&old).expect("the waiting connection");
        let foreign = loop {
            let mut conn = new.conn();
            let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut conn).unwrap();
            assert!(id <= waiting_id, "the new process passed id {waiting_id}");
            if id == waiting_id {
                break conn;
            }
        };
        (
            TwoProcesses {
                old,
                new,
                proxy,
                lock,
                waiting_id,
                foreign,
            },
            waiter,
        )
    }

    /// Once the handle's undo in the background is done (its next
    /// acquisition waits for it), the foreign client still works.
    async fn assert_foreign_client_untouched(mut self) {
        common::unblock(&self.new, RESOURCE);
        self.lock.acquire().await.unwrap();
        assert_eq!(
            holder(&self.new, RESOURCE).as_deref(),
            Some(self.lock.owner())
        );
        let ping: redis::RedisResult<String> = redis::cmd("PING").query(&mut self.foreign);
        assert!(
            ping.is_ok(),
            "a client of the other process that has the waiting connection's id {} was cut \
             when the handle gave the wait up: {ping:?}",
            self.waiting_id
        );
        self.lock.release().await.unwrap();
    }
}

/// A waiting connection that fails (its server restarted, or dropped it)
/// is not killed afterwards: its id may be another client's on the server
/// the shared connection reaches now (ids restart from 1 in a new process).
/// Failed before the fix: `CLIENT KILL ID <old id>` cut that client.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_server_is_not_sent_the_waiting_connections_old_id() {
    let (setup, waiter) = TwoProcesses::start(Duration::from_secs(60), false).await;
    // The waiting connection ends on its (old) server.
    let id = setup.waiting_id.to_string();
    common::raw(&setup.old, &["CLIENT", "KILL", "ID", &id]);
    let result = waiter.await.unwrap();
    assert!(result.is_err(), "{result:?}");
    assert!(!setup.lock.is_held());
    setup.assert_foreign_client_untouched().await;
}

/// A wait given up while its connection is open is killed by its id and
/// its address: a server that has another client with that id (a restarted
/// one) answers 0, and the wait is undone on its own connection instead,
/// after the wait there. Failed before the fix: `CLIENT KILL ID <id>` cut
/// that client (and the late grant on the old process was never undone).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_given_up_wait_is_killed_by_its_id_and_address() {
    let (setup, waiter) = TwoProcesses::start(Duration::from_secs(60), true).await;
    // The caller leaves while it waits.
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert!(
        testkit::wait_until(Duration::from_secs(10), || setup.proxy.held() == 1),
        "the handle sent no CLIENT KILL (what it sent: {:?})",
        String::from_utf8_lossy(&setup.proxy.sent())
    );
    setup.proxy.deliver();
    // The old process frees the lock: the wait still queued there is
    // granted, and the undo behind it on the waiting connection releases
    // it. Nothing of the handle's is left there.
    common::unblock(&setup.old, RESOURCE);
    assert!(
        testkit::wait_until(Duration::from_secs(10), || common::raw(
            &setup.old,
            &["LOCK.INFO", RESOURCE]
        ) == redis::Value::Nil),
        "the given-up wait was granted on the old process and not undone: {:?}",
        common::raw(&setup.old, &["LOCK.INFO", RESOURCE])
    );
    setup.assert_foreign_client_untouched().await;
}
