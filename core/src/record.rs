//! A lock as it is serialized (RDB files, `DUMP`/`RESTORE`, `MIGRATE`, full
//! syncs): its four fields, read in order, and the bounds every loaded value
//! must meet. A value outside them is refused whole.
//!
//! The server reads the fields through Redis's module IO; [`RdbFields`]
//! reads them from the bytes of the RDB module encoding itself (opcode,
//! then an RDB length or string), so that the decoding and its bounds can be
//! unit tested against real `DUMP` payloads and fuzzed without a server.

use crate::clock::Clock;
use crate::lease;
use crate::token::MAX_TOKEN;

/// The fields of a saved lock, in the order they are saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRecord {
    pub owner: Vec<u8>,
    pub holds: u32,
    pub token: i64,
    /// The lease end, Unix milliseconds.
    pub wall_end_ms: i64,
}

/// Why a saved value was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The input ended or a field had the wrong type.
    Truncated,
    EmptyOwner,
    OwnerTooLong,
    Holds,
    Token,
    LeaseEnd,
}

/// A source of saved fields.
pub trait FieldReader {
    /// A string field; `None` when the input cannot supply one.
    fn string(&mut self) -> Option<Vec<u8>>;
    /// An unsigned field (signed fields are saved as their two's
    /// complement, so they are read through this too).
    fn unsigned(&mut self) -> Option<u64>;
}

/// Reads a lock's fields and checks them like command arguments: an owner
/// of 1..=`max_owner` bytes, at least one hold (at most `u32::MAX`), a
/// token in 1..=[`MAX_TOKEN`], and a lease end no node could have granted
/// beyond now + the longest TTL + the largest clock skew
/// ([`lease::plausible_wall_end`]).
pub fn decode(
    fields: &mut impl FieldReader,
    clock: &impl Clock,
    max_owner: usize,
) -> Result<LockRecord, Refused> {
    let owner = fields.string().ok_or(Refused::Truncated)?;
    let holds = fields.unsigned().ok_or(Refused::Truncated)?;
    let token = fields.unsigned().ok_or(Refused::Truncated)?;
    let wall_end = fields.unsigned().ok_or(Refused::Truncated)?;
    if owner.is_empty() {
        return Err(Refused::EmptyOwner);
    }
    if owner.len() > max_owner {
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
    Ok(LockRecord {
        owner,
        holds,
        token,
        wall_end_ms,
    })
}

/// The RDB module encoding of a lock value with these fields, as the
/// module's `rdb_save` writes it (a string, three unsigned numbers, signed
/// ones as their two's complement, the end-of-value opcode). The fields are
/// not checked: tests and fuzzers build hostile values with it.
pub fn encode_fields(owner: &[u8], holds: u64, token: i64, wall_end_ms: i64) -> Vec<u8> {
    let mut out = vec![5];
    out.extend(rdb_length(owner.len() as u64));
    out.extend_from_slice(owner);
    for n in [
        holds,
        u64::from_ne_bytes(token.to_ne_bytes()),
        u64::from_ne_bytes(wall_end_ms.to_ne_bytes()),
    ] {
        out.push(2);
        out.extend(rdb_length(n));
    }
    out.push(0);
    out
}

/// [`encode_fields`] of a record.
pub fn encode(record: &LockRecord) -> Vec<u8> {
    encode_fields(
        &record.owner,
        u64::from(record.holds),
        record.token,
        record.wall_end_ms,
    )
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

/// The module-value opcodes of the RDB format (`RDB_MODULE_OPCODE_*`).
const OPCODE_EOF: u64 = 0;
const OPCODE_UINT: u64 = 2;
const OPCODE_STRING: u64 = 5;

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

    fn value(owner: &[u8], holds: u64, token: i64, wall_end_ms: i64) -> Vec<u8> {
        encode_fields(owner, holds, token, wall_end_ms)
    }

    fn read(bytes: &[u8]) -> Result<LockRecord, Refused> {
        decode(&mut RdbFields::new(bytes), &clock(), 1 << 20)
    }

    #[test]
    fn a_saved_lock_reads_back_exactly() {
        let bytes = value(b"worker-7", 3, 1_795_000_000_000_000, NOW_MS + 5_000);
        let mut fields = RdbFields::new(&bytes);
        let record = decode(&mut fields, &clock(), 1 << 20).unwrap();
        assert_eq!(
            record,
            LockRecord {
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
                &clock(),
                6
            ),
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
