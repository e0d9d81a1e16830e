//! Section 13: against etcd (issue #35, target 3). Lock+unlock cycles/s of
//! `redis-lock-client` (Redlock over five module-loaded masters with
//! `appendfsync always`, the selected server) against etcd's lock service on
//! a three-member cluster (Debian's `etcd-server` 3.4, every member on
//! loopback with its own data directory in the run directory, always
//! stopped), at 1, 16 and 64 tasks; target ≥ 10× at 16 and 64.
//!
//! The etcd side does what `etcdctl lock` and `concurrency.Mutex` do, through
//! etcd's v3 API as JSON over HTTP (its grpc-gateway, one keep-alive
//! connection per task, the tasks spread over the three members as
//! clientv3's round-robin balancer does): one lease per task granted once
//! (`/v3/lease/grant`, as a `concurrency.Session` keeps one), then per cycle
//! `/v3/lock/lock` on that lease and `/v3/lock/unlock` of the key it
//! returned; the leases are revoked at the end.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::report::{Report, Target};
use crate::server::{die_with_parent, run_dir, Server};
use crate::{median, percentile, Plan, Result};

/// The Redlock lease; etcd's lease TTL is the same.
const TTL: Duration = Duration::from_secs(30);
const MEMBERS: usize = 3;

/// A three-member etcd cluster on loopback; killed (and its data removed)
/// on drop, and by the kernel if the benchmark dies.
pub struct Etcd {
    children: Vec<Child>,
    pub client_ports: Vec<u16>,
    dir: PathBuf,
}

impl Etcd {
    pub fn start() -> Result<Etcd> {
        let dir = run_dir().join(format!("etcd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let client_ports: Vec<u16> = (0..MEMBERS).map(|_| testkit::free_port()).collect();
        let peer_ports: Vec<u16> = (0..MEMBERS).map(|_| testkit::free_port()).collect();
        let cluster = (0..MEMBERS)
            .map(|i| format!("m{i}=http://127.0.0.1:{}", peer_ports[i]))
            .collect::<Vec<_>>()
            .join(",");
        let mut etcd = Etcd {
            children: Vec::new(),
            client_ports: client_ports.clone(),
            dir: dir.clone(),
        };
        for i in 0..MEMBERS {
            let client = format!("http://127.0.0.1:{}", client_ports[i]);
            let peer = format!("http://127.0.0.1:{}", peer_ports[i]);
            let log = std::fs::File::create(dir.join(format!("m{i}.log")))?;
            let mut cmd = Command::new("etcd");
            cmd.arg(format!("--name=m{i}"))
                .arg(format!(
                    "--data-dir={}",
                    dir.join(format!("m{i}")).display()
                ))
                .arg(format!("--listen-client-urls={client}"))
                .arg(format!("--advertise-client-urls={client}"))
                .arg(format!("--listen-peer-urls={peer}"))
                .arg(format!("--initial-advertise-peer-urls={peer}"))
                .arg(format!("--initial-cluster={cluster}"))
                .arg("--initial-cluster-state=new")
                .arg(format!(
                    "--initial-cluster-token=bench-{}",
                    std::process::id()
                ))
                .arg("--logger=zap")
                .arg("--log-level=warn")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
            die_with_parent(&mut cmd);
            let child = cmd
                .spawn()
                .map_err(|e| format!("cannot start etcd ({e}); make bench installs etcd-server"))?;
            etcd.children.push(child);
        }
        // Healthy when every member answers /health with a leader elected.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut healthy = 0;
            for (i, port) in client_ports.iter().enumerate() {
                if let Ok(Some(status)) = etcd.children[i].try_wait() {
                    return Err(format!(
                        "etcd member m{i} exited at start ({status}); log:\n{}",
                        std::fs::read_to_string(dir.join(format!("m{i}.log"))).unwrap_or_default()
                    )
                    .into());
                }
                if health(*port).unwrap_or(false) {
                    healthy += 1;
                }
            }
            if healthy == MEMBERS {
                return Ok(etcd);
            }
            if Instant::now() > deadline {
                return Err("the etcd cluster did not become healthy in 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `GET /health` answers `{"health":"true"}` once the member has a leader.
fn health(port: u16) -> Result<bool> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(
        format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )?;
    let mut body = String::new();
    stream.read_to_string(&mut body)?;
    Ok(body.contains("\"health\":\"true\""))
}

/// Standard base64 (etcd's JSON gateway carries keys as `bytes`).
fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The string value of `"field":"…"` in a JSON answer (etcd's gateway
/// writes int64 as strings, bytes as base64: no escapes in either).
fn json_str<'a>(body: &'a str, field: &str) -> Option<&'a str> {
    let needle = format!("\"{field}\":\"");
    let start = body.find(&needle)? + needle.len();
    let len = body.get(start..)?.find('"')?;
    body.get(start..start + len)
}

/// One keep-alive HTTP/1.1 connection to an etcd member.
struct Http {
    stream: BufReader<TcpStream>,
    port: u16,
}

impl Http {
    async fn connect(port: u16) -> Result<Http> {
        let stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.set_nodelay(true)?;
        Ok(Http {
            stream: BufReader::new(stream),
            port,
        })
    }

    /// `POST path` with a JSON body; the answer's body (an error unless 200).
    async fn post(&mut self, path: &str, json: &str) -> Result<String> {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{json}",
            self.port,
            json.len()
        );
        self.stream.get_mut().write_all(request.as_bytes()).await?;
        let mut status = String::new();
        self.stream.read_line(&mut status).await?;
        let mut length: Option<usize> = None;
        let mut chunked = false;
        loop {
            let mut line = String::new();
            if self.stream.read_line(&mut line).await? == 0 {
                return Err("etcd closed the connection".into());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = Some(v.trim().parse()?);
            } else if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                chunked = true;
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                self.stream.read_line(&mut size).await?;
                let size = usize::from_str_radix(size.trim(), 16)?;
                let mut chunk = vec![0; size + 2];
                self.stream.read_exact(&mut chunk).await?;
                chunk.truncate(size);
                body.extend(chunk);
                if size == 0 {
                    break;
                }
            }
        } else {
            let length = length.ok_or("etcd answered without a length")?;
            body.resize(length, 0);
            self.stream.read_exact(&mut body).await?;
        }
        let body = String::from_utf8_lossy(&body).into_owned();
        if !status.contains(" 200 ") {
            return Err(format!("etcd {path}: {} {body}", status.trim()).into());
        }
        Ok(body)
    }
}

/// One task's etcd session: its connection and its lease.
struct Session {
    http: Http,
    lease: String,
    name: String,
}

impl Session {
    async fn open(port: u16, task: usize) -> Result<Session> {
        let mut http = Http::connect(port).await?;
        let body = http
            .post("/v3/lease/grant", &format!("{{\"TTL\":{}}}", TTL.as_secs()))
            .await?;
        let lease = json_str(&body, "ID")
            .ok_or_else(|| format!("no lease ID in {body}"))?
            .to_string();
        Ok(Session {
            http,
            lease,
            name: base64(format!("res:etcd:{task}").as_bytes()),
        })
    }

    /// `Lock` on the session's lease, then `Unlock` of the key it returned.
    async fn cycle(&mut self) -> Result<()> {
        let body = self
            .http
            .post(
                "/v3/lock/lock",
                &format!(
                    "{{\"name\":\"{}\",\"lease\":\"{}\"}}",
                    self.name, self.lease
                ),
            )
            .await?;
        let key = json_str(&body, "key")
            .ok_or_else(|| format!("no key in the lock answer {body}"))?
            .to_string();
        self.http
            .post("/v3/lock/unlock", &format!("{{\"key\":\"{key}\"}}"))
            .await?;
        Ok(())
    }

    async fn close(mut self) {
        let _ = self
            .http
            .post(
                "/v3/lease/revoke",
                &format!("{{\"ID\":\"{}\"}}", self.lease),
            )
            .await;
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    cycles_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    failures: u64,
}

enum Side {
    Ours(Arc<redis_lock_client::Redlock>),
    Etcd(Vec<u16>),
}

impl Side {
    fn name(&self) -> &'static str {
        match self {
            Side::Ours(_) => "redis-lock-client (5 masters)",
            Side::Etcd(_) => "etcd lock (3 members)",
        }
    }
}

async fn measure(side: &Side, tasks: usize, plan: &Plan) -> Result<Stats> {
    // The sessions (connection + lease) first: they are not measured.
    let mut sessions = Vec::new();
    for task in 0..tasks {
        sessions.push(match side {
            Side::Etcd(ports) => Some(Session::open(ports[task % ports.len()], task).await?),
            Side::Ours(_) => None,
        });
    }
    let started = Instant::now();
    let from = started + plan.client_warmup;
    let until = from + plan.client_window;
    let mut handles = Vec::new();
    for (task, mut session) in sessions.into_iter().enumerate() {
        let ours = match side {
            Side::Ours(redlock) => Some(Arc::clone(redlock)),
            Side::Etcd(_) => None,
        };
        handles.push(tokio::spawn(async move {
            let resource = format!("res:ours:{task}");
            let mut latencies: Vec<u32> = Vec::new();
            let mut failures = 0u64;
            loop {
                let t = Instant::now();
                if t >= until {
                    break;
                }
                let ok = if let Some(redlock) = &ours {
                    match redlock.acquire(&resource, TTL).await {
                        Ok(lock) => lock.release().await.is_ok(),
                        Err(_) => false,
                    }
                } else if let Some(session) = &mut session {
                    session.cycle().await.is_ok()
                } else {
                    false
                };
                if t >= from {
                    latencies.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    failures += u64::from(!ok);
                }
            }
            if let Some(session) = session {
                session.close().await;
            }
            (latencies, failures)
        }));
    }
    let (all, failures) = crate::clients::gather(handles).await?;
    Ok(Stats {
        cycles_per_s: (all.len() as u64 - failures.min(all.len() as u64)) as f64
            / plan.client_window.as_secs_f64(),
        p50_us: percentile(&all, 0.50),
        p99_us: percentile(&all, 0.99),
        failures,
    })
}

pub fn run(plan: &Plan, runtime: &tokio::runtime::Runtime, report: &mut Report) -> Result<()> {
    println!("13. against etcd: lock+unlock cycles/s");
    // BENCH_APPENDFSYNC=everysec|no (and BENCH_TASKS=1,16,64) are for
    // profiling: what the masters' fsync costs ours (bench/analysis.md).
    let fsync = std::env::var("BENCH_APPENDFSYNC").unwrap_or_else(|_| "always".into());
    let masters = (0..5)
        .map(|_| Server::start(&["--appendonly", "yes", "--appendfsync", &fsync]))
        .collect::<Result<Vec<Server>>>()?;
    let task_counts: Vec<usize> = std::env::var("BENCH_TASKS")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|t| t.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![1, 16, 64]);
    let urls: Vec<String> = masters.iter().map(Server::url).collect();
    let etcd = Etcd::start()?;
    let redlock = runtime.block_on(async { redis_lock_client::Redlock::new(&urls) })?;
    let sides = [
        Side::Ours(Arc::new(redlock)),
        Side::Etcd(etcd.client_ports.clone()),
    ];
    let mut table = String::from(
        "| tasks | lock | cycles/s | p50 µs | p99 µs | failed | load avg |\n\
         |---:|---|---:|---:|---:|---:|---|\n",
    );
    for (i, tasks) in task_counts.into_iter().enumerate() {
        let mut runs: [Vec<Stats>; 2] = Default::default();
        for round in 0..plan.rounds {
            // Alternate who goes first, so drift in the machine's load spreads evenly.
            for k in 0..2 {
                let which = (i + round + k) % 2;
                let side = &sides[which];
                let s = runtime.block_on(measure(side, tasks, plan))?;
                let load = crate::report::loadavg();
                println!(
                    "  {tasks:>2} tasks {:<52} {:>8.0} cycles/s  p50 {:>6.0} µs  p99 {:>6.0} µs  failed {}  (load {load})",
                    side.name(),
                    s.cycles_per_s,
                    s.p50_us,
                    s.p99_us,
                    s.failures
                );
                let _ = writeln!(
                    table,
                    "| {tasks} | {} | {:.0} | {:.0} | {:.0} | {} | {load} |",
                    side.name(),
                    s.cycles_per_s,
                    s.p50_us,
                    s.p99_us,
                    s.failures
                );
                runs[which].push(s);
            }
        }
        let med = |w: usize| median(&runs[w].iter().map(|s| s.cycles_per_s).collect::<Vec<_>>());
        report.row(
            13,
            if fsync == "always" {
                format!("client vs etcd lock, {tasks} tasks")
            } else {
                format!("client (appendfsync {fsync}) vs etcd lock, {tasks} tasks")
            },
            med(0),
            Some(med(1)),
            "cycles/s",
            (tasks > 1).then_some(Target::RatioAtLeast(10.0)),
        );
    }
    drop(etcd);
    drop(masters);
    report.detail(
        13,
        format!(
            "Ours: `Redlock::acquire` + `Lock::release` over five module-loaded masters with \
             `--appendonly yes --appendfsync {fsync}` (`always`: every grant on disk before \
             it is answered, as etcd's raft log is), one client object shared by all tasks, each \
             task locking and unlocking its own resource. etcd: {}, three members on \
             loopback (data directories in the run directory), each task with its own \
             keep-alive HTTP/1.1 connection to one member (tasks spread over the three) and \
             its own lease ({} s, granted once, as `concurrency.Session` keeps one), each \
             cycle `POST /v3/lock/lock` (its resource, on the lease) then `POST \
             /v3/lock/unlock` of the returned key (what `etcdctl lock` and \
             `concurrency.Mutex` do; JSON over etcd's grpc-gateway). Both on the same tokio \
             runtime and disk. {:.1} s warm-up, {:.1} s measured, {} rounds alternating \
             which goes first; cycles/s counts the successful cycles; medians in the \
             summary.\n\n{table}",
            crate::tools::version_of("etcd", "--version"),
            TTL.as_secs(),
            plan.client_warmup.as_secs_f64(),
            plan.client_window.as_secs_f64(),
            plan.rounds
        ),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_json_fields() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"res:etcd:1"), "cmVzOmV0Y2Q6MQ==");
        let body = r#"{"header":{"revision":"7"},"ID":"7587","TTL":"30","key":"cmVz"}"#;
        assert_eq!(json_str(body, "ID"), Some("7587"));
        assert_eq!(json_str(body, "key"), Some("cmVz"));
        assert_eq!(json_str(body, "nope"), None);
    }
}
