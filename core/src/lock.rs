//! The state of one lock: who holds it, how many times, under which fencing
//! token, and until when.

/// One held lock. It exists only while held: releasing the last hold, or the
/// end of the lease, removes it (and its key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    owner: Box<[u8]>,
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
            owner: owner.into(),
            holds,
            token,
            deadline,
            expiry_id: 0,
        }
    }

    pub fn owner(&self) -> &[u8] {
        &self.owner
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
        *self.owner == *owner
    }

    /// The lease has ended at monotonic time `now`.
    pub fn has_expired(&self, now: u64) -> bool {
        now >= self.deadline
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
        std::mem::size_of::<Self>() + self.owner.len()
    }
}
