//! The host fuzzer: random `LOCK.*` calls (exclusive locks, shared locks
//! and semaphores, with and without `WAIT`, from several connections and
//! databases) interleaved with the server's own commands: `SWAPDB`, `MOVE`,
//! `COPY`, `RENAME`, `SET`, `DEL`, `UNLINK`, `FLUSHDB`, `EXPIRE`, `RESTORE`,
//! `SELECT`, `MULTI/EXEC` (releases next to `CLIENT KILL` and `CLIENT
//! UNBLOCK` of waiting clients), `CLIENT PAUSE` and `DEBUG RELOAD`. After
//! every step it checks:
//!
//! - the server is alive;
//! - a client's own grant names a lock it holds (as the exclusive holder,
//!   or among the shared holders), in its own database;
//! - every `LOCK.ACQUIRE`, `LOCK.RELEASE`, `LOCK.EXTEND` and `LOCK.FENCE`
//!   reply has its contract's shape, and says what the model expects from
//!   a probe just before the call (the same token for a re-entry, nil when
//!   another owner holds the lock or every permit is taken, a fresh token
//!   when a shared lock of the same `LIMIT` has room and no queue, the
//!   mode and `LIMIT` errors, the holds left, 1 or 0, the holder's token)
//!   whenever the model is sure: every lease on the key outlasts the call,
//!   and no waiter could change the answer. A check is skipped when the
//!   call took 150 ms or more; the skips are counted and must stay under a
//!   ceiling (printed);
//! - a waiter's grant names a lock it holds in the database it waited in,
//!   whenever nothing the host did since could have moved or removed it;
//! - fresh tokens only grow;
//! - every connection is still in the database it selected;
//! - **the keyspace and the module's books agree**, in one atomic snapshot
//!   (`MULTI`: per database `TYPE`, `LOCK.HOLDERS` and `DUMP` of every
//!   name a lock can have, and `SCAN … TYPE redislock`, which must find
//!   the same lock keys and no other; then `INFO lock`), every 16 steps
//!   (the sweep test, whose filler makes a `SCAN` slow, scans at one quiet
//!   point in 25): no more lock keys than `lock_held` (a lazy `FLUSHDB`
//!   frees values later), no more live holders than `lock_holders`, no
//!   more lease-index entries than holders (nothing indexed is missing
//!   from the keyspace), and a lock whose every lease has ended is gone
//!   within `ended_bound()` (20 s, 120 s under valgrind; the same value, by
//!   its `DUMP`, however it was renamed, moved or swapped);
//! - at quiet points (every 2,000 steps, and after every round of the
//!   sweep test), with no command running: within `ended_bound()` the
//!   snapshot shows every holder indexed (`lock_lease_index` =
//!   `lock_holders`), as many lock keys as `lock_held`, and no lock whose
//!   leases all ended;
//! - and at the end, once every key is gone, no waiter stays blocked.
//!
//! Leases are 200 ms to 6 s: they end during the run, and the model is sure
//! only of a lease with more than 500 ms left.
//!
//! The second test, `sweep_passes_under_host_commands`, fills two of the
//! three databases with `DEBUG POPULATE` keys (`REDIS_LOCK_HOST_FUZZ_FILLER`
//! each, default 100,000), checks that one lease-sweep pass over them
//! spans many timer firings (`lock_timer_runs`), and runs rounds of the
//! same steps, each ending with a lock moved away from its index entry
//! (`RENAME`, `MOVE`, `RESTORE`), a pause within a sweep pass, one of
//! `SWAPDB`, `RENAME`, `MOVE`, `RESTORE` or `FLUSHDB` (a flushed filler
//! database is filled again), and a quiet-point check. With the fix of
//! issue #36's item 5 reverted (`SWAPDB` not hinting the sweep), it fails:
//! a lock swapped behind a pass is never indexed.
//!
//! `REDIS_LOCK_HOST_FUZZ_STEPS` (default 100,000),
//! `REDIS_LOCK_HOST_FUZZ_ROUNDS` (the sweep test's rounds, default 40, of
//! 24 steps each), `REDIS_LOCK_HOST_FUZZ_FILLER` and
//! `REDIS_LOCK_HOST_FUZZ_SEED` change the runs; a failure prints the seed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

const KEYS: [&str; 3] = ["a", "b", "c"];
const DBS: i64 = 3;
const CLIENTS: usize = 3;
const MAX_WAITERS: usize = 6;
/// The module's type name, as `TYPE` and `SCAN … TYPE` know it.
const LOCK_TYPE: &str = "redislock";
/// The permits of the fuzzer's semaphores.
const PERMITS: usize = 2;
/// `lock.max-holders`' default: a shared lock without `LIMIT` admits as
/// many owners.
const MAX_HOLDERS: usize = 10_000;

fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend(format!("${}\r\n{arg}\r\n", arg.len()).bytes());
    }
    out
}

/// What a `LOCK.ACQUIRE` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Exclusive,
    /// `SHARED`: a read lock.
    Shared,
    /// `SHARED LIMIT 2`.
    Semaphore,
}

impl Kind {
    fn args(self) -> &'static [&'static str] {
        match self {
            Kind::Exclusive => &[],
            Kind::Shared => &["SHARED"],
            Kind::Semaphore => &["SHARED", "LIMIT", "2"],
        }
    }

    fn limit(self) -> Option<usize> {
        (self == Kind::Semaphore).then_some(PERMITS)
    }

    fn pick(rng: &mut Rng) -> Kind {
        rng.pick(&[Kind::Exclusive, Kind::Shared, Kind::Semaphore])
    }
}

/// A client blocked in `LOCK.ACQUIRE … WAIT` on a raw socket, read without
/// blocking: its one reply is a single RESP line.
struct Waiter {
    stream: TcpStream,
    buffer: Vec<u8>,
    id: i64,
    owner: String,
    db: i64,
    key: &'static str,
    kind: Kind,
    /// The host epochs of its key and database when it was last seen waiting.
    seen: (u64, u64),
    killed: bool,
    /// `CLIENT UNBLOCK` was sent for it: Redis may then drop its reply.
    unblocked: bool,
}

/// A call ending within this of the probe before it is checked strictly.
const FAST: Duration = Duration::from_millis(150);
/// A lease with more than this left when probed cannot end before `FAST`.
const SURE_PTTL_MS: i64 = 500;
/// At most this share of the checks may be skipped after slow calls, in
/// percent (beyond it the run checked too little to pass).
const SKIP_CEILING_PERCENT: u64 = 5;

/// One holder, as `LOCK.HOLDERS` lists it.
#[derive(Clone, Debug)]
struct Holder {
    owner: String,
    holds: i64,
    token: i64,
    pttl: i64,
}

/// What a probe saw at a key.
#[derive(Clone, Debug)]
enum Seen {
    /// A value of another type.
    Wrongtype,
    /// No lock, or one whose every lease has ended.
    Free,
    Lock {
        shared: bool,
        limit: Option<usize>,
        holders: Vec<Holder>,
        waiters: i64,
    },
}

impl Seen {
    fn holder(&self, owner: &str) -> Option<&Holder> {
        match self {
            Seen::Lock { holders, .. } => holders.iter().find(|h| h.owner == owner),
            _ => None,
        }
    }
}

/// What the model expects of a lock call, from the probe before it.
#[derive(Debug)]
enum Expect {
    /// This integer (a re-entry's token, the holds left, 1 or 0).
    Int(i64),
    /// A new token.
    Fresh,
    Nil,
    /// This error line.
    Error(String),
    /// A lease that may end during the call, or waiters that may be
    /// granted or time out.
    Unknown,
}

enum Reply {
    Token(i64),
    Nil,
    Error(String),
}

impl Waiter {
    /// Its reply, if it has come.
    fn poll(&mut self) -> Option<Reply> {
        let mut chunk = [0u8; 256];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Some(Reply::Error("connection closed".into())),
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Some(Reply::Error(format!("read: {e}"))),
            }
        }
        let end = self.buffer.windows(2).position(|w| w == b"\r\n")?;
        let line = String::from_utf8_lossy(&self.buffer[..end]).to_string();
        Some(match line.as_bytes().first() {
            Some(b':') => Reply::Token(line[1..].parse().unwrap()),
            Some(b'$') | Some(b'_') => Reply::Nil,
            _ => Reply::Error(line),
        })
    }
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).to_string(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// A `LOCK.HOLDERS` reply.
fn parse_holders(reply: &Value) -> Vec<Holder> {
    let Value::Array(items) = reply else {
        panic!("LOCK.HOLDERS: {reply:?}")
    };
    items
        .iter()
        .map(|item| {
            let pairs = info_pairs(item.clone()).unwrap();
            let get = |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| panic!("no {name} in {pairs:?}"))
            };
            Holder {
                owner: text(&get("owner")),
                holds: int(&get("holds")),
                token: int(&get("token")),
                pttl: int(&get("pttl")),
            }
        })
        .collect()
}

/// `INFO lock`'s `lock_*` fields.
fn parse_info_lock(reply: &Value) -> HashMap<String, i64> {
    text(reply)
        .lines()
        .filter_map(|line| {
            let (name, value) = line.trim().split_once(':')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// One atomic view of the keyspace and the module's books.
#[derive(Debug)]
struct Snapshot {
    /// Every lock key: (db, name, live holders, its `DUMP`).
    locks: Vec<(i64, String, Vec<Holder>, Vec<u8>)>,
    held: i64,
    holders: i64,
    lease_index: i64,
    timer_runs: i64,
}

impl Snapshot {
    /// The locks whose every lease has ended, still in the keyspace.
    fn ended(&self) -> impl Iterator<Item = &(i64, String, Vec<Holder>, Vec<u8>)> {
        self.locks
            .iter()
            .filter(|(_, _, holders, _)| holders.is_empty())
    }

    fn summary(&self) -> String {
        format!(
            "lock_held {} lock_holders {} lock_lease_index {} lock_timer_runs {}; locks {:?}",
            self.held,
            self.holders,
            self.lease_index,
            self.timer_runs,
            self.locks
                .iter()
                .map(|(db, name, holders, _)| format!(
                    "db {db} {name}: {:?}",
                    holders
                        .iter()
                        .map(|h| (&h.owner, h.token, h.pttl))
                        .collect::<Vec<_>>()
                ))
                .collect::<Vec<_>>()
        )
    }
}

struct Fuzz {
    rng: Rng,
    seed: u64,
    server: RedisServer,
    clients: Vec<(Connection, i64)>,
    probe: Connection,
    waiters: Vec<Waiter>,
    /// Bumped whenever a host command may move or remove a key's lock.
    key_epochs: HashMap<(i64, &'static str), u64>,
    db_epochs: HashMap<i64, u64>,
    max_fresh_token: i64,
    next_waiter: u64,
    step: u64,
    strict_checks: u64,
    waiter_grants: u64,
    /// Grants checked against a probe right after them, and replies of
    /// `LOCK.*` calls checked against the model.
    grant_checks: u64,
    reply_checks: u64,
    /// Checks skipped because the call and its probes took `FAST` or more.
    skipped_checks: u64,
    /// Agreement snapshots taken, and quiet points passed.
    snapshots: u64,
    quiet_points: u64,
    /// Databases checked with `SCAN … TYPE`.
    full_scans: u64,
    /// Host commands of the sweep test sent while a holder was unindexed.
    during_passes: u64,
    /// Ended locks seen in the keyspace (by their `DUMP`), since when.
    ended_since: HashMap<Vec<u8>, Instant>,
    /// The server tells the module its frozen time, so one `MULTI` is one
    /// instant for leases (Redis 7.2+, Valkey; not Redis 7.0).
    one_instant_per_multi: bool,
    /// The most ended locks seen at once, and their longest stay.
    ended_seen: u64,
    ended_longest: Duration,
    /// Filler keys per filler database (0: none), and which hold them.
    filler: u64,
    filled: [bool; DBS as usize],
    /// The database the last lock moved away from its index entry is in.
    unfiled_db: Option<i64>,
    /// The last steps, printed with a failure.
    recent: VecDeque<String>,
}

/// How long a lock whose leases all ended may stay in the keyspace: the
/// timer ends an indexed one at once, and a sweep pass (well under a second
/// here, and printed) files an unindexed one first. Far above both, so that
/// a slow machine does not fail it; a lock nobody files stays forever.
fn ended_bound() -> Duration {
    Duration::from_secs(if testkit::valgrind() { 120 } else { 20 })
}

impl Fuzz {
    fn new(seed: u64) -> Fuzz {
        let server = RedisServer::start();
        let clients = (0..CLIENTS).map(|_| (server.conn(), 0)).collect();
        let probe = server.conn();
        Fuzz {
            rng: Rng(seed),
            seed,
            server,
            clients,
            probe,
            waiters: Vec::new(),
            key_epochs: HashMap::new(),
            db_epochs: HashMap::new(),
            max_fresh_token: 0,
            next_waiter: 0,
            step: 0,
            strict_checks: 0,
            waiter_grants: 0,
            grant_checks: 0,
            reply_checks: 0,
            skipped_checks: 0,
            snapshots: 0,
            quiet_points: 0,
            full_scans: 0,
            during_passes: 0,
            ended_since: HashMap::new(),
            ended_seen: 0,
            ended_longest: Duration::ZERO,
            filler: 0,
            filled: [false; DBS as usize],
            unfiled_db: None,
            recent: VecDeque::new(),
            one_instant_per_multi: false,
        }
        .knowing_the_server()
    }

    fn knowing_the_server(mut self) -> Self {
        self.one_instant_per_multi = tells_frozen_time(&mut self.probe);
        self
    }

    fn context(&self) -> String {
        format!(
            "step {} (seed {:#x}, REDIS_LOCK_HOST_FUZZ_SEED); last steps:\n  {}",
            self.step,
            self.seed,
            self.recent.iter().cloned().collect::<Vec<_>>().join("\n  ")
        )
    }

    fn note(&mut self, what: String) {
        if self.recent.len() == 40 {
            self.recent.pop_front();
        }
        self.recent.push_back(format!("{}: {what}", self.step));
    }

    fn epochs(&self, db: i64, key: &'static str) -> (u64, u64) {
        (
            self.key_epochs.get(&(db, key)).copied().unwrap_or(0),
            self.db_epochs.get(&db).copied().unwrap_or(0),
        )
    }

    fn touch_key(&mut self, db: i64, key: &'static str) {
        *self.key_epochs.entry((db, key)).or_default() += 1;
    }

    fn touch_db(&mut self, db: i64) {
        *self.db_epochs.entry(db).or_default() += 1;
    }

    /// The lock at `key` in `db`, in one `MULTI` (no timer runs between
    /// its two reads).
    fn probe_key(&mut self, db: i64, key: &str) -> Seen {
        self.probe_key_once(db, key, !self.one_instant_per_multi)
    }

    /// [`Self::probe_key`]; `may_retry`: on a server where the module reads
    /// the clock per command (Redis 7.0), a lease may end between the two
    /// reads of one `MULTI`: then the probe is taken again, and the lock
    /// must have gone.
    fn probe_key_once(&mut self, db: i64, key: &str, may_retry: bool) -> Seen {
        let _: () = redis::cmd("SELECT").arg(db).query(&mut self.probe).unwrap();
        let replies: Vec<Value> = redis::pipe()
            .atomic()
            .ignore_errors()
            .cmd("LOCK.INFO")
            .arg(key)
            .cmd("LOCK.HOLDERS")
            .arg(key)
            .query(&mut self.probe)
            .unwrap();
        if let Value::ServerError(e) = &replies[0] {
            assert_eq!(e.code(), "WRONGTYPE", "LOCK.INFO {key}: {e:?}");
            return Seen::Wrongtype;
        }
        let Some(pairs) = info_pairs(replies[0].clone()) else {
            return Seen::Free;
        };
        let get = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("LOCK.INFO has no {name}: {pairs:?}"))
        };
        let shared = text(&get("mode")) == "shared";
        let limit = if shared {
            match get("limit") {
                Value::Nil => None,
                v => Some(usize::try_from(int(&v)).unwrap()),
            }
        } else {
            None
        };
        let holders = parse_holders(&replies[1]);
        if holders.is_empty() {
            // Its last lease ended between the two reads: impossible in one
            // MULTI where the module keeps one instant for it.
            if may_retry {
                let again = self.probe_key_once(db, key, false);
                assert!(
                    matches!(again, Seen::Free),
                    "LOCK.INFO saw a lock, LOCK.HOLDERS no holder, at {key} in db {db}, \
                     and the next probe saw {again:?}"
                );
                return again;
            }
            panic!("LOCK.INFO saw a lock, LOCK.HOLDERS no holder, at {key} in db {db}");
        }
        Seen::Lock {
            shared,
            limit,
            holders,
            waiters: int(&get("waiters")),
        }
    }

    fn fresh_token(&mut self, token: i64, what: &str) {
        assert!(
            token > self.max_fresh_token,
            "{what}: fresh token {token} not above {} at {}",
            self.max_fresh_token,
            self.context()
        );
        self.max_fresh_token = token;
    }

    fn client_cmd(&mut self, c: usize, args: &[&str]) -> redis::RedisResult<Value> {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        let reply = cmd.query(&mut self.clients[c].0);
        self.note(format!(
            "c{c} (db {}) {args:?} -> {reply:?}",
            self.clients[c].1
        ));
        reply
    }

    fn owner_of(c: usize) -> String {
        format!("c{c}")
    }

    /// What the model expects of `command` (with `kind` for an
    /// acquisition) on `key` by `owner`, from `seen`, a probe made just
    /// before it. Nothing else runs between the probe and the call but the
    /// server's timers: a lease that has more than `SURE_PTTL_MS` left
    /// stays as the probe saw it for a call that ends within `FAST` of the
    /// probe (a slower one is not checked strictly, and counted), a key
    /// with no lock stays free when no waiter waits for it, and a queue
    /// matters only when it is empty (a waiter may time out).
    fn expect(
        &self,
        db: i64,
        key: &str,
        command: &str,
        kind: Kind,
        owner: &str,
        seen: &Seen,
    ) -> Expect {
        let (shared, limit, holders, waiters) = match seen {
            Seen::Wrongtype => return Expect::Error(WRONGTYPE.into()),
            Seen::Free => {
                let waited = self.waiters.iter().any(|w| w.db == db && w.key == key);
                if waited {
                    return Expect::Unknown;
                }
                return match command {
                    "LOCK.ACQUIRE" => Expect::Fresh,
                    "LOCK.EXTEND" => Expect::Int(0),
                    _ => Expect::Nil,
                };
            }
            Seen::Lock {
                shared,
                limit,
                holders,
                waiters,
            } => (*shared, *limit, holders, *waiters),
        };
        if holders.iter().any(|h| h.pttl <= SURE_PTTL_MS) {
            return Expect::Unknown;
        }
        // A shared lock's queue moves without a holder leaving: a waiter
        // ahead of shared ones that leaves (a timeout, CLIENT UNBLOCK) lets
        // them join at the next timer firing, perhaps under this owner.
        if shared && self.waiters.iter().any(|w| w.db == db && w.key == key) {
            return Expect::Unknown;
        }
        // A waiter with this call's owner re-enters as soon as the queue
        // reaches it (a waiter ahead timing out, at the next timer firing),
        // and a SWAPDB or RENAME can put this owner's lock under a name
        // its own waiter waits for: its holds may change under the call.
        // (Seen on Redis 8.6: a RELEASE counted the waiter's hold too.)
        if self
            .waiters
            .iter()
            .any(|w| w.key == key && w.owner == owner)
        {
            return Expect::Unknown;
        }
        let mine = holders.iter().find(|h| h.owner == owner);
        match (command, mine) {
            ("LOCK.RELEASE", Some(h)) => return Expect::Int(h.holds - 1),
            ("LOCK.RELEASE" | "LOCK.FENCE", None) => return Expect::Nil,
            ("LOCK.EXTEND", Some(_)) => return Expect::Int(1),
            ("LOCK.EXTEND", None) => return Expect::Int(0),
            ("LOCK.FENCE", Some(h)) => return Expect::Int(h.token),
            _ => {}
        }
        let mode_error =
            |held: &str| Expect::Error(format!("ERR owner holds this lock in {held} mode"));
        let show = |l: Option<usize>| l.map_or("(none)".to_string(), |n| n.to_string());
        let limit_error = Expect::Error(format!(
            "ERR LIMIT {} does not match the lock's LIMIT {}",
            show(kind.limit()),
            show(limit)
        ));
        let wants_shared = kind != Kind::Exclusive;
        match (shared, wants_shared, mine) {
            (false, false, Some(h)) => Expect::Int(h.token),
            (false, true, Some(_)) => mode_error("exclusive"),
            (true, false, Some(_)) => mode_error("shared"),
            (true, true, Some(h)) if limit == kind.limit() => Expect::Int(h.token),
            (true, true, _) if limit != kind.limit() => limit_error,
            (false, _, None) | (true, false, None) => Expect::Nil,
            (true, true, None) => {
                if holders.len() >= limit.unwrap_or(MAX_HOLDERS) {
                    Expect::Nil
                } else if waiters > 0 {
                    Expect::Unknown
                } else {
                    Expect::Fresh
                }
            }
            (true, true, Some(_)) => unreachable!(),
        }
    }

    /// Checks one lock call's reply against the model: always its shape,
    /// and what it says when the model is sure and the call was fast.
    fn check_reply(
        &mut self,
        command: &str,
        expect: &Expect,
        started: Instant,
        reply: &redis::RedisResult<Value>,
    ) {
        let contract_error = |r: &redis::RedisResult<Value>| match r {
            Err(e) => {
                let line = error_line(e);
                e.code() == Some("WRONGTYPE")
                    || (command == "LOCK.ACQUIRE"
                        && (line.starts_with("ERR owner holds this lock in ")
                            || line.starts_with("ERR LIMIT ")))
            }
            _ => false,
        };
        let shape = match (command, reply) {
            ("LOCK.ACQUIRE", Ok(Value::Int(t))) => *t > 0,
            ("LOCK.RELEASE", Ok(Value::Int(n))) => *n >= 0,
            ("LOCK.EXTEND", Ok(Value::Int(n))) => *n == 0 || *n == 1,
            ("LOCK.FENCE", Ok(Value::Int(t))) => *t > 0,
            ("LOCK.ACQUIRE" | "LOCK.RELEASE" | "LOCK.FENCE", Ok(Value::Nil)) => true,
            (_, r) => contract_error(r),
        };
        assert!(
            shape,
            "{command} replied {reply:?}, outside its contract, at {}",
            self.context()
        );
        if matches!(expect, Expect::Unknown) {
            return;
        }
        if started.elapsed() >= FAST {
            self.skipped_checks += 1;
            return;
        }
        self.reply_checks += 1;
        let right = match (expect, reply) {
            (Expect::Int(want), Ok(Value::Int(n))) => want == n,
            (Expect::Fresh, Ok(Value::Int(_))) => true,
            (Expect::Nil, Ok(Value::Nil)) => true,
            (Expect::Error(want), Err(e)) => error_line(e) == *want,
            _ => false,
        };
        assert!(
            right,
            "{command} replied {reply:?} where the model expects {expect:?} at {}",
            self.context()
        );
    }

    /// One `LOCK.*` call from client `c`.
    fn lock_call(&mut self, c: usize) {
        let key = self.rng.pick(&KEYS);
        let db = self.clients[c].1;
        let owner = Self::owner_of(c);
        let started = Instant::now();
        let seen = self.probe_key(db, key);
        let owned = seen.holder(&owner).is_some();
        match self.rng.below(6) {
            0..=2 => {
                let kind = Kind::pick(&mut self.rng);
                let expect = self.expect(db, key, "LOCK.ACQUIRE", kind, &owner, &seen);
                let ttl = self.rng.pick(&[200u64, 1_000, 5_000]).to_string();
                let mut args = vec!["LOCK.ACQUIRE", key, &owner, &ttl];
                args.extend(kind.args());
                let reply = self.client_cmd(c, &args);
                self.check_reply("LOCK.ACQUIRE", &expect, started, &reply);
                let Ok(Value::Int(token)) = reply else {
                    return;
                };
                // A re-entry (the probe saw this owner hold the lock) gets
                // no fresh token.
                if !owned {
                    self.fresh_token(token, "acquire");
                }
                let after = self.probe_key(db, key);
                if started.elapsed() < FAST {
                    self.grant_checks += 1;
                    let holder = after.holder(&owner).map(|h| h.token);
                    assert_eq!(
                        holder,
                        Some(token),
                        "{owner} got {token} for {key} in db {db} ({kind:?}), but the lock there is {after:?} at {}",
                        self.context()
                    );
                } else {
                    self.skipped_checks += 1;
                }
            }
            3 => {
                let expect = self.expect(db, key, "LOCK.RELEASE", Kind::Exclusive, &owner, &seen);
                // A waiter may share this owner id: a release can end its lock.
                let reply = self.client_cmd(c, &["LOCK.RELEASE", key, &owner]);
                self.check_reply("LOCK.RELEASE", &expect, started, &reply);
                self.touch_key(db, key);
            }
            4 => {
                let expect = self.expect(db, key, "LOCK.EXTEND", Kind::Exclusive, &owner, &seen);
                let ttl = self.rng.pick(&["1000", "3000"]);
                let reply = self.client_cmd(c, &["LOCK.EXTEND", key, &owner, ttl]);
                self.check_reply("LOCK.EXTEND", &expect, started, &reply);
            }
            _ => {
                let expect = self.expect(db, key, "LOCK.FENCE", Kind::Exclusive, &owner, &seen);
                let reply = self.client_cmd(c, &["LOCK.FENCE", key, &owner]);
                self.check_reply("LOCK.FENCE", &expect, started, &reply);
            }
        }
    }

    /// A new waiter on a raw connection, in a random database.
    fn spawn_waiter(&mut self) {
        if self.waiters.len() >= MAX_WAITERS {
            return;
        }
        let db = self.rng.below(DBS as u64) as i64;
        let key = self.rng.pick(&KEYS);
        let kind = Kind::pick(&mut self.rng);
        // Sometimes a client's own owner id: same-owner waiters re-enter.
        let owner = if self.rng.chance(4) {
            Self::owner_of(self.rng.below(CLIENTS as u64) as usize)
        } else {
            self.next_waiter += 1;
            format!("w{}", self.next_waiter)
        };
        let timeout = self.rng.pick(&["0", "300", "2000"]);
        let ttl = self.rng.pick(&["1500", "6000"]);
        let mut stream = TcpStream::connect(("127.0.0.1", self.server.port())).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
            .write_all(&[resp(&["SELECT", &db.to_string()]), resp(&["CLIENT", "ID"])].concat())
            .unwrap();
        let mut read = Vec::new();
        let mut chunk = [0u8; 64];
        while read.windows(2).filter(|w| *w == b"\r\n").count() < 2 {
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0);
            read.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&read).to_string();
        let id: i64 = text.lines().nth(1).unwrap()[1..].trim().parse().unwrap();
        let mut args = vec!["LOCK.ACQUIRE", key, &owner, ttl];
        args.extend(kind.args());
        args.extend(["WAIT", timeout]);
        stream.write_all(&resp(&args)).unwrap();
        stream.set_nonblocking(true).unwrap();
        let seen = self.epochs(db, key);
        self.note(format!(
            "waiter {owner} (id {id}) waits for {key} in db {db} ({kind:?}), timeout {timeout}"
        ));
        let index = self.waiters.len();
        self.waiters.push(Waiter {
            stream,
            buffer: Vec::new(),
            id,
            owner,
            db,
            key,
            kind,
            seen,
            killed: false,
            unblocked: false,
        });
        // Until the server has blocked it or answered it, nothing else runs:
        // an immediate answer is checked with nothing in between.
        loop {
            self.barrier();
            if !self.waiters[index].buffer.is_empty() || self.blocked(id) {
                break;
            }
            let mut probe = [0u8; 1];
            if self.waiters[index].stream.peek(&mut probe).is_ok() {
                break;
            }
        }
    }

    /// Waits until every reply the server produced so far has been written:
    /// replies are written before the server reads the next commands, so a
    /// PING answered now comes after them.
    fn barrier(&mut self) {
        let pong: String = redis::cmd("PING")
            .query(&mut self.probe)
            .unwrap_or_else(|e| panic!("the server died at {}: {e}", self.context()));
        assert_eq!(pong, "PONG");
    }

    /// Whether the server has client `id` blocked now.
    fn blocked(&mut self, id: i64) -> bool {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("ID")
            .arg(id)
            .query(&mut self.probe)
            .unwrap();
        list.split(' ')
            .any(|f| f.strip_prefix("flags=").is_some_and(|f| f.contains('b')))
    }

    /// Reads every waiter's reply that has come and checks its grant.
    fn drain(&mut self) {
        self.barrier();
        let mut i = 0;
        while i < self.waiters.len() {
            let reply = self.waiters[i].poll();
            let Some(reply) = reply else {
                let (db, key) = (self.waiters[i].db, self.waiters[i].key);
                self.waiters[i].seen = self.epochs(db, key);
                i += 1;
                continue;
            };
            let waiter = self.waiters.remove(i);
            self.note(format!(
                "waiter {} (db {} key {} {:?}) replied {}",
                waiter.owner,
                waiter.db,
                waiter.key,
                waiter.kind,
                match &reply {
                    Reply::Token(t) => t.to_string(),
                    Reply::Nil => "nil".into(),
                    Reply::Error(e) => e.clone(),
                }
            ));
            match reply {
                Reply::Token(token) => self.check_waiter_grant(&waiter, token),
                Reply::Nil => {}
                Reply::Error(line) => assert!(
                    waiter.killed
                        || line.starts_with("-WRONGTYPE")
                        || line.starts_with("-UNBLOCKED")
                        || line.starts_with("-ERR the lock granted to this waiter was removed")
                        || line.starts_with("-ERR owner holds this lock in ")
                        || line.starts_with("-ERR LIMIT "),
                    "waiter {} got {line:?} at {}",
                    waiter.owner,
                    self.context()
                ),
            }
        }
    }

    fn check_waiter_grant(&mut self, waiter: &Waiter, token: i64) {
        self.waiter_grants += 1;
        assert!(
            !waiter.killed,
            "a killed waiter got a reply at {}",
            self.context()
        );
        let unchanged = self.epochs(waiter.db, waiter.key) == waiter.seen;
        let seen = self.probe_key(waiter.db, waiter.key);
        let same_owner_before = seen
            .holder(&waiter.owner)
            .is_some_and(|h| h.holds > 1 && h.token == token);
        if !same_owner_before && token > self.max_fresh_token {
            self.max_fresh_token = token;
        }
        if !unchanged {
            return;
        }
        self.strict_checks += 1;
        assert_eq!(
            seen.holder(&waiter.owner).map(|h| h.token),
            Some(token),
            "waiter {} was granted {} in db {} ({:?}) with {token}, but the lock there is {seen:?} at {}",
            waiter.owner,
            waiter.key,
            waiter.db,
            waiter.kind,
            self.context()
        );
    }

    /// Fills `db` with filler keys (in the sweep test).
    fn fill(&mut self, db: i64) {
        if self.filler == 0 {
            return;
        }
        let _: () = redis::cmd("SELECT").arg(db).query(&mut self.probe).unwrap();
        let _: () = redis::cmd("DEBUG")
            .arg("POPULATE")
            .arg(self.filler)
            .arg("filler")
            .arg(8)
            .query(&mut self.probe)
            .unwrap();
        self.filled[db as usize] = true;
    }

    fn swapped(&mut self, first: i64, second: i64) {
        self.touch_db(first);
        self.touch_db(second);
        self.filled.swap(first as usize, second as usize);
    }

    fn flushed(&mut self, db: i64) {
        self.touch_db(db);
        if self.filled[db as usize] {
            self.filled[db as usize] = false;
            self.fill(db);
        }
    }

    /// `RESTORE key` from a `DUMP` of `other`, in client `c`'s database.
    fn restore(&mut self, c: usize, key: &'static str, other: &'static str) {
        let dump = self.client_cmd(c, &["DUMP", other]);
        if let Ok(Value::BulkString(payload)) = dump {
            let restored: redis::RedisResult<Value> = redis::cmd("RESTORE")
                .arg(key)
                .arg(0)
                .arg(&payload)
                .arg("REPLACE")
                .query(&mut self.clients[c].0);
            self.note(format!("c{c} RESTORE {key} from {other} -> {restored:?}"));
            // A second value with the same DUMP: its stay counts anew.
            self.ended_since.remove(&payload);
            let db = self.clients[c].1;
            self.touch_key(db, key);
        }
    }

    fn host_call(&mut self, c: usize) {
        let db = self.clients[c].1;
        let key = self.rng.pick(&KEYS);
        let other = self.rng.pick(&KEYS);
        let other_db = self.rng.below(DBS as u64) as i64;
        match self.rng.below(16) {
            0 => {
                let _ = self.client_cmd(c, &["SWAPDB", &db.to_string(), &other_db.to_string()]);
                self.swapped(db, other_db);
            }
            1 => {
                let _ = self.client_cmd(c, &["MOVE", key, &other_db.to_string()]);
                self.touch_key(db, key);
                self.touch_key(other_db, key);
            }
            2 => {
                let mut args = vec!["COPY", key, other];
                let target = other_db.to_string();
                if self.rng.chance(2) {
                    args.extend(["DB", &target]);
                }
                if self.rng.chance(2) {
                    args.push("REPLACE");
                }
                let dst_db = if args.contains(&"DB") { other_db } else { db };
                let _ = self.client_cmd(c, &args);
                self.touch_key(dst_db, other);
            }
            3 => {
                let _ = self.client_cmd(c, &["RENAME", key, other]);
                self.touch_key(db, key);
                self.touch_key(db, other);
            }
            4 => {
                let _ = self.client_cmd(c, &["SET", key, "plain"]);
                self.touch_key(db, key);
            }
            5 => {
                let command = self.rng.pick(&["DEL", "UNLINK"]);
                let _ = self.client_cmd(c, &[command, key]);
                self.touch_key(db, key);
            }
            6 if self.rng.chance(20) => {
                let _ = self.client_cmd(c, &["FLUSHDB"]);
                self.flushed(db);
            }
            7 => {
                // A short expire fires within this step (a read expires the
                // key), so that no check races it; a long one outlives the run.
                let ms = self.rng.pick(&["1", "100000"]);
                let set = self.client_cmd(c, &["PEXPIRE", key, ms]);
                if ms == "1" && matches!(set, Ok(Value::Int(1))) {
                    // Gone (-2), or already replaced by a waiter's new lock
                    // (-1: a value without an expire).
                    let conn = &mut self.clients[c].0;
                    let fired = wait_until(SOON, || {
                        let pttl = redis::cmd("PTTL").arg(key).query::<i64>(conn).ok();
                        matches!(pttl, Some(-2 | -1))
                    });
                    assert!(fired, "a 1 ms expire never fired at {}", self.context());
                }
                self.touch_key(db, key);
            }
            8 => self.restore(c, key, other),
            9 => {
                let _ = self.client_cmd(c, &["SELECT", &other_db.to_string()]);
                self.clients[c].1 = other_db;
            }
            10 | 11 => self.multi_with_waiter_ends(c),
            12 if self.rng.chance(50) => {
                let _ = self.client_cmd(c, &["CLIENT", "PAUSE", "20", "WRITE"]);
            }
            13 if self.rng.chance(500) => {
                let _ = self.client_cmd(c, &["DEBUG", "RELOAD"]);
                for db in 0..DBS {
                    self.touch_db(db);
                }
            }
            _ => self.lock_call(c),
        }
    }

    /// `MULTI`: releases and acquisitions next to `CLIENT KILL` / `CLIENT
    /// UNBLOCK` of a waiting client, so that a grant and the end of its
    /// waiter land in one event-loop turn.
    fn multi_with_waiter_ends(&mut self, c: usize) {
        let owner = Self::owner_of(c);
        let key = self.rng.pick(&KEYS);
        let kind = Kind::pick(&mut self.rng);
        let target =
            (!self.waiters.is_empty()).then(|| self.rng.below(self.waiters.len() as u64) as usize);
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("LOCK.RELEASE").arg(key).arg(&owner).arg("ALL");
        if let Some(t) = target {
            let id = self.waiters[t].id;
            match self.rng.below(3) {
                0 => {
                    pipe.cmd("CLIENT").arg("KILL").arg("ID").arg(id);
                    self.waiters[t].killed = true;
                }
                1 => {
                    pipe.cmd("CLIENT").arg("UNBLOCK").arg(id).arg("ERROR");
                    self.waiters[t].unblocked = true;
                }
                _ => {
                    pipe.cmd("CLIENT").arg("UNBLOCK").arg(id).arg("TIMEOUT");
                    self.waiters[t].unblocked = true;
                }
            }
        }
        pipe.cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg(&owner)
            .arg(1000)
            .arg(kind.args())
            .arg("WAIT")
            .arg(100);
        let reply: redis::RedisResult<Value> = pipe.query(&mut self.clients[c].0);
        self.note(format!(
            "c{c} MULTI release {key}, end waiter {target:?}, acquire {kind:?} -> {reply:?}"
        ));
        let db = self.clients[c].1;
        self.touch_key(db, key);
        if let Some(t) = target {
            if self.waiters[t].killed {
                self.waiters.remove(t);
            }
        }
    }

    fn check_dbs(&mut self) {
        for c in 0..CLIENTS {
            let info: String = redis::cmd("CLIENT")
                .arg("INFO")
                .query(&mut self.clients[c].0)
                .unwrap();
            let db = info
                .split(' ')
                .find_map(|f| f.strip_prefix("db="))
                .and_then(|d| d.parse::<i64>().ok());
            assert_eq!(
                db,
                Some(self.clients[c].1),
                "client {c} is no longer in the database it selected at {}",
                self.context()
            );
        }
    }

    /// One atomic view: per database the type, holders and `DUMP` of every
    /// name a lock can have, and with `full` every lock key (`SCAN … TYPE`,
    /// which must find no other); then `INFO lock`. None when a `SCAN` did
    /// not finish in one call.
    fn snapshot(&mut self, full: bool) -> Option<Snapshot> {
        let mut pipe = redis::pipe();
        pipe.atomic().ignore_errors();
        for db in 0..DBS {
            pipe.cmd("SELECT").arg(db);
            if full {
                pipe.cmd("SCAN")
                    .arg(0)
                    .arg("COUNT")
                    .arg(100_000_000)
                    .arg("TYPE")
                    .arg(LOCK_TYPE);
            }
            for key in KEYS {
                pipe.cmd("TYPE").arg(key);
                pipe.cmd("LOCK.HOLDERS").arg(key);
                pipe.cmd("DUMP").arg(key);
            }
        }
        pipe.cmd("INFO").arg("lock");
        let replies: Vec<Value> = pipe
            .query(&mut self.probe)
            .unwrap_or_else(|e| panic!("the snapshot failed at {}: {e}", self.context()));
        let per_key = 3;
        let per_db = 1 + usize::from(full) + per_key * KEYS.len();
        let mut locks = Vec::new();
        for db in 0..DBS {
            let at = db as usize * per_db + 1;
            let first_key = at + usize::from(full);
            let mut names = HashSet::new();
            for (k, key) in KEYS.iter().enumerate() {
                let reply = |n: usize| &replies[first_key + per_key * k + n];
                if text(reply(0)) != LOCK_TYPE {
                    continue;
                }
                names.insert(key.to_string());
                let holders = parse_holders(reply(1));
                let Value::BulkString(dump) = reply(2) else {
                    panic!("DUMP {key}: {:?}", reply(2));
                };
                locks.push((db, key.to_string(), holders, dump.clone()));
            }
            if !full {
                continue;
            }
            let Value::Array(scan) = &replies[at] else {
                panic!("SCAN: {:?}", replies[at]);
            };
            if text(&scan[0]) != "0" {
                return None;
            }
            let Value::Array(found) = &scan[1] else {
                panic!("SCAN: {scan:?}");
            };
            let found: HashSet<String> = found.iter().map(text).collect();
            assert_eq!(
                found,
                names,
                "SCAN … TYPE {LOCK_TYPE} in db {db} and TYPE of the run's names disagree at {}",
                self.context()
            );
            self.full_scans += 1;
        }
        let info = parse_info_lock(replies.last().unwrap());
        let field = |name: &str| {
            *info
                .get(name)
                .unwrap_or_else(|| panic!("INFO lock has no {name}: {info:?}"))
        };
        Some(Snapshot {
            locks,
            held: field("lock_held"),
            holders: field("lock_holders"),
            lease_index: field("lock_lease_index"),
            timer_runs: field("lock_timer_runs"),
        })
    }

    /// Takes a snapshot and checks what must hold at every instant: no more
    /// lock keys than `lock_held` (a value a lazy `FLUSHDB`, Valkey's
    /// default, left to the lazy-free thread is counted until it is freed),
    /// live holders and lease-index entries no more than `lock_holders`,
    /// and no lock whose leases ended stayed longer than the bound.
    fn check_agreement(&mut self, full: bool) -> Option<Snapshot> {
        let snapshot = self.snapshot(full)?;
        self.snapshots += 1;
        let live: i64 = snapshot.locks.iter().map(|l| l.2.len() as i64).sum();
        assert!(
            snapshot.locks.len() as i64 <= snapshot.held
                && live <= snapshot.holders
                && snapshot.lease_index <= snapshot.holders,
            "INFO lock disagrees with the keyspace ({} lock keys, {live} live holders): {} at {}",
            snapshot.locks.len(),
            snapshot.summary(),
            self.context()
        );
        let now = Instant::now();
        let mut still = HashSet::new();
        let mut ended = 0;
        for (db, name, _, dump) in snapshot.ended() {
            ended += 1;
            still.insert(dump.clone());
            let since = *self.ended_since.entry(dump.clone()).or_insert(now);
            let stayed = now - since;
            self.ended_longest = self.ended_longest.max(stayed);
            assert!(
                stayed < ended_bound(),
                "a lock whose leases all ended (now {name} in db {db}) stayed in the keyspace for {stayed:?}: {} at {}",
                snapshot.summary(),
                self.context()
            );
        }
        self.ended_seen = self.ended_seen.max(ended);
        self.ended_since.retain(|dump, _| still.contains(dump));
        Some(snapshot)
    }

    /// A quiet point: no command runs but the probes; within the bound
    /// every holder is indexed, `lock_held` is the lock keys, and no lock
    /// whose leases ended is left. The
    /// wait polls `INFO lock` (a snapshot's `SCAN` over a large keyspace
    /// would keep the server from the sweep it waits for), then checks a
    /// snapshot (with `full`, one with `SCAN`).
    fn quiet_point(&mut self, full: bool) {
        let started = Instant::now();
        let mut last = None;
        loop {
            let info: String = redis::cmd("INFO")
                .arg("lock")
                .query(&mut self.probe)
                .unwrap();
            let info = parse_info_lock(&Value::BulkString(info.into_bytes()));
            if info.get("lock_lease_index") == info.get("lock_holders") {
                if let Some(snapshot) = self.check_agreement(full) {
                    if snapshot.lease_index == snapshot.holders
                        && snapshot.locks.len() as i64 == snapshot.held
                        && snapshot.ended().next().is_none()
                    {
                        break;
                    }
                    last = Some(snapshot);
                }
            }
            if started.elapsed() >= ended_bound() {
                let now = self.snapshot(false).map_or("none".into(), |s| s.summary());
                panic!(
                    "at a quiet point the lease index never caught up with the keyspace in {:?}: the keyspace and INFO lock now: {now}; the last snapshot that agreed on the counts: {} at {}",
                    ended_bound(),
                    last.map_or("none".into(), |s| s.summary()),
                    self.context()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
            self.drain();
        }
        self.quiet_points += 1;
    }

    fn one_step(&mut self) {
        let c = self.rng.below(CLIENTS as u64) as usize;
        match self.rng.below(10) {
            0 | 1 => self.spawn_waiter(),
            2..=5 => self.lock_call(c),
            _ => self.host_call(c),
        }
        self.drain();
        if self.step % 16 == 0 {
            self.check_agreement(self.filler == 0);
        }
        if self.step % 64 == 0 {
            self.check_dbs();
        }
        self.step += 1;
    }

    fn run(&mut self, steps: u64) {
        while self.step < steps {
            self.one_step();
            if self.step % 2_000 == 0 {
                self.quiet_point(true);
            }
        }
        self.quiet_point(true);
        self.finish();
    }

    /// The sweep test's rounds: steps, then a lock moved away from its
    /// index entry, a pause within the sweep pass that follows, a host
    /// command during the pass, and a quiet point.
    fn run_sweeps(&mut self, rounds: u64, pass: Duration) {
        for _ in 0..rounds {
            for _ in 0..24 {
                self.one_step();
            }
            let c = self.rng.below(CLIENTS as u64) as usize;
            if let Some(snapshot) = self.snapshot(false) {
                if let Some((db, key)) = self.pick_lock(&snapshot) {
                    self.unfile(c, db, key);
                }
            } else {
                self.unfiled_db = None;
            }
            let pause = pass.mul_f64(self.rng.below(100) as f64 / 100.0);
            std::thread::sleep(pause);
            // A holder without an index entry just before the command: the
            // sweep is still looking for it, the command lands in a pass.
            let holders = lock_stat(&mut self.probe, "lock_holders");
            if lock_stat(&mut self.probe, "lock_lease_index") < holders {
                self.during_passes += 1;
            }
            self.during_pass(c);
            self.drain();
            // A full SCAN of the filler takes long: one quiet point in 25.
            let full = self.quiet_points % 25 == 0;
            self.quiet_point(full);
        }
        self.quiet_point(true);
        self.finish();
    }

    /// A random lock of the snapshot, mostly one past database 0 (which a
    /// pass scans first): its database and name.
    fn pick_lock(&mut self, snapshot: &Snapshot) -> Option<(i64, &'static str)> {
        let later: Vec<_> = snapshot.locks.iter().filter(|l| l.0 > 0).collect();
        let all: Vec<_> = snapshot.locks.iter().collect();
        let from = if !later.is_empty() && !self.rng.chance(4) {
            later
        } else {
            all
        };
        if from.is_empty() {
            return None;
        }
        let (db, name, _, _) = from[self.rng.below(from.len() as u64) as usize];
        let key = KEYS.iter().find(|k| *k == name).copied()?;
        Some((*db, key))
    }

    /// Moves the lock at `key` in `db` away from its index entry: `RENAME`,
    /// `MOVE` or a `RESTORE` of its `DUMP` under another name.
    fn unfile(&mut self, c: usize, db: i64, key: &'static str) {
        let _ = self.client_cmd(c, &["SELECT", &db.to_string()]);
        self.clients[c].1 = db;
        let other = self.rng.pick(&KEYS);
        let other_db = self.rng.below(DBS as u64) as i64;
        let how = self.rng.below(3);
        self.unfiled_db = Some(if how == 1 { other_db } else { db });
        match how {
            0 => {
                let _ = self.client_cmd(c, &["RENAME", key, other]);
                self.touch_key(db, key);
                self.touch_key(db, other);
            }
            1 => {
                let _ = self.client_cmd(c, &["MOVE", key, &other_db.to_string()]);
                self.touch_key(db, key);
                self.touch_key(other_db, key);
            }
            _ => self.restore(c, other, key),
        }
    }

    /// One of `SWAPDB` (most often: it can move an unindexed lock behind
    /// the pass), `RENAME`, `MOVE`, `RESTORE`, `FLUSHDB`.
    fn during_pass(&mut self, c: usize) {
        let db = self.clients[c].1;
        let key = self.rng.pick(&KEYS);
        let other = self.rng.pick(&KEYS);
        // Mostly the database of the lock just moved away from its index
        // entry (where it landed, for a MOVE), swapped with one the pass
        // scans before it: the lock may land behind the pass.
        let (first, second) = match self.unfiled_db.take() {
            Some(db) if db > 0 && !self.rng.chance(4) => (db, self.rng.below(db as u64) as i64),
            _ => (
                self.rng.below(DBS as u64) as i64,
                self.rng.below(DBS as u64) as i64,
            ),
        };
        match self.rng.below(10) {
            0..=4 => {
                let _ = self.client_cmd(c, &["SWAPDB", &first.to_string(), &second.to_string()]);
                self.swapped(first, second);
            }
            5 => {
                let _ = self.client_cmd(c, &["RENAME", key, other]);
                self.touch_key(db, key);
                self.touch_key(db, other);
            }
            6 => {
                let _ = self.client_cmd(c, &["MOVE", key, &second.to_string()]);
                self.touch_key(db, key);
                self.touch_key(second, key);
            }
            7 | 8 => self.restore(c, key, other),
            _ => {
                let _ = self.client_cmd(c, &["FLUSHDB"]);
                self.flushed(db);
            }
        }
    }

    fn finish(&mut self) {
        // The end: every key goes, so every waiter must be answered soon
        // (granted, or answered for a reason) — none stays blocked.
        let _: () = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query(&mut self.probe)
            .unwrap();
        // A waiter unblocked by CLIENT UNBLOCK … TIMEOUT in the same turn as
        // its grant gets no reply from Redis at all (the grant is taken
        // back): once the server no longer has it blocked, it is done.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.waiters.is_empty() {
            let blocked: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query(&mut self.probe)
                .unwrap();
            let still_blocked = |id: i64| {
                blocked.lines().any(|line| {
                    line.split(' ').any(|f| f == format!("id={id}"))
                        && line
                            .split(' ')
                            .any(|f| f.strip_prefix("flags=").is_some_and(|f| f.contains('b')))
                })
            };
            self.waiters
                .retain(|w| !(w.unblocked && w.buffer.is_empty() && !still_blocked(w.id)));
            let _: () = redis::cmd("FLUSHALL").query(&mut self.probe).unwrap();
            assert!(
                Instant::now() < deadline,
                "{} waiters still blocked with every key gone: {:?} ({})",
                self.waiters.len(),
                self.waiters
                    .iter()
                    .map(|w| (&w.owner, w.db, w.key))
                    .collect::<Vec<_>>(),
                self.context()
            );
            for db in 0..DBS {
                self.touch_db(db);
            }
            std::thread::sleep(Duration::from_millis(5));
            self.drain();
        }
        let mut c = self.server.conn();
        assert_eq!(lock_stat(&mut c, "lock_waiting"), 0);
        assert!(!self.server.log().contains("panicked"));
    }

    /// The figures of a run, printed; and that it checked something.
    fn report(&self, name: &str, started: Instant) {
        let checks = self.grant_checks + self.reply_checks;
        let ceiling = (checks + self.skipped_checks) * SKIP_CEILING_PERCENT / 100;
        println!(
            "{name}: {} steps in {:.1} s, {} waiter grants, {} checked strictly; {} grants and {} replies checked against the model, {} checks skipped after a call slower than {} ms (ceiling {ceiling}, {SKIP_CEILING_PERCENT}% of the checks); {} agreement snapshots ({} databases scanned with SCAN … TYPE), {} quiet points, at most {} ended locks seen at once, the longest stay {:?} (bound {:?}) (seed {:#x})",
            self.step,
            started.elapsed().as_secs_f64(),
            self.waiter_grants,
            self.strict_checks,
            self.grant_checks,
            self.reply_checks,
            self.skipped_checks,
            FAST.as_millis(),
            self.snapshots,
            self.full_scans,
            self.quiet_points,
            self.ended_seen,
            self.ended_longest,
            ended_bound(),
            self.seed,
        );
        assert!(
            self.waiter_grants > 0
                && self.strict_checks > 0
                && self.grant_checks > 0
                && self.reply_checks > 0
                && self.snapshots > 0
                && self.full_scans > 0
                && self.quiet_points > 0,
            "the run checked no grant, no reply or no agreement"
        );
        assert!(
            self.skipped_checks <= ceiling,
            "{} checks skipped after slow calls, above the ceiling of {ceiling}",
            self.skipped_checks
        );
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
    std::env::var("REDIS_LOCK_HOST_FUZZ_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0x5eed_0fa1_7b05_u64)
}

#[test]
fn host_commands_interleaved_with_lock_commands() {
    let steps = env_u64("REDIS_LOCK_HOST_FUZZ_STEPS", 100_000);
    let mut fuzz = Fuzz::new(seed());
    let started = Instant::now();
    fuzz.run(steps);
    fuzz.report("host fuzz", started);
}

/// Measures one sweep pass over the filler: a lock in the last database,
/// renamed away from its index entry, is filed only when the pass reaches
/// it. Returns how long the pass took and how many timer firings it spanned.
fn measure_pass(fuzz: &mut Fuzz) -> (Duration, i64) {
    let c = &mut fuzz.probe;
    run(c, &["SELECT", &(DBS - 1).to_string()]).unwrap();
    acquire(c, "a", "measure", 60_000).unwrap();
    assert!(wait_until(SOON, || lock_stat(c, "lock_lease_index") == 1));
    let runs = lock_stat(c, "lock_timer_runs");
    let started = Instant::now();
    run(c, &["RENAME", "a", "b"]).unwrap();
    assert!(
        wait_until(Duration::from_secs(120), || lock_stat(
            c,
            "lock_lease_index"
        ) == 1),
        "the sweep never filed the renamed lock"
    );
    let took = started.elapsed();
    let firings = lock_stat(c, "lock_timer_runs") - runs;
    run(c, &["DEL", "b"]).unwrap();
    (took, firings)
}

#[test]
fn sweep_passes_under_host_commands() {
    let rounds = env_u64("REDIS_LOCK_HOST_FUZZ_ROUNDS", 40);
    let filler = env_u64("REDIS_LOCK_HOST_FUZZ_FILLER", 100_000);
    let mut fuzz = Fuzz::new(seed() ^ 0x5eeb);
    fuzz.filler = filler;
    for db in 0..DBS - 1 {
        fuzz.fill(db);
    }
    let (pass, firings) = measure_pass(&mut fuzz);
    println!(
        "sweep fuzz: one pass over {} filler keys took {pass:?} and {firings} timer firings",
        filler * (DBS as u64 - 1)
    );
    assert!(
        firings >= 10,
        "a sweep pass over the filler spanned only {firings} timer firings: too few keys for this test"
    );
    let started = Instant::now();
    fuzz.run_sweeps(rounds, pass);
    fuzz.report("sweep fuzz", started);
    println!(
        "sweep fuzz: {} of {rounds} host commands sent while a holder waited for the sweep",
        fuzz.during_passes
    );
    assert!(
        fuzz.during_passes > 0,
        "no host command landed in a sweep pass"
    );
}
