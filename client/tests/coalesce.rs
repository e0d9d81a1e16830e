//! Commands of concurrent locks to one node go through the node's
//! coalescing queue (several per write) and each still gets its own reply:
//! its own grant and token, and an error reply stays with its command. (How
//! much the queue saves is measured by `make bench`, section 5: on one node
//! the connection already gathers bursts, so a count of the server's reads
//! cannot tell the two apart.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{raw, test_config};
use redis::Value;
use redis_lock_client::{Error, NodeError, Redlock};
use testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_locks_through_one_node_keep_their_own_replies() {
    let server = RedisServer::start();
    // A plain string where one lock would go: its acquisition gets an error.
    raw(&server, &["SET", "batch:13", "not a lock"]);
    let redlock = Redlock::with_config([server.url()], test_config()).unwrap();
    // Connected, and one lock through the direct path first.
    let warm = redlock
        .acquire("warm", Duration::from_secs(10))
        .await
        .unwrap();
    warm.release().await.unwrap();

    const LOCKS: usize = 256;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(LOCKS));
    let tasks: Vec<_> = (0..LOCKS)
        .map(|i| {
            let (redlock, barrier) = (redlock.clone(), barrier.clone());
            tokio::spawn(async move {
                let lock = redlock
                    .lock(format!("batch:{i}"), Duration::from_secs(10))
                    .unwrap();
                barrier.wait().await;
                let result = lock
                    .try_acquire()
                    .await
                    .map(|a| a.outcomes[0].granted_token());
                (lock, result)
            })
        })
        .collect();
    let mut tokens = Vec::new();
    let mut held = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        let (lock, result) = task.await.unwrap();
        if i == 13 {
            let error = result.unwrap_err();
            assert!(
                matches!(&error, Error::Node { error: NodeError::Reply(why), .. } if why.contains("WRONGTYPE")),
                "{error}"
            );
            continue;
        }
        tokens.push(result.unwrap().unwrap());
        held.push(lock);
    }
    // Every lock got its own grant and token.
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), LOCKS - 1);
    assert!(held.iter().all(|lock| lock.is_held()));
    assert_eq!(
        raw(&server, &["GET", "batch:13"]),
        Value::BulkString(b"not a lock".to_vec())
    );
    for lock in held {
        lock.release().await.unwrap();
    }
}
