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
//! - **token order**: a holder whose token is not above an earlier
//!   holder's although their windows are ordered: its acquisition began
//!   after the earlier window ended (any two holders), or its window began
//!   after the earlier one ended and one of the two is exclusive (fencing
//!   broken: the earlier, stale holder could still overwrite it). Each
//!   holder's own first token counts, not one taken after a re-entry;
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

use crate::store::{Store, StoreWrite};

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
    /// Writes the real store's fence refused (`STALE`).
    pub store_refused: u64,
    /// Writes the real store could not take (an error, not a refusal).
    pub store_errors: u64,
    /// Resources whose unfenced copy (the negative control) ended on an
    /// older write than the highest token accepted: what the fence
    /// prevented.
    pub unfenced_stale: u64,
    /// Times a holder was asked whether it holds the lock (`is_held()`,
    /// a watchdog's `status()`), and of those, the times it was asked
    /// after its validity had ended by the checker's clock (where a yes
    /// is a violation).
    pub held_asked: u64,
    pub held_asked_after: u64,
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
        self.store_refused += other.store_refused;
        self.store_errors += other.store_errors;
        self.unfenced_stale += other.unfenced_stale;
        self.held_asked += other.held_asked;
        self.held_asked_after += other.held_asked_after;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViolationKind {
    Overlap,
    TooManyPermits,
    TokenOrder,
    FencedOutWhileValid,
    ReadSawNewerWrite,
    StoreDisagreed,
    HeldAfterValidity,
}

impl ViolationKind {
    pub const ALL: [ViolationKind; 7] = [
        ViolationKind::Overlap,
        ViolationKind::TooManyPermits,
        ViolationKind::TokenOrder,
        ViolationKind::FencedOutWhileValid,
        ViolationKind::ReadSawNewerWrite,
        ViolationKind::StoreDisagreed,
        ViolationKind::HeldAfterValidity,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ViolationKind::Overlap => "overlapping validity windows",
            ViolationKind::TooManyPermits => "more permit windows open than permits",
            ViolationKind::TokenOrder => "token not above an earlier holder's",
            ViolationKind::FencedOutWhileValid => "write rejected inside its validity window",
            ViolationKind::ReadSawNewerWrite => "read inside its window saw a newer write",
            ViolationKind::StoreDisagreed => {
                "the store's fence disagreed with the token order (LOCK.FENCED)"
            }
            ViolationKind::HeldAfterValidity => "said held after its validity ended",
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
            ViolationKind::FencedOutWhileValid | ViolationKind::StoreDisagreed => {
                ("accepted", "written ")
            }
            ViolationKind::ReadSawNewerWrite => ("written ", "reader  "),
            ViolationKind::HeldAfterValidity => ("holder  ", "holder  "),
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
                ViolationKind::HeldAfterValidity => "said held",
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
            .filter(|v| {
                !matches!(
                    v.kind,
                    ViolationKind::TooManyPermits | ViolationKind::HeldAfterValidity
                )
            })
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
    /// Resources a store write failed for: their end values prove nothing
    /// (the failure itself fails the run).
    store_failed: std::collections::HashSet<String>,
    /// Per holder: when the validity it last reported ends (taken after
    /// the report, so never before the client's own end). Unlike the
    /// window it is not cut short by the start of a release.
    validity_end: HashMap<usize, Instant>,
}

/// The store and the record of holders.
#[derive(Default)]
pub struct Checker {
    inner: Mutex<Inner>,
    /// The real store, whose fence must agree with the record.
    store: Option<Store>,
}

impl Checker {
    /// A checker whose record alone stands for the store.
    pub fn new() -> Checker {
        Checker::default()
    }

    /// A checker whose writes also go to a real fenced store: the record is
    /// the oracle the store's answers must agree with.
    pub fn with_store(store: Store) -> Checker {
        Checker {
            inner: Mutex::default(),
            store: Some(store),
        }
    }

    /// The real store's server log, if there is one.
    pub fn store_log(&self) -> Option<String> {
        self.store.as_ref().map(Store::log)
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
        let index = inner.holders.len();
        inner.validity_end.insert(index, window_start + validity);
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

    /// The holder's token, the first it took after its grant: a later one
    /// (after a re-entry) does not replace it, so the order checks compare
    /// each grant's own token.
    pub fn set_token(&self, id: HolderId, token: u64) {
        if let Some(holder) = self.inner().holders.get_mut(id.0) {
            holder.token.get_or_insert(token);
        }
    }

    /// A fenced write by holder `id` with `token`, now. With a real store,
    /// the write goes to it too (under the record's lock, so that both see
    /// the writes in one order) and its fence must agree with the record: it
    /// refuses exactly the tokens below the highest accepted (an equal token
    /// from another holder, which the record refuses, is the token-order
    /// check's business: the fence accepts equal tokens by contract).
    pub fn write(&self, id: HolderId, token: u64) -> WriteOutcome {
        let mut inner = self.inner();
        let now = Instant::now();
        let Some(holder) = inner.holders.get(id.0).cloned() else {
            return WriteOutcome::RejectedStale;
        };
        let valid = now < holder.window_end;
        let previous = inner.highest.get(&holder.resource).copied();
        if let Some(store) = &self.store {
            let outcome = store.write(&holder.resource, token);
            let expected_refusal = previous.is_some_and(|(highest, _)| token < highest);
            let agreed = match outcome {
                Ok(StoreWrite::RefusedStale) => {
                    inner.writes.store_refused += 1;
                    expected_refusal
                }
                Ok(StoreWrite::Accepted) => !expected_refusal,
                Err(_) => {
                    inner.writes.store_errors += 1;
                    inner.store_failed.insert(holder.resource.clone());
                    true
                }
            };
            if !agreed {
                let earlier = previous
                    .and_then(|(_, by)| inner.holders.get(by).cloned())
                    .unwrap_or_else(|| holder.clone());
                inner.fenced_out.push(Violation {
                    kind: ViolationKind::StoreDisagreed,
                    earlier,
                    later: holder.clone(),
                    at: Some(now),
                });
            }
        }
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
        let mut inner = self.inner();
        if let Some(holder) = inner.holders.get_mut(id.0) {
            holder.window_end = match validity {
                Some(validity) => now + validity,
                None => holder.window_end.min(now),
            };
        }
        if let Some(end) = inner.validity_end.get_mut(&id.0) {
            *end = match validity {
                Some(validity) => now + validity,
                None => (*end).min(now),
            };
        }
    }

    /// The holder said whether it holds the lock (`is_held()`, or a
    /// watchdog's `status()` is `Held`), asked at `asked` or later. After
    /// the end of the validity it last reported, by the checker's clock, a
    /// yes is a violation. Both times lean towards the client: `asked` is
    /// taken before the question, and the validity's end after the report
    /// (and the client's validity already keeps its drift allowance), so a
    /// correct client never trips it. Only for a hold that nothing renews
    /// behind the checker's back (no watchdog running).
    pub fn held_claim(&self, id: HolderId, asked: Instant, says_held: bool) {
        let mut inner = self.inner();
        inner.writes.held_asked += 1;
        let Some(end) = inner.validity_end.get(&id.0).copied() else {
            return;
        };
        if asked <= end {
            return;
        }
        inner.writes.held_asked_after += 1;
        if says_held {
            let holder = inner.holders[id.0].clone();
            inner.fenced_out.push(Violation {
                kind: ViolationKind::HeldAfterValidity,
                earlier: holder.clone(),
                later: holder,
                at: Some(asked),
            });
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

    /// The highest token any holder has had so far (0: none yet).
    pub fn highest_token(&self) -> u64 {
        self.inner()
            .holders
            .iter()
            .filter_map(|h| h.token)
            .max()
            .unwrap_or(0)
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
        let mut writes = inner.writes;
        if let Some(store) = &self.store {
            self.check_store_values(store, &inner, &mut writes, &mut violations);
        }
        Findings {
            holders: inner.holders.len() as u64,
            writes,
            violations,
        }
    }

    /// At the end, each resource's fenced value in the real store must be
    /// the highest token the record accepted; the unfenced control's value
    /// is counted when it is older (a stale write landed last).
    fn check_store_values(
        &self,
        store: &Store,
        inner: &Inner,
        writes: &mut WriteCounts,
        violations: &mut Vec<Violation>,
    ) {
        let mut resources: Vec<_> = inner.highest.iter().collect();
        resources.sort();
        for (resource, &(highest, by)) in resources {
            if inner.store_failed.contains(resource) {
                continue;
            }
            let Ok(values) = store.values(resource) else {
                writes.store_errors += 1;
                continue;
            };
            if values.unfenced.is_some_and(|v| v < highest) {
                writes.unfenced_stale += 1;
            }
            if values.fenced != Some(highest) {
                if let Some(holder) = inner.holders.get(by) {
                    violations.push(Violation {
                        kind: ViolationKind::StoreDisagreed,
                        earlier: holder.clone(),
                        later: holder.clone(),
                        at: None,
                    });
                }
            }
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

/// Pairs of holders (of one resource) whose windows are ordered but whose
/// tokens are not: the later holder's token must be above the earlier's
///
/// - for any two holders (readers and permits too) when the later one's
///   acquisition began after the earlier one's window ended: every node
///   the later one was granted by granted it after the earlier holder's
///   token was written back there, and fresh tokens exceed every earlier
///   one;
/// - for two holders that exclude each other (one exclusive, the other of
///   any kind) when the later one's window began after the earlier one's
///   ended, however early its acquisition began: a node of the majority the
///   earlier holder's token was written back to cannot have granted the
///   later holder before the earlier one (it would have held the later
///   holder's lock, whose lease outlives the later window's start, when it
///   granted the earlier one), so it granted it after, above that token.
///
/// Each holder is checked with its own first token (the one taken right
/// after its grant).
fn token_order(holders: &[&Holder], out: &mut Vec<Violation>) {
    let with_token: Vec<(&Holder, u64)> = holders
        .iter()
        .filter_map(|h| Some((*h, h.token?)))
        .collect();
    // Rule 1: acquisition began after the earlier window ended (any kinds).
    let began_after = sweep(&with_token, |h| h.acquire_started, |_, _| true);
    // Rule 2: window began after the earlier window ended, kinds that
    // exclude each other.
    let window_after = sweep(
        &with_token,
        |h| h.window_start,
        |earlier, later| earlier.kind.conflicts(later.kind),
    );
    // One violation per later holder, the first rule's if both found one.
    for (i, (holder, _)) in with_token.iter().enumerate() {
        if let Some(earlier) = began_after[i].or(window_after[i]) {
            out.push(Violation {
                kind: ViolationKind::TokenOrder,
                earlier: earlier.clone(),
                later: (*holder).clone(),
                at: None,
            });
        }
    }
}

/// For each holder (by its place in `holders`): the earlier holder with the
/// highest token among those whose window ended before `at` (its
/// acquisition's start or its window's start) and are `relevant` to it, if
/// that token is not below its own. Keeps the highest token per kind of
/// earlier holder, so that `relevant` (which depends only on the kinds) is
/// asked per kind.
fn sweep<'a>(
    holders: &[(&'a Holder, u64)],
    at: impl Fn(&Holder) -> Instant,
    relevant: impl Fn(&Holder, &Holder) -> bool,
) -> Vec<Option<&'a Holder>> {
    let mut found = vec![None; holders.len()];
    let mut by_end: Vec<usize> = (0..holders.len()).collect();
    by_end.sort_by_key(|&i| holders[i].0.window_end);
    let mut by_at: Vec<usize> = (0..holders.len()).collect();
    by_at.sort_by_key(|&i| at(holders[i].0));
    let mut ended = by_end.into_iter().peekable();
    // Highest token so far per kind of the earlier holder.
    let mut highest: Vec<(HoldKind, &Holder, u64)> = Vec::new();
    for i in by_at {
        let (holder, token) = holders[i];
        let start = at(holder);
        while let Some(e) = ended.next_if(|&e| holders[e].0.window_end < start) {
            let (earlier, t) = holders[e];
            match highest.iter_mut().find(|(k, _, _)| *k == earlier.kind) {
                Some(entry) if t > entry.2 => *entry = (earlier.kind, earlier, t),
                Some(_) => {}
                None => highest.push((earlier.kind, earlier, t)),
            }
        }
        found[i] = highest
            .iter()
            .filter(|(_, earlier, t)| relevant(earlier, holder) && token <= *t)
            .max_by_key(|(_, _, t)| *t)
            .map(|(_, earlier, _)| *earlier);
    }
    found
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

    /// The real store (a server with the module) refuses exactly the
    /// stale writes the record refuses, and ends on the highest token; the
    /// unfenced copy beside it ends on whatever came last.
    #[test]
    fn the_real_store_s_fence_agrees_with_the_record() {
        let checker = Checker::with_store(Store::start());
        let t0 = Instant::now();
        let a = checker.begin_hold("r", 0, t0, t0, ms(60_000), vec![0]);
        assert_eq!(checker.write(a, 10), WriteOutcome::Accepted { late: false });
        let stale = checker.begin_hold("r", 1, t0, t0, Duration::ZERO, vec![0]);
        assert_eq!(checker.write(stale, 9), WriteOutcome::RejectedStale);
        let late = checker.begin_hold("r", 2, t0, t0, Duration::ZERO, vec![0]);
        assert_eq!(
            checker.write(late, 11),
            WriteOutcome::Accepted { late: true }
        );
        let findings = checker.findings();
        assert_eq!(findings.count(ViolationKind::StoreDisagreed), 0);
        assert_eq!(findings.writes.store_refused, 1);
        assert_eq!(findings.writes.unfenced_stale, 0);
        // A stale write last: the fence keeps 11, the unfenced copy has 5.
        let zombie = checker.begin_hold("r", 3, t0, t0, Duration::ZERO, vec![0]);
        assert_eq!(checker.write(zombie, 5), WriteOutcome::RejectedStale);
        let findings = checker.findings();
        assert_eq!(findings.count(ViolationKind::StoreDisagreed), 0);
        assert_eq!(findings.writes.store_refused, 2);
        assert_eq!(findings.writes.unfenced_stale, 1);
        assert_eq!(findings.writes.store_errors, 0);
    }

    /// The check is not satisfied by any store: one that takes stale
    /// writes (its fence bypassed) is caught at the write and at the end.
    #[test]
    fn a_store_that_does_not_fence_is_caught() {
        let checker = Checker::with_store(Store::start_without_fence());
        let t0 = Instant::now();
        let a = checker.begin_hold("r", 0, t0, t0, ms(60_000), vec![0]);
        assert_eq!(checker.write(a, 10), WriteOutcome::Accepted { late: false });
        let stale = checker.begin_hold("r", 1, t0, t0, Duration::ZERO, vec![0]);
        assert_eq!(checker.write(stale, 9), WriteOutcome::RejectedStale);
        let findings = checker.findings();
        assert_eq!(
            findings.count(ViolationKind::StoreDisagreed),
            2,
            "{findings:?}"
        );
    }

    /// A yes after the validity the holder last reported is a violation; a
    /// yes inside it, or a no after it, is not; a release's start does
    /// not move the validity's end.
    #[test]
    fn a_holder_that_says_held_after_its_validity_is_a_violation() {
        let checker = Checker::new();
        let t0 = Instant::now();
        let id = checker.begin_hold("r", 0, t0, t0, ms(100), vec![0, 1, 2]);
        checker.held_claim(id, t0 + ms(50), true);
        checker.end_hold(id);
        checker.held_claim(id, t0 + ms(99), true);
        checker.held_claim(id, t0 + ms(150), false);
        let findings = checker.findings();
        assert_eq!(findings.count(ViolationKind::HeldAfterValidity), 0);
        assert_eq!(findings.writes.held_asked, 3);
        assert_eq!(findings.writes.held_asked_after, 1);
        checker.held_claim(id, t0 + ms(150), true);
        assert_eq!(
            checker.findings().count(ViolationKind::HeldAfterValidity),
            1
        );
        // A renewal moves the end; a report of no validity ends it.
        let renewed = checker.begin_hold("r", 1, t0, t0, ms(100), vec![0, 1, 2]);
        checker.renew_window(renewed, Some(Duration::from_secs(60)));
        checker.held_claim(renewed, t0 + ms(150), true);
        checker.renew_window(renewed, None);
        checker.held_claim(renewed, Instant::now() + ms(1), false);
        let findings = checker.findings();
        assert_eq!(findings.count(ViolationKind::HeldAfterValidity), 1);
        assert_eq!(findings.writes.held_asked_after, 3);
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
        // Acquisition began while a was valid, its window overlaps a's: no
        // order required (the overlap is the violation).
        let b = checker.begin_hold("r2", 1, t0 + ms(50), t0 + ms(90), ms(100), vec![]);
        checker.set_token(b, 40);
        let a2 = checker.begin_hold("r2", 0, t0, t0, ms(100), vec![]);
        checker.set_token(a2, 50);
        let findings = checker.findings();
        assert_eq!(findings.count(ViolationKind::TokenOrder), 0);
        assert_eq!(findings.count(ViolationKind::Overlap), 1);
        // Began after a's window ended: must be above 50.
        let c = checker.begin_hold("r", 2, t0 + ms(230), t0 + ms(240), ms(10), vec![]);
        checker.set_token(c, 50);
        let findings = checker.findings();
        assert_eq!(findings.count(ViolationKind::TokenOrder), 1);
        let order = findings
            .violations
            .iter()
            .find(|v| v.kind == ViolationKind::TokenOrder)
            .unwrap();
        assert_eq!(order.earlier.token, Some(50));
    }

    /// Holders of a read-write lock and of a semaphore whose acquisition
    /// began while the earlier holder held it, and whose window began after
    /// it ended: a writer after a reader (or a reader after a writer) must
    /// have the greater token; two readers or two permits need not, unless
    /// the later acquisition began after the earlier window ended.
    #[test]
    fn ordered_windows_need_ordered_tokens_across_kinds() {
        let t0 = Instant::now();
        let hold = |checker: &Checker, resource, kind, acquire: u64, from: u64, token| {
            let id = checker.begin_hold(
                resource,
                0,
                t0 + ms(acquire),
                t0 + ms(from),
                ms(100),
                vec![],
            );
            checker.set_kind(id, kind);
            checker.set_token(id, token);
        };
        let order = |checker: &Checker| checker.findings().count(ViolationKind::TokenOrder);
        // A writer given a token below an earlier reader's.
        let checker = Checker::new();
        hold(&checker, "rw", HoldKind::Shared, 0, 0, 50);
        hold(&checker, "rw", HoldKind::Exclusive, 50, 120, 40);
        assert_eq!(order(&checker), 1);
        // A reader given a token below an earlier writer's.
        let checker = Checker::new();
        hold(&checker, "rw", HoldKind::Exclusive, 0, 0, 50);
        hold(&checker, "rw", HoldKind::Shared, 50, 120, 40);
        assert_eq!(order(&checker), 1);
        // Two readers, two permits: granted side by side, any order.
        let checker = Checker::new();
        hold(&checker, "rw", HoldKind::Shared, 0, 0, 50);
        hold(&checker, "rw", HoldKind::Shared, 50, 120, 40);
        hold(&checker, "sem", HoldKind::Permit(2), 0, 0, 50);
        hold(&checker, "sem", HoldKind::Permit(2), 50, 120, 40);
        assert_eq!(order(&checker), 0);
        // A permit whose acquisition began after another's window ended.
        hold(&checker, "sem", HoldKind::Permit(2), 150, 160, 45);
        assert_eq!(order(&checker), 1);
        // Ordered windows with ordered tokens.
        let checker = Checker::new();
        hold(&checker, "rw", HoldKind::Shared, 0, 0, 50);
        hold(&checker, "rw", HoldKind::Exclusive, 50, 120, 51);
        hold(&checker, "rw", HoldKind::Shared, 100, 230, 52);
        assert_eq!(order(&checker), 0);
        assert!(checker.findings().violations.is_empty());
    }

    /// A re-entry's token does not replace the grant's first one: the order
    /// is checked with the token each grant took first.
    #[test]
    fn a_holder_keeps_its_first_token() {
        let checker = Checker::new();
        let t0 = Instant::now();
        let a = checker.begin_hold("r", 0, t0, t0, ms(100), vec![]);
        checker.set_token(a, 10);
        checker.set_token(a, 99);
        assert_eq!(checker.holders()[0].token, Some(10));
        let b = checker.begin_hold("r", 1, t0 + ms(150), t0 + ms(160), ms(100), vec![]);
        checker.set_token(b, 20);
        assert!(checker.findings().violations.is_empty());
        let c = checker.begin_hold("r", 2, t0 + ms(300), t0 + ms(310), ms(100), vec![]);
        checker.set_token(c, 15);
        assert_eq!(checker.findings().count(ViolationKind::TokenOrder), 1);
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
