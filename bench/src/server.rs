//! redis-server processes on loopback, owned by the benchmark: each is
//! killed when its handle drops (also on a panic), and the kernel kills it
//! too if the benchmark process dies any other way (Ctrl-C, kill -9), through
//! `PR_SET_PDEATHSIG`. The same goes for every helper process we spawn
//! (redis-benchmark, redis-cli), see [`die_with_parent`].

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
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

pub struct Server {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Server {
    /// Starts redis-server on a free loopback port: no persistence, the
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
        let mut cmd = Command::new("redis-server");
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
            .map_err(|e| format!("cannot start redis-server: {e}"))?;
        let mut server = Server { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!(
                    "redis-server on port {port} exited at start ({status}); log:\n{}",
                    server.log()
                )
                .into());
            }
            if server.ping().is_ok() {
                return Ok(server);
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server on port {port} did not answer").into());
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
