//! The module inside a server that does more than `LOCK.*`: write pauses and
//! failover, databases swapped, keys moved, overwritten and deleted under a
//! waiting client, and the plain keys next to the locks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use redis::{Connection, Value};

fn cmd(c: &mut Connection, args: &[&str]) -> Value {
    run(c, args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn ping(c: &mut Connection) -> bool {
    redis::cmd("PING")
        .query::<String>(c)
        .is_ok_and(|p| p == "PONG")
}

/// A lease ends while writes are paused: nothing is deleted, granted or
/// propagated during the pause (Redis asserts on that with AOF or a
/// replica); right after it the lock ends and its waiter is granted.
fn lease_end_inside_a_write_pause(server: &RedisServer, replica: Option<&RedisServer>) {
    let mut c = server.conn();
    acquire(&mut c, "pz", "o", 30_000).unwrap();
    let waiter = spawn_waiter(server, "pz", "next", 30_000, 0);
    // The lease is made to end 1 ms from now in the same transaction that
    // pauses writes: it ends inside the pause however slow the server (a
    // short lease from the start could end before the waiter was queued).
    let _: Value = redis::pipe()
        .atomic()
        .cmd("LOCK.EXTEND")
        .arg("pz")
        .arg("o")
        .arg(1)
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(60_000)
        .arg("WRITE")
        .query(&mut c)
        .unwrap();
    // Reads go on during a write pause: the lease is seen to end...
    assert!(wait_until(SOON, || lock_info(&mut c, "pz").is_none()));
    // ...and a few timer rounds later the key is still there, untouched.
    let runs = lock_stat(&mut c, "lock_timer_runs");
    assert!(wait_until(SOON, || lock_stat(&mut c, "lock_timer_runs") > runs + 3));
    assert!(
        exists(&mut c, "pz"),
        "a lock was deleted during a write pause"
    );
    assert_eq!(lock_stat(&mut c, "lock_expired"), 0);
    assert_eq!(lock_stat(&mut c, "lock_wait_grants"), 0);
    assert!(ping(&mut c));
    cmd(&mut c, &["CLIENT", "UNPAUSE"]);
    let token = waiter.join().unwrap().expect("granted after the pause");
    let info = held(&mut c, "pz");
    assert_eq!((info.owner.as_slice(), info.token), (&b"next"[..], token));
    assert_eq!(lock_stat(&mut c, "lock_expired"), 1);
    if let Some(replica) = replica {
        wait_replicated(server, replica);
        let mut r = replica.conn();
        assert_eq!(held(&mut r, "pz").token, token);
    }
}

#[test]
fn a_lease_ending_in_a_write_pause_with_aof_ends_after_it() {
    let server = RedisServer::start_with(ServerOptions::default().args([
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]));
    lease_end_inside_a_write_pause(&server, None);
}

#[test]
fn a_lease_ending_in_a_write_pause_with_a_replica_ends_after_it() {
    let server = RedisServer::start();
    let replica = RedisServer::start();
    replica.replicate_from(&server);
    lease_end_inside_a_write_pause(&server, Some(&replica));
}

#[test]
fn a_lease_ending_in_a_pause_of_all_clients_ends_after_it() {
    let server = RedisServer::start_with(ServerOptions::default().args(["--appendonly", "yes"]));
    let replica = RedisServer::start();
    replica.replicate_from(&server);
    let mut c = server.conn();
    acquire(&mut c, "pz", "o", 100).unwrap();
    cmd(&mut c, &["CLIENT", "PAUSE", "700", "ALL"]);
    // This PING waits out the pause, inside which the lease ended.
    let mut other = server.conn();
    assert!(ping(&mut other), "the server died during the pause");
    assert!(wait_until(SOON, || !exists(&mut other, "pz")));
    assert_eq!(lock_stat(&mut other, "lock_expired"), 1);
    wait_replicated(&server, &replica);
    assert!(!exists(&mut replica.conn(), "pz"));
}

#[test]
fn a_lease_ending_during_a_failover_that_waits_for_a_lagging_replica() {
    let server = RedisServer::start_with(ServerOptions::default().args(["--appendonly", "yes"]));
    let replica = RedisServer::start();
    replica.replicate_from(&server);
    let mut c = server.conn();
    acquire(&mut c, "pz", "o", 200).unwrap();
    // Writes after the freeze make the replica lag: the failover pauses
    // writes while it waits for the replica, until its timeout.
    replica.pause();
    cmd(&mut c, &["SET", "plain", "1"]);
    cmd(&mut c, &["FAILOVER", "TIMEOUT", "1000"]);
    let failover_over = wait_until(SOON, || {
        info_section(&mut c, "replication")
            .get("master_failover_state")
            .is_some_and(|state| state == "no-failover")
    });
    replica.resume();
    assert!(failover_over, "the failover never ended");
    assert!(ping(&mut c), "the server died during the failover");
    // Still the primary (the replica never caught up): the lease ends.
    assert!(wait_until(SOON, || !exists(&mut c, "pz")));
    assert_eq!(lock_stat(&mut c, "lock_expired"), 1);
    wait_replicated(&server, &replica);
    assert!(!exists(&mut replica.conn(), "pz"));
}

#[test]
fn swapdb_never_grants_a_waiter_a_lock_in_another_database() {
    let server = RedisServer::start();
    let mut c0 = server.conn();
    acquire(&mut c0, "sw", "A", 30_000).unwrap();
    let waiter = spawn_waiter(&server, "sw", "W", 30_000, 0);
    let mut c1 = server.conn();
    cmd(&mut c1, &["SELECT", "1"]);
    cmd(&mut c0, &["SWAPDB", "0", "1"]);
    // A's lock is in db 1 now; db 0 has no `sw`, and W, waiting in db 0,
    // gets it before any newcomer.
    let token = waiter.join().unwrap().expect("W is granted db 0's sw");
    let info = held(&mut c0, "sw");
    assert_eq!((info.owner.as_slice(), info.token), (&b"W"[..], token));
    assert_eq!(acquire(&mut c0, "sw", "newcomer", 30_000), None);
    // A still holds its lock, now in db 1, untouched.
    assert_eq!(held(&mut c1, "sw").owner, b"A");
    assert_eq!(release(&mut c1, "sw", "A"), Some(0));
    assert_eq!(held(&mut c0, "sw").owner, b"W");
}

#[test]
fn swapdb_with_a_held_lock_in_both_keeps_each_waiter_on_its_database() {
    let server = RedisServer::start();
    let mut c0 = server.conn();
    let mut c1 = server.conn();
    cmd(&mut c1, &["SELECT", "1"]);
    acquire(&mut c0, "sw", "A0", 30_000).unwrap();
    acquire(&mut c1, "sw", "A1", 30_000).unwrap();
    let waiter = spawn_waiter(&server, "sw", "W", 30_000, 0);
    cmd(&mut c0, &["SWAPDB", "0", "1"]);
    // Db 0 now holds A1's lock: releasing A0's (now in db 1) grants nothing
    // to W, who waits in db 0.
    assert_eq!(release(&mut c1, "sw", "A0"), Some(0));
    assert!(lock_info(&mut c1, "sw").is_none());
    assert_eq!(waiters(&mut c0, "sw"), 1);
    assert_eq!(release(&mut c0, "sw", "A1"), Some(0));
    let token = waiter.join().unwrap().expect("W gets db 0's sw");
    assert_eq!(held(&mut c0, "sw").token, token);
    assert!(lock_info(&mut c1, "sw").is_none());
}

/// A key's database as this connection sees it: which of `dbs` holds `key`.
fn db_of(server: &RedisServer, key: &str, dbs: &[i64]) -> Option<i64> {
    let mut probe = server.conn();
    dbs.iter().copied().find(|db| {
        cmd(&mut probe, &["SELECT", &db.to_string()]);
        exists(&mut probe, key)
    })
}

#[test]
fn move_and_copy_leave_the_caller_in_its_own_database() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let dbs = [0, 1, 2, 3, 5, 6];
    cmd(&mut c, &["SET", "a", "1"]);
    cmd(&mut c, &["MOVE", "a", "2"]);
    cmd(&mut c, &["SET", "after-move", "1"]);
    assert_eq!(db_of(&server, "after-move", &dbs), Some(0));

    cmd(&mut c, &["SET", "b", "1"]);
    cmd(&mut c, &["COPY", "b", "b-copy", "DB", "1"]);
    cmd(&mut c, &["SET", "after-copy", "1"]);
    assert_eq!(db_of(&server, "after-copy", &dbs), Some(0));
    assert_eq!(db_of(&server, "b-copy", &dbs), Some(1));

    // A lock moved away, with nobody waiting.
    acquire(&mut c, "job", "holder", 30_000).unwrap();
    cmd(&mut c, &["MOVE", "job", "1"]);
    cmd(&mut c, &["SET", "after-lock-move", "1"]);
    assert_eq!(db_of(&server, "after-lock-move", &dbs), Some(0));

    // Inside MULTI, after a SELECT queued in the same transaction.
    let _: Value = redis::pipe()
        .atomic()
        .cmd("SELECT")
        .arg(3)
        .cmd("SET")
        .arg("q")
        .arg(1)
        .cmd("COPY")
        .arg("q")
        .arg("q-copy")
        .arg("DB")
        .arg(5)
        .cmd("MOVE")
        .arg("q")
        .arg(6)
        .cmd("SET")
        .arg("in-multi")
        .arg(1)
        .query(&mut c)
        .unwrap();
    cmd(&mut c, &["SET", "after-multi", "1"]);
    assert_eq!(db_of(&server, "in-multi", &dbs), Some(3));
    assert_eq!(db_of(&server, "after-multi", &dbs), Some(3));
    assert_eq!(db_of(&server, "q-copy", &dbs), Some(5));
    assert_eq!(db_of(&server, "q", &dbs), Some(6));

    // A COPY that fails (the target exists) leaves no stale note behind.
    cmd(&mut c, &["SELECT", "0"]);
    cmd(&mut c, &["SET", "c", "1"]);
    cmd(&mut c, &["COPY", "c", "b-copy", "DB", "1"]);
    cmd(&mut c, &["SELECT", "2"]);
    cmd(&mut c, &["SET", "d", "1"]);
    cmd(&mut c, &["COPY", "d", "b-copy2", "DB", "1"]);
    cmd(&mut c, &["SET", "after-failed-copy", "1"]);
    assert_eq!(db_of(&server, "after-failed-copy", &dbs), Some(2));

    // DEBUG RELOAD announces every key it loads, each in its own database.
    cmd(&mut c, &["DEBUG", "RELOAD"]);
    cmd(&mut c, &["SET", "after-reload", "1"]);
    assert_eq!(db_of(&server, "after-reload", &dbs), Some(2));
}

#[test]
fn a_waiter_behind_a_value_that_replaced_its_lock_gets_the_name_when_the_value_goes() {
    let server = RedisServer::start();
    let mut c = server.conn();
    for (round, removal) in [
        vec!["DEL", "job"],
        vec!["UNLINK", "job"],
        vec!["PEXPIRE", "job", "50"],
    ]
    .iter()
    .enumerate()
    {
        acquire(&mut c, "job", "holder", 30_000).unwrap();
        let waiter = spawn_waiter(&server, "job", "W", 30_000, 0);
        cmd(&mut c, &["SET", "job", "not a lock"]);
        // The name holds a string: nothing to grant yet, W keeps waiting.
        let runs = lock_stat(&mut c, "lock_timer_runs");
        assert!(wait_until(SOON, || lock_stat(&mut c, "lock_timer_runs") > runs));
        assert_eq!(lock_stat(&mut c, "lock_waiting"), 1, "round {round}");
        cmd(&mut c, removal);
        let token = waiter
            .join()
            .unwrap()
            .unwrap_or_else(|| panic!("{removal:?}: W timed out"));
        assert_eq!(held(&mut c, "job").token, token, "{removal:?}");
        assert_eq!(release(&mut c, "job", "W"), Some(0));
    }
}

/// `OBJECT FREQ` of plain keys after each step, on a server with and one
/// without the module: the module must not touch keys that are not locks.
fn freqs_after_host_commands(options: ServerOptions) -> Vec<i64> {
    let server = RedisServer::start_with(options.args([
        "--maxmemory-policy",
        "allkeys-lfu",
        // Every access adds exactly one, and nothing decays: a touch shows.
        "--lfu-log-factor",
        "0",
        "--lfu-decay-time",
        "0",
    ]));
    let mut c = server.conn();
    cmd(&mut c, &["SET", "seed", "v"]);
    let dump: Vec<u8> = redis::cmd("DUMP").arg("seed").query(&mut c).unwrap();
    let freq = |c: &mut Connection, key: &str| -> i64 {
        redis::cmd("OBJECT")
            .arg("FREQ")
            .arg(key)
            .query(c)
            .unwrap_or_else(|e| panic!("OBJECT FREQ {key}: {e}"))
    };
    let mut seen = Vec::new();
    let _: () = redis::cmd("RESTORE")
        .arg("k")
        .arg(0)
        .arg(&dump)
        .arg("FREQ")
        .arg(100)
        .query(&mut c)
        .unwrap();
    seen.push(freq(&mut c, "k"));
    cmd(&mut c, &["RENAME", "k", "k2"]);
    seen.push(freq(&mut c, "k2"));
    cmd(&mut c, &["EXPIRE", "k2", "1000"]);
    seen.push(freq(&mut c, "k2"));
    cmd(&mut c, &["COPY", "k2", "k3"]);
    seen.push(freq(&mut c, "k3"));
    cmd(&mut c, &["MOVE", "k3", "1"]);
    cmd(&mut c, &["SELECT", "1"]);
    seen.push(freq(&mut c, "k3"));
    cmd(&mut c, &["SELECT", "0"]);
    cmd(&mut c, &["DEL", "seed"]);
    seen.push(freq(&mut c, "k2"));
    seen
}

#[test]
fn plain_keys_keep_their_lfu_counters() {
    let with = freqs_after_host_commands(ServerOptions::default());
    let without = freqs_after_host_commands(ServerOptions::default().without_module());
    assert_eq!(with[0], 100, "RESTORE ... FREQ 100 was touched: {with:?}");
    assert_eq!(with, without);
}

#[test]
fn plain_keys_keep_their_idle_time_after_restore() {
    let server = RedisServer::start_with(
        ServerOptions::default().args(["--maxmemory-policy", "allkeys-lru"]),
    );
    let mut c = server.conn();
    cmd(&mut c, &["SET", "seed", "v"]);
    let dump: Vec<u8> = redis::cmd("DUMP").arg("seed").query(&mut c).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("k")
        .arg(0)
        .arg(&dump)
        .arg("IDLETIME")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    let idle: i64 = redis::cmd("OBJECT")
        .arg("IDLETIME")
        .arg("k")
        .query(&mut c)
        .unwrap();
    assert!(
        idle >= 1000,
        "OBJECT IDLETIME {idle} after RESTORE ... IDLETIME 1000"
    );
}

#[test]
fn a_replica_loads_diskless_with_swapdb_and_gets_the_locks() {
    let primary =
        RedisServer::start_with(ServerOptions::default().args(["--repl-diskless-sync", "yes"]));
    let mut p = primary.conn();
    let tokens: Vec<i64> = (0..50)
        .map(|i| acquire(&mut p, &format!("lk{i}"), "o", 600_000).unwrap())
        .collect();
    acquire(&mut p, "short", "o", 1_500).unwrap();
    let replica =
        RedisServer::start_with(ServerOptions::default().args(["--repl-diskless-load", "swapdb"]));
    replica.replicate_from(&primary);
    let log = replica.log();
    assert!(
        !log.contains("Skipping diskless-load"),
        "the module turned diskless loading off:\n{log}"
    );
    assert!(
        log.contains("Loading DB in memory"),
        "the replica did not load from the socket:\n{log}"
    );
    let mut r = replica.conn();
    for (i, token) in tokens.iter().enumerate() {
        assert_eq!(held(&mut r, &format!("lk{i}")).token, *token);
    }
    // The loaded leases are indexed: promoted, the replica ends a short one
    // by itself, and issues tokens above every loaded one.
    replica.promote();
    let mut r = replica.conn();
    acquire(&mut r, "fresh", "o", 600_000).unwrap();
    assert!(held(&mut r, "fresh").token > *tokens.iter().max().unwrap());
    assert!(wait_until(SOON, || !exists(&mut r, "short")));
}

#[test]
fn evicted_locks_are_reported() {
    let server = RedisServer::start_with(ServerOptions::default().args(["--maxmemory", "4mb"]));
    let mut c = server.conn();
    assert_eq!(lock_stat(&mut c, "lock_evictable"), 0);
    cmd(&mut c, &["SELECT", "1"]);
    for i in 0..200 {
        acquire(&mut c, &format!("lk{i}"), "o", 600_000).unwrap();
    }
    cmd(
        &mut c,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    );
    assert_eq!(lock_stat(&mut c, "lock_evictable"), 1);
    assert!(
        wait_until(SOON, || server.log().contains("can evict locks")),
        "no warning in the log"
    );
    // Values in db 0 push the locks in db 1 out.
    cmd(&mut c, &["SELECT", "0"]);
    let big = "x".repeat(20_000);
    for i in 0..400 {
        cmd(&mut c, &["SET", &format!("v{i}"), &big]);
    }
    cmd(&mut c, &["SET", "marker", "1"]);
    // The writer stayed in its database while locks elsewhere were evicted.
    assert_eq!(db_of(&server, "marker", &[0, 1]), Some(0));
    let evicted = lock_stat(&mut c, "lock_evicted");
    assert!(evicted > 0, "no lock was evicted");
    assert_eq!(evicted, 200 - lock_stat(&mut c, "lock_held"));
    // INFO lock agrees with the keyspace (issue #36: Redis 8.6 once
    // counted one lock fewer than were left).
    cmd(&mut c, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    cmd(&mut c, &["SELECT", "1"]);
    let left = (0..200)
        .filter(|i| exists(&mut c, &format!("lk{i}")))
        .count();
    cmd(&mut c, &["SELECT", "0"]);
    assert_eq!(
        lock_stat(&mut c, "lock_held"),
        i64::try_from(left).unwrap(),
        "lock_held against the locks left in the keyspace"
    );
    assert_eq!(lock_stat(&mut c, "lock_evictable"), 0);
}

#[test]
fn copy_of_a_lock_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let token = acquire(&mut c, "lk", "alice", 60_000).unwrap();
    let other = acquire(&mut c, "other", "bob", 60_000).unwrap();
    for args in [
        vec!["COPY", "lk", "copy"],
        vec!["COPY", "lk", "copy", "DB", "1"],
        vec!["COPY", "lk", "other", "REPLACE"],
    ] {
        let err = error_of(&mut c, &args);
        assert!(err.contains("not supported for this module key"), "{err}");
    }
    assert!(!exists(&mut c, "copy"));
    assert_eq!(db_of(&server, "copy", &[0, 1]), None);
    assert_eq!(held(&mut c, "lk").token, token);
    assert_eq!(held(&mut c, "other").token, other);
    assert_eq!(lock_stat(&mut c, "lock_held"), 2);
}

/// `n` locks (one taken, `DUMP`ed and `RESTORE`d under `n` names: the
/// payload carries the lease's absolute end) whose leases end together,
/// `lead` from now; `false` when loading them took longer than `lead`.
fn leases_ending_together(c: &mut Connection, n: usize, lead: std::time::Duration) -> bool {
    let end = std::time::Instant::now() + lead;
    acquire(c, "template", "o", lead.as_millis() as u64).unwrap();
    let payload: Vec<u8> = redis::cmd("DUMP").arg("template").query(c).unwrap();
    cmd(c, &["DEL", "template"]);
    for chunk in (0..n).collect::<Vec<_>>().chunks(5_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("RESTORE")
                .arg(format!("held:{i}"))
                .arg(0)
                .arg(&payload)
                .ignore();
        }
        let _: () = pipe.query(c).unwrap();
    }
    std::time::Instant::now() < end && lock_stat(c, "lock_held") == n as i64
}

/// The latency monitor's events: (name, max ms).
fn latency_events(c: &mut Connection) -> Vec<(String, i64)> {
    let events: Vec<Vec<Value>> = redis::cmd("LATENCY").arg("LATEST").query(c).unwrap();
    events
        .iter()
        .map(|fields| {
            let name: String = redis::from_redis_value_ref(&fields[0]).unwrap();
            let max: i64 = redis::from_redis_value_ref(&fields[3]).unwrap();
            (name, max)
        })
        .collect()
}

/// A timer firing that takes at least `latency-monitor-threshold` ms (here
/// 20,000 leases ending together: each firing works for its 2 ms budget)
/// is a sample of the `lock-timer` event, rounded up; with the monitor off
/// (threshold 0, the default) nothing is sampled, though the module API
/// would take every firing then (its own check is `latency >= threshold`).
/// `CONFIG SET` is followed: the threshold is set to 1 before the server's
/// first lock (read at activation) and to 0 after it (the config event), so
/// that dropping either read fails the test.
#[test]
fn a_long_timer_firing_is_a_latency_monitor_sample_only_while_the_monitor_is_on() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let n = 20_000;
    let mut lead = std::time::Duration::from_secs(2);
    for threshold in [1, 0] {
        cmd(
            &mut c,
            &[
                "CONFIG",
                "SET",
                "latency-monitor-threshold",
                &threshold.to_string(),
            ],
        );
        cmd(&mut c, &["LATENCY", "RESET"]);
        cmd(&mut c, &["FLUSHALL"]);
        let expired = lock_stat(&mut c, "lock_expired");
        // A slow machine loads them more slowly: more lead, and again.
        while !leases_ending_together(&mut c, n, lead) {
            assert!(
                lead < std::time::Duration::from_secs(120),
                "could not load {n} locks"
            );
            cmd(&mut c, &["FLUSHALL"]);
            lead *= 2;
        }
        let runs = lock_stat(&mut c, "lock_timer_runs");
        assert!(wait_until(lead + SOON, || lock_stat(&mut c, "lock_held") == 0));
        assert!(lock_stat(&mut c, "lock_expired") >= expired + n as i64);
        assert!(
            lock_stat(&mut c, "lock_timer_runs") > runs + 5,
            "ended in a few firings"
        );
        // The lease index gives its memory back, a chunk at a time, from
        // the timer.
        assert!(
            wait_until(SOON, || lock_stat(&mut c, "lock_lease_index_bytes")
                <= 64 * 1024),
            "the lease index kept {} bytes",
            lock_stat(&mut c, "lock_lease_index_bytes")
        );
        let events = latency_events(&mut c);
        let timer = events.iter().find(|(name, _)| name == "lock-timer");
        if threshold == 0 {
            assert_eq!(timer, None, "sampled with the monitor off: {events:?}");
        } else {
            let (_, max) = timer.unwrap_or_else(|| panic!("no lock-timer sample: {events:?}"));
            // At least the budget's 2 ms, rounded up to 3.
            assert!(*max >= 3, "{events:?}");
        }
    }
    cmd(&mut c, &["CONFIG", "SET", "latency-monitor-threshold", "0"]);
}

/// Review of 94f0707: the module's own reading of
/// `latency-monitor-threshold` (a `RedisModule_Call` of `CONFIG GET` at the
/// first lock and on every `CONFIG SET`) is the server's business, not the
/// user's: it must not show up as a `CONFIG GET` the user never sent, in
/// `INFO commandstats` or in the `SLOWLOG`, after a `CONFIG SET` of
/// anything (the eviction policy, read on the same event, is read with
/// `RedisModule_GetServerInfo`, which leaves no trace; the module's other
/// call of its own, `LOCK.FENCED`'s `COMMAND INFO`, runs inside a user's
/// `LOCK.FENCED`).
#[test]
fn reading_the_latency_threshold_leaves_no_config_get_in_commandstats_or_slowlog() {
    let server = RedisServer::start();
    let mut c = server.conn();
    cmd(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    cmd(&mut c, &["CONFIG", "SET", "slowlog-max-len", "1000"]);
    cmd(&mut c, &["SLOWLOG", "RESET"]);
    cmd(&mut c, &["CONFIG", "RESETSTAT"]);
    // The first lock (activation), then a CONFIG SET of something else and
    // of the threshold itself (the config event).
    acquire(&mut c, "first", "o", 60_000).unwrap();
    cmd(&mut c, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    cmd(&mut c, &["CONFIG", "SET", "latency-monitor-threshold", "1"]);
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    let slowlog: Vec<Vec<Value>> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    let logged: Vec<Vec<String>> = slowlog
        .iter()
        .filter_map(|entry| redis::from_redis_value_ref::<Vec<String>>(entry.get(3)?).ok())
        .collect();
    let config_gets: Vec<&Vec<String>> = logged
        .iter()
        .filter(|args| {
            args.len() >= 2
                && args[0].eq_ignore_ascii_case("CONFIG")
                && args[1].eq_ignore_ascii_case("GET")
        })
        .collect();
    assert!(
        !stats.contains("cmdstat_config|get"),
        "a CONFIG GET nobody sent in INFO commandstats:\n{stats}"
    );
    assert!(
        config_gets.is_empty(),
        "a CONFIG GET nobody sent in the SLOWLOG: {config_gets:?}"
    );
}

/// `LOCK.DEBUG LEASE-INDEX`: (heap items, live entries, whole rebuilds).
fn lease_index(c: &mut Connection) -> (i64, i64, i64) {
    let reply: Vec<Value> = redis::cmd("LOCK.DEBUG")
        .arg("LEASE-INDEX")
        .query(c)
        .unwrap();
    let field = |name: &str| {
        let at = reply
            .iter()
            .position(|v| redis::from_redis_value_ref::<String>(v).ok().as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {reply:?}"));
        redis::from_redis_value_ref::<i64>(&reply[at + 1]).unwrap()
    };
    (field("items"), field("live"), field("rebuilds"))
}

/// Adds `LOCK.ACQUIRE name o 3600000` (an hour's lease) to `pipe`.
fn hold_for_an_hour(pipe: &mut redis::Pipeline, name: &str) {
    pipe.cmd("LOCK.ACQUIRE")
        .arg(name)
        .arg("o")
        .arg(3_600_000)
        .ignore();
}

/// Adds `LOCK.RELEASE name o` to `pipe`.
fn release_in(pipe: &mut redis::Pipeline, name: &str) {
    pipe.cmd("LOCK.RELEASE").arg(name).arg("o").ignore();
}

/// Releases of long leases leave a released lock's item in the lease
/// index's heap (no lease ends, so none surfaces at the top). Once they
/// outnumber half the live entries, the timer sweeps them out in steps of
/// bounded work; the heap is never rebuilt whole (an O(n) stall inside one
/// release: ~22 ms at a million leases). Then acquisitions and releases
/// together. Fails if a release that starts the sweep does not arm the
/// timer: the next lease ends in an hour, and the stale items pile up.
#[test]
fn released_leases_are_swept_from_the_index_in_steps_never_rebuilt_whole() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let held = 5_000;
    let acquire = |pipe: &mut redis::Pipeline, i: i64| hold_for_an_hour(pipe, &format!("long:{i}"));
    let release = |pipe: &mut redis::Pipeline, i: i64| release_in(pipe, &format!("long:{i}"));
    let mut pipe = redis::pipe();
    for i in 0..held {
        acquire(&mut pipe, i);
    }
    let _: () = pipe.query(&mut c).unwrap();
    assert_eq!(lease_index(&mut c), (held, held, 0));
    // Rounds of 100 releases (the rebuild's bound, 2 × live + 1024 items,
    // is 660 releases past where the sweep starts), then rounds of 500
    // releases and 500 new locks (2,500 pairs apart). After each round
    // the sweep, if due, is done before the next (the bound below holds
    // only once stale items were removed: 5,000 items for 2,600 locks in
    // round 23 without the sweep).
    let (mut first, mut live) = (0, held);
    for round in 0..60 {
        let mut pipe = redis::pipe();
        let (releases, acquires) = if round < 30 { (100, 0) } else { (500, 500) };
        for _ in 0..releases {
            release(&mut pipe, first);
            first += 1;
        }
        for i in 0..acquires {
            acquire(&mut pipe, first + live - releases + i);
        }
        live += acquires - releases;
        let _: () = pipe.query(&mut c).unwrap();
        let swept = wait_until(SOON, || {
            let (items, _, _) = lease_index(&mut c);
            items <= live + live / 2 + 1024
        });
        assert!(
            swept,
            "round {round}: {:?} for {live} locks",
            lease_index(&mut c)
        );
    }
    let (items, now_live, rebuilds) = lease_index(&mut c);
    assert_eq!(now_live, live);
    assert_eq!(lock_stat(&mut c, "lock_held"), live);
    assert_eq!(rebuilds, 0, "the heap was rebuilt whole ({items} items)");
    // Without the sweep (and without a rebuild) the heap would hold every
    // item ever filed: the first locks' and every new lock's.
    assert!(items < held + 15_000 / 2, "{items} items");
}

/// Leases that shrank (`LOCK.EXTEND` to a shorter TTL): at 643c471 each
/// kept two items in the lease index, both live, that no sweep can remove
/// yet that count as heap items, so one release made the heap look due a
/// sweep forever, and the timer fired every millisecond, spending its
/// whole 2 ms budget each time, until those leases end (half an hour
/// here), on an otherwise idle server. Now a shrunk lease is filed anew
/// (its old item stale, swept, and every item beyond the live entries is
/// one a sweep can remove): the sweep ends, the timer goes idle, nothing
/// is rebuilt whole.
#[test]
fn a_sweep_over_shrunk_leases_ends_and_the_timer_goes_idle() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let held = 3_000;
    let mut pipe = redis::pipe();
    for i in 0..held {
        hold_for_an_hour(&mut pipe, &format!("shrunk:{i}"));
    }
    for i in 0..held {
        pipe.cmd("LOCK.EXTEND")
            .arg(format!("shrunk:{i}"))
            .arg("o")
            .arg(1_800_000)
            .ignore();
    }
    let _: () = pipe.query(&mut c).unwrap();
    let (items, live, rebuilds) = lease_index(&mut c);
    assert_eq!((live, rebuilds), (held, 0), "{items} items");
    // One release: 6,000 items for 2,999 live entries look due a sweep;
    // the stale items go (the release's, and the shrunk leases' old ones).
    assert_eq!(release(&mut c, "shrunk:0", "o"), Some(0));
    assert!(
        wait_until(SOON, || lease_index(&mut c).0 <= 2 * held - 2),
        "{:?}",
        lease_index(&mut c)
    );
    // Half a second of an idle server: the next deadline is half an hour
    // away, so the timer does not fire at all (a sweep that never ends
    // fires it every millisecond: hundreds of times).
    let before = lock_stat(&mut c, "lock_timer_runs");
    let start = std::time::Instant::now();
    let spun = wait_until(std::time::Duration::from_millis(500), || {
        lock_stat(&mut c, "lock_timer_runs") > before + 10
    });
    assert!(
        !spun,
        "the timer keeps firing: {} runs in {:?}",
        lock_stat(&mut c, "lock_timer_runs") - before,
        start.elapsed()
    );
    assert!(start.elapsed() >= std::time::Duration::from_millis(500));
    let (items, live, rebuilds) = lease_index(&mut c);
    assert_eq!((live, rebuilds), (held - 1, 0), "{items} items");
    assert!(items <= 2 * held - 2, "{items} items");
    // A thousand more releases: with a second live item per shrunk lease,
    // stale items on top of them reach the whole rebuild's bound (2 x live
    // + 1,024 items) within ~500 releases, and a release rebuilds the heap
    // (at a million such leases: one release of 180 ms). Filed anew, the
    // shrunk leases leave only stale items, which the sweep removes.
    let mut pipe = redis::pipe();
    for i in 1..=1_000 {
        release_in(&mut pipe, &format!("shrunk:{i}"));
    }
    let _: () = pipe.query(&mut c).unwrap();
    let (items, live, rebuilds) = lease_index(&mut c);
    assert_eq!((live, rebuilds), (held - 1_001, 0), "{items} items");
}

/// Locks released in the order they were taken leave their items stale at
/// the top of the lease index. Arming the timer drops at most 256 of them
/// (`ARM_POPS`), not all: at 600,000 such releases, popping them all took
/// 58 ms inside one command. (The rest wait for the timer, which fires at
/// the stale top's time: an hour away here.) A new lock whose lease ends
/// after the armed firing (the first lock armed it a minute ahead, the
/// longest a firing is armed) does not arm it at all; a rearm (the debug
/// clock-rate command's) arms it in full.
#[test]
fn arming_the_timer_drops_a_bounded_number_of_stale_items() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let (held, released) = (5_000, 2_000);
    let mut pipe = redis::pipe();
    for i in 0..held {
        hold_for_an_hour(&mut pipe, &format!("ordered:{i}"));
    }
    let _: () = pipe.query(&mut c).unwrap();
    // (Items of equal deadlines order by slot: the first locks' items,
    // in the lowest slots, are the index's top.)
    let mut pipe = redis::pipe();
    for i in 0..released {
        release_in(&mut pipe, &format!("ordered:{i}"));
    }
    let _: () = pipe.query(&mut c).unwrap();
    // (2,000 stale items for 3,000 locks: below the sweep's start.)
    assert_eq!(lease_index(&mut c), (held, held - released, 0));
    acquire(&mut c, "ordered:new", "o", 3_600_000).unwrap();
    assert_eq!(
        lease_index(&mut c),
        (held + 1, held - released + 1, 0),
        "a lock ending after the armed firing armed the timer"
    );
    let _: () = redis::cmd("LOCK.DEBUG")
        .arg("MONOTONIC-RATE")
        .arg(0)
        .query(&mut c)
        .unwrap();
    let (items, live, _) = lease_index(&mut c);
    assert_eq!(live, held - released + 1);
    assert_eq!(
        items,
        held + 1 - 256,
        "arming dropped {} items",
        held + 1 - items
    );
}

/// The last lease released from a big lease index (taken in order, so in
/// the slab's top slot) leaves more free slots at the slab's top than one
/// release gives back: the timer's trims give back the rest. The release
/// wakes them. Without the wake they waited for the firing armed before,
/// for the last lease's end (an hour here; a firing is armed at most a
/// minute ahead, so about a minute after the sweep's last firing), and the
/// index kept its memory meanwhile (about 0.8 MB here, tens of MB after a
/// million leases).
#[test]
fn the_last_release_gives_the_lease_index_memory_back() {
    let server = RedisServer::start();
    let mut c = server.conn();
    // Three chunks of slots (16,384 each), one lock a slot, in order.
    let n = 3 * 16_384;
    let mut pipe = redis::pipe();
    for i in 0..n {
        hold_for_an_hour(&mut pipe, &format!("spike:{i}"));
    }
    let _: () = pipe.query(&mut c).unwrap();
    let mut pipe = redis::pipe();
    for i in 0..n - 1 {
        release_in(&mut pipe, &format!("spike:{i}"));
    }
    let _: () = pipe.query(&mut c).unwrap();
    // The sweep the releases started is over and the timer idle (a firing
    // every millisecond while it runs). (Were it still running, the last
    // release below would find it running: the test could pass without
    // the wake, never fail with it.)
    let idle = wait_until(SOON, || {
        let before = lock_stat(&mut c, "lock_timer_runs");
        std::thread::sleep(std::time::Duration::from_millis(100));
        lock_stat(&mut c, "lock_timer_runs") == before
    });
    assert!(idle, "the timer never went idle");
    assert_eq!(lease_index(&mut c).1, 1);
    let kept = lock_stat(&mut c, "lock_lease_index_bytes");
    assert!(kept > 512 * 1024, "{kept} bytes for a slab of {n} slots");
    let mut pipe = redis::pipe();
    release_in(&mut pipe, &format!("spike:{}", n - 1));
    let _: () = pipe.query(&mut c).unwrap();
    assert_eq!(lease_index(&mut c).1, 0);
    assert!(
        wait_until(SOON, || lock_stat(&mut c, "lock_lease_index_bytes")
            <= 64 * 1024),
        "the lease index kept {} bytes",
        lock_stat(&mut c, "lock_lease_index_bytes")
    );
}
