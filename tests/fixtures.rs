//! Data written by earlier versions of the module still loads: the RDB file
//! and the AOF of `tests/fixtures/v1/` (see its README), on Redis and Valkey.
//! Every lock comes back with its owner, holds and token, the plain key
//! stays a plain key, the released lock stays released, and the node's
//! counter continues above every token the old data carried.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::*;

/// The fixtures' leases end on 2036-11-05 (Unix ms 2110485600000 and a
/// little after); until then the locks are still held.
const LEASES_END_MS: i64 = 2_110_485_600_000;

/// Starts a server, stops it, puts the fixture's files in its data
/// directory and starts it again on them.
fn load(fixture: &str, options: ServerOptions) -> RedisServer {
    let mut server = RedisServer::start_with(options.clone());
    server.shutdown("NOSAVE");
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/v1")
        .join(fixture);
    copy_dir(&from, server.dir());
    server.restart_with(options);
    server
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// What both fixtures hold; `tokens` are (plain, reentered, fenced, db3).
fn check(c: &mut redis::Connection, tokens: [i64; 4], counter_at_least: i64) {
    let held = now_us() / 1000 < LEASES_END_MS;
    let expect = |c: &mut redis::Connection, key: &str, owner: &str, holds: i64, token: i64| {
        let info = lock_info(c, key);
        if held {
            let info = info.unwrap_or_else(|| panic!("{key} was not loaded"));
            assert_eq!(
                info.identity(),
                (owner.as_bytes().to_vec(), holds, token),
                "{key}"
            );
            assert!(info.pttl > 0, "{key}");
        } else {
            assert!(info.is_none(), "{key}: its lease ended in 2036");
        }
    };
    expect(c, "fixture:plain", "alice", 1, tokens[0]);
    expect(c, "fixture:reentered", "bob", 2, tokens[1]);
    expect(c, "fixture:fenced", "carol", 1, tokens[2]);
    assert!(!exists(c, "fixture:released"), "a released lock came back");
    let plain: String = redis::cmd("GET").arg("fixture:string").query(c).unwrap();
    assert_eq!(plain, "not-a-lock");
    let _: () = redis::cmd("SELECT").arg(3).query(c).unwrap();
    expect(c, "fixture:db3", "erin", 1, tokens[3]);
    let _: () = redis::cmd("SELECT").arg(0).query(c).unwrap();
    let fresh = acquire(c, "fixture:new", "frank", 1_000).unwrap();
    assert!(
        fresh > counter_at_least,
        "token {fresh} after loading old data is not above {counter_at_least}"
    );
}

#[test]
fn a_v1_rdb_file_loads() {
    let server = load("rdb", ServerOptions::default());
    let mut c = server.conn();
    check(
        &mut c,
        [
            1_795_485_600_450_916,
            1_795_485_600_455_456,
            5_000_000_000_000_000,
            6_000_000_000_000_001,
        ],
        // Raised to 6e15 by the lock released before the SAVE.
        6_000_000_000_000_001,
    );
    assert!(!server.log().contains("panicked"));
}

#[test]
fn a_v1_aof_without_preamble_loads() {
    let options =
        ServerOptions::default().args(["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let server = load("aof", options);
    let mut c = server.conn();
    check(
        &mut c,
        [
            1_795_485_601_033_758,
            1_795_485_601_039_666,
            5_000_000_000_000_000,
            5_000_000_000_000_002,
        ],
        5_000_000_000_000_002,
    );
    assert!(!server.log().contains("panicked"));
}
