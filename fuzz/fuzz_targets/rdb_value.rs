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
use redis_lock_core::record::{decode, encode, RdbFields};
use redis_lock_core::token::MAX_TOKEN;
use redis_lock_core::ManualClock;

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
