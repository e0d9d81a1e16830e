//! Fenced writes (issue #31): `LOCK.FENCED fence-key token command ...`
//! runs a write only if the token is not below the fence, and raises the
//! fence; `LOCK.FENCECHECK` does the check for scripts; `LOCK.FENCEGET`
//! reads a fence. The fence is its own data type (`lockfence`), carried
//! by replication, the AOF and RDB, and ignored by the lock machinery.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use redis::{Connection, Value};
use testkit::cluster::RedisCluster;

fn fence_of(c: &mut Connection, key: &str) -> Option<i64> {
    int_or_nil(run(c, &["LOCK.FENCEGET", key]).unwrap(), "LOCK.FENCEGET")
}

fn get(c: &mut Connection, key: &str) -> Value {
    run(c, &["GET", key]).unwrap()
}

fn data(value: &str) -> Value {
    Value::BulkString(value.as_bytes().to_vec())
}

fn stale(token: i64, key: &str, accepted: i64) -> String {
    format!("STALE fencing token {token} refused: {key} has accepted {accepted}")
}

/// `COMMAND GETKEYS` of `line`: the keys the server finds in it (none for
/// a line the server cannot read).
fn keys_of(c: &mut Connection, line: &[&str]) -> Vec<Value> {
    let mut args = vec!["COMMAND", "GETKEYS"];
    args.extend_from_slice(line);
    match run(c, &args) {
        Ok(Value::Array(keys)) => keys,
        Ok(other) => panic!("{line:?}: {other:?}"),
        Err(_) => Vec::new(),
    }
}

#[test]
fn a_paused_holder_is_refused_after_its_successor_wrote() {
    let server = RedisServer::start();
    let mut a = server.conn();
    let mut b = server.conn();
    let token_a = acquire(&mut a, "lock", "A", 30_000).unwrap();
    // A pauses; its lease ends.
    assert_eq!(extend(&mut a, "lock", "A", 1), 1);
    assert!(wait_until(Duration::from_secs(5), || {
        lock_info(&mut b, "lock").is_none()
    }));
    let token_b = acquire(&mut b, "lock", "B", 30_000).unwrap();
    assert!(token_b > token_a);
    let (tb, ta) = (token_b.to_string(), token_a.to_string());
    assert_eq!(
        run(&mut b, &["LOCK.FENCED", "fence", &tb, "SET", "data", "B"]).unwrap(),
        Value::Okay
    );
    assert_eq!(fence_of(&mut b, "fence"), Some(token_b));
    // A wakes up and writes with its old token.
    let err = error_of(&mut a, &["LOCK.FENCED", "fence", &ta, "SET", "data", "A"]);
    assert_eq!(err, stale(token_a, "fence", token_b));
    assert_eq!(get(&mut a, "data"), data("B"));
    assert_eq!(fence_of(&mut a, "fence"), Some(token_b));
    // B writes again with the same token: equal tokens are accepted.
    assert_eq!(
        run(
            &mut b,
            &["LOCK.FENCED", "fence", &tb, "HSET", "h", "f", "v"]
        )
        .unwrap(),
        Value::Int(1),
        "the inner command's reply, verbatim"
    );
    assert_eq!(fence_of(&mut b, "fence"), Some(token_b));
}

#[test]
fn a_fresh_fence_accepts_any_token_and_keeps_its_ttl() {
    let server = RedisServer::start();
    let mut c = server.conn();
    assert_eq!(fence_of(&mut c, "f"), None);
    run(&mut c, &["LOCK.FENCED", "f", "0", "SET", "d", "0"]).unwrap();
    assert_eq!(fence_of(&mut c, "f"), Some(0));
    run(&mut c, &["PEXPIRE", "f", "600000"]).unwrap();
    run(
        &mut c,
        &["LOCK.FENCED", "f", "9007199254740991", "SET", "d", "max"],
    )
    .unwrap();
    assert_eq!(fence_of(&mut c, "f"), Some(9_007_199_254_740_991));
    let pttl = int_or_nil(run(&mut c, &["PTTL", "f"]).unwrap(), "PTTL").unwrap();
    assert!(
        pttl > 500_000,
        "the raise keeps the TTL the operator put: {pttl}"
    );
    assert_eq!(
        run(&mut c, &["TYPE", "f"]).unwrap(),
        Value::SimpleString("lockfence".into())
    );
}

#[test]
fn bad_arguments_wrong_types_and_inner_errors_change_nothing() {
    let server = RedisServer::start();
    let mut c = server.conn();
    run(&mut c, &["LOCK.FENCED", "f", "10", "SET", "d", "v"]).unwrap();
    let before = digest(&mut c);
    let token_error = "ERR the fencing token must be an integer from 0 to 9007199254740991";
    for token in ["-1", "x", "1.5", "9007199254740992", ""] {
        let err = error_of(&mut c, &["LOCK.FENCED", "f", token, "SET", "d", "bad"]);
        assert_eq!(err, token_error, "token {token:?}");
        let err = error_of(&mut c, &["LOCK.FENCECHECK", "f", token]);
        assert_eq!(err, token_error, "token {token:?}");
    }
    assert_eq!(
        error_of(&mut c, &["LOCK.FENCED", "f", "11"]),
        arity_error("lock.fenced")
    );
    assert_eq!(
        error_of(&mut c, &["LOCK.FENCECHECK", "f"]),
        arity_error("lock.fencecheck")
    );
    assert_eq!(digest(&mut c), before, "bad arguments change nothing");
    // A key of another type at the fence's name.
    run(&mut c, &["SET", "s", "x"]).unwrap();
    let before = digest(&mut c);
    for args in [
        &["LOCK.FENCED", "s", "11", "SET", "d", "bad"][..],
        &["LOCK.FENCECHECK", "s", "11"],
        &["LOCK.FENCEGET", "s"],
    ] {
        assert!(error_of(&mut c, args).starts_with("WRONGTYPE"), "{args:?}");
    }
    assert_eq!(digest(&mut c), before, "WRONGTYPE changes nothing");
    // A lock is not a fence, nor a fence a lock.
    acquire(&mut c, "l", "o", 60_000).unwrap();
    let before_lock = digest(&mut c);
    assert!(error_of(&mut c, &["LOCK.FENCECHECK", "l", "11"]).starts_with("WRONGTYPE"));
    assert!(error_of(&mut c, &["LOCK.ACQUIRE", "f", "o", "1000"]).starts_with("WRONGTYPE"));
    assert!(error_of(&mut c, &["LOCK.INFO", "f"]).starts_with("WRONGTYPE"));
    assert_eq!(digest(&mut c), before_lock);
    // The inner command fails: its error, and the fence stays.
    run(&mut c, &["SET", "str", "x"]).unwrap();
    let err = error_of(&mut c, &["LOCK.FENCED", "f", "20", "HSET", "str", "a", "b"]);
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    let err = error_of(&mut c, &["LOCK.FENCED", "f", "20", "SET", "d"]);
    assert!(err.contains("wrong number of arguments"), "{err}");
    assert_eq!(fence_of(&mut c, "f"), Some(10));
    assert_eq!(get(&mut c, "d"), data("v"));
    // The internal effect is refused from clients.
    let err = error_of(&mut c, &["LOCK.FENCEAPPLY", "f", "100"]);
    assert!(err.contains("LOCK.FENCEAPPLY is internal"), "{err}");
    assert_eq!(fence_of(&mut c, "f"), Some(10));
}

#[test]
fn only_plain_writes_run_inside_a_fence() {
    let server = RedisServer::start();
    let mut c = server.conn();
    run(&mut c, &["SET", "d", "v"]).unwrap();
    let before = digest(&mut c);
    for (args, why) in [
        (&["GET", "d"][..], "it is not a write"),
        (&["BLPOP", "q", "0"], "it can block"),
        (&["BLMOVE", "q", "r", "LEFT", "LEFT", "0"], "it can block"),
        (
            &["EVAL", "return redis.call('SET','d','x')", "0"],
            "scripts",
        ),
        (&["FCALL", "f", "0"], "scripts"),
        (&["MULTI"], "transactions"),
        (&["EXEC"], "transactions"),
        (&["WATCH", "d"], "transactions"),
        (&["LOCK.ACQUIRE", "l", "o", "1000"], "LOCK.* command"),
        (&["LOCK.FENCECHECK", "g", "1"], "LOCK.* command"),
        (&["FLUSHALL"], "it writes no key"),
        (&["SWAPDB", "0", "1"], "it writes no key"),
        (&["CONFIG", "SET", "maxmemory", "1"], "admin"),
        (&["PUBLISH", "ch", "m"], "pub/sub"),
        (&["NOSUCHCOMMAND", "x"], "unknown command"),
        (&["XGROUP", "NOSUCH"], "unknown command"),
    ] {
        let mut full = vec!["LOCK.FENCED", "f", "5"];
        full.extend_from_slice(args);
        let err = error_of(&mut c, &full);
        assert!(
            err.starts_with("ERR LOCK.FENCED cannot run") && err.contains(why),
            "{args:?}: {err}"
        );
    }
    // The fence key cannot be written by the inner command, wherever it
    // stands among its keys: a fixed key range (first, last, step), a
    // later key, keys the server finds per line (`movablekeys`).
    for args in [
        &["SET", "f", "x"][..],
        &["MSET", "a", "1", "f", "2"],
        &["SMOVE", "s", "f", "m"],
        &["ZUNIONSTORE", "out", "2", "z", "f"],
        &["ZUNIONSTORE", "f", "1", "z"],
    ] {
        let mut full = vec!["LOCK.FENCED", "f", "5"];
        full.extend_from_slice(args);
        let err = error_of(&mut c, &full);
        assert!(err.contains("cannot use the fence key"), "{args:?}: {err}");
    }
    // A line of the wrong arity is answered as the server answers it.
    for args in [&["HSET", "h"][..], &["GETSET", "d", "v", "x"], &["MSET"]] {
        let mut full = vec!["LOCK.FENCED", "f", "5"];
        full.extend_from_slice(args);
        let err = error_of(&mut c, &full);
        assert!(err.contains("wrong number of arguments"), "{args:?}: {err}");
    }
    assert_eq!(digest(&mut c), before, "nothing changed");
    assert_eq!(fence_of(&mut c, "f"), None);
    // A container's write subcommand runs.
    assert_eq!(
        run(
            &mut c,
            &[
                "LOCK.FENCED",
                "f",
                "5",
                "XGROUP",
                "CREATE",
                "s",
                "g",
                "$",
                "MKSTREAM"
            ]
        )
        .unwrap(),
        Value::Okay
    );
    assert_eq!(fence_of(&mut c, "f"), Some(5));
}

#[test]
fn acl_applies_to_the_inner_command_and_its_keys() {
    let server = RedisServer::start();
    let mut admin = server.conn();
    for rules in [
        &[
            "ACL", "SETUSER", "nohset", "on", ">pw", "~*", "+@all", "-hset",
        ][..],
        &[
            "ACL", "SETUSER", "narrow", "on", ">pw", "~fence*", "~app:*", "+@all",
        ],
    ] {
        assert_eq!(run(&mut admin, rules).unwrap(), Value::Okay);
    }
    let conn_as = |user: &str| {
        let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port());
        redis::Client::open(url).unwrap().get_connection().unwrap()
    };
    let mut nohset = conn_as("nohset");
    let err = error_of(
        &mut nohset,
        &["LOCK.FENCED", "fence", "5", "HSET", "h", "a", "b"],
    );
    assert!(err.starts_with("NOPERM"), "{err}");
    assert_eq!(fence_of(&mut admin, "fence"), None);
    assert_eq!(run(&mut admin, &["EXISTS", "h"]).unwrap(), Value::Int(0));
    // The same user may SET.
    run(&mut nohset, &["LOCK.FENCED", "fence", "5", "SET", "d", "v"]).unwrap();
    assert_eq!(fence_of(&mut admin, "fence"), Some(5));

    let mut narrow = conn_as("narrow");
    let err = error_of(
        &mut narrow,
        &["LOCK.FENCED", "fence", "6", "SET", "other", "v"],
    );
    assert!(err.starts_with("NOPERM"), "{err}");
    assert_eq!(fence_of(&mut admin, "fence"), Some(5));
    assert_eq!(
        run(&mut admin, &["EXISTS", "other"]).unwrap(),
        Value::Int(0)
    );
    run(
        &mut narrow,
        &["LOCK.FENCED", "fence", "6", "SET", "app:x", "v"],
    )
    .unwrap();
    assert_eq!(fence_of(&mut admin, "fence"), Some(6));
}

#[test]
fn a_script_checks_the_fence_before_its_writes() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let script = "redis.call('LOCK.FENCECHECK', KEYS[1], ARGV[1]); return redis.call('SET', KEYS[2], ARGV[2])";
    let eval = |c: &mut Connection, token: &str, value: &str| {
        run(c, &["EVAL", script, "2", "fence", "data", token, value])
    };
    assert_eq!(eval(&mut c, "7", "new").unwrap(), Value::Okay);
    assert_eq!(fence_of(&mut c, "fence"), Some(7));
    let err = error_line(&eval(&mut c, "6", "old").unwrap_err());
    assert!(err.contains(&stale(6, "fence", 7)), "{err}");
    assert_eq!(get(&mut c, "data"), data("new"));
    assert_eq!(
        run(&mut c, &["LOCK.FENCECHECK", "fence", "7"]).unwrap(),
        Value::Int(7)
    );
    assert_eq!(
        run(&mut c, &["LOCK.FENCECHECK", "fence", "8"]).unwrap(),
        Value::Int(8)
    );
}

#[test]
fn a_replica_gets_the_fence_and_the_data_in_one_transaction() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.replicate_from(&primary);
    let mut p = primary.conn();
    run(&mut p, &["LOCK.FENCED", "f", "5", "SET", "d", "v5"]).unwrap();
    run(&mut p, &["LOCK.FENCECHECK", "g", "3"]).unwrap();
    let _ = error_of(&mut p, &["LOCK.FENCED", "f", "4", "SET", "d", "v4"]);
    run(&mut p, &["LOCK.FENCED", "f", "6", "SET", "d", "v6"]).unwrap();
    wait_replicated(&primary, &replica);
    let mut r = replica.conn();
    assert_eq!(fence_of(&mut r, "f"), Some(6));
    assert_eq!(fence_of(&mut r, "g"), Some(3));
    assert_eq!(get(&mut r, "d"), data("v6"));
    assert_eq!(digest(&mut r), digest(&mut p));
}

fn aof_text(dir: &std::path::Path) -> String {
    let Ok(entries) = std::fs::read_dir(dir.join("appendonlydir")) else {
        return String::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "aof"))
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_aof_carries_fences_before_and_after_a_rewrite() {
    let mut server = RedisServer::start_with(aof_options("no"));
    let mut c = server.conn();
    run(&mut c, &["LOCK.FENCED", "f", "5", "SET", "d", "v5"]).unwrap();
    run(&mut c, &["LOCK.FENCECHECK", "g", "9"]).unwrap();
    let text = aof_text(server.dir()).to_ascii_uppercase();
    // The inner write and the raise, in that order, inside one MULTI/EXEC.
    let apply = text
        .find("LOCK.FENCEAPPLY")
        .expect("the AOF carries the effect");
    let multi = text[..apply]
        .rfind("MULTI")
        .expect("a MULTI before the effect");
    assert!(
        text[multi..apply].contains("$2\r\nV5"),
        "the inner SET between MULTI and the effect: {:?}",
        &text[multi..apply]
    );
    assert!(text[apply..].contains("EXEC"), "an EXEC after the effect");
    assert!(!text.contains("LOCK.FENCED"), "never the command itself");
    let before = digest(&mut c);
    server.kill9();
    server.restart();
    let mut c = server.conn();
    assert_eq!(fence_of(&mut c, "f"), Some(5));
    assert_eq!(fence_of(&mut c, "g"), Some(9));
    assert_eq!(get(&mut c, "d"), data("v5"));
    assert_eq!(digest(&mut c), before);
    // A rewrite without an RDB preamble writes the fences as effects.
    rewrite_aof(&mut c);
    server.kill9();
    server.restart();
    let mut c = server.conn();
    assert_eq!(fence_of(&mut c, "f"), Some(5));
    assert_eq!(fence_of(&mut c, "g"), Some(9));
    assert_eq!(digest(&mut c), before);
}

#[test]
fn rdb_reload_dump_restore_and_copy_keep_a_fence() {
    let server = RedisServer::start();
    let mut c = server.conn();
    run(&mut c, &["LOCK.FENCED", "f", "42", "SET", "d", "v"]).unwrap();
    let before = digest(&mut c);
    assert_eq!(run(&mut c, &["DEBUG", "RELOAD"]).unwrap(), Value::Okay);
    assert_eq!(fence_of(&mut c, "f"), Some(42));
    assert_eq!(digest(&mut c), before);
    let dump = match run(&mut c, &["DUMP", "f"]).unwrap() {
        Value::BulkString(bytes) => bytes,
        other => panic!("DUMP: {other:?}"),
    };
    assert_eq!(
        run_raw(&mut c, &[b"RESTORE", b"f2", b"0", &dump]).unwrap(),
        Value::Okay
    );
    assert_eq!(fence_of(&mut c, "f2"), Some(42));
    // A corrupted payload is refused, not stored.
    let mut bad = dump.clone();
    if let Some(byte) = bad.get_mut(10) {
        *byte ^= 0xff;
    }
    assert!(run_raw(&mut c, &[b"RESTORE", b"f3", b"0", &bad]).is_err());
    assert_eq!(run(&mut c, &["EXISTS", "f3"]).unwrap(), Value::Int(0));
    assert_eq!(run(&mut c, &["COPY", "f", "f4"]).unwrap(), Value::Int(1));
    assert_eq!(fence_of(&mut c, "f4"), Some(42));
    let usage = int_or_nil(
        run(&mut c, &["MEMORY", "USAGE", "f"]).unwrap(),
        "MEMORY USAGE",
    );
    assert!(usage.is_some_and(|n| n > 0 && n < 200), "{usage:?}");
}

#[test]
fn the_lock_machinery_leaves_fences_alone() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "lock", "o", 60_000).unwrap();
    let info_before = (
        lock_stat(&mut c, "lock_held"),
        lock_stat(&mut c, "lock_holders"),
    );
    for i in 0..20 {
        run(&mut c, &["LOCK.FENCECHECK", &format!("fence:{i}"), "1"]).unwrap();
    }
    let info_after = (
        lock_stat(&mut c, "lock_held"),
        lock_stat(&mut c, "lock_holders"),
    );
    assert_eq!(info_before, info_after, "fences are not locks in INFO lock");
    run(&mut c, &["RENAME", "fence:0", "renamed"]).unwrap();
    run(&mut c, &["MOVE", "fence:1", "1"]).unwrap();
    run(&mut c, &["SWAPDB", "0", "1"]).unwrap();
    run(&mut c, &["SWAPDB", "0", "1"]).unwrap();
    assert_eq!(fence_of(&mut c, "renamed"), Some(1));
    assert_eq!(lock_info(&mut c, "lock").map(|_| ()), Some(()));
    // The timer's sweep and lease ends run past fences.
    acquire(&mut c, "short", "o", 30_000).unwrap();
    extend(&mut c, "short", "o", 1);
    assert!(wait_until(Duration::from_secs(5), || !exists(
        &mut c, "short"
    )));
    assert_eq!(fence_of(&mut c, "fence:5"), Some(1));
    assert_eq!(lock_stat(&mut c, "lock_held"), info_before.0);
    run(&mut c, &["FLUSHDB"]).unwrap();
    // Valkey 8 frees a flushed database on its lazy-free thread.
    assert!(
        wait_until(Duration::from_secs(5), || {
            lock_stat(&mut c, "lock_held") == 0 && lock_stat(&mut c, "lock_holders") == 0
        }),
        "the flushed lock is counted out, and no fence was counted in"
    );
    assert_eq!(fence_of(&mut c, "renamed"), None);
    run(&mut c, &["SELECT", "1"]).unwrap();
    assert_eq!(fence_of(&mut c, "fence:1"), Some(1));
}

#[test]
fn a_cluster_routes_a_fenced_write_by_all_its_keys() {
    let cluster = RedisCluster::start(3, 0);
    let node = cluster.master_of("{t}fence");
    let mut c = node.conn();
    assert_eq!(
        run(
            &mut c,
            &["LOCK.FENCED", "{t}fence", "5", "SET", "{t}data", "v"]
        )
        .unwrap(),
        Value::Okay
    );
    assert_eq!(fence_of(&mut c, "{t}fence"), Some(5));
    // The inner key in another slot.
    let other = (0..1000)
        .map(|i| format!("data:{i}"))
        .find(|k| cluster.key_slot(k) != cluster.key_slot("{t}fence"))
        .unwrap();
    let err = error_of(
        &mut c,
        &["LOCK.FENCED", "{t}fence", "6", "SET", &other, "v"],
    );
    assert!(err.starts_with("CROSSSLOT"), "{err}");
    assert_eq!(fence_of(&mut c, "{t}fence"), Some(5));
    // Sent to a node that does not own the fence.
    let wrong = cluster
        .nodes
        .iter()
        .find(|n| n.port() != node.port())
        .unwrap();
    let mut w = wrong.conn();
    let err = error_of(
        &mut w,
        &["LOCK.FENCED", "{t}fence", "6", "SET", "{t}data", "w"],
    );
    assert!(err.starts_with("MOVED "), "{err}");
    let err = error_of(&mut w, &["LOCK.FENCECHECK", "{t}fence", "6"]);
    assert!(err.starts_with("MOVED "), "{err}");
    assert_eq!(get(&mut c, "{t}data"), data("v"));
}

#[test]
fn a_refused_write_leaves_watchers_alone_and_a_raise_wakes_them() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let mut other = server.conn();
    run(&mut c, &["LOCK.FENCED", "f", "5", "SET", "d", "v"]).unwrap();
    let watched_exec = |c: &mut Connection, other: &mut Connection, args: &[&str]| {
        run(c, &["WATCH", "f"]).unwrap();
        let _ = run(other, args);
        run(c, &["MULTI"]).unwrap();
        run(c, &["LOCK.FENCEGET", "f"]).unwrap();
        run(c, &["EXEC"]).unwrap()
    };
    let refused = watched_exec(
        &mut c,
        &mut other,
        &["LOCK.FENCED", "f", "4", "SET", "d", "x"],
    );
    assert_eq!(
        refused,
        Value::Array(vec![Value::Int(5)]),
        "a STALE refusal touches nothing"
    );
    let raised = watched_exec(&mut c, &mut other, &["LOCK.FENCECHECK", "f", "6"]);
    assert_eq!(raised, Value::Nil, "a raise is a change of the fence key");
    // The raise is a keyspace event of the module class.
    run(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Kd"]).unwrap();
    let mut pubsub_conn = server.conn();
    let mut pubsub = pubsub_conn.as_pubsub();
    pubsub.subscribe("__keyspace@0__:f").unwrap();
    run(&mut other, &["LOCK.FENCECHECK", "f", "7"]).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let message = pubsub.get_message().unwrap();
    let event: String = message.get_payload().unwrap();
    assert_eq!(event, "lock.fence");
}

/// A fence's serialized value: the type header, the signed integer as a
/// module UINT field (opcode 2, then a 64-bit length: 0x81 and 8 bytes big
/// endian), the end-of-value opcode.
fn fence_value(header: &[u8], value: i64) -> Vec<u8> {
    let mut out = header.to_vec();
    out.push(2);
    out.push(0x81);
    out.extend_from_slice(&(value as u64).to_be_bytes());
    out.push(0);
    out
}

#[test]
fn a_restored_fence_out_of_range_or_truncated_is_refused_whole() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let max = 9_007_199_254_740_991_i64;
    run(&mut c, &["LOCK.FENCECHECK", "model", &max.to_string()]).unwrap();
    let raw = match run(&mut c, &["DUMP", "model"]).unwrap() {
        Value::BulkString(bytes) => bytes,
        other => panic!("DUMP: {other:?}"),
    };
    let (value, footer) = raw.split_at(raw.len() - 10);
    let header = &value[..10];
    assert_eq!(header[1], 0x81, "a module type id is a 64-bit length");
    assert_eq!(
        value,
        fence_value(header, max),
        "the fence's layout changed: update fence_value()"
    );
    let payload = |value: &[u8]| {
        let mut payload = value.to_vec();
        payload.extend_from_slice(&footer[..2]);
        let crc = crc64(&payload);
        payload.extend_from_slice(&crc.to_le_bytes());
        payload
    };
    // The rebuilt payload restores (so the refusals below are the loader's).
    run_raw(
        &mut c,
        &[b"RESTORE", b"ok", b"0", &payload(&fence_value(header, 7))],
    )
    .unwrap();
    assert_eq!(fence_of(&mut c, "ok"), Some(7));
    let truncated = &fence_value(header, 7)[..12];
    for (what, bad) in [
        ("2^53", fence_value(header, max + 1)),
        ("-1", fence_value(header, -1)),
        ("i64::MIN", fence_value(header, i64::MIN)),
        ("truncated", truncated.to_vec()),
    ] {
        assert!(
            run_raw(&mut c, &[b"RESTORE", b"bad", b"0", &payload(&bad)]).is_err(),
            "{what} must be refused"
        );
        assert_eq!(
            run(&mut c, &["EXISTS", "bad"]).unwrap(),
            Value::Int(0),
            "{what}"
        );
        assert_eq!(
            run(&mut c, &["PING"]).unwrap(),
            Value::SimpleString("PONG".into())
        );
    }
}

#[test]
fn over_maxmemory_and_inside_multi_a_fence_behaves_like_any_write() {
    let server = RedisServer::start();
    let mut c = server.conn();
    run(&mut c, &["LOCK.FENCED", "f", "5", "SET", "d", "v5"]).unwrap();
    run(&mut c, &["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    let err = error_of(&mut c, &["LOCK.FENCED", "f", "6", "SET", "d", "v6"]);
    assert!(err.starts_with("OOM"), "{err}");
    let err = error_of(&mut c, &["LOCK.FENCECHECK", "f", "6"]);
    assert!(err.starts_with("OOM"), "{err}");
    assert_eq!(fence_of(&mut c, "f"), Some(5), "reads still work");
    run(&mut c, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();
    assert_eq!(get(&mut c, "d"), data("v5"));

    // In a transaction each fenced write is judged when EXEC runs it.
    run(&mut c, &["MULTI"]).unwrap();
    run(&mut c, &["LOCK.FENCED", "f", "7", "SET", "d", "v7"]).unwrap();
    run(&mut c, &["LOCK.FENCED", "f", "6", "SET", "d", "v6"]).unwrap();
    // The raw reply: `query` would turn the array's error into an Err.
    let exec = redis::ConnectionLike::req_command(&mut c, &redis::cmd("EXEC")).unwrap();
    let replies = match exec {
        Value::Array(replies) => replies,
        other => panic!("EXEC: {other:?}"),
    };
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[0], Value::Okay);
    assert!(
        matches!(&replies[1], Value::ServerError(e) if e.code() == "STALE"),
        "{:?}",
        replies[1]
    );
    assert_eq!(get(&mut c, "d"), data("v7"));
    assert_eq!(fence_of(&mut c, "f"), Some(7));
}

/// `LOCK.FENCED` nested in itself: asking for its keys once asked the
/// server for the inner command's keys, which called the module back for
/// the next level, until the server's stack overflowed (any client could
/// crash it with `COMMAND GETKEYS`, or in a cluster with the command
/// itself, whose routing asks for the keys before the command runs).
#[test]
fn a_nested_fenced_write_is_refused_without_a_key_lookup_per_level() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let levels = 20_000;
    let mut args: Vec<String> = Vec::with_capacity(levels * 3 + 3);
    for _ in 0..levels {
        args.extend(["LOCK.FENCED".into(), "f".into(), "1".into()]);
    }
    args.extend(["SET".into(), "k".into(), "v".into()]);
    let mut getkeys = vec!["COMMAND".to_string(), "GETKEYS".to_string()];
    getkeys.extend(args.iter().cloned());
    let refs: Vec<&str> = getkeys.iter().map(String::as_str).collect();
    // The fence key alone: the nested command is not looked into.
    assert_eq!(run(&mut c, &refs).unwrap(), Value::Array(vec![data("f")]));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let err = error_of(&mut c, &refs);
    assert!(
        err.contains("LOCK.FENCED cannot run 'LOCK.FENCED'"),
        "{err}"
    );
    assert!(!exists(&mut c, "k"));
    assert_eq!(fence_of(&mut c, "f"), None);
    assert_eq!(
        run(&mut c, &["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
}

/// The keys a fenced write reports (for routing, ACL and `COMMAND
/// GETKEYS`) are the fence key and exactly the inner command's keys,
/// whether the module asks the server for them or remembers them by the
/// line's shape (the command and its number of arguments, for commands
/// whose keys are at fixed places). (Their key-spec flags are not compared:
/// `RedisModule_GetCommandKeysWithFlags` gives none for most native
/// commands; the inner command's own ACL check, when it runs, uses its
/// real ones.)
#[test]
fn a_fenced_write_reports_the_inner_command_s_keys() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let lines: &[&[&str]] = &[
        &["HSET", "h", "a", "b"],
        &["HSET", "h", "a", "b", "c", "d"],
        &["MSET", "a", "1", "b", "2"],
        &["MSET", "a", "1", "b", "2", "c", "3"],
        &["SMOVE", "s", "t", "m"],
        &["SINTERSTORE", "d", "s"],
        &["SINTERSTORE", "d", "s", "t", "u"],
        &["ZUNIONSTORE", "out", "2", "z", "y"],
        &["XGROUP", "CREATE", "x", "g", "$", "MKSTREAM"],
        &["HSET", "h"],
        &["GETSET", "d", "v", "x"],
    ];
    for round in 0..3 {
        for line in lines {
            let expected = keys_of(&mut c, line);
            let mut fenced = vec!["LOCK.FENCED", "f", "1"];
            fenced.extend_from_slice(line);
            let reported = keys_of(&mut c, &fenced);
            let (fence, inner) = reported.split_first().expect("the fence key");
            assert_eq!(fence, &data("f"), "round {round}, {line:?}");
            // In the server's order for keys at fixed places; a command
            // that finds its own keys may list them in another order.
            let sorted = |keys: &[Value]| {
                let mut keys: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
                keys.sort();
                keys
            };
            assert_eq!(sorted(inner), sorted(&expected), "round {round}, {line:?}");
            if round == 0 {
                // Run it once, so that its verdict (and then its shape) is
                // remembered for the next rounds.
                let _ = run(&mut c, &fenced);
            }
        }
    }
}

/// The module answers a repeated fenced write from the last command it
/// ran (its verdict, and the keys of its last line's shape) without
/// looking it up: a line of the same command with another number of
/// arguments, or the same name in other letters, still reports exactly
/// its own keys, and each runs as itself.
#[test]
fn the_last_command_s_remembered_keys_fit_only_its_own_shape() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let lines: &[&[&str]] = &[
        &["MSET", "a", "1"],
        &["MSET", "a", "1", "b", "2", "c", "3"],
        &["mset", "a", "1", "b", "2"],
        &["MSET", "a"],
        &["MSET", "a", "1", "b", "2"],
        &["MSET", "a", "1", "b", "2", "c", "3", "d", "4"],
    ];
    // MSET is run first, so it is the command the module remembers.
    assert_eq!(
        run(&mut c, &["LOCK.FENCED", "f", "1", "MSET", "a", "0"]).unwrap(),
        Value::Okay
    );
    for round in 0..3 {
        for line in lines {
            let mut fenced = vec!["LOCK.FENCED", "f", "1"];
            fenced.extend_from_slice(line);
            let mut expected = vec![data("f")];
            expected.extend(keys_of(&mut c, line));
            // Asked twice: the second answer comes from what the first
            // remembered (the same command and shape).
            for ask in 0..2 {
                assert_eq!(
                    keys_of(&mut c, &fenced),
                    expected,
                    "round {round}, ask {ask}, {line:?}"
                );
            }
            if round == 1 {
                let ran = run(&mut c, &fenced);
                if line.len() % 2 == 0 {
                    assert!(ran.is_err(), "{line:?}: {ran:?}");
                } else {
                    assert_eq!(ran.unwrap(), Value::Okay, "{line:?}");
                    for pair in line[1..].chunks(2) {
                        assert_eq!(get(&mut c, pair[0]), data(pair[1]), "{line:?}");
                    }
                }
            }
        }
    }
    // Every count of inner arguments reaches the command whole: one by
    // one up to six, as a vector beyond.
    for count in 1..=9 {
        let list = format!("list{count}");
        let mut line = vec!["LOCK.FENCED", "f", "1", "RPUSH", list.as_str()];
        let items: Vec<String> = (1..count).map(|i| format!("item{i}")).collect();
        line.extend(items.iter().map(String::as_str));
        let ran = run(&mut c, &line);
        if count == 1 {
            assert!(ran.is_err(), "RPUSH without items: {ran:?}");
            continue;
        }
        assert_eq!(ran.unwrap(), Value::Int(count - 1), "{line:?}");
        let stored = run(&mut c, &["LRANGE", &list, "0", "-1"]).unwrap();
        let expected: Vec<Value> = items.iter().map(|item| data(item)).collect();
        assert_eq!(stored, Value::Array(expected), "{line:?}");
    }
}

/// A command whose keys' flags depend on its other arguments (key spec
/// `variable_flags`: `SET k v GET` reads and writes `k`, `SET k v NX` only
/// writes it) gets them from the server for each line, never from an
/// earlier line of the same length: a user who may only write `k` can
/// fence `SET k v NX` whatever lines were asked about before, and still
/// not `SET k v GET`.
#[test]
fn key_flags_that_vary_by_line_are_asked_for_each_line() {
    let server = RedisServer::start();
    let mut admin = server.conn();
    let rules = [
        "ACL", "SETUSER", "writer", "on", ">pw", "+@all", "~f", "%W~k",
    ];
    assert_eq!(run(&mut admin, &rules).unwrap(), Value::Okay);
    let url = format!("redis://writer:pw@127.0.0.1:{}/", server.port());
    let mut writer = redis::Client::open(url).unwrap().get_connection().unwrap();
    let nx = ["LOCK.FENCED", "f", "1", "SET", "k", "v", "NX"];
    let with_get = ["LOCK.FENCED", "f", "1", "SET", "k", "v", "GET"];
    for round in 0..3 {
        run(&mut admin, &["DEL", "k"]).unwrap();
        assert_eq!(run(&mut writer, &nx).unwrap(), Value::Okay, "round {round}");
        assert_eq!(get(&mut admin, "k"), data("v"), "round {round}");
        // Its line's keys, asked with the other line of the same length
        // in between.
        let mut args = vec!["COMMAND", "GETKEYS"];
        args.extend_from_slice(&with_get);
        run(&mut admin, &args).unwrap();
        run(&mut admin, &["DEL", "k"]).unwrap();
        assert_eq!(run(&mut writer, &nx).unwrap(), Value::Okay, "round {round}");
        let err = error_of(&mut writer, &with_get);
        assert!(err.starts_with("NOPERM"), "round {round}: {err}");
    }
}
