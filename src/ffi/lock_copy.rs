//! A lock worked on outside a value: read out of a compact value, or made
//! by a command to be stored. It lives in a box that is kept for the next
//! one when it is dropped (one spare), so that a key access stays a few
//! words long (it is moved on every command) and reading a compact lock
//! allocates nothing.

use std::cell::Cell;

use redis_lock_core::compact::{Compact, OwnerText};
use redis_lock_core::Lock;

struct Copied {
    lock: Lock,
    /// For a lock read out of a compact value: its owner as read, which
    /// tells [`Compact::update`] whether the owner changed.
    owner: Option<OwnerText>,
}

thread_local! {
    /// The spare box. One is enough: a command has one key open at a time
    /// (an event handler's key inside it takes a box of its own). Not an
    /// atomic: measured, an atomic swap per command cost about 3% of a
    /// `LOCK.FENCE` (a locked instruction waits for the write-back to the
    /// lock's cache line).
    static SPARE: Cell<Option<Box<Copied>>> = const { Cell::new(None) };
}

/// `None`: no copy (a full value's access), or one given up
/// ([`LockCopy::take_lock`]).
pub struct LockCopy(Option<Box<Copied>>);

impl LockCopy {
    /// No lock.
    pub fn none() -> LockCopy {
        LockCopy(None)
    }

    /// `lock`, to be stored.
    pub fn new(lock: Lock) -> LockCopy {
        LockCopy(Some(match spare() {
            Some(mut copied) => {
                copied.lock = lock;
                copied.owner = None;
                copied
            }
            None => Box::new(Copied { lock, owner: None }),
        }))
    }

    /// The lock `compact` stands for, with its owner as read (decoded
    /// into the spare box's lock in place).
    pub fn decoded(compact: &Compact) -> LockCopy {
        LockCopy(Some(match spare() {
            Some(mut copied) => {
                copied.owner = Some(compact.decode_into(&mut copied.lock));
                copied
            }
            None => {
                let (lock, owner) = compact.decode();
                Box::new(Copied {
                    lock,
                    owner: Some(owner),
                })
            }
        }))
    }

    pub fn lock(&self) -> Option<&Lock> {
        self.0.as_ref().map(|copied| &copied.lock)
    }

    pub fn lock_mut(&mut self) -> Option<&mut Lock> {
        self.0.as_mut().map(|copied| &mut copied.lock)
    }

    /// The owner as read out of a compact value, or as it will be stored
    /// in one (`None` when there is no such owner).
    pub fn owner(&self) -> Option<&OwnerText> {
        self.0.as_ref()?.owner.as_ref()
    }

    /// Records the owner the lock is stored under in compact form.
    pub fn set_owner(&mut self, owner: OwnerText) {
        if let Some(copied) = &mut self.0 {
            copied.owner = Some(owner);
        }
    }

    /// The lock itself (to be stored in full); the copy is left empty and
    /// the box stays for the next one.
    pub fn take_lock(&mut self) -> Option<Lock> {
        let copied = self.0.as_mut()?;
        let lock = std::mem::replace(&mut copied.lock, placeholder());
        drop(std::mem::replace(self, LockCopy::none()));
        Some(lock)
    }
}

/// What a given-up copy's box holds until it is used again: owns nothing.
fn placeholder() -> Lock {
    Lock::exclusive(&[], 0, 0, 0)
}

fn spare() -> Option<Box<Copied>> {
    SPARE.try_with(Cell::take).ok().flatten()
}

/// Keeps `copied` as the spare (instead of the one there was).
fn keep(copied: Box<Copied>) {
    let _ = SPARE.try_with(|spare| drop(spare.replace(Some(copied))));
}

impl Drop for LockCopy {
    fn drop(&mut self) {
        let Some(copied) = self.0.take() else {
            return;
        };
        // Only a box whose lock owns nothing else is kept (no list of
        // holders, no long owner held on to by a spare).
        if copied.lock.heap_bytes() != std::mem::size_of::<Lock>() {
            return;
        }
        keep(copied);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &[u8] = b"7f3c1a2e-9b4d-4e8f-a6c5-0d1e2f3a4b5c";

    fn boxed(copy: &LockCopy) -> *const Copied {
        copy.0
            .as_deref()
            .map_or(std::ptr::null(), |c| c as *const Copied)
    }

    /// This thread's spare (each test runs on a thread of its own).
    fn the_spare() -> *const Copied {
        SPARE.with(|spare| {
            let kept = spare.take();
            let at = kept
                .as_deref()
                .map_or(std::ptr::null(), |c| c as *const Copied);
            spare.set(kept);
            at
        })
    }

    #[test]
    fn a_dropped_copy_leaves_its_box_for_the_next() {
        let copy = LockCopy::new(Lock::exclusive(UUID, 1, 2, 3));
        assert_eq!(copy.lock(), Some(&Lock::exclusive(UUID, 1, 2, 3)));
        let first = boxed(&copy);
        drop(copy);
        assert_eq!(the_spare(), first);
        let mut again = LockCopy::new(Lock::exclusive(b"x", 4, 5, 6));
        assert_eq!(boxed(&again), first);
        assert!(the_spare().is_null());
        assert_eq!(again.lock(), Some(&Lock::exclusive(b"x", 4, 5, 6)));
        assert_eq!(again.owner(), None, "a reused box keeps no old owner");
        // Given up, the lock is whole and the box is kept.
        assert_eq!(again.take_lock(), Some(Lock::exclusive(b"x", 4, 5, 6)));
        assert_eq!(again.lock(), None);
        assert_eq!(the_spare(), first);
        // Decoded into the spare, in place, with the owner as read.
        let lock = Lock::exclusive(UUID, 2, 7, 1_000);
        let compact = Compact::of(&lock).unwrap();
        let decoded = LockCopy::decoded(&compact);
        assert_eq!(boxed(&decoded), first);
        assert_eq!(decoded.lock(), Some(&lock));
        assert_eq!(decoded.owner().map(OwnerText::as_bytes), Some(UUID));
        // With no spare, a box of its own; one spare is kept, not two.
        let other = LockCopy::decoded(&compact);
        assert_eq!(other.lock(), Some(&lock));
        let second = boxed(&other);
        drop(decoded);
        drop(other);
        assert_eq!(the_spare(), second);
        // A copy that owns more than its box is not kept.
        drop(spare());
        drop(LockCopy::new(Lock::exclusive(&[b'o'; 100], 1, 2, 3)));
        assert!(the_spare().is_null());
    }
}
