//! When a holder's lease gets an entry in the lease index
//! ([`DeadlineIndex`]), keeps it, or is filed again. The index holds one
//! entry per holder; a holder carries its entry's id.
//!
//! - A new holder gets an entry at the first millisecond its lease is over
//!   ([`Holder::ends_at`]).
//! - A lease that grows (re-entry, extension, renewal) keeps its entry: the
//!   entry surfaces at the old end, the holder is found still running and
//!   is filed again then ([`on_surfaced`]). One heap push per TTL instead
//!   of one per renewal.
//! - A lease that shrinks is filed anew, under a new entry
//!   ([`DeadlineIndex::refile`]): the old entry's item goes stale, as a
//!   released lock's, and the sweep removes it. (A second live item for
//!   the same entry, as shrunk leases once got, is one no sweep can
//!   remove: only a whole rebuild of the index dropped those.)
//! - A lock that arrives from elsewhere (RDB, `RESTORE`, `RENAME`, `MOVE`,
//!   an async load) gets an entry per holder, and the node's counter rises
//!   above its tokens so that every later grant here is above them.

use crate::deadlines::{DeadlineIndex, SlabKey};
use crate::lock::{Holder, Lock};
use crate::token::TokenCounter;

/// Files `holder` after a change, given the lease end it had before
/// (`None`: it is new). Returns whether the index changed (the timer may
/// need arming earlier).
pub fn on_change<K: SlabKey>(
    index: &mut DeadlineIndex<K>,
    holder: &mut Holder,
    previous_deadline: Option<u64>,
    key: impl FnOnce() -> K,
) -> bool {
    let filed = holder.expiry_id();
    let shrank = previous_deadline.map_or(true, |previous| holder.deadline() < previous);
    if filed != 0 && !shrank {
        return false;
    }
    if filed == 0 {
        holder.set_expiry_id(index.insert(holder.ends_at(), key()));
    } else if let Some(refiled) = index.refile(filed, holder.ends_at(), key) {
        // Under a new entry: the old one's item goes stale, to be swept.
        holder.set_expiry_id(refiled);
    }
    true
}

/// Which holders of a lock that arrived get an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Every holder (the index was rebuilt, or the lock is new here).
    All,
    /// Holders whose id names no live entry (a sweep over locks that may
    /// have been renamed or restored under another name).
    Unfiled,
}

/// Files the holders of a lock that arrived, and raises `tokens` above
/// each holder's token. Returns how many holders were filed.
pub fn on_arrival<K: Clone + SlabKey>(
    tokens: &mut TokenCounter,
    index: &mut DeadlineIndex<K>,
    lock: &mut Lock,
    key: &K,
    which: Arrival,
) -> usize {
    let mut filed = 0;
    for holder in lock.holders_mut() {
        if which == Arrival::Unfiled && index.contains(holder.expiry_id()) {
            continue;
        }
        tokens.raise(holder.token());
        holder.set_expiry_id(index.insert(holder.ends_at(), key.clone()));
        filed += 1;
    }
    filed
}

/// What to do with a lock whose entry `entry` surfaced from the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surfaced {
    /// No holder carries the entry: the lock under that name was replaced
    /// or renamed away, and its successor has its own entries.
    Stale,
    /// The holder's lease is over: settle the key (end it, hand off).
    Ended,
    /// The holder's lease grew since it was filed: it is filed again at
    /// its current end (a holder must never be left without an entry).
    Refiled,
}

/// Looks at the holder filed under `entry` at monotonic time `now`.
pub fn on_surfaced<K: SlabKey>(
    index: &mut DeadlineIndex<K>,
    lock: &mut Lock,
    entry: u64,
    now: u64,
    key: impl FnOnce() -> K,
) -> Surfaced {
    let Some(holder) = lock.holder_by_entry(entry) else {
        return Surfaced::Stale;
    };
    if holder.has_expired(now) {
        return Surfaced::Ended;
    }
    holder.set_expiry_id(index.insert(holder.ends_at(), key()));
    Surfaced::Refiled
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::Mode;

    #[test]
    fn a_new_holder_is_filed_at_the_end_of_its_lease() {
        let mut index = DeadlineIndex::new();
        let mut holder = Holder::new(b"a", 1, 5, 100);
        assert!(on_change(&mut index, &mut holder, None, || "k"));
        assert_ne!(holder.expiry_id(), 0);
        assert_eq!(index.next_deadline(), Some(101));
    }

    #[test]
    fn a_grown_lease_keeps_its_entry_and_is_filed_again_when_it_surfaces() {
        let mut index = DeadlineIndex::new();
        let mut lock = Lock::exclusive(b"a", 1, 5, 100);
        let holder = &mut lock.holders_mut()[0];
        on_change(&mut index, holder, None, || "k");
        let entry = holder.expiry_id();
        holder.set_deadline(500);
        assert!(!on_change(&mut index, holder, Some(100), || "k"));
        assert_eq!(holder.expiry_id(), entry);
        let due = index.pop_due(101, 10);
        assert_eq!(due, vec![(entry, "k")]);
        assert_eq!(
            on_surfaced(&mut index, &mut lock, entry, 101, || "k"),
            Surfaced::Refiled
        );
        let refiled = lock.holders()[0].expiry_id();
        assert_ne!(refiled, entry);
        assert_eq!(index.next_deadline(), Some(501));
        assert_eq!(index.pop_due(501, 10), vec![(refiled, "k")]);
        assert_eq!(
            on_surfaced(&mut index, &mut lock, refiled, 501, || "k"),
            Surfaced::Ended
        );
        assert_eq!(
            on_surfaced(&mut index, &mut lock, entry, 501, || "k"),
            Surfaced::Stale
        );
    }

    #[test]
    fn a_shrunk_lease_surfaces_at_its_new_end() {
        let mut index = DeadlineIndex::new();
        let other = index.insert(5_000, "other");
        let mut holder = Holder::new(b"a", 1, 5, 1_000);
        on_change(&mut index, &mut holder, None, || "k");
        let entry = holder.expiry_id();
        holder.set_deadline(10);
        assert!(on_change(&mut index, &mut holder, Some(1_000), || "k"));
        assert_eq!(index.next_deadline(), Some(11));
        // Under a new entry: one live entry, the old item stale.
        assert_ne!(holder.expiry_id(), entry);
        assert!(!index.contains(entry));
        assert_eq!((index.len(), index.queued_items()), (2, 3));
        assert_eq!(index.pop_due(11, 10), vec![(holder.expiry_id(), "k")]);
        assert_eq!(index.pop_due(u64::MAX, 10), vec![(other, "other")]);
    }

    #[test]
    fn an_arrival_files_every_holder_or_only_the_unfiled_and_raises_the_counter() {
        let mut index = DeadlineIndex::new();
        let mut tokens = TokenCounter::default();
        let holders = vec![Holder::new(b"a", 1, 50, 100), Holder::new(b"b", 1, 70, 200)];
        let mut lock = Lock::with_holders(Mode::Shared, None, holders).unwrap();
        assert_eq!(
            on_arrival(&mut tokens, &mut index, &mut lock, &"k", Arrival::All),
            2
        );
        assert_eq!(tokens.last(), 70);
        assert_eq!(index.len(), 2);
        assert_eq!(
            on_arrival(&mut tokens, &mut index, &mut lock, &"k", Arrival::Unfiled),
            0
        );
        index.remove(lock.holders()[1].expiry_id());
        assert_eq!(
            on_arrival(&mut tokens, &mut index, &mut lock, &"k", Arrival::Unfiled),
            1
        );
        assert_eq!(index.len(), 2);
    }
}
