//! Server-side fair waiting: `LOCK.ACQUIRE … WAIT` against a real server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use redis::{Connection, Value};

mod common;
use common::{
    acquire, lock_info, lock_stat, release, spawn_waiter, wait_replicated, wait_until, waiters,
    RedisServer, SOON,
};

const PATIENCE: std::time::Duration = SOON;

fn info_lock(conn: &mut Connection, field: &str) -> i64 {
    lock_stat(conn, &format!("lock_{field}"))
}

fn owner(conn: &mut Connection, key: &str) -> Option<String> {
    lock_info(conn, key).map(|info| String::from_utf8(info.owner).unwrap())
}

fn held_token(conn: &mut Connection, key: &str) -> Option<i64> {
    lock_info(conn, key).map(|info| info.token)
}

/// `owner`, which holds `job` (and has its reply, if it waited), shortens
/// its lease to end 1 ms from now: the lease ends as any lease does, and no
/// server, however slow, can end it before the test is ready for it.
fn shorten(conn: &mut Connection, owner: &str) {
    let left: i64 = redis::cmd("LOCK.EXTEND")
        .arg("job")
        .arg(owner)
        .arg(1)
        .query(conn)
        .unwrap();
    assert_eq!(left, 1, "{owner} holds the lock");
}

#[test]
fn twenty_waiters_are_granted_in_arrival_order() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let first: i64 = redis::cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg("holder")
        .arg(30_000)
        .query(&mut conn)
        .unwrap();
    let waiters: Vec<_> = (0..20)
        .map(|i| spawn_waiter(&server, "job", &format!("w{i}"), 30_000, 0))
        .collect();
    let runs = info_lock(&mut conn, "timer_runs");
    let mut current = "holder".to_string();
    let mut last_token = first;
    for (i, handle) in waiters.into_iter().enumerate() {
        let left: i64 = redis::cmd("LOCK.RELEASE")
            .arg("job")
            .arg(&current)
            .query(&mut conn)
            .unwrap();
        assert_eq!(left, 0);
        let expected = format!("w{i}");
        let token = handle
            .join()
            .unwrap()
            .expect("a waiter is granted, not timed out");
        assert_eq!(
            owner(&mut conn, "job").as_deref(),
            Some(expected.as_str()),
            "grant {i} out of order"
        );
        assert_eq!(
            held_token(&mut conn, "job"),
            Some(token),
            "the reply is the holder's token"
        );
        assert!(token > last_token, "every grant gets a higher token");
        last_token = token;
        current = expected;
    }
    assert_eq!(info_lock(&mut conn, "wait_grants"), 20);
    assert_eq!(info_lock(&mut conn, "waiting"), 0);
    // A release serves the queue itself: its deletion leaves no grant for
    // the timer (which fired once per hand-off, re-armed twice, to find the
    // queue served). Every lease here runs for 30 s: nothing else is due.
    let fired = info_lock(&mut conn, "timer_runs") - runs;
    assert!(fired < 5, "the timer fired {fired} times for 20 hand-offs");
}

/// A lease that ends hands the lock on in the firing that ends it: the
/// deletion leaves no grant pending for a second firing (as the release
/// above leaves none for any firing). Each lease is granted for a minute
/// and shortened to 1 ms once its waiter has its reply (`shorten`).
#[test]
fn a_hand_off_at_lease_end_fires_the_timer_once() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    acquire(&mut conn, "job", "holder", 30_000).unwrap();
    let waiters: Vec<_> = (0..10)
        .map(|i| spawn_waiter(&server, "job", &format!("w{i}"), 60_000, 0))
        .collect();
    assert_eq!(release(&mut conn, "job", "holder"), Some(0));
    let runs = info_lock(&mut conn, "timer_runs");
    let mut last_token = 0;
    for (i, handle) in waiters.into_iter().enumerate() {
        let token = handle
            .join()
            .unwrap()
            .expect("every waiter is granted in turn");
        assert!(token > last_token);
        last_token = token;
        assert_eq!(owner(&mut conn, "job"), Some(format!("w{i}")));
        assert_eq!(held_token(&mut conn, "job"), Some(token));
        // w{i} has its reply: it shortens its lease to end in 1 ms, and
        // the timer ends it.
        shorten(&mut conn, &format!("w{i}"));
    }
    assert!(wait_until(PATIENCE, || owner(&mut conn, "job").is_none()));
    assert!(wait_until(PATIENCE, || info_lock(&mut conn, "expired") == 10));
    // Ten lease ends, a firing each, and a few more allowed for a timer
    // that fires a millisecond early (without the fix, 18 to 20: the
    // deletion left a pending grant that a second firing found served).
    let fired = info_lock(&mut conn, "timer_runs") - runs;
    assert!(
        (10..=15).contains(&fired),
        "the timer fired {fired} times for 10 lease ends"
    );
    assert_eq!(info_lock(&mut conn, "wait_grants"), 10);
    assert_eq!(info_lock(&mut conn, "lease_index"), 0);
}

#[test]
fn a_lease_end_hands_the_lock_to_the_next_waiter_untouched() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    assert!(acquire(&mut conn, "job", "short", 30_000).is_some());
    let waiter = spawn_waiter(&server, "job", "next", 30_000, 0);
    // Once the waiter is queued, the holder's lease is made to end in 1 ms
    // (a short lease from the start could end before a slow server queued
    // the waiter). Nobody touches the key after: the expiry timer must end
    // the lease and grant.
    shorten(&mut conn, "short");
    let token = waiter.join().unwrap().expect("granted at lease end");
    assert_eq!(owner(&mut conn, "job").as_deref(), Some("next"));
    assert_eq!(held_token(&mut conn, "job"), Some(token));
    assert_eq!(info_lock(&mut conn, "expired"), 1);
}

/// Locks handed to waiters carry their leases: a hand-off that grants one
/// owner twice (a re-entry behind the head), then the next owner at that
/// lease's end, leaves each lease filed, and nobody touches the key.
#[test]
fn locks_handed_to_waiters_end_by_themselves() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    assert!(acquire(&mut conn, "job", "first", 30_000).is_some());
    // Minute-long leases, shortened once each reply is in (a short lease
    // could end before a slow server's reply).
    let b1 = spawn_waiter(&server, "job", "b", 60_000, 0);
    let b2 = spawn_waiter(&server, "job", "b", 60_000, 0);
    let c = spawn_waiter(&server, "job", "c", 60_000, 0);
    assert_eq!(waiters(&mut conn, "job"), 3);
    assert_eq!(release(&mut conn, "job", "first"), Some(0));
    let token_b = b1.join().unwrap().expect("b granted");
    assert_eq!(b2.join().unwrap(), Some(token_b), "b re-entered");
    assert_eq!(owner(&mut conn, "job").as_deref(), Some("b"));
    shorten(&mut conn, "b");
    let token_c = c.join().unwrap().expect("c granted at b's lease end");
    assert!(token_c > token_b);
    shorten(&mut conn, "c");
    // Its end removes the key (an ended lease reads as absent before).
    assert!(
        wait_until(PATIENCE, || info_lock(&mut conn, "expired") == 2),
        "c's lease never ended"
    );
    let exists: i64 = redis::cmd("EXISTS").arg("job").query(&mut conn).unwrap();
    assert_eq!(exists, 0);
    assert_eq!(info_lock(&mut conn, "wait_grants"), 2);
}

#[test]
fn a_timeout_replies_nil_and_leaves_no_trace() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    assert!(acquire(&mut conn, "job", "holder", 30_000).is_some());
    // On a connection of its own, in this thread: the wait is not watched
    // for in the queue, which a slow server could end before a probe saw it.
    let mut patient = server.conn();
    let reply: Option<i64> = redis::cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg("patient")
        .arg(1_000)
        .arg("WAIT")
        .arg(100)
        .query(&mut patient)
        .unwrap();
    assert_eq!(reply, None);
    assert_eq!(waiters(&mut conn, "job"), 0);
    assert_eq!(info_lock(&mut conn, "wait_timeouts"), 1);
    assert_eq!(info_lock(&mut conn, "waiting"), 0);
    // The holder is untouched, and a release now grants nobody.
    assert_eq!(release(&mut conn, "job", "holder"), Some(0));
    let exists: i64 = redis::cmd("EXISTS").arg("job").query(&mut conn).unwrap();
    assert_eq!(exists, 0);
}

/// A waiter on a raw socket, so the test can drop the connection.
fn raw_waiter(server: &RedisServer, key: &str, owner: &str) -> TcpStream {
    let mut probe = server.conn();
    let before = waiters(&mut probe, key);
    let mut stream = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    let args = ["LOCK.ACQUIRE", key, owner, "30000", "WAIT", "0"];
    let mut command = format!("*{}\r\n", args.len());
    for arg in args {
        command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(command.as_bytes()).unwrap();
    assert!(wait_until(PATIENCE, || waiters(&mut probe, key) == before + 1));
    stream
}

#[test]
fn a_disconnected_waiter_leaves_the_queue_and_the_next_is_served() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    assert!(acquire(&mut conn, "job", "holder", 30_000).is_some());
    let gone = raw_waiter(&server, "job", "gone");
    let next = spawn_waiter(&server, "job", "next", 30_000, 0);
    drop(gone);
    assert!(
        wait_until(PATIENCE, || waiters(&mut conn, "job") == 1),
        "the disconnected waiter stayed queued"
    );
    assert_eq!(release(&mut conn, "job", "holder"), Some(0));
    assert!(next.join().unwrap().is_some());
    assert_eq!(owner(&mut conn, "job").as_deref(), Some("next"));
}

#[test]
fn client_unblock_ends_the_wait() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    assert!(acquire(&mut conn, "job", "holder", 30_000).is_some());
    for mode in ["TIMEOUT", "ERROR"] {
        let mut waiter_conn = server.conn();
        let id: i64 = redis::cmd("CLIENT")
            .arg("ID")
            .query(&mut waiter_conn)
            .unwrap();
        let handle = std::thread::spawn(move || {
            redis::cmd("LOCK.ACQUIRE")
                .arg("job")
                .arg("w")
                .arg(1000)
                .arg("WAIT")
                .arg(0)
                .query::<Option<i64>>(&mut waiter_conn)
        });
        assert!(wait_until(PATIENCE, || waiters(&mut conn, "job") == 1));
        let unblocked: i64 = redis::cmd("CLIENT")
            .arg("UNBLOCK")
            .arg(id)
            .arg(mode)
            .query(&mut conn)
            .unwrap();
        assert_eq!(unblocked, 1);
        let reply = handle.join().unwrap();
        match mode {
            "TIMEOUT" => assert_eq!(reply.unwrap(), None),
            _ => assert!(reply.unwrap_err().to_string().contains("UNBLOCKED")),
        }
        assert_eq!(waiters(&mut conn, "job"), 0);
    }
    assert_eq!(owner(&mut conn, "job").as_deref(), Some("holder"));
}

#[test]
fn deleting_or_flushing_the_key_grants_the_next_waiter() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    for wipe in ["DEL", "UNLINK", "FLUSHALL"] {
        assert!(acquire(&mut conn, "job", "holder", 30_000).is_some());
        let waiter = spawn_waiter(&server, "job", "next", 30_000, 0);
        let mut command = redis::cmd(wipe);
        if wipe != "FLUSHALL" {
            command.arg("job");
        }
        let _: Value = command.query(&mut conn).unwrap();
        assert!(
            waiter.join().unwrap().is_some(),
            "{wipe} did not grant the waiter"
        );
        assert_eq!(
            owner(&mut conn, "job").as_deref(),
            Some("next"),
            "after {wipe}"
        );
        assert_eq!(release(&mut conn, "job", "next"), Some(0));
    }
}

#[test]
fn renaming_or_moving_the_lock_away_grants_the_next_waiter() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    for (command, args) in [
        ("RENAME", vec!["job", "elsewhere"]),
        ("MOVE", vec!["job", "1"]),
    ] {
        assert!(acquire(&mut conn, "job", "holder", 30_000).is_some());
        let waiter = spawn_waiter(&server, "job", "next", 30_000, 0);
        let _: Value = redis::cmd(command).arg(&args).query(&mut conn).unwrap();
        assert!(
            waiter.join().unwrap().is_some(),
            "{command} did not grant the waiter"
        );
        assert_eq!(
            owner(&mut conn, "job").as_deref(),
            Some("next"),
            "after {command}"
        );
        assert_eq!(release(&mut conn, "job", "next"), Some(0));
    }
    // The lock that moved away is still a lock, held by its owner.
    assert_eq!(owner(&mut conn, "elsewhere").as_deref(), Some("holder"));
}

/// A free-lock grant that finds the lock taken again (another lock renamed
/// onto the name in the same transaction) puts the waiter back at the head:
/// it must still time out when it asked to.
#[test]
fn a_waiter_put_back_at_the_head_still_times_out() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    assert!(acquire(&mut conn, "job", "holder", 30_000).is_some());
    assert!(acquire(&mut conn, "other", "carol", 30_000).is_some());
    // Its timeout leaves time for a slow server to show it queued first.
    let waiter = spawn_waiter(&server, "job", "patient", 30_000, 3_000);
    let replies: Vec<Value> = redis::pipe()
        .atomic()
        .cmd("RENAME")
        .arg("job")
        .arg("elsewhere")
        .cmd("RENAME")
        .arg("other")
        .arg("job")
        .query(&mut conn)
        .unwrap();
    assert_eq!(replies.len(), 2);
    assert_eq!(
        waiter.join().unwrap(),
        None,
        "the waiter must time out, not be granted"
    );
    assert_eq!(waiters(&mut conn, "job"), 0);
    assert_eq!(info_lock(&mut conn, "wait_timeouts"), 1);
    assert_eq!(owner(&mut conn, "job").as_deref(), Some("carol"));
}

#[test]
fn wait_inside_multi_does_not_block() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    assert!(acquire(&mut conn, "job", "holder", 30_000).is_some());
    let (reply,): (Option<i64>,) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg("other")
        .arg(1000)
        .arg("WAIT")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    assert_eq!(reply, None);
    let script: Option<i64> = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], 'other', 1000, 'WAIT', 0)")
        .arg(1)
        .arg("job")
        .query(&mut conn)
        .unwrap();
    assert_eq!(script, None);
    assert_eq!(waiters(&mut conn, "job"), 0);
}

#[test]
fn a_replica_holds_the_granted_waiters_lock_with_the_same_token() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.replicate_from(&primary);
    let mut conn = primary.conn();
    assert!(acquire(&mut conn, "job", "holder", 30_000).is_some());
    let waiter = spawn_waiter(&primary, "job", "next", 30_000, 0);
    assert_eq!(release(&mut conn, "job", "holder"), Some(0));
    let token = waiter.join().unwrap().unwrap();
    wait_replicated(&primary, &replica);
    let mut replica_conn = replica.conn();
    assert_eq!(owner(&mut replica_conn, "job").as_deref(), Some("next"));
    assert_eq!(held_token(&mut replica_conn, "job"), Some(token));
    assert_eq!(
        lock_info(&mut replica_conn, "job").map(|info| info.holds),
        Some(1)
    );
}

#[test]
fn blocked_client_reads_its_own_reply_after_grant() {
    // A waiter on a raw socket sees exactly one integer reply when granted.
    let server = RedisServer::start();
    let mut conn = server.conn();
    assert!(acquire(&mut conn, "job", "holder", 30_000).is_some());
    let stream = raw_waiter(&server, "job", "raw");
    assert_eq!(release(&mut conn, "job", "holder"), Some(0));
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    let token: i64 = line
        .trim()
        .strip_prefix(':')
        .expect("an integer reply")
        .parse()
        .unwrap();
    assert_eq!(held_token(&mut conn, "job"), Some(token));
}

/// What the fuzzer found, reduced: a `WAIT` whose lock frees (its lease
/// ends) in the same event-loop turn as the wait times out. Every such call
/// must get exactly one answer, and the answer must agree with the lock: a
/// token if and only if the waiter now holds it.
///
/// Found by the command fuzzer (`tests/fuzz_commands/`). A regression
/// test: when waits used Redis-side timeouts, the lease-end
/// timer could grant the lock to the waiter (`RedisModule_UnblockClient`
/// with the token) and Redis then time the same client out before running
/// the reply callback, find it already unblocked, skip the timeout callback
/// and clear the client's handle: the waiter got NO reply while it held the
/// lock, and after a few of these redis-server 7.0 died with SIGBUS in
/// `moduleTimerHandler -> moduleReleaseTempClient -> unwatchAllKeys`. The
/// module now ends waits with its own timer, so only it unblocks a waiter.
#[test]
fn a_wait_that_times_out_as_its_lock_frees_gets_one_consistent_answer() {
    let mut server = RedisServer::start();
    let mut holder = server.conn();
    let mut wrong = Vec::new();
    for round in 0..200u64 {
        let key = format!("race:{round}");
        let (ttl, wait) = (1 + round % 5, 1 + (round / 5) % 5);
        let Ok(_token) = redis::cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg("alice")
            .arg(ttl)
            .query::<i64>(&mut holder)
        else {
            break; // the server is gone: see below
        };
        let mut waiter = server.conn();
        waiter
            .set_read_timeout(Some(std::time::Duration::from_secs(3)))
            .unwrap();
        let answer: redis::RedisResult<Option<i64>> = redis::cmd("LOCK.ACQUIRE")
            .arg(&key)
            .arg("bob")
            .arg(60_000)
            .arg("WAIT")
            .arg(wait)
            .query(&mut waiter);
        let Ok(info) = redis::cmd("LOCK.INFO")
            .arg(&key)
            .query::<Value>(&mut holder)
        else {
            break;
        };
        let bob_holds =
            matches!(&info, Value::Array(f) if f[1] == Value::BulkString(b"bob".to_vec()));
        let problem = match answer {
            Ok(Some(_)) if !bob_holds => "a token, but bob does not hold the lock",
            Ok(None) if bob_holds => "nil, but bob holds the lock",
            Err(_) if bob_holds => "no answer at all, and bob holds the lock",
            Err(_) => "no answer at all",
            Ok(_) => continue,
        };
        wrong.push(format!(
            "round {round} (lease {ttl} ms, WAIT {wait} ms): {problem}"
        ));
    }
    let crashed = !server.is_running() || server.log().contains("BUG REPORT");
    assert!(
        wrong.is_empty() && !crashed,
        "{} wrong answers{}:\n{}\n{}",
        wrong.len(),
        if crashed {
            ", then redis-server crashed"
        } else {
            ""
        },
        wrong.join("\n"),
        if crashed { server.log() } else { String::new() }
    );
}
