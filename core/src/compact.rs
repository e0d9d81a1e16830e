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

use crate::lock::{Lock, Mode};

/// Owner bytes kept in the compact form.
const OWNER_BYTES: usize = 18;

/// The longest owner in text the compact form spells out (a UUID).
const TEXT_OWNER: usize = 36;

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

    /// The lock this stands for.
    pub fn to_lock(&self) -> Lock {
        let mut text = [0; TEXT_OWNER];
        let owner = self.owner(&mut text);
        let mut lock = Lock::exclusive(owner, self.holds, self.token, self.deadline);
        if let Some(holder) = lock.holders_mut().first_mut() {
            holder.set_expiry_id(self.expiry_id);
        }
        lock
    }

    /// The owner's bytes, spelled out into `text` when they are text.
    fn owner<'a>(&'a self, text: &'a mut [u8; TEXT_OWNER]) -> &'a [u8] {
        let bytes = self.owner.get(..usize::from(self.len)).unwrap_or(&[]);
        let digits: &[u8; 16] = match self.spelling {
            Spelling::Raw => return bytes,
            Spelling::Hex | Spelling::Uuid => b"0123456789abcdef",
            Spelling::HexUpper | Spelling::UuidUpper => b"0123456789ABCDEF",
        };
        let dashes: &[usize] = match self.spelling {
            Spelling::Uuid | Spelling::UuidUpper => &UUID_DASHES,
            _ => &[],
        };
        let mut at = 0;
        for byte in bytes {
            for nibble in [byte >> 4, byte & 0xf] {
                if dashes.contains(&at) {
                    if let Some(slot) = text.get_mut(at) {
                        *slot = b'-';
                    }
                    at += 1;
                }
                if let (Some(slot), Some(digit)) =
                    (text.get_mut(at), digits.get(usize::from(nibble)))
                {
                    *slot = *digit;
                }
                at += 1;
            }
        }
        text.get(..at).unwrap_or(&[])
    }

    /// Bytes this lock owns, for `MEMORY USAGE`.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
    }
}

/// `owner` as `(spelling, length, bytes)`, if the compact form holds it.
fn pack_owner(owner: &[u8]) -> Option<(Spelling, u8, [u8; OWNER_BYTES])> {
    if let Some((len, bytes)) = crate::inline::pack::<OWNER_BYTES>(owner) {
        return Some((Spelling::Raw, len, bytes));
    }
    if owner.len() > TEXT_OWNER {
        return None;
    }
    let is_uuid = owner.len() == TEXT_OWNER
        && UUID_DASHES
            .iter()
            .all(|&at| owner.get(at).copied() == Some(b'-'));
    let mut text = [0u8; TEXT_OWNER];
    let mut count = 0;
    for (at, byte) in owner.iter().enumerate() {
        if is_uuid && UUID_DASHES.contains(&at) {
            continue;
        }
        if let Some(slot) = text.get_mut(count) {
            *slot = *byte;
        }
        count += 1;
    }
    let digits = text.get(..count)?;
    let lower = digits
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    let upper = digits
        .iter()
        .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(b));
    let spelling = match (is_uuid, lower, upper) {
        (true, true, _) => Spelling::Uuid,
        (true, false, true) => Spelling::UuidUpper,
        (false, true, _) => Spelling::Hex,
        (false, false, true) => Spelling::HexUpper,
        _ => return None,
    };
    if digits.len() % 2 != 0 {
        return None;
    }
    let mut bytes = [0; OWNER_BYTES];
    for (pair, slot) in digits.chunks_exact(2).zip(bytes.iter_mut()) {
        let [high, low] = pair else {
            return None;
        };
        *slot = (nibble(*high)? << 4) | nibble(*low)?;
    }
    let len = u8::try_from(digits.len() / 2).ok()?;
    Some((spelling, len, bytes))
}

fn nibble(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
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
    fn fits_jemallocs_48_byte_class() {
        assert_eq!(std::mem::size_of::<Compact>(), 48);
        assert!(std::mem::size_of::<Lock>() > 48);
    }

    #[test]
    fn random_owners_round_trip() {
        // A small PRNG: owners of every length and alphabet mix.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabet = b"0123456789abcdefABCDEF-xyz:";
        for _ in 0..20_000 {
            let len = (next() % 40) as usize;
            let owner: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let original = lock(&owner);
            if let Some(compact) = Compact::of(&original) {
                assert_eq!(compact.to_lock(), original);
            }
        }
    }
}
