//! Per-key FIFO queues of clients waiting for a lock (`LOCK.ACQUIRE … WAIT`).
//! The first waiter of a key is granted the lock the moment it is free;
//! waiters that time out or disconnect leave their queue without a trace.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// A waiter's place in its queue: removing it by place is O(log n), so a
/// mass disconnect costs O(n log n), not O(n²).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place(i64);

#[derive(Debug)]
struct Queue<W> {
    /// Waiters by place: the first entry is the head.
    waiters: BTreeMap<i64, W>,
    /// The next place at the back (counts up) and at the front (counts down).
    back: i64,
    front: i64,
}

impl<W> Default for Queue<W> {
    fn default() -> Self {
        Queue {
            waiters: BTreeMap::new(),
            back: 0,
            front: -1,
        }
    }
}

#[derive(Debug)]
pub struct WaitQueues<K, W> {
    queues: HashMap<K, Queue<W>>,
    /// Waiters over all keys.
    total: usize,
}

impl<K, W> Default for WaitQueues<K, W> {
    fn default() -> Self {
        WaitQueues {
            queues: HashMap::new(),
            total: 0,
        }
    }
}

impl<K: Eq + Hash + Clone, W> WaitQueues<K, W> {
    /// Appends a waiter at the back of `key`'s queue; returns its place.
    pub fn push(&mut self, key: K, waiter: W) -> Place {
        let queue = self.queues.entry(key).or_default();
        let place = queue.back;
        queue.back = queue.back.saturating_add(1);
        queue.waiters.insert(place, waiter);
        self.total += 1;
        Place(place)
    }

    /// Puts a waiter back at the front (a grant that could not happen yet);
    /// returns its new place.
    pub fn push_front(&mut self, key: K, waiter: W) -> Place {
        let queue = self.queues.entry(key).or_default();
        let place = queue.front;
        queue.front = queue.front.saturating_sub(1);
        queue.waiters.insert(place, waiter);
        self.total += 1;
        Place(place)
    }

    /// Takes the first waiter of `key`'s queue.
    pub fn pop_front(&mut self, key: &K) -> Option<W> {
        let queue = self.queues.get_mut(key)?;
        let (_, waiter) = queue.waiters.pop_first()?;
        self.taken(key);
        Some(waiter)
    }

    /// The first waiter of `key`'s queue, left in place.
    pub fn front(&self, key: &K) -> Option<&W> {
        self.queues
            .get(key)?
            .waiters
            .first_key_value()
            .map(|(_, w)| w)
    }

    /// Removes the waiter at `place` in `key`'s queue.
    pub fn remove(&mut self, key: &K, place: Place) -> Option<W> {
        let waiter = self.queues.get_mut(key)?.waiters.remove(&place.0)?;
        self.taken(key);
        Some(waiter)
    }

    /// Removes the waiter at `place` in `key`'s queue (its wait ended
    /// without a grant: timed out, disconnected, unblocked), and says
    /// whether the queue must be served again: the head left and others
    /// wait behind it. The new head may be grantable now, where the old one
    /// was not (readers queued behind a writer, compatible with the
    /// readers holding the lock), and nothing else would serve it before
    /// the lock changes. A waiter that was not the head changes nothing:
    /// the head still blocks everyone behind it.
    pub fn leave(&mut self, key: &K, place: Place) -> Option<(W, bool)> {
        let queue = self.queues.get_mut(key)?;
        let was_head = queue.waiters.first_key_value().map(|(p, _)| *p) == Some(place.0);
        let waiter = queue.waiters.remove(&place.0)?;
        let serve_again = was_head && !queue.waiters.is_empty();
        self.taken(key);
        Some((waiter, serve_again))
    }

    /// One waiter left `key`'s queue: drop the queue once it is empty.
    fn taken(&mut self, key: &K) {
        self.total = self.total.saturating_sub(1);
        if self.queues.get(key).is_some_and(|q| q.waiters.is_empty()) {
            self.queues.remove(key);
        }
    }

    /// How many wait for `key`.
    pub fn len(&self, key: &K) -> usize {
        self.queues.get(key).map_or(0, |q| q.waiters.len())
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

    /// Nobody waits for anything (a queue is dropped when it empties): the
    /// check every release makes, so O(1).
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Total waiters over all keys, O(1).
    pub fn total(&self) -> usize {
        self.total
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
        let two = queues.push("a", 2);
        let three = queues.push("a", 3);
        assert_eq!(queues.remove(&"a", two), Some(2));
        assert_eq!(queues.remove(&"a", two), None);
        assert_eq!(queues.pop_front(&"a"), Some(1));
        assert!(!queues.is_empty());
        assert_eq!(queues.remove(&"a", three), Some(3));
        assert_eq!(queues.total(), 0);
        assert!(queues.is_empty(), "an emptied queue must not linger");
        assert!(queues.keys_where(|_| true).is_empty());
    }

    #[test]
    fn a_waiter_put_back_at_the_front_is_removed_by_its_new_place() {
        let mut queues = WaitQueues::default();
        queues.push("a", 1);
        queues.push("a", 2);
        let head = queues.pop_front(&"a").unwrap();
        let place = queues.push_front("a", head);
        queues.push_front("a", 0);
        assert_eq!(queues.remove(&"a", place), Some(1));
        assert_eq!(queues.pop_front(&"a"), Some(0));
        assert_eq!(queues.pop_front(&"a"), Some(2));
        assert_eq!(queues.total(), 0);
    }

    #[test]
    fn a_head_that_leaves_with_others_behind_it_has_the_queue_served_again() {
        let mut queues = WaitQueues::default();
        let one = queues.push("a", 1);
        let two = queues.push("a", 2);
        let three = queues.push("a", 3);
        assert_eq!(queues.leave(&"a", two), Some((2, false)), "not the head");
        assert_eq!(
            queues.leave(&"a", one),
            Some((1, true)),
            "3 is the head now"
        );
        assert_eq!(queues.leave(&"a", one), None);
        assert_eq!(queues.leave(&"a", three), Some((3, false)), "nobody behind");
        assert!(queues.is_empty());
        assert_eq!(queues.total(), 0);
    }

    #[test]
    fn a_mass_removal_is_not_quadratic() {
        // 200,000 waiters on one key removed from the back: with a linear
        // search per removal this is 2·10^10 steps; by place it is instant.
        let mut queues = WaitQueues::default();
        let places: Vec<Place> = (0..200_000).map(|w| queues.push("a", w)).collect();
        for (w, place) in places.iter().enumerate().rev() {
            assert_eq!(queues.remove(&"a", *place), Some(w));
        }
        assert!(queues.is_empty());
        assert_eq!(queues.total(), 0);
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
