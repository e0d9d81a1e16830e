//! The recorded workload: many connections to one node (`appendfsync
//! always`, no recovery window) send single commands, pipelines and
//! `MULTI` blocks on a few keys for a few owners, while the node is killed
//! with `kill -9` and restarted on the same data. Leases are short (hundreds
//! of milliseconds, drawn per command) so that many end during the
//! history, and `LOCK.EXTEND` shortens as often as it lengthens.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::aio::ConnectionLike;
use redis::Value;
use testkit::{RedisServer, ServerOptions};

use super::history::{Entry, Recorder};
use super::spec::{Cmd, Mode, Owner, Reply, Step, Wait};

/// What kind of lock a key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Every owner takes it without `SHARED`.
    Exclusive,
    /// A read-write lock: readers take it with `SHARED`, writers without
    /// ([`mode`]: each owner always in the same mode, so that no request
    /// meets its own hold in the other mode, an error).
    ReadWrite,
    /// A semaphore: every owner takes it with `SHARED LIMIT`
    /// [`SEMAPHORE_PERMITS`].
    Semaphore,
}

/// The permits of the workload's semaphores.
pub const SEMAPHORE_PERMITS: u8 = 2;

impl Kind {
    /// Key `key`'s kind: with `shared`, the keys are exclusive locks,
    /// read-write locks and semaphores in turn; without, all exclusive.
    pub fn of(key: usize, shared: bool) -> Kind {
        match key % 3 {
            _ if !shared => Kind::Exclusive,
            0 => Kind::Exclusive,
            1 => Kind::ReadWrite,
            _ => Kind::Semaphore,
        }
    }
}

/// The mode `owner` takes a key of `kind` in: on a read-write lock, owners
/// whose number is a multiple of 3 write, the others read.
pub fn mode(kind: Kind, owner: Owner) -> Mode {
    match kind {
        Kind::Exclusive => Mode::Exclusive,
        Kind::ReadWrite if owner % 3 == 0 => Mode::Exclusive,
        Kind::ReadWrite => Mode::Shared { limit: None },
        Kind::Semaphore => Mode::Shared {
            limit: Some(SEMAPHORE_PERMITS),
        },
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct Settings {
    pub duration: Duration,
    pub connections: usize,
    pub keys: usize,
    pub owners: u8,
    /// The node is killed this long after each (re)start (drawn anew each
    /// time).
    pub kill_every_ms: std::ops::RangeInclusive<u64>,
    pub seed: u64,
    /// `appendfsync always` (the default); `false` runs the node without
    /// persistence: a negative control, whose restarts forget every lock.
    pub persistence: bool,
    /// The leases of `LOCK.ACQUIRE` and `LOCK.EXTEND` (drawn per command).
    pub ttl_ms: std::ops::RangeInclusive<u64>,
    /// 0 (the default); otherwise a negative control: the node's lease
    /// clock runs this many parts per million fast (`LOCK.DEBUG
    /// MONOTONIC-RATE`, set once at the start: a restarted node runs at the
    /// real rate again, so the control is run without kills), and leases
    /// end early by the recorder's clock.
    pub lease_clock_ppm: i64,
    /// Clients that take locks with `LOCK.ACQUIRE … WAIT` (owners 200 and
    /// up, one each), one at a time per key: each waits until the node has
    /// it blocked (`CLIENT LIST`) before the next may send its own, so the
    /// queue's order is known.
    pub waiters: usize,
    /// The keys the `WAIT` clients take (the first this many of `keys`):
    /// fewer than all, so that their waits meet in the same queues (the
    /// controls that swap two waiters need two that waited together) while
    /// the other connections spread over every key (the checker's work
    /// grows steeply with each key's steps).
    pub waited_keys: usize,
    /// Keys are exclusive locks, read-write locks and semaphores in turn
    /// ([`Kind::of`]) (the default); `false`: all exclusive.
    pub shared: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            duration: Duration::from_secs(8),
            connections: 8,
            keys: 18,
            owners: 3,
            kill_every_ms: 500..=1_500,
            seed: 20_261_124,
            persistence: true,
            ttl_ms: 100..=800,
            lease_clock_ppm: 0,
            waiters: 3,
            waited_keys: 6,
            shared: true,
        }
    }
}

impl Settings {
    /// The negative control of early (or late) lease ends: the node's lease
    /// clock runs `ppm` parts per million fast (slow when negative), and it
    /// is never killed (a restarted node's clock runs at the real rate).
    pub fn fast_lease_clock(self, ppm: i64) -> Settings {
        Settings {
            lease_clock_ppm: ppm,
            // Kills further apart than any run.
            kill_every_ms: 86_400_000..=86_400_000,
            // A history that is not linearizable makes the checker search
            // every order: waiters make that slow, and are not what this
            // control is about.
            waiters: 0,
            ..self
        }
    }
}

/// What a run recorded, and what happened.
pub struct Run {
    pub recorder: Recorder,
    pub kills: u64,
    /// Leases the node ended (`lock_expired` of `INFO lock`, read before
    /// each kill and at the end: a count of what the history exercised).
    pub lease_ends: u64,
    /// Steps sent in a pipeline of several, or in a `MULTI`.
    pub pipelined: u64,
    pub transactions: u64,
    /// `WAIT`s answered with a token after the node had them blocked (a
    /// hand-off), answered nil (timed out), and answered at once.
    pub handed_off: u64,
    pub timed_out: u64,
    pub at_once: u64,
    /// Of the hand-offs, those to `SHARED` waiters.
    pub shared_handed_off: u64,
}

/// Records a history; an error is a reply the specification has no word
/// for (a module error, a reply of the wrong shape).
pub async fn record(settings: &Settings) -> Result<Run, String> {
    let persistence: &[&str] = if settings.persistence {
        &["--appendonly", "yes", "--appendfsync", "always"]
    } else {
        &["--appendonly", "no"]
    };
    let options = ServerOptions::default()
        .args(persistence.iter().copied())
        .module_args(["recovery-ms", "0"]);
    let server = tokio::task::spawn_blocking(move || RedisServer::start_with(options))
        .await
        .map_err(|e| format!("starting the node: {e}"))?;
    let url = server.url();
    if settings.lease_clock_ppm != 0 {
        let ppm = settings.lease_clock_ppm;
        let url = url.clone();
        tokio::task::spawn_blocking(move || lease_clock_rate(&url, ppm))
            .await
            .map_err(|e| format!("setting the lease clock: {e}"))??;
    }
    let recorder = Arc::new(Recorder::default());
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let killer = {
        let (recorder, stop, range) = (
            recorder.clone(),
            stop.clone(),
            settings.kill_every_ms.clone(),
        );
        let seed = settings.seed;
        std::thread::spawn(move || kill_loop(server, &recorder, &stop, range, seed))
    };
    let gates: Arc<Vec<tokio::sync::Mutex<()>>> = Arc::new(
        (0..settings.keys)
            .map(|_| tokio::sync::Mutex::new(()))
            .collect(),
    );
    let tasks: Vec<_> = (0..settings.connections + settings.waiters)
        .map(|connection| {
            let client = Client {
                url: url.clone(),
                settings: settings.clone(),
                recorder: recorder.clone(),
                stop: stop.clone(),
                counts: counts.clone(),
            };
            let seed = settings.seed.wrapping_add(1 + connection as u64);
            let rng = StdRng::seed_from_u64(seed);
            match connection.checked_sub(settings.connections) {
                None => tokio::spawn(async move { client.run(rng).await }),
                Some(waiter) => {
                    let gates = gates.clone();
                    tokio::spawn(async move { client.wait_loop(waiter, &gates, rng).await })
                }
            }
        })
        .collect();
    tokio::time::sleep(settings.duration).await;
    stop.store(true, Ordering::SeqCst);
    let mut failure = None;
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(format!("a connection's task failed: {e}"))),
        }
    }
    let (kills, lease_ends) = tokio::task::spawn_blocking(move || killer.join())
        .await
        .map_err(|e| format!("joining the killer: {e}"))?
        .map_err(|_| "the killer panicked".to_string())?;
    if let Some(failure) = failure {
        return Err(failure);
    }
    let recorder = Arc::try_unwrap(recorder).map_err(|_| "the history is still shared")?;
    Ok(Run {
        recorder,
        kills,
        lease_ends,
        pipelined: counts.pipelined.load(Ordering::Relaxed),
        transactions: counts.transactions.load(Ordering::Relaxed),
        handed_off: counts.handed_off.load(Ordering::Relaxed),
        timed_out: counts.timed_out.load(Ordering::Relaxed),
        at_once: counts.at_once.load(Ordering::Relaxed),
        shared_handed_off: counts.shared_handed_off.load(Ordering::Relaxed),
    })
}

/// `lock_expired` of the node's `INFO lock` (0 if it cannot be read).
fn expired(url: &str) -> u64 {
    let info = redis::Client::open(url)
        .and_then(|client| client.get_connection())
        .and_then(|mut con| redis::cmd("INFO").arg("lock").query::<String>(&mut con));
    info.ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("lock_expired:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Makes the node's lease clock run `ppm` fast (`LOCK.DEBUG
/// MONOTONIC-RATE`, the module loaded with `debug yes` as testkit does).
fn lease_clock_rate(url: &str, ppm: i64) -> Result<(), String> {
    let mut con = redis::Client::open(url)
        .and_then(|client| client.get_connection())
        .map_err(|e| format!("connecting to set the lease clock: {e}"))?;
    redis::cmd("LOCK.DEBUG")
        .arg("MONOTONIC-RATE")
        .arg(ppm)
        .query::<()>(&mut con)
        .map_err(|e| format!("LOCK.DEBUG MONOTONIC-RATE {ppm}: {e}"))
}

#[derive(Default)]
struct Counts {
    handed_off: AtomicU64,
    shared_handed_off: AtomicU64,
    timed_out: AtomicU64,
    at_once: AtomicU64,
    wait_ids: std::sync::atomic::AtomicU32,
    pipelined: AtomicU64,
    transactions: AtomicU64,
    /// The highest token seen, for `ATLEAST` floors that matter.
    highest_token: AtomicU64,
}

/// Kills the node with `kill -9` at random moments and starts it again on
/// its data until `stop`; returns how many kills, and how many leases the
/// node ended.
fn kill_loop(
    mut server: RedisServer,
    recorder: &Recorder,
    stop: &AtomicBool,
    every_ms: std::ops::RangeInclusive<u64>,
    seed: u64,
) -> (u64, u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kills = 0;
    let mut lease_ends = 0;
    loop {
        let until = Instant::now() + Duration::from_millis(rng.random_range(every_ms.clone()));
        while Instant::now() < until {
            if stop.load(Ordering::SeqCst) {
                return (kills, lease_ends + expired(&server.url()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        lease_ends += expired(&server.url());
        server.kill9();
        recorder.killed();
        kills += 1;
        server.restart();
    }
}

/// Owners that take a lock and leave it to its lease: each seldom comes
/// back, so their leases end (the workload's regular owners re-enter and
/// extend too often for theirs to).
const PASSERS_BY: std::ops::RangeInclusive<Owner> = 100..=199;

/// The passers-by of a shared key: few, so that the readers that may hold
/// it at once (these, the regular readers and the waiting ones) stay within
/// the model's [`super::spec::MAX_HOLDERS`].
const SHARED_PASSERS_BY: std::ops::RangeInclusive<Owner> = 100..=103;

struct Client {
    url: String,
    settings: Settings,
    recorder: Arc<Recorder>,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
}

/// How a group of commands is sent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Single,
    Pipeline,
    Multi,
}

impl Client {
    async fn run(&self, mut rng: StdRng) -> Result<(), String> {
        let mut connection = None;
        while !self.stop.load(Ordering::SeqCst) {
            let con = match connection.as_mut() {
                Some(con) => con,
                None => match self.connect().await {
                    Some(con) => connection.insert(con),
                    None => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                },
            };
            let shape = match rng.random_range(0..20) {
                0..=11 => Shape::Single,
                12..=16 => Shape::Pipeline,
                _ => Shape::Multi,
            };
            let commands: Vec<(usize, Cmd)> = match shape {
                // A passer-by takes the lock for a long lease and at once
                // shortens it (in one MULTI, or pipelined), then leaves it
                // to end.
                Shape::Pipeline | Shape::Multi if rng.random_bool(0.08) => {
                    let key = rng.random_range(0..self.settings.keys);
                    let owner = self.passer_by(key, &mut rng);
                    vec![
                        (
                            key,
                            Cmd::Acquire {
                                owner,
                                ttl_ms: rng.random_range(5_000..=10_000),
                                mode: self.mode(key, owner),
                            },
                        ),
                        (
                            key,
                            Cmd::Extend {
                                owner,
                                ttl_ms: rng.random_range(self.settings.ttl_ms.clone()),
                            },
                        ),
                    ]
                }
                Shape::Single => vec![self.command(&mut rng)],
                Shape::Pipeline => (0..rng.random_range(2..=4))
                    .map(|_| self.command(&mut rng))
                    .collect(),
                // A transaction on one key: one step of its history.
                Shape::Multi => {
                    let (key, first) = self.command(&mut rng);
                    let mut commands = vec![(key, first)];
                    for _ in 1..rng.random_range(2..=3) {
                        commands.push((key, self.command_on(key, &mut rng)));
                    }
                    commands
                }
            };
            if !self.send(con, shape, &commands).await? {
                // The connection broke: a new one for the next step.
                connection = None;
            }
            let pause = rng.random_range(0..=3);
            if pause > 0 {
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
        Ok(())
    }

    async fn connect(&self) -> Option<redis::aio::MultiplexedConnection> {
        let client = redis::Client::open(self.url.as_str()).ok()?;
        tokio::time::timeout(
            Duration::from_secs(2),
            client.get_multiplexed_async_connection(),
        )
        .await
        .ok()?
        .ok()
    }

    fn kind(&self, key: usize) -> Kind {
        Kind::of(key, self.settings.shared)
    }

    fn mode(&self, key: usize, owner: Owner) -> Mode {
        mode(self.kind(key), owner)
    }

    /// A passer-by for `key` (of a few for a shared key).
    fn passer_by(&self, key: usize, rng: &mut StdRng) -> Owner {
        match self.kind(key) {
            Kind::Exclusive => rng.random_range(PASSERS_BY),
            _ => rng.random_range(SHARED_PASSERS_BY),
        }
    }

    fn command(&self, rng: &mut StdRng) -> (usize, Cmd) {
        let key = rng.random_range(0..self.settings.keys);
        (key, self.command_on(key, rng))
    }

    /// A command on `key` (in the mode its owner takes `key` in).
    fn command_on(&self, key: usize, rng: &mut StdRng) -> Cmd {
        let owner: Owner = rng.random_range(0..self.settings.owners);
        match rng.random_range(0..105) {
            // A passer-by: its lease ends, unless it released first (one
            // of many: it seldom comes back to re-enter or release).
            100..=103 => {
                let owner = self.passer_by(key, rng);
                Cmd::Acquire {
                    owner,
                    ttl_ms: rng.random_range(self.settings.ttl_ms.clone()),
                    mode: self.mode(key, owner),
                }
            }
            104 => Cmd::Release {
                owner: self.passer_by(key, rng),
                all: false,
            },
            0..=29 => Cmd::Acquire {
                owner,
                ttl_ms: rng.random_range(self.settings.ttl_ms.clone()),
                mode: self.mode(key, owner),
            },
            30..=54 => Cmd::Release {
                owner,
                all: rng.random_bool(0.2),
            },
            55..=64 => Cmd::Extend {
                owner,
                ttl_ms: rng.random_range(self.settings.ttl_ms.clone()),
            },
            65..=79 => Cmd::Fence {
                owner,
                at_least: rng.random_bool(0.3).then(|| {
                    self.counts.highest_token.load(Ordering::Relaxed)
                        + rng.random_range(0..=2_000_000)
                }),
            },
            _ => Cmd::Info,
        }
    }

    /// Sends `commands` and records them; `Ok(false)` if the connection
    /// broke (the steps are recorded without replies).
    async fn send(
        &self,
        con: &mut redis::aio::MultiplexedConnection,
        shape: Shape,
        commands: &[(usize, Cmd)],
    ) -> Result<bool, String> {
        let mut pipe = redis::pipe();
        if shape == Shape::Multi {
            pipe.atomic();
        }
        for (key, cmd) in commands {
            pipe.add_command(request(*key, *cmd));
        }
        let (offset, count) = match shape {
            Shape::Multi => (commands.len() + 1, 1),
            _ => (0, commands.len()),
        };
        let called = self.recorder.now();
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            con.req_packed_commands(&pipe, offset, count),
        )
        .await;
        let returned = self.recorder.now();
        let values = match answer {
            Ok(Ok(values)) => values,
            Ok(Err(error)) if is_loading(&error) && shape == Shape::Single => {
                // Refused while the node loads its data: it ran nothing.
                return Ok(true);
            }
            Ok(Err(error)) if !is_unknown(&error) => {
                return Err(format!("{commands:?}: {error}"));
            }
            // No reply: each step may or may not have run.
            _ => {
                self.record_unknown(shape, commands, called);
                return Ok(false);
            }
        };
        let values = match shape {
            Shape::Multi => match values.into_iter().next() {
                Some(Value::Array(values)) => values,
                Some(Value::ServerError(error)) if is_aborted(Some(error.code())) => {
                    // Queued while loading, then refused: nothing ran.
                    return Ok(true);
                }
                other => return Err(format!("EXEC of {commands:?} replied {other:?}")),
            },
            _ => values,
        };
        if values.len() != commands.len() {
            return Err(format!("{commands:?}: {} replies", values.len()));
        }
        let mut replies = Vec::with_capacity(commands.len());
        for ((key, cmd), value) in commands.iter().zip(values) {
            match reply(*cmd, &value) {
                Ok(reply) => replies.push((*key, *cmd, Some(reply))),
                // Refused while the node loaded its data: it ran nothing;
                // it is left out.
                Err(_) if shape != Shape::Multi && is_loading_value(&value) => {}
                Err(e) => return Err(format!("{cmd:?} on key {key}: {e}")),
            }
        }
        for (_, _, reply) in &replies {
            if let Some(Reply::Int(token)) = reply {
                self.counts
                    .highest_token
                    .fetch_max(*token, Ordering::Relaxed);
            }
        }
        match shape {
            Shape::Multi => {
                self.counts.transactions.fetch_add(1, Ordering::Relaxed);
                let key = commands.first().map_or(0, |(key, _)| *key);
                self.recorder.record(Entry {
                    key,
                    step: replies
                        .iter()
                        .map(|(_, cmd, reply)| (*cmd, *reply))
                        .collect(),
                    called,
                    returned: Some(returned),
                });
            }
            _ => {
                if shape == Shape::Pipeline {
                    self.counts
                        .pipelined
                        .fetch_add(replies.len() as u64, Ordering::Relaxed);
                }
                // Pipelined commands run in order, but each is recorded as
                // a step of its own over the whole round trip (a weaker
                // constraint than the order, never a wrong one).
                for (key, cmd, reply) in replies {
                    self.recorder.record(Entry {
                        key,
                        step: vec![(cmd, reply)],
                        called,
                        returned: Some(returned),
                    });
                }
            }
        }
        Ok(true)
    }

    /// A waiting client: `LOCK.ACQUIRE … WAIT` on a random key, then (if
    /// granted) a release after a moment, or nothing (the lease ends).
    async fn wait_loop(
        &self,
        index: usize,
        gates: &[tokio::sync::Mutex<()>],
        mut rng: StdRng,
    ) -> Result<(), String> {
        let owner = Owner::try_from(200 + index).map_err(|_| "too many waiters")?;
        let mut connections = None;
        while !self.stop.load(Ordering::SeqCst) {
            let (waiting, control, id) = match connections.as_mut() {
                Some(connections) => connections,
                None => {
                    let (Some(mut waiting), Some(control)) =
                        (self.connect().await, self.connect().await)
                    else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    match redis::cmd("CLIENT")
                        .arg("ID")
                        .query_async::<u64>(&mut waiting)
                        .await
                    {
                        Ok(id) => connections.insert((waiting, control, id)),
                        // Loading after a restart: try again shortly.
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    }
                }
            };
            let key = rng.random_range(0..self.settings.waited_keys.clamp(1, self.settings.keys));
            let wait = Wait {
                id: self.counts.wait_ids.fetch_add(1, Ordering::Relaxed),
                owner,
                ttl_ms: rng.random_range(self.settings.ttl_ms.clone()),
                timeout_ms: rng.random_range(100..=1_000),
                mode: self.mode(key, owner),
            };
            let Some(gate) = gates.get(key) else {
                return Err(format!("no gate for key {key}"));
            };
            let gate = gate.lock().await;
            let called = self.recorder.now();
            let command = request(key, Cmd::Answer(wait));
            let answer = {
                let mut waiting = waiting.clone();
                let limit = Duration::from_millis(wait.timeout_ms + 5_000);
                tokio::spawn(async move {
                    tokio::time::timeout(limit, waiting.req_packed_command(&command)).await
                })
            };
            // Seen blocked: it ran, and holds its place in the queue.
            let mut blocked = None;
            while !answer.is_finished() {
                let list = redis::cmd("CLIENT")
                    .arg("LIST")
                    .arg("ID")
                    .arg(*id)
                    .query_async::<String>(control)
                    .await;
                match list {
                    Ok(list) if flags(&list).is_some_and(|flags| flags.contains('b')) => {
                        blocked = Some(self.recorder.now());
                        break;
                    }
                    Ok(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                    Err(_) => break,
                }
            }
            drop(gate);
            let answer = answer
                .await
                .map_err(|e| format!("a waiter's task failed: {e}"))?;
            let returned = self.recorder.now();
            let reply = match answer {
                Ok(Ok(value)) if is_loading_value(&value) => continue,
                Ok(Ok(value)) => Some(reply(Cmd::Answer(wait), &value)?),
                Ok(Err(error)) if is_loading(&error) => continue,
                Ok(Err(error)) if !is_unknown(&error) => {
                    return Err(format!("{wait:?} on key {key}: {error}"));
                }
                _ => None,
            };
            let answer_by = if reply.is_some() { returned } else { u64::MAX };
            let ran = if blocked.is_some() {
                Some(Reply::Queued)
            } else if reply.is_some() {
                Some(Reply::Nil)
            } else {
                None
            };
            self.recorder.record(Entry {
                key,
                step: vec![(Cmd::Enqueue { wait, answer_by }, ran)],
                called,
                returned: blocked.or(reply.map(|_| returned)),
            });
            self.recorder.record(Entry {
                key,
                step: vec![(Cmd::Answer(wait), reply)],
                called,
                returned: reply.map(|_| returned),
            });
            let counter = match (reply, blocked) {
                (None, _) => {
                    connections = None;
                    continue;
                }
                (Some(Reply::Nil), _) => &self.counts.timed_out,
                (Some(_), Some(_)) => {
                    if wait.mode != Mode::Exclusive {
                        self.counts
                            .shared_handed_off
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    &self.counts.handed_off
                }
                (Some(_), None) => &self.counts.at_once,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            if matches!(reply, Some(Reply::Int(_))) && rng.random_bool(0.5) {
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..=50))).await;
                let Some((_, control, _)) = connections.as_mut() else {
                    continue;
                };
                let release = [(key, Cmd::Release { owner, all: true })];
                if !self.send(control, Shape::Single, &release).await? {
                    connections = None;
                }
            }
        }
        Ok(())
    }

    fn record_unknown(&self, shape: Shape, commands: &[(usize, Cmd)], called: u64) {
        let steps: Vec<(usize, Step)> = match shape {
            Shape::Multi => vec![(
                commands.first().map_or(0, |(key, _)| *key),
                commands.iter().map(|(_, cmd)| (*cmd, None)).collect(),
            )],
            _ => commands
                .iter()
                .map(|(key, cmd)| (*key, vec![(*cmd, None)]))
                .collect(),
        };
        for (key, step) in steps {
            self.recorder.record(Entry {
                key,
                step,
                called,
                returned: None,
            });
        }
    }
}

/// The `flags=` field of a `CLIENT LIST` line.
fn flags(list: &str) -> Option<&str> {
    list.split_whitespace()
        .find_map(|field| field.strip_prefix("flags="))
}

fn key_name(key: usize) -> String {
    format!("lin:{key}")
}

fn owner_name(owner: Owner) -> String {
    format!("o{owner}")
}

fn request(key: usize, cmd: Cmd) -> redis::Cmd {
    let key = key_name(key);
    match cmd {
        Cmd::Acquire {
            owner,
            ttl_ms,
            mode,
        } => {
            let mut cmd = redis::cmd("LOCK.ACQUIRE");
            cmd.arg(key).arg(owner_name(owner)).arg(ttl_ms);
            mode_args(&mut cmd, mode);
            cmd
        }
        Cmd::Release { owner, all } => {
            let mut cmd = redis::cmd("LOCK.RELEASE");
            cmd.arg(key).arg(owner_name(owner));
            if all {
                cmd.arg("ALL");
            }
            cmd
        }
        Cmd::Extend { owner, ttl_ms } => redis::cmd("LOCK.EXTEND")
            .arg(key)
            .arg(owner_name(owner))
            .arg(ttl_ms)
            .to_owned(),
        Cmd::Fence { owner, at_least } => {
            let mut cmd = redis::cmd("LOCK.FENCE");
            cmd.arg(key).arg(owner_name(owner));
            if let Some(floor) = at_least {
                cmd.arg("ATLEAST").arg(floor);
            }
            cmd
        }
        Cmd::Info => redis::cmd("LOCK.INFO").arg(key).to_owned(),
        Cmd::Enqueue { wait, .. } | Cmd::Answer(wait) => {
            let mut cmd = redis::cmd("LOCK.ACQUIRE");
            cmd.arg(key).arg(owner_name(wait.owner)).arg(wait.ttl_ms);
            mode_args(&mut cmd, wait.mode);
            cmd.arg("WAIT").arg(wait.timeout_ms);
            cmd
        }
    }
}

/// `SHARED [LIMIT n]` for a shared request.
fn mode_args(cmd: &mut redis::Cmd, mode: Mode) {
    if let Mode::Shared { limit } = mode {
        cmd.arg("SHARED");
        if let Some(limit) = limit {
            cmd.arg("LIMIT").arg(limit);
        }
    }
}

/// The reply as the specification sees it, or why it has none.
fn reply(cmd: Cmd, value: &Value) -> Result<Reply, String> {
    let int = |value: &Value| match value {
        Value::Int(n) => u64::try_from(*n).map_err(|_| format!("negative {n}")),
        other => Err(format!("not an integer: {other:?}")),
    };
    match (cmd, value) {
        (_, Value::Nil) if !matches!(cmd, Cmd::Extend { .. }) => Ok(Reply::Nil),
        (Cmd::Info, Value::Array(fields)) => {
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| {
                        matches!(pair.first(), Some(Value::BulkString(b)) if b == name.as_bytes())
                    })
                    .and_then(|pair| pair.get(1))
                    .ok_or_else(|| format!("LOCK.INFO without {name}: {fields:?}"))
            };
            if matches!(field("mode"), Ok(Value::BulkString(mode)) if mode == b"shared") {
                let holders = u32::try_from(int(field("holders")?)?).map_err(|e| e.to_string())?;
                return Ok(Reply::Shared { holders });
            }
            let owner = match field("owner")? {
                Value::BulkString(name) => std::str::from_utf8(name)
                    .ok()
                    .and_then(|name| name.strip_prefix('o'))
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| format!("unknown owner {name:?}"))?,
                other => return Err(format!("owner {other:?}")),
            };
            let holds = u32::try_from(int(field("holds")?)?).map_err(|e| e.to_string())?;
            Ok(Reply::Holder {
                owner,
                holds,
                token: int(field("token")?)?,
            })
        }
        (Cmd::Info, other) => Err(format!("LOCK.INFO replied {other:?}")),
        (_, value) => int(value).map(Reply::Int),
    }
}

/// No reply, or none that says whether the command ran.
fn is_unknown(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || is_loading(error)
        || is_aborted(error.code())
}

fn is_loading(error: &redis::RedisError) -> bool {
    error.code() == Some("LOADING")
}

fn is_loading_value(value: &Value) -> bool {
    matches!(value, Value::ServerError(error) if error.code() == "LOADING")
}

fn is_aborted(code: Option<&str>) -> bool {
    code == Some("EXECABORT")
}
