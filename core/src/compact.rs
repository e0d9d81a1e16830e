//! The compact form of the commonest lock: exclusive, one holder, and an
//! owner that is a UUID or a hex string in text (what Redisson, redsync's
//! and node-redlock's users, and our own client send) or at most 18 bytes.
//! Such a lock fits 48 bytes instead of [`Lock`]'s 80: an owner in text is
//! kept as the bytes it spells (a 36-byte UUID in 16), as Redis keeps a
//! number-like string as an integer. The module stores a lock in this form
//! whenever it fits and gives the core a [`Lock`] made from it; the bytes an
//! owner is compared, replied, replicated and saved as are always the ones
//! the client sent, because the form is used only when it gives them back
//! exactly ([`Compact::to_lock`] of [`Compact::of`] is the same lock).

use crate::lock::{Lock, Mode, TEXT_OWNER};

/// Owner bytes kept in the compact form.
const OWNER_BYTES: usize = 18;

const TEXT_OWNER_LEN: u8 = TEXT_OWNER as u8;

/// How the owner's bytes spell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spelling {
    /// The bytes themselves (up to 18).
    Raw,
    /// Lowercase hex digits, two per byte.
    Hex,
    /// Uppercase hex digits, two per byte.
    HexUpper,
    /// A UUID in its canonical text form (8-4-4-4-12), lowercase.
    Uuid,
    /// The same, uppercase.
    UuidUpper,
}

/// Where a UUID's text has its dashes.
const UUID_DASHES: [usize; 4] = [8, 13, 18, 23];

/// An exclusive lock with one holder in 48 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compact {
    token: i64,
    deadline: u64,
    expiry_id: u64,
    holds: u32,
    spelling: Spelling,
    len: u8,
    owner: [u8; OWNER_BYTES],
}

/// A compact lock's owner as the client sent it (36 bytes at most), kept
/// in a fixed buffer: no allocation, no copy of a variable length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerText {
    len: u8,
    bytes: [u8; TEXT_OWNER],
}

impl OwnerText {
    /// `owner`, if it is at most 36 bytes (every owner [`Compact::of`]
    /// takes): a copy, cheaper than spelling it out again.
    pub fn of(owner: &[u8]) -> Option<OwnerText> {
        let (len, bytes) = crate::inline::pack::<TEXT_OWNER>(owner)?;
        Some(OwnerText { len, bytes })
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[])
    }
}

impl Compact {
    /// `lock` in the compact form, if it has that shape.
    pub fn of(lock: &Lock) -> Option<Compact> {
        if lock.mode() != Mode::Exclusive || lock.limit().is_some() {
            return None;
        }
        let [holder] = lock.holders() else {
            return None;
        };
        let (spelling, len, owner) = pack_owner(holder.owner())?;
        Some(Compact {
            token: holder.token(),
            deadline: holder.deadline(),
            expiry_id: holder.expiry_id(),
            holds: holder.holds(),
            spelling,
            len,
            owner,
        })
    }

    /// Takes in `after`, a change of the lock whose owner was `owner`
    /// (what [`Compact::to_lock`] gave); `false`, changing nothing, when
    /// `after` no longer has the compact shape. The owner is packed again
    /// only if it changed: a hold that only changes counts, tokens, leases
    /// and index entries (every command on an exclusive lock) costs a
    /// comparison and four stores.
    pub fn update(&mut self, owner: &OwnerText, after: &Lock) -> bool {
        if after.mode() == Mode::Exclusive && after.limit().is_none() {
            if let [now] = after.holders() {
                if now.owner_is_text(owner.len, &owner.bytes) {
                    let fields = (now.token(), now.deadline(), now.expiry_id(), now.holds());
                    // A command that changed nothing (`LOCK.FENCE`) leaves
                    // the value's cache line clean.
                    if fields != (self.token, self.deadline, self.expiry_id, self.holds) {
                        (self.token, self.deadline, self.expiry_id, self.holds) = fields;
                    }
                    return true;
                }
            }
        }
        match Compact::of(after) {
            Some(fresh) => {
                *self = fresh;
                true
            }
            None => false,
        }
    }

    /// The holder's entry in the lease index (read without spelling the
    /// lock out).
    pub fn expiry_id(&self) -> u64 {
        self.expiry_id
    }

    /// The lock this stands for.
    pub fn to_lock(&self) -> Lock {
        self.decode().0
    }

    /// The lock this stands for, and its owner spelled out apart (what
    /// [`Compact::update`] compares the changed lock's owner with).
    pub fn decode(&self) -> (Lock, OwnerText) {
        let mut lock = Lock::exclusive(&[], 0, 0, 0);
        let text = self.decode_into(&mut lock);
        (lock, text)
    }

    /// [`Compact::decode`] into `lock`, reusing it; the owner as read.
    pub fn decode_into(&self, lock: &mut Lock) -> OwnerText {
        let text = self.owner_text();
        lock.set_exclusive_from_text(
            text.len,
            &text.bytes,
            self.holds,
            self.token,
            self.deadline,
            self.expiry_id,
        );
        text
    }

    /// The owner's bytes, spelled out when they are text. (On every command
    /// that reads a compact lock: no search, no branch per digit, and only
    /// fixed-size copies.)
    pub fn owner_text(&self) -> OwnerText {
        let mut text = OwnerText {
            len: self.len,
            bytes: [0; TEXT_OWNER],
        };
        let alpha = match self.spelling {
            Spelling::Raw => {
                if let Some(raw) = text.bytes.first_chunk_mut::<OWNER_BYTES>() {
                    *raw = self.owner;
                }
                return text;
            }
            Spelling::Hex | Spelling::Uuid => b'a',
            Spelling::HexUpper | Spelling::UuidUpper => b'A',
        };
        // Sixteen digits at a time; the owner's unused bytes are zeros.
        let [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r] = self.owner;
        let first = hex16([a, b, c, d, e, f, g, h], alpha);
        let second = hex16([i, j, k, l, m, n, o, p], alpha);
        let third = hex16([q, r, 0, 0, 0, 0, 0, 0], alpha);
        let mut put = |at: usize, digits: &[u8]| {
            if let Some(to) = text.bytes.get_mut(at..at + digits.len()) {
                to.copy_from_slice(digits);
            }
        };
        match self.spelling {
            Spelling::Uuid | Spelling::UuidUpper => {
                // 8-4-4-4-12.
                put(0, &first[..8]);
                put(9, &first[8..12]);
                put(14, &first[12..]);
                put(19, &second[..4]);
                put(24, &second[4..]);
                for at in UUID_DASHES {
                    put(at, b"-");
                }
                text.len = TEXT_OWNER_LEN;
            }
            _ => {
                put(0, &first);
                put(16, &second);
                put(32, &third[..4]);
                text.len = self.len.saturating_mul(2);
                // Zeros after the owner, as `OwnerText` keeps it.
                for byte in text.bytes.iter_mut().skip(usize::from(text.len)) {
                    *byte = 0;
                }
            }
        }
        text
    }

    /// Bytes this lock owns, for `MEMORY USAGE`.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
    }
}

/// Eight bytes as sixteen hex digits, with `alpha` (`a` or `A`) for ten:
/// a few word operations instead of a table lookup per digit (this runs
/// on every command that reads a compact lock).
fn hex16(bytes: [u8; 8], alpha: u8) -> [u8; 16] {
    let word = u64::from_be_bytes(bytes);
    let [high, low] = [word >> 32, word & 0xffff_ffff].map(|half| {
        // One nibble per byte, the most significant first.
        let half = (half | (half << 16)) & 0x0000_ffff_0000_ffff;
        let half = (half | (half << 8)) & 0x00ff_00ff_00ff_00ff;
        let nibbles = (half | (half << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
        // 1 in each byte whose nibble is ten or more.
        let letters = ((nibbles + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
        let digits = nibbles + 0x3030_3030_3030_3030;
        (digits + letters * u64::from(alpha - b'0' - 10)).to_be_bytes()
    });
    let mut digits = [0; 16];
    let (to_high, to_low) = digits.split_at_mut(8);
    to_high.copy_from_slice(&high);
    to_low.copy_from_slice(&low);
    digits
}

/// The bytes a UUID spells.
const UUID_BYTES: usize = 16;

/// A hex id's text padded to whole words of eight digits (36 at most).
const HEX_PADDED: usize = 40;

/// Per byte of `word` (each below 0x80): 0x80 where the byte is in
/// `lo..=hi` (1 ≤ `lo` ≤ `hi` < 0x80), else 0. No byte's sum carries into
/// the next: a byte below 0x80 plus at most 0x7f stays below 0x100.
const fn in_range(word: u64, lo: u8, hi: u8) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let at_least = word.wrapping_add(ONES * (0x80 - lo as u64));
    let above = word.wrapping_add(ONES * (0x7f - hi as u64));
    at_least & !above & (ONES * 0x80)
}

/// Eight hex digits (a little-endian word of their text) as the four bytes
/// they spell, and whether any is a lowercase and any an uppercase letter;
/// `None` if one is not a hex digit.
fn hex8(word: u64) -> Option<([u8; 4], bool, bool)> {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    if word & HIGH != 0 {
        return None;
    }
    let digit = in_range(word, b'0', b'9');
    let upper = in_range(word, b'A', b'F');
    let lower = in_range(word, b'a', b'f');
    if digit | upper | lower != HIGH {
        return None;
    }
    // A digit's value is its low four bits, a letter's those plus 9.
    let values = (word & 0x0f0f_0f0f_0f0f_0f0f) + ((upper | lower) >> 7) * 9;
    // Byte 2k (first in the text) is a pair's high digit, 2k+1 its low.
    let high = values & 0x00ff_00ff_00ff_00ff;
    let low = (values >> 8) & 0x00ff_00ff_00ff_00ff;
    let mut pairs = (high << 4) | low;
    pairs = (pairs | (pairs >> 8)) & 0x0000_ffff_0000_ffff;
    pairs = (pairs | (pairs >> 16)) & 0x0000_0000_ffff_ffff;
    let bytes = (pairs as u32).to_le_bytes();
    Some((bytes, lower != 0, upper != 0))
}

/// Hex digits, eight to a little-endian word, as the bytes they spell
/// into `out` (four a word), and whether they have lowercase and
/// uppercase letters; `None` if one is not a hex digit.
fn hex_words(words: &[u64], out: &mut [u8]) -> Option<(bool, bool)> {
    let (mut lower, mut upper) = (false, false);
    for (four_out, &word) in out.chunks_exact_mut(4).zip(words) {
        let (four, has_lower, has_upper) = hex8(word)?;
        four_out.copy_from_slice(&four);
        lower |= has_lower;
        upper |= has_upper;
    }
    Some((lower, upper))
}

/// The little-endian word of the eight bytes of `text` from `from`.
fn word_at(text: &[u8], from: usize) -> Option<u64> {
    let bytes = text.get(from..from.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// A UUID's text (dashes at their places) as the 16 bytes it spells, and
/// whether it has lowercase and uppercase letters; `None` if a digit is
/// not a hex digit. Eight digits at a time (`LOCK.ACQUIRE` does this for
/// every new lock with a UUID owner).
fn uuid_bytes(text: &[u8; TEXT_OWNER]) -> Option<([u8; UUID_BYTES], bool, bool)> {
    // The digits as four words: 8 | 4 + 4 | 4 + 4 | 8 (the dashes at 8,
    // 13, 18 and 23 left out).
    let half = |from: usize| -> u64 {
        let mut word = [0u8; 4];
        word.copy_from_slice(&text[from..from + 4]);
        u64::from(u32::from_le_bytes(word))
    };
    let words = [
        word_at(text, 0)?,
        half(9) | (half(14) << 32),
        half(19) | (half(24) << 32),
        word_at(text, 28)?,
    ];
    let mut bytes = [0u8; UUID_BYTES];
    let (lower, upper) = hex_words(&words, &mut bytes)?;
    Some((bytes, lower, upper))
}

/// `owner` as `(spelling, length, bytes)`, if the compact form holds it.
/// It runs for every lock made: eight digits at a time ([`hex8`]), at
/// fixed places for a UUID, with no branch per digit.
fn pack_owner(owner: &[u8]) -> Option<(Spelling, u8, [u8; OWNER_BYTES])> {
    if let Some((len, bytes)) = crate::inline::pack::<OWNER_BYTES>(owner) {
        return Some((Spelling::Raw, len, bytes));
    }
    if owner.len() > TEXT_OWNER || owner.len() % 2 != 0 {
        return None;
    }
    // An owner that is neither a UUID nor a hex id (`host:pid:thread`, a
    // name) nearly always shows it in its first two bytes, which are
    // hex digits in both: the scan below runs only for likely ones.
    if owner.iter().take(2).any(|byte| !byte.is_ascii_hexdigit()) {
        return None;
    }
    // A UUID, the commonest owner: eight digits at a time ([`uuid_bytes`]).
    if let Some(text) = <&[u8; TEXT_OWNER]>::try_from(owner)
        .ok()
        .filter(|text| UUID_DASHES.iter().all(|&at| text[at] == b'-'))
    {
        let (digits, lower, upper) = uuid_bytes(text)?;
        let spelling = match (lower, upper) {
            (true, true) => return None,
            (_, false) => Spelling::Uuid,
            (false, true) => Spelling::UuidUpper,
        };
        let mut bytes = [0; OWNER_BYTES];
        bytes[..UUID_BYTES].copy_from_slice(&digits);
        return Some((spelling, UUID_BYTES as u8, bytes));
    }
    // A hex id: eight digits at a time too, its text padded with `0`
    // digits (which spell zero bytes) to whole words.
    let mut text = [b'0'; HEX_PADDED];
    text.get_mut(..owner.len())?.copy_from_slice(owner);
    // (Every word is inside the text; a missing one would be 0, no digit.)
    let words = [0, 8, 16, 24, 32].map(|from| word_at(&text, from).unwrap_or(0));
    let mut decoded = [0u8; HEX_PADDED / 2];
    let spelling = match hex_words(&words, &mut decoded)? {
        (true, true) => return None,
        (_, false) => Spelling::Hex,
        (false, true) => Spelling::HexUpper,
    };
    let mut bytes = [0; OWNER_BYTES];
    bytes.copy_from_slice(decoded.get(..OWNER_BYTES)?);
    Some((spelling, u8::try_from(owner.len() / 2).ok()?, bytes))
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::Holder;

    fn lock(owner: &[u8]) -> Lock {
        let mut lock = Lock::exclusive(owner, 3, 9_007_199_254_740_991, u64::MAX - 1);
        lock.holders_mut()[0].set_expiry_id(0x1234_5678_9abc_def0);
        lock
    }

    /// The owners clients send, and their near misses.
    const OWNERS: &[&[u8]] = &[
        b"",
        b"a",
        b"owner-1",
        b"exactly-18-bytes!!",
        b"7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c",
        b"7F3C1A2E-9B4D-4E8F-A6C5-0D1E2F3A4B5C",
        b"01234567-8901-2345-6789-012345678901",
        b"0123456789abcdef0123456789abcdef",
        b"0123456789ABCDEF0123456789ABCDEF",
        b"0123456789abcdef0123456789abcdef0123",
        b"0123456789abcdef0123456789abcdef01234",
        b"0123456789abcdef0123456789abcdef012",
        b"7f3c1a2e-9B4d-4e8f-a6c5-0d1e2f3a4b5c",
        b"7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5g",
        b"7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5",
        b"7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c:1",
        b"7f3c1a2e_9b4d_4e8f_a6c5_0d1e2f3a4b5c",
        b"-7f3c1a2e9b4d4e8fa6c50d1e2f3a4b5c---",
        b"8743c9c0-0795-4907-87fd-6c719a6b4586:57",
        b"qP2wXm9sLk3JtR7yVb1nZc==",
        b"not hex at all, but more than 18 bytes",
    ];

    #[test]
    fn every_owner_reads_back_exactly_or_is_not_compacted() {
        for owner in OWNERS {
            let original = lock(owner);
            match Compact::of(&original) {
                Some(compact) => assert_eq!(
                    compact.to_lock(),
                    original,
                    "{:?}",
                    String::from_utf8_lossy(owner)
                ),
                None => assert!(owner.len() > OWNER_BYTES, "{owner:?} was not compacted"),
            }
        }
    }

    #[test]
    fn uuids_and_hex_ids_are_compacted() {
        for owner in [
            &b"7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c"[..],
            b"7F3C1A2E-9B4D-4E8F-A6C5-0D1E2F3A4B5C",
            b"0123456789abcdef0123456789abcdef",
            b"0123456789abcdef0123456789abcdef0123",
        ] {
            assert!(Compact::of(&lock(owner)).is_some(), "{owner:?}");
        }
        for owner in [
            &b"7f3c1a2e-9B4d-4e8f-a6c5-0d1e2f3a4b5c"[..],
            b"0123456789abcdef0123456789abcdef012",
            b"0123456789abcdef0123456789abcdef012345",
            b"7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c:1",
        ] {
            assert!(Compact::of(&lock(owner)).is_none(), "{owner:?}");
        }
    }

    #[test]
    fn only_an_exclusive_lock_with_one_holder_is_compacted() {
        let shared = Lock::shared(None, Holder::new(b"a", 1, 1, 1));
        assert!(Compact::of(&shared).is_none());
        let limited = Lock::shared(NonZeroU32::new(3), Holder::new(b"a", 1, 1, 1));
        assert!(Compact::of(&limited).is_none());
        let mut two = Lock::shared(None, Holder::new(b"a", 1, 1, 1));
        two.add_holder(Holder::new(b"b", 1, 2, 2));
        assert!(Compact::of(&two).is_none());
    }

    #[test]
    fn updates_take_in_every_change() {
        let original = lock(b"7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c");
        let mut compact = Compact::of(&original).unwrap();
        let before = compact.to_lock();
        let mut after = before.clone();
        let holder = &mut after.holders_mut()[0];
        holder.set_holds(9);
        holder.set_token(77);
        holder.set_deadline(1_234);
        holder.set_expiry_id(5);
        let owner = OwnerText::of(before.holders()[0].owner()).unwrap();
        assert!(compact.update(&owner, &after));
        assert_eq!(compact.to_lock(), after);
        // Another owner is packed afresh; one the form cannot keep is refused
        // and leaves the value as it was.
        let other = lock(b"0123456789ABCDEF0123456789ABCDEF");
        assert!(compact.update(&owner, &other));
        assert_eq!(compact.to_lock(), other);
        let owner = OwnerText::of(other.holders()[0].owner()).unwrap();
        let unpackable = lock(&[b'z'; 30]);
        assert!(!compact.update(&owner, &unpackable));
        assert_eq!(compact.to_lock(), other);
        let shared = Lock::shared(None, Holder::new(b"a", 1, 1, 1));
        assert!(!compact.update(&owner, &shared));
        // An owner that only starts like the one read, or is it and more,
        // is another owner (packed afresh, not kept).
        for changed in [
            &b"0123456789ABCDEF0123456789ABCDE"[..],
            b"0123456789ABCDEF0123456789ABCDEF0",
        ] {
            let mut compact = Compact::of(&other).unwrap();
            let after = lock(changed);
            assert_eq!(
                compact.update(&owner, &after),
                Compact::of(&after).is_some()
            );
            if let Some(fresh) = Compact::of(&after) {
                assert_eq!(compact, fresh);
            }
        }
    }

    #[test]
    fn fits_jemallocs_48_byte_class() {
        assert_eq!(std::mem::size_of::<Compact>(), 48);
        assert!(std::mem::size_of::<Lock>() > 48);
    }

    #[test]
    fn sixteen_hex_digits_at_a_time() {
        let mut below = crate::testing::below(0x5851_f42d_4c95_7f2d);
        for _ in 0..10_000 {
            let bytes = below(u64::MAX).to_be_bytes();
            let lower: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(hex16(bytes, b'a'), lower.as_bytes());
            assert_eq!(hex16(bytes, b'A'), lower.to_uppercase().as_bytes());
        }
        assert_eq!(&hex16([0xff; 8], b'a'), b"ffffffffffffffff");
        assert_eq!(&hex16([0; 8], b'A'), b"0000000000000000");
    }

    #[test]
    fn decoding_into_any_lock_gives_the_same_lock() {
        let shared = Lock::with_holders(
            Mode::Shared,
            NonZeroU32::new(5),
            vec![
                Holder::new(b"r1", 1, 2, 3),
                Holder::new(&[b'r'; 60], 1, 4, 5),
            ],
        )
        .unwrap();
        let targets = [
            lock(b"owner-1"),
            lock(&[b'h'; 80]),
            shared,
            Lock::shared(None, Holder::new(b"one", 1, 1, 1)),
        ];
        for owner in OWNERS {
            let Some(compact) = Compact::of(&lock(owner)) else {
                continue;
            };
            for target in &targets {
                let mut into = target.clone();
                let text = compact.decode_into(&mut into);
                assert_eq!(into, compact.to_lock(), "{owner:?} into {target:?}");
                assert_eq!(text.as_bytes(), *owner);
            }
        }
    }

    #[test]
    fn random_owners_round_trip() {
        // A small PRNG: owners of every length and alphabet mix.
        let mut below = crate::testing::below(0x9e37_79b9_7f4a_7c15);
        let any = b"0123456789abcdefABCDEF-xyz:";
        let alphabets: [&[u8]; 3] = [b"0123456789abcdef", b"0123456789ABCDEF", any];
        for _ in 0..40_000 {
            let kind = below(4) as usize;
            let len = if kind == 3 { 36 } else { below(40) as usize };
            let alphabet = alphabets[kind % 3];
            let mut owner: Vec<u8> = (0..len)
                .map(|_| alphabet[below(alphabet.len() as u64) as usize])
                .collect();
            if kind == 3 {
                // A UUID, and half the time one byte of it changed.
                for at in [8, 13, 18, 23] {
                    owner[at] = b'-';
                }
                if below(2) == 0 {
                    owner[below(36) as usize] = any[below(any.len() as u64) as usize];
                }
            }
            let original = lock(&owner);
            let packed = Compact::of(&original);
            assert_eq!(packed.is_some(), compactable(&owner), "{owner:?}");
            if let Some(compact) = packed {
                assert_eq!(compact.to_lock(), original);
            }
        }
    }

    /// Every byte value at every digit place of a UUID, lowercase and
    /// uppercase (a mixed-case one beside): compacted exactly when the
    /// plain rule says so, and read back exactly. The eight-digits-at-a-
    /// time decoding's edges are the bytes around each range (`/` `:` `@`
    /// `G` `` ` `` `g`, 0x7f, 0x80 and above).
    #[test]
    fn a_uuid_with_any_byte_at_any_digit_place() {
        let bases: [&[u8]; 3] = [
            b"7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c",
            b"7F3C1A2E-9B4D-4E8F-A6C5-0D1E2F3A4B5C",
            b"01234567-89ab-cdef-0123-456789abcdef",
        ];
        let mut compacted = 0;
        for base in bases {
            for at in (0..TEXT_OWNER).filter(|at| !UUID_DASHES.contains(at)) {
                for byte in 0..=255u8 {
                    let mut owner = base.to_vec();
                    owner[at] = byte;
                    let original = lock(&owner);
                    let packed = Compact::of(&original);
                    assert_eq!(packed.is_some(), compactable(&owner), "{owner:?}");
                    if let Some(compact) = packed {
                        assert_eq!(compact.to_lock(), original, "{owner:?}");
                        compacted += 1;
                    }
                }
            }
        }
        // 16 hex digits of one case at each of 32 places, three bases.
        assert!(compacted > 3 * 32 * 10, "{compacted}");
    }

    /// The owners the compact form holds, spelled out plainly: any of at
    /// most 18 bytes; else hex digits in one case, an even number of up to
    /// 36, or a UUID's 32 with its four dashes.
    fn compactable(owner: &[u8]) -> bool {
        if owner.len() <= OWNER_BYTES {
            return true;
        }
        let dashes = [8, 13, 18, 23];
        let uuid = owner.len() == TEXT_OWNER && dashes.iter().all(|&at| owner[at] == b'-');
        let digits: Vec<u8> = (0..owner.len())
            .filter(|at| !(uuid && dashes.contains(at)))
            .map(|at| owner[at])
            .collect();
        let one_case = digits
            .iter()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
            || digits
                .iter()
                .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase());
        (uuid || (owner.len() <= TEXT_OWNER && owner.len() % 2 == 0))
            && digits.iter().all(u8::is_ascii_hexdigit)
            && one_case
    }
}
