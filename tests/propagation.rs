//! Effects are built only when Redis will write them somewhere: with no AOF,
//! no replica and no replication backlog the module skips them (building
//! them was 12–15% of a command), yet a replica that attaches, or comes
//! back, or an AOF switched on later, still gets every change, and every
//! change is still counted for `save` points.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;

const LONG: u64 = 600_000;

/// `lock_effects_for_replicas` of `INFO lock`: 1 while the module builds
/// effects for replicas, 0 while it knows there is nobody to read them.
fn effects_for_replicas(conn: &mut redis::Connection) -> i64 {
    lock_stat(conn, "lock_effects_for_replicas")
}

fn wait_for_skipping(server: &RedisServer) {
    let mut conn = server.conn();
    // The module follows replication from the server's first lock command
    // on (issue #35: no event subscription before it); a lookup will do.
    assert_eq!(lock_info(&mut conn, "no-such-lock"), None);
    assert!(
        wait_until(SOON, || effects_for_replicas(&mut conn) == 0),
        "a lone primary kept building effects for replicas; log:\n{}",
        server.log()
    );
}

fn replication_field(conn: &mut redis::Connection, field: &str) -> String {
    info_section(conn, "replication")
        .remove(field)
        .unwrap_or_else(|| panic!("INFO replication has no {field}"))
}

fn changes_since_save(conn: &mut redis::Connection) -> i64 {
    info_section(conn, "persistence")["rdb_changes_since_last_save"]
        .parse()
        .unwrap()
}

/// Every kind of change, on keys named after `round`, so that a writer can
/// run it again and again. Tokens stay on the wall clock (`ATLEAST` raises a
/// token by one), so a replica that re-ran a command instead of applying its
/// effect would hold other tokens than the primary.
fn churn(conn: &mut redis::Connection, round: u64) {
    let key = format!("churn:{}", round % 50);
    let owner = format!("owner-{round}");
    if let Some(token) = acquire(conn, &key, &owner, LONG) {
        acquire(conn, &key, &owner, LONG).unwrap();
        assert_eq!(extend(conn, &key, &owner, 2 * LONG), 1);
        assert_eq!(fence(conn, &key, &owner, Some(token + 1)), Some(token + 1));
        assert_eq!(release(conn, &key, &owner), Some(1));
        if round % 3 == 0 {
            assert_eq!(release(conn, &key, &owner), Some(0));
        }
    } else {
        // Held from an earlier round: release it for the next one.
        let _: redis::Value = redis::cmd("DEL").arg(&key).query(conn).unwrap();
    }
    // Fenced writes and checks: their raises are effects too (rounds only
    // grow, so each raises its fence; one in four is a stale retry).
    let fence_key = format!("fence:{}", round % 50);
    let token = round.to_string();
    let value = format!("v{round}");
    let data = format!("data:{}", round % 50);
    run(
        conn,
        &["LOCK.FENCED", &fence_key, &token, "SET", &data, &value],
    )
    .unwrap();
    run(
        conn,
        &["LOCK.FENCECHECK", &format!("check:{}", round % 50), &token],
    )
    .unwrap();
    if round % 4 == 1 {
        let stale = (round - 1).to_string();
        assert!(run(
            conn,
            &["LOCK.FENCED", &fence_key, &stale, "SET", &data, "stale"]
        )
        .is_err());
    }
}

#[test]
fn a_lone_primary_skips_effects_but_counts_every_change() {
    let server = RedisServer::start();
    wait_for_skipping(&server);
    let mut c = server.conn();
    let before = changes_since_save(&mut c);
    acquire(&mut c, "a", "alice", LONG).unwrap();
    acquire(&mut c, "a", "alice", LONG).unwrap();
    assert_eq!(extend(&mut c, "a", "alice", LONG), 1);
    assert_eq!(release(&mut c, "a", "alice"), Some(1));
    assert_eq!(release(&mut c, "a", "alice"), Some(0));
    assert_eq!(
        changes_since_save(&mut c) - before,
        5,
        "each change counts once towards save points"
    );
    // Refused commands change nothing and count nothing.
    assert_eq!(release(&mut c, "a", "alice"), None);
    assert_eq!(extend(&mut c, "a", "alice", LONG), 0);
    assert_eq!(changes_since_save(&mut c) - before, 5);
    // A fenced write that raises its fence is two changes (the write and
    // the raise), one that does not is one; a check that raises is one.
    let fenced = |c: &mut redis::Connection, token: &str| {
        run(c, &["LOCK.FENCED", "f", token, "HSET", "h", "k", token])
    };
    fenced(&mut c, "7").unwrap();
    assert_eq!(changes_since_save(&mut c) - before, 7);
    fenced(&mut c, "7").unwrap();
    assert_eq!(changes_since_save(&mut c) - before, 8);
    run(&mut c, &["LOCK.FENCECHECK", "g", "3"]).unwrap();
    run(&mut c, &["LOCK.FENCECHECK", "g", "3"]).unwrap();
    assert_eq!(changes_since_save(&mut c) - before, 9);
    assert!(fenced(&mut c, "6").is_err(), "a stale token is refused");
    assert_eq!(changes_since_save(&mut c) - before, 9);
}

/// A replica attaches to a lone primary (which skips effects) while a writer
/// changes locks before it asks, while the primary forks and sends its
/// snapshot, and after; the replica must end up with the primary's data.
/// The module learns that effects are needed again from the snapshot's fork
/// (`propagation.rs`): without that, the changes written after the fork
/// never reach the replica.
fn a_replica_attaches_under_load(args: &[&str]) {
    // The same settings on both (dual-channel replication needs both).
    let primary = RedisServer::start_with(ServerOptions::default().args(args.to_vec()));
    let replica = RedisServer::start_with(ServerOptions::default().args(args.to_vec()));
    wait_for_skipping(&primary);
    let mut p = primary.conn();
    for pair in args.chunks(2) {
        let name = pair[0].trim_start_matches("--");
        let value: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query(&mut p)
            .unwrap();
        assert_eq!(
            value.get(1).map(String::as_str),
            Some(pair[1]),
            "{name} not in effect"
        );
    }
    for round in 0..200 {
        churn(&mut p, round);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        let mut conn = primary.conn();
        std::thread::spawn(move || {
            let mut round = 200;
            while !stop.load(Ordering::Relaxed) {
                churn(&mut conn, round);
                round += 1;
            }
            round
        })
    };
    replica.replicate_from(&primary);
    assert_eq!(
        effects_for_replicas(&mut p),
        1,
        "a primary with a replica must build effects"
    );
    let mut r = replica.conn();
    // Let the writer run on after the sync for a few hundred changes (not
    // "as many again": a sync slowed by a loaded machine would make that
    // wait as long again).
    let changes = lock_stat(&mut p, "lock_acquired");
    assert!(
        wait_until(Duration::from_secs(60), || lock_stat(
            &mut p,
            "lock_acquired"
        ) >= changes + 300),
        "the writer stopped changing locks after the sync"
    );
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    assert!(rounds > 200, "the writer ran during the sync");
    wait_replicated(&primary, &replica);
    assert_eq!(
        digest(&mut r),
        digest(&mut p),
        "the replica missed effects written during its sync ({args:?})"
    );
}

#[test]
fn a_replica_that_attaches_under_load_gets_every_change() {
    // The test servers' settings: diskless, without delay (on Redis 8, the
    // snapshot through a second connection, the rdb channel).
    a_replica_attaches_under_load(&[]);
}

#[test]
fn a_replica_that_attaches_under_load_gets_every_change_diskless_with_a_delay() {
    // The replica waits for the fork while the writer goes on.
    a_replica_attaches_under_load(&[
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "2",
    ]);
}

#[test]
fn a_replica_that_attaches_under_load_gets_every_change_from_a_disk_snapshot() {
    a_replica_attaches_under_load(&["--repl-diskless-sync", "no"]);
}

#[test]
fn a_replica_that_attaches_under_load_gets_every_change_over_dual_channel() {
    // Valkey's dual-channel replication (off by default): the snapshot on
    // one connection, the stream from the fork's offset on the other.
    // (Redis 8 does the same by default, the test above.)
    if !testkit::is_valkey() {
        return;
    }
    a_replica_attaches_under_load(&[
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
        "--dual-channel-replication-enabled",
        "yes",
    ]);
}

#[test]
fn a_replica_that_comes_back_gets_the_changes_from_the_backlog() {
    // A backlog large enough for everything written while the replica is
    // away (the default 1 MB can fill in the half second).
    let primary =
        RedisServer::start_with(ServerOptions::default().args(["--repl-backlog-size", "64mb"]));
    let replica = RedisServer::start();
    replica.replicate_from(&primary);
    let mut p = primary.conn();
    let mut r = replica.conn();
    for round in 0..100 {
        churn(&mut p, round);
    }
    wait_replicated(&primary, &replica);
    let partial_before: i64 = info_section(&mut p, "stats")["sync_partial_ok"]
        .parse()
        .unwrap();
    // Cut the link while the replica is frozen, so that it cannot come back
    // at once; thawed, it comes back with PSYNC and is served from the
    // backlog, which must hold what was written meanwhile.
    replica.pause();
    let _: redis::Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut p)
        .unwrap();
    assert!(wait_until(SOON, || replication_field(
        &mut p,
        "connected_slaves"
    ) == "0"));
    // Keep writing for several of Redis's cron ticks (10 a second), on which
    // the module decides whether anything still reads its effects.
    let disconnected = std::time::Instant::now();
    let mut round = 100;
    while disconnected.elapsed() < std::time::Duration::from_millis(500) {
        churn(&mut p, round);
        round += 1;
    }
    assert_eq!(
        effects_for_replicas(&mut p),
        1,
        "the backlog outlives the replica's connection"
    );
    replica.resume();
    assert!(
        wait_until(SOON, || replication_field(&mut p, "connected_slaves")
            == "1"),
        "the replica did not come back"
    );
    assert!(
        wait_until(SOON, || replication_field(&mut r, "master_link_status")
            == "up"),
        "the replica did not reconnect"
    );
    wait_replicated(&primary, &replica);
    let partial_after: i64 = info_section(&mut p, "stats")["sync_partial_ok"]
        .parse()
        .unwrap();
    assert_eq!(
        partial_after,
        partial_before + 1,
        "the replica resynced from the backlog"
    );
    assert_eq!(replication_field(&mut p, "connected_slaves"), "1");
    assert_eq!(digest(&mut r), digest(&mut p), "the backlog missed effects");
}

#[test]
fn a_promoted_replica_builds_effects_for_its_own_replicas() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    let sub = RedisServer::start();
    replica.replicate_from(&primary);
    let mut p = primary.conn();
    churn(&mut p, 0);
    wait_replicated(&primary, &replica);
    let mut r = replica.conn();
    replica.promote();
    // The promoted node keeps the backlog it had as a replica.
    assert_eq!(effects_for_replicas(&mut r), 1);
    sub.replicate_from(&replica);
    for round in 1..100 {
        churn(&mut r, round);
    }
    wait_replicated(&replica, &sub);
    assert_eq!(digest(&mut sub.conn()), digest(&mut r));
}

#[test]
fn an_aof_switched_on_later_gets_every_change() {
    let mut server = RedisServer::start_with(ServerOptions::default().args([
        "--aof-use-rdb-preamble",
        "no",
        "--appendfsync",
        "always",
    ]));
    wait_for_skipping(&server);
    let mut c = server.conn();
    let before = acquire(&mut c, "before", "alice", LONG).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut c)
        .unwrap();
    assert!(
        wait_until(SOON, || {
            let persistence = info_section(&mut c, "persistence");
            persistence["aof_enabled"] == "1" && persistence["aof_rewrite_in_progress"] == "0"
        }),
        "the AOF was not written"
    );
    // With no replica and no backlog, only the AOF reads these.
    acquire(&mut c, "before", "alice", LONG).unwrap();
    let after = acquire(&mut c, "after", "bob", LONG).unwrap();
    let gone = acquire(&mut c, "gone", "carol", LONG).unwrap();
    assert_eq!(release(&mut c, "gone", "carol"), Some(0));
    assert!(gone > before);
    let digest_before = digest(&mut c);
    server.kill9();
    server.restart_with(ServerOptions::default().args([
        "--appendonly",
        "yes",
        "--aof-use-rdb-preamble",
        "no",
    ]));
    let mut c = server.conn();
    assert_eq!(
        held(&mut c, "before").identity(),
        (b"alice".to_vec(), 2, before)
    );
    assert_eq!(
        held(&mut c, "after").identity(),
        (b"bob".to_vec(), 1, after)
    );
    assert!(!exists(&mut c, "gone"));
    assert_eq!(digest(&mut c), digest_before);
}
