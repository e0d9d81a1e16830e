//! Leaks: a primary and its replica, both with the module, run a workload
//! that touches every command (and their errors), waiting clients (granted,
//! timed out, killed), lease expiry, replication, `DEBUG RELOAD`,
//! `FLUSHALL`, `SWAPDB`, an AOF rewrite and `MODULE UNLOAD` (which the
//! server refuses for a module with a data type); then both shut down.
//!
//! Under `make leakcheck` (and the short round in `make test`) both
//! servers run under memcheck with `--leak-check=full` on Valkey, whose
//! build uses the C library's malloc, and the test fails if memcheck
//! reports any block *definitely lost* with a frame in the module. Outside
//! it the workload still runs, as a test of those paths.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use redis::{Connection, Value};

/// Workload rounds: `REDIS_LOCK_LEAK_ROUNDS` (make leakcheck: 5), else 1.
fn rounds() -> usize {
    std::env::var("REDIS_LOCK_LEAK_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

fn ok(conn: &mut Connection, args: &[&str]) -> Value {
    run(conn, args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// `LOCK.ACQUIRE … WAIT` sent on a connection of its own, not read yet.
fn send_wait(server: &RedisServer, key: &str, owner: &str, wait_ms: u64) -> Connection {
    let mut conn = server.conn();
    let packed = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(10_000)
        .arg("WAIT")
        .arg(wait_ms)
        .get_packed_command();
    conn.send_packed_command(&packed).unwrap();
    conn
}

fn round(server: &RedisServer, n: usize) {
    let mut c = server.conn();
    let key = |name: &str| format!("leak:{n}:{name}");

    // Exclusive: grant, re-entry, extend, fence, info, holders, release.
    let a = key("a");
    assert!(acquire(&mut c, &a, "o1", 10_000).is_some());
    assert!(acquire(&mut c, &a, "o1", 10_000).is_some());
    assert_eq!(extend(&mut c, &a, "o1", 20_000), 1);
    assert!(fence(&mut c, &a, "o1", None).is_some());
    assert!(fence(&mut c, &a, "o1", Some(1 << 50)).is_some());
    assert!(lock_info(&mut c, &a).is_some());
    ok(&mut c, &["LOCK.HOLDERS", &a]);
    assert!(release(&mut c, &a, "o1").is_some());
    assert!(release_all(&mut c, &a, "o1").is_some());

    // Shared holders and a semaphore, one permit too many.
    let s = key("s");
    for reader in ["r1", "r2", "r3"] {
        ok(&mut c, &["LOCK.ACQUIRE", &s, reader, "10000", "SHARED"]);
    }
    ok(&mut c, &["LOCK.HOLDERS", &s, "COUNT", "2"]);
    ok(&mut c, &["LOCK.RELEASE", &s, "r1"]);
    let sem = key("sem");
    for permit in ["p1", "p2"] {
        let granted = ok(
            &mut c,
            &[
                "LOCK.ACQUIRE",
                &sem,
                permit,
                "10000",
                "SHARED",
                "LIMIT",
                "2",
            ],
        );
        assert_ne!(granted, Value::Nil);
    }
    let refused = ok(
        &mut c,
        &["LOCK.ACQUIRE", &sem, "p3", "10000", "SHARED", "LIMIT", "2"],
    );
    assert_eq!(refused, Value::Nil);

    // Waiters: one granted by the release, one timed out, one killed.
    let w = key("w");
    assert!(acquire(&mut c, &w, "holder", 10_000).is_some());
    let mut granted = send_wait(server, &w, "granted", 30_000);
    let mut timed_out = send_wait(server, &w, "timed-out", 50);
    let killed = send_wait(server, &w, "killed", 0);
    assert!(wait_until(SOON, || waiters(&mut c, &w) >= 2));
    // Its connection closes: the server frees the blocked client.
    drop(killed);
    let late: Value = timed_out.recv_response().unwrap();
    assert_eq!(late, Value::Nil, "the 50 ms wait ends without the lock");
    assert!(release(&mut c, &w, "holder").is_some());
    let grant: Value = granted.recv_response().unwrap();
    assert!(matches!(grant, Value::Int(_)), "{grant:?}");

    // Leases that end: some with waiters behind them.
    for i in 0..20 {
        assert!(acquire(&mut c, &key(&format!("e{i}")), "o", 20 + i).is_some());
    }
    let e0 = key("e0");
    let mut behind = send_wait(server, &e0, "next", 5_000);
    let next: Value = behind.recv_response().unwrap();
    assert!(matches!(next, Value::Int(_)), "{next:?}");
    assert!(wait_until(SOON, || !exists(&mut c, &key("e19"))));

    // Errors change nothing and allocate nothing that stays.
    for bad in [
        vec!["LOCK.ACQUIRE", "k"],
        vec!["LOCK.ACQUIRE", "k", "o", "-1"],
        vec!["LOCK.ACQUIRE", "k", "o", "100", "SHARED", "LIMIT", "0"],
        vec!["LOCK.RELEASE", "k", "o", "SOME"],
        vec!["LOCK.FENCE", "k", "o", "ATLEAST", "x"],
        vec!["LOCK.APPLY", "k", "o", "1", "1", "1"],
        vec!["LOCK.DROP", "k", "o"],
        vec!["LOCK.COUNTER", "5"],
        vec!["LOCK.FLOOR", "x"],
        vec!["LOCK.FLOOR", "9007199254740991"],
        vec!["LOCK.DEBUG", "NOPE"],
    ] {
        assert!(run(&mut c, &bad).is_err(), "{bad:?}");
    }
    let plain = key("plain");
    ok(&mut c, &["SET", &plain, "v"]);
    assert!(run(&mut c, &["LOCK.ACQUIRE", &plain, "o", "100"]).is_err());
    set_wall_offset(&mut c, 1_000);
    set_wall_offset(&mut c, 0);
}

fn leak_options() -> ServerOptions {
    ServerOptions::default().args(["--appendonly", "yes", "--aof-use-rdb-preamble", "no"])
}

#[test]
fn the_module_leaks_nothing_over_every_command_and_event() {
    let mut primary = RedisServer::start_with(leak_options());
    let mut replica = RedisServer::start_with(leak_options());
    replica.replicate_from(&primary);
    for n in 0..rounds() {
        round(&primary, n);
    }
    let mut c = primary.conn();
    // Live locks through a reload, an AOF rewrite, SWAPDB and FLUSHALL.
    assert!(acquire(&mut c, "live:1", "o", 60_000).is_some());
    ok(&mut c, &["LOCK.ACQUIRE", "live:2", "r", "60000", "SHARED"]);
    ok(&mut c, &["DEBUG", "RELOAD"]);
    assert!(lock_info(&mut c, "live:1").is_some());
    ok(&mut c, &["BGREWRITEAOF"]);
    assert!(wait_until(Duration::from_secs(120), || {
        info_section(&mut c, "persistence")
            .get("aof_rewrite_in_progress")
            .is_some_and(|v| v == "0")
            && info_section(&mut c, "persistence")
                .get("aof_rewrite_scheduled")
                .is_some_and(|v| v == "0")
    }));
    ok(&mut c, &["SELECT", "1"]);
    assert!(acquire(&mut c, "live:db1", "o", 60_000).is_some());
    ok(&mut c, &["SWAPDB", "0", "1"]);
    ok(&mut c, &["SELECT", "0"]);
    assert!(lock_info(&mut c, "live:db1").is_some());
    // The module has a data type: the server refuses to unload it.
    let unload = run(&mut c, &["MODULE", "UNLOAD", "lock"]).unwrap_err();
    assert!(
        error_line(&unload).contains("data type") || error_line(&unload).contains("unload"),
        "{unload:?}"
    );
    wait_replicated(&primary, &replica);
    ok(&mut c, &["FLUSHALL"]);
    assert_eq!(dbsize(&mut c), 0);
    wait_replicated(&primary, &replica);
    drop(c);

    replica.shutdown("NOSAVE");
    primary.shutdown("NOSAVE");
    if !testkit::leak_check() {
        return;
    }
    for (name, server) in [("primary", &primary), ("replica", &replica)] {
        let (records, summary) = server.module_leaks();
        println!(
            "{name}: memcheck {}",
            summary.as_deref().unwrap_or("reported no leak summary")
        );
        assert!(
            summary.is_some(),
            "{name}: memcheck ran no leak check (did the server exit normally?)"
        );
        assert!(
            records.is_empty(),
            "{name}: blocks definitely lost from the module:\n{}",
            records.join("\n\n")
        );
    }
}

#[test]
fn the_leak_parser_finds_module_records_only() {
    let log = "\
==7== 48 bytes in 1 blocks are definitely lost in loss record 5 of 20
==7==    at 0x4848899: malloc (vg_replace_malloc.c:381)
==7==    by 0x1A2B3C: zmalloc (zmalloc.c:120)
==7==    by 0x5D6E7F: redis_lock::commands::acquire (in /x/libredis_lock.so)
==7== 
==7== 16 bytes in 1 blocks are definitely lost in loss record 2 of 20
==7==    at 0x4848899: malloc (vg_replace_malloc.c:381)
==7==    by 0x1A2B3C: sdsnew (sds.c:10)
==7== 
==7== LEAK SUMMARY:
==7==    definitely lost: 64 bytes in 2 blocks
";
    let (records, summary) = testkit::module_leak_records(log);
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(records[0].starts_with("48 bytes"));
    assert!(records[0].contains("redis_lock::commands::acquire"));
    assert_eq!(
        summary.as_deref(),
        Some("==7==    definitely lost: 64 bytes in 2 blocks")
    );
}
