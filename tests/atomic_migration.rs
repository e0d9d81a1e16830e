//! Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) on a real
//! 3-master cluster: the source streams a snapshot of the slot in AOF form
//! (our `LOCK.APPLY` effects) and then its writes, pauses them for the
//! handover, and deletes the slot's keys once the target owns it.
//!
//! Where the server has no `CLUSTER MIGRATESLOTS` (Redis 7.0, Valkey 8.1,
//! Redis 8.6: asked of the server, `COMMAND INFO CLUSTER`), the migration
//! tests pass with a note; the module's declaration is checked everywhere.
//! Redis 8.4+'s own `CLUSTER MIGRATION IMPORT` has a test of its own, run
//! where the server has it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};
use testkit::cluster::{node_id, RedisCluster};

const NOT_SERVED: &str = "TRYAGAIN the lock's hash slot is being migrated or is served by another node: retry the command (it is redirected to the node that serves the key)";

/// Whether `server` has `CLUSTER MIGRATESLOTS`: its `COMMAND INFO CLUSTER`
/// lists the subcommand.
fn has_migrateslots(server: &RedisServer) -> bool {
    let reply: Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("CLUSTER")
        .query(&mut server.conn())
        .unwrap();
    let mut names = Vec::new();
    strings(&reply, &mut names);
    assert!(
        names.iter().any(|n| n == "cluster|info"),
        "COMMAND INFO CLUSTER lists no subcommands: {reply:?}"
    );
    names.iter().any(|n| n == "cluster|migrateslots")
}

/// A 3-master cluster, or `None` with a note where the server cannot
/// migrate slots atomically.
fn cluster_or_skip(test: &str) -> Option<RedisCluster> {
    if !has_migrateslots(&RedisServer::start()) {
        println!("{test}: skipped: this server has no CLUSTER MIGRATESLOTS");
        return None;
    }
    Some(RedisCluster::start(3, 0))
}

/// The master that serves `tag`'s slot and another master: (source,
/// target, slot).
fn source_and_target<'a>(
    cluster: &'a RedisCluster,
    tag: &str,
) -> (&'a RedisServer, &'a RedisServer, i64) {
    let slot = cluster.key_slot(tag);
    let source = cluster.master_of(tag);
    let target = cluster.nodes[..3]
        .iter()
        .find(|n| n.port() != source.port())
        .unwrap();
    (source, target, slot)
}

/// `CLUSTER MIGRATESLOTS SLOTSRANGE slot slot NODE <target>` on `source`.
fn start_migration(source: &RedisServer, target: &RedisServer, slot: i64) {
    let reply: redis::RedisResult<String> = redis::cmd("CLUSTER")
        .arg("MIGRATESLOTS")
        .arg("SLOTSRANGE")
        .arg(slot)
        .arg(slot)
        .arg("NODE")
        .arg(node_id(target))
        .query(&mut source.conn());
    match reply {
        Ok(ok) => assert_eq!(ok, "OK"),
        Err(err) => panic!("CLUSTER MIGRATESLOTS refused: {}", error_line(&err)),
    }
}

/// The state of the newest slot migration job `node` knows.
fn job_state(node: &RedisServer) -> String {
    let jobs: Value = redis::cmd("CLUSTER")
        .arg("GETSLOTMIGRATIONS")
        .query(&mut node.conn())
        .unwrap();
    let Value::Array(jobs) = jobs else {
        panic!("{jobs:?}")
    };
    let Some(newest) = jobs.into_iter().next() else {
        return String::new();
    };
    let pairs = info_pairs(newest).unwrap();
    match pairs
        .into_iter()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v)
    {
        Some(Value::BulkString(b)) => String::from_utf8(b).unwrap(),
        other => panic!("no state: {other:?}"),
    }
}

fn wait_job_state(node: &RedisServer, state: &str) {
    let mut last = String::new();
    let reached = wait_until(Duration::from_secs(30), || {
        last = job_state(node);
        last == state
    });
    assert!(
        reached,
        "the migration job on {} never reached {state} (last: {last})",
        node.port()
    );
}

/// Waits until the migration of `slot` succeeded and both nodes see the
/// target serving it.
fn wait_migrated(source: &RedisServer, target: &RedisServer, slot: i64) {
    wait_job_state(source, "success");
    let moved = wait_until(Duration::from_secs(30), || {
        RedisCluster::owner_port(source, slot) == target.port()
            && RedisCluster::owner_port(target, slot) == target.port()
    });
    assert!(moved, "slot {slot} never showed as the target's");
}

/// `DEBUG SLOTMIGRATION <knob> <0|1>`: holds a migration before its pause
/// (`PREVENT-PAUSE`, on the source) or before the target takes the slot
/// (`PREVENT-FAILOVER`, on the target).
fn debug_slot_migration(node: &RedisServer, knob: &str, on: bool) {
    let _: () = redis::cmd("DEBUG")
        .arg("SLOTMIGRATION")
        .arg(knob)
        .arg(i32::from(on))
        .query(&mut node.conn())
        .unwrap();
}

/// `INFO lock`'s books: (held, holders, lease_index, waiting).
fn books(conn: &mut Connection) -> (i64, i64, i64, i64) {
    (
        lock_stat(conn, "lock_held"),
        lock_stat(conn, "lock_holders"),
        lock_stat(conn, "lock_lease_index"),
        lock_stat(conn, "lock_waiting"),
    )
}

/// Waits until `node`'s books read `want`.
fn wait_books(node: &RedisServer, want: (i64, i64, i64, i64), what: &str) {
    let mut c = node.conn();
    let mut last = (0, 0, 0, 0);
    let agreed = wait_until(SOON, || {
        last = books(&mut c);
        last == want
    });
    assert!(
        agreed,
        "{what}: INFO lock (held, holders, lease_index, waiting) on {} is {last:?}, not {want:?}",
        node.port()
    );
}

/// `LOCK.HOLDERS key`: (owner, holds, token, pttl) each, in grant order.
fn holders(conn: &mut Connection, key: &str) -> Vec<(String, i64, i64, i64)> {
    let reply: Value = redis::cmd("LOCK.HOLDERS").arg(key).query(conn).unwrap();
    let Value::Array(items) = reply else {
        panic!("LOCK.HOLDERS {key}: {reply:?}")
    };
    items
        .into_iter()
        .map(|item| {
            let pairs = info_pairs(item).unwrap();
            let get = |field: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| k == field)
                    .map(|(_, v)| v.clone())
                    .unwrap()
            };
            let int = |field: &str| match get(field) {
                Value::Int(n) => n,
                other => panic!("{field}: {other:?}"),
            };
            let owner = match get("owner") {
                Value::BulkString(b) => String::from_utf8(b).unwrap(),
                other => panic!("owner: {other:?}"),
            };
            (owner, int("holds"), int("token"), int("pttl"))
        })
        .collect()
}

/// The reply of a waiter that must be answered within [`SOON`] (a waiter
/// left hanging fails here, not at its timeout).
fn answered(
    waiter: JoinHandle<Result<Option<i64>, String>>,
    who: &str,
) -> Result<Option<i64>, String> {
    assert!(
        wait_until(SOON, || waiter.is_finished()),
        "{who} was never answered"
    );
    waiter.join().unwrap()
}

fn int(conn: &mut Connection, args: &[&str]) -> i64 {
    match run(conn, args) {
        Ok(Value::Int(n)) => n,
        other => panic!("{args:?}: {other:?}"),
    }
}

#[test]
fn the_module_declares_atomic_slot_migration_only_where_the_server_has_it() {
    // Every server loads the module; only one with CLUSTER MIGRATESLOTS is
    // told that the module handles it (another may give the bit another
    // meaning).
    let server = RedisServer::start();
    // One `module:` line per module (the map of `info_section` keeps one).
    let modules: String = redis::cmd("INFO")
        .arg("modules")
        .query(&mut server.conn())
        .unwrap();
    let lock = modules
        .lines()
        .find(|line| line.starts_with("module:name=lock,"))
        .unwrap_or_else(|| panic!("the module is not loaded: {modules}"))
        .to_string();
    let declared = lock.contains("handle-atomic-slot-migration");
    if has_migrateslots(&server) {
        assert!(
            declared,
            "not declared on a server that migrates slots: {lock}"
        );
    } else {
        // Servers before Valkey 9 list no such option at all.
        assert!(!declared, "{lock}");
        println!("no CLUSTER MIGRATESLOTS here: the module loads ({lock})");
    }
}

#[test]
fn held_locks_of_every_kind_arrive_with_holders_holds_tokens_and_leases() {
    let Some(cluster) = cluster_or_skip("held_locks_of_every_kind_arrive") else {
        return;
    };
    let (source, target, slot) = source_and_target(&cluster, "{job}");
    let (ex, sh, sem) = ("{job}ex", "{job}sh", "{job}sem");
    let mut s = source.conn();
    // An exclusive lock held twice, its token raised far above the target's
    // counter; a read lock with two readers; a semaphore with two of three
    // permits taken.
    acquire(&mut s, ex, "me", 60_000).unwrap();
    acquire(&mut s, ex, "me", 60_000).unwrap();
    let high = lock_stat(&mut s, "lock_last_token") + 1_000_000_000_000_000;
    assert!(high < MAX_ATLEAST);
    let top = fence(&mut s, ex, "me", Some(high)).unwrap();
    assert!(top >= high);
    for reader in ["r1", "r2"] {
        int(&mut s, &["LOCK.ACQUIRE", sh, reader, "60000", "SHARED"]);
    }
    for permit in ["p1", "p2"] {
        int(
            &mut s,
            &["LOCK.ACQUIRE", sem, permit, "60000", "SHARED", "LIMIT", "3"],
        );
    }
    let before: Vec<_> = [ex, sh, sem].iter().map(|k| holders(&mut s, k)).collect();
    assert_eq!(books(&mut s), (3, 5, 5, 0));

    start_migration(source, target, slot);
    wait_migrated(source, target, slot);

    let mut t = target.conn();
    for (key, was) in [ex, sh, sem].iter().zip(&before) {
        let now = holders(&mut t, key);
        let identity = |h: &[(String, i64, i64, i64)]| {
            h.iter()
                .map(|(o, holds, token, _)| (o.clone(), *holds, *token))
                .collect::<Vec<_>>()
        };
        assert_eq!(identity(&now), identity(was), "{key} on the target");
        for ((_, _, _, pttl), (_, _, _, pttl_before)) in now.iter().zip(was) {
            assert!(
                *pttl > 0 && pttl <= pttl_before && *pttl > pttl_before - 30_000,
                "{key}: lease {pttl} ms left on the target, {pttl_before} ms before"
            );
        }
    }
    // Every holder has its lease-index entry on the target; the source
    // keeps none.
    assert_eq!(books(&mut t), (3, 5, 5, 0));
    wait_books(source, (0, 0, 0, 0), "the source after the move");

    // The first grant on the target is above every token that arrived.
    let fresh = acquire(&mut t, "{job}fresh", "x", 60_000).unwrap();
    assert!(
        fresh > top,
        "the target granted {fresh}, not above the arrived token {top}"
    );
    // The modes and the limit came along.
    assert_eq!(acquire(&mut t, ex, "other", 60_000), None);
    assert_eq!(
        acquire(&mut t, sh, "writer", 60_000),
        None,
        "a writer got the read lock"
    );
    let third = int(
        &mut t,
        &["LOCK.ACQUIRE", sem, "p3", "60000", "SHARED", "LIMIT", "3"],
    );
    assert!(third > fresh);
    assert_eq!(
        run(
            &mut t,
            &["LOCK.ACQUIRE", sem, "p4", "60000", "SHARED", "LIMIT", "3"]
        )
        .unwrap(),
        Value::Nil,
        "the semaphore's limit of 3 did not arrive"
    );

    // The lease ends on the target, and its waiter there is served then.
    let waiter = spawn_waiter_or_error(target, ex, "next", 60_000);
    assert_eq!(extend(&mut t, ex, "me", 1), 1);
    let granted = answered(waiter, "the waiter on the target")
        .unwrap()
        .expect("a token");
    assert!(granted > third, "{granted} is not above {third}");
    for reader in ["r1", "r2"] {
        assert_eq!(extend(&mut t, sh, reader, 1), 1);
    }
    assert!(wait_until(SOON, || !exists(&mut t, sh)), "{sh} never ended");
    // ex (next), sem (p1, p2, p3) and fresh.
    wait_books(target, (3, 5, 5, 0), "the target after the leases ended");
}

#[test]
fn waiters_on_the_source_are_told_to_retry_when_the_slot_leaves() {
    let Some(cluster) = cluster_or_skip("waiters_on_the_source_are_told_to_retry") else {
        return;
    };
    let (source, target, slot) = source_and_target(&cluster, "{job}");
    let (ex, sem) = ("{job}ex", "{job}sem");
    let mut s = source.conn();
    let token = acquire(&mut s, ex, "holder", 60_000).unwrap();
    int(
        &mut s,
        &["LOCK.ACQUIRE", sem, "p1", "60000", "SHARED", "LIMIT", "1"],
    );
    let waiters = [
        ("w1", spawn_waiter_or_error(source, ex, "w1", 60_000)),
        ("w2", spawn_waiter_or_error(source, ex, "w2", 60_000)),
    ];
    let mut s2 = source.conn();
    let before = waiters_queued(&mut s2);
    let permit = std::thread::spawn({
        let mut c = source.conn();
        move || {
            redis::cmd("LOCK.ACQUIRE")
                .arg("{job}sem")
                .arg("p2")
                .arg(60_000)
                .arg("SHARED")
                .arg("LIMIT")
                .arg(1)
                .arg("WAIT")
                .arg(0)
                .query::<Option<i64>>(&mut c)
                .map_err(|e| error_line(&e))
        }
    });
    assert!(wait_until(SOON, || waiters_queued(&mut s2) == before + 1));
    assert_eq!(books(&mut s), (2, 2, 2, 3));

    start_migration(source, target, slot);
    wait_migrated(source, target, slot);

    // Each waiter is told to retry as soon as the slot has left, never
    // granted there.
    for (who, waiter) in waiters {
        assert_eq!(answered(waiter, who), Err(NOT_SERVED.to_string()), "{who}");
    }
    assert_eq!(answered(permit, "p2"), Err(NOT_SERVED.to_string()), "p2");
    assert_eq!(lock_stat(&mut s, "lock_wait_grants"), 0);
    wait_books(source, (0, 0, 0, 0), "the source after the move");

    // Retried, the command is redirected to the target, where it waits for
    // the holder and is served when the lease ends there.
    let err = error_of(&mut s, &["LOCK.ACQUIRE", ex, "w1", "60000"]);
    assert!(
        err.starts_with(&format!("MOVED {slot} ")) && err.ends_with(&format!(":{}", target.port())),
        "{err}"
    );
    let mut t = target.conn();
    let retried = spawn_waiter_or_error(target, ex, "w1", 60_000);
    assert_eq!(extend(&mut t, ex, "holder", 1), 1);
    let granted = answered(retried, "w1 on the target").unwrap().unwrap();
    assert!(granted > token, "{granted} is not above {token}");
}

/// `INFO lock`'s `lock_waiting`.
fn waiters_queued(conn: &mut Connection) -> i64 {
    lock_stat(conn, "lock_waiting")
}

#[test]
fn a_lease_that_ends_during_the_handover_pause_ends_on_the_target() {
    let Some(cluster) = cluster_or_skip("a_lease_that_ends_during_the_handover_pause") else {
        return;
    };
    let (source, target, slot) = source_and_target(&cluster, "{job}");
    let key = "{job}ex";
    let mut s = source.conn();
    // The source's writes stay paused for up to 2 × 60 s while the target
    // is held back from taking the slot.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-manual-failover-timeout")
        .arg(60_000)
        .query(&mut s)
        .unwrap();
    let token = acquire(&mut s, key, "holder", 60_000).unwrap();
    let waiter = spawn_waiter_or_error(source, key, "waiter", 60_000);

    debug_slot_migration(source, "PREVENT-PAUSE", true);
    debug_slot_migration(target, "PREVENT-FAILOVER", true);
    start_migration(source, target, slot);
    wait_job_state(source, "waiting-to-pause");
    // The lock is on the target now; its lease is made to end within the
    // pause that follows.
    wait_books(target, (1, 1, 1, 0), "the target before the pause");
    // Long enough that no loaded machine reaches the pause after it ends
    // (reaching it takes milliseconds), short next to the 60 s pause.
    const LEASE_MS: u64 = 15_000;
    assert_eq!(extend(&mut s, key, "holder", LEASE_MS), 1);
    let shortened = Instant::now();
    debug_slot_migration(source, "PREVENT-PAUSE", false);
    wait_job_state(source, "failover-granted");
    assert!(
        shortened.elapsed() < Duration::from_millis(LEASE_MS),
        "the source paused only after the lease ended: nothing was tested (a loaded machine?)"
    );
    // The lease ends while the source is paused: the source ends nothing
    // and grants nothing, and the target, which does not own the slot yet,
    // does not end it either.
    let mut t = target.conn();
    assert!(
        wait_until(Duration::from_millis(LEASE_MS) + SOON, || lock_stat(
            &mut t,
            "lock_lease_index"
        ) == 0),
        "the target's timer never reached the lease's end"
    );
    assert_eq!(lock_stat(&mut t, "lock_held"), 1);
    assert_eq!(lock_stat(&mut s, "lock_waiting"), 1);
    assert_eq!(lock_stat(&mut s, "lock_wait_grants"), 0);
    assert_eq!(job_state(source), "failover-granted");

    debug_slot_migration(target, "PREVENT-FAILOVER", false);
    wait_migrated(source, target, slot);

    // The waiter on the source is told to retry, never granted there; the
    // lease that ended in the pause ends on the target.
    assert_eq!(answered(waiter, "the waiter"), Err(NOT_SERVED.to_string()));
    assert_eq!(lock_stat(&mut s, "lock_wait_grants"), 0);
    wait_books(source, (0, 0, 0, 0), "the source after the move");
    assert!(
        wait_until(SOON, || !exists(&mut t, key)),
        "the lock whose lease ended during the handover was never ended on the target: {:?}",
        books(&mut t)
    );
    wait_books(target, (0, 0, 0, 0), "the target after the lease ended");
    assert_eq!(lock_stat(&mut t, "lock_expired"), 1);
    let retried = acquire(&mut t, key, "waiter", 60_000).unwrap();
    assert!(retried > token, "{retried} is not above {token}");
}

#[test]
fn an_aborted_import_leaves_nothing_counted_on_the_target() {
    valkey_failed_import(ImportFailure::Cancelled);
}

#[test]
fn a_valkey_import_whose_target_is_killed_leaves_the_locks_working_on_the_source() {
    valkey_failed_import(ImportFailure::TargetKilled);
}

#[test]
fn flushall_on_a_valkey_target_during_an_import_leaves_the_locks_working_on_the_source() {
    valkey_failed_import(ImportFailure::Flushed);
}

/// Valkey 9's `CLUSTER MIGRATESLOTS` failing after the snapshot's locks and
/// some of the stream reached the target (`CLUSTER CANCELSLOTMIGRATIONS` on
/// the source, the target killed, or `FLUSHALL` on the target): the target
/// keeps no books for them, and the source still owns the slot, the locks
/// and the waiter, which work.
fn valkey_failed_import(how: ImportFailure) {
    let Some(mut cluster) = cluster_or_skip(&format!("valkey_failed_import ({how:?})")) else {
        return;
    };
    let (source, target, slot) = source_and_target(&cluster, "{job}");
    let (source_port, target_port) = (source.port(), target.port());
    let (ex, sh) = ("{job}ex", "{job}sh");
    let mut s = source.conn();
    let token = acquire(&mut s, ex, "holder", 60_000).unwrap();
    int(&mut s, &["LOCK.ACQUIRE", sh, "r1", "60000", "SHARED"]);
    let waiter = spawn_waiter_or_error(source, ex, "waiter", 60_000);

    // Held before its pause: the snapshot is on the target, and what the
    // source changes streams on.
    debug_slot_migration(source, "PREVENT-PAUSE", true);
    start_migration(source, target, slot);
    wait_job_state(source, "waiting-to-pause");
    int(&mut s, &["LOCK.ACQUIRE", sh, "r2", "60000", "SHARED"]);
    wait_books(target, (2, 3, 3, 0), "the target while importing");

    match how {
        ImportFailure::Cancelled => {
            let _: () = redis::cmd("CLUSTER")
                .arg("CANCELSLOTMIGRATIONS")
                .query(&mut s)
                .unwrap();
        }
        ImportFailure::Flushed => {
            let _: () = redis::cmd("FLUSHALL").query(&mut target.conn()).unwrap();
        }
        ImportFailure::TargetKilled => cluster.node_mut(target_port).kill9(),
    }
    let source = cluster.node(source_port);
    let mut last = String::new();
    let ended = wait_until(Duration::from_secs(60), || {
        last = job_state(source);
        last == "cancelled" || last == "failed"
    });
    assert!(
        ended,
        "the source's migration job did not end ({how:?}; last: {last})"
    );
    debug_slot_migration(source, "PREVENT-PAUSE", false);
    if !matches!(how, ImportFailure::TargetKilled) {
        // The target drops what it had imported, and its books say so.
        let target = cluster.node(target_port);
        wait_books(target, (0, 0, 0, 0), "the target after the failed import");
        let mut t = target.conn();
        assert!(
            wait_until(SOON, || dbsize(&mut t) == 0),
            "the imported keys stayed on the target"
        );
    }

    // The holder's lease still renews there.
    assert_eq!(extend(&mut source.conn(), ex, "holder", 60_000), 1);
    the_locks_still_work_on_the_source(source, slot, ex, token, waiter);
}

/// After a failed import: the source still owns the slot, the locks and
/// the waiter, and they work: the holder's token, a rival refused, a
/// release that serves the waiter.
fn the_locks_still_work_on_the_source(
    source: &RedisServer,
    slot: i64,
    ex: &str,
    token: i64,
    waiter: std::thread::JoinHandle<Result<Option<i64>, String>>,
) {
    assert_eq!(RedisCluster::owner_port(source, slot), source.port());
    let mut s = source.conn();
    assert_eq!(books(&mut s), (2, 3, 3, 1));
    assert_eq!(held(&mut s, ex).token, token);
    assert_eq!(acquire(&mut s, ex, "rival", 60_000), None);
    assert_eq!(release(&mut s, ex, "holder"), Some(0));
    let granted = answered(waiter, "the waiter").unwrap().unwrap();
    assert!(granted > token);
    wait_books(source, (2, 3, 3, 0), "the source after the hand-off");
}

/// Whether `server` has Redis 8.4+'s `CLUSTER MIGRATION`.
fn has_redis_migration(server: &RedisServer) -> bool {
    let reply: Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("CLUSTER")
        .query(&mut server.conn())
        .unwrap();
    let mut names = Vec::new();
    strings(&reply, &mut names);
    names.iter().any(|n| n == "cluster|migration")
}

/// The state of the `CLUSTER MIGRATION` task `id` on `node`.
fn task_state(node: &RedisServer, id: &str) -> String {
    let tasks: Value = redis::cmd("CLUSTER")
        .arg("MIGRATION")
        .arg("STATUS")
        .arg("ID")
        .arg(id)
        .query(&mut node.conn())
        .unwrap();
    let task = match tasks {
        Value::Array(tasks) => tasks.into_iter().next(),
        Value::Nil => None,
        other => Some(other),
    };
    let Some(task) = task else {
        return String::new();
    };
    match info_pairs(task)
        .unwrap()
        .into_iter()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v)
    {
        Some(Value::BulkString(b)) => String::from_utf8(b).unwrap(),
        other => panic!("no state: {other:?}"),
    }
}

#[test]
fn redis_cluster_migration_moves_locks_indexed_and_redirects_waiters() {
    if !has_redis_migration(&RedisServer::start()) {
        println!(
            "redis_cluster_migration: skipped: this server has no CLUSTER MIGRATION (Redis 8.4+)"
        );
        return;
    }
    let cluster = RedisCluster::start(3, 0);
    let (source, target, slot) = source_and_target(&cluster, "{job}");
    let (ex, sh, sem) = ("{job}ex", "{job}sh", "{job}sem");
    let mut s = source.conn();
    acquire(&mut s, ex, "holder", 60_000).unwrap();
    let high = lock_stat(&mut s, "lock_last_token") + 1_000_000_000_000_000;
    let top = fence(&mut s, ex, "holder", Some(high)).unwrap();
    for reader in ["r1", "r2"] {
        int(&mut s, &["LOCK.ACQUIRE", sh, reader, "60000", "SHARED"]);
    }
    for permit in ["p1", "p2"] {
        int(
            &mut s,
            &["LOCK.ACQUIRE", sem, permit, "60000", "SHARED", "LIMIT", "3"],
        );
    }
    let before: Vec<_> = [ex, sh, sem].iter().map(|k| holders(&mut s, k)).collect();
    let waiter = spawn_waiter_or_error(source, ex, "waiter", 60_000);
    assert_eq!(books(&mut s), (3, 5, 5, 1));

    // Redis's migration is started on the target, and held before its
    // handoff (a debug fail point on the source) until the snapshot's locks
    // are on the target, not yet visible there, and its sweep has had the
    // time to pass over them.
    let failpoint = |channel: &str, state: &str| {
        let _: () = redis::cmd("DEBUG")
            .arg("ASM-FAILPOINT")
            .arg(channel)
            .arg(state)
            .query(&mut source.conn())
            .unwrap();
    };
    failpoint("migrate-main-channel", "handoff-prep");
    let id: String = redis::cmd("CLUSTER")
        .arg("MIGRATION")
        .arg("IMPORT")
        .arg(slot)
        .arg(slot)
        .query(&mut target.conn())
        .unwrap();
    let mut t = target.conn();
    assert!(
        wait_until(SOON, || lock_stat(&mut t, "lock_held") == 3),
        "the snapshot's locks never reached the target"
    );
    // The target's timer, idle until the locks' arrival hinted the sweep,
    // has fired for it: its pass could not see the importing keys.
    assert!(
        wait_until(SOON, || lock_stat(&mut t, "lock_timer_runs") >= 1),
        "the target's sweep never ran"
    );
    assert_eq!(lock_stat(&mut t, "lock_lease_index"), 0);
    let state = task_state(target, &id);
    assert!(
        !state.is_empty() && state != "completed",
        "the migration was not held: {state}"
    );
    failpoint("", "");
    let mut last = String::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            last = task_state(target, &id);
            last == "completed"
        }),
        "the migration never completed (last: {last})"
    );
    assert!(wait_until(Duration::from_secs(30), || {
        RedisCluster::owner_port(source, slot) == target.port()
            && RedisCluster::owner_port(target, slot) == target.port()
    }));

    // The waiter on the source is told to retry; the source keeps nothing.
    assert_eq!(answered(waiter, "the waiter"), Err(NOT_SERVED.to_string()));
    wait_books(source, (0, 0, 0, 0), "the source after the move");
    // Redis freed the slot's keys on its background thread (the module
    // settled its books from the trim event), not key by key on its main
    // thread, which listening to `key_trimmed` would have forced.
    assert!(
        wait_until(SOON, || dbsize(&mut s) == 0),
        "the slot's keys never left the source"
    );
    assert_eq!(
        active_trims(source),
        0,
        "the source trimmed on its main thread"
    );
    // Every holder has its lease-index entry on the target.
    wait_books(target, (3, 5, 5, 0), "the target after the move");
    // Holders, holds and tokens arrived as they were, with their leases.
    for (key, was) in [ex, sh, sem].iter().zip(&before) {
        let now = holders(&mut t, key);
        let identity = |h: &[(String, i64, i64, i64)]| {
            h.iter()
                .map(|(o, holds, token, _)| (o.clone(), *holds, *token))
                .collect::<Vec<_>>()
        };
        assert_eq!(identity(&now), identity(was), "{key} on the target");
        for (_, _, _, pttl) in &now {
            assert!(*pttl > 0, "{key}: no lease left on the target ({pttl})");
        }
    }
    assert_eq!(held(&mut t, ex).token, top);
    let fresh = acquire(&mut t, "{job}fresh", "x", 60_000).unwrap();
    assert!(fresh > top, "{fresh} is not above the arrived token {top}");
    // The semaphore's limit came along.
    let third = int(
        &mut t,
        &["LOCK.ACQUIRE", sem, "p3", "60000", "SHARED", "LIMIT", "3"],
    );
    assert!(third > fresh);
    assert_eq!(
        run(
            &mut t,
            &["LOCK.ACQUIRE", sem, "p4", "60000", "SHARED", "LIMIT", "3"]
        )
        .unwrap(),
        Value::Nil,
        "the semaphore's limit of 3 did not arrive"
    );
    let retried = spawn_waiter_or_error(target, ex, "waiter", 60_000);
    assert_eq!(extend(&mut t, ex, "holder", 1), 1);
    let granted = answered(retried, "the retried waiter").unwrap().unwrap();
    assert!(granted > fresh);
}

/// `CLUSTER INFO`'s count of Redis's main-thread slot trims
/// (`cluster_slot_migration_stats_active_trim_started`).
fn active_trims(node: &RedisServer) -> i64 {
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut node.conn())
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cluster_slot_migration_stats_active_trim_started:"))
        .unwrap_or_else(|| panic!("no active trim count in CLUSTER INFO: {info}"))
        .trim()
        .parse()
        .unwrap()
}

/// A 3-master Redis 8.4+ cluster for tests that hold, freeze or kill a
/// node mid-migration: no node is failed for the minute a test may hold
/// one, and the cluster stays up without a dead node's slots. `None` with
/// a note where the server has no `CLUSTER MIGRATION`.
fn redis_cluster_or_skip(test: &str) -> Option<RedisCluster> {
    if !has_redis_migration(&RedisServer::start()) {
        println!("{test}: skipped: this server has no CLUSTER MIGRATION (Redis 8.4+)");
        return None;
    }
    Some(RedisCluster::start_with(3, 0, || {
        testkit::cluster::cluster_options().args([
            "--cluster-node-timeout",
            "60000",
            "--cluster-require-full-coverage",
            "no",
        ])
    }))
}

/// `DEBUG ASM-FAILPOINT channel state` on `node` (`"" ""` clears it): the
/// source's `migrate-main-channel` at `handoff-prep` holds a migration
/// before the source pauses its writes.
fn asm_failpoint(node: &RedisServer, channel: &str, state: &str) {
    asm_failpoint_on(&mut node.conn(), channel, state);
}

fn asm_failpoint_on(conn: &mut Connection, channel: &str, state: &str) {
    let _: () = redis::cmd("DEBUG")
        .arg("ASM-FAILPOINT")
        .arg(channel)
        .arg(state)
        .query(conn)
        .unwrap();
}

/// `CLUSTER MIGRATION IMPORT slot slot` on `target`: the task's id.
fn redis_import(target: &RedisServer, slot: i64) -> String {
    redis::cmd("CLUSTER")
        .arg("MIGRATION")
        .arg("IMPORT")
        .arg(slot)
        .arg(slot)
        .query(&mut target.conn())
        .unwrap()
}

/// Waits until task `id` on `node` is in one of `states`; returns it.
fn wait_task(node: &RedisServer, id: &str, states: &[&str]) -> String {
    let mut last = String::new();
    let reached = wait_until(Duration::from_secs(30), || {
        last = task_state(node, id);
        states.contains(&last.as_str())
    });
    assert!(
        reached,
        "task {id} on {} never reached {states:?} (last: {last})",
        node.port()
    );
    last
}

/// Waits until both nodes see `owner` serving `slot`.
fn wait_owner(a: &RedisServer, b: &RedisServer, slot: i64, owner: &RedisServer) {
    let moved = wait_until(Duration::from_secs(30), || {
        RedisCluster::owner_port(a, slot) == owner.port()
            && RedisCluster::owner_port(b, slot) == owner.port()
    });
    assert!(moved, "slot {slot} never showed as {}'s", owner.port());
}

#[test]
fn redis_handover_pause_grants_nothing_twice_and_the_lease_ends_on_the_target() {
    let Some(cluster) = redis_cluster_or_skip("redis_handover_pause") else {
        return;
    };
    let (source, target, slot) = source_and_target(&cluster, "{job}");
    let key = "{job}ex";
    let mut s = source.conn();
    // The source's writes may stay paused for a minute while the target is
    // frozen before it takes the slot.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-slot-migration-write-pause-timeout")
        .arg(60_000)
        .query(&mut s)
        .unwrap();
    let token = acquire(&mut s, key, "holder", 60_000).unwrap();
    let waiter = spawn_waiter_or_error(source, key, "waiter", 60_000);

    asm_failpoint(source, "migrate-main-channel", "handoff-prep");
    let id = redis_import(target, slot);
    let mut t = target.conn();
    assert!(
        wait_until(SOON, || lock_stat(&mut t, "lock_held") == 1),
        "the snapshot's lock never reached the target"
    );
    // The target acknowledges what it applied ten times a second in this
    // state; an acknowledgement is what starts the source's pause.
    wait_task(target, &id, &["wait-stream-eof"]);
    // Long enough that no loaded machine reaches the pause after it ends
    // (reaching it takes well under a second), short next to the minute.
    const LEASE_MS: u64 = 8_000;
    assert_eq!(extend(&mut s, key, "holder", LEASE_MS), 1);
    let shortened = Instant::now();

    // Into the pause with the target frozen before it takes the slot. The
    // target is frozen and the source reads what it had sent; the source
    // is frozen and the fail point's clearing is queued to it; the target
    // runs until one acknowledgement (sent ten times a second) is queued
    // behind it, and is frozen again. Resumed, the source reads them in
    // that order (the kernel reports ready sockets first come, first
    // served): it clears the fail point, reads the acknowledgement, pauses
    // its writes and sends the end of the stream to the frozen target.
    let mut clearing = source.conn();
    target.pause();
    assert!(
        wait_until(SOON, || unread_connections(source.port()) == 0),
        "the source never read what the target had sent"
    );
    source.pause();
    let cleared = std::thread::spawn(move || asm_failpoint_on(&mut clearing, "", ""));
    assert!(
        wait_until(SOON, || unread_connections(source.port()) == 1),
        "the fail point's clearing never reached the frozen source"
    );
    target.resume();
    assert!(
        wait_until(SOON, || unread_connections(source.port()) == 2),
        "no acknowledgement of the target reached the frozen source"
    );
    target.pause();
    source.resume();
    cleared.join().unwrap();
    let paused = wait_task(
        source,
        &id,
        &["handoff", "stream-eof", "failed", "canceled"],
    );
    assert!(
        paused == "handoff" || paused == "stream-eof",
        "the source never paused: {paused}"
    );
    assert!(
        shortened.elapsed() < Duration::from_millis(LEASE_MS),
        "the source paused only after the lease ended: nothing was tested (a loaded machine?)"
    );
    // A rival's acquisition on the source waits out the pause.
    let rival = std::thread::spawn({
        let mut c = source.conn();
        move || {
            redis::cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg("rival")
                .arg(60_000)
                .query::<Option<i64>>(&mut c)
                .map_err(|e| error_line(&e))
        }
    });
    // The lease ends while the source is paused and the target frozen: the
    // source ends nothing and grants nothing.
    if let Some(left) = Duration::from_millis(LEASE_MS + 200).checked_sub(shortened.elapsed()) {
        std::thread::sleep(left);
    }
    assert_eq!(lock_stat(&mut s, "lock_held"), 1);
    assert_eq!(lock_stat(&mut s, "lock_waiting"), 1);
    assert_eq!(lock_stat(&mut s, "lock_wait_grants"), 0);
    assert_eq!(lock_stat(&mut s, "lock_expired"), 0);
    assert!(
        !rival.is_finished(),
        "the rival was answered during the pause"
    );
    let still = task_state(source, &id);
    assert!(still == "handoff" || still == "stream-eof", "{still}");

    target.resume();
    wait_task(target, &id, &["completed"]);
    wait_owner(source, target, slot, target);

    // The waiter is told to retry and the rival is redirected: nothing was
    // granted on the source.
    assert_eq!(answered(waiter, "the waiter"), Err(NOT_SERVED.to_string()));
    let rival = answered(rival, "the rival").unwrap_err();
    assert!(
        rival.starts_with(&format!("MOVED {slot} "))
            && rival.ends_with(&format!(":{}", target.port())),
        "{rival}"
    );
    assert_eq!(lock_stat(&mut s, "lock_wait_grants"), 0);
    wait_books(source, (0, 0, 0, 0), "the source after the move");
    // The lease that ended during the handover ends on the target.
    assert!(
        wait_until(SOON, || !exists(&mut t, key)),
        "the lock whose lease ended during the handover was never ended on the target: {:?}",
        books(&mut t)
    );
    wait_books(target, (0, 0, 0, 0), "the target after the lease ended");
    assert_eq!(lock_stat(&mut t, "lock_expired"), 1);
    let retried = acquire(&mut t, key, "waiter", 60_000).unwrap();
    assert!(retried > token, "{retried} is not above {token}");
}

/// Established loopback connections to `port` whose server side has
/// bytes it has not read yet (`/proc/net/tcp`): what a frozen server has
/// been sent.
fn unread_connections(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields
                .get(1)
                .and_then(|addr| addr.rsplit(':').next())
                .and_then(|hex| u16::from_str_radix(hex, 16).ok());
            let established = fields.get(3) == Some(&"01");
            let unread = fields
                .get(4)
                .and_then(|queues| queues.split(':').nth(1))
                .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                .unwrap_or(0);
            local_port == Some(port) && established && unread > 0
        })
        .count()
}

/// How an import fails midway in [`redis_failed_import`] and
/// [`valkey_failed_import`] (on Valkey, `Cancelled` is
/// `CLUSTER CANCELSLOTMIGRATIONS` on the source).
#[derive(Clone, Copy, Debug)]
enum ImportFailure {
    /// `CLUSTER MIGRATION CANCEL ID <id>` on the target.
    Cancelled,
    /// The target is killed (`kill -9`).
    TargetKilled,
    /// `FLUSHALL` on the target (which cancels the import).
    Flushed,
}

/// An import that fails after the snapshot's locks and some of the stream
/// reached the target leaves the target with no books for them and the
/// locks working on the source: holders, leases, the waiter served there.
fn redis_failed_import(how: ImportFailure) {
    let Some(mut cluster) = redis_cluster_or_skip(&format!("redis_failed_import ({how:?})")) else {
        return;
    };
    let (source, target, slot) = source_and_target(&cluster, "{job}");
    let (source_port, target_port) = (source.port(), target.port());
    let (ex, sh) = ("{job}ex", "{job}sh");
    let mut s = source.conn();
    let token = acquire(&mut s, ex, "holder", 60_000).unwrap();
    int(&mut s, &["LOCK.ACQUIRE", sh, "r1", "60000", "SHARED"]);
    let waiter = spawn_waiter_or_error(source, ex, "waiter", 60_000);

    // Held before its pause: the snapshot is on the target, and what the
    // source changes streams on.
    asm_failpoint(source, "migrate-main-channel", "handoff-prep");
    let id = redis_import(target, slot);
    let mut t = target.conn();
    assert!(
        wait_until(SOON, || lock_stat(&mut t, "lock_held") == 2),
        "the snapshot's locks never reached the target"
    );
    int(&mut s, &["LOCK.ACQUIRE", sh, "r2", "60000", "SHARED"]);
    assert!(
        wait_until(SOON, || lock_stat(&mut t, "lock_holders") == 3),
        "the stream never reached the target"
    );

    match how {
        ImportFailure::Cancelled => {
            assert_eq!(
                int(&mut t, &["CLUSTER", "MIGRATION", "CANCEL", "ID", &id]),
                1
            );
        }
        ImportFailure::Flushed => {
            let _: () = redis::cmd("FLUSHALL").query(&mut t).unwrap();
            // Redis cancels the import itself.
            wait_task(target, &id, &["canceled", "failed"]);
            wait_books(target, (0, 0, 0, 0), "the target after FLUSHALL");
        }
        ImportFailure::TargetKilled => cluster.node_mut(target_port).kill9(),
    }
    let source = cluster.node(source_port);
    // The source's side of the task ends, unpaused.
    wait_task(source, &id, &["failed", "canceled"]);
    asm_failpoint(source, "", "");
    if !matches!(how, ImportFailure::TargetKilled) {
        let target = cluster.node(target_port);
        // The target trimmed what it had imported, and its books say so.
        wait_books(target, (0, 0, 0, 0), "the target after the failed import");
        let mut t = target.conn();
        assert!(
            wait_until(SOON, || dbsize(&mut t) == 0),
            "the imported keys stayed on the target"
        );
        assert_eq!(active_trims(target), 0);
        assert_eq!(RedisCluster::owner_port(target, slot), source.port());
    }

    the_locks_still_work_on_the_source(source, slot, ex, token, waiter);
}

#[test]
fn redis_a_cancelled_import_leaves_the_locks_working_on_the_source() {
    redis_failed_import(ImportFailure::Cancelled);
}

#[test]
fn redis_an_import_whose_target_is_killed_leaves_the_locks_working_on_the_source() {
    redis_failed_import(ImportFailure::TargetKilled);
}

#[test]
fn redis_flushall_on_the_target_during_an_import_leaves_the_locks_working_on_the_source() {
    redis_failed_import(ImportFailure::Flushed);
}

#[test]
fn valkey_cli_reshard_by_atomic_slot_migration_keeps_the_lock_and_redirects_its_waiter() {
    let Some(cluster) = cluster_or_skip("valkey_cli_reshard_by_atomic_slot_migration") else {
        return;
    };
    let (from, to) = (&cluster.nodes[0], &cluster.nodes[1]);
    // `--cluster reshard` of one slot moves the lowest slot `from` serves.
    let slot = testkit::cluster::lowest_slot(from);
    let key = (0..)
        .map(|i| format!("resharded{i}"))
        .find(|k| cluster.key_slot(k) == slot)
        .unwrap();
    let mut s = from.conn();
    let token = acquire(&mut s, &key, "holder", 60_000).unwrap();
    let waiter = spawn_waiter_or_error(from, &key, "waiter", 60_000);

    RedisCluster::reshard_one_slot_with(from, to, slot, &["--cluster-use-atomic-slot-migration"]);
    let moved = wait_until(Duration::from_secs(30), || {
        RedisCluster::owner_port(from, slot) == to.port()
            && RedisCluster::owner_port(to, slot) == to.port()
    });
    assert!(moved, "slot {slot} never showed as the target's");

    // The holder keeps its lock there (same token, its lease indexed); the
    // waiter on the old node is told to retry, and the old node keeps
    // nothing.
    assert_eq!(answered(waiter, "the waiter"), Err(NOT_SERVED.to_string()));
    wait_books(from, (0, 0, 0, 0), "the old node after the reshard");
    let mut t = to.conn();
    wait_books(to, (1, 1, 1, 0), "the new node after the reshard");
    assert_eq!(held(&mut t, &key).token, token);
    assert_eq!(acquire(&mut t, &key, "rival", 60_000), None);
    // Retried there, the waiter waits for the holder's release.
    let retried = spawn_waiter_or_error(to, &key, "waiter", 60_000);
    assert_eq!(release(&mut t, &key, "holder"), Some(0));
    let granted = answered(retried, "the retried waiter").unwrap().unwrap();
    assert!(granted > token, "{granted} is not above {token}");
}

/// The writes a source makes to a slot while it migrates (locks taken,
/// re-entered, fences raised or not) are streamed to the target whatever
/// the source's replicas, backlog or AOF: the module must build their
/// effects there too. It skipped them on a primary with no replica (an
/// acknowledged fenced write was lost on the target), and the verbatim
/// `LOCK.FENCED` it replicated in their place crashed Redis 8.6's source
/// (its migration stream asked the command for its keys, which
/// propagated the same pending command again, without end).
fn writes_during_a_migration_reach_the_target(
    cluster: &RedisCluster,
    hold: impl FnOnce(&RedisServer, &RedisServer, i64),
    release: impl FnOnce(&RedisServer, &RedisServer, i64),
) {
    let (source, target, slot) = source_and_target(cluster, "{job}");
    let mut s = source.conn();
    // A lone primary: after its first lock command (from which on the
    // module follows replication) and a cron tick, the module knows it has
    // no replica.
    assert_eq!(lock_info(&mut s, "{job}none"), None);
    assert!(
        wait_until(SOON, || lock_stat(&mut s, "lock_effects_for_replicas") == 0),
        "a primary without replicas kept building effects for them"
    );
    acquire(&mut s, "{job}pre", "early", 60_000).unwrap();
    run(
        &mut s,
        &["LOCK.FENCED", "{job}f", "5", "HSET", "{job}h", "a", "1"],
    )
    .unwrap();
    hold(source, target, slot);
    // The slot's snapshot is on the target; what follows is streamed.
    let mut t = target.conn();
    assert!(
        wait_until(SOON, || lock_stat(&mut t, "lock_held") == 1),
        "the snapshot's lock never reached the target"
    );
    // An equal token (no raise), a raise, a fresh lock and a re-entry.
    let same = run(
        &mut s,
        &["LOCK.FENCED", "{job}f", "5", "HSET", "{job}h", "b", "2"],
    );
    assert_eq!(same.unwrap(), Value::Int(1));
    let raised = run(
        &mut s,
        &["LOCK.FENCED", "{job}f", "6", "HSET", "{job}h", "c", "3"],
    );
    assert_eq!(
        raised.unwrap(),
        Value::Int(1),
        "the source answered the raise"
    );
    let token = acquire(&mut s, "{job}ex", "holder", 60_000).unwrap();
    assert_eq!(acquire(&mut s, "{job}ex", "holder", 60_000), Some(token));
    release(source, target, slot);
    // On the target: every write, the fence at 6, the holder with its
    // token and both holds.
    let all: Value = redis::cmd("HGETALL").arg("{job}h").query(&mut t).unwrap();
    let mut fields = Vec::new();
    strings(&all, &mut fields);
    assert_eq!(fields, ["a", "1", "b", "2", "c", "3"], "the target's data");
    assert_eq!(
        run(&mut t, &["LOCK.FENCEGET", "{job}f"]).unwrap(),
        Value::Int(6)
    );
    let arrived = holders(&mut t, "{job}ex");
    assert_eq!(arrived.len(), 1, "{arrived:?}");
    let (owner, holds, arrived_token, _) = &arrived[0];
    assert_eq!(
        (owner.as_str(), *holds, *arrived_token),
        ("holder", 2, token)
    );
}

#[test]
fn writes_during_a_redis_migration_reach_the_target() {
    let Some(cluster) = redis_cluster_or_skip("writes_during_a_redis_migration") else {
        return;
    };
    let id = std::cell::RefCell::new(String::new());
    writes_during_a_migration_reach_the_target(
        &cluster,
        |source, target, slot| {
            asm_failpoint(source, "migrate-main-channel", "handoff-prep");
            *id.borrow_mut() = redis_import(target, slot);
        },
        |source, target, slot| {
            asm_failpoint(source, "", "");
            wait_task(target, &id.borrow(), &["completed"]);
            wait_owner(source, target, slot, target);
        },
    );
}

#[test]
fn writes_during_a_valkey_migration_reach_the_target() {
    let Some(cluster) = cluster_or_skip("writes_during_a_valkey_migration") else {
        return;
    };
    writes_during_a_migration_reach_the_target(
        &cluster,
        |source, target, slot| {
            debug_slot_migration(source, "PREVENT-PAUSE", true);
            start_migration(source, target, slot);
            wait_job_state(source, "waiting-to-pause");
        },
        |source, target, slot| {
            debug_slot_migration(source, "PREVENT-PAUSE", false);
            wait_migrated(source, target, slot);
        },
    );
}
