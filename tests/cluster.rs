//! A real 3-master Redis Cluster built with `redis-cli --cluster create`: the
//! commands route by their key (position 1) through a cluster client and
//! `redis-cli -c`, and a node that does not own a key redirects.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

use common::*;
use redis::Value;
use testkit::cluster::{lowest_slot, node_id, RedisCluster};

/// Three empty cluster nodes joined into one cluster with every slot served.
fn start_cluster() -> Vec<RedisServer> {
    RedisCluster::start(3, 0).nodes
}

/// One key per node: (key, port of the node that owns it).
fn key_per_node(nodes: &[RedisServer]) -> Vec<(String, u16)> {
    let mut c = nodes[0].conn();
    let mut found: Vec<(String, u16)> = Vec::new();
    for i in 0..1000 {
        let key = format!("lock:{i}");
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query(&mut c)
            .unwrap();
        let port = RedisCluster::owner_port(&nodes[0], slot);
        if !found.iter().any(|(_, p)| *p == port) {
            found.push((key, port));
        }
        if found.len() == nodes.len() {
            return found;
        }
    }
    panic!("could not find a key for every node: {found:?}");
}

fn cli(port: u16, args: &[&str]) -> String {
    let output = Command::new(testkit::cli_binary())
        .args(["-c", "-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "redis-cli {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

#[test]
fn lock_commands_route_by_key_on_a_three_master_cluster() {
    let nodes = start_cluster();
    let keys = key_per_node(&nodes);
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let client = redis::cluster::ClusterClient::new(urls).unwrap();
    let mut cluster = client.get_connection().unwrap();

    // Through the cluster client: every command on keys in different slots.
    let mut tokens = Vec::new();
    for (key, _) in &keys {
        let acquire = |conn: &mut redis::cluster::ClusterConnection, owner: &str| -> Value {
            redis::cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg(owner)
                .arg(60_000)
                .query(conn)
                .unwrap()
        };
        let Value::Int(token) = acquire(&mut cluster, "alice") else {
            panic!("acquire {key} refused")
        };
        assert_eq!(
            acquire(&mut cluster, "alice"),
            Value::Int(token),
            "re-entry on {key}"
        );
        assert_eq!(
            acquire(&mut cluster, "bob"),
            Value::Nil,
            "contention on {key}"
        );
        let info: Value = redis::cmd("LOCK.INFO")
            .arg(key)
            .query(&mut cluster)
            .unwrap();
        let info = parse_info(info).unwrap();
        assert_eq!(info.identity(), (b"alice".to_vec(), 2, token));
        let extended: i64 = redis::cmd("LOCK.EXTEND")
            .arg(key)
            .arg("alice")
            .arg(90_000)
            .query(&mut cluster)
            .unwrap();
        assert_eq!(extended, 1);
        let fenced: i64 = redis::cmd("LOCK.FENCE")
            .arg(key)
            .arg("alice")
            .arg("ATLEAST")
            .arg(token + 1)
            .query(&mut cluster)
            .unwrap();
        assert_eq!(fenced, token + 1);
        let left: i64 = redis::cmd("LOCK.RELEASE")
            .arg(key)
            .arg("alice")
            .query(&mut cluster)
            .unwrap();
        assert_eq!(left, 1);
        tokens.push(token + 1);
    }

    for ((key, port), token) in keys.iter().zip(&tokens) {
        // The lock lives on the node that owns the key's slot ...
        let owner = nodes.iter().find(|n| n.port() == *port).unwrap();
        let mut direct = owner.conn();
        assert_eq!(
            held(&mut direct, key).identity(),
            (b"alice".to_vec(), 1, *token)
        );
        // ... and every other node redirects every command for it.
        for other in nodes.iter().filter(|n| n.port() != *port) {
            let mut c = other.conn();
            let k = key.as_str();
            for args in [
                vec!["LOCK.ACQUIRE", k, "carol", "1000"],
                vec!["LOCK.RELEASE", k, "alice"],
                vec!["LOCK.EXTEND", k, "alice", "1000"],
                vec!["LOCK.FENCE", k, "alice"],
                vec!["LOCK.INFO", k],
            ] {
                let err = error_of(&mut c, &args);
                assert!(
                    err.starts_with("MOVED ") && err.ends_with(&format!(":{port}")),
                    "{args:?} on {}: {err}",
                    other.port()
                );
            }
        }
    }

    // Through `redis-cli -c`, starting from a node that does not own the key.
    let (key, port) = &keys[0];
    let entry = nodes.iter().find(|n| n.port() != *port).unwrap().port();
    assert_eq!(
        cli(entry, &["LOCK.ACQUIRE", key, "bob", "1000"]),
        "",
        "busy lock: nil prints empty in raw mode"
    );
    let fence = cli(entry, &["LOCK.FENCE", key, "alice"]);
    assert_eq!(fence, tokens[0].to_string());
    assert_eq!(cli(entry, &["LOCK.RELEASE", key, "alice"]), "0");
    let token: i64 = cli(entry, &["LOCK.ACQUIRE", key, "bob", "60000"])
        .parse()
        .unwrap();
    assert!(token > tokens[0]);
    let info = cli(entry, &["LOCK.INFO", key]);
    assert!(
        info.lines().any(|l| l == "bob"),
        "LOCK.INFO via redis-cli -c: {info}"
    );
}

/// Redis Cluster's key hash (CRC16-XMODEM of the key, or of its hash tag).
fn key_slot(key: &str) -> i64 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    let mut crc: u16 = 0;
    for &byte in hashed {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    i64::from(crc & 16383)
}

const NOT_SERVED: &str = "TRYAGAIN the lock's hash slot is being migrated or is served by another node: retry the command (it is redirected to the node that serves the key)";

/// What must hold once `key`'s slot has moved from `from` to `to` while
/// `holder` held the lock on `from` and a client waited for it there.
fn after_the_move(
    from: &RedisServer,
    to: &RedisServer,
    key: &str,
    token: i64,
    waiting: std::thread::JoinHandle<Result<Option<i64>, String>>,
) {
    assert_eq!(
        waiting.join().unwrap(),
        Err(NOT_SERVED.to_string()),
        "the waiter on the old node must be told to retry, not granted"
    );
    let mut f = from.conn();
    assert_eq!(lock_stat(&mut f, "lock_wait_grants"), 0);
    assert_eq!(
        lock_stat(&mut f, "lock_held"),
        0,
        "a lock was left on the old node"
    );
    let mut t = to.conn();
    let info = held(&mut t, key);
    assert_eq!((info.owner.as_slice(), info.token), (&b"holder"[..], token));
    // The retried command is redirected to the new node, where the holder
    // keeps the lock.
    let err = error_of(&mut f, &["LOCK.ACQUIRE", key, "waiter", "1000"]);
    assert!(
        err.starts_with("MOVED ") && err.ends_with(&format!(":{}", to.port())),
        "{err}"
    );
    assert_eq!(acquire(&mut t, key, "waiter", 1_000), None);
}

/// A 3-master cluster where `holder` holds a key in the lowest slot of the
/// first node and `waiter` waits for it there: (nodes, slot, key, token,
/// the waiter).
#[allow(clippy::type_complexity)]
fn held_and_waited_for() -> (
    Vec<RedisServer>,
    i64,
    String,
    i64,
    std::thread::JoinHandle<Result<Option<i64>, String>>,
) {
    let nodes = start_cluster();
    let slot = lowest_slot(&nodes[0]);
    let key = (0..)
        .map(|i| format!("job{i}"))
        .find(|k| key_slot(k) == slot)
        .unwrap();
    let token = acquire(&mut nodes[0].conn(), &key, "holder", 60_000).unwrap();
    let waiting = spawn_waiter_or_error(&nodes[0], &key, "waiter", 30_000);
    (nodes, slot, key, token, waiting)
}

/// Moves `slot`, holding `key`, from `from` to `to` by hand (`SETSLOT`
/// importing/migrating, `MIGRATE`, `SETSLOT … NODE` everywhere).
fn move_slot_by_hand(nodes: &[RedisServer], from: usize, to: usize, slot: i64, key: &str) {
    let (from, to) = (&nodes[from], &nodes[to]);
    let (from_id, to_id) = (node_id(from), node_id(to));
    let slot_arg = slot.to_string();
    let set = |node: &RedisServer, args: &[&str]| {
        let mut c = node.conn();
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(&slot_arg);
        for a in args {
            cmd.arg(*a);
        }
        let _: () = cmd.query(&mut c).unwrap();
    };
    set(to, &["IMPORTING", &from_id]);
    set(from, &["MIGRATING", &to_id]);
    let _: Value = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(to.port())
        .arg(key)
        .arg(0)
        .arg(5000)
        .query(&mut from.conn())
        .unwrap();
    for node in nodes {
        set(node, &["NODE", &to_id]);
    }
}

#[test]
fn a_slot_moved_by_hand_never_grants_its_lock_on_the_old_node() {
    let (nodes, slot, key, token, waiting) = held_and_waited_for();
    move_slot_by_hand(&nodes, 0, 1, slot, &key);
    after_the_move(&nodes[0], &nodes[1], &key, token, waiting);
}

/// A shared lock's holders move with its slot (moved by `mover`): the same
/// owners, holds and tokens on the new node, and a new holder there gets a
/// greater token.
fn a_shared_lock_moves_with_its_slot(mover: fn(&[RedisServer], usize, usize, i64, &str)) {
    let nodes = start_cluster();
    let slot = lowest_slot(&nodes[0]);
    let key = (0..)
        .map(|i| format!("pool{i}"))
        .find(|k| key_slot(k) == slot)
        .unwrap();
    let mut f = nodes[0].conn();
    let take = |c: &mut redis::Connection, owner: &str| -> Option<i64> {
        let reply = run(
            c,
            &["LOCK.ACQUIRE", &key, owner, "60000", "SHARED", "LIMIT", "4"],
        );
        int_or_nil(reply.unwrap(), "LOCK.ACQUIRE SHARED")
    };
    let tokens: Vec<i64> = ["a", "b", "c"]
        .iter()
        .map(|o| take(&mut f, o).unwrap())
        .collect();
    let before = run(&mut f, &["LOCK.HOLDERS", &key]).unwrap();
    mover(&nodes, 0, 1, slot, &key);
    let mut t = nodes[1].conn();
    let after = run(&mut t, &["LOCK.HOLDERS", &key]).unwrap();
    let identity = |v: &Value| -> Vec<(Value, Value, Value)> {
        let Value::Array(items) = v else {
            panic!("{v:?}")
        };
        items
            .iter()
            .map(|item| {
                let pairs = info_pairs(item.clone()).unwrap();
                (pairs[0].1.clone(), pairs[1].1.clone(), pairs[2].1.clone())
            })
            .collect()
    };
    assert_eq!(identity(&after).len(), 3);
    assert_eq!(identity(&after), identity(&before));
    assert_eq!(
        lock_stat(&mut f, "lock_held"),
        0,
        "a lock was left on the old node"
    );
    let err = error_of(
        &mut f,
        &["LOCK.ACQUIRE", &key, "d", "1000", "SHARED", "LIMIT", "4"],
    );
    assert!(err.starts_with("MOVED "), "{err}");
    let d = take(&mut t, "d").unwrap();
    assert!(
        tokens.iter().all(|&t| d > t),
        "a new holder's token is above the moved ones"
    );
    assert_eq!(take(&mut t, "e"), None, "the LIMIT moved with the lock");
}

#[test]
fn a_shared_lock_moves_with_its_slot_holders_and_tokens_kept() {
    a_shared_lock_moves_with_its_slot(move_slot_by_hand);
}

#[test]
fn a_shared_lock_moves_with_a_cluster_reshard_holders_and_tokens_kept() {
    a_shared_lock_moves_with_its_slot(|nodes, from, to, slot, _key| {
        RedisCluster::reshard_one_slot(&nodes[from], &nodes[to], slot);
    });
}

#[test]
fn a_slot_moved_by_cluster_reshard_never_grants_its_lock_on_the_old_node() {
    let (nodes, slot, key, token, waiting) = held_and_waited_for();
    RedisCluster::reshard_one_slot(&nodes[0], &nodes[1], slot);
    after_the_move(&nodes[0], &nodes[1], &key, token, waiting);
}
