//! Hostile data: lock values that arrive through `RESTORE` (the same
//! loader serves RDB files, `MIGRATE` and replica syncs) and effects that
//! arrive through the AOF. Every value is bounded like a command argument;
//! a refused value refuses the whole payload, never hangs or crashes the
//! server, and never raises the node's token counter.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use redis::{Connection, Value};

/// A DUMP payload: the serialized value, the RDB version, the checksum.
struct Dump {
    value: Vec<u8>,
    version: [u8; 2],
}

impl Dump {
    fn of(c: &mut Connection, key: &str) -> Dump {
        let raw: Vec<u8> = redis::cmd("DUMP").arg(key).query(c).unwrap();
        let (body, footer) = raw.split_at(raw.len() - 10);
        assert_eq!(
            crc64(&raw[..raw.len() - 8]),
            u64::from_le_bytes(footer[2..].try_into().unwrap()),
            "our CRC-64 must match the server's"
        );
        Dump {
            value: body.to_vec(),
            version: [footer[0], footer[1]],
        }
    }

    /// The payload for `value`, with a checksum the server accepts.
    fn payload(&self, value: &[u8]) -> Vec<u8> {
        let mut payload = value.to_vec();
        payload.extend_from_slice(&self.version);
        let crc = crc64(&payload);
        payload.extend_from_slice(&crc.to_le_bytes());
        payload
    }
}

/// A lock value as the module saves it (owner, holds, token, wall end),
/// after the type header, with fields that need not be valid.
fn lock_value(header: &[u8], owner: &[u8], holds: u64, token: i64, wall_end_ms: i64) -> Vec<u8> {
    let mut value = header.to_vec();
    value.extend(redis_lock_core::record::encode_fields(
        owner,
        holds,
        token,
        wall_end_ms,
    ));
    value
}

/// The encoding version in a value's type header: the low 10 bits of the
/// module type id.
fn encoding_version(header: &[u8]) -> u64 {
    u64::from_be_bytes(header[2..10].try_into().unwrap()) & 0x3ff
}

/// `header` with its encoding version set to `version`.
fn with_encoding_version(header: &[u8], version: u64) -> Vec<u8> {
    let id = u64::from_be_bytes(header[2..10].try_into().unwrap());
    let mut out = header.to_vec();
    out[2..10].copy_from_slice(&((id & !0x3ff) | version).to_be_bytes());
    out
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn restore(c: &mut Connection, key: &str, payload: &[u8], extra: &[&str]) -> Result<(), String> {
    let mut cmd = redis::cmd("RESTORE");
    cmd.arg(key).arg(0).arg(payload).arg("REPLACE");
    for arg in extra {
        cmd.arg(*arg);
    }
    cmd.query::<Value>(c)
        .map(|_| ())
        .map_err(|e| error_line(&e))
}

/// A real lock's DUMP and the type header of its value (type byte and the
/// module type id), checked against a value rebuilt from its fields.
fn lock_dump(c: &mut Connection) -> (Dump, Vec<u8>) {
    let token = acquire(c, "model", "owner", 600_000).unwrap();
    let dump = Dump::of(c, "model");
    let header = dump.value[..10].to_vec();
    assert_eq!(header[1], 0x81, "a module type id is a 64-bit length");
    let rebuilt_prefix = lock_value(&header, b"owner", 1, token, 0);
    let fields_end = rebuilt_prefix.len() - 10;
    assert_eq!(
        dump.value[..fields_end],
        rebuilt_prefix[..fields_end],
        "the lock's layout changed: update lock_value()"
    );
    release(c, "model", "owner").unwrap();
    (dump, header)
}

fn del(c: &mut Connection, key: &str) {
    let _: i64 = redis::cmd("DEL").arg(key).query(c).unwrap();
}

fn alive(c: &mut Connection) {
    let pong: String = redis::cmd("PING").query(c).expect("the server died");
    assert_eq!(pong, "PONG");
}

#[test]
fn a_truncated_lock_with_a_valid_checksum_is_refused_cleanly() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let (dump, _) = lock_dump(&mut c);
    let mut refused = 0;
    for cut in 1..dump.value.len() - 1 {
        let value = &dump.value[..dump.value.len() - cut];
        let result = restore(&mut c, "cut", &dump.payload(value), &[]);
        alive(&mut c);
        // The loader reads on into the payload's footer: a short cut can
        // still decode into a valid lock, which must then be in bounds.
        match result {
            Err(_) => {
                refused += 1;
                assert!(!exists(&mut c, "cut"));
            }
            Ok(()) => {
                let info = lock_info(&mut c, "cut");
                assert!(info.is_none_or(|i| (1..=MAX_ATLEAST).contains(&i.token)));
                del(&mut c, "cut");
            }
        }
    }
    assert!(
        refused > dump.value.len() / 2,
        "only {refused} cuts refused"
    );
    assert!(!server.log().contains("panicked"));
}

#[test]
fn restored_values_are_bounded_like_arguments_and_raise_no_counter_when_refused() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let (dump, header) = lock_dump(&mut c);
    let last = lock_stat(&mut c, "lock_last_token");
    let in_a_minute = now_ms() + 60_000;
    let far = now_ms() + 315_360_000_000 + 86_400_000 + 60_000;
    for (what, value) in [
        (
            "token above 2^53-1",
            lock_value(&header, b"o", 1, MAX_ATLEAST + 1, in_a_minute),
        ),
        ("token 0", lock_value(&header, b"o", 1, 0, in_a_minute)),
        ("holds 0", lock_value(&header, b"o", 0, 5, in_a_minute)),
        ("empty owner", lock_value(&header, b"", 1, 5, in_a_minute)),
        (
            "lease end past any ttl",
            lock_value(&header, b"o", 1, 5, far),
        ),
        (
            "lease end i64::MAX",
            lock_value(&header, b"o", 1, 5, i64::MAX),
        ),
    ] {
        let result = restore(&mut c, "hostile", &dump.payload(&value), &[]);
        assert!(result.is_err(), "{what}: accepted");
        alive(&mut c);
        assert!(!exists(&mut c, "hostile"), "{what}");
    }
    assert_eq!(lock_stat(&mut c, "lock_last_token"), last);

    assert!(!server.log().contains("panicked"));
}

/// A value saved by the module before the lock family's data model grew
/// several holders (encoding version 1: one holder's four fields) still
/// restores, with its owner, holds and token, and the node's counter
/// continues above its token; an unknown version is refused.
#[test]
fn a_version_1_value_still_restores() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let (dump, header) = lock_dump(&mut c);
    assert_eq!(encoding_version(&header), 2);
    let token = MAX_ATLEAST - 100;
    let mut value = with_encoding_version(&header, 1);
    value.extend(redis_lock_core::record::encode_v1_fields(
        b"old-owner",
        3,
        token,
        now_ms() + 60_000,
    ));
    restore(&mut c, "old", &dump.payload(&value), &[]).unwrap();
    let info = held(&mut c, "old");
    assert_eq!(info.identity(), (b"old-owner".to_vec(), 3, token));
    assert!(info.pttl > 50_000, "pttl {}", info.pttl);
    // The lease sweep finds a restored lock (on the timer, which the next
    // lease filed arms) and raises the counter above it.
    acquire(&mut c, "arm", "o", 10_000).unwrap();
    assert!(wait_until(SOON, || lock_stat(&mut c, "lock_last_token") >= token));
    let fresh = acquire(&mut c, "new", "o", 10_000).unwrap();
    assert!(fresh > token, "fresh token {fresh} not above {token}");
    // A version-2 value read as version 1, and an unknown version: refused.
    let mut misread = with_encoding_version(&header, 1);
    misread.extend(lock_value(&[], b"o", 1, 5, now_ms() + 60_000));
    let mut unknown = with_encoding_version(&header, 3);
    unknown.extend(lock_value(&[], b"o", 1, 5, now_ms() + 60_000));
    for (what, value) in [("misread", misread), ("version 3", unknown)] {
        assert!(
            restore(&mut c, "bad", &dump.payload(&value), &[]).is_err(),
            "{what}"
        );
        alive(&mut c);
        assert!(!exists(&mut c, "bad"), "{what}");
    }
    assert!(!server.log().contains("panicked"));
}

/// A restored lock is found by the lease sweep and ends on time by itself,
/// even when nothing else happens on the server (its arrival arms the
/// timer; before, only a later lease filed or ended did, and a lock
/// restored on a quiet server outlived its lease until then).
#[test]
fn a_restored_lock_ends_by_itself_on_a_quiet_server() {
    let server = RedisServer::start();
    let mut c = server.conn();
    // A long lease: its timer is armed far in the future.
    let (dump, header) = lock_dump(&mut c);
    let token = MAX_ATLEAST - 7;
    let value = lock_value(&header, b"quiet", 1, token, now_ms() + 300);
    restore(&mut c, "quiet", &dump.payload(&value), &[]).unwrap();
    assert!(exists(&mut c, "quiet"));
    // Only reads from now on.
    assert!(
        wait_until(SOON, || !exists(&mut c, "quiet")),
        "the restored lock outlived its lease"
    );
    assert!(lock_stat(&mut c, "lock_last_token") >= token);
    assert!(!server.log().contains("panicked"));
}

/// A `RESTORE` whose absolute TTL is past: the server loads the value and
/// throws it away at once. Nothing is stored; the counter was raised when
/// the value was read (`rdb_load` cannot know whether the value will land,
/// and a lock that lands must raise it at once, issue #36): it only ever
/// goes up, and later grants stay above it.
#[test]
fn a_discarded_restore_stores_nothing_and_later_grants_stay_above_it() {
    let server = RedisServer::start();
    let mut c = server.conn();
    let (dump, header) = lock_dump(&mut c);
    let token = MAX_ATLEAST - 5;
    let value = lock_value(&header, b"o", 1, token, now_ms() + 60_000);
    let _: Value = redis::cmd("RESTORE")
        .arg("gone")
        .arg(1)
        .arg(dump.payload(&value))
        .arg("ABSTTL")
        .query(&mut c)
        .unwrap();
    assert!(!exists(&mut c, "gone"));
    assert_eq!(lock_stat(&mut c, "lock_holders"), 0);
    assert_eq!(lock_stat(&mut c, "lock_lease_index"), 0);
    assert_eq!(lock_stat(&mut c, "lock_last_token"), token);
    let next = acquire(&mut c, "k", "me", 1_000).unwrap();
    assert!(next > token, "token {next} after {token}");
    assert!(!server.log().contains("panicked"));
}

#[test]
fn an_aof_effect_with_a_lease_end_beyond_any_ttl_does_not_hang_the_restart() {
    let options = ServerOptions::default().args(["--appendonly", "yes", "--appendfsync", "always"]);
    let mut server = RedisServer::start_with(options.clone());
    let mut c = server.conn();
    acquire(&mut c, "ok", "o", 600_000).unwrap();
    drop(c);
    server.kill9();
    let dir = server.dir().join("appendonlydir");
    let incr = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.to_string_lossy().ends_with(".incr.aof"))
        .expect("an incremental AOF file");
    let mut aof = std::fs::read(&incr).unwrap();
    for (key, end) in [("far", "18446744073709552"), ("max", "9223372036854775807")] {
        let args = ["LOCK.APPLY", key, "o", "1", "5", end];
        aof.extend(format!("*{}\r\n", args.len()).bytes());
        for arg in args {
            aof.extend(format!("${}\r\n{arg}\r\n", arg.len()).bytes());
        }
    }
    std::fs::write(&incr, aof).unwrap();
    server.restart_with(options);
    let mut c = server.conn();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    alive(&mut c);
    assert!(!exists(&mut c, "far"));
    assert!(!exists(&mut c, "max"));
    assert_eq!(held(&mut c, "ok").owner, b"o");
    // Timers run: a short lease still ends on time.
    acquire(&mut c, "short", "o", 50).unwrap();
    assert!(wait_until(SOON, || !exists(&mut c, "short")));
}

/// The core crate's pure decoder of the RDB module encoding
/// (`redis_lock_core::record`, which the fuzzer drives) reads what the
/// server really writes: raw owners, owners Redis stores as integers, and
/// long owners it compresses with LZF.
#[test]
fn the_pure_decoder_reads_real_dump_payloads() {
    use redis_lock_core::record::{decode, Bounds, RdbFields, VERSION};
    use redis_lock_core::SystemClock;

    let server = RedisServer::start();
    let mut c = server.conn();
    let long = "worker-".repeat(30);
    for owner in ["alice", "12345", "-7", long.as_str()] {
        let token = acquire(&mut c, "decoded", owner, 600_000).unwrap();
        acquire(&mut c, "decoded", owner, 600_000).unwrap();
        let dump = Dump::of(&mut c, "decoded");
        // Mode 0, limit 0, one holder (three unsigned fields), then the
        // string opcode (5) and how Redis encoded the owner.
        assert_eq!(dump.value[10..16], [2, 0, 2, 0, 2, 1]);
        assert_eq!(dump.value[16], 5);
        let expected = match owner {
            "12345" => Some(0xc1), // a 16-bit integer
            "-7" => Some(0xc0),    // an 8-bit integer
            "alice" => None,       // raw, length first
            _ => Some(0xc3),       // LZF
        };
        if let Some(encoding) = expected {
            assert_eq!(dump.value[17], encoding, "owner {owner:?}");
        }
        assert_eq!(encoding_version(&dump.value[..10]), u64::from(VERSION));
        // After the type byte and the module type id (0x81 + 8 bytes).
        let mut fields = RdbFields::new(&dump.value[10..]);
        let bounds = Bounds {
            max_owner: 1 << 20,
            max_holders: 1,
        };
        let record = decode(&mut fields, VERSION, &SystemClock::new(), bounds)
            .unwrap_or_else(|refused| panic!("owner {owner:?}: {refused:?}"));
        assert_eq!(record.holders.len(), 1);
        let record = &record.holders[0];
        assert_eq!(record.owner, owner.as_bytes());
        assert_eq!((record.holds, record.token), (2, token));
        let left = record.wall_end_ms - now_ms();
        assert!(
            (590_000..=600_000).contains(&left),
            "lease end {left} ms away"
        );
        assert!(
            fields.at_end_of_value(),
            "owner {owner:?}: bytes after the value"
        );
        release_all(&mut c, "decoded", owner).unwrap();
    }
}

/// Mutates real lock payloads (bit flips, cut, inserted and replaced bytes,
/// swapped fields) with a valid checksum and restores each: the server must
/// stay responsive, and whatever it accepted must be within bounds.
#[test]
fn ten_thousand_mutated_payloads() {
    let seed = std::env::var("REDIS_LOCK_PAYLOAD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_0fda_7a00_u64);
    let server = RedisServer::start();
    let mut c = server.conn();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (dump, header) = lock_dump(&mut c);
    let mut rng = Rng(seed);
    let specials: [i64; 8] = [
        0,
        1,
        -1,
        MAX_ATLEAST,
        MAX_ATLEAST + 1,
        i64::MAX,
        i64::MIN,
        now_ms() + 60_000,
    ];
    let mut accepted = 0;
    for i in 0..10_000 {
        let pick = |rng: &mut Rng| specials[rng.below(specials.len() as u64) as usize];
        let mut value = lock_value(
            &header,
            &b"owner-xyz"[..1 + rng.below(9) as usize],
            [0, 1, 2, u64::from(u32::MAX), u64::from(u32::MAX) + 1][rng.below(5) as usize],
            pick(&mut rng),
            pick(&mut rng),
        );
        for _ in 0..rng.below(4) {
            if value.len() <= 11 {
                break;
            }
            let at = 10 + rng.below((value.len() - 10) as u64) as usize;
            match rng.below(4) {
                0 => value[at] ^= 1 << rng.below(8),
                1 => value.truncate(at),
                2 => value.insert(at, rng.next() as u8),
                _ => value[at] = rng.next() as u8,
            }
        }
        let key = format!("m{}", i % 64);
        let restored = restore(&mut c, &key, &dump.payload(&value), &[]).is_ok();
        let context = || format!("payload {i} (seed {seed:#x}): {value:?}");
        let pong: String = redis::cmd("PING")
            .query(&mut c)
            .unwrap_or_else(|e| panic!("no PING after {}: {e}", context()));
        assert_eq!(pong, "PONG");
        if restored {
            accepted += 1;
            if let Some(info) = lock_info(&mut c, &key) {
                assert!(
                    (1..=MAX_ATLEAST).contains(&info.token),
                    "token {} accepted from {}",
                    info.token,
                    context()
                );
                assert!(info.holds >= 1, "holds 0 from {}", context());
                assert!(
                    info.pttl <= 315_360_000_000 + 86_400_000,
                    "pttl {} from {}",
                    info.pttl,
                    context()
                );
            }
        }
        assert!(lock_stat(&mut c, "lock_last_token") <= MAX_ATLEAST);
    }
    assert!(
        accepted > 0,
        "no mutated payload was valid: the test saw no lock"
    );
    assert!(!server.log().contains("panicked"));
}
