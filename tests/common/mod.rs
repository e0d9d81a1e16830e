//! Helpers shared by the module's integration tests: typed wrappers around the
//! LOCK.* commands, exact error texts, INFO parsing and lease-time bounds.
//!
//! Every test starts its own servers through `testkit`; nothing here mocks.
#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::collections::HashMap;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Connection, RedisError, RedisResult, Value};
pub use testkit::{wait_replicated, wait_until, RedisServer, ServerOptions};

/// The default `lock.max-ttl`.
pub const MAX_TTL: u64 = 86_400_000;
/// The largest `ATLEAST` value, and the largest token: 2^53 - 1.
pub const MAX_ATLEAST: i64 = 9_007_199_254_740_991;
/// Generous upper bound for things that should happen "within a few ms".
pub const SOON: Duration = Duration::from_secs(10);

/// The exact error reply for a `ttl-ms` out of range.
pub fn ttl_error(max: u64) -> String {
    format!("ERR ttl-ms must be an integer between 1 and {max} (lock.max-ttl)")
}

/// The exact error reply for a too long owner.
pub fn owner_error(max: usize) -> String {
    format!("ERR owner must be at most {max} bytes (lock.max-owner-bytes)")
}

pub const EMPTY_OWNER: &str = "ERR owner must not be empty";
pub const SYNTAX: &str = "ERR syntax error";
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

pub fn atleast_error() -> String {
    format!("ERR ATLEAST must be an integer between 0 and {MAX_ATLEAST} (2^53-1, so that every token is exact in JavaScript, Lua and JSON)")
}

pub fn arity_error(command: &str) -> String {
    format!("ERR wrong number of arguments for '{command}' command")
}

/// Runs a command given as byte strings.
pub fn run_raw(conn: &mut Connection, args: &[&[u8]]) -> RedisResult<Value> {
    let (name, rest) = args.split_first().expect("a command name");
    let mut cmd = redis::cmd(std::str::from_utf8(name).unwrap());
    for arg in rest {
        cmd.arg(*arg);
    }
    cmd.query(conn)
}

/// Runs a command given as strings.
pub fn run(conn: &mut Connection, args: &[&str]) -> RedisResult<Value> {
    let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    run_raw(conn, &bytes)
}

/// The full error line of a server error: `CODE detail`.
pub fn error_line(err: &RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => format!("{err}"),
    }
}

/// Runs a command that must fail and returns its error line.
pub fn error_of(conn: &mut Connection, args: &[&str]) -> String {
    match run(conn, args) {
        Ok(value) => panic!("{args:?} should fail, replied {value:?}"),
        Err(err) => error_line(&err),
    }
}

/// Same as [`error_of`] with byte-string arguments.
pub fn error_of_raw(conn: &mut Connection, args: &[&[u8]]) -> String {
    match run_raw(conn, args) {
        Ok(value) => panic!("{args:?} should fail, replied {value:?}"),
        Err(err) => error_line(&err),
    }
}

/// An integer-or-nil reply.
pub fn int_or_nil(value: Value, what: &str) -> Option<i64> {
    match value {
        Value::Int(n) => Some(n),
        Value::Nil => None,
        other => panic!("{what}: expected an integer or nil, got {other:?}"),
    }
}

fn must<T>(result: RedisResult<T>, what: &str) -> T {
    result.unwrap_or_else(|err| panic!("{what} failed: {}", error_line(&err)))
}

/// `LOCK.ACQUIRE key owner ttl` → the token, or None when refused.
pub fn acquire(conn: &mut Connection, key: &str, owner: &str, ttl_ms: u64) -> Option<i64> {
    let what = format!("LOCK.ACQUIRE {key} {owner} {ttl_ms}");
    let reply = must(
        run(conn, &["LOCK.ACQUIRE", key, owner, &ttl_ms.to_string()]),
        &what,
    );
    int_or_nil(reply, &what)
}

/// `LOCK.RELEASE key owner` → holds left, or None when not the holder.
pub fn release(conn: &mut Connection, key: &str, owner: &str) -> Option<i64> {
    let what = format!("LOCK.RELEASE {key} {owner}");
    int_or_nil(must(run(conn, &["LOCK.RELEASE", key, owner]), &what), &what)
}

/// `LOCK.RELEASE key owner ALL`.
pub fn release_all(conn: &mut Connection, key: &str, owner: &str) -> Option<i64> {
    let what = format!("LOCK.RELEASE {key} {owner} ALL");
    int_or_nil(
        must(run(conn, &["LOCK.RELEASE", key, owner, "ALL"]), &what),
        &what,
    )
}

/// `LOCK.EXTEND key owner ttl` → 1 or 0.
pub fn extend(conn: &mut Connection, key: &str, owner: &str, ttl_ms: u64) -> i64 {
    let what = format!("LOCK.EXTEND {key} {owner} {ttl_ms}");
    let reply = must(
        run(conn, &["LOCK.EXTEND", key, owner, &ttl_ms.to_string()]),
        &what,
    );
    int_or_nil(reply, &what).unwrap_or_else(|| panic!("{what} replied nil"))
}

/// `LOCK.FENCE key owner [ATLEAST n]` → the token, or None when not the holder.
pub fn fence(conn: &mut Connection, key: &str, owner: &str, at_least: Option<i64>) -> Option<i64> {
    let mut args = vec!["LOCK.FENCE".to_string(), key.to_string(), owner.to_string()];
    if let Some(n) = at_least {
        args.push("ATLEAST".into());
        args.push(n.to_string());
    }
    let what = args.join(" ");
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    int_or_nil(must(run(conn, &refs), &what), &what)
}

/// A `LOCK.INFO` reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    pub owner: Vec<u8>,
    pub holds: i64,
    pub token: i64,
    pub pttl: i64,
    pub waiters: i64,
}

impl LockInfo {
    /// Owner, holds and token: what must survive persistence and replication
    /// exactly (the lease only approximately).
    pub fn identity(&self) -> (Vec<u8>, i64, i64) {
        (self.owner.clone(), self.holds, self.token)
    }
}

/// The field/value pairs of a `LOCK.INFO` reply, in reply order: a flat
/// array under RESP2, a map under RESP3. None for nil.
pub fn info_pairs(value: Value) -> Option<Vec<(String, Value)>> {
    let name = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("LOCK.INFO field name is not a string: {other:?}"),
    };
    match value {
        Value::Nil => None,
        Value::Array(items) => {
            assert!(
                items.len() % 2 == 0,
                "LOCK.INFO array has an odd length: {items:?}"
            );
            Some(
                items
                    .chunks(2)
                    .map(|pair| (name(&pair[0]), pair[1].clone()))
                    .collect(),
            )
        }
        Value::Map(pairs) => Some(pairs.into_iter().map(|(k, v)| (name(&k), v)).collect()),
        other => panic!("LOCK.INFO: unexpected reply {other:?}"),
    }
}

/// Parses a `LOCK.INFO` reply.
pub fn parse_info(value: Value) -> Option<LockInfo> {
    let pairs = info_pairs(value)?;
    let get = |field: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == field)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("LOCK.INFO has no field {field}: {pairs:?}"))
    };
    let int = |field: &str| match get(field) {
        Value::Int(n) => n,
        other => panic!("LOCK.INFO field {field} is not an integer: {other:?}"),
    };
    let owner = match get("owner") {
        Value::BulkString(b) => b,
        Value::SimpleString(s) => s.into_bytes(),
        other => panic!("LOCK.INFO owner is not a string: {other:?}"),
    };
    Some(LockInfo {
        owner,
        holds: int("holds"),
        token: int("token"),
        pttl: int("pttl"),
        waiters: int("waiters"),
    })
}

/// `LOCK.INFO key`.
pub fn lock_info(conn: &mut Connection, key: &str) -> Option<LockInfo> {
    let what = format!("LOCK.INFO {key}");
    parse_info(must(run(conn, &["LOCK.INFO", key]), &what))
}

/// `LOCK.INFO key` that must show a held lock.
pub fn held(conn: &mut Connection, key: &str) -> LockInfo {
    lock_info(conn, key).unwrap_or_else(|| panic!("{key} should be locked"))
}

pub fn exists(conn: &mut Connection, key: &str) -> bool {
    let n: i64 = must(redis::cmd("EXISTS").arg(key).query(conn), "EXISTS");
    n == 1
}

pub fn dbsize(conn: &mut Connection) -> i64 {
    must(redis::cmd("DBSIZE").query(conn), "DBSIZE")
}

/// `DEBUG DIGEST`.
pub fn digest(conn: &mut Connection) -> String {
    must(
        redis::cmd("DEBUG").arg("DIGEST").query(conn),
        "DEBUG DIGEST",
    )
}

/// `DEBUG DIGEST-VALUE key`.
pub fn digest_value(conn: &mut Connection, key: &str) -> String {
    let values: Vec<String> = must(
        redis::cmd("DEBUG").arg("DIGEST-VALUE").arg(key).query(conn),
        "DEBUG DIGEST-VALUE",
    );
    values.into_iter().next().expect("one digest")
}

/// The `field:value` lines of an INFO section.
pub fn info_section(conn: &mut Connection, section: &str) -> HashMap<String, String> {
    let text: String = must(redis::cmd("INFO").arg(section).query(conn), "INFO");
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Whether the server tells modules its frozen time
/// (`RedisModule_CachedMicroseconds`: Redis 7.2 and later, every Valkey,
/// which reports `redis_version` 7.2.4), so that the module keeps one
/// instant for a whole `MULTI` or script.
pub fn tells_frozen_time(conn: &mut Connection) -> bool {
    let info = info_section(conn, "server");
    let version = &info["redis_version"];
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap());
    let (major, minor) = (parts.next().unwrap(), parts.next().unwrap());
    (major, minor) >= (7, 2)
}

/// One integer field of `INFO lock`.
pub fn lock_stat(conn: &mut Connection, field: &str) -> i64 {
    let info = info_section(conn, "lock");
    let value = info
        .get(field)
        .unwrap_or_else(|| panic!("INFO lock has no {field}: {info:?}"));
    value
        .parse()
        .unwrap_or_else(|_| panic!("INFO lock {field} is not an integer: {value}"))
}

/// Sets the wall-clock offset the module sees (`LOCK.DEBUG WALLCLOCK-OFFSET`).
pub fn set_wall_offset(conn: &mut Connection, offset_ms: i64) {
    let reply = must(
        run(
            conn,
            &["LOCK.DEBUG", "WALLCLOCK-OFFSET", &offset_ms.to_string()],
        ),
        "LOCK.DEBUG",
    );
    assert!(
        matches!(reply, Value::Okay),
        "LOCK.DEBUG WALLCLOCK-OFFSET {offset_ms} replied {reply:?}"
    );
}

/// Microseconds since the Unix epoch on this machine's wall clock (the same
/// clock the server reads: it runs on this machine).
pub fn now_us() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(since.as_micros()).unwrap()
}

/// When a command was sent and when its reply came back.
#[derive(Clone, Copy, Debug)]
pub struct Stamp {
    pub sent: Instant,
    pub answered: Instant,
}

/// Runs `f` and records when it started and ended.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Stamp) {
    let sent = Instant::now();
    let value = f();
    (
        value,
        Stamp {
            sent,
            answered: Instant::now(),
        },
    )
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap()
}

/// Checks that a lease of `ttl_ms` granted (or renewed) by the command
/// stamped `grant` shows the `pttl` read by the command stamped `query`:
/// it can have run down by no less than the time surely elapsed between the
/// two and by no more than the time possibly elapsed. `slack_ms` covers
/// millisecond rounding (and a wall-clock round trip across processes).
/// This bounds the lease both ways without guessing any duration.
pub fn assert_pttl(pttl: i64, ttl_ms: u64, grant: Stamp, query: Stamp, slack_ms: i64, what: &str) {
    let ttl = i64::try_from(ttl_ms).unwrap();
    let surely = ms(query.sent.saturating_duration_since(grant.answered));
    let possibly = ms(query.answered.saturating_duration_since(grant.sent));
    let high = ttl - surely + slack_ms;
    let low = ttl - possibly - 1 - slack_ms;
    assert!(
        pttl <= high && pttl >= low,
        "{what}: pttl {pttl} outside [{low}, {high}] for a lease of {ttl} ms ({surely}..{possibly} ms elapsed)"
    );
}

/// Polls until `key` no longer exists; returns when that was seen. Panics
/// after [`SOON`] beyond `not_before`.
pub fn wait_gone(conn: &mut Connection, key: &str, not_before: Duration) -> Instant {
    let ok = wait_until(not_before + SOON, || !exists(conn, key));
    assert!(
        ok,
        "{key} still exists {:?} after it should have expired",
        not_before + SOON
    );
    Instant::now()
}

/// A RESP3 connection.
pub fn resp3_conn(server: &RedisServer) -> Connection {
    let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap();
    let conn = client.get_connection().unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    conn
}

/// Options with the module loaded with exactly `module_args` (no `debug yes`).
pub fn module_options(module_args: &[&str]) -> ServerOptions {
    ServerOptions {
        module_args: module_args.iter().map(|s| s.to_string()).collect(),
        ..ServerOptions::default()
    }
}

/// Waiters queued for `key` (`LOCK.INFO`'s `waiters`; 0 without a lock).
pub fn waiters(conn: &mut Connection, key: &str) -> i64 {
    lock_info(conn, key).map_or(0, |info| info.waiters)
}

/// `LOCK.ACQUIRE key owner ttl WAIT timeout` on its own connection, returned
/// once the server has queued it (so arrival order is known); `finish`
/// turns its reply into what the thread returns.
fn spawn_acquire_wait<T: Send + 'static>(
    server: &RedisServer,
    key: &str,
    owner: &str,
    (ttl, timeout): (u64, u64),
    finish: fn(RedisResult<Option<i64>>) -> T,
) -> JoinHandle<T> {
    let mut probe = server.conn();
    let before = waiters(&mut probe, key);
    let mut conn = server.conn();
    let (key_owned, owner_owned) = (key.to_string(), owner.to_string());
    let handle = std::thread::spawn(move || {
        finish(
            redis::cmd("LOCK.ACQUIRE")
                .arg(&key_owned)
                .arg(&owner_owned)
                .arg(ttl)
                .arg("WAIT")
                .arg(timeout)
                .query::<Option<i64>>(&mut conn),
        )
    });
    assert!(
        wait_until(SOON, || waiters(&mut probe, key) == before + 1),
        "waiter {owner} was not queued"
    );
    handle
}

/// A queued waiter (`WAIT 0`) whose reply is the token, nil, or its error
/// line.
pub fn spawn_waiter_or_error(
    server: &RedisServer,
    key: &str,
    owner: &str,
    ttl: u64,
) -> JoinHandle<Result<Option<i64>, String>> {
    spawn_acquire_wait(server, key, owner, (ttl, 0), |reply| {
        reply.map_err(|e| error_line(&e))
    })
}

/// A queued waiter whose reply must be a token or nil.
pub fn spawn_waiter(
    server: &RedisServer,
    key: &str,
    owner: &str,
    ttl: u64,
    timeout: u64,
) -> JoinHandle<Option<i64>> {
    spawn_acquire_wait(server, key, owner, (ttl, timeout), |reply| reply.unwrap())
}

/// A small deterministic generator (xorshift), seeded per run: fuzz tests
/// print their seed so that a failure can be replayed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// True once in `one_in` calls, on average.
    pub fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

/// A node persisting through the AOF, fsynced on every write so that
/// `kill -9` loses nothing, with the RDB preamble `"yes"` or `"no"`.
pub fn aof_options(preamble: &str) -> ServerOptions {
    ServerOptions::default().args([
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        preamble,
    ])
}

/// Redis's CRC-64 (Jones polynomial, reflected), which ends a DUMP payload.
pub fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &byte in data {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// `BGREWRITEAOF`, waited for until it finished, and finished well.
pub fn rewrite_aof(c: &mut redis::Connection) {
    let before: i64 = info_section(c, "persistence")["aof_rewrites"]
        .parse()
        .unwrap();
    let _: String = redis::cmd("BGREWRITEAOF").query(c).unwrap();
    let done = wait_until(Duration::from_secs(30), || {
        let info = info_section(c, "persistence");
        info["aof_rewrites"].parse::<i64>().unwrap() > before
            && info["aof_rewrite_in_progress"] == "0"
    });
    assert!(done, "BGREWRITEAOF did not finish");
    assert_eq!(
        info_section(c, "persistence")["aof_last_bgrewrite_status"],
        "ok"
    );
}

/// Every bulk or simple string anywhere in `value`, lowercase.
pub fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::BulkString(b) => out.push(String::from_utf8_lossy(b).to_lowercase()),
        Value::SimpleString(s) => out.push(s.to_lowercase()),
        Value::Array(items) | Value::Set(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            strings(k, out);
            strings(v, out);
        }),
        _ => {}
    }
}
