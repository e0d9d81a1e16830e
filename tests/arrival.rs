//! Locks that arrive on a node from outside its own commands (`RESTORE`,
//! `MIGRATE`, `SWAPDB`): every later grant here is above their tokens at
//! once, and their leases still end, whatever runs between the arrival and
//! the lease sweep that files them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use redis::Value;

/// Far above any token the clock gives (about 1.8e15 in 2026), below the
/// cap (2^53 - 1): a token the target node never issued.
const RAISED: i64 = 4_000_000_000_000_000;

/// Keys enough that a sweep pass over their database spans many timer
/// firings (each scans for at most 2 ms).
const FILLER: &str = "500000";

/// A dump of `key` held by `owners` on a node of its own, whose tokens were
/// raised above `RAISED` there; and the highest of those tokens.
fn raised_dump(owners: &[&str], shared: bool) -> (Vec<u8>, i64) {
    let source = RedisServer::start();
    let mut s = source.conn();
    let mut highest = 0;
    for (n, owner) in owners.iter().enumerate() {
        let mut args = vec!["LOCK.ACQUIRE", "k", owner, "60000"];
        if shared {
            args.push("SHARED");
        }
        assert!(matches!(run(&mut s, &args).unwrap(), Value::Int(_)));
        let floor = RAISED + i64::try_from(n).unwrap() * 1_000;
        highest = fence(&mut s, "k", owner, Some(floor)).unwrap();
        assert!(highest >= floor);
    }
    let dump: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut s).unwrap();
    (dump, highest)
}

/// In one `MULTI` (so that no timer firing, and no sweep, runs between):
/// `RESTORE k`, then `then`; returns the replies of `then`.
fn restore_then(c: &mut redis::Connection, dump: &[u8], then: &[&[&str]]) -> Vec<Value> {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("RESTORE")
        .arg("k")
        .arg(0)
        .arg(dump)
        .ignore();
    for args in then {
        pipe.cmd(args[0]).arg(&args[1..]);
    }
    pipe.query(c).unwrap()
}

fn token_of(value: &Value) -> i64 {
    match value {
        Value::Int(token) => *token,
        other => panic!("not a token: {other:?}"),
    }
}

/// Issue #36, item 4: a restored lock released before the sweep found it
/// left the counter below its token, and the next holder of the name got a
/// smaller token than the previous one.
#[test]
fn a_restored_lock_released_at_once_is_followed_by_a_greater_token() {
    let (dump, arrived) = raised_dump(&["alice"], false);
    let target = RedisServer::start();
    let mut t = target.conn();
    let replies = restore_then(
        &mut t,
        &dump,
        &[
            &["LOCK.RELEASE", "k", "alice"],
            &["LOCK.ACQUIRE", "k", "bob", "60000"],
        ],
    );
    assert_eq!(replies[0], Value::Int(0), "alice released the lock");
    let next = token_of(&replies[1]);
    assert!(
        next > arrived,
        "bob's token {next} is not above alice's {arrived}, which arrived before it"
    );
}

/// The same for a shared lock whose holders all leave, and for a grant of
/// another name on the node: every later token is above every arrived one.
#[test]
fn every_grant_after_a_restore_is_above_every_arrived_token() {
    let (dump, arrived) = raised_dump(&["r1", "r2"], true);
    let target = RedisServer::start();
    let mut t = target.conn();
    let replies = restore_then(
        &mut t,
        &dump,
        &[
            &["LOCK.ACQUIRE", "other", "carol", "60000"],
            &["LOCK.RELEASE", "k", "r2"],
            &["LOCK.RELEASE", "k", "r1"],
            &["LOCK.ACQUIRE", "k", "bob", "60000"],
        ],
    );
    let other = token_of(&replies[0]);
    assert!(
        other > arrived,
        "a grant of another name ({other}) is not above the arrived token {arrived}"
    );
    assert_eq!(&replies[1..3], &[Value::Int(0), Value::Int(0)]);
    let next = token_of(&replies[3]);
    assert!(next > other, "bob's token {next} after {other}");
    assert!(lock_stat(&mut t, "lock_last_token") >= next);
}

/// `MIGRATE` into a database behind a large one: the sweep pass that would
/// find the lock is still scanning the large database when it is released
/// and taken again on the target.
#[test]
fn a_migrated_lock_released_before_the_sweep_finds_it_is_followed_by_a_greater_token() {
    let source = RedisServer::start();
    let target = RedisServer::start();
    let mut s = source.conn();
    let mut t = target.conn();
    run(&mut t, &["SELECT", "1"]).unwrap();
    run(&mut t, &["DEBUG", "POPULATE", FILLER, "filler", "8"]).unwrap();
    run(&mut t, &["SELECT", "2"]).unwrap();
    acquire(&mut s, "k", "alice", 60_000).unwrap();
    let arrived = fence(&mut s, "k", "alice", Some(RAISED)).unwrap();
    let migrated = run(
        &mut s,
        &[
            "MIGRATE",
            target.host(),
            &target.port().to_string(),
            "k",
            "2",
            "10000",
        ],
    )
    .unwrap();
    assert_eq!(migrated, Value::Okay);
    assert_eq!(release(&mut t, "k", "alice"), Some(0));
    let next = acquire(&mut t, "k", "bob", 60_000).unwrap();
    assert!(
        next > arrived,
        "bob's token {next} is not above alice's {arrived}, which arrived before it"
    );
}

/// Issue #36, item 5: a lock renamed away from its lease-index entry, then
/// moved by `SWAPDB` into a database the sweep pass had already scanned,
/// was never filed: its lease never ended.
#[test]
fn a_lock_swapped_behind_a_sweep_pass_still_ends() {
    let server = RedisServer::start();
    let mut c = server.conn();
    run(&mut c, &["SELECT", "1"]).unwrap();
    run(&mut c, &["DEBUG", "POPULATE", FILLER, "filler", "8"]).unwrap();
    run(&mut c, &["SELECT", "3"]).unwrap();
    acquire(&mut c, "L", "owner", 60_000).unwrap();
    let runs = lock_stat(&mut c, "lock_timer_runs");
    // The lock leaves its entry: a sweep pass starts at the next firing,
    // scans the empty database 0, and goes on into database 1.
    run(&mut c, &["RENAME", "L", "L2"]).unwrap();
    assert!(wait_until(SOON, || lock_stat(&mut c, "lock_timer_runs") > runs));
    assert_eq!(lock_stat(&mut c, "lock_lease_index"), 0);
    // Database 3's lock goes to database 0, behind the pass.
    run(&mut c, &["SWAPDB", "0", "3"]).unwrap();
    run(&mut c, &["SELECT", "0"]).unwrap();
    assert!(exists(&mut c, "L2"));
    run(&mut c, &["LOCK.DEBUG", "MONOTONIC-JUMP", "60001"]).unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || !exists(&mut c, "L2")),
        "the lock's lease never ended: lease index {}, holders {}",
        lock_stat(&mut c, "lock_lease_index"),
        lock_stat(&mut c, "lock_holders"),
    );
    assert_eq!(lock_stat(&mut c, "lock_holders"), 0);
    assert_eq!(lock_stat(&mut c, "lock_lease_index"), 0);
    assert!(acquire(&mut c, "L2", "waiter", 60_000).is_some());
}
