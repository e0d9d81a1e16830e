//! Issue #29, item 6: what can never work fails at once with the node's
//! message (a TTL above `lock.max-ttl`, permits above `lock.max-holders`),
//! and settings the module would refuse are clamped when used (a
//! `retry_count` whose wait exceeds the module's WAIT limit).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{block, info_int, test_config, unblock};
use redis_lock_client::{Config, Error, NodeError, Redlock};
use testkit::{RedisServer, ServerOptions};

/// Three masters with `max-ttl 5000` and `max-holders 4`.
fn limited() -> Vec<RedisServer> {
    (0..3)
        .map(|_| {
            RedisServer::start_with(ServerOptions::default().module_args([
                "max-ttl",
                "5000",
                "max-holders",
                "4",
            ]))
        })
        .collect()
}

fn client(servers: &[RedisServer]) -> Redlock {
    // Patient retries: a refusal that was retried would end in
    // NotAcquired after 201 attempts, not in the node's message.
    Redlock::with_config(servers.iter().map(RedisServer::url), test_config()).unwrap()
}

fn assert_refused(result: Result<impl std::fmt::Debug, Error>, limit: &str) {
    match result {
        Err(Error::Node {
            error: NodeError::Reply(message),
            ..
        }) if message.contains(limit) => {}
        other => panic!("expected the node's refusal naming {limit}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_above_the_nodes_max_ttl_fails_at_once_with_their_message() {
    let servers = limited();
    let redlock = client(&servers);
    assert_refused(
        redlock.acquire("long", Duration::from_secs(10)).await,
        "lock.max-ttl",
    );
    // Within the limit it works.
    let lock = redlock
        .acquire("long", Duration::from_secs(4))
        .await
        .unwrap();
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_above_the_nodes_max_holders_fail_at_once_with_their_message() {
    let servers = limited();
    let redlock = client(&servers);
    let semaphore = redlock.semaphore("pool", 10).unwrap();
    assert_refused(
        semaphore.acquire(Duration::from_secs(4)).await,
        "lock.max-holders",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_a_minority_is_outvoted_not_fatal() {
    // One node with a low max-ttl, two without: the majority grants.
    let servers = vec![
        RedisServer::start_with(ServerOptions::default().module_args(["max-ttl", "5000"])),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let redlock = client(&servers);
    let lock = redlock
        .acquire("mixed", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(lock.is_held());
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_retry_count_waits_instead_of_exceeding_the_wait_limit() {
    let server = RedisServer::start();
    let config = Config {
        retry_count: u32::MAX,
        acquire_timeout: None,
        ..test_config()
    };
    let redlock = Redlock::with_config([server.url()], config).unwrap();
    block(&server, "endless");
    let waiting = tokio::spawn(async move {
        let lock = redlock.acquire("endless", Duration::from_secs(10)).await?;
        lock.release().await?;
        Ok::<_, Error>(())
    });
    // The client's wait is queued on the node (or it already failed).
    let queued = common::eventually(Duration::from_secs(30), || {
        waiting.is_finished() || info_int(&server, "endless", "waiters") == Some(1)
    })
    .await;
    assert!(queued);
    unblock(&server, "endless");
    let result = tokio::time::timeout(Duration::from_secs(30), waiting).await;
    assert!(matches!(result, Ok(Ok(Ok(())))), "{result:?}");
}
