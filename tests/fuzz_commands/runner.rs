//! The runner: sends the calls in pipelines, checks every reply against its
//! expectation, the digest across phases, and that the server lives.

#![allow(unused_imports)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::contract::*;
use crate::generator::*;
use crate::rng::*;
use crate::*;
use redis::{Connection, Value};
use testkit::{wait_until, RedisServer, ServerOptions};

#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) calls: usize,
    /// Calls with a 1 MiB argument.
    pub(crate) huge_calls: usize,
    /// (command, outcome) -> count
    pub(crate) outcomes: BTreeMap<(Command, &'static str), usize>,
    pub(crate) errors: BTreeMap<String, usize>,
}

impl Tally {
    pub(crate) fn summary(&self) -> String {
        let mut out = format!(
            "{} calls, {} of them with a 1 MiB argument\n",
            self.calls, self.huge_calls
        );
        for ((command, outcome), n) in &self.outcomes {
            let _ = writeln!(out, "  {:<13} {outcome:<22} {n}", command.name());
        }
        out
    }
}

pub(crate) fn show(args: &[Vec<u8>]) -> String {
    args.iter()
        .map(|a| {
            if a.len() > 40 {
                format!(
                    "<{} bytes {:?}…>",
                    a.len(),
                    String::from_utf8_lossy(&a[..20])
                )
            } else {
                format!("{:?}", String::from_utf8_lossy(a))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) struct Fuzz {
    pub(crate) server: RedisServer,
    pub(crate) conn: Connection,
    pub(crate) gen: Gen,
    pub(crate) seed: u64,
    pub(crate) tally: Tally,
}

impl Fuzz {
    pub(crate) fn start(seed: u64, limits: Limits) -> Fuzz {
        let mut module_args = vec![
            "max-ttl".to_string(),
            limits.max_ttl.to_string(),
            "max-owner-bytes".to_string(),
            limits.max_owner.to_string(),
        ];
        if limits.debug {
            module_args.extend(["debug".to_string(), "yes".to_string()]);
        }
        // hz 500: a valid 1 ms WAIT that must time out does so within ~2 ms.
        let options = ServerOptions {
            module_args,
            ..ServerOptions::default()
        }
        .args(["--hz", "500"]);
        let server = RedisServer::start_with(options);
        let mut conn = server.conn();
        // Every reply comes within milliseconds; a missing one fails fast.
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        for (command, args) in [
            ("SET", vec!["t:string", "v"]),
            ("RPUSH", vec!["t:list", "a", "b"]),
            ("HSET", vec!["t:hash", "f", "v"]),
            ("SADD", vec!["t:set", "m"]),
            ("ZADD", vec!["t:zset", "1", "m"]),
            ("XADD", vec!["t:stream", "*", "f", "v"]),
            // The control lock: each mixed phase re-enters it.
            (
                "LOCK.ACQUIRE",
                vec!["ctl", "ctl", &limits.max_ttl.to_string()],
            ),
        ] {
            let mut cmd = redis::cmd(command);
            cmd.arg(args);
            let _: Value = cmd.query(&mut conn).unwrap();
        }
        Fuzz {
            server,
            conn,
            gen: Gen::new(seed, limits),
            seed,
            tally: Tally::default(),
        }
    }

    pub(crate) fn context(&self) -> String {
        format!(
            "seed {:#x} (REDIS_LOCK_FUZZ_SEED), after {} calls",
            self.seed, self.tally.calls
        )
    }

    pub(crate) fn digest(&mut self) -> String {
        redis::cmd("DEBUG")
            .arg("DIGEST")
            .query(&mut self.conn)
            .unwrap()
    }

    pub(crate) fn ping(&mut self) {
        let pong: String = redis::cmd("PING")
            .query(&mut self.conn)
            .unwrap_or_else(|e| panic!("server did not answer PING ({e}); {}", self.context()));
        assert_eq!(pong, "PONG");
        assert!(self.server.is_running(), "server died; {}", self.context());
    }

    /// Sends `calls` pipelined and checks every reply.
    pub(crate) fn run(&mut self, calls: &[Call]) {
        if std::env::var_os("REDIS_LOCK_FUZZ_SERIAL").is_some() {
            return self.run_serially(calls);
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for call in calls {
            let mut cmd = redis::cmd(std::str::from_utf8(&call.args[0]).unwrap());
            for arg in &call.args[1..] {
                cmd.arg(arg.as_slice());
            }
            pipe.add_command(cmd);
        }
        let replies: Value = pipe.query(&mut self.conn).unwrap_or_else(|e| {
            let mut other = self.server.conn();
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query(&mut other)
                .unwrap_or_default();
            let waits: Vec<String> = calls
                .iter()
                .filter(|c| c.args.iter().any(|a| a.eq_ignore_ascii_case(b"WAIT")))
                .map(|c| format!("{} {:?}", show(&c.args), c.expect))
                .collect();
            panic!(
                "pipeline failed ({e}): a call got no reply or the server died; {}\nclients:\n{clients}\ncalls with WAIT:\n{}\n{}",
                self.context(),
                waits.join("\n"),
                self.server.log()
            )
        });
        let Value::Array(replies) = replies else {
            panic!("pipeline reply {replies:?}");
        };
        assert_eq!(replies.len(), calls.len());
        for (call, reply) in calls.iter().zip(replies) {
            self.check(call, &reply);
            self.tally.calls += 1;
            if call.args.iter().any(|a| a.len() >= MIB) {
                self.tally.huge_calls += 1;
            }
        }
    }

    /// One call at a time, each with a short read timeout: slow, but names
    /// the call that gets no reply.
    pub(crate) fn run_serially(&mut self, calls: &[Call]) {
        self.conn
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut trace = std::env::var_os("REDIS_LOCK_FUZZ_TRACE").map(|path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap()
        });
        for call in calls {
            let mut cmd = redis::cmd(std::str::from_utf8(&call.args[0]).unwrap());
            for arg in &call.args[1..] {
                cmd.arg(arg.as_slice());
            }
            if let Some(file) = trace.as_mut() {
                use std::io::Write as _;
                file.write_all(&cmd.get_packed_command()).unwrap();
            }
            let reply = match cmd.query::<Value>(&mut self.conn) {
                Ok(value) => value,
                Err(e) => match e.code() {
                    Some(_) => Value::ServerError(e.try_into().unwrap()),
                    None => panic!(
                        "no reply to `{}` ({e}); {}",
                        show(&call.args),
                        self.context()
                    ),
                },
            };
            self.check(call, &reply);
            self.tally.calls += 1;
        }
    }

    pub(crate) fn check(&mut self, call: &Call, reply: &Value) {
        let limits = self.gen.limits;
        let error = match reply {
            Value::ServerError(e) => Some(format!("{} {}", e.code(), e.details().unwrap_or(""))),
            _ => None,
        };
        let outcome = match (&call.expect, &error) {
            (Expect::Valid, None) => {
                assert!(
                    well_formed(call.command, reply),
                    "valid call `{}` got a malformed reply {reply:?}; {}",
                    show(&call.args),
                    self.context()
                );
                "valid: ok"
            }
            (Expect::Valid, Some(line)) => panic!(
                "valid call `{}` was refused: {line}; {}",
                show(&call.args),
                self.context()
            ),
            (Expect::Invalid(defects), None) => panic!(
                "invalid call `{}` (defects {defects:?}) was accepted: {reply:?}; {}",
                show(&call.args),
                self.context()
            ),
            (Expect::Invalid(defects), Some(line)) => {
                assert!(
                    defects.iter().any(|d| d.accepts(line, &limits)),
                    "invalid call `{}` (defects {defects:?}) got the wrong error {line:?}; {}",
                    show(&call.args),
                    self.context()
                );
                "invalid: refused"
            }
            (Expect::Unknown, None) => "junk: ok",
            (Expect::Unknown, Some(_)) => "junk: refused",
        };
        if let Some(line) = error {
            let head: String = line.chars().take(40).collect();
            *self.tally.errors.entry(head).or_default() += 1;
        }
        *self
            .tally
            .outcomes
            .entry((call.command, outcome))
            .or_default() += 1;
    }

    pub(crate) fn run_batched(&mut self, phase: Phase, count: usize) {
        let mut left = count;
        while left > 0 {
            let n = left.min(BATCH);
            let calls: Vec<Call> = (0..n).map(|_| self.gen.call(phase)).collect();
            self.run(&calls);
            left -= n;
        }
    }

    /// Every key, by SCAN.
    pub(crate) fn keys(&mut self) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .query(&mut self.conn)
                .unwrap();
            keys.extend(batch);
            if next == 0 {
                return keys;
            }
            cursor = next;
        }
    }

    /// Waits until nothing will change by itself during the next phase: no
    /// client waits, every short lease has ended and its key is gone, and
    /// the wall-clock offset is back to 0.
    pub(crate) fn settle(&mut self) {
        if self.gen.limits.debug {
            let _: Value = redis::cmd("LOCK.DEBUG")
                .arg("WALLCLOCK-OFFSET")
                .arg(0)
                .query(&mut self.conn)
                .unwrap();
        }
        let floor = i64::try_from(self.gen.limits.max_ttl / 4).unwrap();
        let settled = wait_until(Duration::from_secs(30), || {
            let info: String = redis::cmd("INFO")
                .arg("lock")
                .query(&mut self.conn)
                .unwrap();
            if !info.contains("lock_waiting:0\r\n") {
                return false;
            }
            let keys = self.keys();
            keys.iter().all(|key| {
                let reply: Value = redis::cmd("LOCK.INFO")
                    .arg(key.as_slice())
                    .query(&mut self.conn)
                    .unwrap_or(Value::Okay);
                match reply {
                    // A lock that lives on for long.
                    Value::Array(fields) => matches!(fields[7], Value::Int(pttl) if pttl > floor),
                    // No lock, or a lease that ended but whose key is still there.
                    Value::Nil => false,
                    // Another type.
                    _ => true,
                }
            })
        });
        assert!(settled, "locks did not settle; {}", self.context());
    }

    /// Phases of mixed calls (which must change the digest: each re-enters
    /// the control lock) alternate with phases of invalid calls only (which
    /// must not change it).
    pub(crate) fn rounds(&mut self, rounds: usize, mixed: usize, invalid: usize) {
        for _ in 0..rounds {
            let before_mixed = self.digest();
            let control = Call {
                command: Command::Acquire,
                args: vec![
                    b"LOCK.ACQUIRE".to_vec(),
                    b"ctl".to_vec(),
                    b"ctl".to_vec(),
                    self.gen.limits.max_ttl.to_string().into_bytes(),
                ],
                expect: Expect::Valid,
            };
            self.run(&[control]);
            self.run_batched(Phase::Mixed, mixed);
            self.settle();
            self.ping();
            let before = self.digest();
            assert_ne!(
                before,
                before_mixed,
                "valid calls did not change the digest; {}",
                self.context()
            );
            let dbsize: i64 = redis::cmd("DBSIZE").query(&mut self.conn).unwrap();

            self.run_batched(Phase::Invalid, invalid);
            self.ping();
            let after = self.digest();
            assert_eq!(
                before,
                after,
                "rejected calls changed the dataset; {}",
                self.context()
            );
            let dbsize_after: i64 = redis::cmd("DBSIZE").query(&mut self.conn).unwrap();
            assert_eq!(dbsize, dbsize_after);
        }
        let log = self.server.log();
        assert!(
            !log.contains("panicked") && !log.contains("BUG REPORT"),
            "the server log reports a panic; {}\n{log}",
            self.context()
        );
        eprintln!("{}", self.tally.summary());
        eprintln!("error replies by kind:");
        for (head, n) in &self.tally.errors {
            eprintln!("  {head:<42} {n}");
        }
    }
}
