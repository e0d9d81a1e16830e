//! The fenced storage stand-in and the safety checks.
//!
//! Per resource it keeps the highest fencing token whose write it accepted
//! and rejects a write with a token that is not greater (what a real store
//! fenced by tokens does). It also records every holder's validity window on
//! this process's monotonic clock: from the moment `acquire` returned to
//! that moment plus the validity the client reported, cut short when the
//! holder starts releasing.
//!
//! A hold is exclusive (a mutex, or a writer of a read-write lock), shared
//! (a reader) or a permit of a semaphore of `n` permits; only exclusive
//! holders write to the store, readers read from it.
//!
//! Violations:
//!
//! - **overlap**: two holders of one resource whose validity windows
//!   intersect when one of them is exclusive (mutual exclusion broken; a
//!   reader's window overlapping a writer's is one);
//! - **too many permits**: more than `n` permit windows of a semaphore open
//!   at once;
//! - **token order**: a holder whose acquisition began after an earlier
//!   holder's window ended, but whose token is not greater (fencing broken:
//!   the earlier, stale holder could still overwrite it);
//! - **fenced out while valid**: a write rejected while its holder's window
//!   was still open. A newer token was accepted before, so its holder held
//!   the lock while this one did, or an earlier holder got a token at least
//!   as large as this one's: one of the two above, seen from the store;
//! - **read saw a newer write**: a reader, inside its window, found a write
//!   whose token is not below its own. Tokens only grow, so that writer was
//!   granted after this reader, while the reader held the lock: a writer
//!   overlapped it, or the reader's token is not above an earlier writer's.
//!
//! A write rejected after its holder's window ended (a client paused past
//! its validity) is the fencing working, not a violation. A late write
//! that is accepted because no newer token was written yet is correct too:
//! the store's order still follows the tokens.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One successful acquisition.
#[derive(Clone, Debug)]
pub struct Holder {
    pub resource: String,
    /// The client task.
    pub client: usize,
    /// When the client called `acquire`.
    pub acquire_started: Instant,
    /// When `acquire` returned: the window opens.
    pub window_start: Instant,
    /// `window_start + validity`, or the moment the holder began releasing
    /// if that came first.
    pub window_end: Instant,
    /// The fencing token, once the client obtained it.
    pub token: Option<u64>,
    /// Indices of the nodes that granted the acquisition.
    pub granted_by: Vec<usize>,
    pub kind: HoldKind,
}

/// How a resource is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldKind {
    /// A mutex, or the writer of a read-write lock: alone.
    Exclusive,
    /// A reader of a read-write lock: with other readers, never a writer.
    Shared,
    /// One permit of a semaphore of this many permits.
    Permit(u32),
}

impl HoldKind {
    /// Two holds of one resource that may not overlap in time.
    fn conflicts(self, other: HoldKind) -> bool {
        self == HoldKind::Exclusive || other == HoldKind::Exclusive
    }
}

/// A holder's handle in the checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HolderId(usize);

/// What the store did with a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The token was the highest so far. `late`: the holder's window had
    /// already ended (a paused client whose lock nobody took meanwhile).
    Accepted { late: bool },
    /// A greater or equal token was accepted before; the holder's window had
    /// ended (a stale holder, fenced off as intended).
    RejectedStale,
    /// Rejected while the holder's window was open: a violation.
    RejectedWhileValid,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteCounts {
    /// Fenced reads by readers (shared holds).
    pub reads: u64,
    /// Permit holds that reached their work (they do not use the store).
    pub permits: u64,
    pub accepted: u64,
    /// Of `accepted`: after the holder's window ended.
    pub accepted_late: u64,
    pub rejected_stale: u64,
    pub rejected_while_valid: u64,
}

impl WriteCounts {
    pub fn rejected(&self) -> u64 {
        self.rejected_stale + self.rejected_while_valid
    }

    pub fn add(&mut self, other: &WriteCounts) {
        self.reads += other.reads;
        self.permits += other.permits;
        self.accepted += other.accepted;
        self.accepted_late += other.accepted_late;
        self.rejected_stale += other.rejected_stale;
        self.rejected_while_valid += other.rejected_while_valid;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViolationKind {
    Overlap,
    TooManyPermits,
    TokenOrder,
    FencedOutWhileValid,
    ReadSawNewerWrite,
}

impl ViolationKind {
    pub const ALL: [ViolationKind; 5] = [
        ViolationKind::Overlap,
        ViolationKind::TooManyPermits,
        ViolationKind::TokenOrder,
        ViolationKind::FencedOutWhileValid,
        ViolationKind::ReadSawNewerWrite,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::Overlap => "overlapping validity windows",
            ViolationKind::TooManyPermits => "more permit windows open than permits",
            ViolationKind::TokenOrder => "token not above an earlier holder's",
            ViolationKind::FencedOutWhileValid => "write rejected inside its validity window",
            ViolationKind::ReadSawNewerWrite => "read inside its window saw a newer write",
        }
    }
}

/// A violation with the two holders involved.
#[derive(Clone, Debug)]
pub struct Violation {
    pub kind: ViolationKind,
    /// The earlier holder (for a rejected write: the holder of the token
    /// that was accepted before).
    pub earlier: Holder,
    /// The later holder (for a rejected write: the writer).
    pub later: Holder,
    /// For a rejected write: when it was made.
    pub at: Option<Instant>,
}

impl Violation {
    /// The stretch of time the violation involves.
    pub fn span(&self) -> (Instant, Instant) {
        let from = self.earlier.acquire_started.min(self.later.acquire_started);
        let to = self
            .earlier
            .window_end
            .max(self.later.window_end)
            .max(self.at.unwrap_or(from));
        (from, to)
    }

    /// Human-readable, times in ms since `origin`.
    pub fn describe(&self, origin: Instant) -> String {
        let (first, second) = match self.kind {
            ViolationKind::FencedOutWhileValid => ("accepted", "rejected"),
            ViolationKind::ReadSawNewerWrite => ("written ", "reader  "),
            ViolationKind::Overlap | ViolationKind::TooManyPermits | ViolationKind::TokenOrder => {
                ("earlier ", "later   ")
            }
        };
        let mut text = format!(
            "{} on {}:\n    {first}: {}\n    {second}: {}",
            self.kind.name(),
            self.later.resource,
            describe_holder(&self.earlier, origin),
            describe_holder(&self.later, origin)
        );
        if let Some(at) = self.at {
            let what = match self.kind {
                ViolationKind::ReadSawNewerWrite => "read",
                _ => "rejected write",
            };
            text.push_str(&format!("\n    {what} at {}", ms_since(origin, at)));
        }
        text
    }
}

fn describe_holder(holder: &Holder, origin: Instant) -> String {
    let token = holder
        .token
        .map_or_else(|| "none".to_string(), |t| t.to_string());
    format!(
        "client {} ({:?}) token {token}, acquire from {}, window {} .. {}, granted by nodes {:?}",
        holder.client,
        holder.kind,
        ms_since(origin, holder.acquire_started),
        ms_since(origin, holder.window_start),
        ms_since(origin, holder.window_end),
        holder.granted_by
    )
}

/// `12345.6 ms`
pub fn ms_since(origin: Instant, at: Instant) -> String {
    let ms = at.saturating_duration_since(origin).as_secs_f64() * 1000.0;
    format!("{ms:.1} ms")
}

/// What the checker found.
#[derive(Clone, Debug, Default)]
pub struct Findings {
    pub holders: u64,
    pub writes: WriteCounts,
    pub violations: Vec<Violation>,
}

impl Findings {
    pub fn count(&self, kind: ViolationKind) -> usize {
        self.violations.iter().filter(|v| v.kind == kind).count()
    }

    /// Violations between a reader and a writer of a read-write lock.
    pub fn reader_writer(&self) -> usize {
        self.violations
            .iter()
            .filter(|v| v.kind != ViolationKind::TooManyPermits)
            .filter(|v| v.earlier.kind == HoldKind::Shared || v.later.kind == HoldKind::Shared)
            .count()
    }
}

#[derive(Default)]
struct Inner {
    holders: Vec<Holder>,
    /// Per resource: the highest accepted token and its holder.
    highest: HashMap<String, (u64, usize)>,
    writes: WriteCounts,
    fenced_out: Vec<Violation>,
}

/// The store and the record of holders.
#[derive(Default)]
pub struct Checker {
    inner: Mutex<Inner>,
}

impl Checker {
    pub fn new() -> Checker {
        Checker::default()
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // Plain data updated in whole steps: a panic elsewhere cannot leave
        // it half-written.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a successful acquisition whose window opens now and lasts
    /// `validity`.
    pub fn begin_hold(
        &self,
        resource: &str,
        client: usize,
        acquire_started: Instant,
        window_start: Instant,
        validity: Duration,
        granted_by: Vec<usize>,
    ) -> HolderId {
        let mut inner = self.inner();
        inner.holders.push(Holder {
            resource: resource.to_string(),
            client,
            acquire_started,
            window_start,
            window_end: window_start + validity,
            token: None,
            granted_by,
            kind: HoldKind::Exclusive,
        });
        HolderId(inner.holders.len() - 1)
    }

    /// The hold is not exclusive (holds are exclusive unless set).
    pub fn set_kind(&self, id: HolderId, kind: HoldKind) {
        if let Some(holder) = self.inner().holders.get_mut(id.0) {
            holder.kind = kind;
        }
    }

    /// A permit holder reached its work (the store is not involved).
    pub fn permit_work(&self) {
        self.inner().writes.permits += 1;
    }

    /// A fenced read by reader `id` with `token`, now: a violation when the
    /// store holds a write with a token not below it while the reader's
    /// window is open. Returns whether the read was consistent.
    pub fn read(&self, id: HolderId, token: u64) -> bool {
        let mut inner = self.inner();
        let now = Instant::now();
        inner.writes.reads += 1;
        let Some(holder) = inner.holders.get(id.0).cloned() else {
            return true;
        };
        match inner.highest.get(&holder.resource).copied() {
            Some((highest, by)) if highest >= token && now < holder.window_end => {
                let earlier = inner.holders[by].clone();
                inner.fenced_out.push(Violation {
                    kind: ViolationKind::ReadSawNewerWrite,
                    earlier,
                    later: holder,
                    at: Some(now),
                });
                false
            }
            _ => true,
        }
    }

    pub fn set_token(&self, id: HolderId, token: u64) {
        if let Some(holder) = self.inner().holders.get_mut(id.0) {
            holder.token = Some(token);
        }
    }

    /// A fenced write by holder `id` with `token`, now.
    pub fn write(&self, id: HolderId, token: u64) -> WriteOutcome {
        let mut inner = self.inner();
        let now = Instant::now();
        let Some(holder) = inner.holders.get(id.0).cloned() else {
            return WriteOutcome::RejectedStale;
        };
        let valid = now < holder.window_end;
        let previous = inner.highest.get(&holder.resource).copied();
        match previous {
            Some((highest, by)) if token <= highest => {
                if valid {
                    inner.writes.rejected_while_valid += 1;
                    let earlier = inner.holders[by].clone();
                    inner.fenced_out.push(Violation {
                        kind: ViolationKind::FencedOutWhileValid,
                        earlier,
                        later: holder,
                        at: Some(now),
                    });
                    WriteOutcome::RejectedWhileValid
                } else {
                    inner.writes.rejected_stale += 1;
                    WriteOutcome::RejectedStale
                }
            }
            _ => {
                inner.highest.insert(holder.resource, (token, id.0));
                inner.writes.accepted += 1;
                if !valid {
                    inner.writes.accepted_late += 1;
                }
                WriteOutcome::Accepted { late: !valid }
            }
        }
    }

    /// The client reported its validity again (after an extension, a
    /// re-entry or a watchdog renewal, failed or not): the window now ends
    /// where that report says, earlier or later than before. No validity:
    /// the window ends now if it has not already.
    pub fn renew_window(&self, id: HolderId, validity: Option<Duration>) {
        let now = Instant::now();
        if let Some(holder) = self.inner().holders.get_mut(id.0) {
            holder.window_end = match validity {
                Some(validity) => now + validity,
                None => holder.window_end.min(now),
            };
        }
    }

    /// The holder starts releasing (or gives the lock up): its window ends
    /// now if it has not already.
    pub fn end_hold(&self, id: HolderId) {
        let now = Instant::now();
        if let Some(holder) = self.inner().holders.get_mut(id.0) {
            holder.window_end = holder.window_end.min(now);
        }
    }

    /// Every holder recorded so far.
    pub fn holders(&self) -> Vec<Holder> {
        self.inner().holders.clone()
    }

    /// Checks every pair of holders of each resource.
    pub fn findings(&self) -> Findings {
        let inner = self.inner();
        let mut by_resource: HashMap<&str, Vec<&Holder>> = HashMap::new();
        for holder in &inner.holders {
            by_resource
                .entry(holder.resource.as_str())
                .or_default()
                .push(holder);
        }
        let mut violations = Vec::new();
        let mut resources: Vec<_> = by_resource.into_iter().collect();
        resources.sort_by(|a, b| a.0.cmp(b.0));
        for (_, holders) in resources {
            overlaps(&holders, &mut violations);
            token_order(&holders, &mut violations);
        }
        violations.extend(inner.fenced_out.iter().cloned());
        Findings {
            holders: inner.holders.len() as u64,
            writes: inner.writes,
            violations,
        }
    }
}

/// Holders (of one resource) whose window starts while an earlier-starting
/// window it conflicts with is open, and permits that start while the
/// semaphore's other permits are all open. Concurrency only grows when a
/// window starts, so checking at every start finds every excess.
fn overlaps(holders: &[&Holder], out: &mut Vec<Violation>) {
    let mut sorted: Vec<&Holder> = holders
        .iter()
        .copied()
        .filter(|h| h.window_end > h.window_start)
        .collect();
    sorted.sort_by_key(|h| h.window_start);
    let mut open: Vec<&Holder> = Vec::new();
    for holder in sorted {
        open.retain(|o| o.window_end > holder.window_start);
        if let Some(earlier) = open.iter().find(|o| o.kind.conflicts(holder.kind)) {
            out.push(Violation {
                kind: ViolationKind::Overlap,
                earlier: (*earlier).clone(),
                later: holder.clone(),
                at: None,
            });
        }
        if let HoldKind::Permit(permits) = holder.kind {
            let mut others = open
                .iter()
                .filter(|o| matches!(o.kind, HoldKind::Permit(_)));
            let first = others.next();
            if let Some(earlier) = first.filter(|_| 1 + others.count() >= permits as usize) {
                out.push(Violation {
                    kind: ViolationKind::TooManyPermits,
                    earlier: (*earlier).clone(),
                    later: holder.clone(),
                    at: None,
                });
            }
        }
        open.push(holder);
    }
}

/// Holders (of one resource) whose acquisition began after an earlier
/// holder's window ended but whose token is not greater.
fn token_order(holders: &[&Holder], out: &mut Vec<Violation>) {
    let mut by_end: Vec<(&Holder, u64)> = holders
        .iter()
        .filter_map(|h| Some((*h, h.token?)))
        .collect();
    let mut by_start = by_end.clone();
    by_end.sort_by_key(|(h, _)| h.window_end);
    by_start.sort_by_key(|(h, _)| h.acquire_started);
    let mut ended = by_end.into_iter().peekable();
    let mut highest: Option<(&Holder, u64)> = None;
    for (holder, token) in by_start {
        while let Some((earlier, t)) =
            ended.next_if(|(earlier, _)| earlier.window_end < holder.acquire_started)
        {
            if highest.map_or(true, |(_, h)| t > h) {
                highest = Some((earlier, t));
            }
        }
        if let Some((earlier, t)) = highest {
            if token <= t {
                out.push(Violation {
                    kind: ViolationKind::TokenOrder,
                    earlier: earlier.clone(),
                    later: holder.clone(),
                    at: None,
                });
            }
        }
    }
}

impl fmt::Display for WriteOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteOutcome::Accepted { late: false } => f.write_str("accepted"),
            WriteOutcome::Accepted { late: true } => f.write_str("accepted (late)"),
            WriteOutcome::RejectedStale => f.write_str("rejected (stale holder)"),
            WriteOutcome::RejectedWhileValid => f.write_str("rejected inside validity"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_store_keeps_the_highest_token() {
        let checker = Checker::new();
        let t0 = Instant::now();
        let a = checker.begin_hold("r", 0, t0, t0, ms(60_000), vec![0, 1, 2]);
        assert_eq!(checker.write(a, 10), WriteOutcome::Accepted { late: false });
        let b = checker.begin_hold("r", 1, t0, t0, ms(60_000), vec![0, 1, 2]);
        assert_eq!(checker.write(b, 10), WriteOutcome::RejectedWhileValid);
        let c = checker.begin_hold("other", 1, t0, t0, ms(60_000), vec![]);
        assert_eq!(checker.write(c, 1), WriteOutcome::Accepted { late: false });
        let stale = checker.begin_hold("r", 2, t0, t0, Duration::ZERO, vec![]);
        assert_eq!(checker.write(stale, 9), WriteOutcome::RejectedStale);
        let late = checker.begin_hold("r", 3, t0, t0, Duration::ZERO, vec![]);
        assert_eq!(
            checker.write(late, 11),
            WriteOutcome::Accepted { late: true }
        );
        let findings = checker.findings();
        assert_eq!(findings.writes.accepted, 3);
        assert_eq!(findings.writes.accepted_late, 1);
        assert_eq!(findings.writes.rejected_stale, 1);
        assert_eq!(findings.writes.rejected_while_valid, 1);
    }

    #[test]
    fn overlapping_windows_are_found_and_disjoint_ones_are_not() {
        let checker = Checker::new();
        let t0 = Instant::now();
        let a = checker.begin_hold("r", 0, t0, t0, ms(100), vec![]);
        checker.set_token(a, 1);
        let b = checker.begin_hold("r", 1, t0 + ms(100), t0 + ms(110), ms(100), vec![]);
        checker.set_token(b, 2);
        let other = checker.begin_hold("s", 2, t0, t0 + ms(150), ms(100), vec![]);
        checker.set_token(other, 1);
        assert!(checker.findings().violations.is_empty());
        let c = checker.begin_hold("r", 2, t0, t0 + ms(150), ms(100), vec![]);
        checker.set_token(c, 3);
        let findings = checker.findings();
        assert_eq!(findings.count(ViolationKind::Overlap), 1);
        assert_eq!(findings.count(ViolationKind::TokenOrder), 0);
    }

    #[test]
    fn a_later_holder_with_a_smaller_token_is_found() {
        let checker = Checker::new();
        let t0 = Instant::now();
        let a = checker.begin_hold("r", 0, t0, t0, ms(100), vec![]);
        checker.set_token(a, 50);
        // Acquisition began while a was valid: no order required.
        let b = checker.begin_hold("r", 1, t0 + ms(50), t0 + ms(120), ms(100), vec![]);
        checker.set_token(b, 40);
        assert!(checker.findings().violations.is_empty());
        // Began after a's window ended: must be above 50.
        let c = checker.begin_hold("r", 2, t0 + ms(230), t0 + ms(240), ms(10), vec![]);
        checker.set_token(c, 50);
        let findings = checker.findings();
        assert_eq!(findings.count(ViolationKind::TokenOrder), 1);
        assert_eq!(findings.violations[0].earlier.token, Some(50));
    }

    #[test]
    fn readers_overlap_each_other_but_not_a_writer() {
        let checker = Checker::new();
        let t0 = Instant::now();
        let reader = |client, from: u64, token| {
            let id = checker.begin_hold("rw", client, t0, t0 + ms(from), ms(100), vec![]);
            checker.set_kind(id, HoldKind::Shared);
            checker.set_token(id, token);
        };
        reader(0, 0, 1);
        reader(1, 50, 2);
        reader(2, 60, 3);
        assert!(checker.findings().violations.is_empty());
        let writer = checker.begin_hold("rw", 3, t0 + ms(100), t0 + ms(120), ms(100), vec![]);
        checker.set_token(writer, 4);
        let findings = checker.findings();
        assert_eq!(findings.count(ViolationKind::Overlap), 1);
        assert_eq!(findings.violations[0].earlier.kind, HoldKind::Shared);
    }

    #[test]
    fn more_permits_than_the_semaphore_has_are_found() {
        let checker = Checker::new();
        let t0 = Instant::now();
        let permit = |client, from: u64| {
            let id = checker.begin_hold("sem", client, t0, t0 + ms(from), ms(100), vec![]);
            checker.set_kind(id, HoldKind::Permit(2));
            checker.set_token(id, client as u64 + 1);
        };
        permit(0, 0);
        permit(1, 10);
        // Starts after the first ended: two open at most.
        permit(2, 100);
        assert!(checker.findings().violations.is_empty());
        permit(3, 105);
        let findings = checker.findings();
        assert_eq!(findings.count(ViolationKind::TooManyPermits), 1);
        assert_eq!(findings.count(ViolationKind::Overlap), 0);
    }

    #[test]
    fn a_read_that_sees_a_newer_write_inside_its_window_is_found() {
        let checker = Checker::new();
        let t0 = Instant::now();
        let writer = checker.begin_hold("rw", 0, t0, t0, ms(60_000), vec![]);
        assert_eq!(
            checker.write(writer, 5),
            WriteOutcome::Accepted { late: false }
        );
        checker.end_hold(writer);
        let reader = checker.begin_hold("rw", 1, t0, t0, ms(60_000), vec![]);
        checker.set_kind(reader, HoldKind::Shared);
        assert!(checker.read(reader, 6));
        let stale = checker.begin_hold("rw", 2, t0, t0, ms(60_000), vec![]);
        checker.set_kind(stale, HoldKind::Shared);
        assert!(!checker.read(stale, 5));
        let findings = checker.findings();
        assert_eq!(findings.count(ViolationKind::ReadSawNewerWrite), 1);
        assert_eq!(findings.writes.reads, 2);
    }

    #[test]
    fn releasing_ends_the_window() {
        let checker = Checker::new();
        let t0 = Instant::now();
        let a = checker.begin_hold("r", 0, t0, t0, ms(60_000), vec![]);
        checker.end_hold(a);
        let b = checker.begin_hold("r", 1, Instant::now(), Instant::now(), ms(100), vec![]);
        checker.set_token(b, 1);
        assert!(checker.findings().violations.is_empty());
    }
}
