//! A vector and a binary max-heap kept in chunks of at most [`CHUNK`]
//! elements, for the lease index (`deadlines`), whose structures hold one
//! entry per lock: a `Vec` that doubles copies everything it holds in one
//! push (16 ms at a million leases here) and gives memory back by copying
//! again (30 ms in one release). Here no push or pop copies more than the
//! first chunk's quarter: growth adds a chunk, and a chunk that empties is
//! freed once the vector is half a chunk below it (kept as a spare until
//! then, so that a length hovering at a chunk's edge does not free and
//! allocate a chunk per push and pop). The first chunk grows and shrinks as
//! a `Vec` (by doubling, up to [`CHUNK`]), so that a small index stays
//! small, and stays (at most ~64 elements' room) when it empties.

/// Elements per chunk, as a power of two.
const CHUNK_BITS: u32 = 14;
/// Elements per chunk (16,384: 384 KiB of 24-byte slots).
pub const CHUNK: usize = 1 << CHUNK_BITS;
const MASK: usize = CHUNK - 1;

/// The chunk and the place in it of element `i`.
fn split(i: usize) -> (usize, usize) {
    (i >> CHUNK_BITS, i & MASK)
}

#[derive(Debug)]
pub struct ChunkVec<T> {
    /// Every chunk but the last is full; the last is not empty, unless it
    /// is the only one (kept for reuse while small; `clear` frees it).
    chunks: Vec<Vec<T>>,
    len: usize,
    /// The last chunk that emptied, kept (empty) until the vector is half
    /// a chunk below it: a vector whose length hovers at a chunk's edge
    /// (a lock released and one acquired, again and again) would
    /// otherwise free and allocate a whole chunk every time.
    spare: Option<Vec<T>>,
}

impl<T> Default for ChunkVec<T> {
    fn default() -> Self {
        ChunkVec {
            chunks: Vec::new(),
            len: 0,
            spare: None,
        }
    }
}

impl<T> ChunkVec<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        let (chunk, at) = split(i);
        self.chunks.get(chunk)?.get(at)
    }

    #[inline]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        let (chunk, at) = split(i);
        self.chunks.get_mut(chunk)?.get_mut(at)
    }

    pub fn last(&self) -> Option<&T> {
        self.chunks.last()?.last()
    }

    #[inline]
    pub fn push(&mut self, value: T) {
        // The common case: room in the last chunk, no growth.
        if let Some(last) = self.chunks.last_mut() {
            if last.len() < last.capacity() {
                last.push(value);
                self.len += 1;
                return;
            }
        }
        self.push_growing(value);
    }

    /// [`ChunkVec::push`] when the last chunk is full: it grows (the
    /// first), or a chunk is added.
    #[cold]
    fn push_growing(&mut self, value: T) {
        let room = self.chunks.last().is_some_and(|last| last.len() < CHUNK);
        if !room {
            // A new chunk: the first grows by doubling (a small vector
            // stays small), the others are made whole at once.
            self.chunks.push(if self.chunks.is_empty() {
                Vec::new()
            } else {
                self.spare
                    .take()
                    .unwrap_or_else(|| Vec::with_capacity(CHUNK))
            });
        }
        if let Some(last) = self.chunks.last_mut() {
            if last.len() == last.capacity() {
                let grown = (last.capacity() * 2).clamp(4, CHUNK);
                last.reserve_exact(grown - last.len());
            }
            last.push(value);
            self.len += 1;
        }
    }

    pub fn pop(&mut self) -> Option<T> {
        let only = self.chunks.len() == 1;
        let last = self.chunks.last_mut()?;
        let value = last.pop()?;
        self.len -= 1;
        if only {
            // The first chunk gives back what it does not use (a copy of a
            // quarter of a chunk at most), but stays while small: a vector
            // that empties and refills (the free list in steady churn)
            // would otherwise free and allocate it every time.
            if last.capacity() > 64 && last.len() * 4 < last.capacity() {
                last.shrink_to(last.len() * 2);
            }
        } else if last.is_empty() {
            self.spare = self.chunks.pop();
        }
        if self.spare.is_some() && self.chunks.last().map_or(0, Vec::len) < CHUNK / 2 {
            self.spare = None;
        }
        Some(value)
    }

    /// Removes element `i`, the last one taking its place.
    pub fn swap_remove(&mut self, i: usize) -> Option<T> {
        if i >= self.len {
            return None;
        }
        let last = self.len - 1;
        self.swap(i, last);
        self.pop()
    }

    /// Swaps elements `a` and `b` (nothing if either is out of range).
    pub fn swap(&mut self, a: usize, b: usize) {
        if a >= self.len || b >= self.len || a == b {
            return;
        }
        let ((ca, ia), (cb, ib)) = (split(a), split(b));
        if ca == cb {
            if let Some(chunk) = self.chunks.get_mut(ca) {
                chunk.swap(ia, ib);
            }
            return;
        }
        let ((lo, il), (hi, ih)) = if ca < cb {
            ((ca, ia), (cb, ib))
        } else {
            ((cb, ib), (ca, ia))
        };
        let (left, right) = self.chunks.split_at_mut(hi);
        if let (Some(x), Some(y)) = (
            left.get_mut(lo).and_then(|c| c.get_mut(il)),
            right.first_mut().and_then(|c| c.get_mut(ih)),
        ) {
            std::mem::swap(x, y);
        }
    }

    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    /// Keeps the elements for which `keep` is true, in order, in place
    /// (no copy of the whole: a rebuild of the lease index's heap at a
    /// million leases); chunks left empty are freed.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let mut kept = 0;
        for i in 0..self.len {
            if self.get(i).is_some_and(&mut keep) {
                self.swap(kept, i);
                kept += 1;
            }
        }
        self.truncate(kept);
    }

    /// Drops the elements from `n` on.
    pub fn truncate(&mut self, n: usize) {
        if n >= self.len {
            return;
        }
        let (chunk, at) = split(n);
        self.chunks.truncate(chunk + 1);
        if let Some(last) = self.chunks.last_mut() {
            last.truncate(at);
        }
        if at == 0 && chunk > 0 {
            self.chunks.pop();
        }
        self.len = n;
        self.spare = None;
        // An only chunk gives back what it does not use, as in `pop`.
        if let [only] = self.chunks.as_mut_slice() {
            if only.capacity() > 64 && only.len() * 4 < only.capacity() {
                only.shrink_to(only.len() * 2);
            }
        }
    }

    /// Drops the last chunk's elements (at most [`CHUNK`]) and gives its
    /// memory back; returns how many were dropped.
    pub fn drop_last_chunk(&mut self) -> usize {
        let dropped = self.chunks.pop().map_or(0, |chunk| chunk.len());
        self.len -= dropped;
        self.spare = None;
        dropped
    }

    /// Drops every element and gives the memory back.
    pub fn clear(&mut self) {
        self.chunks = Vec::new();
        self.len = 0;
        self.spare = None;
    }

    /// Elements the chunks have room for.
    pub fn capacity(&self) -> usize {
        self.chunks.iter().map(Vec::capacity).sum::<usize>()
            + self.spare.as_ref().map_or(0, Vec::capacity)
    }

    /// The elements, in order, as one `Vec` (the vector is left empty).
    #[cfg(test)]
    pub fn take_all(&mut self) -> Vec<T> {
        let mut all = Vec::with_capacity(self.len);
        for chunk in std::mem::take(&mut self.chunks) {
            all.extend(chunk);
        }
        self.len = 0;
        self.spare = None;
        all
    }
}

/// A binary max-heap (as `std`'s `BinaryHeap`) on a [`ChunkVec`].
#[derive(Debug)]
pub struct ChunkHeap<T> {
    items: ChunkVec<T>,
}

impl<T> Default for ChunkHeap<T> {
    fn default() -> Self {
        ChunkHeap {
            items: ChunkVec::default(),
        }
    }
}

impl<T: Ord + Copy> ChunkHeap<T> {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.items.capacity()
    }

    /// The greatest element.
    pub fn peek(&self) -> Option<&T> {
        self.items.get(0)
    }

    #[inline]
    pub fn push(&mut self, value: T) {
        let at = self.items.len();
        self.items.push(value);
        // The common case (a deadline later than its parent's): no move.
        let parent_is_greater = at == 0
            || self
                .items
                .get((at - 1) / 2)
                .is_some_and(|&above| above >= value);
        if !parent_is_greater {
            self.sift_up(at);
        }
    }

    /// Removes and returns the greatest element.
    pub fn pop(&mut self) -> Option<T> {
        let last = self.items.pop()?;
        let Some(top) = self.items.get_mut(0) else {
            return Some(last);
        };
        let top = std::mem::replace(top, last);
        self.sift_down(0);
        Some(top)
    }

    /// The element at `i` (in the heap's layout: index 0 is the greatest).
    pub fn get(&self, i: usize) -> Option<&T> {
        self.items.get(i)
    }

    /// Removes and returns the element at `i`: the last element takes its
    /// place and moves up or down to where it belongs, in O(log n).
    pub fn remove_at(&mut self, i: usize) -> Option<T> {
        if i >= self.items.len() {
            return None;
        }
        let last = self.items.pop()?;
        if i == self.items.len() {
            return Some(last);
        }
        let removed = std::mem::replace(self.items.get_mut(i)?, last);
        let above_is_less = i > 0
            && self
                .items
                .get((i - 1) / 2)
                .is_some_and(|&above| above < last);
        if above_is_less {
            self.sift_up(i);
        } else {
            self.sift_down(i);
        }
        Some(removed)
    }

    pub fn clear(&mut self) {
        self.items.clear();
    }

    /// The first element above its parent, if any (tests: the heap
    /// property, parent by parent).
    #[cfg(test)]
    pub fn out_of_order(&self) -> Option<usize> {
        (1..self.items.len()).find(|&i| self.items.get((i - 1) / 2) < self.items.get(i))
    }

    /// Drops up to [`CHUNK`] elements, whichever (for a heap whose every
    /// element is to be dropped, a chunk at a time); returns how many.
    pub fn drop_some(&mut self) -> usize {
        self.items.drop_last_chunk()
    }

    /// The elements in no particular order (the heap is left empty).
    #[cfg(test)]
    pub fn take_all(&mut self) -> Vec<T> {
        self.items.take_all()
    }

    /// Keeps the elements for which `keep` is true, in place, in O(n).
    pub fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        self.items.retain(keep);
        for i in (0..self.items.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    /// A heap of `values`, in O(n).
    #[cfg(test)]
    pub fn from_vec(values: Vec<T>) -> Self {
        let mut heap = ChunkHeap::default();
        for value in values {
            heap.items.push(value);
        }
        for i in (0..heap.items.len() / 2).rev() {
            heap.sift_down(i);
        }
        heap
    }

    fn set(&mut self, i: usize, value: T) {
        if let Some(slot) = self.items.get_mut(i) {
            *slot = value;
        }
    }

    /// Moves element `i` up to its place: its parents that are less move
    /// down a level each (a hole moves up, as in `std`'s heap, rather than
    /// swaps), and it is written once.
    fn sift_up(&mut self, mut i: usize) {
        let Some(&value) = self.items.get(i) else {
            return;
        };
        while i > 0 {
            let parent = (i - 1) / 2;
            let Some(&above) = self.items.get(parent) else {
                break;
            };
            if above >= value {
                break;
            }
            self.set(i, above);
            i = parent;
        }
        self.set(i, value);
    }

    /// Moves element `i` down to its place, by the hole as `sift_up`.
    fn sift_down(&mut self, mut i: usize) {
        let Some(&value) = self.items.get(i) else {
            return;
        };
        let len = self.items.len();
        loop {
            let left = i.saturating_mul(2).saturating_add(1);
            let Some(&left_value) = self.items.get(left) else {
                break;
            };
            let (child, child_value) = match self.items.get(left + 1) {
                Some(&right_value) if left + 1 < len && left_value < right_value => {
                    (left + 1, right_value)
                }
                _ => (left, left_value),
            };
            if child_value <= value {
                break;
            }
            self.set(i, child_value);
            i = child;
        }
        self.set(i, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BinaryHeap;

    #[test]
    fn a_chunk_vec_is_a_vec_across_chunks() {
        let mut v = ChunkVec::default();
        let n = 3 * CHUNK + 17;
        for i in 0..n {
            v.push(i);
        }
        assert_eq!(v.len(), n);
        assert_eq!(v.get(CHUNK), Some(&CHUNK));
        assert_eq!(v.get(n), None);
        assert_eq!(v.last(), Some(&(n - 1)));
        v.swap(1, 2 * CHUNK + 5);
        assert_eq!(
            (v.get(1), v.get(2 * CHUNK + 5)),
            (Some(&(2 * CHUNK + 5)), Some(&1))
        );
        v.swap(1, 2 * CHUNK + 5);
        assert_eq!(v.swap_remove(3), Some(3));
        assert_eq!(v.get(3), Some(&(n - 1)));
        assert_eq!(v.swap_remove(n), None);
        // Whole chunks only but the first, and emptied chunks freed.
        assert!(v.capacity() < n + CHUNK);
        while v.len() > 100 {
            v.pop();
        }
        assert!(v.capacity() <= 400, "{}", v.capacity());
        let all = v.take_all();
        assert_eq!(all.len(), 100);
        assert_eq!(all.first(), Some(&0));
        for i in 0..CHUNK + 10 {
            v.push(i);
        }
        assert_eq!(v.drop_last_chunk(), 10);
        assert_eq!(v.drop_last_chunk(), CHUNK);
        assert_eq!(v.drop_last_chunk(), 0);
        assert!(v.is_empty() && v.capacity() == 0);
        assert!(v.is_empty() && v.capacity() == 0);
    }

    /// A lock released and one acquired, again and again, empties and
    /// refills the lease index's free list (and a lone spilled key's
    /// vector): the only chunk is kept while it is small, or every
    /// release and acquire would free and allocate it (one `malloc` and
    /// one `free` per pair, ~2.8x the index's instructions under
    /// callgrind).
    #[test]
    fn a_vector_emptied_and_refilled_keeps_its_small_first_chunk() {
        let mut v = ChunkVec::default();
        v.push(1u32);
        assert_eq!(v.pop(), Some(1));
        assert!(v.is_empty() && v.get(0).is_none() && v.last().is_none());
        assert!(v.capacity() > 0, "the first chunk was freed");
        // A big first chunk still goes back as it empties.
        for i in 0..CHUNK {
            v.push(i as u32);
        }
        while v.pop().is_some() {}
        assert!(v.capacity() <= 64, "{}", v.capacity());
        v.push(7);
        assert_eq!((v.len(), v.get(0), v.last()), (1, Some(&7), Some(&7)));
        v.clear();
        assert_eq!(v.capacity(), 0);
    }

    /// A vector hovering at a chunk's edge keeps the chunk above it: no
    /// chunk freed and allocated per push and pop (LIFO churn of 16,385
    /// leases with long names: 244 ns per release and acquisition against
    /// 103 ns at 20,000, in a probe with the system allocator).
    #[test]
    fn a_vector_at_a_chunk_edge_keeps_its_top_chunk() {
        let mut v = ChunkVec::default();
        for i in 0..=CHUNK {
            v.push(i);
        }
        let room = v.capacity();
        for _ in 0..10 {
            assert_eq!(v.pop(), Some(CHUNK));
            assert_eq!(v.capacity(), room, "the top chunk was freed");
            v.push(CHUNK);
        }
        assert_eq!(v.get(CHUNK), Some(&CHUNK));
        // Half a chunk below, it goes.
        for _ in 0..=CHUNK / 2 + 1 {
            v.pop();
        }
        assert_eq!(v.capacity(), CHUNK);
        assert_eq!(v.last(), Some(&(CHUNK / 2 - 2)));
    }

    #[test]
    fn a_chunk_heap_orders_as_binary_heap_does() {
        let mut ours = ChunkHeap::default();
        let mut theirs = BinaryHeap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for round in 0..(2 * CHUNK + 300) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let value = x % 50_000;
            ours.push(value);
            theirs.push(value);
            if round % 3 == 0 {
                assert_eq!(ours.pop(), theirs.pop());
            }
            assert_eq!(ours.peek(), theirs.peek());
        }
        // Retained in place: still a heap, with what was kept.
        ours.retain(|value| value % 7 != 0);
        theirs.retain(|value| value % 7 != 0);
        assert_eq!(ours.peek(), theirs.peek());
        let rebuilt = ChunkHeap::from_vec(ours.take_all());
        let mut ours = rebuilt;
        assert_eq!(ours.len(), theirs.len());
        while let Some(top) = theirs.pop() {
            assert_eq!(ours.pop(), Some(top));
        }
        assert_eq!(ours.pop(), None);
        assert!(ours.is_empty());
    }

    /// Removing elements at any place keeps the heap a heap holding
    /// exactly the others (against a model), across chunks.
    #[test]
    fn a_chunk_heap_removes_at_any_place() {
        let mut next = crate::testing::below(0x7e57_ab1e_0bad_cafe);
        let mut heap = ChunkHeap::default();
        let mut model: Vec<u64> = Vec::new();
        for round in 0..6 {
            for _ in 0..CHUNK + 500 {
                let value = next(1_000_000);
                heap.push(value);
                model.push(value);
            }
            for _ in 0..(CHUNK / 2) {
                let at = next(heap.len() as u64 + 3) as usize;
                let removed = heap.remove_at(at);
                match removed {
                    Some(value) => {
                        let place = model.iter().position(|&v| v == value).unwrap();
                        model.swap_remove(place);
                    }
                    None => assert!(at >= heap.len(), "round {round}"),
                }
            }
            // The heap property, parent by parent.
            if let Some(i) = heap.out_of_order() {
                panic!("round {round}: item {i} above its parent");
            }
            assert_eq!(heap.len(), model.len());
        }
        model.sort_unstable_by(|a, b| b.cmp(a));
        let mut popped = Vec::new();
        while let Some(value) = heap.pop() {
            popped.push(value);
        }
        assert_eq!(popped, model);
        assert_eq!(heap.remove_at(0), None);
    }
}
