//! The state of one lock key: its mode, and its holders, each with its own
//! holds count, fencing token and lease. An exclusive lock has one holder;
//! a shared lock (the next primitive) has any number up to its limit. A key
//! exists only while it has a holder: the last one leaving removes it.

use std::num::NonZeroU32;

use crate::inline;

/// Owners up to this many bytes (a UUID in text is 36) live inside the lock
/// itself: one allocation per lock instead of two, and the owner check on
/// every command reads the cache line the lock is already in.
const INLINE_OWNER: usize = 38;

/// The longest owner the compact form spells out in text (a UUID).
pub(crate) const TEXT_OWNER: usize = 36;

/// A holder's owner, inline when short.
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

    /// The first `len` bytes of `text`: only fixed-size copies, for the
    /// compact form's decode on every command.
    fn from_text(len: u8, text: &[u8; TEXT_OWNER]) -> Self {
        let mut bytes = [0; INLINE_OWNER];
        if let Some(head) = bytes.first_chunk_mut::<TEXT_OWNER>() {
            *head = *text;
        }
        Owner::Inline {
            len: len.min(TEXT_OWNER as u8),
            bytes,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Owner::Inline { len, bytes } => inline::unpack(*len, bytes),
            Owner::Heap(bytes) => bytes,
        }
    }

    /// Bytes held outside the holder.
    fn heap_len(&self) -> usize {
        match self {
            Owner::Inline { .. } => 0,
            Owner::Heap(bytes) => bytes.len(),
        }
    }
}

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One holder at a time.
    Exclusive,
    /// Any number of holders, up to the lock's limit when it has one.
    Shared,
}

impl Mode {
    /// The name `LOCK.INFO` and the saved form use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

/// One owner's hold on a lock: how many times it holds it, under which
/// fencing token, and until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    owner: Owner,
    holds: u32,
    token: i64,
    /// Monotonic milliseconds at which the lease ends.
    deadline: u64,
    /// This holder's entry in the lease index (0: not indexed yet).
    expiry_id: u64,
}

impl Holder {
    pub fn new(owner: &[u8], holds: u32, token: i64, deadline: u64) -> Self {
        Holder {
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

    /// Records the holder's entry in the lease index.
    pub fn set_expiry_id(&mut self, id: u64) {
        self.expiry_id = id;
    }

    /// The owner is the first `len` bytes of `text` (the rest of `text`
    /// zeros, as [`crate::compact::OwnerText`] keeps it): one fixed-size
    /// comparison. `false` may only mean "cannot tell this way" for an
    /// owner stored otherwise; never `true` for another owner.
    pub(crate) fn owner_is_text(&self, len: u8, text: &[u8; TEXT_OWNER]) -> bool {
        match &self.owner {
            Owner::Inline { len: own, bytes } => {
                *own == len && bytes.first_chunk::<TEXT_OWNER>() == Some(text)
            }
            Owner::Heap(_) => false,
        }
    }

    pub fn is(&self, owner: &[u8]) -> bool {
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
}

/// A lock's holders: one inline (every exclusive lock, and a shared lock
/// with one holder), or a list. An exclusive lock costs one allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Holders {
    One(Holder),
    Many(Vec<Holder>),
}

/// One lock key's value. It always has at least one holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    mode: Mode,
    /// Shared mode: the most holders at once, fixed by the first one.
    limit: Option<NonZeroU32>,
    holders: Holders,
}

impl Lock {
    /// An exclusive lock held by `owner`.
    pub fn exclusive(owner: &[u8], holds: u32, token: i64, deadline: u64) -> Self {
        Lock {
            mode: Mode::Exclusive,
            limit: None,
            holders: Holders::One(Holder::new(owner, holds, token, deadline)),
        }
    }

    /// Makes this lock exclusive, held by the owner of `len` bytes at the
    /// start of `text`, in place (the compact form's decode, into a lock
    /// kept for reuse).
    pub(crate) fn set_exclusive_from_text(
        &mut self,
        len: u8,
        text: &[u8; TEXT_OWNER],
        holds: u32,
        token: i64,
        deadline: u64,
        expiry_id: u64,
    ) {
        if !matches!(self.holders, Holders::One(_)) {
            self.holders = Holders::One(Holder::new(&[], 0, 0, 0));
        }
        self.mode = Mode::Exclusive;
        self.limit = None;
        if let Holders::One(holder) = &mut self.holders {
            holder.owner = Owner::from_text(len, text);
            holder.holds = holds;
            holder.token = token;
            holder.deadline = deadline;
            holder.expiry_id = expiry_id;
        }
    }

    /// A shared lock with one holder, limited to `limit` holders.
    pub fn shared(limit: Option<NonZeroU32>, holder: Holder) -> Self {
        Lock {
            mode: Mode::Shared,
            limit,
            holders: Holders::One(holder),
        }
    }

    /// Adds a holder after the others (grant order). The caller has checked
    /// the mode, the limit and that `holder`'s owner holds nothing here.
    pub(crate) fn add_holder(&mut self, holder: Holder) {
        match &mut self.holders {
            Holders::Many(holders) => holders.push(holder),
            Holders::One(_) => {
                let Holders::One(first) =
                    std::mem::replace(&mut self.holders, Holders::Many(Vec::with_capacity(2)))
                else {
                    return;
                };
                if let Holders::Many(holders) = &mut self.holders {
                    holders.push(first);
                    holders.push(holder);
                }
            }
        }
    }

    /// Removes `owner`'s hold, unless it is the last one (a lock always
    /// has a holder: the last one leaving deletes the key instead).
    pub(crate) fn remove_holder(&mut self, owner: &[u8]) -> Option<Holder> {
        let Holders::Many(holders) = &mut self.holders else {
            return None;
        };
        let at = holders.iter().position(|h| h.is(owner))?;
        let removed = holders.remove(at);
        if holders.len() == 1 {
            if let Some(last) = holders.pop() {
                self.holders = Holders::One(last);
            }
        }
        Some(removed)
    }

    /// A lock of `mode` with these holders, in grant order; `None` when
    /// there are none, or more than one in exclusive mode, or more than
    /// the limit, or an owner twice (the saved form is checked with this).
    pub fn with_holders(
        mode: Mode,
        limit: Option<NonZeroU32>,
        mut holders: Vec<Holder>,
    ) -> Option<Self> {
        let count = holders.len();
        let fits = match mode {
            Mode::Exclusive => count == 1 && limit.is_none(),
            Mode::Shared => {
                count >= 1
                    && limit.map_or(true, |n| usize::try_from(n.get()).is_ok_and(|n| count <= n))
            }
        };
        let unique = holders.iter().enumerate().all(|(i, h)| {
            holders
                .iter()
                .skip(i + 1)
                .all(|other| other.owner() != h.owner())
        });
        if !fits || !unique {
            return None;
        }
        let holders = if count == 1 {
            Holders::One(holders.pop()?)
        } else {
            Holders::Many(holders)
        };
        Some(Lock {
            mode,
            limit,
            holders,
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn limit(&self) -> Option<NonZeroU32> {
        self.limit
    }

    /// `Some(limit)` (0: none) for a shared lock, `None` for an exclusive
    /// one: what its effects carry (`LOCK.APPLY … SHARED limit`).
    pub fn shared_limit(&self) -> Option<u32> {
        (self.mode == Mode::Shared).then(|| self.limit.map_or(0, NonZeroU32::get))
    }

    /// The holders, in grant order.
    pub fn holders(&self) -> &[Holder] {
        match &self.holders {
            Holders::One(holder) => std::slice::from_ref(holder),
            Holders::Many(holders) => holders,
        }
    }

    pub fn holders_mut(&mut self) -> &mut [Holder] {
        match &mut self.holders {
            Holders::One(holder) => std::slice::from_mut(holder),
            Holders::Many(holders) => holders,
        }
    }

    /// `owner`'s hold, whether or not its lease has ended.
    pub fn holder(&self, owner: &[u8]) -> Option<&Holder> {
        self.holders().iter().find(|h| h.is(owner))
    }

    pub fn holder_mut(&mut self, owner: &[u8]) -> Option<&mut Holder> {
        self.holders_mut().iter_mut().find(|h| h.is(owner))
    }

    /// The holder filed under lease-index entry `entry`.
    pub fn holder_by_entry(&mut self, entry: u64) -> Option<&mut Holder> {
        self.holders_mut()
            .iter_mut()
            .find(|h| h.expiry_id() == entry)
    }

    /// Whether every holder's lease has ended at `now`.
    pub fn all_expired(&self, now: u64) -> bool {
        self.holders().iter().all(|h| h.has_expired(now))
    }

    /// Bytes this lock owns, for `MEMORY USAGE`.
    pub fn heap_bytes(&self) -> usize {
        let owners: usize = self.holders().iter().map(|h| h.owner.heap_len()).sum();
        let list = match &self.holders {
            Holders::One(_) => 0,
            Holders::Many(holders) => holders.capacity() * std::mem::size_of::<Holder>(),
        };
        std::mem::size_of::<Self>() + list + owners
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_owners_live_inside_the_lock_long_ones_outside() {
        let uuid = b"0123456789abcdef0123456789abcdef0123";
        let lock = Lock::exclusive(uuid, 1, 7, 100);
        assert_eq!(lock.holders()[0].owner(), uuid);
        assert!(lock.holder(uuid).is_some());
        assert_eq!(lock.heap_bytes(), std::mem::size_of::<Lock>());
        let long = [b'x'; INLINE_OWNER + 1];
        let lock = Lock::exclusive(&long, 1, 7, 100);
        assert_eq!(lock.holders()[0].owner(), &long[..]);
        assert_eq!(
            lock.heap_bytes(),
            std::mem::size_of::<Lock>() + INLINE_OWNER + 1
        );
    }

    #[test]
    fn an_owner_is_compared_whole() {
        let lock = Lock::exclusive(b"abc", 1, 7, 100);
        assert!(lock.holder(b"ab").is_none());
        assert!(lock.holder(b"abc\0").is_none());
        assert!(lock.holder(b"").is_none());
        let edge = [b'y'; INLINE_OWNER];
        let lock = Lock::exclusive(&edge, 1, 7, 100);
        assert!(lock.holder(&edge).is_some());
        assert!(lock.holder(&edge[1..]).is_none());
    }

    #[test]
    fn one_allocation_for_a_uuid_owned_exclusive_lock() {
        // 80 bytes in jemalloc's size classes: a header and a 36-byte owner.
        assert!(
            std::mem::size_of::<Lock>() <= 80,
            "{}",
            std::mem::size_of::<Lock>()
        );
    }

    #[test]
    fn holders_are_checked_against_the_mode_and_the_limit() {
        let holder = |owner: &[u8]| Holder::new(owner, 1, 5, 100);
        let limit = NonZeroU32::new(2);
        assert!(Lock::with_holders(Mode::Exclusive, None, vec![holder(b"a")]).is_some());
        assert!(Lock::with_holders(Mode::Exclusive, None, vec![]).is_none());
        assert!(
            Lock::with_holders(Mode::Exclusive, None, vec![holder(b"a"), holder(b"b")]).is_none()
        );
        assert!(Lock::with_holders(Mode::Exclusive, limit, vec![holder(b"a")]).is_none());
        let two = Lock::with_holders(Mode::Shared, limit, vec![holder(b"a"), holder(b"b")]);
        assert_eq!(two.map(|lock| lock.holders().len()), Some(2));
        assert!(Lock::with_holders(
            Mode::Shared,
            limit,
            vec![holder(b"a"), holder(b"b"), holder(b"c")]
        )
        .is_none());
        assert!(
            Lock::with_holders(Mode::Shared, None, vec![holder(b"a"), holder(b"a")]).is_none(),
            "an owner holds once, with a count"
        );
        let mut shared =
            Lock::with_holders(Mode::Shared, None, vec![holder(b"a"), holder(b"b")]).unwrap();
        shared.holders_mut()[1].set_expiry_id(9);
        assert_eq!(
            shared.holder_by_entry(9).map(|h| h.owner().to_vec()),
            Some(b"b".to_vec())
        );
        assert!(
            shared.heap_bytes() >= std::mem::size_of::<Lock>() + 2 * std::mem::size_of::<Holder>()
        );
        assert!(!shared.all_expired(100) && shared.all_expired(101));
    }
}
