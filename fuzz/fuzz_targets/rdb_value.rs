//! Fuzzes the decoding of a saved lock (`redis_lock_core::record`): the
//! RDB module encoding that RDB files, `DUMP`/`RESTORE`, `MIGRATE` and full
//! syncs carry, read field by field and bounded like command arguments.
//!
//! For any input it checks:
//! - decoding never panics, and never allocates more than the input can
//!   hold (a declared length of 2^64 or an LZF expansion that lies);
//! - an accepted value is within every bound: each holder an owner of
//!   1..=max bytes, 1..=u32::MAX holds, a token in 1..=2^53-1, a plausible
//!   lease end; one holder when exclusive, 1..=the limit or the largest
//!   number allowed when shared, each owner once;
//! - an accepted value, encoded again the way the module saves it, decodes
//!   to the same value (the decoder reads what the saver writes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use redis_lock_core::lease::plausible_wall_end;
use redis_lock_core::record::{decode, encode, Bounds, RdbFields};
use redis_lock_core::token::MAX_TOKEN;
use redis_lock_core::ManualClock;
use redis_lock_core::Mode;

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let (head, input) = data.split_at(5);
    let bounds = Bounds {
        max_owner: 1 + usize::from(u16::from_le_bytes([head[0], head[1]])),
        max_holders: 1 + u32::from(head[3] % 16),
    };
    let version = 1 + u32::from(head[4] % 3);
    let now_ms = 1_700_000_000_000 + i64::from(head[2]) * 1_000_000;
    let clock = ManualClock::new(1_000, now_ms);
    let Ok(record) = decode(&mut RdbFields::new(input), version, &clock, bounds) else {
        return;
    };
    assert!((1..=2).contains(&version), "version {version} accepted");
    let most = match record.mode {
        Mode::Exclusive => {
            assert!(record.limit.is_none());
            1
        }
        Mode::Shared => record.limit.map_or(bounds.max_holders, |n| n.get()),
    };
    assert!(most <= bounds.max_holders);
    assert!(!record.holders.is_empty() && record.holders.len() <= most as usize);
    for (i, holder) in record.holders.iter().enumerate() {
        assert!(!holder.owner.is_empty() && holder.owner.len() <= bounds.max_owner);
        assert!(holder.holds >= 1);
        assert!((1..=MAX_TOKEN).contains(&holder.token));
        assert!(plausible_wall_end(&clock, holder.wall_end_ms));
        assert!(record.holders[..i].iter().all(|h| h.owner != holder.owner));
    }
    let again = encode(&record);
    let mut fields = RdbFields::new(&again);
    assert_eq!(decode(&mut fields, 2, &clock, bounds), Ok(record));
    assert!(fields.at_end_of_value());
});
