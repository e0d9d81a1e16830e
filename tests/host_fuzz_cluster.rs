//! The host fuzzer's cluster variant: a 3-master cluster, random `LOCK.*`
//! calls (exclusive locks, shared locks and semaphores, and waiters with
//! `WAIT`) on keys of two hash slots, while the slots move back and forth
//! between the masters: by `MIGRATE`-based resharding, as `redis-cli
//! --cluster reshard` does it (`SETSLOT … IMPORTING`/`MIGRATING`, `MIGRATE …
//! KEYS`, `SETSLOT … NODE` on every master), and where the server has it by
//! atomic slot migration (Valkey 9's `CLUSTER MIGRATESLOTS`, Redis 8.4+'s
//! `CLUSTER MIGRATION IMPORT`, during which the other slot's keys are
//! locked and waited for). After every step it checks:
//!
//! - a lock is never on two nodes at once (`EXISTS` on every master);
//! - the tokens of a key only grow across nodes: a fresh grant, wherever
//!   the key is served now, is above its live holders' tokens and every
//!   token its holders carried into that node when its slot moved there
//!   (a lock's arrival raises the target's counter; half the
//!   `LOCK.FENCE` calls raise a holder's token with `ATLEAST` far above
//!   every token so far, so a node that misses the raise falls behind);
//! - every waiter is answered (granted, nil after its timeout, `TRYAGAIN`
//!   or `MOVED` when its slot left, or a mode or `LIMIT` error) within its
//!   timeout and a bound, never left hanging; a granted waiter's token is
//!   above every token its key had when it started waiting;
//! - on every master, in one `MULTI` (`SCAN … TYPE redislock`, `INFO
//!   lock`), no more lock keys than `lock_held` (a slot that left may be
//!   freed later) and no more lease-index entries than `lock_holders`;
//! - after every slot move (a quiet point), within a bound, each master's
//!   lease index holds every holder, its lock keys are its `lock_held`,
//!   and no lock whose leases all ended is left on any master: leases end
//!   on whichever node holds the lock.
//!
//! `REDIS_LOCK_HOST_FUZZ_CLUSTER_STEPS` (default 3,000, a slot move every
//! 30 steps on average) and `REDIS_LOCK_HOST_FUZZ_SEED` change the run; a
//! failure prints the seed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{HashMap, VecDeque};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use redis::Value;
use testkit::cluster::{node_id, RedisCluster};

const TAGS: [&str; 2] = ["{fz0}", "{fz1}"];
const NAMES: [&str; 3] = ["a", "b", "c"];
const LOCK_TYPE: &str = "redislock";
const MAX_WAITERS: usize = 6;

/// How long a waiter may stay unanswered after its timeout, and a lock
/// whose leases ended (or a holder without an index entry) may stay, at a
/// quiet point: far above a slot move and a sweep pass of these few keys.
fn bound() -> Duration {
    Duration::from_secs(if testkit::valgrind() { 120 } else { 20 })
}

/// Which atomic slot migration the server has.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Atomic {
    None,
    /// Valkey 9's `CLUSTER MIGRATESLOTS`.
    Valkey,
    /// Redis 8.4+'s `CLUSTER MIGRATION IMPORT`.
    Redis,
}

fn atomic_migration(server: &RedisServer) -> Atomic {
    let reply: Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("CLUSTER")
        .query(&mut server.conn())
        .unwrap();
    let mut names = Vec::new();
    strings(&reply, &mut names);
    if names.iter().any(|n| n == "cluster|migrateslots") {
        Atomic::Valkey
    } else if names.iter().any(|n| n == "cluster|migration") {
        Atomic::Redis
    } else {
        Atomic::None
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

/// The live holders of `key` (`LOCK.HOLDERS`), as (owner, token, pttl).
fn holders(conn: &mut redis::Connection, key: &str) -> redis::RedisResult<Vec<(String, i64, i64)>> {
    let reply: Value = redis::cmd("LOCK.HOLDERS").arg(key).query(conn)?;
    let Value::Array(items) = reply else {
        panic!("LOCK.HOLDERS: {reply:?}")
    };
    Ok(items
        .into_iter()
        .map(|item| {
            let pairs = info_pairs(item).unwrap();
            let get = |name: &str| pairs.iter().find(|(k, _)| k == name).unwrap().1.clone();
            let (Value::Int(token), Value::Int(pttl)) = (get("token"), get("pttl")) else {
                panic!("token, pttl: {pairs:?}")
            };
            (text(&get("owner")), token, pttl)
        })
        .collect())
}

struct Waiter {
    key: String,
    owner: String,
    /// The floor of its key's fresh tokens when it started waiting.
    floor: i64,
    deadline: Instant,
    handle: JoinHandle<Result<Option<i64>, String>>,
}

struct Fuzz {
    rng: Rng,
    seed: u64,
    cluster: RedisCluster,
    conns: Vec<redis::Connection>,
    atomic: Atomic,
    /// Times a slot's owner, once shown everywhere after a move, was
    /// redirected elsewhere again (the cluster bus's epoch race) and said
    /// again; a few per run at most.
    owners_said_again: u32,
    /// Which master serves each tag's slot.
    owner: HashMap<i64, usize>,
    /// Per key and master, the highest token a holder carried into that
    /// master when the key's slot moved there (with a lease long enough to
    /// arrive alive): every later fresh grant of the key there is above it.
    /// Per master: a hold released before its slot moves on carries its
    /// token nowhere (a free lock has no key; the module's promise is about
    /// the tokens that arrive), so another master may grant below it when
    /// its clock is behind (seen on Redis 8.6 with the test's skewed wall
    /// clocks, when this was one figure per key).
    carried: HashMap<(String, usize), i64>,
    /// The highest token seen anywhere (`ATLEAST` goes above it).
    top: i64,
    waiters: Vec<Waiter>,
    next_waiter: u64,
    step: u64,
    fresh_checked: u64,
    waiters_answered: u64,
    waiters_granted: u64,
    waiters_redirected: u64,
    moves: (u64, u64),
    /// The slot an atomic migration is moving now.
    moving: Option<i64>,
    quiet_points: u64,
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

    fn masters(&self) -> &[RedisServer] {
        &self.cluster.nodes[..3]
    }

    fn slot_of(&self, key: &str) -> i64 {
        self.cluster.key_slot(key)
    }

    /// A key of either slot (of the other one while a slot moves).
    fn key(&mut self) -> String {
        let mut tag = self.rng.pick(&TAGS);
        if self.moving == Some(self.slot_of(tag)) {
            tag = if tag == TAGS[0] { TAGS[1] } else { TAGS[0] };
        }
        format!("{tag}{}", self.rng.pick(&NAMES))
    }

    /// Notes tokens seen.
    fn seen(&mut self, tokens: impl IntoIterator<Item = i64>) {
        for token in tokens {
            self.top = self.top.max(token);
        }
    }

    /// What a fresh grant of `key` on `node` must be above: every token the
    /// key's holders carried into that node, and its live holders' tokens.
    fn floor(&self, key: &str, node: usize, live: &[(String, i64, i64)]) -> i64 {
        let carried = self
            .carried
            .get(&(key.to_string(), node))
            .copied()
            .unwrap_or(0);
        live.iter().map(|h| h.1).fold(carried, i64::max)
    }

    /// One `LOCK.*` call on the master serving the key.
    fn lock_call(&mut self) {
        let key = self.key();
        let node = self.owner[&self.slot_of(&key)];
        let owner = format!("c{}", self.rng.below(3));
        let mut before = holders(&mut self.conns[node], &key);
        if matches!(&before, Err(e) if e.code() == Some("MOVED")) {
            // The slot showed as this master's on all three after its move,
            // and a stale claim in the cluster bus took it back: a race of
            // the servers' configuration epochs, not of the module. Say the
            // owner again (as `redis-cli --cluster fix` would), a few
            // times per run at most.
            self.say_owner_again(self.slot_of(&key), node);
            before = holders(&mut self.conns[node], &key);
        }
        let Ok(before) = before else {
            // A value of another type cannot be here: only locks are made.
            panic!(
                "LOCK.HOLDERS {key} on node {node}: {before:?} at {}",
                self.context()
            );
        };
        self.seen(before.iter().map(|h| h.1));
        let floor = self.floor(&key, node, &before);
        let mut args: Vec<String> = match self.rng.below(6) {
            0..=2 => {
                let ttl = self.rng.pick(&["300", "1500", "5000"]);
                let mut args = vec![
                    "LOCK.ACQUIRE".into(),
                    key.clone(),
                    owner.clone(),
                    ttl.into(),
                ];
                match self.rng.below(3) {
                    0 => {}
                    1 => args.push("SHARED".into()),
                    _ => args.extend(["SHARED".into(), "LIMIT".into(), "2".into()]),
                }
                args
            }
            3 => vec!["LOCK.RELEASE".into(), key.clone(), owner.clone()],
            4 => vec![
                "LOCK.EXTEND".into(),
                key.clone(),
                owner.clone(),
                "2000".into(),
            ],
            // Half the fences raise the holder's token (and its node's
            // counter) far above every token so far: a node the key moves
            // to must raise its own counter above it when the lock arrives.
            _ if self.rng.chance(2) => {
                let above = self.top + 1_000_000_000;
                vec![
                    "LOCK.FENCE".into(),
                    key.clone(),
                    owner.clone(),
                    "ATLEAST".into(),
                    above.to_string(),
                ]
            }
            _ => vec!["LOCK.FENCE".into(), key.clone(), owner.clone()],
        };
        let mut cmd = redis::cmd(&args[0]);
        for arg in args.drain(1..) {
            cmd.arg(arg);
        }
        let reply: redis::RedisResult<Value> = cmd.query(&mut self.conns[node]);
        self.note(format!(
            "node {node} {} {key} {owner} -> {reply:?}",
            args[0]
        ));
        if let Err(e) = &reply {
            let line = error_line(e);
            assert!(
                line.starts_with("ERR owner holds this lock in ") || line.starts_with("ERR LIMIT "),
                "{} on the node serving {key} failed: {line} at {}",
                args[0],
                self.context()
            );
        }
        if args[0] == "LOCK.FENCE" {
            if let Ok(Value::Int(token)) = reply {
                self.seen([token]);
            }
        }
        if args[0] == "LOCK.ACQUIRE" {
            if let Ok(Value::Int(token)) = reply {
                let fresh = !before.iter().any(|h| h.0 == owner);
                if fresh {
                    self.fresh_checked += 1;
                    assert!(
                        token > floor,
                        "a fresh grant of {key} on node {node} got {token}, not above {floor}, a token its holders carried here or hold (its holders just before: {before:?}) at {}",
                        self.context()
                    );
                }
                self.seen([token]);
            }
        }
    }

    fn spawn_waiter(&mut self) {
        if self.waiters.len() >= MAX_WAITERS {
            return;
        }
        let key = self.key();
        let node = self.owner[&self.slot_of(&key)];
        if let Ok(now) = holders(&mut self.conns[node], &key) {
            self.seen(now.iter().map(|h| h.1));
        }
        let floor = match holders(&mut self.conns[node], &key) {
            Ok(now) => self.floor(&key, node, &now),
            Err(_) => self.carried.get(&(key.clone(), node)).copied().unwrap_or(0),
        };
        self.next_waiter += 1;
        let owner = format!("w{}", self.next_waiter);
        let timeout_ms = self.rng.pick(&[500u64, 3_000]);
        let mode: &[&str] = self
            .rng
            .pick(&[&[][..], &["SHARED"], &["SHARED", "LIMIT", "2"]]);
        let mut conn = self.masters()[node].conn();
        let _: () = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(&owner)
            .query(&mut conn)
            .unwrap();
        let (k, o, m) = (key.clone(), owner.clone(), mode.to_vec());
        let handle = std::thread::spawn(move || {
            let mut cmd = redis::cmd("LOCK.ACQUIRE");
            cmd.arg(&k)
                .arg(&o)
                .arg(5_000)
                .arg(&m)
                .arg("WAIT")
                .arg(timeout_ms);
            match cmd.query::<Value>(&mut conn) {
                Ok(Value::Int(t)) => Ok(Some(t)),
                Ok(Value::Nil) => Ok(None),
                Ok(other) => Err(format!("unexpected {other:?}")),
                Err(e) => Err(error_line(&e)),
            }
        });
        self.note(format!(
            "waiter {owner} on node {node} for {key} {mode:?}, timeout {timeout_ms}"
        ));
        // Until the node has it blocked, or answered it, nothing else runs.
        let probe = &mut self.conns[node];
        let settled = wait_until(SOON, || {
            let list: String = redis::cmd("CLIENT").arg("LIST").query(probe).unwrap();
            handle.is_finished()
                || list.lines().any(|line| {
                    line.split(' ').any(|f| f == format!("name={owner}"))
                        && line
                            .split(' ')
                            .any(|f| f.strip_prefix("flags=").is_some_and(|f| f.contains('b')))
                })
        });
        assert!(settled, "waiter {owner} was never blocked nor answered");
        self.waiters.push(Waiter {
            key,
            owner,
            floor,
            deadline: Instant::now() + Duration::from_millis(timeout_ms) + bound(),
            handle,
        });
    }

    /// Joins every waiter that was answered, and checks none hangs.
    fn check_waiters(&mut self) {
        let mut i = 0;
        while i < self.waiters.len() {
            if !self.waiters[i].handle.is_finished() {
                assert!(
                    Instant::now() < self.waiters[i].deadline,
                    "waiter {} for {} was never answered at {}",
                    self.waiters[i].owner,
                    self.waiters[i].key,
                    self.context()
                );
                i += 1;
                continue;
            }
            let waiter = self.waiters.remove(i);
            let reply = waiter.handle.join().unwrap();
            self.note(format!(
                "waiter {} for {} -> {reply:?}",
                waiter.owner, waiter.key
            ));
            self.waiters_answered += 1;
            match &reply {
                Ok(Some(token)) => {
                    self.waiters_granted += 1;
                    assert!(
                        *token > waiter.floor,
                        "waiter {} was granted {} with {token}, not above {}, a token its holders carried or held when it started waiting at {}",
                        waiter.owner,
                        waiter.key,
                        waiter.floor,
                        self.context()
                    );
                    self.seen([*token]);
                }
                Ok(None) => {}
                Err(line) if line.starts_with("TRYAGAIN") || line.starts_with("MOVED") => {
                    self.waiters_redirected += 1;
                }
                Err(line) => assert!(
                    line.starts_with("ERR owner holds this lock in ")
                        || line.starts_with("ERR LIMIT "),
                    "waiter {} for {} got {line} at {}",
                    waiter.owner,
                    waiter.key,
                    self.context()
                ),
            }
        }
    }

    /// No key is a lock on two masters; each master has no more lock keys
    /// than its `lock_held` (values of a slot that left, or of a lazy
    /// flush, may wait for the server to free them) and no more index
    /// entries than holders. Returns, per master, (lock keys, held,
    /// holders, index entries).
    fn check_nodes(&mut self) -> Vec<(Vec<String>, i64, i64, i64)> {
        let mut books = Vec::new();
        let mut seen_on: HashMap<String, usize> = HashMap::new();
        for node in 0..3 {
            let replies: Vec<Value> = redis::pipe()
                .atomic()
                .cmd("SCAN")
                .arg(0)
                .arg("COUNT")
                .arg(1_000_000)
                .arg("TYPE")
                .arg(LOCK_TYPE)
                .cmd("INFO")
                .arg("lock")
                .query(&mut self.conns[node])
                .unwrap();
            let Value::Array(scan) = &replies[0] else {
                panic!("SCAN: {replies:?}")
            };
            assert_eq!(text(&scan[0]), "0", "SCAN did not finish in one call");
            let Value::Array(found) = &scan[1] else {
                panic!("SCAN: {scan:?}")
            };
            let keys: Vec<String> = found.iter().map(text).collect();
            let info: HashMap<String, i64> = text(&replies[1])
                .lines()
                .filter_map(|l| {
                    let (k, v) = l.trim().split_once(':')?;
                    Some((k.to_string(), v.parse().ok()?))
                })
                .collect();
            let (held, holders, index) = (
                info["lock_held"],
                info["lock_holders"],
                info["lock_lease_index"],
            );
            assert!(
                keys.len() as i64 <= held && index <= holders,
                "node {node}: INFO lock (held {held}, holders {holders}, lease index {index}) disagrees with its lock keys {keys:?} at {}",
                self.context()
            );
            for key in &keys {
                if let Some(other) = seen_on.insert(key.clone(), node) {
                    panic!(
                        "{key} is a lock on node {other} and on node {node} at once at {}",
                        self.context()
                    );
                }
            }
            books.push((keys, held, holders, index));
        }
        books
    }

    /// Within the bound: on every master every holder indexed and the lock
    /// keys `lock_held`, and no lock without a live holder left anywhere.
    fn quiet_point(&mut self) {
        let started = Instant::now();
        loop {
            self.check_waiters();
            let books = self.check_nodes();
            let mut settled = true;
            for (node, (keys, held, holders, index)) in books.iter().enumerate() {
                if holders != index || keys.len() as i64 != *held {
                    settled = false;
                }
                for key in keys {
                    let live = holders_of(&mut self.conns[node], key);
                    if live == Some(0) {
                        settled = false;
                    }
                }
            }
            if settled {
                break;
            }
            assert!(
                started.elapsed() < bound(),
                "the masters never settled (every holder indexed, every ended lock gone) in {:?}: {books:?} at {}",
                bound(),
                self.context()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.quiet_points += 1;
    }

    /// Moves a slot to another master.
    fn move_slot(&mut self) {
        let tag = self.rng.pick(&TAGS);
        let slot = self.slot_of(tag);
        let from = self.owner[&slot];
        let to = (from + 1 + self.rng.below(2) as usize) % 3;
        let atomic = self.atomic != Atomic::None && self.rng.chance(2);
        // The tokens that move with the slot: holders whose lease outlasts
        // the move arrive with it.
        for name in NAMES {
            let key = format!("{tag}{name}");
            if let Ok(now) = holders(&mut self.conns[from], &key) {
                let carried = now.iter().filter(|h| h.2 > 5_000 / 2).map(|h| h.1).max();
                if let Some(carried) = carried {
                    let floor = self.carried.entry((key, to)).or_insert(0);
                    *floor = (*floor).max(carried);
                }
            }
        }
        self.note(format!(
            "move slot {slot} ({tag}) from node {from} to node {to} ({})",
            if atomic { "atomic" } else { "MIGRATE" }
        ));
        if atomic {
            self.move_atomically(slot, from, to);
            self.moves.1 += 1;
        } else {
            self.move_by_migrate(slot, from, to);
            self.moves.0 += 1;
        }
        self.owner.insert(slot, to);
        let shows_moved = |fuzz: &Self| {
            let (source, target) = (&fuzz.masters()[from], &fuzz.masters()[to]);
            wait_until(Duration::from_secs(15), || {
                RedisCluster::owner_port(source, slot) == target.port()
                    && RedisCluster::owner_port(target, slot) == target.port()
            })
        };
        let mut moved = shows_moved(self);
        if !moved && !atomic {
            // A slot moved back and forth in quick succession can lose a
            // configuration-epoch race in the cluster bus (a node keeps
            // the owner with the higher epoch it heard of): say the new
            // owner again, as `redis-cli --cluster fix` would.
            self.set_owner_everywhere(slot, to);
            moved = shows_moved(self);
        }
        assert!(
            moved,
            "slot {slot} never showed as node {to}'s at {}",
            self.context()
        );
    }

    /// `CLUSTER SETSLOT slot NODE` of `node` on every master.
    fn set_owner_everywhere(&mut self, slot: i64, node: usize) {
        let id = node_id(&self.masters()[node]);
        for conn in &mut self.conns {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&id)
                .query(conn)
                .unwrap();
        }
    }

    /// Says on every master that `node` serves `slot`, with a new
    /// configuration epoch for `node` so that its claim wins, and waits
    /// until all three show it.
    fn say_owner_again(&mut self, slot: i64, node: usize) {
        self.owners_said_again += 1;
        assert!(
            self.owners_said_again <= 3,
            "slot owners were taken back {} times at {}",
            self.owners_said_again,
            self.context()
        );
        self.set_owner_everywhere(slot, node);
        let _: Value = redis::cmd("CLUSTER")
            .arg("BUMPEPOCH")
            .query(&mut self.conns[node])
            .unwrap();
        let port = self.masters()[node].port();
        assert!(
            wait_until(Duration::from_secs(15), || {
                self.masters()
                    .iter()
                    .all(|m| RedisCluster::owner_port(m, slot) == port)
            }),
            "slot {slot} never showed as node {node}'s again at {}",
            self.context()
        );
    }

    /// As `redis-cli --cluster reshard`: importing, migrating, every key
    /// by `MIGRATE … KEYS`, then the new owner on every master (the target
    /// first).
    fn move_by_migrate(&mut self, slot: i64, from: usize, to: usize) {
        let (from_id, to_id) = (node_id(&self.masters()[from]), node_id(&self.masters()[to]));
        let setslot = |conn: &mut redis::Connection, args: &[&str]| {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT").arg(slot);
            for a in args {
                cmd.arg(*a);
            }
            let _: () = cmd.query(conn).unwrap();
        };
        setslot(&mut self.conns[to], &["IMPORTING", &from_id]);
        setslot(&mut self.conns[from], &["MIGRATING", &to_id]);
        let port = self.masters()[to].port();
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut self.conns[from])
                .unwrap();
            if keys.is_empty() {
                break;
            }
            let _: () = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(port)
                .arg("")
                .arg(0)
                .arg(5_000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut self.conns[from])
                .unwrap_or_else(|e| panic!("MIGRATE of slot {slot} failed: {e}"));
        }
        for node in [to, from, 3 - to - from] {
            setslot(&mut self.conns[node], &["NODE", &to_id]);
        }
    }

    fn move_atomically(&mut self, slot: i64, from: usize, to: usize) {
        match self.atomic {
            Atomic::Valkey => {
                let target = node_id(&self.masters()[to]);
                let _: () = redis::cmd("CLUSTER")
                    .arg("MIGRATESLOTS")
                    .arg("SLOTSRANGE")
                    .arg(slot)
                    .arg(slot)
                    .arg("NODE")
                    .arg(target)
                    .query(&mut self.conns[from])
                    .unwrap_or_else(|e| panic!("CLUSTER MIGRATESLOTS refused: {e}"));
            }
            Atomic::Redis => {
                let _: String = redis::cmd("CLUSTER")
                    .arg("MIGRATION")
                    .arg("IMPORT")
                    .arg(slot)
                    .arg(slot)
                    .query(&mut self.conns[to])
                    .unwrap_or_else(|e| panic!("CLUSTER MIGRATION IMPORT refused: {e}"));
            }
            Atomic::None => unreachable!(),
        }
        // The waiters keep waiting (and are answered) while the slot moves,
        // and the other slot's keys are locked and waited for meanwhile.
        self.moving = Some(slot);
        let (source, target) = (self.masters()[from].port(), self.masters()[to].port());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let done = RedisCluster::owner_port(&self.masters()[from], slot) == target
                && RedisCluster::owner_port(&self.masters()[to], slot) == target;
            if done {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the atomic migration of slot {slot} from {source} to {target} never completed at {}",
                self.context()
            );
            if self.rng.chance(3) {
                self.spawn_waiter();
            } else {
                self.lock_call();
            }
            self.check_waiters();
        }
        self.moving = None;
    }

    fn run(&mut self, steps: u64) {
        for step in 0..steps {
            self.step = step;
            match self.rng.below(30) {
                0 => {
                    self.move_slot();
                    self.check_waiters();
                    self.check_nodes();
                    self.quiet_point();
                }
                1..=7 => self.spawn_waiter(),
                _ => self.lock_call(),
            }
            self.check_waiters();
            if step % 4 == 0 {
                self.check_nodes();
            }
        }
        // Every waiter is answered within its timeout and the bound.
        while !self.waiters.is_empty() {
            self.check_waiters();
            std::thread::sleep(Duration::from_millis(20));
        }
        self.quiet_point();
        for node in self.masters() {
            assert!(!node.log().contains("panicked"));
        }
    }
}

/// How many live holders `key` has on this node (None: not served here).
fn holders_of(conn: &mut redis::Connection, key: &str) -> Option<usize> {
    holders(conn, key).ok().map(|h| h.len())
}

#[test]
fn locks_and_waiters_under_slot_moves() {
    let steps = std::env::var("REDIS_LOCK_HOST_FUZZ_CLUSTER_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3_000);
    let seed = std::env::var("REDIS_LOCK_HOST_FUZZ_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0x5eed_0c15);
    let atomic = atomic_migration(&RedisServer::start());
    let cluster = RedisCluster::start(3, 0);
    let conns = cluster.nodes[..3].iter().map(|n| n.conn()).collect();
    let mut owner = HashMap::new();
    for tag in TAGS {
        let slot = cluster.key_slot(tag);
        let port = RedisCluster::owner_port(&cluster.nodes[0], slot);
        let node = cluster.nodes[..3]
            .iter()
            .position(|n| n.port() == port)
            .unwrap();
        owner.insert(slot, node);
    }
    let mut fuzz = Fuzz {
        rng: Rng(seed),
        seed,
        cluster,
        conns,
        atomic,
        owners_said_again: 0,
        owner,
        carried: HashMap::new(),
        top: 0,
        waiters: Vec::new(),
        next_waiter: 0,
        step: 0,
        fresh_checked: 0,
        waiters_answered: 0,
        waiters_granted: 0,
        waiters_redirected: 0,
        moves: (0, 0),
        moving: None,
        quiet_points: 0,
        recent: VecDeque::new(),
    };
    let started = Instant::now();
    fuzz.run(steps);
    println!(
        "cluster host fuzz: {steps} steps in {:.1} s, {} slot moves by MIGRATE and {} atomic ({atomic:?}), {} fresh grants checked above the key's earlier tokens, {} waiters answered ({} granted, {} told to retry or redirected), {} quiet points (seed {seed:#x})",
        started.elapsed().as_secs_f64(),
        fuzz.moves.0,
        fuzz.moves.1,
        fuzz.fresh_checked,
        fuzz.waiters_answered,
        fuzz.waiters_granted,
        fuzz.waiters_redirected,
        fuzz.quiet_points,
    );
    assert!(
        fuzz.moves.0 > 0
            && fuzz.fresh_checked > 0
            && fuzz.waiters_granted > 0
            && fuzz.quiet_points > 0,
        "the run moved no slot, checked no fresh grant or granted no waiter"
    );
    if atomic != Atomic::None {
        assert!(fuzz.moves.1 > 0, "the run made no atomic migration");
    }
}
