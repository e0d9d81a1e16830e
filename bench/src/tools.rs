//! Driving `redis-benchmark` and `redis-cli --pipe`, and keeping the exact
//! command lines for BENCHMARKS.md.

use std::io::{BufWriter, Write};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::server::die_with_parent;
use crate::Result;

/// Every distinct command line run, with the port written as `$PORT`.
static COMMANDS: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub fn record(line: String) {
    let mut commands = COMMANDS.lock().unwrap_or_else(|p| p.into_inner());
    if !commands.contains(&line) {
        commands.push(line);
    }
}

pub fn recorded() -> Vec<String> {
    COMMANDS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// One redis-benchmark run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rb {
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Clients redis-benchmark opens (the issue's setting).
pub const CLIENTS: u32 = 50;

/// `redis-benchmark -c 50 -n requests -P pipeline [-r keyspace] --csv command…`
pub fn redis_benchmark(
    port: u16,
    requests: u64,
    pipeline: u32,
    keyspace: Option<u64>,
    command: &[&str],
) -> Result<Rb> {
    let mut args: Vec<String> = vec![
        "-h".into(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
        "-c".into(),
        CLIENTS.to_string(),
        "-n".into(),
        requests.to_string(),
        "-P".into(),
        pipeline.to_string(),
    ];
    if let Some(keyspace) = keyspace {
        args.push("-r".into());
        args.push(keyspace.to_string());
    }
    args.push("--csv".into());
    args.extend(command.iter().map(|s| s.to_string()));
    record(format!(
        "redis-benchmark {}",
        shell_words(&args).replace(&format!("-p {port} "), "-p $PORT ")
    ));
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(&args).stdin(Stdio::null());
    die_with_parent(&mut cmd);
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run redis-benchmark: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "redis-benchmark failed ({}): {}{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    parse_csv(&stdout).ok_or_else(|| format!("unexpected redis-benchmark output: {stdout}").into())
}

/// The data line of `--csv` output: "test","rps","avg","min","p50","p95","p99","max".
fn parse_csv(out: &str) -> Option<Rb> {
    let line = out
        .lines()
        .rfind(|l| l.starts_with('"') && !l.starts_with("\"test\""))?;
    // The test name is the command line, which may hold commas: read from the end.
    let fields: Vec<&str> = line.rsplitn(8, ',').map(|f| f.trim_matches('"')).collect();
    // rsplitn yields max, p99, p95, p50, min, avg, rps, test.
    let num = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    Some(Rb {
        rps: num(6)?,
        p50_ms: num(3)?,
        p99_ms: num(1)?,
    })
}

/// Appends one command in RESP to `buf`.
pub fn resp(buf: &mut Vec<u8>, args: &[&[u8]]) {
    buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        buf.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        buf.extend_from_slice(arg);
        buf.extend_from_slice(b"\r\n");
    }
}

/// Streams `count` commands made by `gen(i, buf)` (RESP appended to `buf`)
/// into `redis-cli --pipe`; fails if any reply was an error. `what`
/// describes the commands for BENCHMARKS.md. Returns the time it took.
pub fn pipe_load(
    port: u16,
    count: u64,
    what: &str,
    mut gen: impl FnMut(u64, &mut Vec<u8>),
) -> Result<Duration> {
    record(format!("redis-cli -p $PORT --pipe   # {count} × {what}"));
    let started = Instant::now();
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "--pipe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_parent(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run redis-cli: {e}"))?;
    {
        let stdin = child.stdin.take().ok_or("redis-cli has no stdin")?;
        let mut writer = BufWriter::with_capacity(1 << 20, stdin);
        let mut buf = Vec::with_capacity(256);
        for i in 0..count {
            buf.clear();
            gen(i, &mut buf);
            writer.write_all(&buf)?;
        }
        writer.flush()?;
    }
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let errors = text
        .split("errors: ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.trim().parse::<u64>().ok());
    if !out.status.success() || errors != Some(0) {
        return Err(format!(
            "redis-cli --pipe ({what}) failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(started.elapsed())
}

/// Arguments quoted for a shell where needed.
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.:/=$,%@+".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `redis-server --version` and similar: the first line a tool prints.
pub fn version_of(tool: &str, arg: &str) -> String {
    Command::new(tool)
        .arg(arg)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| format!("{tool}: unknown"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_redis_benchmark_csv() {
        let out = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                   \"SET lock:__rand_int__ x NX PX 60000\",\"412371.12\",\"3.511\",\"0.880\",\"3.447\",\"4.463\",\"5.111\",\"8.079\"\n";
        let rb = parse_csv(out).expect("parsed");
        assert_eq!(rb.rps, 412371.12);
        assert_eq!(rb.p50_ms, 3.447);
        assert_eq!(rb.p99_ms, 5.111);
    }

    #[test]
    fn test_names_with_commas_are_skipped() {
        let out = "\"EVAL return {1,2} 0\",\"1000.00\",\"1\",\"0\",\"2\",\"3\",\"4\",\"5\"\n";
        assert_eq!(parse_csv(out).map(|r| r.rps), Some(1000.0));
    }

    #[test]
    fn resp_encoding() {
        let mut buf = Vec::new();
        resp(&mut buf, &[b"SET", b"k", b"v"]);
        assert_eq!(buf, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
    }

    #[test]
    fn shell_quoting() {
        let args = vec!["EVALSHA".to_string(), "a b".to_string(), "it's".to_string()];
        assert_eq!(shell_words(&args), "EVALSHA 'a b' 'it'\\''s'");
    }
}
