//! Leases: they run on the monotonic clock, end on time by themselves with a
//! keyspace event, and wall-clock steps neither end nor lengthen them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::Value;

const HOUR_MS: i64 = 3_600_000;

/// Receives the next pub/sub message as (channel, payload).
fn next_message(pubsub: &mut redis::PubSub<'_>) -> (String, String) {
    let msg = pubsub
        .get_message()
        .unwrap_or_else(|e| panic!("no keyspace event arrived: {e}"));
    (
        msg.get_channel_name().to_string(),
        msg.get_payload::<String>().unwrap(),
    )
}

fn notify(conn: &mut redis::Connection, classes: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg(classes)
        .query(conn)
        .unwrap();
}

#[test]
fn an_ended_lease_removes_the_key_by_itself_with_an_expired_event() {
    let server = RedisServer::start();
    let mut c = server.conn();
    notify(&mut c, "Ex");
    let mut sub = server.conn();
    let mut pubsub = sub.as_pubsub();
    pubsub.set_read_timeout(Some(SOON)).unwrap();
    pubsub.subscribe("__keyevent@0__:expired").unwrap();

    let (token, grant) = timed(|| acquire(&mut c, "k", "alice", 300));
    token.unwrap();
    let (channel, key) = next_message(&mut pubsub);
    let at = Instant::now();
    assert_eq!(
        (channel.as_str(), key.as_str()),
        ("__keyevent@0__:expired", "k")
    );
    assert!(
        at - grant.sent >= Duration::from_millis(300),
        "the lease ended early: {:?}",
        at - grant.sent
    );
    assert!(
        !exists(&mut c, "k"),
        "the key is gone once the event is out"
    );
    assert_eq!(lock_info(&mut c, "k"), None);
    assert_eq!(lock_stat(&mut c, "lock_expired"), 1);
    assert_eq!(lock_stat(&mut c, "lock_held"), 0);
    let next = acquire(&mut c, "k", "bob", 60_000).unwrap();
    assert!(next > token.unwrap());
}

#[test]
fn many_leases_end_by_themselves_and_are_counted() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let (_, grant) = timed(|| {
        for i in 0..40u64 {
            acquire(&mut c, &format!("k{i}"), "alice", 100 + i * 5).unwrap();
        }
    });
    acquire(&mut c, "keeper", "alice", 600_000).unwrap();
    assert_eq!(lock_stat(&mut c, "lock_held"), 41);
    let ok = wait_until(Duration::from_millis(300) + SOON, || dbsize(&mut c) == 1);
    assert!(
        ok,
        "{} keys left, expected only the long lease",
        dbsize(&mut c)
    );
    assert!(grant.sent.elapsed() >= Duration::from_millis(100));
    assert!(exists(&mut c, "keeper"));
    assert_eq!(lock_stat(&mut c, "lock_expired"), 40);
    assert_eq!(lock_stat(&mut c, "lock_held"), 1);
}

#[test]
fn module_commands_emit_keyspace_events() {
    let server = RedisServer::start();
    let mut c = server.conn();
    notify(&mut c, "Ed");
    let mut sub = server.conn();
    let mut pubsub = sub.as_pubsub();
    pubsub.set_read_timeout(Some(SOON)).unwrap();
    pubsub.psubscribe("__keyevent@0__:lock.*").unwrap();
    let mut expect = |event: &str, key: &str| {
        let (channel, payload) = next_message(&mut pubsub);
        assert_eq!(
            (channel.as_str(), payload.as_str()),
            (format!("__keyevent@0__:{event}").as_str(), key)
        );
    };

    let token = acquire(&mut c, "k", "alice", 60_000).unwrap();
    expect("lock.acquire", "k");
    // A refused command emits nothing: the next event is the marker's.
    assert_eq!(acquire(&mut c, "k", "bob", 60_000), None);
    assert_eq!(release(&mut c, "k", "bob"), None);
    assert_eq!(extend(&mut c, "k", "bob", 1_000), 0);
    assert_eq!(fence(&mut c, "k", "bob", Some(token + 1_000)), None);
    acquire(&mut c, "marker1", "alice", 60_000).unwrap();
    expect("lock.acquire", "marker1");
    acquire(&mut c, "k", "alice", 60_000).unwrap();
    expect("lock.acquire", "k");
    assert_eq!(extend(&mut c, "k", "alice", 60_000), 1);
    expect("lock.extend", "k");
    assert_eq!(
        fence(&mut c, "k", "alice", Some(token + 1_000)),
        Some(token + 1_000)
    );
    expect("lock.fence", "k");
    assert_eq!(release(&mut c, "k", "alice"), Some(1));
    expect("lock.release", "k");
    assert_eq!(release(&mut c, "k", "alice"), Some(0));
    expect("lock.release", "k");
    acquire(&mut c, "marker2", "alice", 60_000).unwrap();
    expect("lock.acquire", "marker2");
}

#[test]
fn the_wallclock_offset_knob_reads_back_and_moves_the_module_clock() {
    let server = RedisServer::start();
    let mut c = server.conn();
    assert_eq!(
        run(&mut c, &["LOCK.DEBUG", "WALLCLOCK-OFFSET"]).unwrap(),
        Value::Int(0)
    );
    set_wall_offset(&mut c, -HOUR_MS);
    assert_eq!(
        run(&mut c, &["LOCK.DEBUG", "WALLCLOCK-OFFSET"]).unwrap(),
        Value::Int(-HOUR_MS)
    );
    // The first token on a fresh node is its wall clock: the offset shows.
    let back = acquire(&mut c, "a", "alice", 60_000).unwrap();
    let now = now_us();
    assert!(
        back <= now - HOUR_MS * 1000,
        "token {back} ignores the -1 h offset (now {now})"
    );
    set_wall_offset(&mut c, HOUR_MS);
    assert_eq!(
        run(&mut c, &["LOCK.DEBUG", "WALLCLOCK-OFFSET"]).unwrap(),
        Value::Int(HOUR_MS)
    );
    let before = now_us();
    let ahead = acquire(&mut c, "b", "alice", 60_000).unwrap();
    assert!(
        ahead >= before + HOUR_MS * 1000,
        "token {ahead} ignores the +1 h offset (now {before})"
    );
    set_wall_offset(&mut c, 0);
    assert_eq!(
        run(&mut c, &["LOCK.DEBUG", "WALLCLOCK-OFFSET"]).unwrap(),
        Value::Int(0)
    );
}

/// Holds a lease across a wall-clock step of `step_ms` and checks that it
/// runs on real elapsed time: pttl consistent, contenders refused, and the
/// key gone on time, neither before nor (much) after.
fn lease_survives_wall_step(step_ms: i64) {
    let server = RedisServer::start();
    let mut c = server.conn();
    let ttl = 1_500;
    let (token, grant) = timed(|| acquire(&mut c, "k", "alice", ttl));
    let token = token.unwrap();
    set_wall_offset(&mut c, step_ms);

    let (info, query) = timed(|| held(&mut c, "k"));
    assert_pttl(info.pttl, ttl, grant, query, 1, "after the wall step");
    assert_eq!(
        acquire(&mut c, "k", "bob", 60_000),
        None,
        "the step must not end the lease"
    );
    assert_eq!(held(&mut c, "k").owner, b"alice");

    let gone = wait_gone(&mut c, "k", Duration::from_millis(ttl));
    assert!(
        gone - grant.sent >= Duration::from_millis(ttl),
        "the lease ended early: {:?}",
        gone - grant.sent
    );

    // Tokens keep increasing whichever way the clock went.
    let next = acquire(&mut c, "k", "bob", 60_000).unwrap();
    assert!(
        next > token,
        "{next} after {token} with a wall step of {step_ms} ms"
    );
    let other = acquire(&mut c, "other", "bob", 60_000).unwrap();
    assert!(other > next);
}

#[test]
fn a_forward_wall_clock_step_does_not_end_a_lease() {
    lease_survives_wall_step(HOUR_MS);
}

#[test]
fn a_backward_wall_clock_step_does_not_lengthen_a_lease() {
    lease_survives_wall_step(-HOUR_MS);
}

#[test]
fn a_wall_step_does_not_change_extend_or_reentry_leases() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "alice", 60_000).unwrap();
    set_wall_offset(&mut c, -HOUR_MS);
    let (reply, grant) = timed(|| extend(&mut c, "k", "alice", 2_000));
    assert_eq!(reply, 1);
    set_wall_offset(&mut c, HOUR_MS);
    let (info, query) = timed(|| held(&mut c, "k"));
    assert_pttl(info.pttl, 2_000, grant, query, 1, "extend under wall steps");
    let (again, grant) = timed(|| acquire(&mut c, "k", "alice", 3_000));
    assert!(again.is_some());
    set_wall_offset(&mut c, -2 * HOUR_MS);
    let (info, query) = timed(|| held(&mut c, "k"));
    assert_pttl(
        info.pttl,
        3_000,
        grant,
        query,
        1,
        "re-entry under wall steps",
    );
}

#[test]
fn an_extended_or_renewed_lease_outlives_its_old_deadline() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "extended", "alice", 200).unwrap();
    acquire(&mut c, "renewed", "alice", 200).unwrap();
    assert_eq!(extend(&mut c, "extended", "alice", 600_000), 1);
    assert_eq!(
        acquire(&mut c, "renewed", "alice", 600_000).map(|_| ()),
        Some(())
    );
    // A marker whose lease ends after both old deadlines.
    acquire(&mut c, "marker", "alice", 200).unwrap();
    wait_gone(&mut c, "marker", Duration::from_millis(200));
    assert_eq!(held(&mut c, "extended").owner, b"alice");
    assert_eq!(held(&mut c, "renewed").holds, 2);
}

#[test]
fn a_lease_shortened_by_extend_ends_at_its_new_end() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "alice", 600_000).unwrap();
    assert_eq!(extend(&mut c, "k", "alice", 100), 1);
    wait_gone(&mut c, "k", Duration::from_millis(100));
    assert!(acquire(&mut c, "k", "bob", 1_000).is_some());
}

#[test]
fn a_stale_deadline_never_removes_a_newer_lock_or_another_type() {
    let server = RedisServer::start();
    let mut c = server.conn();
    // Released, then taken by another owner with a long lease.
    acquire(&mut c, "released", "alice", 200).unwrap();
    release(&mut c, "released", "alice").unwrap();
    acquire(&mut c, "released", "bob", 600_000).unwrap();
    // Deleted with DEL, then taken again.
    acquire(&mut c, "deleted", "alice", 200).unwrap();
    let _: i64 = redis::cmd("DEL").arg("deleted").query(&mut c).unwrap();
    acquire(&mut c, "deleted", "bob", 600_000).unwrap();
    // Overwritten by a string.
    acquire(&mut c, "overwritten", "alice", 200).unwrap();
    let _: () = redis::cmd("SET")
        .arg("overwritten")
        .arg("v")
        .query(&mut c)
        .unwrap();

    acquire(&mut c, "marker", "alice", 200).unwrap();
    wait_gone(&mut c, "marker", Duration::from_millis(200));
    assert_eq!(held(&mut c, "released").owner, b"bob");
    assert_eq!(held(&mut c, "deleted").owner, b"bob");
    let value: String = redis::cmd("GET").arg("overwritten").query(&mut c).unwrap();
    assert_eq!(
        value, "v",
        "the module removed a string that replaced its lock"
    );
}

#[test]
fn a_renamed_lock_still_ends_by_itself() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "alice", 300).unwrap();
    let _: () = redis::cmd("RENAME")
        .arg("k")
        .arg("renamed")
        .query(&mut c)
        .unwrap();
    acquire(&mut c, "k", "bob", 600_000).unwrap();
    assert_eq!(held(&mut c, "renamed").owner, b"alice");
    wait_gone(&mut c, "renamed", Duration::from_millis(300));
    assert_eq!(
        held(&mut c, "k").owner,
        b"bob",
        "the old name's deadline must not end the new lock"
    );
}

/// A grant skips arming the timer when a firing is armed by its lease's
/// end (`timer::fires_by`): a short lease taken while the timer waits for
/// a long one (armed for at most a minute ahead) must arm it earlier, for a
/// new lock, for one taken again after its release, and for a shared
/// holder joining readers with long leases.
#[test]
fn a_short_lease_taken_while_the_timer_waits_for_a_long_one_ends_on_time() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "long", "alice", HOUR_MS as u64).unwrap();
    acquire(&mut c, "short", "alice", 300).unwrap();
    wait_gone(&mut c, "short", Duration::from_millis(300));
    // Taken again after a release: a fresh entry in the index.
    acquire(&mut c, "again", "alice", HOUR_MS as u64).unwrap();
    release(&mut c, "again", "alice").unwrap();
    acquire(&mut c, "again", "bob", 300).unwrap();
    wait_gone(&mut c, "again", Duration::from_millis(300));
    // A reader joining readers with long leases.
    let shared = |c: &mut redis::Connection, owner: &str, ttl: i64| -> Value {
        redis::cmd("LOCK.ACQUIRE")
            .arg("shared")
            .arg(owner)
            .arg(ttl)
            .arg("SHARED")
            .query(c)
            .unwrap()
    };
    assert!(matches!(shared(&mut c, "r1", HOUR_MS), Value::Int(_)));
    assert!(matches!(shared(&mut c, "r2", 300), Value::Int(_)));
    // Only the timer ends a holder nobody touches (a read settles nothing).
    let ended = wait_until(Duration::from_millis(300) + SOON, || {
        lock_stat(&mut c, "lock_holders_expired") == 1
    });
    assert!(ended, "the short reader's lease did not end on time");
    assert_eq!(held(&mut c, "long").owner, b"alice");
}

#[test]
fn a_lease_of_one_millisecond_ends() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "alice", 1).unwrap();
    wait_gone(&mut c, "k", Duration::from_millis(1));
    assert!(acquire(&mut c, "k", "bob", 1_000).is_some());
}

/// Locks that arrive under a name without any event the module hears
/// (the module listens to no generic keyspace event): the lease sweep finds
/// them and ends them on time, with nobody touching them.
#[test]
fn moved_and_restored_locks_still_end_by_themselves() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "moved", "alice", 300).unwrap();
    let _: i64 = redis::cmd("MOVE")
        .arg("moved")
        .arg(1)
        .query(&mut c)
        .unwrap();
    let restored_token = acquire(&mut c, "source", "bob", 300).unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP").arg("source").query(&mut c).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("restored")
        .arg(0)
        .arg(&dump)
        .query(&mut c)
        .unwrap();
    let mut db1 = server.conn();
    let _: () = redis::cmd("SELECT").arg(1).query(&mut db1).unwrap();
    // A waiter on the restored lock's name is granted when its lease ends.
    let waiter = spawn_waiter(&server, "restored", "carol", 10_000, 0);
    wait_gone(&mut db1, "moved", Duration::from_millis(300));
    let token = waiter
        .join()
        .unwrap()
        .expect("granted at the restored lease's end");
    assert_eq!(held(&mut c, "restored").token, token);
    assert!(token > restored_token);
    // moved, source and restored all ended by themselves.
    assert_eq!(lock_stat(&mut c, "lock_expired"), 3);
}

/// A `MONOTONIC-JUMP` that would carry the lease clock past what the lease
/// index files exactly (2^44 − 1 ms, less the farthest deadline) is refused
/// and moves nothing: past it every deadline was filed at 2^44 − 1, already
/// due, and filed again at each firing, so the timer spun.
#[test]
fn a_jump_past_the_lease_index_range_is_refused() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "o", 60_000).unwrap();
    let runs = lock_stat(&mut c, "lock_timer_runs");
    for jump in ["17592186044416", "17592186044415", "9223372036854775807"] {
        let error = error_of(&mut c, &["LOCK.DEBUG", "MONOTONIC-JUMP", jump]);
        assert!(
            error.starts_with("ERR the jump would carry the lease clock past 17276739644415 ms"),
            "{jump}: {error}"
        );
    }
    // The clock did not move: the lease runs on, and a new one is filed.
    assert!(held(&mut c, "k").pttl > 50_000);
    acquire(&mut c, "k2", "o", 60_000).unwrap();
    assert_eq!(extend(&mut c, "k", "o", 60_000), 1);
    assert!(held(&mut c, "k2").pttl > 50_000);
    // Nothing is due for a minute: the timer has nothing to do (a spinning
    // one fired some 180 times a second here).
    let fired = lock_stat(&mut c, "lock_timer_runs") - runs;
    assert!(fired < 100, "the timer fired {fired} times");
}

/// `LOCK.DEBUG MONOTONIC-RATE` / `MONOTONIC-JUMP`: the lease clock runs
/// fast, or jumps forward, and leases end that much earlier in real time
/// (what the client's drift allowance is for); bad values are refused and
/// change nothing.
#[test]
fn a_fast_or_jumping_lease_clock_ends_leases_early() {
    let server = RedisServer::start();
    let mut c = server.conn();
    assert_eq!(
        run(&mut c, &["LOCK.DEBUG", "MONOTONIC-RATE"]).unwrap(),
        Value::Int(0)
    );
    for bad in [
        &["LOCK.DEBUG", "MONOTONIC-RATE", "-1000000"][..],
        &["LOCK.DEBUG", "MONOTONIC-RATE", "x"][..],
        &["LOCK.DEBUG", "MONOTONIC-JUMP", "-5"][..],
    ] {
        assert!(error_of(&mut c, bad).starts_with("ERR the "), "{bad:?}");
    }
    assert_eq!(
        run(&mut c, &["LOCK.DEBUG", "MONOTONIC-RATE"]).unwrap(),
        Value::Int(0)
    );

    // A jump past the lease's end ends it at once.
    assert!(acquire(&mut c, "jumped", "o", 60_000).is_some());
    run(&mut c, &["LOCK.DEBUG", "MONOTONIC-JUMP", "60001"]).unwrap();
    assert!(wait_until(SOON, || !exists(&mut c, "jumped")));

    // Twice as fast: a 3 s lease ends after about 1.5 s of real time.
    run(&mut c, &["LOCK.DEBUG", "MONOTONIC-RATE", "1000000"]).unwrap();
    assert_eq!(
        run(&mut c, &["LOCK.DEBUG", "MONOTONIC-RATE"]).unwrap(),
        Value::Int(1_000_000)
    );
    let granted = Instant::now();
    assert!(acquire(&mut c, "fast", "o", 3_000).is_some());
    assert!(wait_until(SOON, || !exists(&mut c, "fast")));
    let lasted = granted.elapsed();
    assert!(
        lasted < Duration::from_millis(2_700),
        "a 3 s lease on a clock twice as fast lasted {lasted:?}"
    );
    // Back to the real rate: a lease lasts its TTL again (the clock kept
    // its jumps: it never goes back).
    run(&mut c, &["LOCK.DEBUG", "MONOTONIC-RATE", "0"]).unwrap();
    let granted = Instant::now();
    assert!(acquire(&mut c, "normal", "o", 600).is_some());
    assert!(wait_until(SOON, || !exists(&mut c, "normal")));
    assert!(granted.elapsed() >= Duration::from_millis(590));
}

/// Every command of one `EXEC` or script sees one instant, as every command
/// there sees one server time for key expiry: a lease ends for the whole
/// transaction or for none of it. The lease clock jumps past the lease's
/// end between two reads of one `EXEC`: both still see the lock, another
/// owner is refused it, and the next command (a new instant) sees it gone.
/// Before the module kept one instant per unit, the second read saw no
/// lock (the host fuzzer's memcheck pass once saw `LOCK.INFO` and
/// `LOCK.HOLDERS` of one `MULTI` disagree). Redis 7.0 does not tell modules
/// its frozen time: there each command reads the clock, which this test
/// shows too (docs/src/behaviour.md says so).
#[test]
fn a_lease_ends_for_a_whole_transaction_or_for_none_of_it() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let frozen = tells_frozen_time(&mut c);

    acquire(&mut c, "k", "o", 60_000).unwrap();
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("LOCK.INFO")
        .arg("k")
        .cmd("LOCK.DEBUG")
        .arg("MONOTONIC-JUMP")
        .arg("60001")
        .cmd("LOCK.INFO")
        .arg("k")
        .cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("other")
        .arg("60000")
        .cmd("LOCK.HOLDERS")
        .arg("k")
        .query(&mut c)
        .unwrap();
    let before = parse_info(replies[0].clone()).expect("held at the start");
    let after = parse_info(replies[2].clone());
    if frozen {
        let after = after.expect("the lease ended inside the transaction");
        assert_eq!(after.identity(), before.identity());
        assert_eq!(after.pttl, before.pttl, "one instant: the same pttl");
        assert_eq!(replies[3], Value::Nil, "another owner got the lock");
        assert_ne!(replies[4], Value::Array(vec![]), "{:?}", replies[4]);
    } else {
        assert!(after.is_none(), "Redis 7.0 reads the clock per command");
    }
    // A new unit reads the clock afresh: the lease has ended.
    let later: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("LOCK.INFO")
        .arg("k")
        .query(&mut c)
        .unwrap();
    if frozen {
        assert_eq!(later, vec![Value::Nil]);
        assert!(wait_until(SOON, || !exists(&mut c, "k")));
    }

    // The same in a script.
    acquire(&mut c, "s", "o", 60_000).unwrap();
    let seen: Vec<i64> = redis::cmd("EVAL")
        .arg(
            "local a = redis.call('LOCK.INFO', KEYS[1]) \
             redis.call('LOCK.DEBUG', 'MONOTONIC-JUMP', '60001') \
             local b = redis.call('LOCK.INFO', KEYS[1]) \
             return {a and 1 or 0, b and 1 or 0}",
        )
        .arg(1)
        .arg("s")
        .query(&mut c)
        .unwrap();
    assert_eq!(seen, if frozen { vec![1, 1] } else { vec![1, 0] });
    assert!(
        lock_info(&mut c, "s").is_none(),
        "a new instant after the script"
    );
}
