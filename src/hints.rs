//! Hints for the lease sweep (`sweep.rs`): a lock may have arrived under a
//! name the lease index does not know. Below the key access and the type
//! callbacks that give them, and the sweep that reads them.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bumped by every hint; a sweep pass remembers the value it started with.
static HINTS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set while the module itself deletes or replaces a lock key: that
    /// is no arrival anywhere.
    static OWN_CHANGE: Cell<bool> = const { Cell::new(false) };
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
    OWN_CHANGE.with(|own| own.set(true));
    let result = change();
    OWN_CHANGE.with(|own| own.set(false));
    result
}

/// Hints given so far.
pub fn count() -> u64 {
    HINTS.load(Ordering::Relaxed)
}
