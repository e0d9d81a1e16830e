//! The node's token counter across every persistence path. Each case raises
//! the counter far above the clock with `LOCK.FENCE ... ATLEAST`, releases
//! the lock (so that no live lock carries the value and only the counter
//! itself can keep later tokens above it), takes the path, kills the node
//! with `kill -9`, starts it again and checks that a fresh grant is above the
//! raised value.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;

/// Far above any token the clock gives (about 1.8e15 in 2026), below the
/// cap (2^53 - 1).
const RAISED: i64 = 4_000_000_000_000_000;

/// Raises the counter to `RAISED` with a lock that is then released.
fn raise_and_release(c: &mut redis::Connection) {
    acquire(c, "raiser", "alice", 60_000).unwrap();
    assert_eq!(fence(c, "raiser", "alice", Some(RAISED)), Some(RAISED));
    assert_eq!(release(c, "raiser", "alice"), Some(0));
    assert!(!exists(c, "raiser"));
    assert_eq!(dbsize(c), 0, "no lock may carry the raised value");
}

fn assert_above(c: &mut redis::Connection, what: &str) {
    let fresh = acquire(c, "fresh", "bob", 60_000)
        .unwrap_or_else(|| panic!("{what}: the fresh acquisition was refused"));
    assert!(
        fresh > RAISED,
        "{what}: token {fresh} is not above the counter raised to {RAISED}"
    );
}

fn bgrewriteaof(c: &mut redis::Connection) {
    // A replica rewrites its AOF after its sync: let that one finish first.
    assert!(wait_until(Duration::from_secs(30), || {
        let info = info_section(c, "persistence");
        info["aof_rewrite_in_progress"] == "0" && info["aof_rewrite_scheduled"] == "0"
    }));
    let before: i64 = info_section(c, "persistence")["aof_rewrites"]
        .parse()
        .unwrap();
    let _: String = redis::cmd("BGREWRITEAOF").query(c).unwrap();
    wait_rewrite(c, before);
}

fn wait_rewrite(c: &mut redis::Connection, before: i64) {
    let done = wait_until(Duration::from_secs(30), || {
        let info = info_section(c, "persistence");
        info["aof_rewrites"].parse::<i64>().unwrap() > before
            && info["aof_rewrite_in_progress"] == "0"
            && info["aof_rewrite_scheduled"] == "0"
    });
    assert!(done, "the AOF rewrite did not finish");
    assert_eq!(
        info_section(c, "persistence")["aof_last_bgrewrite_status"],
        "ok"
    );
}

/// Raise, release, `path`, kill -9, restart, check.
fn survives(options: ServerOptions, what: &str, path: impl FnOnce(&mut redis::Connection)) {
    let mut server = RedisServer::start_with(options);
    let mut c = server.conn();
    raise_and_release(&mut c);
    path(&mut c);
    server.kill9();
    server.restart();
    let mut c = server.conn();
    assert_above(&mut c, what);
    assert!(!server.log().contains("panicked"));
}

#[test]
fn rdb_save() {
    survives(ServerOptions::default(), "SAVE then kill -9", |c| {
        let _: String = redis::cmd("SAVE").query(c).unwrap();
    });
}

#[test]
fn aof_without_preamble() {
    survives(aof_options("no"), "AOF (no preamble), kill -9", |_| {});
}

#[test]
fn aof_with_preamble() {
    survives(aof_options("yes"), "AOF (RDB preamble), kill -9", |_| {});
}

#[test]
fn aof_rewrite_without_preamble() {
    survives(
        aof_options("no"),
        "BGREWRITEAOF (no preamble), kill -9",
        bgrewriteaof,
    );
}

#[test]
fn aof_rewrite_with_preamble() {
    survives(
        aof_options("yes"),
        "BGREWRITEAOF (RDB preamble), kill -9",
        bgrewriteaof,
    );
}

#[test]
fn aof_rewrite_without_preamble_then_more_writes() {
    // The rewrite's base file and the incremental file after it together.
    survives(
        aof_options("no"),
        "BGREWRITEAOF (no preamble), a later lock released, kill -9",
        |c| {
            bgrewriteaof(c);
            acquire(c, "later", "carol", 60_000).unwrap();
            assert_eq!(release(c, "later", "carol"), Some(0));
        },
    );
}

#[test]
fn two_aof_rewrites_without_preamble() {
    // The second rewrite drops the incremental file that carried the first
    // rewrite's record: the record is written again.
    survives(
        aof_options("no"),
        "two BGREWRITEAOFs (no preamble), kill -9",
        |c| {
            bgrewriteaof(c);
            bgrewriteaof(c);
        },
    );
}

#[test]
fn aof_turned_on_at_run_time_without_preamble() {
    let mut server = RedisServer::start_with(ServerOptions::default().args([
        "--aof-use-rdb-preamble",
        "no",
        "--appendfsync",
        "always",
    ]));
    let mut c = server.conn();
    raise_and_release(&mut c);
    let before: i64 = info_section(&mut c, "persistence")["aof_rewrites"]
        .parse()
        .unwrap();
    let _: String = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut c)
        .unwrap();
    wait_rewrite(&mut c, before);
    assert!(wait_until(Duration::from_secs(10), || {
        info_section(&mut c, "persistence")["aof_enabled"] == "1"
    }));
    server.kill9();
    server.restart_with(aof_options("no"));
    let mut c = server.conn();
    assert_above(&mut c, "CONFIG SET appendonly yes (no preamble), kill -9");
}

#[test]
fn debug_reload() {
    survives(
        ServerOptions::default(),
        "DEBUG RELOAD, SAVE, kill -9",
        |c| {
            let _: String = redis::cmd("DEBUG").arg("RELOAD").query(c).unwrap();
            assert_above(c, "DEBUG RELOAD");
            assert_eq!(release(c, "fresh", "bob"), Some(0));
            let _: String = redis::cmd("SAVE").query(c).unwrap();
        },
    );
}

#[test]
fn full_sync_then_promotion() {
    let mut primary = RedisServer::start();
    let mut c = primary.conn();
    raise_and_release(&mut c);
    // The replica attaches after the release: only the full sync's RDB can
    // carry the counter to it.
    let replica = RedisServer::start();
    replica.replicate_from(&primary);
    primary.kill9();
    replica.promote();
    let mut r = replica.conn();
    assert_above(&mut r, "full sync, primary killed, replica promoted");
}

#[test]
fn full_sync_diskless_then_promotion() {
    let mut primary =
        RedisServer::start_with(ServerOptions::default().args(["--repl-diskless-sync", "yes"]));
    let mut c = primary.conn();
    raise_and_release(&mut c);
    let replica = RedisServer::start_with(
        ServerOptions::default().args(["--repl-diskless-load", "on-empty-db"]),
    );
    replica.replicate_from(&primary);
    primary.kill9();
    replica.promote();
    let mut r = replica.conn();
    assert_above(
        &mut r,
        "diskless full sync, primary killed, replica promoted",
    );
}

#[test]
fn replica_aof_rewrite_without_preamble_then_promotion() {
    // The replica keeps its own AOF, rewritten without a preamble after the
    // raise; it is killed with its primary and restarted from that AOF.
    let mut primary = RedisServer::start();
    let mut replica = RedisServer::start_with(aof_options("no"));
    replica.replicate_from(&primary);
    let mut c = primary.conn();
    raise_and_release(&mut c);
    let mut r = replica.conn();
    assert!(wait_until(Duration::from_secs(10), || dbsize(&mut r) == 0
        && info_section(&mut c, "replication")["master_repl_offset"]
            == info_section(&mut r, "replication")
                ["master_repl_offset"]));
    bgrewriteaof(&mut r);
    primary.kill9();
    replica.kill9();
    replica.restart();
    replica.promote();
    let mut r = replica.conn();
    assert_above(
        &mut r,
        "replica AOF rewrite (no preamble), kill -9, promoted",
    );
}

#[test]
fn aof_rewrite_while_clients_are_paused() {
    // Writing while writes are paused would trip the server's assertion:
    // the record waits for the pause to end.
    survives(
        aof_options("no"),
        "BGREWRITEAOF during CLIENT PAUSE WRITE, kill -9",
        |c| {
            let _: String = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(60_000)
                .arg("WRITE")
                .query(c)
                .unwrap();
            bgrewriteaof(c);
            assert!(!incr_aof_text(c).contains("LOCK.COUNTER"));
            let _: String = redis::cmd("CLIENT").arg("UNPAUSE").query(c).unwrap();
            assert!(
                wait_until(Duration::from_secs(10), || incr_aof_text(c)
                    .contains("LOCK.COUNTER")),
                "the counter record was not written after the pause"
            );
        },
    );
}

/// The current incremental AOF file, as text.
fn incr_aof_text(c: &mut redis::Connection) -> String {
    let dir: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("dir").query(c).unwrap();
    let aofdir = std::path::Path::new(&dir[1]).join("appendonlydir");
    let manifest = std::fs::read_to_string(
        std::fs::read_dir(&aofdir)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(".manifest"))
            .unwrap(),
    )
    .unwrap();
    let incr = manifest
        .lines()
        .rfind(|line| line.contains("type i"))
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap()
        .to_string();
    String::from_utf8_lossy(&std::fs::read(aofdir.join(incr)).unwrap()).to_ascii_uppercase()
}
