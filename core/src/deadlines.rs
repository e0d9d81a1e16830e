//! The index of lease deadlines, earliest first, so that one timer armed for
//! the earliest deadline can remove every lock whose lease ended, within
//! milliseconds and whether or not anyone touches the key.
//!
//! It is built for the hot paths of a lock server, measured with a million
//! live locks (see BENCHMARKS.md): a release must drop its entry, and a
//! re-entry or an extension must not search a big ordered tree whose nodes
//! are cold in the cache (a `BTreeMap` keyed by deadline cost a quarter of
//! `LOCK.RELEASE`'s time). So:
//!
//! - Entries live in a slab. An entry's id, which the lock keeps
//!   ([`crate::Lock::expiry_id`]), is its slot and the slot's generation:
//!   removal goes straight to the slot, O(1), and an id whose slot was freed
//!   and reused no longer matches (the generation moved on).
//! - Order comes from a binary min-heap of `(deadline, slot, generation)`.
//!   Leases are mostly taken with similar TTLs, so a new deadline is the
//!   largest and its push stops at once.
//! - An entry knows nothing of its lease. Its heap items are promises to
//!   look at the lock no later than their deadlines. A lease that grows (a
//!   re-entry, an extension, a watchdog renewal) does not touch the index:
//!   its item surfaces at the old deadline, and the caller, seeing that the
//!   lease has not ended, files the lock again. That is one heap push per
//!   TTL instead of a write to a cold slot per renewal (9% of a re-entry).
//!   A lease that shrinks is filed anew under a new id
//!   ([`DeadlineIndex::refile`]), its old item stale like a released
//!   lock's. So a live entry has one heap item, and every other item is
//!   stale: the sweep can remove it.
//! - Removal does not touch the heap. A removed entry's items go stale and
//!   are skipped when they surface. Stale items are bounded: once they
//!   outnumber the live entries (plus a slack), the heap is rebuilt in O(n),
//!   which is amortised O(1) per removal (but one removal in a million
//!   pays it: the one O(n) step left).
//! - The slab, the heap and the spilled keys are kept in chunks
//!   (`chunked.rs`): growth adds a chunk rather than copying a
//!   million entries, and memory goes back after a spike a chunk at a time
//!   ([`DeadlineIndex::trim`], which the module's timer runs within its
//!   budget), never all at once (freeing an index of a million leases in
//!   one call held Redis 13 ms). The free list, nearly empty in steady
//!   state and 4 bytes a slot after a spike, is a `std` heap (cheaper on
//!   the hot path), dropped whole once only given-back slots are in it.
//!
//! Entries may still go stale as far as the caller is concerned (the lock
//! under the key name was replaced behind the index's back): whoever pops an
//! entry checks that the lock under that name carries the entry's id before
//! acting on it.

use std::cmp::Reverse;

use std::collections::BinaryHeap;

use crate::chunked::{ChunkHeap, ChunkVec};

/// Stale heap items tolerated beyond the number of live entries before the
/// heap is rebuilt (in one call, O(n): a backstop that the sweep keeps
/// from being reached, see [`DeadlineIndex::trim`]).
const STALE_SLACK: usize = 1024;

/// Heap items the sweep looks at per [`DeadlineIndex::trim`] step: it
/// starts when stale items exceed half the live entries (and the slack),
/// well before the rebuild's bound of as many stale items as live ones.
/// (At a million leases, the rebuild took ~22 ms in one release.)
const SWEEP_STEP: usize = 1024;

/// Free slots at the top of the slab given back per removal at most.
const SHRINK_STEP: usize = crate::chunked::CHUNK;

/// Bytes of a key kept inside its slot.
pub const PACKED_KEY: usize = 19;

/// A key the index can keep inside a slot, in [`PACKED_KEY`] bytes, when it
/// is short enough (a lock's name up to 17 bytes in a database below 255);
/// other keys are kept beside the slab. The defaults keep every key beside.
pub trait SlabKey: Sized {
    /// The key in its packed form, if it has one.
    fn pack(&self) -> Option<[u8; PACKED_KEY]> {
        None
    }

    /// The key [`SlabKey::pack`] packed.
    fn unpack(packed: &[u8; PACKED_KEY]) -> Option<Self> {
        let _ = packed;
        None
    }
}

impl SlabKey for u64 {
    fn pack(&self) -> Option<[u8; PACKED_KEY]> {
        let mut packed = [0; PACKED_KEY];
        packed.get_mut(..8)?.copy_from_slice(&self.to_le_bytes());
        Some(packed)
    }

    fn unpack(packed: &[u8; PACKED_KEY]) -> Option<Self> {
        Some(u64::from_le_bytes(packed.get(..8)?.try_into().ok()?))
    }
}

impl SlabKey for usize {
    fn pack(&self) -> Option<[u8; PACKED_KEY]> {
        u64::try_from(*self).ok()?.pack()
    }

    fn unpack(packed: &[u8; PACKED_KEY]) -> Option<Self> {
        usize::try_from(u64::unpack(packed)?).ok()
    }
}

/// A slot's state.
const LIVE: u8 = 1;
/// The live entry's key is in `spilled`; the slot holds its place there.
const SPILLED: u8 = 2;

/// 24 bytes: a key of a lock name up to 17 bytes lives here whole.
#[derive(Debug)]
struct Slot {
    flags: u8,
    key: [u8; PACKED_KEY],
    /// Bumped whenever the slot is freed, so old ids stop matching. Never 0.
    generation: u32,
}

impl Slot {
    /// The slot holds a live entry of this generation.
    fn holds(&self, generation: u32) -> bool {
        self.generation == generation && self.flags & LIVE != 0
    }
}

/// A heap item, earliest deadline on top: 12 bytes (4 fewer per lock than
/// a `(u64, u32, u32)`), as `(stamp >> 32, stamp as u32, slot)` where the
/// stamp is the deadline's low [`DEADLINE_BITS`] bits above the low
/// [`GENERATION_BITS`] bits of the slot's generation, so that the tuple's
/// order is the deadlines' order.
///
/// A monotonic millisecond fits 44 bits for 557 years; a later deadline is
/// filed at the latest one that fits (early, never late: the caller files
/// it again). Twenty bits of the generation tell a stale item from its
/// slot's live entry unless the slot was reused a multiple of 2^20 times
/// while the stale item waited: then the live entry surfaces early at the
/// stale item's deadline, and the caller files it again, as after a
/// renewal. An item never makes an entry surface late or not at all: the
/// entry's own item is still there.
type Item = Reverse<(u32, u32, u32)>;

const GENERATION_BITS: u32 = 20;
const GENERATION_MASK: u32 = (1 << GENERATION_BITS) - 1;
const DEADLINE_BITS: u32 = 64 - GENERATION_BITS;
/// The latest deadline the index files exactly (2^44 − 1 ms, 557 years).
pub const LATEST_DEADLINE: u64 = (1 << DEADLINE_BITS) - 1;

fn item(deadline: u64, slot: u32, generation: u32) -> Item {
    let stamp = (deadline.min(LATEST_DEADLINE) << GENERATION_BITS)
        | u64::from(generation & GENERATION_MASK);
    // Truncation is the point: the stamp's two halves.
    Reverse(((stamp >> 32) as u32, stamp as u32, slot))
}

/// An item's `(deadline, slot, low bits of the generation)`.
fn parts_of_item(item: &Item) -> (u64, u32, u32) {
    let Reverse((high, low, slot)) = *item;
    let stamp = (u64::from(high) << 32) | u64::from(low);
    (stamp >> GENERATION_BITS, slot, low & GENERATION_MASK)
}

#[derive(Debug)]
pub struct DeadlineIndex<K> {
    /// In chunks (`chunked`), as are the others: no insertion or removal
    /// copies the index (a `Vec` doubling at a million leases stalled the
    /// server 16 ms in one insertion, and its shrink 30 ms in one removal).
    slots: ChunkVec<Slot>,
    /// The keys of live slots that do not pack, each with its slot, with
    /// no gaps: a spilled slot's bytes hold the key's place here, and a
    /// removal moves the last key into the place it frees. O(1) in and
    /// out, no hashing, and the memory goes back with the keys.
    spilled: ChunkVec<(u32, K)>,
    /// Free slots, lowest first: new entries fill the bottom of the slab,
    /// so that after a spike the top empties and is given back. Entries at
    /// or above `slots.len()` are left over from a shrink: `free_stale` of
    /// them, all above every other entry, so the lowest entry is a free
    /// slot unless they are all that is left (then the list is dropped at
    /// once rather than popped one by one).
    free: BinaryHeap<Reverse<u32>>,
    free_stale: usize,
    heap: ChunkHeap<Item>,
    live: usize,
    /// The generation a slot made again after a shrink starts at: above
    /// every generation a given-back slot had, so no old id matches it.
    generation_floor: u32,
    /// A sweep of stale items is under way (a pass over the heap, from
    /// `sweep_at`, a step per [`DeadlineIndex::trim`]).
    sweeping: bool,
    sweep_at: usize,
    /// Stale items the pass under way removed.
    sweep_removed: usize,
    /// Items beyond the live entries that the last pass left because it
    /// could not remove them (they match a live entry: a slot made again
    /// at a generation 2^20 on, see [`Item`]): a sweep starts again only
    /// once stale items come on top of them, so that such items are not
    /// swept pass after pass for nothing. 0 after a pass that did its
    /// work.
    unswept: usize,
    /// A release started a sweep since the caller last asked
    /// ([`DeadlineIndex::take_wake`]): the timer that runs trims is to be
    /// armed.
    wake: bool,
    /// Whole rebuilds of the heap by a removal, the backstop (tests: the
    /// sweep keeps them away).
    rebuilds: u64,
}

impl<K> Default for DeadlineIndex<K> {
    fn default() -> Self {
        DeadlineIndex {
            slots: ChunkVec::default(),
            spilled: ChunkVec::default(),
            free: BinaryHeap::new(),
            free_stale: 0,
            heap: ChunkHeap::default(),
            live: 0,
            generation_floor: 1,
            sweeping: false,
            sweep_at: 0,
            sweep_removed: 0,
            unswept: 0,
            wake: false,
            rebuilds: 0,
        }
    }
}

/// A spilled slot's bytes: its key's place in `spilled`.
fn spilled_place(place: u32) -> [u8; PACKED_KEY] {
    let mut packed = [0; PACKED_KEY];
    if let Some(bytes) = packed.first_chunk_mut::<4>() {
        *bytes = place.to_le_bytes();
    }
    packed
}

fn place_of_spilled(packed: &[u8; PACKED_KEY]) -> Option<usize> {
    usize::try_from(u32::from_le_bytes(*packed.first_chunk::<4>()?)).ok()
}

fn id_of(slot: u32, generation: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(slot)
}

fn parts_of(id: u64) -> (u32, u32) {
    // Truncation is the point: the low half is the slot, the high half the
    // generation.
    (id as u32, (id >> 32) as u32)
}

impl<K: SlabKey> DeadlineIndex<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that `key`'s lease ends at `deadline`; returns the entry's id
    /// (never 0, which locks use for "not indexed").
    pub fn insert(&mut self, deadline: u64, key: K) -> u64 {
        let slot = match self.take_free() {
            Some(slot) => slot,
            None => {
                let Ok(slot) = u32::try_from(self.slots.len()) else {
                    // Four billion live leases: beyond any Redis's memory.
                    return 0;
                };
                self.slots.push(Slot {
                    flags: 0,
                    key: [0; PACKED_KEY],
                    generation: self.generation_floor,
                });
                slot
            }
        };
        let Some((flags, packed)) = self.place_key(slot, key) else {
            self.free.push(Reverse(slot));
            return 0;
        };
        let Some(entry) = self.slots.get_mut(slot as usize) else {
            return 0;
        };
        entry.flags = flags;
        entry.key = packed;
        let generation = entry.generation;
        self.heap.push(item(deadline, slot, generation));
        self.live += 1;
        id_of(slot, generation)
    }

    /// The live slot entry `id` names, if any.
    fn slot_mut(&mut self, id: u64) -> Option<&mut Slot> {
        let (slot, generation) = parts_of(id);
        self.slots
            .get_mut(slot as usize)
            .filter(|entry| entry.holds(generation))
    }

    fn is_live(&self, slot: u32, generation: u32) -> bool {
        self.slots
            .get(slot as usize)
            .is_some_and(|entry| entry.holds(generation))
    }

    /// The id of the live entry a heap item speaks for, if any.
    fn live_id_of_item(&self, item: &Item) -> Option<u64> {
        let (_, slot, generation) = parts_of_item(item);
        let entry = self.slots.get(slot as usize)?;
        (entry.flags & LIVE != 0 && entry.generation & GENERATION_MASK == generation)
            .then(|| id_of(slot, entry.generation))
    }

    /// Whether `id` names a live entry (a lock renamed, moved or restored
    /// carries an id whose entry is gone).
    pub fn contains(&self, id: u64) -> bool {
        let (slot, generation) = parts_of(id);
        self.is_live(slot, generation)
    }

    /// A live slot's flags and packed bytes for `key`; a key that does not
    /// pack is kept beside the slab, under `slot`. (`None` only past four
    /// billion keys.)
    fn place_key(&mut self, slot: u32, key: K) -> Option<(u8, [u8; PACKED_KEY])> {
        if let Some(packed) = key.pack() {
            return Some((LIVE, packed));
        }
        let place = u32::try_from(self.spilled.len()).ok()?;
        self.spilled.push((slot, key));
        Some((LIVE | SPILLED, spilled_place(place)))
    }

    /// Takes out the spilled key whose place `packed` holds; the last key
    /// moves into its place, and its slot is told so.
    fn take_spilled(&mut self, packed: &[u8; PACKED_KEY]) -> Option<K> {
        let place = place_of_spilled(packed)?;
        if place >= self.spilled.len() {
            return None;
        }
        let (_, key) = self.spilled.swap_remove(place)?;
        if let Some(&(moved, _)) = self.spilled.get(place) {
            if let Some(entry) = self.slots.get_mut(moved as usize) {
                entry.key = spilled_place(u32::try_from(place).ok()?);
            }
        }
        Some(key)
    }

    /// Frees live slot `slot` and returns its key.
    fn free_slot(&mut self, slot: u32) -> Option<K> {
        let entry = self.slots.get_mut(slot as usize)?;
        let flags = std::mem::replace(&mut entry.flags, 0);
        entry.generation = entry.generation.checked_add(1).unwrap_or(1);
        let packed = entry.key;
        let key = if flags & SPILLED != 0 {
            self.take_spilled(&packed)
        } else {
            K::unpack(&packed)
        };
        self.free.push(Reverse(slot));
        self.live -= 1;
        key
    }

    /// Drops entry `id` (the lock was released or deleted) and returns its
    /// key; `None` if there is no such entry. When that starts a sweep,
    /// [`DeadlineIndex::take_wake`] says so.
    pub fn remove(&mut self, id: u64) -> Option<K> {
        self.remove_entry::<true>(id)
    }

    /// [`DeadlineIndex::remove`]; a sweep it starts sets the wake only if
    /// `WAKE` (the index's own removals, `pop_due` and `refile`, do not:
    /// see [`DeadlineIndex::take_wake`]). (A constant: no work added.)
    #[inline(always)]
    fn remove_entry<const WAKE: bool>(&mut self, id: u64) -> Option<K> {
        let (slot, _) = parts_of(id);
        self.slot_mut(id)?;
        let key = self.free_slot(slot);
        if self.live == 0 {
            // Every item left is stale: the shrink below drops a small
            // heap whole, trims a big one. A sweep under way ends.
            self.sweeping = false;
            self.sweep_at = 0;
            self.sweep_removed = 0;
            self.unswept = 0;
        } else if self.heap.len() > 2 * self.live + STALE_SLACK {
            self.rebuilds += 1;
            self.rebuild_heap();
        } else if !self.sweeping && self.sweep_due() {
            self.sweeping = true;
            if WAKE {
                self.wake = true;
            }
        }
        let gave_back = self.shrink_top();
        // Memory left for the timer's trims (the slab's free top beyond a
        // step, a free list of given-back slots, the stale items of a heap
        // with no live entry) arises only when the top slot or the last
        // lease goes: the release then wakes the trims, which else waited
        // for the firing armed before, for the next lease end (up to a
        // minute ahead), or for the next lease taken. (During a sweep the
        // trims run already.)
        if WAKE && (gave_back || self.live == 0) && !self.sweeping && self.trim_wanted() {
            self.wake = true;
        }
        key
    }

    /// Whether the heap holds stale items enough to sweep: more than half
    /// as many as live entries, beyond the slack. (Every item beyond the
    /// live entries is stale; a pass removes those it meets, but for
    /// items that match a live entry's generation, which start no new
    /// sweep on their own: `unswept`, see [`DeadlineIndex::sweep_step`].)
    fn sweep_due(&self) -> bool {
        let excess = self.heap.len().saturating_sub(self.live);
        self.live > 0
            && excess > self.live / 2 + STALE_SLACK
            && excess > self.unswept.saturating_add(STALE_SLACK)
    }

    /// Whether a removal ([`DeadlineIndex::remove`]) started a sweep, or
    /// left memory to give back in steps (the top slot or the last lease
    /// went), since the last call: the caller arms the timer that runs
    /// [`DeadlineIndex::trim`] (a release does not arm it otherwise).
    /// Cheap: a flag. A sweep that [`DeadlineIndex::pop_due`] or
    /// [`DeadlineIndex::refile`] starts sets no wake: their callers arm the
    /// timer in full after them (the timer's firing; a shrunk lease's
    /// filing), which asks [`DeadlineIndex::trim_wanted`], and a wake left
    /// behind would be taken by a later release that started nothing.
    pub fn take_wake(&mut self) -> bool {
        std::mem::take(&mut self.wake)
    }

    /// One step of the sweep: up to [`SWEEP_STEP`] heap items looked at
    /// from where the last step stopped, the stale ones removed in place
    /// (O(log n) each). At the end of a pass the sweep ends, unless
    /// stale items are still due a sweep (then another pass starts: items
    /// that went stale during the pass, or that a removal's sift moved
    /// behind it).
    ///
    /// A pass removes every stale item it meets: a live entry has one
    /// item (a shrunk lease is filed anew, [`DeadlineIndex::refile`]). The
    /// only item a sweep takes for live and is not is one whose slot was
    /// reused a multiple of 2^20 times while it waited (see [`Item`]): a
    /// stale item that escaped every pass and rebuild through a million
    /// reuses of its slot, live-looking for one generation of that slot
    /// in 2^20. Those need not be few: slots given back at the top of the
    /// slab all come again at the generation floor, so one slot filled
    /// and emptied 2^20 times at the top makes every given-back slot's
    /// stale items match the entries made there next. A pass that removed
    /// no more than [`STALE_SLACK`] items ends the sweep even when it is
    /// still due (`unswept`), else such items would keep it going, pass
    /// after pass, until their deadlines.
    fn sweep_step(&mut self) {
        // A small heap is rebuilt at once: no more work than a step, and
        // less than removing its stale items one by one.
        if self.heap.len() <= SWEEP_STEP {
            self.rebuild_heap();
            return;
        }
        let mut at = self.sweep_at;
        for _ in 0..SWEEP_STEP {
            let Some(&item) = self.heap.get(at) else {
                break;
            };
            if self.live_id_of_item(&item).is_some() {
                at += 1;
            } else {
                // The last item takes its place: looked at next.
                self.heap.remove_at(at);
                self.sweep_removed += 1;
            }
        }
        if at >= self.heap.len() {
            // Another pass only after one that found stale items enough:
            // a pass that could remove few of the items over the live
            // entries (they alias live ones) leaves them be until stale
            // items come on top of them.
            let did_its_work = std::mem::take(&mut self.sweep_removed) > STALE_SLACK;
            self.sweep_at = 0;
            self.unswept = 0;
            self.sweeping = self.sweep_due();
            if self.sweeping && !did_its_work {
                self.unswept = self.heap.len().saturating_sub(self.live);
                self.sweeping = false;
            }
        } else {
            self.sweep_at = at;
        }
    }

    /// The lowest free slot. Those a shrink gave back are above every
    /// other: when only they are left, the list is dropped whole.
    fn take_free(&mut self) -> Option<u32> {
        loop {
            if self.free.len() <= self.free_stale {
                self.drop_free();
                return None;
            }
            let Reverse(slot) = self.free.pop()?;
            if (slot as usize) < self.slots.len() {
                return Some(slot);
            }
            self.free_stale = self.free_stale.saturating_sub(1);
        }
    }

    fn drop_free(&mut self) {
        // Dropped whole: 4 bytes a slot (4 MB at a million, about 1.5 ms
        // to free inside Redis), and in steady state nearly empty.
        self.free = BinaryHeap::new();
        self.free_stale = 0;
    }

    /// Gives back the free slots at the top of the slab, up to
    /// [`SHRINK_STEP`] per call (each was freed once, so this is amortised
    /// O(1), and no call gives back more than a chunk of memory: freeing
    /// 35 MB at once took 13 ms inside Redis). What is too big for one
    /// call is left to [`DeadlineIndex::trim`], in steps. Returns whether
    /// it gave back a slot.
    fn shrink_top(&mut self) -> bool {
        let mut gave_back = false;
        for _ in 0..SHRINK_STEP {
            let Some(top) = self.slots.last() else {
                break;
            };
            if top.flags & LIVE != 0 {
                break;
            }
            self.generation_floor = self.generation_floor.max(top.generation);
            self.slots.pop();
            // Its entry in the free list is now one of the stale ones.
            self.free_stale += 1;
            gave_back = true;
        }
        // Small leftovers go at once.
        if self.free.len() <= self.free_stale && self.free.len() <= SHRINK_STEP {
            self.drop_free();
        }
        if self.live == 0 && self.heap.len() <= SHRINK_STEP {
            self.heap.clear();
        }
        gave_back
    }

    /// Memory to give back that is too big for one call: many free slots
    /// at the top of the slab, a free list of only given-back slots, or
    /// the stale items of a heap with no live entry. (A slab whose top
    /// entry is live keeps its free slots below it for new entries.)
    pub fn trim_wanted(&self) -> bool {
        self.slab_to_trim()
            || (self.free_only_given_back())
            || (self.live == 0 && !self.heap.is_empty())
            || (self.sweeping && self.live > 0)
    }

    /// The free list holds only slots a shrink gave back (and some).
    fn free_only_given_back(&self) -> bool {
        !self.free.is_empty() && self.free.len() <= self.free_stale
    }

    /// Free slots at the top, many of them or all there is.
    fn slab_to_trim(&self) -> bool {
        let top_free = self.slots.last().is_some_and(|top| top.flags & LIVE == 0);
        top_free && (self.live == 0 || self.slots.len() > 2 * self.live + SHRINK_STEP)
    }

    /// One step of giving memory back (about a chunk's worth: a few
    /// hundred KiB); returns whether more is wanted. The module's timer
    /// runs steps within its budget while [`DeadlineIndex::trim_wanted`].
    pub fn trim(&mut self) -> bool {
        if self.slab_to_trim() {
            self.shrink_top();
        } else if self.free_only_given_back() {
            // Every entry is a given-back slot.
            self.drop_free();
        } else if self.live == 0 && !self.heap.is_empty() {
            // Every item is stale.
            self.heap.drop_some();
        } else if self.sweeping && self.live > 0 {
            self.sweep_step();
        }
        self.trim_wanted()
    }

    /// Bytes the index holds (slab, free list, heap): `INFO lock`'s
    /// `lock_lease_index_bytes`, and tests of the shrink.
    pub fn capacity_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.free.capacity() * std::mem::size_of::<u32>()
            + self.heap.capacity() * std::mem::size_of::<Item>()
            + self.spilled.capacity() * std::mem::size_of::<(u32, K)>()
    }

    /// Entry `id`'s lease now ends at `deadline`, earlier than it did: the
    /// entry is filed anew, under the id returned, and its old item goes
    /// stale like a released lock's (the sweep removes it in steps). `None`
    /// (nothing changes) when `id` names no entry. (A second live item per
    /// entry instead, as this index once filed a shrunk lease, is one no
    /// sweep can remove: only a whole rebuild dropped those, a million
    /// leases shrunk once, then ~500 releases: one release of 180 ms.)
    pub fn refile(&mut self, id: u64, deadline: u64, key: impl FnOnce() -> K) -> Option<u64> {
        if !self.contains(id) {
            return None;
        }
        let key = self.remove_entry::<false>(id).unwrap_or_else(key);
        Some(self.insert(deadline, key))
    }

    /// The earliest deadline, if any. Drops stale heap items on the way, so
    /// a timer armed for it does not fire for a released lock; it may still
    /// be earlier than the lease it speaks for (a renewal), which costs one
    /// early firing that files the lock again.
    pub fn next_deadline(&mut self) -> Option<u64> {
        self.next_deadline_within(usize::MAX)
    }

    /// [`DeadlineIndex::next_deadline`], dropping at most `pops` stale
    /// items: past them, the top item's deadline, stale or not (no later
    /// than the earliest live one: a timer armed for it fires early once,
    /// and its firing drops stale items within its budget). Locks released
    /// in the order they were taken leave every top item stale: a timer
    /// armed after 600,000 such releases popped them all, 58 ms in one call.
    pub fn next_deadline_within(&mut self, pops: usize) -> Option<u64> {
        // With no live entry every item is stale, and [`DeadlineIndex::trim`]
        // drops them in steps (popping a million of them here would not be).
        if self.live == 0 {
            return None;
        }
        let mut popped = 0;
        while let Some(top) = self.heap.peek() {
            if self.live_id_of_item(top).is_some() || popped >= pops {
                return Some(parts_of_item(top).0);
            }
            self.heap.pop();
            popped += 1;
        }
        None
    }

    /// Whether some heap item is due at `now` (it may turn out stale).
    pub fn has_due(&self, now: u64) -> bool {
        self.live > 0
            && self
                .heap
                .peek()
                .is_some_and(|top| parts_of_item(top).0 <= now)
    }

    /// Removes and returns the entries with an item due at or before `now`,
    /// earliest first, as `(id, key)`, looking at no more than `limit` heap
    /// items (stale ones count: the work per call is bounded;
    /// [`DeadlineIndex::has_due`] tells whether to call again). The caller
    /// ends each lease that is over and files the others again.
    pub fn pop_due(&mut self, now: u64, limit: usize) -> Vec<(u64, K)> {
        let mut due = Vec::new();
        for _ in 0..limit {
            let Some(top) = self.heap.peek() else {
                break;
            };
            if parts_of_item(top).0 > now {
                break;
            }
            let id = self.live_id_of_item(top);
            self.heap.pop();
            if let Some(id) = id {
                if let Some(key) = self.remove_entry::<false>(id) {
                    due.push((id, key));
                }
            }
        }
        due
    }

    /// [`DeadlineIndex::pop_due`], or `None` once nothing more is due: a
    /// batch of stale items may be empty with more due behind it, so an
    /// empty batch alone does not end the work.
    pub fn next_due_batch(&mut self, now: u64, limit: usize) -> Option<Vec<(u64, K)>> {
        let due = self.pop_due(now, limit);
        (!due.is_empty() || self.has_due(now)).then_some(due)
    }

    /// Rewrites or drops every key: `map` returns the new key, or `None` to
    /// drop the entry (used for `FLUSHDB` and `SWAPDB`).
    pub fn remap(&mut self, mut map: impl FnMut(&K) -> Option<K>) {
        for slot in 0..self.slots.len() {
            let Ok(slot) = u32::try_from(slot) else {
                break;
            };
            let Some(entry) = self.slots.get(slot as usize) else {
                break;
            };
            if entry.flags & LIVE == 0 {
                continue;
            }
            let (flags, packed) = (entry.flags, entry.key);
            let key = if flags & SPILLED != 0 {
                self.take_spilled(&packed)
            } else {
                K::unpack(&packed)
            };
            let mapped = key.as_ref().and_then(&mut map);
            let Some(mapped) = mapped else {
                // Dropped: free the slot (its key is already taken out).
                if let Some(entry) = self.slots.get_mut(slot as usize) {
                    entry.flags &= !SPILLED;
                }
                self.free_slot(slot);
                continue;
            };
            let Some((flags, packed)) = self.place_key(slot, mapped) else {
                if let Some(entry) = self.slots.get_mut(slot as usize) {
                    entry.flags &= !SPILLED;
                }
                self.free_slot(slot);
                continue;
            };
            if let Some(entry) = self.slots.get_mut(slot as usize) {
                entry.flags = flags;
                entry.key = packed;
            }
        }
        self.rebuild_heap();
        self.shrink_top();
    }

    /// The heap again without stale items: each live entry's one item.
    /// O(items), whatever the slab's size: with a thousand live locks in a
    /// slab that once held millions this runs every couple of thousand
    /// releases.
    fn rebuild_heap(&mut self) {
        // In place: no copy of the heap (a copy to one `Vec` and back made
        // a rebuild at two million items 4x slower: 47 ms against 11).
        self.sweeping = false;
        self.sweep_at = 0;
        self.sweep_removed = 0;
        self.unswept = 0;
        let mut heap = std::mem::take(&mut self.heap);
        heap.retain(|item| self.live_id_of_item(item).is_some());
        self.heap = heap;
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Heap items kept, live or stale (for tests of the bound).
    pub fn queued_items(&self) -> usize {
        self.heap.len()
    }

    /// Whole rebuilds of the heap by a removal so far, the backstop (for
    /// tests: the sweep keeps them away; a sweep step rebuilds a heap of
    /// at most a step's items at once, which is not counted).
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyId;

    // Keys the index keeps beside the slab.
    impl SlabKey for &str {}
    impl SlabKey for () {}
    impl SlabKey for (i32, &str) {}

    #[test]
    fn a_slot_is_24_bytes_and_a_heap_item_12() {
        assert_eq!(std::mem::size_of::<Slot>(), 24);
        assert_eq!(std::mem::size_of::<Item>(), 12);
    }

    const DAY_MS: u64 = 86_400_000;

    #[test]
    fn items_order_by_deadline_and_read_back() {
        for (deadline, slot, generation) in [
            (0, 0, 1),
            (1, u32::MAX, u32::MAX),
            (LATEST_DEADLINE, 7, 1 << 20),
            (10 * 365 * DAY_MS, 3, 12_345),
        ] {
            let (d, s, g) = parts_of_item(&item(deadline, slot, generation));
            assert_eq!((d, s, g), (deadline, slot, generation & GENERATION_MASK));
        }
        assert_eq!(parts_of_item(&item(u64::MAX, 1, 1)).0, LATEST_DEADLINE);
        // Reverse: the earlier deadline is the greater item, whatever the
        // generation and the slot.
        assert!(item(5, 9, GENERATION_MASK) > item(6, 0, 0));
        assert!(item(5, 0, 0) > item(5, 0, 1), "then by generation");
    }

    #[test]
    fn deadlines_years_apart_pop_exactly_on_time() {
        use std::collections::BTreeMap;
        let mut next = crate::testing::below(0x2545_f491_4f6c_dd1d);
        let mut index = DeadlineIndex::new();
        let mut model: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        let mut now = 10 * 365 * DAY_MS;
        for step in 0..20_000u64 {
            if next(3) < 2 {
                let deadline = match next(3) {
                    0 => now + next(1_000),
                    1 => now + next(200 * DAY_MS),
                    _ => now.saturating_sub(next(100 * DAY_MS)),
                };
                model.insert(index.insert(deadline, step), (step, deadline));
            } else {
                now += next(10 * DAY_MS);
                let mut popped = index.pop_due(now, usize::MAX);
                popped.sort_unstable();
                let due: Vec<(u64, u64)> = model
                    .iter()
                    .filter(|(_, (_, deadline))| *deadline <= now)
                    .map(|(id, (key, _))| (*id, *key))
                    .collect();
                assert_eq!(popped, due, "step {step}");
                for (id, _) in due {
                    model.remove(&id);
                }
            }
        }
    }

    #[test]
    fn a_stale_item_matching_a_reused_slot_only_makes_it_surface_early() {
        let mut index = DeadlineIndex::new();
        let old = index.insert(50, 1u64);
        let above = index.insert(5_000, 3u64);
        assert_eq!(index.remove(old), Some(1));
        // The slot was reused 2^20 times while the stale item waited (kept
        // by a big index that did not need a rebuild).
        if let Some(slot) = index.slots.get_mut(0) {
            slot.generation = parts_of(old).1 + (1 << GENERATION_BITS);
        }
        let new = index.insert(1_000, 2u64);
        assert_eq!(parts_of(new).0, parts_of(old).0, "the same slot");
        assert_eq!(index.next_deadline(), Some(50));
        assert_eq!(index.pop_due(50, 10), vec![(new, 2)], "early");
        // The caller finds the lease running and files it again: it comes
        // due at its own deadline, exactly once.
        let again = index.insert(1_000, 2u64);
        assert_eq!(index.pop_due(999, 10), vec![]);
        assert_eq!(index.pop_due(1_000, 10), vec![(again, 2)]);
        assert_eq!(index.pop_due(u64::MAX, 10), vec![(above, 3)]);
        assert!(index.is_empty());
    }

    /// Slots given back at the top of the slab come again at the
    /// generation floor, the same generation for all of them: after the
    /// floor rose 2^20 (one slot at the top filled and emptied that many
    /// times, a lease that ends there each time), every slot made again
    /// at once matches the stale items its last entries left (see
    /// [`Item`]). A sweep cannot remove those items; thousands of them
    /// must not keep it going (each pass ends due again, and the module's
    /// timer then runs a trim every millisecond, its whole budget, until
    /// the items' deadlines: hours).
    #[test]
    fn a_sweep_over_items_that_alias_live_entries_ends() {
        let mut index = DeadlineIndex::new();
        let far = 1_000_000_000;
        let (anchors, targets) = (4_000u64, 3_000u64);
        let anchor_ids: Vec<u64> = (0..anchors).map(|i| index.insert(far + i, i)).collect();
        let target_ids: Vec<u64> = (0..targets)
            .map(|i| index.insert(far, anchors + i))
            .collect();
        let generation = parts_of(target_ids[0]).1;
        for &id in &target_ids {
            assert!(index.remove(id).is_some());
        }
        // Given back at the top, their items stale, below a sweep's start.
        assert_eq!(index.slots.len(), anchors as usize);
        assert!(!index.sweeping && index.queued_items() == (anchors + targets) as usize);
        // One slot at the top, filled and emptied: the floor rises by one
        // each time.
        let mut churns = 0u64;
        while index.generation_floor & GENERATION_MASK != generation & GENERATION_MASK {
            let id = index.insert(5, u64::MAX);
            assert_eq!(index.pop_due(5, 1), vec![(id, u64::MAX)]);
            churns += 1;
            assert!(churns <= 1 << GENERATION_BITS, "the floor does not rise");
        }
        // The targets again, in the same slots: every old item matches.
        let again: Vec<u64> = (0..targets)
            .map(|i| index.insert(far + 1, anchors + i))
            .collect();
        for (&old, &new) in target_ids.iter().zip(&again) {
            assert_eq!(parts_of(old).0, parts_of(new).0, "the same slot");
            let stale = item(far, parts_of(old).0, parts_of(old).1);
            assert_eq!(index.live_id_of_item(&stale), Some(new), "aliases");
        }
        for id in anchor_ids {
            assert!(index.remove(id).is_some());
        }
        index.take_wake();
        // Stale items of released locks are swept; the aliasing ones stay
        // until they surface, and the sweep ends anyway.
        let mut trims = 0;
        while index.trim_wanted() {
            index.trim();
            trims += 1;
            assert!(trims <= 1_000, "the sweep never ends ({trims} steps)");
        }
        assert_eq!(index.len(), targets as usize);
        // Each target surfaces early once (its stale twin), then at its own
        // deadline.
        let early = index.pop_due(far, usize::MAX);
        assert_eq!(early.len(), targets as usize);
        assert_eq!(index.len(), 0);
    }

    /// The last lease released leaves memory to give back (the slab's free
    /// top beyond a shrink step, a heap of stale items): the release says
    /// so ([`DeadlineIndex::take_wake`]), else the trims waited for a
    /// firing armed for something else (the timer armed for the last
    /// lease's end fired up to a minute later: tens of MB kept meanwhile
    /// after a million leases).
    #[test]
    fn the_last_release_wakes_the_trims_it_leaves() {
        use crate::chunked::CHUNK;
        let mut index = DeadlineIndex::new();
        let ids: Vec<u64> = (0..3 * CHUNK as u64)
            .map(|i| index.insert(1_000 + i, i))
            .collect();
        let mut wakes = 0;
        for id in ids {
            assert!(index.remove(id).is_some());
            // The module's timer: trims while wanted, once woken.
            if index.take_wake() {
                wakes += 1;
                let mut steps = 0;
                while index.trim() {
                    steps += 1;
                    assert!(steps <= 10_000, "trims never end");
                }
            }
        }
        assert!(wakes > 0);
        assert!(
            !index.trim_wanted() || index.take_wake(),
            "memory left, no wake"
        );
    }

    #[test]
    fn packed_and_spilled_keys_come_back_through_every_path() {
        let mut index = DeadlineIndex::new();
        let short = KeyId::new(1, b"lock:000000000001");
        let long = KeyId::new(1, &[b'n'; 40]);
        let other = KeyId::new(2, b"x");
        let (a, b, c) = (
            index.insert(10, short.clone()),
            index.insert(20, long.clone()),
            index.insert(30, other.clone()),
        );
        assert_eq!(index.spilled.len(), 1);
        // SWAPDB 1 <-> 255: the short name no longer packs (db 255), and
        // back again.
        let swap = |db: i32| match db {
            1 => 255,
            255 => 1,
            db => db,
        };
        index.remap(|id| Some(id.in_db(swap(id.db()))));
        assert_eq!(index.spilled.len(), 2);
        index.remap(|id| Some(id.in_db(swap(id.db()))));
        assert_eq!(index.spilled.len(), 1);
        assert_eq!(index.remove(b), Some(long));
        assert!(index.spilled.is_empty());
        // A flush of database 2 drops its entry.
        index.remap(|id| (id.db() != 2).then(|| id.clone()));
        assert_eq!(index.remove(c), None);
        assert_eq!(index.pop_due(100, 10), vec![(a, short)]);
        assert!(index.is_empty());
    }

    #[test]
    fn pops_due_entries_in_deadline_order_up_to_a_limit() {
        let mut index = DeadlineIndex::new();
        let c = index.insert(30, "c");
        let a = index.insert(10, "a");
        let b = index.insert(20, "b");
        index.insert(40, "d");
        assert_eq!(index.next_deadline(), Some(10));
        assert_eq!(index.pop_due(30, 2), vec![(a, "a"), (b, "b")]);
        assert!(index.has_due(30));
        assert_eq!(index.pop_due(30, 10), vec![(c, "c")]);
        assert_eq!(index.pop_due(30, 10), vec![]);
        assert!(!index.has_due(30));
        assert_eq!(index.next_deadline(), Some(40));
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn the_index_gives_memory_back_after_a_spike() {
        let mut index = DeadlineIndex::new();
        let small = index.capacity_bytes();
        let ids: Vec<u64> = (0..100_000u64).map(|i| index.insert(i, i)).collect();
        let spike = index.capacity_bytes();
        assert!(spike > 100_000 * 32);
        for id in &ids {
            index.remove(*id);
        }
        assert!(index.is_empty());
        // The timer's steps give it back, about a chunk at a time (no step
        // frees more than a chunk of each structure, ~1 MB: freeing all at
        // once is what stalled the server).
        let trim_all = |index: &mut DeadlineIndex<u64>| {
            let mut steps = 0;
            while index.trim_wanted() {
                let before = index.capacity_bytes();
                index.trim();
                let freed = before.saturating_sub(index.capacity_bytes());
                assert!(
                    freed <= 3 * crate::chunked::CHUNK * 24,
                    "one step freed {freed} bytes"
                );
                steps += 1;
                assert!(steps < 1_000, "trim does not end");
            }
            assert!(!index.trim());
            steps
        };
        assert!(trim_all(&mut index) > 1, "the memory went back in one step");
        assert!(
            index.capacity_bytes() <= small + 64 * 1024,
            "{} bytes kept after the spike (at its top {spike})",
            index.capacity_bytes()
        );
        // A flush (remap dropping everything) gives it back too.
        let ids: Vec<u64> = (0..100_000u64).map(|i| index.insert(i, i)).collect();
        index.remap(|_| None);
        trim_all(&mut index);
        assert!(index.capacity_bytes() <= small + 64 * 1024);
        // No id of the spike matches anything made since.
        let fresh: Vec<u64> = (0..10u64).map(|i| index.insert(5, 1_000_000 + i)).collect();
        for id in &ids {
            assert!(!index.contains(*id), "an old id matches a new entry");
            assert_eq!(index.remove(*id), None);
        }
        assert_eq!(index.len(), 10);
        assert_eq!(index.pop_due(5, usize::MAX).len(), fresh.len());
    }

    #[test]
    fn new_entries_fill_the_bottom_so_the_top_can_be_given_back() {
        let mut index = DeadlineIndex::new();
        let ids: Vec<u64> = (0..10_000u64).map(|i| index.insert(i, i)).collect();
        // Everything but the top entry ends; new entries take low slots.
        for id in &ids[..9_999] {
            index.remove(*id);
        }
        let low: Vec<u64> = (0..100u64).map(|i| index.insert(20_000 + i, i)).collect();
        for id in &low {
            assert!(
                parts_of(*id).0 < 100,
                "slot {} for a new entry",
                parts_of(*id).0
            );
        }
        // The top entry ends: the slab shrinks to the live bottom.
        index.remove(ids[9_999]);
        assert!(index.capacity_bytes() < 10_000 * 32 / 2);
        assert_eq!(index.len(), 100);
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
    fn a_freed_slot_is_reused_under_a_new_id() {
        let mut index = DeadlineIndex::new();
        let old = index.insert(5, "old");
        assert_eq!(index.remove(old), Some("old"));
        let new = index.insert(7, "new");
        assert_ne!(old, new, "same slot, new generation");
        assert_eq!(index.remove(old), None, "the old id no longer matches");
        assert_eq!(index.refile(old, 1, || "x"), None, "nor is it filed anew");
        assert_eq!(index.len(), 1);
        assert_eq!(index.next_deadline(), Some(7), "the old id's item is stale");
        assert_eq!(index.pop_due(10, 10), vec![(new, "new")]);
    }

    #[test]
    fn a_renewed_lease_surfaces_at_its_old_deadline_for_the_caller_to_file_again() {
        let mut index = DeadlineIndex::new();
        let a = index.insert(10, "a");
        // The lease grew to 50: nothing to tell the index.
        assert_eq!(index.pop_due(9, 10), vec![]);
        assert_eq!(index.pop_due(10, 10), vec![(a, "a")]);
        // The caller saw the lease still runs and files it at its end.
        let again = index.insert(50, "a");
        assert_eq!(index.next_deadline(), Some(50));
        assert_eq!(index.pop_due(49, 10), vec![]);
        assert_eq!(index.pop_due(50, 10), vec![(again, "a")]);
        assert!(index.is_empty());
    }

    #[test]
    fn a_shortened_lease_comes_due_at_its_new_end() {
        let mut index = DeadlineIndex::new();
        let a = index.insert(100, "a");
        let b = index.refile(a, 20, || "lost").unwrap();
        assert_ne!(a, b);
        assert!(!index.contains(a) && index.contains(b));
        assert_eq!(index.next_deadline(), Some(20));
        assert_eq!(index.pop_due(20, 10), vec![(b, "a")]);
        assert_eq!(index.pop_due(100, 10), vec![], "the old item is stale");
        assert_eq!(index.next_deadline(), None);
    }

    #[test]
    fn shortened_twice_pops_exactly_once() {
        let mut index = DeadlineIndex::new();
        let a = index.insert(100, "a");
        let b = index.refile(a, 60, || "lost").unwrap();
        let c = index.refile(b, 20, || "lost").unwrap();
        assert_eq!(index.refile(a, 10, || "lost"), None, "a's id is gone");
        assert_eq!(index.pop_due(19, 10), vec![]);
        assert_eq!(index.pop_due(1_000, 10), vec![(c, "a")]);
        assert!(index.is_empty());
        assert_eq!(index.next_deadline(), None);
    }

    #[test]
    fn removed_entries_never_pop_and_the_next_deadline_skips_them() {
        let mut index = DeadlineIndex::new();
        let a = index.insert(10, "a");
        let b = index.insert(60, "b");
        assert_eq!(index.remove(a), Some("a"));
        assert_eq!(index.remove(a), None);
        assert_eq!(index.next_deadline(), Some(60));
        assert_eq!(index.pop_due(100, 10), vec![(b, "b")]);
    }

    #[test]
    fn stale_items_stay_bounded_under_churn() {
        let mut index = DeadlineIndex::new();
        let kept: Vec<u64> = (0..100).map(|i| index.insert(1_000_000 + i, i)).collect();
        for round in 0..100_000u64 {
            let id = index.insert(500_000 + round, round);
            let id = index.refile(id, 400_000 + round, || u64::MAX).unwrap();
            assert_eq!(index.remove(id), Some(round));
        }
        assert_eq!(index.len(), 100);
        assert!(
            index.queued_items() <= 2 * index.len() + STALE_SLACK + 1,
            "{} heap items for {} entries",
            index.queued_items(),
            index.len()
        );
        let popped: Vec<u64> = index
            .pop_due(u64::MAX, usize::MAX)
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(popped, kept, "every kept entry, in deadline order");
    }

    #[test]
    fn a_rebuild_keeps_each_entry_at_its_item_and_drops_a_shrunk_leases_old_one() {
        let mut index = DeadlineIndex::new();
        let a = index.insert(100, "a");
        let a = index.refile(a, 30, || "lost").unwrap();
        let b = index.insert(50, "b");
        // Churn enough to force a rebuild.
        for round in 0..(2 * STALE_SLACK as u64) {
            let id = index.insert(10, "churn");
            assert_eq!(index.remove(id), Some("churn"), "round {round}");
        }
        assert!(index.rebuilds() >= 1, "no rebuild");
        assert!(index.queued_items() <= 2 * index.len() + STALE_SLACK + 1);
        // The stale churn items (due at 10) go first; no limit for them.
        assert_eq!(index.pop_due(29, usize::MAX), vec![]);
        assert_eq!(index.pop_due(30, usize::MAX), vec![(a, "a")]);
        assert_eq!(index.pop_due(1_000, usize::MAX), vec![(b, "b")]);
    }

    #[test]
    fn leases_shortened_again_and_again_stay_bounded() {
        let mut index = DeadlineIndex::new();
        let mut a = index.insert(u64::MAX, "a");
        for deadline in (1_000..100_000u64).rev() {
            a = index.refile(a, deadline, || "lost").unwrap();
        }
        assert!(index.queued_items() <= 2 * index.len() + STALE_SLACK + 1);
        assert_eq!(index.pop_due(1_000, 10), vec![(a, "a")]);
        assert!(index.is_empty());
    }

    #[test]
    fn the_limit_bounds_work_including_stale_items() {
        let mut index = DeadlineIndex::new();
        let ids: Vec<u64> = (0..10).map(|i| index.insert(i, i)).collect();
        for id in &ids[..5] {
            index.remove(*id);
        }
        assert_eq!(index.pop_due(100, 5), vec![], "five stale items looked at");
        assert!(index.has_due(100));
        assert_eq!(index.pop_due(100, 5).len(), 5);
    }

    #[test]
    fn remap_swaps_and_drops() {
        let mut index = DeadlineIndex::new();
        let x = index.insert(1, (0, "x"));
        let y = index.insert(2, (1, "y"));
        let z = index.insert(3, (2, "z"));
        index.remap(|&(db, key)| match db {
            0 => Some((1, key)),
            1 => Some((0, key)),
            _ => None,
        });
        assert_eq!(index.len(), 2);
        assert_eq!(index.remove(z), None);
        assert_eq!(index.pop_due(10, 10), vec![(x, (1, "x")), (y, (0, "y"))]);
    }

    /// Random operations against a plain model: an entry pops at its
    /// deadline (a shrunk lease's new one), exactly once, in deadline
    /// order, and never after it was removed or filed anew; the heap stays
    /// bounded.
    #[test]
    fn random_operations_agree_with_a_model() {
        agree_with_a_model(|step| step, false);
    }

    /// The same with the timer's trims at random moments: the sweep
    /// removes stale items from the middle of the heap while entries come
    /// and go, leases shrink (filed anew) and items surface; arming drops a
    /// bounded number of stale items. Every entry still surfaces at its
    /// deadline, in order, and its item is always in the heap.
    #[test]
    fn random_operations_with_sweeps_agree_with_a_model() {
        agree_with_a_model(|step| step, true);
    }

    /// The same with names of 1 to 26 bytes, in databases 254 and 255:
    /// about two in three spill beside the slab, and spilled keys move in
    /// it as others leave.
    #[test]
    fn random_operations_on_spilled_keys_agree_with_a_model() {
        let index = agree_with_a_model(
            |step| {
                let name = format!("{step:x}").repeat(1 + (step % 5) as usize);
                KeyId::new(254 + (step % 2) as i32, name.as_bytes())
            },
            false,
        );
        // Every spilled key left names its own slot.
        for (place, (slot, _)) in index.spilled.iter().enumerate() {
            let entry = index.slots.get(*slot as usize).unwrap();
            assert_ne!(entry.flags & SPILLED, 0);
            assert_eq!(place_of_spilled(&entry.key), Some(place));
        }
    }

    fn agree_with_a_model<K>(key_of: impl Fn(u64) -> K, sweeps: bool) -> DeadlineIndex<K>
    where
        K: SlabKey + Clone + Ord + std::fmt::Debug,
    {
        use std::collections::HashMap;
        let mut next = crate::testing::below(0x9e37_79b9_7f4a_7c15);
        let mut index = DeadlineIndex::new();
        // id -> (key, deadline)
        let mut model: HashMap<u64, (K, u64)> = HashMap::new();
        let mut ids: Vec<u64> = Vec::new();
        let mut now = 0;
        let mut rebuilds = 0;
        // Sweep steps over a heap bigger than a step, and stale items
        // they removed.
        let (mut sweep_steps, mut swept) = (0, 0);
        for step in 0..200_000u64 {
            // Phases that grow the index and phases that empty it, so that
            // stale items pile up and the heap gets rebuilt.
            let growing = (step / 20_000) % 2 == 0;
            let queued_before = index.queued_items();
            let op = match next(10) {
                op if !growing && op < 4 => 4 + op % 2,
                op => op,
            };
            match op {
                0..=3 => {
                    // With sweeps, most leases are long: their items go
                    // stale in the heap rather than surface.
                    let long = sweeps && next(4) != 0;
                    let deadline = now + next(if long { 100_000_000 } else { 100_000 });
                    let id = index.insert(deadline, key_of(step));
                    assert!(model.insert(id, (key_of(step), deadline)).is_none());
                    ids.push(id);
                }
                4 | 5 if !ids.is_empty() => {
                    let id = ids[next(ids.len() as u64) as usize];
                    assert_eq!(index.remove(id), model.remove(&id).map(|(key, _)| key));
                    if index.queued_items() < queued_before {
                        rebuilds += 1;
                    }
                }
                // A shrunk lease is filed anew (as the module does): a new
                // id, the old item stale. (A model id may be gone: then
                // nothing changes.)
                6 if !ids.is_empty() => {
                    let id = ids[next(ids.len() as u64) as usize];
                    let deadline = now + next(100_000);
                    let refiled = index.refile(id, deadline, || panic!("step {step}: key lost"));
                    match model.remove(&id) {
                        Some((key, _)) => {
                            let new = refiled.expect("a live entry is filed anew");
                            assert!(!index.contains(id), "step {step}: old id still live");
                            assert!(model.insert(new, (key, deadline)).is_none());
                            ids.push(new);
                        }
                        None => assert_eq!(refiled, None, "step {step}"),
                    }
                }
                _ => {
                    now += next(100);
                    let popped = index.pop_due(now, usize::MAX);
                    let mut due: Vec<(u64, K)> = model
                        .iter()
                        .filter(|(_, (_, earliest))| *earliest <= now)
                        .map(|(id, (key, _))| (*id, key.clone()))
                        .collect();
                    let mut got = popped.clone();
                    got.sort_unstable();
                    due.sort_unstable();
                    assert_eq!(got, due, "step {step}");
                    let order: Vec<u64> = popped.iter().map(|(id, _)| model[id].1).collect();
                    assert!(order.windows(2).all(|w| w[0] <= w[1]), "step {step}");
                    for (id, _) in popped {
                        model.remove(&id);
                    }
                }
            }
            ids.retain(|id| model.contains_key(id) || next(4) == 0);
            assert_eq!(index.len(), model.len());
            assert!(index.queued_items() <= 2 * index.len() + STALE_SLACK + 1);
            let earliest = model.values().map(|(_, earliest)| *earliest).min();
            if sweeps {
                // The timer fires now and then: trims while wanted (a
                // few), and arming drops a few stale items at most.
                if next(8) == 0 {
                    for _ in 0..1 + next(4) {
                        let sweeping = index.sweeping && index.queued_items() > SWEEP_STEP;
                        let before = index.queued_items();
                        if !index.trim_wanted() {
                            break;
                        }
                        index.trim();
                        if sweeping {
                            sweep_steps += 1;
                            swept += before - index.queued_items();
                        }
                    }
                }
                let armed = index.next_deadline_within(next(4) as usize);
                assert_eq!(armed.is_some(), earliest.is_some(), "step {step}");
                assert!(armed <= earliest, "step {step}: armed late");
                if step % 1_000 == 0 {
                    index.check_invariants();
                    let earliest: HashMap<u64, u64> =
                        model.iter().map(|(id, (_, at))| (*id, *at)).collect();
                    index.check_items(&earliest);
                }
            } else {
                assert_eq!(index.next_deadline(), earliest, "step {step}");
            }
        }
        if sweeps {
            assert!(
                sweep_steps >= 50 && swept >= 10_000,
                "{sweep_steps} sweep steps removed {swept} items"
            );
        } else {
            assert!(rebuilds >= 3, "only {rebuilds} rebuilds of the heap");
        }
        index
    }

    impl<K> DeadlineIndex<K> {
        /// The free list names each free slot of the slab exactly once,
        /// and `free_stale` counts exactly its entries above the slab (all
        /// above the others); every spilled key names its slot, which names
        /// its place; no slot's generation is 0; the heap is bounded.
        fn check_invariants(&self) {
            use std::collections::HashSet;
            let len = self.slots.len();
            let mut listed = HashSet::new();
            let mut stale = 0;
            for &Reverse(slot) in self.free.iter() {
                if slot as usize >= len {
                    stale += 1;
                } else {
                    assert!(listed.insert(slot), "slot {slot} listed twice");
                    let entry = self.slots.get(slot as usize).unwrap();
                    assert_eq!(entry.flags & LIVE, 0, "live slot {slot} listed free");
                }
            }
            assert_eq!(stale, self.free_stale, "stale entries miscounted");
            let mut live = 0;
            for (at, entry) in self.slots.iter().enumerate() {
                assert_ne!(entry.generation, 0);
                if entry.flags & LIVE != 0 {
                    live += 1;
                } else {
                    assert!(listed.contains(&(at as u32)), "free slot {at} not listed");
                }
            }
            assert_eq!(live, self.live);
            for (place, (slot, _)) in self.spilled.iter().enumerate() {
                let entry = self.slots.get(*slot as usize).unwrap();
                assert_eq!(entry.flags & (LIVE | SPILLED), LIVE | SPILLED);
                assert_eq!(place_of_spilled(&entry.key), Some(place));
            }
            assert!(self.heap.len() <= 2 * self.live + STALE_SLACK + 1 || self.live == 0);
            assert!(!self.sweeping || self.live > 0, "a sweep with no entry");
            // The heap property, parent by parent (a sweep removes items
            // in the middle of the heap).
            if let Some(i) = self.heap.out_of_order() {
                panic!("heap item {i} above its parent");
            }
        }
    }

    impl<K: SlabKey> DeadlineIndex<K> {
        /// Each live entry has one heap item, at its filed deadline
        /// (`filed`: id -> deadline), and no item speaks for an entry that
        /// `filed` does not name.
        fn check_items(&self, filed: &std::collections::HashMap<u64, u64>) {
            let mut items: std::collections::HashMap<u64, Vec<u64>> = Default::default();
            for i in 0..self.heap.len() {
                let item = self.heap.get(i).unwrap();
                if let Some(id) = self.live_id_of_item(item) {
                    items.entry(id).or_default().push(parts_of_item(item).0);
                }
            }
            for (id, &deadline) in filed {
                assert_eq!(
                    items.get(id),
                    Some(&vec![deadline.min(LATEST_DEADLINE)]),
                    "entry {id:#x}: its one item"
                );
            }
            assert_eq!(items.len(), filed.len(), "items of entries gone");
        }
    }

    /// A sweep under way ends when the last lease goes, released or ended
    /// (every item left is stale then, and the index drops them whole or
    /// in trims): the next lease filed asks for no trim. (The sweep flag
    /// used to stay set: the next lock made the timer fire for a sweep
    /// step over a heap of one entry, or resume a pass at a place in a
    /// heap that had since changed.)
    #[test]
    fn a_sweep_ends_when_the_last_lease_goes() {
        for ended in [false, true] {
            let mut index = DeadlineIndex::new();
            let last = index.insert(10, u64::MAX);
            // Long leases, released: the last release starts a sweep (1,025
            // stale items over one live entry; the rebuild's bound, 1,026
            // items, is not passed).
            let long: Vec<u64> = (0..=STALE_SLACK as u64)
                .map(|i| index.insert(1_000_000 + i, i))
                .collect();
            for &id in &long {
                index.remove(id);
            }
            assert_eq!((index.len(), index.queued_items()), (1, long.len() + 1));
            assert!(index.sweeping && index.trim_wanted(), "no sweep started");
            assert_eq!(index.rebuilds(), 0);
            // The last lease goes.
            if ended {
                assert_eq!(index.pop_due(10, 1), vec![(last, u64::MAX)]);
            } else {
                assert_eq!(index.remove(last), Some(u64::MAX));
            }
            assert!(index.is_empty());
            assert!(!index.sweeping, "ended {ended}: the sweep goes on");
            let mut steps = 0;
            while index.trim() {
                steps += 1;
                assert!(steps < 100, "trim does not end");
            }
            index.insert(2_000_000, 7);
            assert!(
                !index.trim_wanted(),
                "ended {ended}: a trim wanted for one new lease"
            );
            index.check_invariants();
        }
    }

    /// Only a release (`remove`, which arms nothing else in the module)
    /// that starts a sweep tells the caller to arm the timer for it
    /// (`take_wake`). A sweep started by the index's own removals, an
    /// entry surfacing (`pop_due`: the timer's firing, which arms in full
    /// after) or a shrunk lease filed anew (`refile`: its filing arms in
    /// full), leaves no wake behind: the module takes it on the release
    /// path only, so a later release that starts nothing would take it
    /// and arm the timer for a trim nobody wants.
    #[test]
    fn only_a_release_that_starts_a_sweep_wakes_the_timer() {
        // 10,000 long leases and 100 short ones; 4,030 of the long ones
        // released: just below a sweep's start (excess > live / 2 + slack:
        // 4,030 > 6,070 / 2 + 1,024 is false), and 100 fewer live entries
        // pass it (4,030 > 5,970 / 2 + 1,024).
        let setup = || {
            let mut index = DeadlineIndex::new();
            let long: Vec<u64> = (0..10_000u64)
                .map(|i| index.insert(1_000_000 + i, i))
                .collect();
            let short: Vec<u64> = (0..100u64).map(|i| index.insert(10, 20_000 + i)).collect();
            for &id in &long[..4_030] {
                index.remove(id);
            }
            assert!(!index.trim_wanted(), "a sweep already");
            assert!(!index.take_wake());
            (index, long, short)
        };
        // A release starts it: a wake, taken once.
        let (mut index, _, short) = setup();
        for &id in &short {
            index.remove(id);
        }
        assert!(index.trim_wanted(), "no sweep");
        assert!(index.take_wake(), "a release started a sweep: no wake");
        assert!(!index.take_wake());
        // The short leases end: the sweep starts in pop_due.
        let (mut index, long, _) = setup();
        assert_eq!(index.pop_due(10, usize::MAX).len(), 100);
        assert!(index.trim_wanted(), "no sweep");
        assert!(!index.take_wake(), "a wake from pop_due");
        index.remove(long[9_999]);
        assert!(!index.take_wake(), "a release that started nothing woke");
        // The short leases shrink: the sweep starts in refile.
        let (mut index, long, short) = setup();
        for &id in &short {
            index.refile(id, 5, || u64::MAX).unwrap();
        }
        for &id in &long[4_030..4_050] {
            index.refile(id, 5, || u64::MAX).unwrap();
        }
        assert!(index.trim_wanted(), "no sweep");
        assert!(!index.take_wake(), "a wake from refile");
        index.remove(long[9_999]);
        assert!(!index.take_wake(), "a release that started nothing woke");
    }

    /// Steady churn (releases, expiries and acquisitions at a constant
    /// number of leases, across a chunk) never asks for a trim: the timer
    /// is not re-armed every millisecond for nothing.
    #[test]
    fn steady_churn_wants_no_trim() {
        let mut next = crate::testing::below(0x0dd_ba11_cafe_f00d);
        let live = crate::chunked::CHUNK + 3_000;
        let mut index = DeadlineIndex::new();
        let mut now = 0;
        let mut ids: Vec<u64> = (0..live as u64)
            .map(|i| index.insert(now + 1 + next(100_000), i))
            .collect();
        for step in 0..100_000u64 {
            if next(2) == 0 {
                let at = next(ids.len() as u64) as usize;
                assert!(index.remove(ids.swap_remove(at)).is_some());
                // (A release arms the timer at once: not for a trim.)
                assert!(!index.trim_wanted(), "step {step}");
            } else {
                now += next(10);
                for (id, _) in index.pop_due(now, 8) {
                    let at = ids.iter().position(|x| *x == id).unwrap();
                    ids.swap_remove(at);
                }
                assert!(!index.trim_wanted(), "step {step}");
            }
            while ids.len() < live {
                ids.push(index.insert(now + 1 + next(100_000), step));
            }
            assert!(!index.trim_wanted(), "step {step}");
        }
    }

    /// Leases that shrank (`LOCK.EXTEND` to a shorter TTL), every one of
    /// them: each is filed anew, its old item stale. A sweep starts, and
    /// ends in a bounded number of steps with the stale items gone (at
    /// 643c471 a shrunk lease kept a second live item, which no pass could
    /// remove, and the sweep started pass after pass: the module's timer
    /// ran its whole 2 ms budget of trims every millisecond until those
    /// leases ended). Nothing is rebuilt whole; releases start a sweep
    /// again only once new stale items are due one; every lease surfaces
    /// at its new deadline, in order.
    #[test]
    fn a_sweep_over_shrunk_leases_ends() {
        let mut index = DeadlineIndex::new();
        let live = 3 * crate::chunked::CHUNK + 777;
        let far = 1_000_000_000;
        let mut ids: Vec<u64> = (0..live as u64)
            .map(|i| index.insert(far + 10 * i, i))
            .collect();
        for (i, id) in ids.iter_mut().enumerate() {
            *id = index.refile(*id, far / 2 + i as u64, || u64::MAX).unwrap();
        }
        // (No trim ran: every old item is still there, below the whole
        // rebuild's bound.)
        assert_eq!((index.len(), index.queued_items()), (live, 2 * live));
        assert!(index.trim_wanted(), "the sweep did not start");
        let mut steps = 0;
        while index.trim() {
            steps += 1;
            assert!(
                steps <= 2 * (2 * live / SWEEP_STEP + 1),
                "the sweep never ends: {steps} steps over {} items, {} live",
                index.queued_items(),
                index.len()
            );
        }
        assert!(!index.sweeping);
        // The stale items are gone, at most the slack of them left behind.
        assert!(
            index.queued_items() <= live + STALE_SLACK,
            "{} items for {live} leases",
            index.queued_items()
        );
        assert_eq!(index.rebuilds(), 0);
        index.check_invariants();
        // Releases start a sweep again only once new stale items are due
        // one, and that sweep ends too.
        for &id in &ids[..100] {
            index.remove(id);
        }
        assert!(!index.trim_wanted(), "a sweep for 100 stale items");
        let popped = index.pop_due(u64::MAX, usize::MAX);
        assert_eq!(popped.len(), live - 100);
        assert_eq!(popped.first().map(|&(id, _)| id), Some(ids[100]));
        let keys: Vec<u64> = popped.iter().map(|&(_, key)| key).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "out of order");
    }

    /// A stale item whose slot was reused a multiple of 2^20 times while it
    /// waited looks live (the one item a pass cannot remove, now that a
    /// live entry has one item). A sweep over a heap with a thousand such
    /// items (more than any real run could make: each escaped every pass
    /// through a million reuses of its slot) removes the stale items it
    /// can and ends; the live-looking ones make their entries surface
    /// early, never late.
    #[test]
    fn a_sweep_over_items_it_cannot_remove_ends() {
        let mut index = DeadlineIndex::new();
        let aliased = 1_000u64;
        let far = 1_000_000_000;
        // The slots of the first thousand entries: each entry removed and
        // its slot's generation moved on by 2^20 before the next entry in
        // it, whose id then matches the old item.
        let old: Vec<u64> = (0..aliased).map(|i| index.insert(far / 2 + i, i)).collect();
        let live = 4 * crate::chunked::CHUNK;
        let rest: Vec<u64> = (0..live as u64)
            .map(|i| index.insert(far + i, aliased + i))
            .collect();
        for &id in &old {
            index.remove(id);
            let slot = index.slots.get_mut(parts_of(id).0 as usize).unwrap();
            slot.generation = parts_of(id).1 + (1 << GENERATION_BITS);
        }
        // (Slots are handed out lowest first: the aliased ones.)
        let new: Vec<u64> = (0..aliased)
            .map(|i| index.insert(far + far / 2 + i, 10 * aliased + i))
            .collect();
        for (&old, &new) in old.iter().zip(&new) {
            assert_eq!(parts_of(old).0, parts_of(new).0);
        }
        assert!(!index.trim_wanted());
        // Releases enough to start a sweep (below the whole rebuild's
        // bound).
        let released = live / 3 + STALE_SLACK;
        for &id in &rest[..released] {
            index.remove(id);
        }
        assert!(index.trim_wanted(), "the sweep did not start");
        let total = index.queued_items();
        let mut steps = 0;
        while index.trim() {
            steps += 1;
            assert!(
                steps <= 2 * (total / SWEEP_STEP + 1),
                "the sweep never ends: {steps} steps over {} items, {} live",
                index.queued_items(),
                index.len()
            );
        }
        let left = live - released + aliased as usize;
        assert_eq!(index.len(), left);
        // Every stale item that does not alias went; at most the slack's
        // worth of them behind the pass.
        assert!(index.queued_items() >= left + aliased as usize);
        assert!(index.queued_items() <= left + aliased as usize + STALE_SLACK);
        assert_eq!(index.rebuilds(), 0);
        // An aliased entry surfaces at its slot's old item's deadline:
        // early (the caller files it again), never late.
        let first = index.pop_due(far, usize::MAX);
        assert_eq!(first.len(), aliased as usize);
        assert_eq!(first.first(), Some(&(new[0], 10 * aliased)));
    }

    /// Locks released in the order they were taken leave every top item
    /// stale: arming the timer drops at most `pops` of them per call and
    /// answers no later than the earliest live deadline; calls in turn
    /// reach it exactly.
    #[test]
    fn arming_drops_a_bounded_number_of_stale_items() {
        let mut index = DeadlineIndex::new();
        // (Fewer released than stay: no rebuild drops them all at once.)
        let ids: Vec<u64> = (0..100_000u64)
            .map(|i| index.insert(1_000 + i, i))
            .collect();
        for &id in &ids[..40_000] {
            index.remove(id);
        }
        assert_eq!(index.rebuilds(), 0);
        let mut calls = 0;
        loop {
            let before = index.queued_items();
            let deadline = index.next_deadline_within(256).unwrap();
            assert!(before - index.queued_items() <= 256);
            assert!(deadline <= 1_000 + 40_000, "{deadline}");
            calls += 1;
            if deadline == 1_000 + 40_000 {
                break;
            }
            assert!(calls < 1_000, "never reached the live top");
        }
        assert!(calls >= 40_000 / 256, "{calls} calls");
        assert_eq!(index.next_deadline(), Some(41_000));
    }

    /// Releases and acquisitions of long leases (none ends, so no stale
    /// item surfaces at the top) at a constant number of leases: the stale
    /// items of the releases are swept by the timer's trims, in steps of
    /// bounded work, and the heap is never rebuilt whole (an O(n) stall
    /// in one release: ~22 ms at a million leases). Without the timer's
    /// trims, the same churn rebuilds it. Every live entry still surfaces
    /// by its deadline, in order.
    #[test]
    fn long_lease_churn_is_swept_in_steps_never_rebuilt() {
        let churn = |timer_runs: bool| {
            let mut next = crate::testing::below(0x5eed_05a1_e7ab_1e00);
            let live = 3 * crate::chunked::CHUNK + 777;
            let mut index = DeadlineIndex::new();
            let far = 1_000_000_000;
            let mut ids: Vec<(u64, u64)> = (0..live as u64)
                .map(|i| {
                    let deadline = far + next(1_000_000);
                    (index.insert(deadline, i), deadline)
                })
                .collect();
            let (mut woken, mut steps, mut most_items) = (0, 0, 0);
            for round in 0..(4 * live as u64) {
                let at = next(ids.len() as u64) as usize;
                assert!(index.remove(ids.swap_remove(at).0).is_some());
                let deadline = far + next(1_000_000);
                ids.push((index.insert(deadline, round), deadline));
                if index.take_wake() {
                    woken += 1;
                }
                // The timer fires every few dozen commands while a trim
                // is wanted (every millisecond, in the module).
                if timer_runs && round % 64 == 0 && index.trim_wanted() {
                    assert!(index.sweeping, "round {round}: a trim for nothing");
                    index.trim();
                    steps += 1;
                }
                most_items = most_items.max(index.queued_items());
            }
            // All live entries surface by their deadlines, in order.
            let popped = index.pop_due(u64::MAX, usize::MAX);
            let mut want: Vec<u64> = ids.iter().map(|&(_, deadline)| deadline).collect();
            want.sort_unstable();
            let deadlines: std::collections::HashMap<u64, u64> = ids.iter().copied().collect();
            let got: Vec<u64> = popped.iter().map(|(id, _)| deadlines[id]).collect();
            assert_eq!(got, want);
            (index.rebuilds(), woken, steps, most_items, live)
        };
        let (rebuilds, woken, steps, most_items, live) = churn(true);
        assert_eq!(rebuilds, 0, "the heap was rebuilt whole");
        assert!(woken >= 3, "the sweep started {woken} times");
        assert!(steps >= woken, "{steps} steps");
        assert!(
            most_items <= live + live / 2 + STALE_SLACK + 64 + 1,
            "{most_items} items for {live} leases"
        );
        // The control: no timer, no sweep, and the backstop rebuilds.
        let (rebuilds, ..) = churn(false);
        assert!(rebuilds >= 2, "{rebuilds} rebuilds without the sweep");
    }

    /// A hostile model check across chunks: random insert / remove /
    /// refile / pop_due / next_due_batch / next_deadline / has_due /
    /// trim / remap against a model of the live entries (deadline and
    /// key), with spikes of several chunks of live entries
    /// that fall to zero and back, packed and spilled keys, and ids of
    /// removed entries kept to check that they never match again. Every
    /// live entry surfaces by its deadline and never before it,
    /// exactly once; `len()` is the model's; trim ends in bounded steps;
    /// an emptied, trimmed index holds no memory.
    #[test]
    fn spikes_across_chunks_agree_with_a_model() {
        use crate::chunked::CHUNK;
        use std::collections::{BTreeSet, HashMap};
        let mut next = crate::testing::below(0x51f1_5e3d_c0ff_ee11);
        let mut index: DeadlineIndex<KeyId> = DeadlineIndex::new();
        // id -> (key, deadline, place in `ids`)
        let mut model: HashMap<u64, (KeyId, u64, usize)> = HashMap::new();
        let mut ids: Vec<u64> = Vec::new();
        let mut by_deadline: BTreeSet<(u64, u64)> = BTreeSet::new();
        // Ids of removed or dropped entries (a bounded sample).
        let mut dead: Vec<u64> = Vec::new();
        let mut now: u64 = 1_000;
        let mut target: usize = 0;
        let mut seen_slots = 0;
        let mut seen_zero = 0;
        let mut trims_to_end = 0;
        let key_of = |n: u64, db: i32| {
            if n % 3 == 0 {
                // 40 bytes: spilled beside the slab.
                KeyId::new(db, format!("long-lock-name-{n:025}").as_bytes())
            } else {
                KeyId::new(db, format!("k{n}").as_bytes())
            }
        };
        fn forget(
            id: u64,
            model: &mut HashMap<u64, (KeyId, u64, usize)>,
            ids: &mut Vec<u64>,
            by_deadline: &mut BTreeSet<(u64, u64)>,
            dead: &mut Vec<u64>,
        ) -> (KeyId, u64) {
            let (key, earliest, place) = model.remove(&id).expect("in the model");
            ids.swap_remove(place);
            if let Some(moved) = ids.get(place) {
                model.get_mut(moved).expect("in the model").2 = place;
            }
            assert!(by_deadline.remove(&(earliest, id)));
            if dead.len() < 4096 {
                dead.push(id);
            } else {
                let at = (id as usize) % dead.len();
                dead[at] = id;
            }
            (key, earliest)
        }
        for step in 0..400_000u64 {
            // A new target now and then: up to 3.5 chunks, often 0.
            // Phases: a spike of 2.5 to 4 chunks, down to zero, a small
            // index, another spike, zero again.
            let big = || CHUNK * 5 / 2 + (step as usize * 7919) % (CHUNK * 3 / 2);
            match step {
                0 | 220_000 => target = big(),
                120_000 | 340_000 => target = 0,
                180_000 => target = 1_000 + (step as usize % 1_000),
                _ => {}
            }
            let grow = model.len() < target;
            let op = next(100);
            match op {
                // Insert (more often while growing).
                0..=69 if grow || (op < 15 && target > 0) => {
                    let far = next(50) == 0;
                    let deadline = now + 1 + next(if far { 1 << 40 } else { 5_000_000 });
                    let db = [0, 1, 300][next(3) as usize];
                    let key = key_of(step, db);
                    let id = index.insert(deadline, key.clone());
                    assert_ne!(id, 0);
                    assert!(!model.contains_key(&id), "step {step}: id {id:#x} reused");
                    model.insert(id, (key, deadline.min(LATEST_DEADLINE), ids.len()));
                    ids.push(id);
                    by_deadline.insert((deadline.min(LATEST_DEADLINE), id));
                }
                // Remove a live entry (more often while shrinking).
                0..=69 if !ids.is_empty() => {
                    let id = ids[next(ids.len() as u64) as usize];
                    let (key, _) = forget(id, &mut model, &mut ids, &mut by_deadline, &mut dead);
                    assert_eq!(index.remove(id), Some(key), "step {step}");
                }
                // An old id matches nothing.
                70..=74 if !dead.is_empty() => {
                    let id = dead[next(dead.len() as u64) as usize];
                    assert!(!index.contains(id), "step {step}: old id {id:#x}");
                    assert_eq!(index.remove(id), None, "step {step}");
                    let refiled = index.refile(id, now, || panic!("step {step}: old id"));
                    assert_eq!(refiled, None, "step {step}");
                }
                // A lease shortened (sometimes to the past), filed anew as
                // the module does (only when it ends earlier than it did):
                // a new id, the old one dead.
                75..=78 if !ids.is_empty() => {
                    let id = ids[next(ids.len() as u64) as usize];
                    let deadline = now.saturating_sub(5) + next(30_000);
                    if deadline < model[&id].1 {
                        let new = index.refile(id, deadline, || panic!("step {step}: key lost"));
                        let new = new.expect("a live entry is filed anew");
                        let (key, _) =
                            forget(id, &mut model, &mut ids, &mut by_deadline, &mut dead);
                        assert!(!index.contains(id), "step {step}: old id still live");
                        assert!(!model.contains_key(&new), "step {step}: id {new:#x} reused");
                        model.insert(new, (key, deadline, ids.len()));
                        ids.push(new);
                        by_deadline.insert((deadline, new));
                    }
                }
                // Time passes; one bounded batch.
                79..=86 => {
                    now += next(50);
                    let limit = 1 + next(64) as usize;
                    let popped = index.pop_due(now, limit);
                    let mut last = 0;
                    for (id, key) in popped {
                        let (want, earliest) =
                            forget(id, &mut model, &mut ids, &mut by_deadline, &mut dead);
                        assert_eq!(key, want, "step {step}");
                        assert!(earliest <= now, "step {step}: popped before its deadline");
                        assert!(earliest >= last, "step {step}: out of order");
                        last = earliest;
                    }
                    if let Some(&(earliest, _)) = by_deadline.first() {
                        if earliest <= now {
                            assert!(index.has_due(now), "step {step}: due but not told");
                        }
                    }
                }
                // Batches until nothing is due: all that is due came out.
                87..=89 => {
                    now += next(500);
                    let mut batches = 0;
                    while let Some(batch) = index.next_due_batch(now, 1 + next(256) as usize) {
                        batches += 1;
                        assert!(batches < 1_000_000, "step {step}: batches never end");
                        for (id, key) in batch {
                            let (want, earliest) =
                                forget(id, &mut model, &mut ids, &mut by_deadline, &mut dead);
                            assert_eq!(key, want, "step {step}");
                            assert!(earliest <= now, "step {step}: popped before its deadline");
                        }
                    }
                    assert!(
                        by_deadline
                            .first()
                            .map_or(true, |&(earliest, _)| earliest > now),
                        "step {step}: a due entry did not surface"
                    );
                    assert!(!index.has_due(now) || index.next_deadline().map_or(true, |d| d > now));
                }
                // Trim: one step, or to the end.
                90..=94 => {
                    if next(4) == 0 {
                        let mut steps = 0;
                        while index.trim() {
                            steps += 1;
                            trims_to_end += 1;
                            assert!(steps <= 1_000, "step {step}: trim never ends");
                        }
                        assert!(!index.trim_wanted());
                    } else if index.trim() {
                        trims_to_end += 1;
                    }
                }
                // FLUSHDB / SWAPDB: drop some or all, or move databases.
                95 if next(200) == 0 => {
                    let mode = next(6);
                    let map = |key: &KeyId| -> Option<KeyId> {
                        match mode {
                            0 => None,
                            1 | 2 => (key.db() != 1).then(|| key.clone()),
                            _ => Some(key.in_db(match key.db() {
                                0 => 300,
                                300 => 0,
                                db => db,
                            })),
                        }
                    };
                    let mut mapped = Vec::new();
                    for id in ids.clone() {
                        let key = model[&id].0.clone();
                        match map(&key) {
                            Some(new) => mapped.push((id, new)),
                            None => {
                                forget(id, &mut model, &mut ids, &mut by_deadline, &mut dead);
                            }
                        }
                    }
                    index.remap(map);
                    for (id, new) in mapped {
                        model.get_mut(&id).expect("kept").0 = new;
                    }
                }
                _ => {}
            }
            assert_eq!(index.len(), model.len(), "step {step}");
            seen_slots = seen_slots.max(index.slots.len());
            if step % 7 == 0 {
                assert_eq!(
                    index.next_deadline(),
                    by_deadline.first().map(|&(earliest, _)| earliest),
                    "step {step}"
                );
            }
            if step % 13 == 0 && !ids.is_empty() {
                let id = ids[next(ids.len() as u64) as usize];
                assert!(index.contains(id), "step {step}");
            }
            // Emptied: trimmed to the end, the index holds a few KiB at most.
            if model.is_empty() && target == 0 && next(50) == 0 {
                seen_zero += 1;
                let mut steps = 0;
                while index.trim_wanted() {
                    index.trim();
                    steps += 1;
                    assert!(steps <= 1_000, "step {step}: trim never ends");
                }
                trims_to_end += steps;
                // (Each structure may keep a small first chunk for reuse.)
                assert!(
                    index.capacity_bytes() <= 8 * 1024,
                    "step {step}: {} bytes kept",
                    index.capacity_bytes()
                );
            }
            if step % 5_000 == 0 {
                index.check_invariants();
            }
            if step % 50_000 == 0 {
                for &id in &dead {
                    assert!(!index.contains(id), "step {step}: old id {id:#x}");
                }
            }
        }
        // The run did what it is for.
        assert!(seen_slots > 5 * CHUNK / 2, "slab at most {seen_slots}");
        assert!(seen_zero >= 3, "emptied {seen_zero} times");
        assert!(trims_to_end > 0, "never trimmed in steps");
    }

    #[test]
    fn a_due_batch_is_none_only_when_nothing_more_is_due() {
        let mut index = DeadlineIndex::new();
        let stale = index.insert(5, "stale");
        index.insert(6, "live");
        index.remove(stale);
        // The first batch of one item finds only the stale one: empty, yet
        // more is due behind it.
        assert_eq!(index.next_due_batch(10, 1), Some(vec![]));
        let batch = index.next_due_batch(10, 1).unwrap();
        assert_eq!(batch.iter().map(|(_, k)| *k).collect::<Vec<_>>(), ["live"]);
        assert_eq!(index.next_due_batch(10, 1), None);
        index.insert(20, "later");
        assert_eq!(index.next_due_batch(10, 64), None);
    }
}
