//! The index of lease deadlines, earliest first, so that one timer armed for
//! the earliest deadline can remove every lock whose lease ended, within
//! milliseconds and whether or not anyone touches the key.
//!
//! Each entry has an id, which the lock keeps ([`crate::Lock::expiry_id`]):
//! the entry is found again by `(deadline, id)`, integers only, so a renewal
//! or a release moves or drops it without comparing key names. Entries may
//! still go stale (a key renamed or moved: its lock gets a new entry under
//! the new name); whoever pops an entry checks that the lock under that name
//! still carries the entry's id before acting on it.

use std::collections::BTreeMap;

#[derive(Debug)]
pub struct DeadlineIndex<K> {
    entries: BTreeMap<(u64, u64), K>,
    last_id: u64,
}

impl<K> Default for DeadlineIndex<K> {
    fn default() -> Self {
        DeadlineIndex {
            entries: BTreeMap::new(),
            last_id: 0,
        }
    }
}

impl<K> DeadlineIndex<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `key`'s lease ends at `deadline`; returns the entry's id
    /// (never 0, which locks use for "not indexed").
    pub fn insert(&mut self, deadline: u64, key: K) -> u64 {
        self.last_id += 1;
        self.entries.insert((deadline, self.last_id), key);
        self.last_id
    }

    /// Drops entry `id` at `deadline` (the lock was released or deleted).
    pub fn remove(&mut self, deadline: u64, id: u64) -> Option<K> {
        self.entries.remove(&(deadline, id))
    }

    /// Moves entry `id` from `old` to `new` (a renewed lease). False if there
    /// is no such entry.
    pub fn reschedule(&mut self, old: u64, id: u64, new: u64) -> bool {
        if old == new {
            return self.entries.contains_key(&(old, id));
        }
        match self.entries.remove(&(old, id)) {
            Some(key) => {
                self.entries.insert((new, id), key);
                true
            }
            None => false,
        }
    }

    /// The earliest deadline, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        self.entries
            .first_key_value()
            .map(|((deadline, _), _)| *deadline)
    }

    /// Removes and returns up to `limit` entries whose deadline is at or
    /// before `now`, earliest first, as `(id, key)`.
    pub fn pop_due(&mut self, now: u64, limit: usize) -> Vec<(u64, K)> {
        let mut due = Vec::new();
        while due.len() < limit {
            match self.entries.first_key_value() {
                Some(((deadline, _), _)) if *deadline <= now => {}
                _ => break,
            }
            if let Some(((_, id), key)) = self.entries.pop_first() {
                due.push((id, key));
            }
        }
        due
    }

    /// Rewrites or drops every key: `map` returns the new key, or `None` to
    /// drop the entry (used for `FLUSHDB` and `SWAPDB`).
    pub fn remap(&mut self, mut map: impl FnMut(&K) -> Option<K>) {
        let entries = std::mem::take(&mut self.entries);
        self.entries = entries
            .into_iter()
            .filter_map(|(at, key)| Some((at, map(&key)?)))
            .collect();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_due_entries_in_deadline_order_up_to_a_limit() {
        let mut index = DeadlineIndex::new();
        let c = index.insert(30, "c");
        let a = index.insert(10, "a");
        let b = index.insert(20, "b");
        index.insert(40, "d");
        assert_eq!(index.next_deadline(), Some(10));
        assert_eq!(index.pop_due(30, 2), vec![(a, "a"), (b, "b")]);
        assert_eq!(index.pop_due(30, 10), vec![(c, "c")]);
        assert_eq!(index.pop_due(30, 10), vec![]);
        assert_eq!(index.next_deadline(), Some(40));
    }

    #[test]
    fn ids_are_unique_and_never_zero() {
        let mut index = DeadlineIndex::new();
        let first = index.insert(5, ());
        let second = index.insert(5, ());
        assert!(first != 0 && second != 0 && first != second);
        assert_eq!(index.len(), 2, "two locks may share a deadline");
    }

    #[test]
    fn reschedule_and_remove_by_deadline_and_id() {
        let mut index = DeadlineIndex::new();
        let a = index.insert(10, "a");
        let b = index.insert(60, "b");
        assert!(index.reschedule(10, a, 50));
        assert!(!index.reschedule(10, a, 70), "the old place is gone");
        assert!(index.reschedule(50, a, 50));
        assert_eq!(index.pop_due(49, 10), vec![]);
        assert_eq!(index.remove(60, b), Some("b"));
        assert_eq!(index.remove(60, b), None);
        assert_eq!(index.pop_due(50, 10), vec![(a, "a")]);
        assert!(index.is_empty());
    }

    #[test]
    fn remap_swaps_and_drops() {
        let mut index = DeadlineIndex::new();
        let x = index.insert(1, (0, "x"));
        let y = index.insert(2, (1, "y"));
        index.insert(3, (2, "z"));
        index.remap(|&(db, key)| match db {
            0 => Some((1, key)),
            1 => Some((0, key)),
            _ => None,
        });
        assert_eq!(index.pop_due(10, 10), vec![(x, (1, "x")), (y, (0, "y"))]);
    }
}
