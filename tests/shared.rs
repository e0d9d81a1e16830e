//! Shared locks and semaphores (`LOCK.ACQUIRE … SHARED [LIMIT n]`): several
//! holders, each with its own holds, token and lease; writers are not
//! overtaken by readers; waiters are admitted in FIFO order, shared ones
//! together up to the limit; every holder is replicated, persisted and
//! restored.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::thread::JoinHandle;

use redis::{Connection, Value};

use common::*;

/// `LOCK.ACQUIRE key owner ttl SHARED [LIMIT n] [extra…]`: the token, nil,
/// or the error line.
fn shared(
    c: &mut Connection,
    key: &str,
    owner: &str,
    ttl: u64,
    limit: Option<u32>,
) -> Result<Option<i64>, String> {
    let ttl = ttl.to_string();
    let limit = limit.map(|n| n.to_string());
    let mut args = vec!["LOCK.ACQUIRE", key, owner, &ttl, "SHARED"];
    if let Some(limit) = &limit {
        args.extend(["LIMIT", limit]);
    }
    run(c, &args)
        .map(|v| int_or_nil(v, "LOCK.ACQUIRE SHARED"))
        .map_err(|e| error_line(&e))
}

/// The value of field `name` in a reply's field/value pairs.
fn field(pairs: &[(String, Value)], name: &str) -> Value {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {name} in {pairs:?}"))
}

/// One holder as `LOCK.HOLDERS` lists it: owner, holds, token, pttl.
#[derive(Debug, PartialEq)]
struct Holder {
    owner: String,
    holds: i64,
    token: i64,
    pttl: i64,
}

fn holders(c: &mut Connection, key: &str) -> Vec<Holder> {
    let reply = run(c, &["LOCK.HOLDERS", key]).unwrap();
    let Value::Array(items) = reply else {
        panic!("LOCK.HOLDERS: {reply:?}")
    };
    items
        .into_iter()
        .map(|item| {
            let pairs = info_pairs(item).unwrap();
            let get = |name: &str| field(&pairs, name);
            let int = |name: &str| match get(name) {
                Value::Int(n) => n,
                other => panic!("{name}: {other:?}"),
            };
            let owner = match get("owner") {
                Value::BulkString(b) => String::from_utf8(b).unwrap(),
                other => panic!("owner: {other:?}"),
            };
            Holder {
                owner,
                holds: int("holds"),
                token: int("token"),
                pttl: int("pttl"),
            }
        })
        .collect()
}

fn owners(c: &mut Connection, key: &str) -> Vec<String> {
    holders(c, key).into_iter().map(|h| h.owner).collect()
}

/// `LOCK.INFO` of a shared lock: mode, limit (None for nil), holders,
/// waiters.
fn shared_info(c: &mut Connection, key: &str) -> (String, Option<i64>, i64, i64) {
    let pairs = info_pairs(run(c, &["LOCK.INFO", key]).unwrap()).expect("held");
    let get = |name: &str| field(&pairs, name);
    let names: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["mode", "limit", "holders", "waiters"]);
    let mode = match get("mode") {
        Value::BulkString(b) => String::from_utf8(b).unwrap(),
        other => panic!("mode: {other:?}"),
    };
    let int = |v: Value| match v {
        Value::Int(n) => Some(n),
        Value::Nil => None,
        other => panic!("{other:?}"),
    };
    (
        mode,
        int(get("limit")),
        int(get("holders")).unwrap(),
        int(get("waiters")).unwrap(),
    )
}

/// Clients queued for `key` (`LOCK.INFO`'s `waiters`, either mode; 0
/// without a lock).
fn queued(c: &mut Connection, key: &str) -> i64 {
    let Some(pairs) = info_pairs(run(c, &["LOCK.INFO", key]).unwrap()) else {
        return 0;
    };
    match pairs.iter().find(|(k, _)| k == "waiters") {
        Some((_, Value::Int(n))) => *n,
        other => panic!("waiters: {other:?}"),
    }
}

/// A client blocked in `LOCK.ACQUIRE … [SHARED [LIMIT n]] WAIT timeout`
/// on its own connection (`mode`: `None` exclusive, `Some(limit)` shared):
/// the token or nil. Returns once it is queued.
fn spawn_wait(
    server: &RedisServer,
    key: &str,
    owner: &str,
    ttl: u64,
    mode: Option<Option<u32>>,
    timeout: u64,
) -> JoinHandle<Option<i64>> {
    let mut probe = server.conn();
    let before = queued(&mut probe, key);
    let mut c = server.conn();
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key).arg(owner).arg(ttl);
    if let Some(limit) = mode {
        cmd.arg("SHARED");
        if let Some(limit) = limit {
            cmd.arg("LIMIT").arg(limit);
        }
    }
    cmd.arg("WAIT").arg(timeout);
    let handle = std::thread::spawn(move || {
        let reply: Value = cmd.query(&mut c).unwrap();
        int_or_nil(reply, "LOCK.ACQUIRE WAIT")
    });
    assert!(
        wait_until(SOON, || queued(&mut probe, key) == before + 1),
        "the waiter never queued"
    );
    handle
}

#[test]
fn readers_share_a_lock_and_a_writer_gets_it_after_the_last_reader() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let r1 = shared(&mut c, "doc", "r1", 60_000, None).unwrap().unwrap();
    let r2 = shared(&mut c, "doc", "r2", 60_000, None).unwrap().unwrap();
    assert!(r2 > r1, "every fresh grant gets a greater token");
    assert_eq!(acquire(&mut c, "doc", "writer", 60_000), None);
    assert_eq!(shared_info(&mut c, "doc"), ("shared".into(), None, 2, 0));
    let listed = holders(&mut c, "doc");
    assert_eq!(
        listed
            .iter()
            .map(|h| (h.owner.as_str(), h.holds, h.token))
            .collect::<Vec<_>>(),
        [("r1", 1, r1), ("r2", 1, r2)]
    );
    assert!(listed.iter().all(|h| h.pttl > 50_000));
    // Re-entry: r1's own token, one more hold.
    assert_eq!(shared(&mut c, "doc", "r1", 60_000, None), Ok(Some(r1)));
    assert_eq!(holders(&mut c, "doc")[0].holds, 2);
    assert_eq!(release_all(&mut c, "doc", "r1"), Some(0));
    assert!(exists(&mut c, "doc"), "r2 still holds it");
    assert_eq!(owners(&mut c, "doc"), ["r2"]);
    assert_eq!(acquire(&mut c, "doc", "writer", 60_000), None);
    assert_eq!(release(&mut c, "doc", "r2"), Some(0));
    assert!(!exists(&mut c, "doc"), "the key goes with its last holder");
    let w = acquire(&mut c, "doc", "writer", 60_000).unwrap();
    assert!(w > r2);
    // An exclusive lock's INFO keeps its fields and adds its mode.
    let pairs = info_pairs(run(&mut c, &["LOCK.INFO", "doc"]).unwrap()).unwrap();
    assert_eq!(
        pairs[5],
        ("mode".into(), Value::BulkString(b"exclusive".to_vec()))
    );
    assert_eq!(shared(&mut c, "doc", "r3", 1_000, None), Ok(None));
    assert_eq!(holders(&mut c, "none"), []);
    assert_eq!(lock_stat(&mut c, "lock_shared_grants"), 2);
}

#[test]
fn a_semaphore_hands_out_its_permits_and_refuses_past_them() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let mut tokens = Vec::new();
    for owner in ["a", "b", "c"] {
        tokens.push(
            shared(&mut c, "pool", owner, 60_000, Some(3))
                .unwrap()
                .unwrap(),
        );
    }
    assert!(tokens.windows(2).all(|w| w[1] > w[0]));
    assert_eq!(shared(&mut c, "pool", "d", 60_000, Some(3)), Ok(None));
    assert_eq!(lock_stat(&mut c, "lock_semaphore_full"), 1);
    assert_eq!(
        shared_info(&mut c, "pool"),
        ("shared".into(), Some(3), 3, 0)
    );
    // EXTEND, FENCE and RELEASE act on the caller's own permit.
    assert_eq!(extend(&mut c, "pool", "b", 5_000), 1);
    let pttls: Vec<i64> = holders(&mut c, "pool").iter().map(|h| h.pttl).collect();
    assert!(
        pttls[1] <= 5_000 && pttls[0] > 50_000 && pttls[2] > 50_000,
        "{pttls:?}"
    );
    let raised = tokens[2] + 1_000;
    assert_eq!(fence(&mut c, "pool", "a", Some(raised)), Some(raised));
    assert_eq!(fence(&mut c, "pool", "b", None), Some(tokens[1]));
    assert_eq!(release(&mut c, "pool", "b"), Some(0));
    let d = shared(&mut c, "pool", "d", 60_000, Some(3))
        .unwrap()
        .unwrap();
    assert!(
        d > raised,
        "a fresh permit's token is above every earlier one"
    );
    assert_eq!(owners(&mut c, "pool"), ["a", "c", "d"]);
    let first_two = run(&mut c, &["LOCK.HOLDERS", "pool", "COUNT", "2"]).unwrap();
    assert!(matches!(first_two, Value::Array(ref items) if items.len() == 2));
}

#[test]
fn wrong_modes_and_limits_are_errors_that_change_nothing() {
    let server = RedisServer::start();
    let mut c = server.conn();
    shared(&mut c, "s", "r", 60_000, Some(2)).unwrap().unwrap();
    acquire(&mut c, "x", "w", 60_000).unwrap();
    let before = digest(&mut c);
    for (args, error) in [
        (
            vec!["LOCK.ACQUIRE", "s", "r", "1000"],
            "ERR owner holds this lock in shared mode",
        ),
        (
            vec!["LOCK.ACQUIRE", "x", "w", "1000", "SHARED"],
            "ERR owner holds this lock in exclusive mode",
        ),
        (
            vec!["LOCK.ACQUIRE", "s", "r", "1000", "SHARED", "LIMIT", "3"],
            "ERR LIMIT 3 does not match the lock's LIMIT 2",
        ),
        (
            vec!["LOCK.ACQUIRE", "s", "other", "1000", "SHARED"],
            "ERR LIMIT (none) does not match the lock's LIMIT 2",
        ),
        (
            vec!["LOCK.ACQUIRE", "s", "other", "1000", "LIMIT", "2"],
            "ERR LIMIT requires SHARED",
        ),
        (
            vec!["LOCK.ACQUIRE", "s", "other", "1000", "SHARED", "LIMIT", "0"],
            "ERR LIMIT must be an integer between 1 and 10000 (lock.max-holders)",
        ),
        (
            vec!["LOCK.ACQUIRE", "s", "other", "1000", "SHARED", "SHARED"],
            SYNTAX,
        ),
        (vec!["LOCK.HOLDERS", "s", "COUNT", "0"], "ERR COUNT must be a positive integer"),
        (vec!["LOCK.DROP", "s", "r"], "ERR LOCK.DROP is internal: it is accepted only from a primary or while loading the AOF"),
        (
            vec!["LOCK.APPLY", "s", "r", "1", "5", "1", "SHARED", "2"],
            "ERR LOCK.APPLY is internal: it is accepted only from a primary or while loading the AOF",
        ),
    ] {
        assert_eq!(error_of(&mut c, &args), error, "{args:?}");
    }
    assert_eq!(digest(&mut c), before, "an error changed the dataset");
    // lock.max-holders bounds LIMIT and the readers of a lock without one.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("lock.max-holders")
        .arg(2)
        .query::<()>(&mut c)
        .unwrap();
    assert_eq!(
        error_of(
            &mut c,
            &["LOCK.ACQUIRE", "t", "a", "1000", "SHARED", "LIMIT", "3"]
        ),
        "ERR LIMIT must be an integer between 1 and 2 (lock.max-holders)"
    );
    for owner in ["a", "b"] {
        shared(&mut c, "t", owner, 60_000, None).unwrap().unwrap();
    }
    assert_eq!(shared(&mut c, "t", "c", 60_000, None), Ok(None));
}

#[test]
fn a_reader_never_overtakes_a_queued_writer() {
    let server = RedisServer::start();
    let mut c = server.conn();
    shared(&mut c, "doc", "r1", 60_000, None).unwrap().unwrap();
    let writer = spawn_wait(&server, "doc", "writer", 60_000, None, 10_000);
    // A reader arriving now would starve the writer: it is refused, and
    // with WAIT it queues behind the writer.
    assert_eq!(shared(&mut c, "doc", "r2", 60_000, None), Ok(None));
    let reader = spawn_wait(&server, "doc", "r2", 60_000, Some(None), 10_000);
    assert_eq!(shared_info(&mut c, "doc").3, 2);
    assert_eq!(release(&mut c, "doc", "r1"), Some(0));
    let w = writer.join().unwrap().expect("the writer is granted first");
    assert_eq!(held(&mut c, "doc").owner, b"writer");
    assert_eq!(queued(&mut c, "doc"), 1);
    assert_eq!(release(&mut c, "doc", "writer"), Some(0));
    let r2 = reader.join().unwrap().expect("then the reader");
    assert!(r2 > w);
    assert_eq!(owners(&mut c, "doc"), ["r2"]);
}

/// R R W R R queued behind a writer: the first two readers together, then
/// the writer, then the last two together; tokens in that order.
#[test]
fn a_mixed_queue_is_admitted_in_runs_of_readers_around_the_writer() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "doc", "first", 60_000).unwrap();
    let r1 = spawn_wait(&server, "doc", "r1", 60_000, Some(None), 10_000);
    let r2 = spawn_wait(&server, "doc", "r2", 60_000, Some(None), 10_000);
    let w = spawn_wait(&server, "doc", "w", 60_000, None, 10_000);
    let r3 = spawn_wait(&server, "doc", "r3", 60_000, Some(None), 10_000);
    let r4 = spawn_wait(&server, "doc", "r4", 60_000, Some(None), 10_000);
    assert_eq!(release(&mut c, "doc", "first"), Some(0));
    let (t1, t2) = (r1.join().unwrap().unwrap(), r2.join().unwrap().unwrap());
    assert!(t2 > t1);
    assert_eq!(owners(&mut c, "doc"), ["r1", "r2"]);
    assert_eq!(queued(&mut c, "doc"), 3, "r3 and r4 stay behind the writer");
    assert_eq!(release(&mut c, "doc", "r1"), Some(0));
    assert_eq!(
        queued(&mut c, "doc"),
        3,
        "the writer waits for the last reader"
    );
    assert_eq!(release(&mut c, "doc", "r2"), Some(0));
    let tw = w.join().unwrap().unwrap();
    assert!(tw > t2);
    assert_eq!(held(&mut c, "doc").owner, b"w");
    assert_eq!(queued(&mut c, "doc"), 2);
    assert_eq!(release(&mut c, "doc", "w"), Some(0));
    let (t3, t4) = (r3.join().unwrap().unwrap(), r4.join().unwrap().unwrap());
    assert!(t4 > t3 && t3 > tw);
    assert_eq!(owners(&mut c, "doc"), ["r3", "r4"]);
    assert_eq!(queued(&mut c, "doc"), 0);
}

#[test]
fn waiting_readers_are_admitted_together_up_to_the_limit() {
    let server = RedisServer::start();
    let mut c = server.conn();
    acquire(&mut c, "pool", "x", 60_000).unwrap();
    let a = spawn_wait(&server, "pool", "a", 60_000, Some(Some(2)), 10_000);
    let b = spawn_wait(&server, "pool", "b", 60_000, Some(Some(2)), 10_000);
    let d = spawn_wait(&server, "pool", "d", 60_000, Some(Some(2)), 10_000);
    let w = spawn_wait(&server, "pool", "w", 60_000, None, 10_000);
    assert_eq!(release(&mut c, "pool", "x"), Some(0));
    let (a, b) = (a.join().unwrap().unwrap(), b.join().unwrap().unwrap());
    assert!(b > a);
    assert_eq!(owners(&mut c, "pool"), ["a", "b"]);
    // One hand-off made the lock and admitted both: each holder counted
    // once (the lease sweep compares this count with the index).
    assert_eq!(lock_stat(&mut c, "lock_holders"), 2);
    assert_eq!(
        queued(&mut c, "pool"),
        2,
        "d waits for a permit, w behind it"
    );
    assert_eq!(release(&mut c, "pool", "a"), Some(0));
    let d = d.join().unwrap().unwrap();
    assert!(d > b);
    assert_eq!(owners(&mut c, "pool"), ["b", "d"]);
    release(&mut c, "pool", "b");
    release(&mut c, "pool", "d");
    assert!(w.join().unwrap().unwrap() > d);
    assert_eq!(held(&mut c, "pool").owner, b"w");
    assert_eq!(lock_stat(&mut c, "lock_holders"), 1);
}

/// `owner`'s lease on `key` ends 1 ms from now (`LOCK.EXTEND key owner 1`).
fn shorten(c: &mut Connection, key: &str, owner: &str) {
    assert_eq!(
        run(c, &["LOCK.EXTEND", key, owner, "1"]).unwrap(),
        Value::Int(1),
        "{owner} holds {key}"
    );
}

#[test]
fn each_holder_lease_ends_on_its_own_and_hands_off() {
    let server = RedisServer::start();
    let mut c = server.conn();
    // Leases of a minute, shortened to 1 ms when the test is ready for them
    // to end (a short lease from the start could end before a slow server
    // queued the waiter or admitted the second reader).
    shared(&mut c, "pool", "short", 60_000, Some(1))
        .unwrap()
        .unwrap();
    let next = spawn_wait(&server, "pool", "next", 60_000, Some(Some(1)), 0);
    shorten(&mut c, "pool", "short");
    // Nobody touches the key: the timer ends the short lease and admits the
    // next waiter.
    let token = next.join().unwrap().expect("granted at the lease end");
    assert_eq!(holders(&mut c, "pool")[0].token, token);
    shared(&mut c, "doc", "brief", 60_000, None)
        .unwrap()
        .unwrap();
    shared(&mut c, "doc", "long", 60_000, None)
        .unwrap()
        .unwrap();
    shorten(&mut c, "doc", "brief");
    assert!(wait_until(SOON, || owners(&mut c, "doc") == ["long"]));
    // The pool's lease ended with the whole lock (its only holder); the
    // brief reader's while another held on.
    assert_eq!(lock_stat(&mut c, "lock_expired"), 1);
    assert!(wait_until(SOON, || lock_stat(
        &mut c,
        "lock_holders_expired"
    ) == 1));
    assert!(exists(&mut c, "doc"));
}

#[test]
fn every_holder_reaches_a_replica_and_survives_a_restart() {
    let primary = RedisServer::start_with(aof_options("no"));
    let replica =
        RedisServer::start_with(ServerOptions::default().args(["--repl-diskless-sync-delay", "0"]));
    let mut p = primary.conn();
    for owner in ["a", "b", "c"] {
        shared(&mut p, "pool", owner, 600_000, Some(5))
            .unwrap()
            .unwrap();
    }
    shared(&mut p, "doc", "r", 600_000, None).unwrap().unwrap();
    replica.replicate_from(&primary);
    // After the full sync: joins, re-entries, a departure, by the stream.
    shared(&mut p, "pool", "d", 600_000, Some(5))
        .unwrap()
        .unwrap();
    shared(&mut p, "pool", "a", 600_000, Some(5))
        .unwrap()
        .unwrap();
    release(&mut p, "pool", "b");
    wait_replicated(&primary, &replica);
    let mut r = replica.conn();
    let identity = |c: &mut Connection, key: &str| {
        holders(c, key)
            .into_iter()
            .map(|h| (h.owner, h.holds, h.token))
            .collect::<Vec<_>>()
    };
    let pool = identity(&mut p, "pool");
    assert_eq!(
        pool.iter().map(|h| h.0.as_str()).collect::<Vec<_>>(),
        ["a", "c", "d"]
    );
    assert_eq!(identity(&mut r, "pool"), pool);
    assert_eq!(
        shared_info(&mut r, "pool"),
        ("shared".into(), Some(5), 3, 0)
    );
    assert_eq!(identity(&mut r, "doc"), identity(&mut p, "doc"));
    assert_eq!(digest(&mut r), digest(&mut p));
    // DUMP/RESTORE carries every holder.
    let dump: Vec<u8> = redis::cmd("DUMP").arg("pool").query(&mut p).unwrap();
    redis::cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(dump)
        .query::<()>(&mut p)
        .unwrap();
    assert_eq!(identity(&mut p, "copy"), pool);
    // An AOF rewritten without the RDB preamble, then a restart.
    drop(r);
    redis::cmd("BGREWRITEAOF").query::<()>(&mut p).unwrap();
    assert!(wait_until(SOON, || {
        info_section(&mut p, "persistence").get("aof_rewrite_in_progress") == Some(&"0".to_string())
            && info_section(&mut p, "persistence").get("aof_rewrite_scheduled")
                == Some(&"0".to_string())
    }));
    let mut primary = primary;
    primary.restart();
    let mut p = primary.conn();
    assert_eq!(identity(&mut p, "pool"), pool);
    assert_eq!(
        shared_info(&mut p, "pool"),
        ("shared".into(), Some(5), 3, 0)
    );
    let fresh = shared(&mut p, "pool", "e", 600_000, Some(5))
        .unwrap()
        .unwrap();
    assert!(pool.iter().all(|h| fresh > h.2));
}

#[test]
fn a_shared_lock_saved_renamed_or_copied_behaves_like_an_exclusive_one() {
    let mut server = RedisServer::start();
    let mut c = server.conn();
    let one: i64 = {
        shared(&mut c, "m1", "a", 600_000, Some(4))
            .unwrap()
            .unwrap();
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg("m1")
            .query(&mut c)
            .unwrap()
    };
    for owner in ["b", "c", "d"] {
        shared(&mut c, "m1", owner, 600_000, Some(4))
            .unwrap()
            .unwrap();
    }
    let four: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("m1")
        .query(&mut c)
        .unwrap();
    assert!(
        four > one,
        "MEMORY USAGE counts every holder: {one} then {four}"
    );
    // COPY is refused as for an exclusive lock.
    let copy = run(&mut c, &["COPY", "m1", "m2"]);
    assert!(copy.is_err(), "COPY of a shared lock: {copy:?}");
    // RENAME carries every holder, and the leases still end by themselves.
    shared(&mut c, "brief", "x", 60_000, None).unwrap().unwrap();
    shared(&mut c, "brief", "y", 60_000, None).unwrap().unwrap();
    run(&mut c, &["RENAME", "brief", "renamed"]).unwrap();
    assert_eq!(owners(&mut c, "renamed"), ["x", "y"]);
    shorten(&mut c, "renamed", "x");
    shorten(&mut c, "renamed", "y");
    assert!(
        wait_until(SOON, || !exists(&mut c, "renamed")),
        "a renamed shared lock outlived its leases"
    );
    // An RDB save and a restart keep the holders, the limit and the tokens.
    let before = holders(&mut c, "m1");
    run(&mut c, &["SAVE"]).unwrap();
    drop(c);
    server.restart();
    let mut c = server.conn();
    let after = holders(&mut c, "m1");
    assert_eq!(
        after
            .iter()
            .map(|h| (&h.owner, h.holds, h.token))
            .collect::<Vec<_>>(),
        before
            .iter()
            .map(|h| (&h.owner, h.holds, h.token))
            .collect::<Vec<_>>()
    );
    assert_eq!(shared_info(&mut c, "m1"), ("shared".into(), Some(4), 4, 0));
    assert_eq!(
        shared(&mut c, "m1", "e", 600_000, Some(4)),
        Ok(None),
        "still full"
    );
}

/// How a waiter at the head of a queue leaves it without being granted.
#[derive(Clone, Copy, Debug)]
enum Leaves {
    /// Its `WAIT` timeout passes (1 s).
    TimesOut,
    /// Its connection is killed (`CLIENT KILL ID`).
    Disconnects,
    /// `CLIENT UNBLOCK id TIMEOUT` / `ERROR`.
    UnblockedTimeout,
    UnblockedError,
}

/// A writer (exclusive `LOCK.ACQUIRE … WAIT`) queued at the head of
/// `key`'s queue on its own connection, with its client id; its reply is
/// the token, nil or the error line. Returns once it is queued.
fn spawn_queued_writer(
    server: &RedisServer,
    key: &str,
    timeout: u64,
) -> (i64, JoinHandle<Result<Option<i64>, String>>) {
    let mut probe = server.conn();
    let before = queued(&mut probe, key);
    let mut c = server.conn();
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut c).unwrap();
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key)
        .arg("writer")
        .arg(600_000)
        .arg("WAIT")
        .arg(timeout);
    let handle = std::thread::spawn(move || {
        cmd.query::<Value>(&mut c)
            .map(|v| int_or_nil(v, "LOCK.ACQUIRE WAIT"))
            .map_err(|e| error_line(&e))
    });
    assert!(
        wait_until(SOON, || queued(&mut probe, key) == before + 1),
        "the writer never queued"
    );
    (id, handle)
}

/// A shared lock (`limit`: `None`) or a semaphore held by `holder` for ten
/// minutes, a writer queued at the head, a reader queued behind it (the
/// writer would starve otherwise). When the writer leaves the queue
/// (`leaves`) without being granted, the reader, compatible with the
/// holder, is granted at once: while the holder still holds the lock, and
/// long before its own 20 s wait ends.
fn a_reader_behind_a_writer_that_leaves_is_admitted(limit: Option<u32>, leaves: Leaves) {
    let what = format!("{limit:?} {leaves:?}");
    let server = RedisServer::start();
    let mut c = server.conn();
    let holder = shared(&mut c, "doc", "holder", 600_000, limit)
        .unwrap()
        .unwrap();
    let timeout = match leaves {
        Leaves::TimesOut => 1_000,
        _ => 0,
    };
    let (writer_id, writer) = spawn_queued_writer(&server, "doc", timeout);
    assert_eq!(shared(&mut c, "doc", "reader", 600_000, limit), Ok(None));
    let reader = spawn_wait(&server, "doc", "reader", 600_000, Some(limit), 20_000);
    assert_eq!(queued(&mut c, "doc"), 2, "{what}");
    let unblock = |c: &mut Connection, how: &str| {
        let n: i64 = redis::cmd("CLIENT")
            .arg("UNBLOCK")
            .arg(writer_id)
            .arg(how)
            .query(c)
            .unwrap();
        assert_eq!(n, 1, "{what}");
    };
    match leaves {
        Leaves::TimesOut => {}
        Leaves::Disconnects => {
            let n: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(writer_id)
                .query(&mut c)
                .unwrap();
            assert_eq!(n, 1, "{what}");
        }
        Leaves::UnblockedTimeout => unblock(&mut c, "TIMEOUT"),
        Leaves::UnblockedError => unblock(&mut c, "ERROR"),
    }
    let written = writer.join().unwrap();
    match leaves {
        Leaves::TimesOut | Leaves::UnblockedTimeout => assert_eq!(written, Ok(None), "{what}"),
        Leaves::UnblockedError => assert!(
            written.as_ref().is_err_and(|e| e.contains("UNBLOCKED")),
            "{what}: {written:?}"
        ),
        // The client's connection is gone: its reply is an I/O error.
        Leaves::Disconnects => assert!(written.is_err(), "{what}: {written:?}"),
    }
    let token = reader.join().unwrap();
    let token = token.unwrap_or_else(|| {
        panic!("{what}: the reader behind the writer was never admitted (its wait timed out)")
    });
    assert!(token > holder, "{what}");
    assert_eq!(
        owners(&mut c, "doc"),
        ["holder", "reader"],
        "{what}: the reader joined the holder"
    );
    assert_eq!(queued(&mut c, "doc"), 0, "{what}");
}

#[test]
fn a_reader_behind_a_writer_that_times_out_is_admitted() {
    a_reader_behind_a_writer_that_leaves_is_admitted(None, Leaves::TimesOut);
    a_reader_behind_a_writer_that_leaves_is_admitted(Some(3), Leaves::TimesOut);
}

#[test]
fn a_reader_behind_a_writer_that_disconnects_is_admitted() {
    a_reader_behind_a_writer_that_leaves_is_admitted(None, Leaves::Disconnects);
    a_reader_behind_a_writer_that_leaves_is_admitted(Some(3), Leaves::Disconnects);
}

#[test]
fn a_reader_behind_a_writer_that_is_unblocked_is_admitted() {
    for leaves in [Leaves::UnblockedTimeout, Leaves::UnblockedError] {
        a_reader_behind_a_writer_that_leaves_is_admitted(None, leaves);
        a_reader_behind_a_writer_that_leaves_is_admitted(Some(3), leaves);
    }
}
