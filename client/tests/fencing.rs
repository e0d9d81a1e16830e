//! Fencing tokens strictly increase across successive holders, even when
//! they win different majorities and one node's counter is far ahead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{block, info_int, raw, unblock, Cluster};
use redis::Value;
use redis_lock_client::{Redlock, Reply};

const KEY: &str = "fenced";

/// Acquires KEY while `blocked` nodes are held by someone else, checks that
/// exactly the other nodes granted, and returns (fencing token, per-node
/// grant tokens).
async fn hold_with(
    cluster: &Cluster,
    redlock: &Redlock,
    blocked: [usize; 2],
) -> (u64, Vec<Option<u64>>) {
    for &i in &blocked {
        block(&cluster.servers[i], KEY);
    }
    let lock = redlock.lock(KEY, Duration::from_secs(10)).unwrap();
    let acquired = lock.acquire().await.unwrap();
    for (i, outcome) in acquired.outcomes.iter().enumerate() {
        if blocked.contains(&i) {
            assert_eq!(outcome.result, Ok(Reply::Busy), "node {i}");
        } else {
            assert!(outcome.granted_token().is_some(), "node {i}: {outcome}");
        }
    }
    let grants = acquired
        .outcomes
        .iter()
        .map(|o| o.granted_token())
        .collect();
    let token = lock.fencing_token().await.unwrap();
    // Asking again in the same hold gives the same token, without a round.
    assert_eq!(lock.fencing_token().await.unwrap(), token);
    lock.release().await.unwrap();
    for &i in &blocked {
        unblock(&cluster.servers[i], KEY);
    }
    (token, grants)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_increase_across_holders_that_win_different_majorities() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();
    let pairs = [
        [3, 4],
        [0, 1],
        [1, 2],
        [0, 4],
        [2, 3],
        [0, 2],
        [1, 3],
        [2, 4],
    ];
    let mut previous = 0;
    for blocked in pairs {
        let (token, _) = hold_with(&cluster, &redlock, blocked).await;
        assert!(
            token > previous,
            "blocked {blocked:?}: token {token} after {previous}"
        );
        previous = token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_increase_when_one_node_is_far_ahead() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();

    // Push node 0's counter far past the others' (through another key it
    // holds there): its next grant for KEY is above `ahead`.
    let first = raw(
        &cluster.servers[0],
        &["LOCK.ACQUIRE", "other", "pusher", "60000"],
    );
    let Value::Int(first) = first else {
        panic!("{first:?}")
    };
    let ahead = first + 1_000_000_000_000;
    raw(
        &cluster.servers[0],
        &[
            "LOCK.FENCE",
            "other",
            "pusher",
            "ATLEAST",
            &ahead.to_string(),
        ],
    );
    let ahead = u64::try_from(ahead).unwrap();

    // C wins {0, 1, 2}: its token comes from node 0, far ahead.
    let (c, c_grants) = hold_with(&cluster, &redlock, [3, 4]).await;
    assert!(c_grants[0].unwrap() > ahead);
    assert!(c > ahead);

    // D wins {2, 3, 4}, never touching node 0. Its own grants on nodes 3 and
    // 4 are ordinary clock-based tokens, far below C's: per-node tokens
    // alone would have gone backwards. Node 2 took C's write-back.
    let (d, d_grants) = hold_with(&cluster, &redlock, [0, 1]).await;
    assert!(
        d_grants[3].unwrap() < c && d_grants[4].unwrap() < c,
        "the scenario needs nodes 3, 4 behind"
    );
    assert!(d_grants[2].unwrap() > c, "node 2 kept the raised counter");
    assert!(d > c, "D's token {d} is not above C's {c}");

    // E wins {1, 3, 4}: node 1 saw C's write-back, nodes 3 and 4 D's.
    let (e, _) = hold_with(&cluster, &redlock, [0, 2]).await;
    assert!(e > d, "E's token {e} is not above D's {d}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nested_acquisition_keeps_the_token() {
    let cluster = Cluster::start(5);
    let redlock = cluster.client();
    let lock = redlock
        .acquire("nested-token", Duration::from_secs(10))
        .await
        .unwrap();
    let outer = lock.fencing_token().await.unwrap();
    lock.acquire().await.unwrap();
    assert_eq!(lock.holds(), 2);
    assert_eq!(lock.fencing_token().await.unwrap(), outer);
    for server in &cluster.servers {
        assert_eq!(
            info_int(server, "nested-token", "token"),
            Some(i64::try_from(outer).unwrap())
        );
    }
    lock.release_all().await.unwrap();
}

/// `Lock::fenced`: a write through the store's fence with the lock's
/// token. A holder whose lease ended behind its back is refused by the
/// store once its successor wrote, and a handle without a token sends
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fenced_write_of_a_stale_holder_is_refused_by_the_store() {
    let cluster = Cluster::start(3);
    let redlock = cluster.client();
    let store = testkit::RedisServer::start();
    let mut conn = store
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let set = |value: &str| {
        let mut cmd = redis::cmd("SET");
        cmd.arg("data").arg(value);
        cmd
    };

    let never = redlock.lock("res", Duration::from_secs(30)).unwrap();
    assert!(matches!(
        never.fenced(&mut conn, "fence", &set("never")).await,
        Err(redis_lock_client::Error::NotHeld)
    ));
    assert_eq!(raw(&store, &["EXISTS", "fence", "data"]), Value::Int(0));

    let a = redlock.lock("res", Duration::from_secs(30)).unwrap();
    a.acquire().await.unwrap();
    let token_a = a.fencing_token().await.unwrap();
    let reply = a.fenced(&mut conn, "fence", &set("A")).await.unwrap();
    assert_eq!(reply.unwrap(), Value::Okay);
    assert_eq!(
        raw(&store, &["LOCK.FENCEGET", "fence"]),
        Value::Int(token_a as i64)
    );
    // A's leases end on every node while A is paused (its handle still
    // believes it holds the lock); B takes the lock and writes.
    for server in &cluster.servers {
        raw(server, &["LOCK.EXTEND", "res", a.owner(), "1"]);
    }
    assert!(testkit::wait_until(Duration::from_secs(5), || cluster
        .servers
        .iter()
        .all(|s| raw(s, &["EXISTS", "res"]) == Value::Int(0))));
    let b = redlock.lock("res", Duration::from_secs(30)).unwrap();
    b.acquire().await.unwrap();
    let token_b = b.fencing_token().await.unwrap();
    assert!(token_b > token_a);
    b.fenced(&mut conn, "fence", &set("B"))
        .await
        .unwrap()
        .unwrap();
    let refused = a
        .fenced(&mut conn, "fence", &set("A again"))
        .await
        .unwrap()
        .unwrap_err();
    assert!(redis_lock_client::is_stale(&refused), "{refused}");
    assert!(
        refused.to_string().contains(&token_a.to_string())
            && refused.to_string().contains(&token_b.to_string()),
        "{refused}"
    );
    assert_eq!(
        raw(&store, &["GET", "data"]),
        Value::BulkString(b"B".to_vec())
    );
    b.release().await.unwrap();
}
