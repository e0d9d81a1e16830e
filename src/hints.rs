//! Hints to the type callbacks about the change that runs them. For the
//! lease sweep (`sweep.rs`): a lock may have arrived under a name the lease
//! index does not know. For the queues: the module deletes a lock and serves
//! its waiters itself next, so the deletion leaves no grant for the timer.
//! Below the key access and the type callbacks that give them, and the
//! sweep that reads them.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::LocalKey;

/// Bumped by every hint; a sweep pass remembers the value it started with.
static HINTS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set while the module itself deletes or replaces a lock key: that
    /// is no arrival anywhere.
    static OWN_CHANGE: Cell<bool> = const { Cell::new(false) };
    /// Set while the module deletes a lock whose waiters it serves right
    /// after, in the same call (a release, a lease end).
    static SERVED_NEXT: Cell<bool> = const { Cell::new(false) };
}

/// A lock may have arrived under a name the index does not know. Returns
/// whether the hint counted (not during the module's own change): the
/// caller then arms the timer, whose firing sweeps.
pub fn hint() -> bool {
    let counted = !OWN_CHANGE.with(Cell::get);
    if counted {
        HINTS.fetch_add(1, Ordering::Relaxed);
    }
    counted
}

/// Runs `change`, a deletion or replacement of a lock key by the module.
pub fn own_change<R>(change: impl FnOnce() -> R) -> R {
    while_set(&OWN_CHANGE, change)
}

/// Runs `change`, a deletion by the module after which its caller serves
/// the key's waiters itself (`waiting::grant_waiters`).
pub fn served_next<R>(change: impl FnOnce() -> R) -> R {
    while_set(&SERVED_NEXT, change)
}

/// Runs `f` with `flag` set; the flag is cleared after it even if `f`
/// unwinds (a flag left set would hide later changes that are not ours).
fn while_set<R>(flag: &'static LocalKey<Cell<bool>>, f: impl FnOnce() -> R) -> R {
    struct Clear(&'static LocalKey<Cell<bool>>);
    impl Drop for Clear {
        fn drop(&mut self) {
            self.0.with(|flag| flag.set(false));
        }
    }
    flag.with(|flag| flag.set(true));
    let _clear = Clear(flag);
    f()
}

/// Whether the lock key leaving now has its waiters served by the caller
/// that removes it: then they need no pending grant.
pub fn waiters_served_next() -> bool {
    SERVED_NEXT.with(Cell::get)
}

/// Hints given so far.
pub fn count() -> u64 {
    HINTS.load(Ordering::Relaxed)
}
