//! The life of a blocked `LOCK.ACQUIRE … WAIT` client against Redis's own
//! ways of ending it: killed, `CLIENT UNBLOCK`, demotion, a lowered
//! `lock.max-ttl`, a replica. Each of these used to crash the server, leave
//! a lock held by a client that was gone, or spin a timer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use redis::{Connection, Value};

/// A connection blocked in `LOCK.ACQUIRE key owner ttl WAIT 0`, and its
/// client id. The reply is never read: the test ends the wait itself.
fn blocked_waiter(server: &RedisServer, key: &str, owner: &str, ttl: u64) -> (Connection, i64) {
    let mut probe = server.conn();
    let before = waiters(&mut probe, key);
    let mut conn = server.conn();
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut conn).unwrap();
    let packed = redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .arg("WAIT")
        .arg(0)
        .get_packed_command();
    conn.send_packed_command(&packed).unwrap();
    assert!(
        wait_until(SOON, || waiters(&mut probe, key) == before + 1),
        "{owner} was not queued"
    );
    (conn, id)
}

/// `MULTI; LOCK.RELEASE key holder; <end>; EXEC`: the release grants the
/// lock to the waiter and `end` frees or unblocks that waiter in the same
/// event-loop turn, before Redis delivers the grant.
fn release_and_end_in_one_turn(c: &mut Connection, key: &str, holder: &str, end: &[String]) {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("LOCK.RELEASE")
        .arg(key)
        .arg(holder)
        .cmd(&end[0])
        .arg(&end[1..]);
    let _: Value = pipe.query(c).unwrap();
}

fn ping(c: &mut Connection) -> bool {
    redis::cmd("PING")
        .query::<String>(c)
        .is_ok_and(|p| p == "PONG")
}

/// `rounds`, divided by `REDIS_LOCK_ROUNDS_SCALE` (set by `make sanitize`,
/// whose servers run under memcheck, many times slower).
fn scaled(rounds: usize) -> usize {
    let scale = std::env::var("REDIS_LOCK_ROUNDS_SCALE")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    (rounds / scale).max(1)
}

/// Repeats: holder acquires, a waiter blocks, one MULTI releases (granting
/// the waiter) and ends the waiter with `end(id)`. The server must stay up,
/// and the grant nobody received must be taken back at once, every time.
fn grant_then_end_waiter(end: impl Fn(i64) -> Vec<String>, rounds: usize) {
    let rounds = scaled(rounds);
    let server = RedisServer::start();
    let mut c = server.conn();
    for round in 0..rounds {
        assert!(acquire(&mut c, "k", "A", 30_000).is_some(), "round {round}");
        let (_waiter, id) = blocked_waiter(&server, "k", "B", 30_000);
        release_and_end_in_one_turn(&mut c, "k", "A", &end(id));
        assert!(ping(&mut c), "the server died in round {round}");
        assert!(
            wait_until(SOON, || lock_info(&mut c, "k").is_none()),
            "round {round}: the lock stayed with a waiter that never got the reply: {:?}",
            lock_info(&mut c, "k")
        );
    }
    let mut c = server.conn();
    assert_eq!(
        lock_stat(&mut c, "lock_wait_grants_undelivered"),
        i64::try_from(rounds).unwrap()
    );
    assert_eq!(lock_stat(&mut c, "lock_waiting"), 0);
}

#[test]
fn a_waiter_killed_as_it_is_granted_neither_crashes_nor_keeps_the_lock() {
    grant_then_end_waiter(
        |id| vec!["CLIENT".into(), "KILL".into(), "ID".into(), id.to_string()],
        1_000,
    );
}

#[test]
fn client_unblock_error_as_it_is_granted_neither_crashes_nor_keeps_the_lock() {
    grant_then_end_waiter(
        |id| {
            vec![
                "CLIENT".into(),
                "UNBLOCK".into(),
                id.to_string(),
                "ERROR".into(),
            ]
        },
        300,
    );
}

#[test]
fn client_unblock_timeout_as_it_is_granted_leaves_no_orphan_lock() {
    // Redis skips the timeout callback of a client the module has already
    // unblocked, then detaches the client: the grant's reply is dropped and
    // the client gets none (a server behaviour no module can change). What
    // the module guarantees: the server stays up, and a grant that was not
    // delivered is taken back, so the lock is either held by a waiter that
    // got its token or free.
    let server = RedisServer::start();
    let mut c = server.conn();
    // Each undelivered round waits out a read timeout: fewer rounds.
    let rounds = scaled(50);
    let rounds_i64 = i64::try_from(rounds).unwrap();
    let mut delivered = 0;
    for round in 0..rounds {
        assert!(acquire(&mut c, "k", "A", 30_000).is_some(), "round {round}");
        let (mut waiter, id) = blocked_waiter(&server, "k", "B", 30_000);
        release_and_end_in_one_turn(
            &mut c,
            "k",
            "A",
            &[
                "CLIENT".into(),
                "UNBLOCK".into(),
                id.to_string(),
                "TIMEOUT".into(),
            ],
        );
        assert!(ping(&mut c), "the server died in round {round}");
        waiter
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        match waiter.recv_response() {
            Ok(Value::Int(token)) => {
                delivered += 1;
                assert_eq!(held(&mut c, "k").token, token, "round {round}");
                assert_eq!(release(&mut c, "k", "B"), Some(0));
            }
            Ok(Value::Nil) | Err(_) => assert!(
                wait_until(SOON, || lock_info(&mut c, "k").is_none()),
                "round {round}: B never heard of a grant, yet holds the lock"
            ),
            Ok(other) => panic!("round {round}: {other:?}"),
        }
    }
    let undelivered = lock_stat(&mut c, "lock_wait_grants_undelivered");
    assert_eq!(delivered + undelivered, rounds_i64);
}

#[test]
fn a_killed_waiter_that_was_not_granted_leaves_the_queue() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "A", 30_000).unwrap();
    let (_w1, id1) = blocked_waiter(&server, "k", "B", 30_000);
    let next = spawn_waiter(&server, "k", "C", 30_000, 0);
    let _: Value = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id1)
        .query(&mut c)
        .unwrap();
    assert!(wait_until(SOON, || waiters(&mut c, "k") == 1));
    assert_eq!(release(&mut c, "k", "A"), Some(0));
    let token = next.join().unwrap().expect("C is next once B is gone");
    assert_eq!(held(&mut c, "k").token, token);
    assert_eq!(lock_stat(&mut c, "lock_wait_grants_undelivered"), 0);
}

/// A waiter (`owner`, `ttl`) queued behind A while `setting` is lowered to
/// `value`: at its grant it is refused with `error`, and the waiter behind it
/// is granted (a refused waiter does not hold up the queue).
fn refused_at_grant_time(owner: &str, ttl: u64, (setting, value): (&str, u64), error: String) {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "A", 30_000).unwrap();
    let handle = spawn_waiter_or_error(&server, "k", owner, ttl);
    let next = spawn_waiter(&server, "k", "C", 30_000, 0);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(setting)
        .arg(value)
        .query(&mut c)
        .unwrap();
    assert_eq!(release(&mut c, "k", "A"), Some(0));
    assert_eq!(handle.join().unwrap(), Err(error));
    let token = next.join().unwrap().expect("C is granted");
    let info = held(&mut c, "k");
    assert_eq!((info.owner.as_slice(), info.token), (&b"C"[..], token));
}

#[test]
fn a_waiter_is_checked_against_the_max_ttl_in_force_when_it_is_granted() {
    refused_at_grant_time("B", 86_400_000, ("lock.max-ttl", 60_000), ttl_error(60_000));
}

#[test]
fn a_waiter_is_checked_against_the_max_owner_bytes_in_force_when_it_is_granted() {
    refused_at_grant_time(
        &"w".repeat(200),
        30_000,
        ("lock.max-owner-bytes", 100),
        owner_error(100),
    );
}

/// A grant whose lease ends before its reply goes out (here the lease
/// clock is moved past it in the same transaction as the release that
/// granted it) is answered with an error that says so, never a token.
#[test]
fn a_grant_whose_lease_ends_before_the_reply_says_so() {
    let (_server, mut c, reply) =
        grant_then_in_one_turn(&["LOCK.DEBUG", "MONOTONIC-JUMP", "30001"]);
    assert_eq!(
        reply,
        Err("ERR the lease granted to this waiter ended before the reply: acquire again (with a longer ttl-ms)".to_string())
    );
    assert!(wait_until(SOON, || !exists(&mut c, "k")));
    assert_eq!(lock_stat(&mut c, "lock_waiting"), 0);
    assert_eq!(lock_stat(&mut c, "lock_lease_index"), 0);
}

/// A holds `k` and W waits for it; `then` runs in the same transaction as
/// A's release, which grants W: the server, a connection to it, and W's
/// reply (token or error line).
fn grant_then_in_one_turn(then: &[&str]) -> (RedisServer, Connection, Result<Option<i64>, String>) {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "A", 30_000).unwrap();
    let handle = spawn_waiter_or_error(&server, "k", "W", 30_000);
    let _: Value = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("k")
        .arg("A")
        .cmd(then[0])
        .arg(&then[1..])
        .query(&mut c)
        .unwrap();
    let reply = handle.join().unwrap();
    (server, c, reply)
}

#[test]
fn wait_on_a_replica_is_a_plain_acquisition() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.replicate_from(&primary);
    let mut c = replica.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("replica-read-only")
        .arg("no")
        .query(&mut c)
        .unwrap();
    let mut p = primary.conn();
    acquire(&mut p, "k", "A", 30_000).unwrap();
    wait_replicated(&primary, &replica);
    // Held (through the primary): nil at once, not a wait that no grant
    // could ever end on a replica.
    let reply: Option<i64> = redis::cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("B")
        .arg(1_000)
        .arg("WAIT")
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert_eq!(reply, None);
    assert_eq!(lock_stat(&mut c, "lock_waits"), 0);
    assert_eq!(lock_stat(&mut c, "lock_waiting"), 0);
}

#[test]
fn a_demoted_node_with_pending_grants_does_not_spin_its_timer() {
    let other = RedisServer::start();
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "k", "A", 30_000).unwrap();
    let (_waiter, _id) = blocked_waiter(&server, "k", "B", 30_000);
    // DEL leaves a grant pending for the timer, and the node is demoted in
    // the same turn: the waiter is unblocked by Redis, nothing is granted.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("DEL")
        .arg("k")
        .cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(other.port());
    let _: Value = pipe.query(&mut c).unwrap();
    let mut c = server.conn();
    assert!(wait_until(SOON, || lock_stat(&mut c, "lock_waiting") == 0));
    let before = lock_stat(&mut c, "lock_timer_runs");
    // Half a second of an idle replica: a spinning 1 ms timer would fire
    // hundreds of times; the replica recheck fires at most every 100 ms.
    let start = std::time::Instant::now();
    assert!(!wait_until(Duration::from_millis(500), || {
        lock_stat(&mut c, "lock_timer_runs") > before + 10
    }));
    assert!(start.elapsed() >= Duration::from_millis(500));
    assert_eq!(lock_stat(&mut c, "lock_wait_grants"), 0);
}

#[test]
fn waiters_of_the_same_owner_behind_its_grant_reenter_and_others_keep_their_place() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "job", "H", 30_000).unwrap();
    let x1 = spawn_waiter(&server, "job", "X", 30_000, 0);
    let x2 = spawn_waiter(&server, "job", "X", 30_000, 0);
    let y = spawn_waiter(&server, "job", "Y", 30_000, 0);
    assert_eq!(release(&mut c, "job", "H"), Some(0));
    let t1 = x1.join().unwrap().expect("X's first waiter is granted");
    let t2 = x2.join().unwrap().expect("X's second waiter re-enters");
    assert_eq!(t1, t2, "a re-entry keeps the token");
    let info = held(&mut c, "job");
    assert_eq!(
        (info.owner.as_slice(), info.holds, info.token),
        (&b"X"[..], 2, t1)
    );
    assert_eq!(waiters(&mut c, "job"), 1, "Y keeps its place");
    assert_eq!(release(&mut c, "job", "X"), Some(1));
    assert_eq!(waiters(&mut c, "job"), 1);
    assert_eq!(release(&mut c, "job", "X"), Some(0));
    let ty = y.join().unwrap().expect("Y is next");
    assert!(ty > t1);
}

#[test]
fn a_grant_whose_lock_is_gone_before_the_reply_is_answered_with_an_error() {
    // The release grants W, and the DEL in the same transaction removes the
    // new lock before Redis delivers W's reply: W must not get a dead token.
    let (_server, mut c, reply) = grant_then_in_one_turn(&["DEL", "k"]);
    assert_eq!(
        reply,
        Err("ERR the lock granted to this waiter was removed before the reply (evicted or deleted): acquire again".to_string())
    );
    assert!(!exists(&mut c, "k"));
    assert_eq!(lock_stat(&mut c, "lock_waiting"), 0);
}
