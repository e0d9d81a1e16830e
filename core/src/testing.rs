//! Test support shared by the core's unit tests, the fuzz targets and the
//! benches (feature `testing`): a slot that keeps its lock in memory. The
//! manual clock is [`crate::ManualClock`].

use crate::lock::{Holder, Lock};
use crate::ops::Slot;

/// A key's slot in memory: the lock it holds, if any (public, so that a
/// test can look at it or plant one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemorySlot(pub Option<Lock>);

impl Slot for MemorySlot {
    fn lock(&mut self) -> Option<&mut Lock> {
        self.0.as_mut()
    }
    fn store(&mut self, lock: Lock) {
        self.0 = Some(lock);
    }
    fn delete(&mut self) {
        self.0 = None;
    }
}

impl MemorySlot {
    /// The first holder of the lock stored here (an exclusive lock's only
    /// one).
    pub fn sole(&self) -> Option<&Holder> {
        self.0.as_ref()?.holders().first()
    }
}

/// A small deterministic generator (xorshift64) for randomized tests: each
/// call gives a number below its argument (which must not be 0).
pub fn below(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |bound| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound
    }
}
