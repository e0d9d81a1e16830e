//! A key's name in a database, as the module's own structures (the lease
//! index, the waiter queues) keep it. Redis owns the key's name; the lease
//! index needs its own copy to find a lock whose lease ended, one per live
//! lock. Short names, like most lock names, are kept inline: no allocation
//! of their own (24 bytes saved per lock in jemalloc's classes, and one
//! `free` less on every release).

use crate::deadlines::{SlabKey, PACKED_KEY};
use crate::inline;

/// Names up to this many bytes are stored inline.
const INLINE_NAME: usize = 18;

/// Names up to this many bytes are packed in a lease-index slot.
const PACKED_NAME: usize = PACKED_KEY - 2;

/// A key name and its database. A name is always stored the same way for a
/// given length, so the derived equality, hash and order are those of
/// `(db, name)` as far as any caller can tell (the order is total, not
/// lexical).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyId {
    Inline {
        db: i32,
        len: u8,
        name: [u8; INLINE_NAME],
    },
    Heap {
        db: i32,
        name: Box<[u8]>,
    },
}

impl KeyId {
    pub fn new(db: i32, name: &[u8]) -> Self {
        match inline::pack(name) {
            Some((len, inline)) => KeyId::Inline {
                db,
                len,
                name: inline,
            },
            None => KeyId::Heap {
                db,
                name: name.into(),
            },
        }
    }

    pub fn db(&self) -> i32 {
        match self {
            KeyId::Inline { db, .. } | KeyId::Heap { db, .. } => *db,
        }
    }

    pub fn name(&self) -> &[u8] {
        match self {
            KeyId::Inline { len, name, .. } => inline::unpack(*len, name),
            KeyId::Heap { name, .. } => name,
        }
    }

    /// The same name in database `db` (`SWAPDB`).
    pub fn in_db(&self, db: i32) -> Self {
        let mut moved = self.clone();
        match &mut moved {
            KeyId::Inline { db: old, .. } | KeyId::Heap { db: old, .. } => *old = db,
        }
        moved
    }
}

/// In the lease index's slots: a database below 255 in one byte, the
/// name's length in one, the name (up to 17 bytes, which takes in the 17
/// bytes of `lock:%012d`) in the rest. Other names are kept beside.
impl SlabKey for KeyId {
    /// Fixed-size copies only (it runs for every lock filed): an inline
    /// name is zero-padded, so its first 17 bytes are the whole of a name
    /// that fits.
    fn pack(&self) -> Option<[u8; PACKED_KEY]> {
        let KeyId::Inline { db, len, name } = self else {
            return None;
        };
        let db = u8::try_from(*db).ok().filter(|db| *db != u8::MAX)?;
        if usize::from(*len) > PACKED_NAME {
            return None;
        }
        let mut packed = [0; PACKED_KEY];
        let [packed_db, packed_len, packed_name @ ..] = &mut packed;
        *packed_db = db;
        *packed_len = *len;
        *packed_name = *name.first_chunk::<PACKED_NAME>()?;
        Some(packed)
    }

    fn unpack(packed: &[u8; PACKED_KEY]) -> Option<Self> {
        let [db, len, packed_name @ ..] = packed;
        if usize::from(*len) > PACKED_NAME {
            return None;
        }
        let mut name = [0; INLINE_NAME];
        *name.first_chunk_mut::<PACKED_NAME>()? = *packed_name;
        Some(KeyId::Inline {
            db: i32::from(*db),
            len: *len,
            name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn short_and_long_names_read_back_whole() {
        for name in [
            &b""[..],
            b"lock:1",
            b"lock:000000123456",
            &[b'k'; INLINE_NAME],
            &[b'k'; INLINE_NAME + 1],
            &[0u8; 300],
        ] {
            let id = KeyId::new(7, name);
            assert_eq!((id.db(), id.name()), (7, name));
        }
        assert!(matches!(
            KeyId::new(0, &[b'k'; INLINE_NAME]),
            KeyId::Inline { .. }
        ));
        assert!(matches!(
            KeyId::new(0, &[b'k'; INLINE_NAME + 1]),
            KeyId::Heap { .. }
        ));
    }

    #[test]
    fn equal_exactly_when_db_and_name_are() {
        let ids = [
            KeyId::new(0, b"a"),
            KeyId::new(1, b"a"),
            KeyId::new(0, b"a\0"),
            KeyId::new(0, b""),
            KeyId::new(0, &[b'a'; 40]),
            KeyId::new(1, &[b'a'; 40]),
        ];
        let set: HashSet<KeyId> = ids.iter().cloned().collect();
        assert_eq!(set.len(), ids.len());
        for id in &ids {
            assert_eq!(&KeyId::new(id.db(), id.name()), id);
        }
    }

    #[test]
    fn moving_to_another_database_keeps_the_name() {
        let short = KeyId::new(3, b"lock:x");
        assert_eq!(short.in_db(5), KeyId::new(5, b"lock:x"));
        let long = KeyId::new(3, &[b'z'; 64]);
        assert_eq!(long.in_db(0), KeyId::new(0, &[b'z'; 64]));
    }

    #[test]
    fn packs_short_names_in_low_databases_and_reads_them_back() {
        for (db, name, packs) in [
            (0, &b""[..], true),
            (0, b"lock:000000123456", true),
            (254, b"lock:000000123456", true),
            (255, b"lock:000000123456", false),
            (-1, b"a", false),
            (70_000, b"a", false),
            (3, b"lock:0000001234567", false),
            (3, &[0u8; 17][..], true),
        ] {
            let id = KeyId::new(db, name);
            let packed = id.pack();
            assert_eq!(packed.is_some(), packs, "{db} {name:?}");
            if let Some(packed) = packed {
                assert_eq!(KeyId::unpack(&packed), Some(id));
            }
        }
        // Every length, each byte its own: equal (padding and all) after
        // the round trip, and the same hash.
        let name: Vec<u8> = (1..=INLINE_NAME as u8).collect();
        for len in 0..=INLINE_NAME {
            let id = KeyId::new(9, &name[..len]);
            match id.pack() {
                Some(packed) => {
                    assert!(len <= PACKED_NAME);
                    let back = KeyId::unpack(&packed).unwrap();
                    assert_eq!(back.name(), &name[..len]);
                    assert_eq!(back, id);
                    let set: HashSet<KeyId> = [id, back].into_iter().collect();
                    assert_eq!(set.len(), 1);
                }
                None => assert!(len > PACKED_NAME),
            }
        }
    }

    #[test]
    fn no_larger_than_a_boxed_name_and_its_database() {
        assert_eq!(std::mem::size_of::<KeyId>(), 24);
        assert_eq!(std::mem::size_of::<Option<KeyId>>(), 24);
    }
}
