//! A lock as it is serialized (RDB files, `DUMP`/`RESTORE`, `MIGRATE`, full
//! syncs): its fields, read in order, and the bounds every loaded value
//! must meet. A value outside them is refused whole.
//!
//! Two encodings exist. Version 1 (the module until the lock family grew
//! several holders) saved one exclusive holder: owner, holds, token, lease
//! end. Version 2 saves the mode, the limit (0: none), the number of
//! holders, then each holder's four fields in grant order. Values are
//! written as version 2; both are read (the module type's encoding version
//! travels with every saved value).
//!
//! The server reads the fields through Redis's module IO; [`RdbFields`]
//! reads them from the bytes of the RDB module encoding itself (opcode,
//! then an RDB length or string), so that the decoding and its bounds can be
//! unit tested against real `DUMP` payloads and fuzzed without a server.

use std::num::NonZeroU32;

use crate::clock::Clock;
use crate::lease;
use crate::lock::Mode;
use crate::token::MAX_TOKEN;

/// The encoding written now.
pub const VERSION: u32 = 2;

/// One holder's saved fields, in the order they are saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderRecord {
    pub owner: Vec<u8>,
    pub holds: u32,
    pub token: i64,
    /// The lease end, Unix milliseconds.
    pub wall_end_ms: i64,
}

/// A saved lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRecord {
    pub mode: Mode,
    pub limit: Option<NonZeroU32>,
    /// In grant order.
    pub holders: Vec<HolderRecord>,
}

impl LockRecord {
    /// An exclusive lock with one holder.
    pub fn exclusive(holder: HolderRecord) -> Self {
        LockRecord {
            mode: Mode::Exclusive,
            limit: None,
            holders: vec![holder],
        }
    }
}

/// Why a saved value was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The input ended or a field had the wrong type.
    Truncated,
    /// An encoding version this module does not know.
    Version,
    EmptyOwner,
    OwnerTooLong,
    Holds,
    Token,
    LeaseEnd,
    /// A mode other than exclusive (0) or shared (1).
    Mode,
    /// A limit on an exclusive lock, or above the largest allowed.
    Limit,
    /// No holder, more than one in exclusive mode, more than the limit or
    /// the largest number allowed, or an owner twice.
    Holders,
}

/// How large a loaded value may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub max_owner: usize,
    pub max_holders: u32,
}

/// A source of saved fields.
pub trait FieldReader {
    /// A string field; `None` when the input cannot supply one.
    fn string(&mut self) -> Option<Vec<u8>>;
    /// An unsigned field (signed fields are saved as their two's
    /// complement, so they are read through this too).
    fn unsigned(&mut self) -> Option<u64>;
}

/// Reads a lock saved with encoding `version` and checks it like command
/// arguments: each holder an owner of 1..=`max_owner` bytes, at least one
/// hold (at most `u32::MAX`), a token in 1..=[`MAX_TOKEN`], and a lease end
/// no node could have granted beyond now + the longest TTL + the largest
/// clock skew ([`lease::plausible_wall_end`]); one holder when exclusive,
/// 1..=`max_holders` (and no more than the limit) when shared, each owner
/// once.
pub fn decode(
    fields: &mut impl FieldReader,
    version: u32,
    clock: &impl Clock,
    bounds: Bounds,
) -> Result<LockRecord, Refused> {
    match version {
        1 => Ok(LockRecord::exclusive(decode_holder(fields, clock, bounds)?)),
        2 => decode_v2(fields, clock, bounds),
        _ => Err(Refused::Version),
    }
}

fn decode_v2(
    fields: &mut impl FieldReader,
    clock: &impl Clock,
    bounds: Bounds,
) -> Result<LockRecord, Refused> {
    let mode = fields.unsigned().ok_or(Refused::Truncated)?;
    let limit = fields.unsigned().ok_or(Refused::Truncated)?;
    let count = fields.unsigned().ok_or(Refused::Truncated)?;
    let mode = match mode {
        0 => Mode::Exclusive,
        1 => Mode::Shared,
        _ => return Err(Refused::Mode),
    };
    let limit = match (mode, limit) {
        (_, 0) => None,
        (Mode::Shared, n) if n <= u64::from(bounds.max_holders) => {
            NonZeroU32::new(u32::try_from(n).map_err(|_| Refused::Limit)?)
        }
        _ => return Err(Refused::Limit),
    };
    let most = match mode {
        Mode::Exclusive => 1,
        Mode::Shared => limit.map_or(bounds.max_holders, NonZeroU32::get),
    };
    if count == 0 || count > u64::from(most) {
        return Err(Refused::Holders);
    }
    let mut holders: Vec<HolderRecord> = Vec::new();
    for _ in 0..count {
        let holder = decode_holder(fields, clock, bounds)?;
        if holders.iter().any(|h| h.owner == holder.owner) {
            return Err(Refused::Holders);
        }
        holders.push(holder);
    }
    Ok(LockRecord {
        mode,
        limit,
        holders,
    })
}

fn decode_holder(
    fields: &mut impl FieldReader,
    clock: &impl Clock,
    bounds: Bounds,
) -> Result<HolderRecord, Refused> {
    let owner = fields.string().ok_or(Refused::Truncated)?;
    let holds = fields.unsigned().ok_or(Refused::Truncated)?;
    let token = fields.unsigned().ok_or(Refused::Truncated)?;
    let wall_end = fields.unsigned().ok_or(Refused::Truncated)?;
    if owner.is_empty() {
        return Err(Refused::EmptyOwner);
    }
    if owner.len() > bounds.max_owner {
        return Err(Refused::OwnerTooLong);
    }
    let holds = u32::try_from(holds)
        .ok()
        .filter(|h| *h > 0)
        .ok_or(Refused::Holds)?;
    let token = i64::from_ne_bytes(token.to_ne_bytes());
    if !(1..=MAX_TOKEN).contains(&token) {
        return Err(Refused::Token);
    }
    let wall_end_ms = i64::from_ne_bytes(wall_end.to_ne_bytes());
    if !lease::plausible_wall_end(clock, wall_end_ms) {
        return Err(Refused::LeaseEnd);
    }
    Ok(HolderRecord {
        owner,
        holds,
        token,
        wall_end_ms,
    })
}

/// The module-value opcodes of the RDB format (`RDB_MODULE_OPCODE_*`).
const OPCODE_EOF: u64 = 0;
const OPCODE_UINT: u64 = 2;
const OPCODE_STRING: u64 = 5;

fn push_unsigned(out: &mut Vec<u8>, n: u64) {
    out.push(OPCODE_UINT as u8);
    out.extend(rdb_length(n));
}

fn push_holder(out: &mut Vec<u8>, owner: &[u8], holds: u64, token: i64, wall_end_ms: i64) {
    out.push(OPCODE_STRING as u8);
    out.extend(rdb_length(owner.len() as u64));
    out.extend_from_slice(owner);
    push_unsigned(out, holds);
    push_unsigned(out, u64::from_ne_bytes(token.to_ne_bytes()));
    push_unsigned(out, u64::from_ne_bytes(wall_end_ms.to_ne_bytes()));
}

/// The version-1 RDB module encoding of an exclusive lock with these
/// fields (a string, three unsigned numbers, signed ones as their two's
/// complement, the end-of-value opcode), as the module saved it before
/// version 2. The fields are not checked: tests build hostile values.
pub fn encode_v1_fields(owner: &[u8], holds: u64, token: i64, wall_end_ms: i64) -> Vec<u8> {
    let mut out = Vec::new();
    push_holder(&mut out, owner, holds, token, wall_end_ms);
    out.push(OPCODE_EOF as u8);
    out
}

/// The RDB module encoding (version 2) of an exclusive lock with these
/// fields, as the module's `rdb_save` writes it. The fields are not
/// checked: tests and fuzzers build hostile values with it.
pub fn encode_fields(owner: &[u8], holds: u64, token: i64, wall_end_ms: i64) -> Vec<u8> {
    let mut out = Vec::new();
    for n in [0, 0, 1] {
        push_unsigned(&mut out, n);
    }
    push_holder(&mut out, owner, holds, token, wall_end_ms);
    out.push(OPCODE_EOF as u8);
    out
}

/// The RDB module encoding (version 2) of a record.
pub fn encode(record: &LockRecord) -> Vec<u8> {
    let mut out = Vec::new();
    let mode = match record.mode {
        Mode::Exclusive => 0,
        Mode::Shared => 1,
    };
    let limit = record.limit.map_or(0, |n| u64::from(n.get()));
    for n in [mode, limit, record.holders.len() as u64] {
        push_unsigned(&mut out, n);
    }
    for h in &record.holders {
        push_holder(
            &mut out,
            &h.owner,
            u64::from(h.holds),
            h.token,
            h.wall_end_ms,
        );
    }
    out.push(OPCODE_EOF as u8);
    out
}

/// An RDB length (`rdbSaveLen`).
pub fn rdb_length(n: u64) -> Vec<u8> {
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

/// Fields read from the RDB module encoding of a value (what follows the
/// type byte and the module type id in a `DUMP` payload).
pub struct RdbFields<'a> {
    input: &'a [u8],
}

impl<'a> RdbFields<'a> {
    pub fn new(input: &'a [u8]) -> Self {
        RdbFields { input }
    }

    /// Whether what is left starts with the end-of-value opcode, as Redis
    /// checks after the type's loader returns.
    pub fn at_end_of_value(&mut self) -> bool {
        self.length() == Some(Length::Plain(OPCODE_EOF))
    }

    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.input.split_first()?;
        self.input = rest;
        Some(first)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.input.len() {
            return None;
        }
        let (taken, rest) = self.input.split_at(n);
        self.input = rest;
        Some(taken)
    }

    fn be(&mut self, n: usize) -> Option<u64> {
        Some(
            self.take(n)?
                .iter()
                .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)),
        )
    }

    fn le(&mut self, n: usize) -> Option<u64> {
        Some(
            self.take(n)?
                .iter()
                .rev()
                .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)),
        )
    }

    /// An RDB length (`rdbLoadLen`), or the tag of a special string
    /// encoding.
    fn length(&mut self) -> Option<Length> {
        let first = self.byte()?;
        match first >> 6 {
            0 => Some(Length::Plain(u64::from(first & 0x3f))),
            1 => {
                let second = self.byte()?;
                Some(Length::Plain(
                    (u64::from(first & 0x3f) << 8) | u64::from(second),
                ))
            }
            2 => match first {
                0x80 => self.be(4).map(Length::Plain),
                0x81 => self.be(8).map(Length::Plain),
                _ => None,
            },
            _ => Some(Length::Encoded(first & 0x3f)),
        }
    }

    /// A string (`rdbGenericLoadStringObject`): raw, an integer in 1, 2 or
    /// 4 bytes, or LZF-compressed.
    fn rdb_string(&mut self) -> Option<Vec<u8>> {
        match self.length()? {
            Length::Plain(len) => Some(self.take(usize::try_from(len).ok()?)?.to_vec()),
            Length::Encoded(0) => Some((self.le(1)? as u8 as i8).to_string().into_bytes()),
            Length::Encoded(1) => Some((self.le(2)? as u16 as i16).to_string().into_bytes()),
            Length::Encoded(2) => Some((self.le(4)? as u32 as i32).to_string().into_bytes()),
            Length::Encoded(3) => {
                let Length::Plain(compressed) = self.length()? else {
                    return None;
                };
                let Length::Plain(len) = self.length()? else {
                    return None;
                };
                let compressed = self.take(usize::try_from(compressed).ok()?)?;
                lzf_decompress(compressed, usize::try_from(len).ok()?)
            }
            Length::Encoded(_) => None,
        }
    }

    fn opcode(&mut self, expected: u64) -> Option<()> {
        (self.length()? == Length::Plain(expected)).then_some(())
    }
}

impl FieldReader for RdbFields<'_> {
    fn string(&mut self) -> Option<Vec<u8>> {
        self.opcode(OPCODE_STRING)?;
        self.rdb_string()
    }

    fn unsigned(&mut self) -> Option<u64> {
        self.opcode(OPCODE_UINT)?;
        match self.length()? {
            Length::Plain(value) => Some(value),
            Length::Encoded(_) => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Length {
    Plain(u64),
    /// `11xxxxxx`: a special string encoding.
    Encoded(u8),
}

/// LZF decompression (as `lzf_decompress`) into exactly `len` bytes; `None`
/// on malformed input. The output is never allowed to grow past `len`, so
/// a hostile length costs at most the input it claims to expand.
fn lzf_decompress(input: &[u8], len: usize) -> Option<Vec<u8>> {
    // LZF expands at most about 256x (a 3-byte back reference of 264
    // bytes): a declared length beyond that is a lie, refused before any
    // allocation.
    if len > input.len().saturating_mul(264) {
        return None;
    }
    let mut out: Vec<u8> = Vec::with_capacity(len);
    let mut at = 0;
    while at < input.len() {
        let control = usize::from(*input.get(at)?);
        at += 1;
        if control < 32 {
            let run = control + 1;
            let literal = input.get(at..at + run)?;
            if out.len() + run > len {
                return None;
            }
            out.extend_from_slice(literal);
            at += run;
        } else {
            let mut run = control >> 5;
            if run == 7 {
                run += usize::from(*input.get(at)?);
                at += 1;
            }
            run += 2;
            let back = ((control & 0x1f) << 8) + usize::from(*input.get(at)?) + 1;
            at += 1;
            if back > out.len() || out.len() + run > len {
                return None;
            }
            let from = out.len() - back;
            for i in 0..run {
                let byte = *out.get(from + i)?;
                out.push(byte);
            }
        }
    }
    (out.len() == len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const NOW_MS: i64 = 1_700_000_000_000;

    fn clock() -> ManualClock {
        ManualClock::new(1_000, NOW_MS)
    }

    fn len(n: u64) -> Vec<u8> {
        rdb_length(n)
    }

    const BOUNDS: Bounds = Bounds {
        max_owner: 1 << 20,
        max_holders: 10_000,
    };

    /// A version-1 value (the holder checks are the same in version 2).
    fn value(owner: &[u8], holds: u64, token: i64, wall_end_ms: i64) -> Vec<u8> {
        encode_v1_fields(owner, holds, token, wall_end_ms)
    }

    fn read(bytes: &[u8]) -> Result<HolderRecord, Refused> {
        let record = decode(&mut RdbFields::new(bytes), 1, &clock(), BOUNDS)?;
        assert_eq!(
            (record.mode, record.limit, record.holders.len()),
            (Mode::Exclusive, None, 1)
        );
        Ok(record.holders[0].clone())
    }

    fn read_v2(bytes: &[u8], max_holders: u32) -> Result<LockRecord, Refused> {
        let bounds = Bounds {
            max_holders,
            ..BOUNDS
        };
        decode(&mut RdbFields::new(bytes), 2, &clock(), bounds)
    }

    fn holder(owner: &[u8]) -> HolderRecord {
        HolderRecord {
            owner: owner.to_vec(),
            holds: 1,
            token: 7,
            wall_end_ms: NOW_MS,
        }
    }

    #[test]
    fn version_2_reads_back_every_mode_and_holder() {
        let exclusive = LockRecord::exclusive(holder(b"a"));
        let bytes = encode(&exclusive);
        assert_eq!(bytes, encode_fields(b"a", 1, 7, NOW_MS));
        let mut fields = RdbFields::new(&bytes);
        assert_eq!(decode(&mut fields, 2, &clock(), BOUNDS), Ok(exclusive));
        assert!(fields.at_end_of_value());
        let shared = LockRecord {
            mode: Mode::Shared,
            limit: NonZeroU32::new(3),
            holders: vec![holder(b"a"), holder(b"b"), holder(b"c")],
        };
        assert_eq!(read_v2(&encode(&shared), 10), Ok(shared.clone()));
        let unlimited = LockRecord {
            limit: None,
            ..shared
        };
        assert_eq!(read_v2(&encode(&unlimited), 3), Ok(unlimited.clone()));
        assert_eq!(read_v2(&encode(&unlimited), 2), Err(Refused::Holders));
        assert_eq!(
            decode(
                &mut RdbFields::new(&encode(&unlimited)),
                3,
                &clock(),
                BOUNDS
            ),
            Err(Refused::Version)
        );
    }

    #[test]
    fn version_2_bounds_the_mode_the_limit_and_the_holders() {
        let header = |mode: u64, limit: u64, count: u64| {
            let mut out = Vec::new();
            for n in [mode, limit, count] {
                push_unsigned(&mut out, n);
            }
            out
        };
        let with = |head: Vec<u8>, owners: &[&[u8]]| {
            let mut out = head;
            for owner in owners {
                push_holder(&mut out, owner, 1, 7, NOW_MS);
            }
            out.push(0);
            out
        };
        assert_eq!(
            read_v2(&with(header(2, 0, 1), &[b"a"]), 10),
            Err(Refused::Mode)
        );
        assert_eq!(
            read_v2(&with(header(0, 1, 1), &[b"a"]), 10),
            Err(Refused::Limit)
        );
        assert_eq!(
            read_v2(&with(header(1, 11, 1), &[b"a"]), 10),
            Err(Refused::Limit)
        );
        assert_eq!(
            read_v2(&with(header(1, 1 << 40, 1), &[b"a"]), u32::MAX),
            Err(Refused::Limit)
        );
        assert_eq!(
            read_v2(&with(header(0, 0, 0), &[]), 10),
            Err(Refused::Holders)
        );
        assert_eq!(
            read_v2(&with(header(0, 0, 2), &[b"a", b"b"]), 10),
            Err(Refused::Holders)
        );
        assert_eq!(
            read_v2(&with(header(1, 1, 2), &[b"a", b"b"]), 10),
            Err(Refused::Holders)
        );
        assert_eq!(
            read_v2(&with(header(1, 0, 2), &[b"a", b"a"]), 10),
            Err(Refused::Holders),
            "an owner twice"
        );
        // A count the input cannot hold is refused when the input ends,
        // not allocated up front.
        assert_eq!(
            read_v2(&with(header(1, 0, 10_000), &[b"a"]), 10_000),
            Err(Refused::Truncated)
        );
        assert!(read_v2(&with(header(1, 0, 2), &[b"a", b"b"]), 10).is_ok());
    }

    #[test]
    fn a_saved_lock_reads_back_exactly() {
        let bytes = value(b"worker-7", 3, 1_795_000_000_000_000, NOW_MS + 5_000);
        let mut fields = RdbFields::new(&bytes);
        let record = decode(&mut fields, 1, &clock(), BOUNDS).unwrap();
        assert_eq!(
            record.holders[0],
            HolderRecord {
                owner: b"worker-7".to_vec(),
                holds: 3,
                token: 1_795_000_000_000_000,
                wall_end_ms: NOW_MS + 5_000,
            }
        );
        assert!(fields.at_end_of_value());
    }

    #[test]
    fn every_field_is_bounded() {
        let end = NOW_MS + 5_000;
        assert_eq!(read(&value(b"", 1, 5, end)), Err(Refused::EmptyOwner));
        assert_eq!(
            decode(
                &mut RdbFields::new(&value(b"toolong", 1, 5, end)),
                1,
                &clock(),
                Bounds {
                    max_owner: 6,
                    ..BOUNDS
                }
            )
            .map(|_| ()),
            Err(Refused::OwnerTooLong)
        );
        assert_eq!(read(&value(b"o", 0, 5, end)), Err(Refused::Holds));
        assert_eq!(
            read(&value(b"o", u64::from(u32::MAX) + 1, 5, end)),
            Err(Refused::Holds)
        );
        assert_eq!(read(&value(b"o", 1, 0, end)), Err(Refused::Token));
        assert_eq!(read(&value(b"o", 1, -1, end)), Err(Refused::Token));
        assert_eq!(
            read(&value(b"o", 1, MAX_TOKEN + 1, end)),
            Err(Refused::Token)
        );
        assert!(read(&value(b"o", 1, MAX_TOKEN, end)).is_ok());
        assert_eq!(read(&value(b"o", 1, 5, i64::MAX)), Err(Refused::LeaseEnd));
        // An end in the past is a lease that ended while the node was down.
        assert!(read(&value(b"o", 1, 5, i64::MIN)).is_ok());
    }

    #[test]
    fn a_cut_or_retyped_value_is_truncated() {
        let bytes = value(b"owner", 1, 5, NOW_MS);
        for cut in 0..bytes.len() - 1 {
            assert_eq!(read(&bytes[..cut]), Err(Refused::Truncated), "cut at {cut}");
        }
        let mut retyped = bytes.clone();
        retyped[0] = 2;
        assert_eq!(read(&retyped), Err(Refused::Truncated));
    }

    #[test]
    fn integer_encoded_and_compressed_owners_are_read_as_redis_does() {
        // "-3" as an 8-bit integer, "1000" as 16-bit, "-100000" as 32-bit.
        for (encoded, owner) in [
            (vec![0xc0, 0xfd], &b"-3"[..]),
            (vec![0xc1, 0xe8, 0x03], b"1000"),
            (vec![0xc2, 0x60, 0x79, 0xfe, 0xff], b"-100000"),
        ] {
            let mut bytes = vec![5];
            bytes.extend(encoded);
            for n in [1u64, 9, NOW_MS as u64] {
                bytes.push(2);
                bytes.extend(len(n));
            }
            assert_eq!(read(&bytes).unwrap().owner, owner);
        }
        // LZF: a literal "ab" then a back reference repeating it 3 more
        // times: "abababab".
        let compressed = [0x01, b'a', b'b', 0x80, 0x01];
        let mut bytes = vec![5, 0xc3];
        bytes.extend(len(compressed.len() as u64));
        bytes.extend(len(8));
        bytes.extend_from_slice(&compressed);
        for n in [1u64, 9, NOW_MS as u64] {
            bytes.push(2);
            bytes.extend(len(n));
        }
        assert_eq!(read(&bytes).unwrap().owner, b"abababab");
    }

    #[test]
    fn lzf_refuses_lies_about_its_length_without_allocating_them() {
        assert_eq!(lzf_decompress(&[0x01, b'a', b'b'], 2), Some(b"ab".to_vec()));
        assert_eq!(lzf_decompress(&[0x01, b'a', b'b'], 3), None);
        assert_eq!(lzf_decompress(&[0x01, b'a', b'b'], usize::MAX), None);
        // A back reference before the start of the output.
        assert_eq!(lzf_decompress(&[0x20, 0x05], 3), None);
        assert_eq!(lzf_decompress(&[0x05, b'a'], 6), None);
    }

    #[test]
    fn a_huge_declared_string_length_is_refused_not_allocated() {
        let mut bytes = vec![5, 0x81];
        bytes.extend_from_slice(&u64::MAX.to_be_bytes());
        assert_eq!(read(&bytes), Err(Refused::Truncated));
    }
}
