//! The index of lease deadlines, earliest first, so that one timer armed for
//! the earliest deadline can remove every lock whose lease ended, within
//! milliseconds and whether or not anyone touches the key.
//!
//! Entries may go stale (a key renamed, deleted by `DEL`, or overwritten):
//! whoever pops an entry checks the key before acting on it, so a stale entry
//! costs a lookup, never a wrong deletion.

use std::collections::BTreeSet;

#[derive(Debug)]
pub struct DeadlineIndex<K: Ord> {
    entries: BTreeSet<(u64, K)>,
}

impl<K: Ord> Default for DeadlineIndex<K> {
    fn default() -> Self {
        DeadlineIndex {
            entries: BTreeSet::new(),
        }
    }
}

impl<K: Ord + Clone> DeadlineIndex<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `key`'s lease ends at `deadline`.
    pub fn insert(&mut self, deadline: u64, key: K) {
        self.entries.insert((deadline, key));
    }

    /// Forgets `key`'s entry for `deadline` (after a release, an extension or
    /// a deletion).
    pub fn remove(&mut self, deadline: u64, key: K) {
        self.entries.remove(&(deadline, key));
    }

    /// Moves `key` from `old` to `new` (a renewed lease).
    pub fn reschedule(&mut self, old: Option<u64>, new: u64, key: K) {
        if let Some(old) = old {
            if old == new {
                return;
            }
            self.entries.remove(&(old, key.clone()));
        }
        self.entries.insert((new, key));
    }

    /// The earliest deadline, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        self.entries.first().map(|(deadline, _)| *deadline)
    }

    /// Removes and returns up to `limit` keys whose deadline is at or before
    /// `now`, earliest first.
    pub fn pop_due(&mut self, now: u64, limit: usize) -> Vec<K> {
        let mut due = Vec::new();
        while due.len() < limit {
            match self.entries.first() {
                Some((deadline, _)) if *deadline <= now => {}
                _ => break,
            }
            if let Some((_, key)) = self.entries.pop_first() {
                due.push(key);
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
            .filter_map(|(deadline, key)| Some((deadline, map(&key)?)))
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
    fn pops_due_keys_in_deadline_order_up_to_a_limit() {
        let mut index = DeadlineIndex::new();
        index.insert(30, "c");
        index.insert(10, "a");
        index.insert(20, "b");
        index.insert(40, "d");
        assert_eq!(index.next_deadline(), Some(10));
        assert_eq!(index.pop_due(30, 2), vec!["a", "b"]);
        assert_eq!(index.pop_due(30, 10), vec!["c"]);
        assert_eq!(index.pop_due(30, 10), Vec::<&str>::new());
        assert_eq!(index.next_deadline(), Some(40));
    }

    #[test]
    fn reschedule_and_remove() {
        let mut index = DeadlineIndex::new();
        index.insert(10, "a");
        index.reschedule(Some(10), 50, "a");
        index.reschedule(None, 60, "b");
        assert_eq!(index.pop_due(49, 10), Vec::<&str>::new());
        index.remove(60, "b");
        assert_eq!(index.len(), 1);
        assert_eq!(index.pop_due(50, 10), vec!["a"]);
        assert!(index.is_empty());
    }

    #[test]
    fn remap_swaps_and_drops() {
        let mut index = DeadlineIndex::new();
        index.insert(1, (0, "x"));
        index.insert(2, (1, "y"));
        index.insert(3, (2, "z"));
        index.remap(|&(db, key)| match db {
            0 => Some((1, key)),
            1 => Some((0, key)),
            _ => None,
        });
        assert_eq!(index.pop_due(10, 10), vec![(1, "x"), (0, "y")]);
    }
}
