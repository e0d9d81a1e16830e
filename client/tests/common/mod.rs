//! Shared test support: a set of real module-loaded masters, and direct
//! commands to one node (to block it for a key, raise its counter, or look
//! at what it holds).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use redis::Value;
use redis_lock_client::{Config, Redlock};
use testkit::RedisServer;

/// N independent masters, each stopped when this is dropped.
pub struct Cluster {
    pub servers: Vec<RedisServer>,
}

impl Cluster {
    pub fn start(n: usize) -> Cluster {
        Cluster {
            servers: (0..n).map(|_| RedisServer::start()).collect(),
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// A client over every node with [`test_config`].
    pub fn client(&self) -> Redlock {
        self.client_with(test_config())
    }

    pub fn client_with(&self, config: Config) -> Redlock {
        Redlock::with_config(self.urls(), config).unwrap()
    }
}

/// Settings for tests on a loaded machine: a per-node timeout generous
/// enough that a busy but live loopback node is never counted as failed,
/// and patient retries.
pub fn test_config() -> Config {
    Config {
        node_timeout: Duration::from_millis(250),
        retry_count: 200,
        retry_delay: Duration::from_millis(5),
        retry_jitter: Duration::from_millis(20),
        ..Config::default()
    }
}

/// One command on a fresh connection to `server`.
pub fn raw(server: &RedisServer, args: &[&str]) -> Value {
    let mut conn = server.conn();
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(&mut conn).unwrap()
}

/// Takes `key` on this node alone for another owner, so that Redlock
/// clients get "busy" there and must win their majority elsewhere.
pub fn block(server: &RedisServer, key: &str) {
    let reply = raw(server, &["LOCK.ACQUIRE", key, "blocker", "60000"]);
    assert!(
        matches!(reply, Value::Int(_)),
        "could not block {key}: {reply:?}"
    );
}

pub fn unblock(server: &RedisServer, key: &str) {
    raw(server, &["LOCK.RELEASE", key, "blocker", "ALL"]);
}

/// The owner holding `key` on this node, if any.
pub fn holder(server: &RedisServer, key: &str) -> Option<String> {
    field(server, key, "owner").map(|v| match v {
        Value::BulkString(bytes) => String::from_utf8(bytes).unwrap(),
        Value::SimpleString(s) => s,
        other => panic!("owner is {other:?}"),
    })
}

/// An integer field of `LOCK.INFO key` on this node.
pub fn info_int(server: &RedisServer, key: &str, name: &str) -> Option<i64> {
    field(server, key, name).map(|v| match v {
        Value::Int(n) => n,
        other => panic!("{name} is {other:?}"),
    })
}

pub fn field(server: &RedisServer, key: &str, name: &str) -> Option<Value> {
    let fields: Vec<(Value, Value)> = match raw(server, &["LOCK.INFO", key]) {
        Value::Nil => return None,
        Value::Array(items) => items
            .chunks(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect(),
        Value::Map(pairs) => pairs,
        other => panic!("LOCK.INFO replied {other:?}"),
    };
    fields
        .into_iter()
        .find(|(f, _)| matches!(f, Value::BulkString(b) if b == name.as_bytes()))
        .map(|(_, v)| v)
}

/// Polls `check` every 5 ms for up to `limit`; whether it came true.
pub async fn eventually(limit: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + limit;
    while std::time::Instant::now() < until {
        if check() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    check()
}

/// The token of `key` on this node, if it is held.
pub fn token_on(server: &RedisServer, key: &str) -> Option<i64> {
    match field(server, key, "token") {
        Some(Value::Int(token)) => Some(token),
        None => None,
        other => panic!("token is {other:?}"),
    }
}

/// `INFO commandstats` of `node`.
pub fn command_stats(node: &RedisServer) -> String {
    match raw(node, &["INFO", "commandstats"]) {
        Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Value::VerbatimString { text, .. } => text,
        other => panic!("INFO replied {other:?}"),
    }
}

/// `waiter` (a `WAIT` on `name`, on `master`) queues there; its task is
/// then aborted, and the wait must be gone from `master` well before its
/// own server-side timeout (ten seconds is long for the cut and far short
/// of a wait of a minute).
pub async fn give_up_a_queued_wait<T: std::fmt::Debug>(
    master: &RedisServer,
    name: &str,
    waiter: tokio::task::JoinHandle<T>,
) {
    assert!(
        testkit::wait_until(Duration::from_secs(10), || {
            field(master, name, "waiters") == Some(Value::Int(1))
        }),
        "the waiter never queued on the master"
    );
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert!(
        testkit::wait_until(Duration::from_secs(10), || {
            field(master, name, "waiters") == Some(Value::Int(0))
        }),
        "the given-up wait is still queued on the master: {:?}",
        field(master, name, "waiters")
    );
}
