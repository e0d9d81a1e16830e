//! Acknowledged grants (`Config::acknowledge`): a grant counts only once
//! replicas have it (`WAIT`) or it is fsynced (`WAITAOF`), asked in the
//! same write as the command.
//!
//! - One primary with a replica: a lock acquired with one acknowledgement
//!   is held on the replica promoted after the primary is killed (same
//!   owner, same token), and refused to anyone else there. With the
//!   replica stopped, the same acquisition is not acknowledged: it fails
//!   and leaves nothing on the primary.
//! - `WAITAOF` (Valkey; Redis 7.0 has none and `Redlock::connect` says so):
//!   a grant fsynced on an `everysec` node is there after `kill -9` and a
//!   restart; on a node without AOF the acknowledgement cannot be given and
//!   the acquisition fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{holder, test_config, token_on};
use redis::Value;
use redis_lock_client::{Acknowledge, Config, Error, NodeError, Redlock};
use testkit::{wait_replicated, RedisServer, ServerOptions};

fn acked(ack: Acknowledge) -> Config {
    Config {
        node_timeout: Duration::from_millis(250),
        retry_count: 0,
        acknowledge: Some(ack.within(Duration::from_millis(500))),
        ..test_config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grant_acknowledged_by_the_replica_survives_a_failover() {
    let mut primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.replicate_from(&primary);
    // The primary counts the replica as online and acknowledging (on a
    // loaded machine this lags the replica's own "link up").
    wait_replicated(&primary, &replica);
    assert!(testkit::wait_until(Duration::from_secs(10), || {
        primary.replication_info().contains("state=online")
    }));
    // A generous acknowledgement timeout: this test is about what an
    // acknowledged grant survives, not about a slow machine.
    let config = Config {
        acknowledge: Some(Acknowledge::replicas(1).within(Duration::from_secs(5))),
        ..acked(Acknowledge::replicas(1))
    };
    let redlock = Redlock::connect([primary.url()], config).await.unwrap();

    let lock = redlock
        .acquire("ack:failover", Duration::from_secs(30))
        .await
        .unwrap();
    let token = lock.fencing_token().await.unwrap();

    // The primary dies at once; its replica is promoted.
    primary.kill9();
    replica.promote();
    assert_eq!(
        holder(&replica, "ack:failover").as_deref(),
        Some(lock.owner())
    );
    assert_eq!(token_on(&replica, "ack:failover"), Some(token as i64));
    let mut conn = replica.conn();
    let refused: Value = redis::cmd("LOCK.ACQUIRE")
        .arg("ack:failover")
        .arg("rival")
        .arg(10_000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        refused,
        Value::Nil,
        "the promoted replica must refuse a rival"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grant_the_replica_does_not_acknowledge_fails_and_is_released() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.replicate_from(&primary);
    let redlock = Redlock::connect([primary.url()], acked(Acknowledge::replicas(1)))
        .await
        .unwrap();
    replica.pause();
    let result = redlock
        .acquire("ack:unacked", Duration::from_secs(30))
        .await;
    replica.resume();
    match result {
        Err(Error::Node {
            error: NodeError::Unacknowledged(why),
            ..
        }) => assert!(why.contains("0 of 1 replicas"), "{why}"),
        other => panic!("expected an unacknowledged grant, got {other:?}"),
    }
    // The grant was taken back on the primary (and so on the replica).
    assert_eq!(holder(&primary, "ack:unacked"), None);
    wait_replicated(&primary, &replica);
    assert_eq!(holder(&replica, "ack:unacked"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_counts_unacknowledged_nodes_as_failed() {
    // Three masters without replicas: none can acknowledge one.
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let redlock = Redlock::with_config(
        servers.iter().map(RedisServer::url),
        acked(Acknowledge::replicas(1).within(Duration::from_millis(50))),
    )
    .unwrap();
    let error = redlock
        .acquire("ack:none", Duration::from_secs(5))
        .await
        .unwrap_err();
    let Error::NotAcquired { outcomes, .. } = &error else {
        panic!("{error}");
    };
    assert!(outcomes
        .iter()
        .all(|o| matches!(o.result, Err(NodeError::Unacknowledged(_)))));
    for server in &servers {
        assert_eq!(
            holder(server, "ack:none"),
            None,
            "a failed attempt is released"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_fsynced_grant_survives_kill_9_where_the_server_has_waitaof() {
    let aof = ServerOptions::default().args(["--appendonly", "yes", "--appendfsync", "everysec"]);
    let mut server = RedisServer::start_with(aof);
    // A generous acknowledgement timeout: an fsync on a machine busy
    // writing (a CI runner compiling beside the test) took over 500 ms.
    // This test is about what an fsynced grant survives, not about disks.
    let config = Config {
        acknowledge: Some(Acknowledge::fsync_local().within(Duration::from_secs(10))),
        ..acked(Acknowledge::fsync_local())
    };
    // Redis 7.0 has no WAITAOF (Redis 7.2+ and Valkey have): the client
    // says so when it is set up. Asked of the server itself, since Redis 8
    // has it too.
    let waitaof: Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("WAITAOF")
        .query(&mut server.conn())
        .unwrap();
    if waitaof == Value::Array(vec![Value::Nil]) {
        let error = Redlock::connect([server.url()], config).await.unwrap_err();
        assert!(
            matches!(&error, Error::InvalidConfig(why) if why.contains("WAITAOF")),
            "{error}"
        );
        return;
    }
    let redlock = Redlock::connect([server.url()], config.clone())
        .await
        .unwrap();
    let lock = redlock
        .acquire("ack:fsynced", Duration::from_secs(60))
        .await
        .unwrap();
    let token = lock.fencing_token().await.unwrap();
    server.kill9();
    server.restart();
    assert_eq!(
        holder(&server, "ack:fsynced").as_deref(),
        Some(lock.owner())
    );
    assert_eq!(token_on(&server, "ack:fsynced"), Some(token as i64));

    // Without an AOF there is nothing to fsync: WAITAOF refuses, and the
    // grant does not count.
    let bare = RedisServer::start();
    let redlock = Redlock::connect([bare.url()], config).await.unwrap();
    let error = redlock
        .acquire("ack:bare", Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Node { error: NodeError::Reply(why), .. } if why.contains("WAITAOF")),
        "{error}"
    );
    assert_eq!(holder(&bare, "ack:bare"), None);
}
