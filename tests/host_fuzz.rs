//! The host fuzzer: random `LOCK.*` calls (with and without `WAIT`, from
//! several connections and databases) interleaved with the server's own
//! commands: `SWAPDB`, `MOVE`, `COPY`, `RENAME`, `SET`, `DEL`, `UNLINK`,
//! `FLUSHDB`, `EXPIRE`, `RESTORE`, `SELECT`, `MULTI/EXEC` (releases next to
//! `CLIENT KILL` and `CLIENT UNBLOCK` of waiting clients), `CLIENT PAUSE`
//! and `DEBUG RELOAD`. After every step it checks:
//!
//! - the server is alive;
//! - a client's own grant names a lock it holds, in its own database;
//! - every `LOCK.ACQUIRE`, `LOCK.RELEASE`, `LOCK.EXTEND` and `LOCK.FENCE`
//!   reply has its contract's shape, and says what the model expects from
//!   a probe just before the call (the same token for a re-entry, nil when
//!   another owner holds the lock, the holds left, 1 or 0, the holder's
//!   token) whenever the model is sure: a lease that outlasts the call, or
//!   no lock and no waiter. A check is skipped when the call took 150 ms or
//!   more; the skips are counted and must stay under a ceiling (printed);
//! - a waiter's grant names a lock it holds in the database it waited in,
//!   whenever nothing the host did since could have moved or removed it;
//! - fresh tokens only grow;
//! - every connection is still in the database it selected;
//! - and at the end, once every key is gone, no waiter stays blocked.
//!
//! `REDIS_LOCK_HOST_FUZZ_STEPS` (default 100,000) and
//! `REDIS_LOCK_HOST_FUZZ_SEED` change the run; a failure prints the seed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, Value};

const KEYS: [&str; 3] = ["a", "b", "c"];
const DBS: i64 = 3;
const CLIENTS: usize = 3;
const MAX_WAITERS: usize = 6;

fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend(format!("${}\r\n{arg}\r\n", arg.len()).bytes());
    }
    out
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

/// What the model expects of a lock call, from the probe before it.
#[derive(Debug)]
enum Expect {
    /// The caller holds the lock, with a lease that outlasts the call.
    Held { holds: i64, token: i64 },
    /// Another owner holds it, with a lease that outlasts the call.
    Other,
    /// No lock at the key, and no waiter that could be granted one.
    Free,
    /// A lease that may end during the call, or waiters that may be granted.
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
    /// The last steps, printed with a failure.
    recent: VecDeque<String>,
}

impl Fuzz {
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

    /// The lock at `key` in `db`; none for a key of another type.
    fn probe_info(&mut self, db: i64, key: &str) -> Option<LockInfo> {
        let _: () = redis::cmd("SELECT").arg(db).query(&mut self.probe).unwrap();
        let reply: Value = redis::cmd("LOCK.INFO")
            .arg(key)
            .query(&mut self.probe)
            .ok()?;
        parse_info(reply)
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

    /// What the model expects of a lock call on `key` by `owner`, from a
    /// probe made just before it. Nothing else runs between the probe and
    /// the call but the server's timers: a lease that has more than
    /// `SURE_PTTL_MS` left stays as the probe saw it for a call that ends
    /// within `FAST` of the probe (a slower one is not checked strictly, and
    /// counted), and a key with no lock stays free when no waiter could be
    /// granted it.
    /// Also says whether the probe saw `owner` hold the lock (whatever its
    /// lease).
    fn expect(&mut self, db: i64, key: &'static str, owner: &str) -> (Expect, bool) {
        let info = self.probe_info(db, key);
        let owned = info.as_ref().is_some_and(|i| i.owner == owner.as_bytes());
        let expect = match info {
            Some(info) if info.pttl <= SURE_PTTL_MS => Expect::Unknown,
            Some(info) if info.owner == owner.as_bytes() => Expect::Held {
                holds: info.holds,
                token: info.token,
            },
            Some(_) => Expect::Other,
            None if self.waiters.is_empty() => Expect::Free,
            None => Expect::Unknown,
        };
        (expect, owned)
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
        let wrongtype =
            |r: &redis::RedisResult<Value>| matches!(r, Err(e) if e.code() == Some("WRONGTYPE"));
        let shape = match (command, reply) {
            ("LOCK.ACQUIRE", Ok(Value::Int(t))) => *t > 0,
            ("LOCK.RELEASE", Ok(Value::Int(n))) => *n >= 0,
            ("LOCK.EXTEND", Ok(Value::Int(n))) => *n == 0 || *n == 1,
            ("LOCK.FENCE", Ok(Value::Int(t))) => *t > 0,
            ("LOCK.ACQUIRE" | "LOCK.RELEASE" | "LOCK.FENCE", Ok(Value::Nil)) => true,
            (_, r) => wrongtype(r),
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
        let right = match (command, expect, reply) {
            ("LOCK.ACQUIRE", Expect::Held { token, .. }, Ok(Value::Int(t))) => t == token,
            ("LOCK.ACQUIRE", Expect::Other, Ok(Value::Nil)) => true,
            ("LOCK.ACQUIRE", Expect::Free, Ok(Value::Int(_))) => true,
            ("LOCK.RELEASE", Expect::Held { holds, .. }, Ok(Value::Int(n))) => *n == holds - 1,
            ("LOCK.RELEASE" | "LOCK.FENCE", Expect::Other, Ok(Value::Nil)) => true,
            ("LOCK.RELEASE" | "LOCK.FENCE", Expect::Free, Ok(Value::Nil)) => true,
            ("LOCK.EXTEND", Expect::Held { .. }, Ok(Value::Int(1))) => true,
            ("LOCK.EXTEND", Expect::Other | Expect::Free, Ok(Value::Int(0))) => true,
            ("LOCK.FENCE", Expect::Held { token, .. }, Ok(Value::Int(t))) => t == token,
            // A key of another type: the probe saw no lock.
            (_, Expect::Free, r) => wrongtype(r),
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
        let (expect, owned) = self.expect(db, key, &owner);
        match self.rng.below(6) {
            0..=2 => {
                let ttl = self.rng.pick(&[200u64, 1_000, 5_000]).to_string();
                let reply = self.client_cmd(c, &["LOCK.ACQUIRE", key, &owner, &ttl]);
                self.check_reply("LOCK.ACQUIRE", &expect, started, &reply);
                let Ok(Value::Int(token)) = reply else {
                    return;
                };
                // A re-entry (the probe saw this owner's lock) gets no
                // fresh token.
                if !owned {
                    self.fresh_token(token, "acquire");
                }
                let info = self.probe_info(db, key);
                if started.elapsed() < FAST {
                    self.grant_checks += 1;
                    let info = info.unwrap_or_else(|| {
                        panic!(
                            "{owner} got {token} for {key} in db {db}, no lock there at {}",
                            self.context()
                        )
                    });
                    assert_eq!(
                        (info.owner.as_slice(), info.token),
                        (owner.as_bytes(), token),
                        "a grant names a lock held by someone else at {}",
                        self.context()
                    );
                } else {
                    self.skipped_checks += 1;
                }
            }
            3 => {
                // A waiter may share this owner id: a release can end its lock.
                let reply = self.client_cmd(c, &["LOCK.RELEASE", key, &owner]);
                self.check_reply("LOCK.RELEASE", &expect, started, &reply);
                self.touch_key(db, key);
            }
            4 => {
                let reply = self.client_cmd(c, &["LOCK.EXTEND", key, &owner, "2000"]);
                self.check_reply("LOCK.EXTEND", &expect, started, &reply);
            }
            _ => {
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
        // Sometimes a client's own owner id: same-owner waiters re-enter.
        let owner = if self.rng.chance(4) {
            Self::owner_of(self.rng.below(CLIENTS as u64) as usize)
        } else {
            self.next_waiter += 1;
            format!("w{}", self.next_waiter)
        };
        let timeout = self.rng.pick(&["0", "300", "2000"]);
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
        stream
            .write_all(&resp(&[
                "LOCK.ACQUIRE",
                key,
                &owner,
                "30000",
                "WAIT",
                timeout,
            ]))
            .unwrap();
        stream.set_nonblocking(true).unwrap();
        let seen = self.epochs(db, key);
        self.note(format!(
            "waiter {owner} (id {id}) waits for {key} in db {db}, timeout {timeout}"
        ));
        let index = self.waiters.len();
        self.waiters.push(Waiter {
            stream,
            buffer: Vec::new(),
            id,
            owner,
            db,
            key,
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
                "waiter {} (db {} key {}) replied {}",
                waiter.owner,
                waiter.db,
                waiter.key,
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
                        || line.starts_with("-ERR the lock granted to this waiter was removed"),
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
        let info = self.probe_info(waiter.db, waiter.key);
        let same_owner_before = info
            .as_ref()
            .is_some_and(|i| i.owner == waiter.owner.as_bytes() && i.holds > 1);
        if !same_owner_before && token > self.max_fresh_token {
            self.max_fresh_token = token;
        }
        if !unchanged {
            return;
        }
        self.strict_checks += 1;
        let info = info.unwrap_or_else(|| {
            panic!(
                "waiter {} got {token} for {} in db {}, but no lock is there at {}",
                waiter.owner,
                waiter.key,
                waiter.db,
                self.context()
            )
        });
        assert_eq!(
            (info.owner.as_slice(), info.token),
            (waiter.owner.as_bytes(), token),
            "waiter {} was granted {} in db {} but someone else holds it at {}",
            waiter.owner,
            waiter.key,
            waiter.db,
            self.context()
        );
    }

    fn host_call(&mut self, c: usize) {
        let db = self.clients[c].1;
        let key = self.rng.pick(&KEYS);
        let other = self.rng.pick(&KEYS);
        let other_db = self.rng.below(DBS as u64) as i64;
        match self.rng.below(16) {
            0 => {
                let _ = self.client_cmd(c, &["SWAPDB", &db.to_string(), &other_db.to_string()]);
                self.touch_db(db);
                self.touch_db(other_db);
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
                self.touch_db(db);
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
            8 => {
                let dump = self.client_cmd(c, &["DUMP", other]);
                if let Ok(Value::BulkString(payload)) = dump {
                    let _: redis::RedisResult<Value> = redis::cmd("RESTORE")
                        .arg(key)
                        .arg(0)
                        .arg(payload)
                        .arg("REPLACE")
                        .query(&mut self.clients[c].0);
                    self.touch_key(db, key);
                }
            }
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
            .arg("WAIT")
            .arg(100);
        let reply: redis::RedisResult<Value> = pipe.query(&mut self.clients[c].0);
        self.note(format!(
            "c{c} MULTI release {key}, end waiter {target:?} -> {reply:?}"
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

    fn run(&mut self, steps: u64) {
        for step in 0..steps {
            self.step = step;
            let c = self.rng.below(CLIENTS as u64) as usize;
            match self.rng.below(10) {
                0 | 1 => self.spawn_waiter(),
                2..=5 => self.lock_call(c),
                _ => self.host_call(c),
            }
            self.drain();
            if step % 64 == 0 {
                let pong: String = redis::cmd("PING")
                    .query(&mut self.probe)
                    .unwrap_or_else(|e| panic!("the server died at {}: {e}", self.context()));
                assert_eq!(pong, "PONG");
                self.check_dbs();
            }
        }
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
}

#[test]
fn host_commands_interleaved_with_lock_commands() {
    let steps = std::env::var("REDIS_LOCK_HOST_FUZZ_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let seed = std::env::var("REDIS_LOCK_HOST_FUZZ_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0x5eed_0fa1_7b05_u64);
    let server = RedisServer::start();
    let clients = (0..CLIENTS).map(|_| (server.conn(), 0)).collect();
    let probe = server.conn();
    let mut fuzz = Fuzz {
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
        recent: VecDeque::new(),
    };
    let started = Instant::now();
    fuzz.run(steps);
    let checks = fuzz.grant_checks + fuzz.reply_checks;
    let ceiling = (checks + fuzz.skipped_checks) * SKIP_CEILING_PERCENT / 100;
    println!(
        "host fuzz: {steps} steps in {:.1} s, {} waiter grants, {} checked strictly; {} grants and {} replies checked against the model, {} checks skipped after a call slower than {} ms (ceiling {ceiling}, {SKIP_CEILING_PERCENT}% of the checks) (seed {seed:#x})",
        started.elapsed().as_secs_f64(),
        fuzz.waiter_grants,
        fuzz.strict_checks,
        fuzz.grant_checks,
        fuzz.reply_checks,
        fuzz.skipped_checks,
        FAST.as_millis()
    );
    assert!(
        fuzz.waiter_grants > 0
            && fuzz.strict_checks > 0
            && fuzz.grant_checks > 0
            && fuzz.reply_checks > 0,
        "the run checked no grant or no reply"
    );
    assert!(
        fuzz.skipped_checks <= ceiling,
        "{} checks skipped after slow calls, above the ceiling of {ceiling}",
        fuzz.skipped_checks
    );
}
