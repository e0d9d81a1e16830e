//! Counters for `INFO lock`. Each counts events on this node since it started.

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Fresh acquisitions (a new lock with one hold).
    pub acquired: u64,
    /// Re-entries by the holder (one more hold).
    pub reentered: u64,
    /// Acquisitions refused because another owner held the lock.
    pub contended: u64,
    /// Locks freed by their owner (last hold released).
    pub released: u64,
    /// Locks whose lease ended.
    pub expired: u64,
    /// Successful `LOCK.EXTEND` calls.
    pub extended: u64,
    /// Successful `LOCK.FENCE` calls.
    pub fenced: u64,
    /// Acquisitions that had to wait in the queue.
    pub waits: u64,
    /// Waiters granted the lock after waiting.
    pub wait_grants: u64,
    /// Waiters whose timeout passed before a grant.
    pub wait_timeouts: u64,
    /// Grants to waiters whose reply never reached them (the client went
    /// away in the same event-loop turn), taken back at once.
    pub wait_grants_undelivered: u64,
    /// Fresh grants in shared mode (read locks and semaphore permits).
    pub shared_grants: u64,
    /// Shared requests refused because every permit of a `LIMIT` was taken.
    pub semaphore_full: u64,
    /// Holders of a shared lock whose lease ended while others held on.
    pub holders_expired: u64,
}
