//! A pipelined load generator for what redis-benchmark cannot do: acquire a
//! fresh key and release it again in the same pipeline, so that the number
//! of live locks stays where the test put it (section 7).

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::tools::resp;
use crate::{Result, OWNER};

/// Which lock the pairs take and give back.
#[derive(Clone, Debug)]
pub enum Pair {
    /// `LOCK.ACQUIRE k owner ttl` + `LOCK.RELEASE k owner`
    Module,
    /// `SET k owner NX PX ttl` + `EVALSHA <compare-and-delete> 1 k owner`
    Script { unlock_sha: String },
}

/// Connections and pipeline depth, as in the redis-benchmark runs
/// (16 pairs = 32 commands in flight per connection).
pub const CONNECTIONS: usize = 50;
pub const PAIRS_PER_BATCH: usize = 16;

/// Acquire+release pairs per second on fresh keys over `window`, after
/// `warmup`.
pub async fn pairs_per_second(
    port: u16,
    pair: Pair,
    warmup: Duration,
    window: Duration,
) -> Result<f64> {
    let from = Instant::now() + warmup;
    let until = from + window;
    let mut tasks = Vec::new();
    for conn in 0..CONNECTIONS {
        let pair = pair.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
            stream.set_nodelay(true)?;
            let mut out = Vec::with_capacity(8192);
            let mut reply = vec![0u8; 65536];
            let mut counted = 0u64;
            let mut n = 0u64;
            loop {
                let started = Instant::now();
                if started >= until {
                    break;
                }
                out.clear();
                for _ in 0..PAIRS_PER_BATCH {
                    n += 1;
                    let key = format!("churn:{conn:03}:{n:012}");
                    match &pair {
                        Pair::Module => {
                            resp(
                                &mut out,
                                &[
                                    b"LOCK.ACQUIRE",
                                    key.as_bytes(),
                                    OWNER.as_bytes(),
                                    crate::micro::TTL.as_bytes(),
                                ],
                            );
                            resp(
                                &mut out,
                                &[b"LOCK.RELEASE", key.as_bytes(), OWNER.as_bytes()],
                            );
                        }
                        Pair::Script { unlock_sha } => {
                            resp(
                                &mut out,
                                &[
                                    b"SET",
                                    key.as_bytes(),
                                    OWNER.as_bytes(),
                                    b"NX",
                                    b"PX",
                                    crate::micro::TTL.as_bytes(),
                                ],
                            );
                            resp(
                                &mut out,
                                &[
                                    b"EVALSHA",
                                    unlock_sha.as_bytes(),
                                    b"1",
                                    key.as_bytes(),
                                    OWNER.as_bytes(),
                                ],
                            );
                        }
                    }
                }
                stream.write_all(&out).await?;
                // Every reply is one line (+OK, :n, $-1 or -ERR…).
                let mut lines = 0;
                while lines < 2 * PAIRS_PER_BATCH {
                    let got = stream.read(&mut reply).await?;
                    if got == 0 {
                        return Err::<u64, crate::Error>("the server closed the connection".into());
                    }
                    for (i, b) in reply[..got].iter().enumerate() {
                        if *b == b'-' && (i == 0 || reply[i - 1] == b'\n') {
                            return Err(format!(
                                "error reply: {}",
                                String::from_utf8_lossy(&reply[i..got])
                                    .lines()
                                    .next()
                                    .unwrap_or("")
                            )
                            .into());
                        }
                        if *b == b'\n' {
                            lines += 1;
                        }
                    }
                }
                if started >= from {
                    counted += PAIRS_PER_BATCH as u64;
                }
            }
            Ok(counted)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    Ok(total as f64 / window.as_secs_f64())
}
