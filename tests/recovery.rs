//! The recovery window (`lock.recovery-ms`): for that long after the module
//! loads (or after the config is set), the node grants nothing: every new
//! lock and every re-entry is refused with `RECOVERING … N ms`, while the
//! locks it loaded from disk can still be extended, fenced and released.
//! `WAIT` acquisitions wait through the window.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use redis::{Connection, RedisError, RedisResult, Value};
use testkit::{wait_until, RedisServer, ServerOptions};

/// Long enough that no loaded machine runs out of it before the first check;
/// each test then shortens it with `CONFIG SET` to see it end by itself.
const WINDOW_MS: u64 = 120_000;
const LONG_TTL: &str = "600000";
const PATIENCE: Duration = Duration::from_secs(60);

fn cmd(conn: &mut Connection, args: &[&str]) -> RedisResult<Value> {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(conn)
}

fn int(conn: &mut Connection, args: &[&str]) -> i64 {
    match cmd(conn, args) {
        Ok(Value::Int(n)) => n,
        other => panic!("{args:?}: expected an integer, got {other:?}"),
    }
}

fn error_line(err: &RedisError) -> String {
    format!(
        "{} {}",
        err.code().unwrap_or("?"),
        err.detail().unwrap_or_default()
    )
}

/// The time left that a `RECOVERING` refusal names; panics on anything else.
fn recovering_left(result: RedisResult<Value>) -> u64 {
    let err = match result {
        Ok(value) => panic!("expected a RECOVERING error, got {value:?}"),
        Err(err) => err,
    };
    let line = error_line(&err);
    let left = line
        .strip_prefix("RECOVERING this node refuses new locks for another ")
        .and_then(|rest| rest.strip_suffix(" ms (lock.recovery-ms)"))
        .and_then(|n| n.parse::<u64>().ok());
    left.unwrap_or_else(|| panic!("not a RECOVERING error: {line:?}"))
}

fn info_lock(conn: &mut Connection, field: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg("lock").query(conn).unwrap();
    let name = format!("lock_{field}:");
    info.lines()
        .find_map(|line| line.strip_prefix(&name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in INFO lock:\n{info}"))
}

/// (owner, holds, token) of a held lock, or None.
fn lock_info(conn: &mut Connection, key: &str) -> Option<(Vec<u8>, i64, i64)> {
    match cmd(conn, &["LOCK.INFO", key]).unwrap() {
        Value::Nil => None,
        Value::Array(fields) => match fields.as_slice() {
            [_, Value::BulkString(owner), _, Value::Int(holds), _, Value::Int(token), ..] => {
                Some((owner.clone(), *holds, *token))
            }
            other => panic!("unexpected LOCK.INFO reply {other:?}"),
        },
        other => panic!("unexpected LOCK.INFO reply {other:?}"),
    }
}

fn aof_options() -> ServerOptions {
    ServerOptions::default().args(["--appendonly", "yes", "--appendfsync", "always"])
}

/// Ends the window `ms` from now: a window set at run time counts from the
/// moment it is set.
fn end_window_in(conn: &mut Connection, ms: u64) {
    let reply = cmd(
        conn,
        &["CONFIG", "SET", "lock.recovery-ms", &ms.to_string()],
    );
    assert_eq!(reply.unwrap(), Value::Okay);
}

/// Polls fresh acquisitions until one is granted; every refusal on the way
/// must be a RECOVERING error. Returns the token.
fn acquire_after_window(conn: &mut Connection, key: &str, owner: &str) -> i64 {
    let mut granted = None;
    let ended = wait_until(PATIENCE, || {
        match cmd(conn, &["LOCK.ACQUIRE", key, owner, LONG_TTL]) {
            Ok(Value::Int(token)) => {
                granted = Some(token);
                true
            }
            refused => {
                recovering_left(refused);
                false
            }
        }
    });
    assert!(ended, "the recovery window never ended");
    granted.unwrap()
}

#[test]
fn after_a_crash_the_window_refuses_new_locks_but_loaded_ones_keep_working() {
    let mut server = RedisServer::start_with(aof_options());
    let mut conn = server.conn();
    let token = int(&mut conn, &["LOCK.ACQUIRE", "held", "alice", LONG_TTL]);
    drop(conn);
    server.kill9();
    server.restart_with(aof_options().module_args(["recovery-ms", &WINDOW_MS.to_string()]));
    let mut conn = server.conn();

    // The lock came back from the AOF.
    assert_eq!(
        lock_info(&mut conn, "held"),
        Some((b"alice".to_vec(), 1, token))
    );

    // A new lock is refused, naming the time left.
    let left = recovering_left(cmd(&mut conn, &["LOCK.ACQUIRE", "fresh", "bob", "1000"]));
    assert!(left > 0 && left <= WINDOW_MS, "time left {left}");
    let reported = info_lock(&mut conn, "recovery_left_ms");
    assert!(
        reported > 0 && reported <= i64::try_from(WINDOW_MS).unwrap(),
        "lock_recovery_left_ms {reported}"
    );
    assert_eq!(lock_info(&mut conn, "fresh"), None);
    let exists = int(&mut conn, &["EXISTS", "fresh"]);
    assert_eq!(exists, 0, "a refused acquisition made a key");
    // Another owner of the loaded lock is told it is busy, as always.
    assert_eq!(
        cmd(&mut conn, &["LOCK.ACQUIRE", "held", "bob", "1000"]).unwrap(),
        Value::Nil
    );

    // The loaded lock's owner: no re-entry (it grants), but extend, fence
    // and release.
    recovering_left(cmd(&mut conn, &["LOCK.ACQUIRE", "held", "alice", LONG_TTL]));
    assert_eq!(
        lock_info(&mut conn, "held"),
        Some((b"alice".to_vec(), 1, token))
    );
    assert_eq!(
        int(&mut conn, &["LOCK.EXTEND", "held", "alice", LONG_TTL]),
        1
    );
    assert_eq!(int(&mut conn, &["LOCK.FENCE", "held", "alice"]), token);
    let raised = token + 1_000;
    assert_eq!(
        int(
            &mut conn,
            &[
                "LOCK.FENCE",
                "held",
                "alice",
                "ATLEAST",
                &raised.to_string()
            ]
        ),
        raised
    );
    assert_eq!(int(&mut conn, &["LOCK.RELEASE", "held", "alice"]), 0);
    // Released during the window, it cannot be taken again until it ends.
    recovering_left(cmd(&mut conn, &["LOCK.ACQUIRE", "held", "alice", "1000"]));

    // Once the window is over, new locks are granted, above every earlier token.
    end_window_in(&mut conn, 500);
    let fresh = acquire_after_window(&mut conn, "fresh", "bob");
    assert!(fresh > raised, "token {fresh} not above {raised}");
    assert_eq!(info_lock(&mut conn, "recovery_left_ms"), 0);
    assert!(int(&mut conn, &["LOCK.ACQUIRE", "held", "carol", LONG_TTL]) > fresh);
    assert!(!server.log().contains("panicked"));
}

#[test]
fn a_waiting_acquisition_waits_for_the_window_to_end() {
    let server =
        RedisServer::start_with(ServerOptions::default().module_args(["recovery-ms", "120000"]));
    let mut conn = server.conn();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();

    // A free key, a timeout shorter than the window: nil when it runs out.
    assert_eq!(
        cmd(
            &mut conn,
            &["LOCK.ACQUIRE", "free", "bob", "1000", "WAIT", "200"]
        )
        .unwrap(),
        Value::Nil
    );
    assert_eq!(info_lock(&mut conn, "waiting"), 0);

    // A lock held when the window opened.
    end_window_in(&mut conn, 0);
    let token = int(&mut conn, &["LOCK.ACQUIRE", "held", "alice", LONG_TTL]);
    end_window_in(&mut conn, 120_000);
    let spawn = |key: &'static str, owner: &'static str| {
        let mut waiter_conn = server.conn();
        waiter_conn
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        std::thread::spawn(move || {
            cmd(
                &mut waiter_conn,
                &["LOCK.ACQUIRE", key, owner, "1000", "WAIT", "0"],
            )
        })
    };
    // One waits for the held lock, one for a free key.
    let behind = spawn("held", "bob");
    assert!(wait_until(PATIENCE, || info_lock(&mut conn, "waiting") == 1));
    let free = spawn("free", "carol");
    assert!(wait_until(PATIENCE, || info_lock(&mut conn, "waiting") == 2));
    // Released during the window: nothing is granted (the release serves
    // the queue at once), bob keeps waiting.
    assert_eq!(int(&mut conn, &["LOCK.RELEASE", "held", "alice", "ALL"]), 0);
    assert_eq!(info_lock(&mut conn, "waiting"), 2);
    assert_eq!(lock_info(&mut conn, "held"), None);

    // The window ends: both are served, with tokens above every earlier one.
    end_window_in(&mut conn, 300);
    let granted = |answer: RedisResult<Value>| match answer {
        Ok(Value::Int(t)) => t,
        other => panic!("expected a grant after the window, got {other:?}"),
    };
    let bob = granted(behind.join().unwrap());
    let carol = granted(free.join().unwrap());
    assert!(bob > token && carol > token);
    assert_eq!(
        lock_info(&mut conn, "held"),
        Some((b"bob".to_vec(), 1, bob))
    );
    assert_eq!(
        lock_info(&mut conn, "free"),
        Some((b"carol".to_vec(), 1, carol))
    );
    assert_eq!(info_lock(&mut conn, "recovery_left_ms"), 0);
}

/// The sequence: an owner id reused across a restart that lost a
/// release and another owner's grant must not re-enter the old lock.
#[test]
fn a_reused_owner_cannot_reenter_a_lock_the_restart_brought_back() {
    let mut server = RedisServer::start();
    let mut conn = server.conn();
    let t1 = int(&mut conn, &["LOCK.ACQUIRE", "job", "w1", LONG_TTL]);
    assert_eq!(cmd(&mut conn, &["SAVE"]).unwrap(), Value::Okay);
    assert_eq!(int(&mut conn, &["LOCK.RELEASE", "job", "w1"]), 0);
    let t2 = int(&mut conn, &["LOCK.ACQUIRE", "job", "w2", LONG_TTL]);
    assert!(t2 > t1);
    drop(conn);
    // The restart comes back from the snapshot: w1 holds `job` again, while
    // w2 still believes it holds it with t2.
    server.kill9();
    server.restart_with(ServerOptions::default().module_args(["recovery-ms", "120000"]));
    let mut conn = server.conn();
    assert_eq!(lock_info(&mut conn, "job"), Some((b"w1".to_vec(), 1, t1)));
    recovering_left(cmd(&mut conn, &["LOCK.ACQUIRE", "job", "w1", LONG_TTL]));
    assert_eq!(lock_info(&mut conn, "job"), Some((b"w1".to_vec(), 1, t1)));
}

#[test]
fn the_window_is_set_by_module_argument_or_config_and_ends_by_itself() {
    // The `lock.` prefix is accepted on the module argument too.
    let server =
        RedisServer::start_with(ServerOptions::default().module_args(["lock.recovery-ms", "1500"]));
    let mut conn = server.conn();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("lock.recovery-ms")
        .query(&mut conn)
        .unwrap();
    assert_eq!(got, vec!["lock.recovery-ms".to_string(), "1500".into()]);
    // Whether the first attempt still falls inside 1.5 s depends on the
    // machine's load; every refusal must name at most 1500 ms, and the window
    // must end without any intervention.
    let mut refusals = Vec::new();
    let ended = wait_until(PATIENCE, || {
        match cmd(&mut conn, &["LOCK.ACQUIRE", "k", "me", LONG_TTL]) {
            Ok(Value::Int(_)) => true,
            refused => {
                refusals.push(recovering_left(refused));
                false
            }
        }
    });
    assert!(ended, "a 1500 ms window never ended");
    assert!(refusals.iter().all(|left| (1..=1500).contains(left)));
    assert!(refusals.windows(2).all(|pair| pair[1] <= pair[0]));
    assert_eq!(info_lock(&mut conn, "recovery_left_ms"), 0);

    // CONFIG SET opens a window counted from now, whatever the time since
    // the load, and closes it again.
    assert_eq!(
        cmd(&mut conn, &["CONFIG", "SET", "lock.recovery-ms", "3600000"]).unwrap(),
        Value::Okay
    );
    let left = recovering_left(cmd(&mut conn, &["LOCK.ACQUIRE", "other", "me", "1000"]));
    assert!(
        left > 3_600_000 - 60_000 && left <= 3_600_000,
        "left {left}"
    );
    assert!(info_lock(&mut conn, "recovery_left_ms") > 0);
    // No re-entry of the lock taken before either.
    recovering_left(cmd(&mut conn, &["LOCK.ACQUIRE", "k", "me", LONG_TTL]));
    let bad = cmd(&mut conn, &["CONFIG", "SET", "lock.recovery-ms", "-1"]);
    assert!(bad.is_err(), "a negative window was accepted: {bad:?}");
    assert_eq!(
        cmd(&mut conn, &["CONFIG", "SET", "lock.recovery-ms", "0"]).unwrap(),
        Value::Okay
    );
    assert!(int(&mut conn, &["LOCK.ACQUIRE", "other", "me", "1000"]) > 0);
    assert_eq!(info_lock(&mut conn, "recovery_left_ms"), 0);
}
