//! Fuzzes the decoding of a saved lock (`redis_lock_core::record`): the
//! RDB module encoding that RDB files, `DUMP`/`RESTORE`, `MIGRATE` and full
//! syncs carry, read field by field and bounded like command arguments.
//!
//! For any input it checks:
//! - decoding never panics, and never allocates more than the input can
//!   hold (a declared length of 2^64 or an LZF expansion that lies);
//! - an accepted value is within every bound: an owner of 1..=max bytes,
//!   1..=u32::MAX holds, a token in 1..=2^53-1, a plausible lease end;
//! - an accepted value, encoded again the way the module saves it, decodes
//!   to the same value (the decoder reads what the saver writes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use redis_lock_core::lease::plausible_wall_end;
use redis_lock_core::record::{decode, LockRecord, RdbFields};
use redis_lock_core::token::MAX_TOKEN;
use redis_lock_core::ManualClock;

fn len(n: u64) -> Vec<u8> {
    if n < 64 {
        vec![n as u8]
    } else if n < 16_384 {
        vec![0x40 | (n >> 8) as u8, n as u8]
    } else if let Ok(n) = u32::try_from(n) {
        let mut out = vec![0x80];
        out.extend_from_slice(&n.to_be_bytes());
        out
    } else {
        let mut out = vec![0x81];
        out.extend_from_slice(&n.to_be_bytes());
        out
    }
}

/// The module's `rdb_save`: a string, then three unsigned numbers (signed
/// ones as their two's complement), then the end-of-value opcode.
fn encode(record: &LockRecord) -> Vec<u8> {
    let mut out = vec![5];
    out.extend(len(record.owner.len() as u64));
    out.extend_from_slice(&record.owner);
    for n in [
        u64::from(record.holds),
        record.token as u64,
        record.wall_end_ms as u64,
    ] {
        out.push(2);
        out.extend(len(n));
    }
    out.push(0);
    out
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let (head, input) = data.split_at(3);
    let max_owner = 1 + usize::from(u16::from_le_bytes([head[0], head[1]]));
    let now_ms = 1_700_000_000_000 + i64::from(head[2]) * 1_000_000;
    let clock = ManualClock::new(1_000, now_ms);
    let Ok(record) = decode(&mut RdbFields::new(input), &clock, max_owner) else {
        return;
    };
    assert!(!record.owner.is_empty() && record.owner.len() <= max_owner);
    assert!(record.holds >= 1);
    assert!((1..=MAX_TOKEN).contains(&record.token));
    assert!(plausible_wall_end(&clock, record.wall_end_ms));
    let again = encode(&record);
    let mut fields = RdbFields::new(&again);
    assert_eq!(decode(&mut fields, &clock, max_owner), Ok(record));
    assert!(fields.at_end_of_value());
});
