//! Per-key FIFO queues of clients waiting for a lock (`LOCK.ACQUIRE … WAIT`).
//! The first waiter of a key is granted the lock the moment it is free;
//! waiters that time out or disconnect leave their queue without a trace.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

#[derive(Debug)]
pub struct WaitQueues<K, W> {
    queues: HashMap<K, VecDeque<W>>,
}

impl<K, W> Default for WaitQueues<K, W> {
    fn default() -> Self {
        WaitQueues {
            queues: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash + Clone, W> WaitQueues<K, W> {
    /// Appends a waiter at the back of `key`'s queue.
    pub fn push(&mut self, key: K, waiter: W) {
        self.queues.entry(key).or_default().push_back(waiter);
    }

    /// Takes the first waiter of `key`'s queue.
    pub fn pop_front(&mut self, key: &K) -> Option<W> {
        let queue = self.queues.get_mut(key)?;
        let waiter = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(key);
        }
        waiter
    }

    /// Puts a waiter back at the front (a grant that could not happen yet).
    pub fn push_front(&mut self, key: K, waiter: W) {
        self.queues.entry(key).or_default().push_front(waiter);
    }

    /// Removes the first waiter of `key`'s queue that matches.
    pub fn remove(&mut self, key: &K, mut matches: impl FnMut(&W) -> bool) -> Option<W> {
        let queue = self.queues.get_mut(key)?;
        let index = queue.iter().position(&mut matches)?;
        let waiter = queue.remove(index);
        if queue.is_empty() {
            self.queues.remove(key);
        }
        waiter
    }

    /// How many wait for `key`.
    pub fn len(&self, key: &K) -> usize {
        self.queues.get(key).map_or(0, VecDeque::len)
    }

    /// Whether anyone waits for `key`.
    pub fn has_waiters(&self, key: &K) -> bool {
        self.queues.contains_key(key)
    }

    /// Every key that has waiters and matches.
    pub fn keys_where(&self, mut matches: impl FnMut(&K) -> bool) -> Vec<K> {
        self.queues
            .keys()
            .filter(|key| matches(key))
            .cloned()
            .collect()
    }

    /// Total waiters over all keys.
    /// Nobody waits for anything (a queue is dropped when it empties): the
    /// check every release makes, so O(1).
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    pub fn total(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_in_first_out_per_key() {
        let mut queues = WaitQueues::default();
        for waiter in 1..=20 {
            queues.push("a", waiter);
        }
        queues.push("b", 100);
        let order: Vec<i32> = std::iter::from_fn(|| queues.pop_front(&"a")).collect();
        assert_eq!(order, (1..=20).collect::<Vec<_>>());
        assert!(!queues.has_waiters(&"a"));
        assert_eq!(queues.len(&"b"), 1);
    }

    #[test]
    fn removal_leaves_no_residue() {
        let mut queues = WaitQueues::default();
        queues.push("a", 1);
        queues.push("a", 2);
        queues.push("a", 3);
        assert_eq!(queues.remove(&"a", |w| *w == 2), Some(2));
        assert_eq!(queues.remove(&"a", |w| *w == 2), None);
        assert_eq!(queues.pop_front(&"a"), Some(1));
        assert!(!queues.is_empty());
        assert_eq!(queues.remove(&"a", |w| *w == 3), Some(3));
        assert_eq!(queues.total(), 0);
        assert!(queues.is_empty(), "an emptied queue must not linger");
        assert!(queues.keys_where(|_| true).is_empty());
    }

    #[test]
    fn push_front_keeps_the_head() {
        let mut queues = WaitQueues::default();
        queues.push("a", 1);
        queues.push("a", 2);
        let head = queues.pop_front(&"a");
        assert_eq!(head, Some(1));
        queues.push_front("a", 1);
        assert_eq!(queues.pop_front(&"a"), Some(1));
    }
}
