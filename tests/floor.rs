//! `LOCK.FLOOR n`: the public raise of a node's token counter (what
//! `Redlock::cluster` sends to every master before it returns a token). It
//! replies the counter; it is idempotent; a floor more than 24 h ahead of
//! the node's wall clock, and any bad argument, is refused and changes
//! nothing; a raise reaches a replica (which can be promoted) and survives
//! the AOF, an AOF rewrite without the RDB preamble and `kill -9`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use redis::Value;

use common::*;

/// An hour, a day and a bit more, in microseconds.
const HOUR_US: i64 = 3_600_000_000;
const DAY_US: i64 = 24 * HOUR_US;

fn floor(c: &mut redis::Connection, n: i64) -> i64 {
    match run(c, &["LOCK.FLOOR", &n.to_string()]).unwrap() {
        Value::Int(last) => last,
        other => panic!("LOCK.FLOOR {n} replied {other:?}"),
    }
}

/// A fresh grant's token (on a key of its own, released at once).
fn fresh_token(c: &mut redis::Connection, key: &str) -> i64 {
    let token = acquire(c, key, "probe", 60_000).unwrap();
    assert_eq!(release(c, key, "probe"), Some(0));
    token
}

/// A grant's token is its node's wall clock (µs) while the counter is
/// behind it: the floor that keeps tokens rising across a restart that
/// lost the counter. The node reads it as the command runs (the server's
/// cached time of the command, where it tells one: never a stale one), with
/// the debug wall-clock offset applied; once the counter leads the clock,
/// the next token is the counter's next.
#[test]
fn a_fresh_token_is_the_wall_clock_of_its_grant() {
    // The client's and the server's clocks are the machine's: a token read
    // between two client readings lies between them (1 ms for rounding).
    const SLACK_US: i64 = 1_000;
    let server = RedisServer::start();
    let mut c = server.conn();
    let within = |c: &mut redis::Connection, key: &str, offset_us: i64| {
        let before = now_us() + offset_us;
        let token = fresh_token(c, key);
        let after = now_us() + offset_us;
        assert!(
            before - SLACK_US <= token && token <= after + SLACK_US,
            "{key}: token {token} not within [{before}, {after}] (offset {offset_us} µs)"
        );
        token
    };
    for round in 0..5 {
        within(&mut c, &format!("k{round}"), 0);
    }
    set_wall_offset(&mut c, DAY_US / 1000);
    let ahead = within(&mut c, "ahead", DAY_US);
    set_wall_offset(&mut c, 0);
    assert_eq!(fresh_token(&mut c, "back"), ahead + 1);
}

#[test]
fn a_floor_raises_the_counter_and_replies_it() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let before = fresh_token(&mut c, "k");
    // 0 raises nothing: the reply is the counter, the last token issued.
    assert_eq!(floor(&mut c, 0), before);
    let target = now_us() + HOUR_US;
    assert_eq!(floor(&mut c, target), target);
    // Again, or lower: accepted, the counter stays.
    assert_eq!(floor(&mut c, target), target);
    assert_eq!(floor(&mut c, target - 10), target);
    assert_eq!(floor(&mut c, 1), target);
    // Every later token is above the floor though the clock is an hour
    // behind it, and the counter follows the grants.
    let next = fresh_token(&mut c, "k");
    assert_eq!(next, target + 1);
    assert_eq!(floor(&mut c, 0), next);
    // No key was made or touched.
    assert_eq!(dbsize(&mut c), 0);
    assert!(!server.log().contains("panicked"));
}

#[test]
fn a_floor_too_far_ahead_or_malformed_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let plain_before = now_us();
    run(&mut c, &["SET", "plain", "v"]).unwrap();
    let far = now_us() + DAY_US + HOUR_US;
    let err = error_of(&mut c, &["LOCK.FLOOR", &far.to_string()]);
    assert!(
        err.starts_with("ERR floor is more than 24 h ahead of this node's wall clock: at most "),
        "{err}"
    );
    for bad in [
        "-1",
        "x",
        "",
        "01",
        "1.5",
        "9007199254740992",
        "99999999999999999999",
    ] {
        assert_eq!(
            error_of(&mut c, &["LOCK.FLOOR", bad]),
            "ERR floor must be an integer between 0 and 9007199254740991 (2^53-1)",
            "{bad:?}"
        );
    }
    for args in [&["LOCK.FLOOR"][..], &["LOCK.FLOOR", "1", "2"]] {
        assert_eq!(
            error_of(&mut c, args),
            arity_error("lock.floor"),
            "{args:?}"
        );
    }
    // Nothing was raised: the next token is about the clock, not a day
    // ahead, and the counter reads so.
    let token = fresh_token(&mut c, "k");
    assert!(
        token >= plain_before && token < plain_before + HOUR_US,
        "{token}"
    );
    assert_eq!(floor(&mut c, 0), token);
    // The bound follows the node's wall clock (here moved two days ahead):
    // the same floor is accepted then.
    set_wall_offset(&mut c, 2 * DAY_US / 1000);
    assert_eq!(floor(&mut c, far), far);
    set_wall_offset(&mut c, 0);
    assert_eq!(fresh_token(&mut c, "k"), far + 1);
    // The key that is not a lock was never touched.
    assert_eq!(
        run(&mut c, &["GET", "plain"]).unwrap(),
        Value::BulkString(b"v".to_vec())
    );
    assert_eq!(dbsize(&mut c), 1);
    assert!(!server.log().contains("panicked"));
}

#[test]
fn a_floor_reaches_the_replica_which_keeps_it_when_promoted() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.replicate_from(&primary);
    let mut p = primary.conn();
    let target = now_us() + HOUR_US;
    assert_eq!(floor(&mut p, target), target);
    wait_replicated(&primary, &replica);
    let mut r = replica.conn();
    // A replica refuses it from clients, like every write.
    let err = error_of(&mut r, &["LOCK.FLOOR", "1"]);
    assert!(err.starts_with("READONLY"), "{err}");
    replica.promote();
    let mut r = replica.conn();
    assert_eq!(floor(&mut r, 0), target);
    assert_eq!(fresh_token(&mut r, "k"), target + 1);
}

#[test]
fn a_floor_survives_the_aof_a_rewrite_and_kill_9() {
    let mut server = RedisServer::start_with(aof_options("no"));
    let mut c = server.conn();
    let first = now_us() + HOUR_US;
    assert_eq!(floor(&mut c, first), first);
    // Replayed from the AOF (the LOCK.COUNTER effect) after kill -9.
    server.kill9();
    server.restart();
    let mut c = server.conn();
    assert_eq!(floor(&mut c, 0), first);
    // A higher floor, then a rewrite without the preamble: no lock carries
    // the counter, so only the rewrite's counter record keeps it.
    let second = first + HOUR_US;
    assert_eq!(floor(&mut c, second), second);
    rewrite_aof(&mut c);
    server.kill9();
    server.restart();
    let mut c = server.conn();
    assert_eq!(fresh_token(&mut c, "k"), second + 1);
    assert!(!server.log().contains("panicked"));
}
