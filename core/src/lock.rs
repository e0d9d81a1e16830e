//! The state of one lock: who holds it, how many times, under which fencing
//! token, and until when.

use crate::inline;

/// Owners up to this many bytes (a UUID in text is 36) live inside the lock
/// itself: one allocation per lock instead of two, and the owner check on
/// every command reads the cache line the lock is already in.
const INLINE_OWNER: usize = 38;

/// A lock's owner, inline when short.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Owner {
    Inline { len: u8, bytes: [u8; INLINE_OWNER] },
    Heap(Box<[u8]>),
}

impl Owner {
    fn new(owner: &[u8]) -> Self {
        match inline::pack(owner) {
            Some((len, bytes)) => Owner::Inline { len, bytes },
            None => Owner::Heap(owner.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Owner::Inline { len, bytes } => inline::unpack(*len, bytes),
            Owner::Heap(bytes) => bytes,
        }
    }

    /// Bytes held outside the lock.
    fn heap_len(&self) -> usize {
        match self {
            Owner::Inline { .. } => 0,
            Owner::Heap(bytes) => bytes.len(),
        }
    }
}

/// One held lock. It exists only while held: releasing the last hold, or the
/// end of the lease, removes it (and its key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    owner: Owner,
    holds: u32,
    token: i64,
    /// Monotonic milliseconds at which the lease ends.
    deadline: u64,
    /// This lock's entry in the expiry index (0: not indexed yet).
    expiry_id: u64,
}

impl Lock {
    pub fn new(owner: &[u8], holds: u32, token: i64, deadline: u64) -> Self {
        Lock {
            owner: Owner::new(owner),
            holds,
            token,
            deadline,
            expiry_id: 0,
        }
    }

    pub fn owner(&self) -> &[u8] {
        self.owner.as_bytes()
    }

    pub fn holds(&self) -> u32 {
        self.holds
    }

    pub fn token(&self) -> i64 {
        self.token
    }

    pub fn deadline(&self) -> u64 {
        self.deadline
    }

    pub fn expiry_id(&self) -> u64 {
        self.expiry_id
    }

    /// Records the lock's entry in the expiry index.
    pub fn set_expiry_id(&mut self, id: u64) {
        self.expiry_id = id;
    }

    pub fn is_held_by(&self, owner: &[u8]) -> bool {
        self.owner.as_bytes() == owner
    }

    /// The first monotonic millisecond at which the lease is over. Clock
    /// readings are whole milliseconds, truncated: a lease granted at 10.9
    /// with 5 ms reads 15 as its deadline, and ending it at a reading of 15
    /// (real time 15.0) would cut it short by up to a millisecond. It ends
    /// at the first reading past its deadline, as Redis's own expires do.
    pub fn ends_at(&self) -> u64 {
        self.deadline.saturating_add(1)
    }

    /// The lease has ended at monotonic time `now`.
    pub fn has_expired(&self, now: u64) -> bool {
        now >= self.ends_at()
    }

    pub(crate) fn set_holds(&mut self, holds: u32) {
        self.holds = holds;
    }

    pub(crate) fn set_token(&mut self, token: i64) {
        self.token = token;
    }

    pub(crate) fn set_deadline(&mut self, deadline: u64) {
        self.deadline = deadline;
    }

    /// Bytes this lock owns, for `MEMORY USAGE`.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.owner.heap_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_owners_live_inside_the_lock_long_ones_outside() {
        let uuid = b"0123456789abcdef0123456789abcdef0123";
        let lock = Lock::new(uuid, 1, 7, 100);
        assert_eq!(lock.owner(), uuid);
        assert!(lock.is_held_by(uuid));
        assert_eq!(lock.heap_bytes(), std::mem::size_of::<Lock>());
        let long = [b'x'; INLINE_OWNER + 1];
        let lock = Lock::new(&long, 1, 7, 100);
        assert_eq!(lock.owner(), &long[..]);
        assert_eq!(
            lock.heap_bytes(),
            std::mem::size_of::<Lock>() + INLINE_OWNER + 1
        );
    }

    #[test]
    fn an_owner_is_compared_whole() {
        let lock = Lock::new(b"abc", 1, 7, 100);
        assert!(!lock.is_held_by(b"ab"));
        assert!(!lock.is_held_by(b"abc\0"));
        assert!(!lock.is_held_by(b""));
        let edge = [b'y'; INLINE_OWNER];
        let lock = Lock::new(&edge, 1, 7, 100);
        assert!(lock.is_held_by(&edge));
        assert!(!lock.is_held_by(&edge[1..]));
    }

    #[test]
    fn one_allocation_for_a_uuid_owned_lock() {
        // 80 bytes in jemalloc's size classes: a header and a 36-byte owner.
        assert!(
            std::mem::size_of::<Lock>() <= 80,
            "{}",
            std::mem::size_of::<Lock>()
        );
    }
}
