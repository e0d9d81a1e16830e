//! Configuration (CONFIG GET/SET, module arguments), INFO counters, command
//! docs and flags, and the debug knob's switch.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use redis::Value;

fn config_get(c: &mut redis::Connection, name: &str) -> Option<String> {
    let pairs: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(c).unwrap();
    match pairs.as_slice() {
        [] => None,
        [key, value] => {
            assert_eq!(key, name);
            Some(value.clone())
        }
        other => panic!("CONFIG GET {name}: {other:?}"),
    }
}

fn config_set(c: &mut redis::Connection, name: &str, value: &str) -> redis::RedisResult<Value> {
    redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(c)
}

/// Checks that the limits in force are `max_ttl` and `max_owner`.
fn check_limits(c: &mut redis::Connection, max_ttl: u64, max_owner: usize) {
    assert_eq!(
        config_get(c, "lock.max-ttl").as_deref(),
        Some(max_ttl.to_string().as_str())
    );
    assert_eq!(
        config_get(c, "lock.max-owner-bytes").as_deref(),
        Some(max_owner.to_string().as_str())
    );
    let over = (max_ttl + 1).to_string();
    assert_eq!(
        error_of(c, &["LOCK.ACQUIRE", "k", "alice", &over]),
        ttl_error(max_ttl)
    );
    assert_eq!(
        error_of(c, &["LOCK.EXTEND", "k", "alice", &over]),
        ttl_error(max_ttl)
    );
    assert!(
        acquire(c, "k", "alice", max_ttl).is_some(),
        "the max ttl {max_ttl} is allowed"
    );
    assert_eq!(
        error_of(
            c,
            &["LOCK.ACQUIRE", "o", &"x".repeat(max_owner + 1), "1000"]
        ),
        owner_error(max_owner)
    );
    assert!(
        acquire(c, "o", &"x".repeat(max_owner), 1_000).is_some(),
        "a {max_owner}-byte owner is allowed"
    );
    assert_eq!(release_all(c, "k", "alice"), Some(0));
    assert_eq!(release_all(c, "o", &"x".repeat(max_owner)), Some(0));
}

#[test]
fn defaults_are_one_day_and_256_bytes() {
    let server = RedisServer::start();
    let mut c = server.conn();
    check_limits(&mut c, 86_400_000, 256);
    let all: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.*")
        .query(&mut c)
        .unwrap();
    assert!(
        all.contains(&"lock.max-ttl".to_string())
            && all.contains(&"lock.max-owner-bytes".to_string()),
        "{all:?}"
    );
    assert_eq!(
        config_get(&mut c, "lock.max-holders").as_deref(),
        Some("10000")
    );
}

#[test]
fn config_set_changes_the_limits_at_once() {
    let server = RedisServer::start();
    let mut c = server.conn();
    assert_eq!(
        config_set(&mut c, "lock.max-ttl", "5000").unwrap(),
        Value::Okay
    );
    assert_eq!(
        config_set(&mut c, "lock.max-owner-bytes", "8").unwrap(),
        Value::Okay
    );
    check_limits(&mut c, 5_000, 8);
    assert_eq!(
        config_set(&mut c, "lock.max-ttl", "123456").unwrap(),
        Value::Okay
    );
    assert_eq!(
        config_set(&mut c, "lock.max-owner-bytes", "300").unwrap(),
        Value::Okay
    );
    check_limits(&mut c, 123_456, 300);
    // Nonsense is refused and leaves the value alone.
    for bad in ["abc", "", "1.5"] {
        assert!(
            config_set(&mut c, "lock.max-ttl", bad).is_err(),
            "lock.max-ttl {bad:?} accepted"
        );
        assert!(
            config_set(&mut c, "lock.max-owner-bytes", bad).is_err(),
            "lock.max-owner-bytes {bad:?} accepted"
        );
    }
    check_limits(&mut c, 123_456, 300);
}

/// A `lock.max-owner-bytes` lowered below a holder's owner never locks it
/// out: its extend, fence and release still work; an owner that long that
/// holds nothing still gets the error, and so does a new acquisition.
#[test]
fn a_lowered_max_owner_bytes_does_not_lock_a_holder_out() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let holder = "h".repeat(200);
    let stranger = "s".repeat(200);
    let token = acquire(&mut c, "k", &holder, 60_000).unwrap();
    assert_eq!(
        config_set(&mut c, "lock.max-owner-bytes", "100").unwrap(),
        Value::Okay
    );
    assert_eq!(extend(&mut c, "k", &holder, 50_000), 1);
    assert_eq!(fence(&mut c, "k", &holder, None), Some(token));
    assert_eq!(
        fence(&mut c, "k", &holder, Some(token + 5)),
        Some(token + 5)
    );
    for args in [
        vec!["LOCK.RELEASE", "k", stranger.as_str()],
        vec!["LOCK.EXTEND", "k", stranger.as_str(), "1000"],
        vec!["LOCK.FENCE", "k", stranger.as_str()],
        vec!["LOCK.RELEASE", "free", stranger.as_str()],
        vec!["LOCK.ACQUIRE", "k", holder.as_str(), "1000"],
        vec!["LOCK.ACQUIRE", "free", stranger.as_str(), "1000"],
    ] {
        assert_eq!(error_of(&mut c, &args), owner_error(100), "{args:?}");
    }
    let info = held(&mut c, "k");
    assert_eq!((info.owner, info.holds), (holder.clone().into_bytes(), 1));
    assert!(!exists(&mut c, "free"));
    assert_eq!(release(&mut c, "k", &holder), Some(0));
    assert!(!exists(&mut c, "k"));
    // Once it holds nothing, the long owner is refused like any other.
    assert_eq!(
        error_of(&mut c, &["LOCK.RELEASE", "k", &holder]),
        owner_error(100)
    );
}

#[test]
fn module_arguments_set_the_limits() {
    let server = RedisServer::start_with(ServerOptions::default().module_args([
        "max-ttl",
        "5000",
        "max-owner-bytes",
        "8",
    ]));
    let mut c = server.conn();
    check_limits(&mut c, 5_000, 8);
}

#[test]
fn module_arguments_accept_the_lock_prefix() {
    let server = RedisServer::start_with(ServerOptions::default().module_args([
        "lock.max-ttl",
        "7000",
        "lock.max-owner-bytes",
        "9",
    ]));
    let mut c = server.conn();
    check_limits(&mut c, 7_000, 9);
}

#[test]
fn an_unknown_module_argument_refuses_module_load() {
    let server = RedisServer::start_with(ServerOptions::default().without_module());
    let mut c = server.conn();
    let path = testkit::module_path();
    let path = path.to_str().unwrap();
    // The server's own modules stay listed (Redis 8 lists its built-in
    // `vectorset`, Valkey 9 its `lua` scripting engine; Redis 7.0 and
    // Valkey 8.1 none): the refused module must add nothing to them.
    let before: Value = redis::cmd("MODULE").arg("LIST").query(&mut c).unwrap();
    let err = error_of(&mut c, &["MODULE", "LOAD", path, "badarg", "1"]);
    assert!(err.starts_with("ERR"), "{err}");
    let modules: Value = redis::cmd("MODULE").arg("LIST").query(&mut c).unwrap();
    assert_eq!(modules, before, "a refused module must not stay loaded");
    let err = redis::cmd("LOCK.INFO")
        .arg("k")
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(
        error_line(&err).starts_with("ERR unknown command"),
        "{}",
        error_line(&err)
    );
    // The same server loads it with good arguments afterwards.
    let ok = run(&mut c, &["MODULE", "LOAD", path, "max-ttl", "5000"]).unwrap();
    assert_eq!(ok, Value::Okay);
    check_limits(&mut c, 5_000, 256);
}

#[test]
fn a_server_with_an_unknown_module_argument_does_not_start() {
    let port = testkit::free_port();
    let dir = std::env::temp_dir().join(format!("redis-lock-badarg-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(testkit::server_binary())
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .arg("--dir")
        .arg(&dir)
        .arg("--loadmodule")
        .arg(testkit::module_path())
        .args(["no-such-option", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut status = None;
    let exited = wait_until(Duration::from_secs(20), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        exited,
        "redis-server kept running with an unknown module argument"
    );
    assert!(
        !status.unwrap().success(),
        "redis-server exited successfully"
    );
}

#[test]
fn the_debug_knob_is_off_without_debug_yes() {
    for args in [&[][..], &["debug", "no"][..]] {
        let server = RedisServer::start_with(module_options(args));
        let mut c = server.conn();
        for cmd in [
            &["LOCK.DEBUG", "WALLCLOCK-OFFSET", "1000"][..],
            &["LOCK.DEBUG", "WALLCLOCK-OFFSET"][..],
        ] {
            let err = error_of(&mut c, cmd);
            assert!(
                err.starts_with("ERR LOCK.DEBUG is disabled"),
                "{cmd:?} with module args {args:?}: {err}"
            );
        }
        // The locks work as usual.
        assert!(acquire(&mut c, "k", "alice", 1_000).is_some());
    }
}

#[test]
fn info_lock_counts_every_outcome() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let fields = [
        "lock_acquired",
        "lock_reentered",
        "lock_contended",
        "lock_released",
        "lock_expired",
        "lock_extended",
        "lock_fenced",
        "lock_held",
        "lock_last_token",
    ];
    let info = info_section(&mut c, "lock");
    for field in fields {
        assert_eq!(
            info.get(field).map(String::as_str),
            Some("0"),
            "{field} on a fresh node: {info:?}"
        );
    }
    let t1 = acquire(&mut c, "a", "alice", 60_000).unwrap(); // acquired 1
    acquire(&mut c, "a", "alice", 60_000).unwrap(); // reentered 1
    acquire(&mut c, "a", "alice", 60_000).unwrap(); // reentered 2
    assert_eq!(acquire(&mut c, "a", "bob", 60_000), None); // contended 1
    assert_eq!(extend(&mut c, "a", "alice", 60_000), 1); // extended 1
    assert_eq!(extend(&mut c, "a", "bob", 60_000), 0); // not counted
    assert_eq!(fence(&mut c, "a", "alice", None), Some(t1)); // fenced 1
    assert_eq!(release(&mut c, "a", "alice"), Some(2));
    assert_eq!(release_all(&mut c, "a", "alice"), Some(0)); // released 1
    acquire(&mut c, "b", "bob", 100).unwrap(); // acquired 2, then expired 1
    wait_gone(&mut c, "b", Duration::from_millis(100));
    let t3 = acquire(&mut c, "c", "carol", 60_000).unwrap(); // acquired 3, held 1
    let info = info_section(&mut c, "lock");
    let got: Vec<(&str, i64)> = fields
        .iter()
        .map(|f| (*f, info[*f].parse::<i64>().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            ("lock_acquired", 3),
            ("lock_reentered", 2),
            ("lock_contended", 1),
            ("lock_released", 1),
            ("lock_expired", 1),
            ("lock_extended", 1),
            ("lock_fenced", 1),
            ("lock_held", 1),
            ("lock_last_token", t3),
        ]
    );
}

/// `COMMAND DOCS name` as field → value.
fn docs(c: &mut redis::Connection, name: &str) -> Vec<(String, Value)> {
    let reply: Value = redis::cmd("COMMAND")
        .arg("DOCS")
        .arg(name)
        .query(c)
        .unwrap();
    let Value::Array(items) = reply else {
        panic!("COMMAND DOCS {name}: {reply:?}")
    };
    let [Value::BulkString(_), Value::Array(doc)] = items.as_slice() else {
        panic!("COMMAND DOCS {name} is empty or malformed: {items:?}")
    };
    doc.chunks(2)
        .map(|pair| {
            let key = match &pair[0] {
                Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
                Value::SimpleString(s) => s.clone(),
                other => panic!("{other:?}"),
            };
            (key, pair[1].clone())
        })
        .collect()
}

#[test]
fn command_docs_describe_every_command() {
    let server = RedisServer::start();
    let mut c = server.conn();
    for (name, args) in [
        ("lock.acquire", true),
        ("lock.release", true),
        ("lock.extend", true),
        ("lock.fence", true),
        ("lock.info", true),
        ("lock.holders", true),
    ] {
        let doc = docs(&mut c, name);
        let summary = doc
            .iter()
            .find(|(k, _)| k == "summary")
            .map(|(_, v)| v.clone());
        match summary {
            Some(Value::BulkString(s)) => assert!(!s.is_empty(), "{name}: empty summary"),
            Some(Value::SimpleString(s)) => assert!(!s.is_empty(), "{name}: empty summary"),
            other => panic!("{name}: no summary in COMMAND DOCS: {other:?} ({doc:?})"),
        }
        if args {
            let arguments = doc
                .iter()
                .find(|(k, _)| k == "arguments")
                .map(|(_, v)| v.clone());
            assert!(
                matches!(&arguments, Some(Value::Array(a)) if !a.is_empty()),
                "{name}: COMMAND DOCS lists no arguments: {doc:?}"
            );
        }
    }
}

/// (flags, first key, last key, step) from `COMMAND INFO name`.
fn command_info(c: &mut redis::Connection, name: &str) -> (Vec<String>, i64, i64, i64) {
    let reply: Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query(c)
        .unwrap();
    let Value::Array(outer) = reply else {
        panic!("{reply:?}")
    };
    let Some(Value::Array(info)) = outer.first() else {
        panic!("COMMAND INFO {name}: {outer:?}")
    };
    let flags = match &info[2] {
        Value::Array(flags) | Value::Set(flags) => flags
            .iter()
            .map(|f| match f {
                Value::SimpleString(s) => s.clone(),
                Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("flags of {name}: {other:?}"),
    };
    let int = |v: &Value| match v {
        Value::Int(n) => *n,
        other => panic!("{other:?}"),
    };
    (flags, int(&info[3]), int(&info[4]), int(&info[5]))
}

#[test]
fn commands_carry_the_right_flags_and_key_positions() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let cases: [(&str, &[&str], &[&str]); 6] = [
        ("lock.acquire", &["write", "denyoom", "fast"], &["readonly"]),
        ("lock.release", &["write", "fast"], &["readonly"]),
        ("lock.extend", &["write", "fast"], &["readonly"]),
        ("lock.fence", &["write", "fast"], &["readonly"]),
        ("lock.info", &["readonly", "fast"], &["write", "denyoom"]),
        ("lock.holders", &["readonly"], &["write", "denyoom"]),
    ];
    for (name, with, without) in cases {
        let (flags, first, last, step) = command_info(&mut c, name);
        for flag in with {
            assert!(
                flags.iter().any(|f| f == flag),
                "{name} lacks flag {flag}: {flags:?}"
            );
        }
        for flag in without {
            assert!(
                !flags.iter().any(|f| f == flag),
                "{name} has flag {flag}: {flags:?}"
            );
        }
        assert_eq!(
            (first, last, step),
            (1, 1, 1),
            "{name}: the key is at position 1"
        );
    }
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.ACQUIRE")
        .arg("k")
        .arg("alice")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["k"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("LOCK.FENCE")
        .arg("f")
        .arg("alice")
        .arg("ATLEAST")
        .arg(5)
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["f"]);
}

#[test]
fn deny_oom_refuses_new_locks_when_memory_is_full() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "held", "alice", 60_000).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(1)
        .query(&mut c)
        .unwrap();
    let err = error_of(&mut c, &["LOCK.ACQUIRE", "new", "alice", "1000"]);
    assert!(err.starts_with("OOM"), "{err}");
    // Releasing frees memory and stays possible.
    assert_eq!(release(&mut c, "held", "alice"), Some(0));
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query(&mut c)
        .unwrap();
}
