//! Section 9: shared locks and semaphores. A read lock taken and given back
//! (`LOCK.ACQUIRE … SHARED` + `LOCK.RELEASE`) against Redisson's read lock
//! scripts, a semaphore permit against Redisson's
//! `RPermitExpirableSemaphore` scripts, the hand-off of 32 queued readers
//! when a writer leaves, and the memory a shared holder costs.
//!
//! A cycle is two commands that depend on each other (take, give back), so
//! redis-benchmark (one fixed command) cannot drive it: a small pipelined
//! RESP driver does, the same one for both sides, and the server's own CPU
//! per cycle is reported beside the throughput.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::micro::{alternate, runs_detail};
use crate::report::{Report, Target};
use crate::server::Server;
use crate::tools::{pipe_load, record, resp, Rb};
use crate::{percentile, Plan, Result, OWNER};

/// Redisson's version the scripts below come from.
pub const REDISSON_VERSION: &str =
    "Redisson 3.x master of 2024 (redisson/redisson `RedissonReadLock.java` at 0482efe, \
     `RedissonPermitExpirableSemaphore.java` at 017b830; Apache-2.0)";

/// `RedissonReadLock.tryLockInnerAsync`. KEYS[1] = lock, KEYS[2] = the
/// holder's timeout-key prefix; ARGV = lease ms, `uuid:thread`,
/// `uuid:thread:write`. Reproduced to be run as Redisson runs it.
pub const READ_LOCK_LUA: &str = r#"local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
  redis.call('hset', KEYS[1], 'mode', 'read');
  redis.call('hset', KEYS[1], ARGV[2], 1);
  redis.call('set', KEYS[2] .. ':1', 1);
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1);
  local key = KEYS[2] .. ':' .. ind;
  redis.call('set', key, 1);
  redis.call('pexpire', key, ARGV[1]);
  local remainTime = redis.call('pttl', KEYS[1]);
  redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1]));
  return nil;
end;
return redis.call('pttl', KEYS[1]);"#;

/// `RedissonReadLock.unlockInnerAsync`. KEYS = lock, channel, timeout
/// prefix, key prefix, unlock latch (`…:requestId`); ARGV = unlock message,
/// `uuid:thread`, publish command, latch timeout ms.
pub const READ_UNLOCK_LUA: &str = r#"local val = redis.call('get', KEYS[5]);
if val ~= false then
    return tonumber(val);
end;
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
    redis.call(ARGV[3], KEYS[2], ARGV[1]);
    redis.call('set', KEYS[5], 1, 'px', ARGV[4]);
    return 1;
end;
local lockExists = redis.call('hexists', KEYS[1], ARGV[2]);
if (lockExists == 0) then
    return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1);
if (counter == 0) then
    redis.call('hdel', KEYS[1], ARGV[2]);
end;
redis.call('del', KEYS[3] .. ':' .. (counter+1));
if (redis.call('hlen', KEYS[1]) > 1) then
    local maxRemainTime = -3;
    local keys = redis.call('hkeys', KEYS[1]);
    for n, key in ipairs(keys) do
        counter = tonumber(redis.call('hget', KEYS[1], key));
        if type(counter) == 'number' then
            for i=counter, 1, -1 do
                local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i);
                maxRemainTime = math.max(remainTime, maxRemainTime);
            end;
        end;
    end;
    if maxRemainTime > 0 then
        redis.call('pexpire', KEYS[1], maxRemainTime);
        redis.call('set', KEYS[5], 0, 'px', ARGV[4]);
        return 0;
    end;
    if mode == 'write' then
        redis.call('set', KEYS[5], 0, 'px', ARGV[4]);
        return 0;
    end;
end;
redis.call('del', KEYS[1]);
redis.call(ARGV[3], KEYS[2], ARGV[1]);
redis.call('set', KEYS[5], 1, 'px', ARGV[4]);
return 1;"#;

/// `RedissonPermitExpirableSemaphore.tryAcquireAsync(ids, timeoutDate)`.
/// KEYS = semaphore, timeout zset, channel; ARGV = permits, lease end (ms
/// since the epoch), now, the non-expirable timeout, publish command, ids.
pub const PERMIT_ACQUIRE_LUA: &str = r#"local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]);
if #expiredIds > 0 then
    redis.call('zrem', KEYS[2], unpack(expiredIds));
    local value = redis.call('incrby', KEYS[1], #expiredIds);
    if tonumber(value) > 0 then
        redis.call(ARGV[5], KEYS[3], value);
    end;
end;
local value = redis.call('get', KEYS[1]);
if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then
    redis.call('decrby', KEYS[1], ARGV[1]);
    for i = 6, #ARGV, 1 do
        redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]);
    end;
    local ttl = redis.call('pttl', KEYS[1]);
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl);
    end;
    return 'OK';
end;
local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES');
if v[1] ~= nil and v[2] ~= ARGV[4] then
    return ':' .. tostring(v[2]);
end
return nil;"#;

/// `RedissonPermitExpirableSemaphore.tryReleaseAsync(permitId)`. KEYS =
/// semaphore, channel, timeout zset; ARGV = id, 1, now, publish command.
pub const PERMIT_RELEASE_LUA: &str = r#"local expire = redis.call('zscore', KEYS[3], ARGV[1]);
local removed = redis.call('zrem', KEYS[3], ARGV[1]);
if tonumber(removed) ~= 1 then
    return 0;
end;
local value = redis.call('incrby', KEYS[1], ARGV[2]);
redis.call(ARGV[4], KEYS[2], value);
if tonumber(expire) <= tonumber(ARGV[3]) then
    return 0;
end;
return 1;"#;

/// Lease of every hold (ms): nothing ends during a measurement.
const LEASE: &str = "30000";
/// Redisson's unlock-latch timeout with its default config:
/// (timeout 3000 + retryInterval 1500) × retryAttempts 3.
const LATCH_MS: &str = "13500";
/// Redisson's "never expires" lease end for permits.
const NON_EXPIRABLE: &str = "922337203685477";
/// Permits of every semaphore.
const PERMITS: &str = "3";
/// Driver threads and the cycles each keeps in flight.
const THREADS: usize = 2;
const DEPTH: usize = 32;
/// Readers queued behind the writer in the hand-off trials.
const READERS: usize = 32;

struct Shas {
    read_lock: String,
    read_unlock: String,
    permit_acquire: String,
    permit_release: String,
}

fn load(server: &Server) -> Result<Shas> {
    let [read_lock, read_unlock, permit_acquire, permit_release] = crate::micro::script_load(
        server,
        [
            READ_LOCK_LUA,
            READ_UNLOCK_LUA,
            PERMIT_ACQUIRE_LUA,
            PERMIT_RELEASE_LUA,
        ],
    )?;
    Ok(Shas {
        read_lock,
        read_unlock,
        permit_acquire,
        permit_release,
    })
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Counts complete RESP2 replies in a byte stream; remembers the first error.
#[derive(Default)]
struct Replies {
    buf: Vec<u8>,
    error: Option<String>,
}

impl Replies {
    /// The length of the reply at the start of `b`, if it is complete.
    fn one(b: &[u8]) -> Option<usize> {
        let line = b.windows(2).position(|w| w == b"\r\n")?;
        let head = std::str::from_utf8(b.get(1..line)?).ok()?;
        match b.first()? {
            b'+' | b'-' | b':' => Some(line + 2),
            b'$' => {
                let n: i64 = head.parse().ok()?;
                if n < 0 {
                    return Some(line + 2);
                }
                let end = line + 2 + n as usize + 2;
                (b.len() >= end).then_some(end)
            }
            b'*' => {
                let n: i64 = head.parse().ok()?;
                let mut at = line + 2;
                for _ in 0..n.max(0) {
                    at += Replies::one(b.get(at..)?)?;
                }
                Some(at)
            }
            _ => None,
        }
    }

    /// Reads from `s` until `n` replies arrived.
    fn read(&mut self, s: &mut TcpStream, n: usize) -> Result<()> {
        let mut got = 0;
        let mut chunk = [0u8; 64 * 1024];
        loop {
            while let Some(len) = Replies::one(&self.buf) {
                if self.buf.first() == Some(&b'-') && self.error.is_none() {
                    self.error = Some(String::from_utf8_lossy(&self.buf[..len]).into_owned());
                }
                self.buf.drain(..len);
                got += 1;
                if got == n {
                    return Ok(());
                }
            }
            let read = s.read(&mut chunk)?;
            if read == 0 {
                return Err("the server closed the connection".into());
            }
            self.buf.extend_from_slice(&chunk[..read]);
        }
    }
}

/// User + system CPU of a process so far, in seconds.
fn process_cpu(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    // After the ")": state is field 0, utime 11, stime 12.
    let (u, s) = (tick(11).ok_or("bad stat")?, tick(12).ok_or("bad stat")?);
    // /proc reports clock ticks of USER_HZ, which Linux fixes at 100.
    Ok((u + s) / 100.0)
}

/// Appends the n-th cycle of a driver thread, in a pipeline slot, to a buffer.
type CycleFn<'a> = dyn Fn(usize, usize, u64, &mut Vec<u8>) + Sync + 'a;

/// What one cycle driver run measured.
struct Cycles {
    rb: Rb,
    server_us_per_cycle: f64,
}

/// Runs cycles for `warmup + window` on THREADS connections, each keeping
/// DEPTH cycles in flight: `cycle(thread, slot, n, buf)` appends one cycle's
/// two commands (the n-th cycle of that thread) to `buf`.
fn drive(
    server: &Server,
    warmup: Duration,
    window: Duration,
    cycle: &CycleFn<'_>,
) -> Result<Cycles> {
    let port = server.port();
    let counted = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let start = Barrier::new(THREADS + 1);
    let mut batches: Vec<u32> = Vec::new();
    let (cpu_from, cpu_to, cycles, errors) =
        std::thread::scope(|scope| -> Result<(f64, f64, u64, Vec<String>)> {
            let mut handles = Vec::new();
            for t in 0..THREADS {
                let (counted, stop, start) = (&counted, &stop, &start);
                handles.push(scope.spawn(move || -> Result<(Vec<u32>, Option<String>)> {
                    let mut s = TcpStream::connect(("127.0.0.1", port))?;
                    s.set_nodelay(true)?;
                    let mut replies = Replies::default();
                    let mut buf = Vec::with_capacity(DEPTH * 512);
                    let mut n = 0u64;
                    let mut rtts = Vec::new();
                    start.wait();
                    let began = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        buf.clear();
                        for slot in 0..DEPTH {
                            cycle(t, slot, n, &mut buf);
                            n += 1;
                        }
                        let sent = Instant::now();
                        s.write_all(&buf)?;
                        replies.read(&mut s, 2 * DEPTH)?;
                        if began.elapsed() >= warmup {
                            counted.fetch_add(DEPTH as u64, Ordering::Relaxed);
                            rtts.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        }
                    }
                    Ok((rtts, replies.error))
                }));
            }
            start.wait();
            std::thread::sleep(warmup);
            let cpu_from = process_cpu(server.pid())?;
            let measured_from = counted.load(Ordering::Relaxed);
            std::thread::sleep(window);
            let cpu_to = process_cpu(server.pid())?;
            let measured = counted.load(Ordering::Relaxed) - measured_from;
            stop.store(true, Ordering::Relaxed);
            let mut errors = Vec::new();
            for h in handles {
                let (rtts, error) = h.join().map_err(|_| "a driver thread panicked")??;
                batches.extend(rtts);
                errors.extend(error);
            }
            Ok((cpu_from, cpu_to, measured, errors))
        })?;
    if let Some(e) = errors.first() {
        return Err(format!("a cycle got an error reply: {}", e.trim()).into());
    }
    if cycles == 0 {
        return Err("no cycle completed in the window".into());
    }
    batches.sort_unstable();
    Ok(Cycles {
        rb: Rb {
            rps: cycles as f64 / window.as_secs_f64(),
            p50_ms: percentile(&batches, 0.5) / 1000.0,
            p99_ms: percentile(&batches, 0.99) / 1000.0,
        },
        server_us_per_cycle: (cpu_to - cpu_from) * 1e6 / cycles as f64,
    })
}

/// The owner of thread `t`: Redisson's `uuid:threadId`, the same for ours.
fn owner(t: usize) -> String {
    format!("{OWNER}:{}", t + 1)
}

/// Our cycle: `LOCK.ACQUIRE name owner LEASE SHARED [LIMIT n]`, then
/// `LOCK.RELEASE name owner`.
fn native_cycle(buf: &mut Vec<u8>, name: &str, who: &str, limit: Option<&str>) {
    let mut acquire: Vec<&[u8]> = vec![
        b"LOCK.ACQUIRE",
        name.as_bytes(),
        who.as_bytes(),
        LEASE.as_bytes(),
        b"SHARED",
    ];
    if let Some(limit) = limit {
        acquire.extend([&b"LIMIT"[..], limit.as_bytes()]);
    }
    resp(buf, &acquire);
    resp(buf, &[b"LOCK.RELEASE", name.as_bytes(), who.as_bytes()]);
}

/// One read-lock cycle: ours or Redisson's, on lock `rw:{t}:{slot}`.
fn read_cycle(native: bool, shas: &Shas, t: usize, slot: usize, n: u64, buf: &mut Vec<u8>) {
    let name = format!("rw:{t}:{slot}");
    let who = owner(t);
    if native {
        native_cycle(buf, &name, &who, None);
        return;
    }
    let timeout_prefix = format!("{{{name}}}:{who}:rwlock_timeout");
    let write_name = format!("{who}:write");
    resp(
        buf,
        &[
            b"EVALSHA",
            shas.read_lock.as_bytes(),
            b"2",
            name.as_bytes(),
            timeout_prefix.as_bytes(),
            LEASE.as_bytes(),
            who.as_bytes(),
            write_name.as_bytes(),
        ],
    );
    // Redisson makes a fresh 16-byte request id (32 hex digits) per unlock.
    let latch = format!("redisson_unlock_latch:{{{name}}}:{:016x}{:016x}", t, n);
    let channel = format!("redisson_rwlock:{{{name}}}");
    let key_prefix = format!("{{{name}}}");
    resp(
        buf,
        &[
            b"EVALSHA",
            shas.read_unlock.as_bytes(),
            b"5",
            name.as_bytes(),
            channel.as_bytes(),
            timeout_prefix.as_bytes(),
            key_prefix.as_bytes(),
            latch.as_bytes(),
            b"0",
            who.as_bytes(),
            b"publish",
            LATCH_MS.as_bytes(),
        ],
    );
}

/// One permit cycle on semaphore `sem:{t}:{slot}` of PERMITS permits.
fn permit_cycle(native: bool, shas: &Shas, t: usize, slot: usize, n: u64, buf: &mut Vec<u8>) {
    let name = format!("sem:{t}:{slot}");
    if native {
        native_cycle(buf, &name, &owner(t), Some(PERMITS));
        return;
    }
    // A permit id is 16 random bytes, sent raw (Redisson decodes the hex).
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&(t as u64).to_be_bytes());
    id[8..].copy_from_slice(&n.to_be_bytes());
    let now = epoch_ms();
    let (end, now) = ((now + 30_000).to_string(), now.to_string());
    let timeouts = format!("{{{name}}}:timeout");
    let channel = format!("redisson_sc:{{{name}}}");
    resp(
        buf,
        &[
            b"EVALSHA",
            shas.permit_acquire.as_bytes(),
            b"3",
            name.as_bytes(),
            timeouts.as_bytes(),
            channel.as_bytes(),
            b"1",
            end.as_bytes(),
            now.as_bytes(),
            NON_EXPIRABLE.as_bytes(),
            b"publish",
            &id,
        ],
    );
    resp(
        buf,
        &[
            b"EVALSHA",
            shas.permit_release.as_bytes(),
            b"3",
            name.as_bytes(),
            channel.as_bytes(),
            timeouts.as_bytes(),
            &id,
            b"1",
            now.as_bytes(),
            b"publish",
        ],
    );
}

/// Redisson's `trySetPermits`: every semaphore starts with PERMITS.
fn set_permits(server: &Server) -> Result<()> {
    let mut conn = server.conn()?;
    let mut pipe = redis::pipe();
    for t in 0..THREADS {
        for slot in 0..DEPTH {
            pipe.cmd("SET")
                .arg(format!("sem:{t}:{slot}"))
                .arg(PERMITS)
                .ignore();
        }
    }
    pipe.query::<()>(&mut conn)?;
    Ok(())
}

/// The cycle sections: read lock and permit, ours against Redisson's.
fn cycles(server: &Server, shas: &Shas, plan: &Plan, report: &mut Report) -> Result<()> {
    let (warmup, window) = (plan.contention_warmup, plan.client_window);
    let mut detail = String::new();
    for (read, what) in [
        (
            true,
            "shared acquire+release vs Redisson RReadWriteLock.readLock() scripts",
        ),
        (
            false,
            "permit acquire+release vs Redisson RPermitExpirableSemaphore scripts",
        ),
    ] {
        println!("  {what}");
        let mut cpu = (Vec::new(), Vec::new());
        let (ours, base, lines) = alternate(plan.rounds, |native| {
            server.flushall()?;
            if !read && !native {
                set_permits(server)?;
            }
            let run = drive(server, warmup, window, &|t, slot, n, buf| {
                if read {
                    read_cycle(native, shas, t, slot, n, buf);
                } else {
                    permit_cycle(native, shas, t, slot, n, buf);
                }
            })?;
            // Every cycle gave its hold back, so no lock is left.
            if native && server.dbsize()? != 0 {
                return Err(format!("{what}: locks left after the run").into());
            }
            if native { &mut cpu.0 } else { &mut cpu.1 }.push(run.server_us_per_cycle);
            Ok(run.rb)
        })?;
        report.row(
            9,
            what,
            ours,
            Some(base),
            "cycles/s",
            Some(Target::RatioAtLeast(3.0)),
        );
        let us = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            detail,
            "**{what}** (one op = one cycle of two commands; p50/p99 are of a batch of \
             {DEPTH} cycles). Server CPU per cycle (µs, user+system of redis-server over \
             the window): ours {}; Redisson {} (median ratio {:.2}×).\n\n{}",
            us(&cpu.0),
            us(&cpu.1),
            crate::median(&cpu.1) / crate::median(&cpu.0).max(f64::MIN_POSITIVE),
            runs_detail(&lines)
        );
    }
    record(format!(
        "(section 9 cycles: {THREADS} driver threads × {DEPTH} cycles in flight, RESP over TCP)"
    ));
    report.detail(
        9,
        format!(
            "**Cycles.** A cycle takes a hold and gives it back. {THREADS} driver threads, \
             one connection each, keep {DEPTH} cycles in flight per connection (one write of \
             {DEPTH} cycles, then their {} replies), each cycle on its own lock \
             `rw:<thread>:<slot>` / semaphore `sem:<thread>:<slot>` of {PERMITS} permits; \
             {:.1} s warm-up, {:.1} s measured; ours and Redisson's alternate, which goes \
             first alternating per round, `FLUSHALL SYNC` before each run, {} rounds \
             (median). Ours: `LOCK.ACQUIRE name owner {LEASE} SHARED` (with `LIMIT \
             {PERMITS}` for the semaphore) and `LOCK.RELEASE name owner`. Redisson's, as \
             Redisson sends them (`EVALSHA` of the scripts below, keys and arguments built \
             as Redisson builds them: the timeout-key prefix `{{name}}:uuid:thread:rwlock_timeout`, \
             a fresh unlock request id per release and its latch key with Redisson's default \
             13500 ms, a fresh 16-byte permit id per acquisition, the semaphore preset to \
             {PERMITS} permits as `trySetPermits` does); their pub/sub wake-ups have no \
             subscriber here, which is their cheapest case. Scripts from {REDISSON_VERSION}.\n\n\
             {detail}\nRedisson's read lock:\n\n```lua\n{READ_LOCK_LUA}\n```\n\n```lua\n\
             {READ_UNLOCK_LUA}\n```\n\nRedisson's permit acquire and release:\n\n```lua\n\
             {PERMIT_ACQUIRE_LUA}\n```\n\n```lua\n{PERMIT_RELEASE_LUA}\n```\n",
            2 * DEPTH,
            warmup.as_secs_f64(),
            window.as_secs_f64(),
            plan.rounds,
        ),
    );
    Ok(())
}

/// One hand-off trial: a writer holds `handoff`, READERS readers queue with
/// `SHARED WAIT`, the writer releases; how long until the last reader's
/// grant arrived (ms), and how many readers got one.
async fn handoff_trial(url: &str, trial: usize) -> Result<(f64, usize)> {
    let key = format!("handoff:{trial}");
    let mut writer = crate::contention::connect(url).await?;
    let _: i64 = redis::cmd("LOCK.ACQUIRE")
        .arg(&key)
        .arg("writer")
        .arg(LEASE)
        .query_async(&mut writer)
        .await?;
    let mut readers = Vec::new();
    for i in 0..READERS {
        let mut conn = crate::contention::connect(url).await?;
        let key = key.clone();
        readers.push(tokio::spawn(async move {
            let token: redis::Value = redis::cmd("LOCK.ACQUIRE")
                .arg(&key)
                .arg(format!("reader-{i:02}"))
                .arg(LEASE)
                .arg("SHARED")
                .arg("WAIT")
                .arg(10_000)
                .query_async(&mut conn)
                .await?;
            Ok::<_, crate::Error>((matches!(token, redis::Value::Int(_)), Instant::now()))
        }));
    }
    crate::contention::until_waiters(&mut writer, &key, READERS as i64).await?;
    let released = Instant::now();
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg(&key)
        .arg("writer")
        .query_async(&mut writer)
        .await?;
    let (mut last, mut granted) = (Duration::ZERO, 0);
    for r in readers {
        let (got, at) = r.await??;
        if got {
            granted += 1;
            last = last.max(at.saturating_duration_since(released));
        }
    }
    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut writer).await?;
    Ok((last.as_secs_f64() * 1000.0, granted))
}

/// 32 readers behind a writer: all granted within 2 ms (p99 over trials).
fn handoff(server: &Server, plan: &Plan, report: &mut Report) -> Result<()> {
    println!("  hand-off of {READERS} readers behind a writer");
    let trials = plan.latency_trials * 4;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let url = server.url();
    let mut all = Vec::new();
    let mut short = 0;
    for trial in 0..trials {
        let (ms, granted) = runtime.block_on(handoff_trial(&url, trial))?;
        if granted < READERS {
            short += 1;
        }
        all.push(ms);
    }
    if short > 0 {
        return Err(
            format!("{short} of {trials} trials did not grant all {READERS} readers").into(),
        );
    }
    all.sort_by(f64::total_cmp);
    let q = |p: f64| all[((all.len() - 1) as f64 * p).round() as usize];
    let (p50, p99, max) = (q(0.5), q(0.99), q(1.0));
    println!("    last reader granted after: p50 {p50:.3} ms, p99 {p99:.3} ms, max {max:.3} ms");
    report.row(
        9,
        format!("hand-off: {READERS} readers behind a writer, last grant after release, p99"),
        p99,
        None,
        "ms",
        Some(Target::ValueAtMost(2.0)),
    );
    report.detail(
        9,
        format!(
            "**Hand-off.** {trials} trials on one tokio current-thread runtime (the \
             client side of all {} connections on one thread). A writer holds \
             `handoff:<trial>` (`LOCK.ACQUIRE … {LEASE}`); {READERS} readers, one \
             connection each, send `LOCK.ACQUIRE handoff:<trial> reader-NN {LEASE} SHARED \
             WAIT 10000`; once `LOCK.INFO` shows {READERS} waiters the writer sends \
             `LOCK.RELEASE`. Measured: from just before the release is sent to the arrival \
             of the last reader's grant (so it includes the release's round trip and the \
             client runtime reading {READERS} replies). Every trial granted all \
             {READERS} readers. Last grant after release: p50 {p50:.3} ms, p99 {p99:.3} \
             ms, max {max:.3} ms.\n",
            READERS + 1
        ),
    );
    Ok(())
}

/// Memory per shared holder: `holders` readers on each lock, against one
/// `SET NX PX` lock per holder.
fn memory(server: &Server, plan: &Plan, report: &mut Report) -> Result<()> {
    println!("  memory per shared holder");
    let n = plan.memory_locks;
    let measure = |what: &str, gen: &mut dyn FnMut(u64, &mut Vec<u8>)| -> Result<(f64, u64)> {
        server.flushall()?;
        std::thread::sleep(Duration::from_millis(200));
        let before = server.info_u64("memory", "used_memory")?;
        pipe_load(server.port(), n, what, gen)?;
        std::thread::sleep(Duration::from_millis(200));
        let after = server.info_u64("memory", "used_memory")?;
        Ok((
            after.saturating_sub(before) as f64 / n as f64,
            server.dbsize()?,
        ))
    };
    // The owners: 36 bytes like the SET lock's value.
    let who = |i: u64| format!("{}{:06}", &OWNER[..30], i % 1_000_000);
    let (set, set_keys) = measure("SET lock:%012d <owner> NX PX", &mut |i, buf| {
        let k = format!("lock:{i:012}");
        resp(
            buf,
            &[
                b"SET",
                k.as_bytes(),
                OWNER.as_bytes(),
                b"NX",
                b"PX",
                LEASE.as_bytes(),
            ],
        );
    })?;
    let mut detail = format!(
        "**Memory.** `FLUSHALL SYNC`, {n} holds loaded with `redis-cli --pipe`, the \
         `used_memory` delta divided by {n}; keys `lock:%012d` (17 bytes, as in section 4), \
         owners 36 bytes, lease {LEASE} ms. \
         `SET NX PX`: {set:.1} B/lock ({set_keys} keys).\n\n"
    );
    for per_key in [1u64, 10] {
        let (bytes, keys) = measure(
            &format!("LOCK.ACQUIRE lock:%012d <owner> {LEASE} SHARED ({per_key} per lock)"),
            &mut |i, buf| {
                let k = format!("lock:{:012}", i / per_key);
                let o = who(i);
                resp(
                    buf,
                    &[
                        b"LOCK.ACQUIRE",
                        k.as_bytes(),
                        o.as_bytes(),
                        LEASE.as_bytes(),
                        b"SHARED",
                    ],
                );
            },
        )?;
        let line = format!(
            "{per_key} reader(s) per lock: {bytes:.1} B/holder ({keys} keys), {:.2}× `SET NX PX`",
            bytes / set
        );
        println!("    {line}");
        let _ = writeln!(detail, "- {line}");
        report.row(
            9,
            format!("memory/shared holder, {per_key} per lock, vs SET NX PX (1M)"),
            bytes,
            Some(set),
            "B/holder",
            Some(Target::RatioAtMost(1.5)),
        );
    }
    report.detail(9, detail);
    server.flushall()
}

pub fn run(server: &Server, plan: &Plan, report: &mut Report) -> Result<()> {
    println!("9. shared locks and semaphores");
    let shas = load(server)?;
    cycles(server, &shas, plan, report)?;
    handoff(server, plan, report)?;
    memory(server, plan, report)
}

#[cfg(test)]
mod tests {
    use super::Replies;

    #[test]
    fn replies_are_counted_whole() {
        assert_eq!(Replies::one(b":12\r\n"), Some(5));
        assert_eq!(Replies::one(b"$-1\r\n"), Some(5));
        assert_eq!(Replies::one(b"$2\r\nOK\r\n"), Some(8));
        assert_eq!(Replies::one(b"$2\r\nO"), None);
        assert_eq!(Replies::one(b"*2\r\n:1\r\n$1\r\na\r\n"), Some(15));
        assert_eq!(Replies::one(b"*2\r\n:1\r\n"), None);
        assert_eq!(Replies::one(b"-ERR x\r\n"), Some(8));
    }
}
