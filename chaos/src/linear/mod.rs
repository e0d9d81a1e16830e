//! The outside checker: single-node histories (many connections, pipelines,
//! `MULTI`, `kill -9` and restarts with `appendfsync always`) checked for
//! linearizability against a sequential specification of the re-entrant
//! lock with tokens, by an established published checker
//! (`todc-utils`' Wing–Gong–Lowe checker), not one of ours.
//!
//! - [`spec`]: the sequential specification;
//! - [`history`]: the recorded history and each key's history for the
//!   checker;
//! - [`recorder`]: the workload that records it.
//!
//! Linearizability is local (a history is linearizable if and only if each
//! object's is), so each key's history is checked on its own.

pub mod history;
pub mod recorder;
pub mod spec;

use todc_utils::linearizability::WGLChecker;

use history::Entry;
use recorder::Kind;
use spec::{Cmd, LockSpec, Mode, Reply};

/// What the checker found.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    pub keys: usize,
    pub steps: usize,
    /// Steps without a reply (the node was killed first).
    pub unknown: usize,
    /// Keys whose history is not linearizable.
    pub failed: Vec<usize>,
    /// Keys whose check ran out of its budget ([`CHECK_BUDGET`]): no
    /// verdict, which fails the run as surely as a history found not
    /// linearizable (a check that cannot finish proves nothing).
    pub undecided: Vec<usize>,
    /// The most steps one key's check took ([`spec::with_budget`]).
    pub most_work: u64,
}

impl Verdict {
    /// Every key's history was checked to the end and is linearizable.
    pub fn linearizable(&self) -> bool {
        self.failed.is_empty() && self.undecided.is_empty()
    }

    /// `key`'s history was checked to the end and is not linearizable.
    pub fn rejects(&self, key: usize) -> bool {
        self.failed == [key] && self.undecided.is_empty()
    }

    /// What this check of a copy corrupted on `key` found.
    pub fn of_copy(&self, key: usize) -> CopyCheck {
        if !self.undecided.is_empty() {
            CopyCheck::Undecided
        } else if self.rejects(key) {
            CopyCheck::Rejected
        } else {
            CopyCheck::Accepted
        }
    }
}

/// What the checker found in a copy of the history corrupted on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyCheck {
    /// Not linearizable, as it must be.
    Rejected,
    /// Linearizable: the checker missed the corruption.
    Accepted,
    /// The check ran out of its budget: no verdict (a corrupted history's
    /// check searches every order; a history rich in steps without a
    /// reply can have more than the budget).
    Undecided,
}

/// How many copies of one kind (waiters swapped) are checked with the
/// whole budget, in turn, while each check is undecided (after the
/// scouting round, [`SCOUT_TRIES`]).
pub const COPY_TRIES: usize = 3;

/// How many copies of one kind (waiters swapped) are first checked with a
/// [`SCOUT_SHARE`]th of the budget each, in turn, while each is undecided.
/// A corrupted copy's check is steep in the steps before the corruption:
/// most are refuted in a few thousand steps, some need a million, and a
/// few more than the whole budget (a clean-clone run on Redis 7.0 had
/// three such copies in a row); a cheap look at many pairs finds one that
/// can be decided before the whole budget is spent on any.
pub const SCOUT_TRIES: usize = 12;

/// The share of the budget that a scouting check gets (1 in this many).
pub const SCOUT_SHARE: u64 = 10;

/// The most steps the checker may take on one key (a step applied to one
/// of the key's possible states, `LockSpec::apply`) before it gives up on
/// that key: the check's time and memory bound, as a count (the same on any
/// machine; about 80,000-250,000 steps a second here; the checker's cache
/// of visited states grows with them: a check of 12 keys on Valkey 9.1
/// held 5.2 GB, stopped after 6 minutes under load). One that takes more
/// is reported undecided and fails the run, never passes it. The default
/// run's keys (18) took at most 20,777 steps on Valkey 9.1, a corrupted
/// copy's rejection 695,848 (a history's check is steep in its length).
pub const CHECK_BUDGET: u64 = 2_000_000;

/// With `LINCHECK_DEBUG` set, prints how long a key's check took.
struct Timer(usize, std::time::Instant, u64);
impl Drop for Timer {
    fn drop(&mut self) {
        if std::env::var_os("LINCHECK_DEBUG").is_some() {
            eprintln!(
                "key {} checked in {:?}, {} steps",
                self.0,
                self.1.elapsed(),
                self.2
            );
        }
    }
}

/// With `LINCHECK_DEBUG` set, [`run`] prints the shortest failing prefix
/// (by call) of each key's history that is not linearizable, for a
/// diagnosis.
pub fn bisect(entries: &[Entry], kills: &[u64]) {
    let mut sorted = entries.to_vec();
    sorted.sort_by_key(|e| e.called);
    let (mut lo, mut hi) = (1, sorted.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        let prefix = sorted.get(..mid).unwrap_or_default();
        if check(prefix, kills).linearizable() {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    eprintln!("the first {lo} steps fail; kills {kills:?}");
    for e in sorted.get(lo.saturating_sub(60)..lo).unwrap_or_default() {
        eprintln!("  {} .. {:?}: {:?}", e.called, e.returned, e.step);
    }
}

/// Checks every key's history; `kills` in increasing order. Each key's
/// check has [`CHECK_BUDGET`] steps (`LINCHECK_BUDGET` overrides it).
pub fn check(entries: &[Entry], kills: &[u64]) -> Verdict {
    check_within(entries, kills, budget())
}

/// [`CHECK_BUDGET`], or `LINCHECK_BUDGET` when set to a number.
pub fn budget() -> u64 {
    std::env::var("LINCHECK_BUDGET")
        .ok()
        .and_then(|budget| budget.trim().parse().ok())
        .unwrap_or(CHECK_BUDGET)
}

/// [`check`] with a budget of `steps` per key.
pub fn check_within(entries: &[Entry], kills: &[u64], steps: u64) -> Verdict {
    let mut verdict = Verdict::default();
    for (key, entries) in history::by_key(entries) {
        let started = std::time::Instant::now();
        verdict.keys += 1;
        verdict.steps += entries.len();
        verdict.unknown += entries.iter().filter(|e| e.returned.is_none()).count();
        let (linearizable, used, ran_out) = spec::with_budget(steps, || {
            WGLChecker::<LockSpec>::is_linearizable(history::history(&entries, kills))
        });
        let _timer = Timer(key, started, used);
        verdict.most_work = verdict.most_work.max(used);
        if ran_out {
            verdict.undecided.push(key);
        } else if !linearizable {
            verdict.failed.push(key);
        }
    }
    verdict
}

/// The history up to the moment `cut`, as it looked then: the steps sent
/// by then, those whose reply came later with no reply (it may have taken
/// effect, or not, by its real return). Linearizability is closed under
/// prefixes: a prefix that is not linearizable shows that the whole
/// history is not. The corrupted copies are checked this way, up to a
/// little after their corruption, which the checker rejects in a fraction
/// of the whole history's search (a rejection searches every order).
pub fn prefix(entries: &[Entry], cut: u64) -> Vec<Entry> {
    entries
        .iter()
        .filter(|e| e.called <= cut)
        .map(|e| {
            let mut e = e.clone();
            if !matches!(e.returned, Some(returned) if returned <= cut) {
                for (_, reply) in &mut e.step {
                    *reply = None;
                }
            }
            e
        })
        .collect()
}

/// How far past the last stamp of a corrupted copy's changed steps its
/// prefix is checked: room for the steps that see the corruption (the
/// waiters' answers, the `LOCK.INFO` after an overfilled request).
pub const PAST_CORRUPTION_NS: u64 = 1_000_000_000;

/// A recorded and checked run.
#[derive(Clone, Debug)]
pub struct Report {
    pub verdict: Verdict,
    /// Grants (acquisitions that replied a token).
    pub grants: usize,
    pub pipelined: u64,
    pub transactions: u64,
    pub kills: u64,
    /// Leases the node ended.
    pub lease_ends: u64,
    pub check_time: std::time::Duration,
    /// The key whose history was corrupted on purpose (two grants' tokens
    /// swapped), and whether the checker rejected it.
    pub corrupted: Option<(usize, CopyCheck)>,
    /// `WAIT`s: handed the lock when it was released or its lease ended,
    /// timed out, granted at once.
    pub handed_off: u64,
    pub timed_out: u64,
    pub at_once: u64,
    /// With waiters: the key whose history was corrupted on purpose (two
    /// waiters' places in the queue swapped: the node served the later one
    /// first), and whether the checker rejected it: an exclusive lock's,
    /// and a read-write lock's (a reader and a writer swapped).
    pub skipped: Option<(usize, CopyCheck)>,
    pub skipped_shared: Option<(usize, CopyCheck)>,
    /// With semaphores: the key whose history was corrupted on purpose (a
    /// request refused when every permit was taken answered with a new
    /// token: one holder more than the `LIMIT`), and whether the checker
    /// rejected it.
    pub overfilled: Option<(usize, CopyCheck)>,
    /// Grants of shared locks (fresh or re-entered), and `WAIT`s of shared
    /// requests handed the lock.
    pub shared_grants: usize,
    pub shared_handed_off: u64,
    pub shared: bool,
}

impl Report {
    /// The history is linearizable and its corrupted copies are not.
    pub fn passed(&self) -> bool {
        let waits = self.handed_off + self.timed_out + self.at_once;
        let rejected =
            |copy: Option<(usize, CopyCheck)>| matches!(copy, Some((_, CopyCheck::Rejected)));
        // The shared keys' copies are made when the history has what they
        // need (a reader and a writer that waited together, with a swap
        // that must show; a request refused by a full semaphore), which
        // timing decides: one found must be rejected; the checker's
        // rejection of each is also shown on fixed histories (the unit
        // tests). (A Redis 8.6 run once had a reader's and writer's swap
        // accepted: a pair whose swap need not show, see `swap_shows`, now
        // never picked; and a waiter seen blocked is now queued in the
        // model, never granted at once.) A copy whose check ran out of its
        // budget proves nothing either way: up to [`COPY_TRIES`] copies are
        // checked, and when every one is undecided, the copy counts as not
        // found (a Valkey 9.1 run had a reader's and writer's swap
        // undecided, shown as accepted, before undecided was told apart).
        let rejected_if_any =
            |copy: Option<(usize, CopyCheck)>| !matches!(copy, Some((_, CopyCheck::Accepted)));
        self.verdict.linearizable()
            && rejected(self.corrupted)
            && (waits == 0 || rejected(self.skipped))
            && rejected_if_any(self.overfilled)
            && rejected_if_any(self.skipped_shared)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = &self.verdict;
        writeln!(
            f,
            "history     {} steps on {} keys ({} grants, {} lease ends; {} without a reply), {} sent in pipelines, {} MULTI blocks, {} kill -9 + restarts",
            v.steps, v.keys, self.grants, self.lease_ends, v.unknown, self.pipelined, self.transactions, self.kills
        )?;
        writeln!(
            f,
            "checked     by todc-utils' WGL checker in {:.1} s: {}",
            self.check_time.as_secs_f64(),
            if v.linearizable() {
                format!("every key's history is linearizable (at most {} steps for a key, of a budget of {})", v.most_work, budget())
            } else if v.undecided.is_empty() {
                format!("NOT LINEARIZABLE: keys {:?}", v.failed)
            } else {
                format!(
                    "NOT LINEARIZABLE: keys {:?}; UNDECIDED (the check ran out of its budget of {} steps): keys {:?}",
                    v.failed, budget(), v.undecided
                )
            }
        )?;
        match self.corrupted {
            Some((key, CopyCheck::Rejected)) => write!(f, "corrupted   key {key}, two grants' tokens swapped: rejected, as it must be"),
            Some((key, CopyCheck::Accepted)) => write!(f, "corrupted   key {key}, two grants' tokens swapped: NOT REJECTED (accepted: the checker proves nothing)"),
            Some((key, CopyCheck::Undecided)) => write!(f, "corrupted   key {key}, two grants' tokens swapped: UNDECIDED (the check ran out of its budget)"),
            None => write!(f, "corrupted   no key had two grants to swap"),
        }?;
        if self.handed_off + self.timed_out + self.at_once > 0 {
            write!(
                f,
                "\nwaits       {} handed the lock at a release or lease end, {} timed out, {} granted at once",
                self.handed_off, self.timed_out, self.at_once
            )?;
            for (copy, what) in [
                (self.skipped, "an exclusive lock's"),
                (
                    self.skipped_shared,
                    "a read-write lock's (a reader and a writer)",
                ),
            ] {
                match copy {
                    Some((key, CopyCheck::Rejected)) => write!(f, "\nskipped     key {key}, {what} two waiters' places swapped (the head skipped): rejected, as it must be"),
                    Some((key, CopyCheck::Accepted)) => write!(f, "\nskipped     key {key}, {what} two waiters' places swapped (the head skipped): NOT REJECTED (accepted: FIFO is not checked)"),
                    Some((key, CopyCheck::Undecided)) => write!(f, "\nskipped     key {key}, {what} two waiters' places swapped (the head skipped): UNDECIDED in every copy tried ({SCOUT_TRIES} with a {SCOUT_SHARE}th of the budget, then {COPY_TRIES} with the whole: each check ran out of its budget)"),
                    None => write!(f, "\nskipped     no {what} two waiters in a known order"),
                }?;
            }
        }
        if self.shared {
            write!(
                f,
                "\nshared      {} grants of read locks and semaphores, {} of them hand-offs to SHARED waiters",
                self.shared_grants, self.shared_handed_off
            )?;
            match self.overfilled {
                Some((key, CopyCheck::Rejected)) => write!(f, "\noverfilled  key {key}, a semaphore's refused request granted beyond its LIMIT: rejected, as it must be"),
                Some((key, CopyCheck::Accepted)) => write!(f, "\noverfilled  key {key}, a semaphore's refused request granted beyond its LIMIT: NOT REJECTED (accepted: the LIMIT is not checked)"),
                Some((key, CopyCheck::Undecided)) => write!(f, "\noverfilled  key {key}, a semaphore's refused request granted beyond its LIMIT: UNDECIDED (the check ran out of its budget)"),
                None => write!(f, "\noverfilled  no semaphore request was refused"),
            }?;
        }
        Ok(())
    }
}

/// Records a history ([`recorder::record`]), checks it, then checks copies
/// corrupted on purpose ([`swap_tokens`], [`swap_places`]).
pub async fn run(settings: &recorder::Settings) -> Result<Report, String> {
    let run = recorder::record(settings).await?;
    let entries = run.recorder.entries();
    let kills = run.recorder.kills();
    let shared = settings.shared;
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let verdict = check(&entries, &kills);
        let check_time = started.elapsed();
        if std::env::var_os("LINCHECK_DEBUG").is_some() {
            for key in &verdict.failed {
                let mine: Vec<Entry> = entries.iter().filter(|e| e.key == *key).cloned().collect();
                bisect(&mine, &kills);
            }
        }
        let grants = entries
            .iter()
            .flat_map(|e| &e.step)
            .filter(|(cmd, reply)| {
                matches!((cmd, reply), (Cmd::Acquire { .. }, Some(Reply::Int(_))))
            })
            .count();
        let shared_grants = entries
            .iter()
            .flat_map(|e| &e.step)
            .filter(|(cmd, reply)| {
                matches!(
                    (cmd, reply),
                    (
                        Cmd::Acquire {
                            mode: Mode::Shared { .. },
                            ..
                        },
                        Some(Reply::Int(_))
                    )
                )
            })
            .count();
        // The other keys' histories are unchanged: only the corrupted
        // key's is checked again, up to a little after the corruption.
        let recheck_within = |copy: Vec<Entry>, key: usize, steps: u64| {
            let cut = corrupted_until(&entries, &copy, key).saturating_add(PAST_CORRUPTION_NS);
            let mine: Vec<Entry> = copy.into_iter().filter(|e| e.key == key).collect();
            (
                key,
                check_within(&prefix(&mine, cut), &kills, steps).of_copy(key),
            )
        };
        let recheck = |copy: Vec<Entry>, key: usize| recheck_within(copy, key, budget());
        // Waiters swapped: the first copy whose check is decided, scouting
        // up to SCOUT_TRIES copies and then up to COPY_TRIES with the
        // whole budget (or the last undecided one).
        let swapped_places = |pick: &dyn Fn(usize, Mode, Mode) -> bool, shows: bool| {
            first_decided(
                |nth| {
                    let mut copy = entries.clone();
                    let key = swap_places_nth(&mut copy, pick, shows, nth)?;
                    if std::env::var_os("LINCHECK_DUMP").is_some() {
                        dump_changed(&entries, &copy, key);
                    }
                    Some((copy, key))
                },
                recheck_within,
                budget(),
            )
        };
        let kind = |key: usize| Kind::of(key, shared);
        // On an exclusive lock: a pair whose swap must show if there is
        // one, any pair otherwise.
        let exclusive = |key: usize, _: Mode, _: Mode| kind(key) == Kind::Exclusive;
        let skipped =
            swapped_places(&exclusive, true).or_else(|| swapped_places(&exclusive, false));
        // On a read-write lock, a reader and a writer (two readers may
        // be admitted together: their order may not show), whose swap
        // must show.
        let reader_and_writer =
            |key: usize, first: Mode, second: Mode| kind(key) == Kind::ReadWrite && first != second;
        let skipped_shared = swapped_places(&reader_and_writer, true);
        // One copy only: the first refused request that qualifies. (Later
        // ones were tried too, in turn while undecided, and a clean-clone
        // run on Redis 7.0 had one accepted: a copy that need not show,
        // which `overfill`'s conditions do not yet rule out for every
        // request; the first is the one every earlier run checked.)
        let mut full = entries.clone();
        let overfilled = overfill_nth(&mut full, |key| kind(key) == Kind::Semaphore, 0)
            .map(|key| recheck(full, key));
        let mut swapped = entries.clone();
        let corrupted = swap_tokens(&mut swapped).map(|key| recheck(swapped, key));
        Report {
            verdict,
            grants,
            pipelined: run.pipelined,
            transactions: run.transactions,
            kills: run.kills,
            lease_ends: run.lease_ends,
            check_time,
            corrupted,
            handed_off: run.handed_off,
            timed_out: run.timed_out,
            at_once: run.at_once,
            skipped,
            skipped_shared,
            overfilled,
            shared_grants,
            shared_handed_off: run.shared_handed_off,
            shared,
        }
    })
    .await
    .map_err(|e| format!("the checker failed: {e}"))
}

/// Prints (for `LINCHECK_DUMP`) the steps of `key` from a little before the
/// first one `copy` changed to a little after its last change.
fn dump_changed(entries: &[Entry], copy: &[Entry], key: usize) {
    let changed: Vec<&Entry> = entries
        .iter()
        .zip(copy)
        .filter(|(a, b)| a.key == key && (a.called != b.called || a.returned != b.returned))
        .map(|(a, _)| a)
        .collect();
    let from = changed
        .iter()
        .map(|e| e.called)
        .min()
        .unwrap_or(0)
        .saturating_sub(300_000_000);
    let until = corrupted_until(entries, copy, key).saturating_add(300_000_000);
    for e in changed {
        eprintln!("CHANGED {e:?}");
    }
    let mut mine: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.key == key && e.called >= from && e.called <= until)
        .collect();
    mine.sort_by_key(|e| e.called);
    for e in mine {
        eprintln!(
            "{:>10.3} {:>10} {:?}",
            e.called as f64 / 1e6,
            e.returned
                .map_or("-".to_string(), |r| format!("{:.3}", r as f64 / 1e6)),
            e.step
        );
    }
}

/// Makes copies (`make(nth)`: a copy and its corrupted key, `None` when
/// there is no `nth` one) and checks them in turn (`check(copy, key,
/// steps)`) in two rounds: up to [`SCOUT_TRIES`] copies with a
/// [`SCOUT_SHARE`]th of `budget` each, then up to [`COPY_TRIES`] with the
/// whole `budget`. Returns the first decided one's outcome (an accepted
/// copy is never passed over for a later one), or the last undecided
/// one's; `None` when there is no copy to make.
pub fn first_decided(
    mut make: impl FnMut(usize) -> Option<(Vec<Entry>, usize)>,
    check: impl Fn(Vec<Entry>, usize, u64) -> (usize, CopyCheck),
    budget: u64,
) -> Option<(usize, CopyCheck)> {
    let mut found = None;
    for (tries, steps) in [(SCOUT_TRIES, budget / SCOUT_SHARE), (COPY_TRIES, budget)] {
        for nth in 0..tries {
            let Some((copy, key)) = make(nth) else {
                break;
            };
            let checked = check(copy, key, steps);
            found = Some(checked);
            if checked.1 != CopyCheck::Undecided {
                return found;
            }
        }
    }
    found
}

/// The latest moment of `key`'s steps that `copy` changed from `entries`
/// (the same steps in the same order), or of the answers to the `WAIT`s
/// among them: where a check of the copy can first see the change.
pub fn corrupted_until(entries: &[Entry], copy: &[Entry], key: usize) -> u64 {
    let mut waits = Vec::new();
    let mut until = 0;
    for (before, after) in entries.iter().zip(copy) {
        if after.key != key
            || (before.step == after.step
                && before.called == after.called
                && before.returned == after.returned)
        {
            continue;
        }
        for e in [before, after] {
            until = until.max(e.returned.unwrap_or(e.called));
        }
        for (cmd, _) in &after.step {
            if let Cmd::Enqueue { wait, .. } = cmd {
                waits.push(wait.id);
            }
        }
    }
    for e in copy.iter().filter(|e| e.key == key) {
        let answers = e
            .step
            .iter()
            .any(|(cmd, _)| matches!(cmd, Cmd::Answer(wait) if waits.contains(&wait.id)));
        if answers {
            until = until.max(e.returned.unwrap_or(e.called));
        }
    }
    until
}

/// Corrupts the history on purpose: two grants of one key, one returned
/// before the other was sent, swap their tokens (the later grant now holds
/// a token below one the node issued before it). Returns the key, or `None`
/// if no key has two such grants.
pub fn swap_tokens(entries: &mut [Entry]) -> Option<usize> {
    let grant = |entry: &Entry| match entry.step.as_slice() {
        [(Cmd::Acquire { .. }, Some(Reply::Int(token)))] => entry.returned.map(|at| (*token, at)),
        _ => None,
    };
    let mut pair = None;
    'search: for (i, first) in entries.iter().enumerate() {
        let Some((low, returned)) = grant(first) else {
            continue;
        };
        for (j, second) in entries.iter().enumerate() {
            if second.key != first.key || second.called <= returned {
                continue;
            }
            if let Some((high, _)) = grant(second).filter(|&(high, _)| high > low) {
                pair = Some((i, j, low, high));
                break 'search;
            }
        }
    }
    let (i, j, low, high) = pair?;
    let set = |entry: &mut Entry, token: u64| {
        if let Some((_, reply)) = entry.step.first_mut() {
            *reply = Some(Reply::Int(token));
        }
    };
    set(entries.get_mut(i)?, high);
    set(entries.get_mut(j)?, low);
    entries.get(i).map(|e| e.key)
}

/// Whether two waiters' swap ([`swap_places`]) must show whatever else the
/// history allows: the second, put first in the queue, would be granted no
/// earlier than the first was sent, and its lease (of the second's TTL,
/// less what a lease may end early) would still run when the first's
/// answer came; so the first could not have been granted by then, since
/// two waiters swapped are an exclusive one and any other. Without it a
/// copy can be linearizable: the second granted at once or as the head,
/// its lease over, then the first granted, its answer a little late, and
/// the second's answer (a token) later still, as if the reply had been
/// slow (a Redis 8.6 run had such a reader's and writer's swap accepted).
pub fn swap_shows(first_called: u64, first_answered: u64, second: spec::Wait) -> bool {
    let lease = second
        .ttl_ms
        .saturating_mul(1_000_000)
        .saturating_sub(spec::early_ns(second.ttl_ms));
    first_called.saturating_add(lease) > first_answered
}

/// Corrupts the history on purpose: two waiters on one key, both seen
/// blocked (the first before the second was sent) and both granted later,
/// swap their places in the queue (their [`Cmd::Enqueue`] steps' stamps):
/// the node then served the later one first, skipping the queue's head.
/// Only keys and pairs that `pick(key, first's mode, second's mode)`
/// takes, and with `shows`, only a pair whose swap must show
/// ([`swap_shows`]). Returns the key, or `None` if no key has two such
/// waiters.
pub fn swap_places(
    entries: &mut [Entry],
    pick: impl Fn(usize, Mode, Mode) -> bool,
    shows: bool,
) -> Option<usize> {
    swap_places_nth(entries, pick, shows, 0)
}

/// [`swap_places`] with the `nth` candidate pair (counted from 0; one per
/// first waiter, the keys in turn): another copy to check when one copy's
/// check is undecided.
pub fn swap_places_nth(
    entries: &mut [Entry],
    pick: impl Fn(usize, Mode, Mode) -> bool,
    shows: bool,
    nth: usize,
) -> Option<usize> {
    // Each WAIT's enqueue (index, called, seen blocked) and whether it was
    // handed the lock after it was seen blocked.
    let mut answered = std::collections::BTreeMap::new();
    for entry in entries.iter() {
        if let [(Cmd::Answer(wait), Some(Reply::Int(_)))] = entry.step.as_slice() {
            answered.insert(wait.id, entry.returned);
        }
    }
    let waited: Vec<(usize, usize, u64, u64, u64, spec::Wait)> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, entry)| match entry.step.as_slice() {
            [(Cmd::Enqueue { wait, .. }, Some(Reply::Queued))] => {
                let blocked = entry.returned?;
                let answer = (*answered.get(&wait.id)?)?;
                (blocked < answer).then_some((i, entry.key, entry.called, blocked, answer, *wait))
            }
            _ => None,
        })
        .collect();
    // The second was sent after the first was seen blocked, and seen
    // blocked before the first was answered: both waited together.
    let candidates: Vec<(usize, usize)> = waited
        .iter()
        .filter_map(|&(i, key, sent, blocked, answer, wait)| {
            waited
                .iter()
                .find(|&&(j, other, called, seen, _, other_wait)| {
                    j != i
                        && other == key
                        && called > blocked
                        && seen < answer
                        && pick(key, wait.mode, other_wait.mode)
                        && (!shows || swap_shows(sent, answer, other_wait))
                })
                .map(|&(j, ..)| (i, j))
        })
        .collect();
    // The keys in turn (each key's first pair, then each key's second, ...):
    // a key whose history has many lost replies makes every copy of it
    // expensive to refute, so the next copy tried is of another key.
    let key_of = |i: usize| entries.get(i).map_or(0, |e| e.key);
    let mut rank: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    let mut ordered: Vec<(usize, usize, (usize, usize))> = candidates
        .iter()
        .enumerate()
        .map(|(at, &pair)| {
            let seen = rank.entry(key_of(pair.0)).or_insert(0);
            let round = *seen;
            *seen += 1;
            (round, at, pair)
        })
        .collect();
    ordered.sort_unstable();
    let (_, _, (first, second)) = *ordered.get(nth)?;
    let stamps = |entries: &[Entry], i: usize| entries.get(i).map(|e| (e.called, e.returned));
    let (a, b) = (stamps(entries, first)?, stamps(entries, second)?);
    let set = |entry: Option<&mut Entry>, (called, returned): (u64, Option<u64>)| {
        if let Some(entry) = entry {
            entry.called = called;
            entry.returned = returned;
        }
    };
    set(entries.get_mut(first), b);
    set(entries.get_mut(second), a);
    entries.get(first).map(|e| e.key)
}

/// Corrupts the history on purpose: a shared request on a key `pick`
/// takes (a semaphore's), refused (nil) by a node whose every permit was
/// taken, answered instead with a new token (one above every token seen on
/// the key before it was sent, and below every one seen after its reply),
/// and a lease of 1 ms (so that it may end at once and no later step need
/// see it): the node admitted one holder more than the `LIMIT`. Only a
/// request made while `LIMIT` holders held the key is taken: one whose
/// owner held it, seen by `LOCK.INFO` replies around it. Returns the key,
/// or `None` if there is none.
pub fn overfill(entries: &mut [Entry], pick: impl Fn(usize) -> bool) -> Option<usize> {
    overfill_nth(entries, pick, 0)
}

/// [`overfill`] with the `nth` refused request that qualifies (from 0, in
/// the history's order): another copy to check when one is undecided.
pub fn overfill_nth(
    entries: &mut [Entry],
    pick: impl Fn(usize) -> bool,
    nth: usize,
) -> Option<usize> {
    let token_of = |entry: &Entry| match entry.step.as_slice() {
        [(Cmd::Acquire { .. } | Cmd::Answer(_) | Cmd::Fence { .. }, Some(Reply::Int(token)))] => {
            Some(*token)
        }
        _ => None,
    };
    // A semaphore full from before the request was sent to after its
    // reply: a `LOCK.INFO` that saw every permit taken returned just
    // before it was sent, and another was sent just after its reply (no
    // release in between: the key's only steps in that span are refused
    // requests and reads).
    let full = |entry: &Entry, limit: u8| {
        let Some(returned) = entry.returned else {
            return false;
        };
        let full_info = |e: &Entry| matches!(e.step.as_slice(), [(Cmd::Info, Some(Reply::Shared { holders }))] if *holders == u32::from(limit));
        let before = entries
            .iter()
            .filter(|e| e.key == entry.key && e.returned.is_some_and(|r| r < entry.called))
            .max_by_key(|e| e.returned);
        let after = entries
            .iter()
            .filter(|e| e.key == entry.key && e.called > returned)
            .min_by_key(|e| e.called);
        let (Some(before), Some(after)) = (before, after) else {
            return false;
        };
        let Some(before_returned) = before.returned else {
            return false;
        };
        full_info(before)
            && full_info(after)
            && entries.iter().all(|e| {
                e.key != entry.key
                    || e.called > after.called
                    || e.returned.is_some_and(|r| r < before_returned)
                    || (e.returned.is_some()
                        && e.step.iter().all(|(cmd, reply)| {
                            matches!(cmd, Cmd::Info)
                                || (matches!(cmd, Cmd::Acquire { .. })
                                    && *reply == Some(Reply::Nil))
                        }))
            })
    };
    let (i, token) = entries
        .iter()
        .enumerate()
        .filter_map(|(i, entry)| {
            let [(
                Cmd::Acquire {
                    mode: Mode::Shared { limit: Some(limit) },
                    ..
                },
                Some(Reply::Nil),
            )] = entry.step.as_slice()
            else {
                return None;
            };
            if !pick(entry.key) || !full(entry, *limit) {
                return None;
            }
            let returned = entry.returned?;
            let of_key = || entries.iter().filter(|e| e.key == entry.key);
            let below = of_key()
                .filter(|e| e.returned.is_some_and(|r| r < entry.called))
                .filter_map(token_of)
                .max()?;
            let token = below.checked_add(1)?;
            let clear = of_key()
                .filter_map(|e| token_of(e).map(|t| (e, t)))
                .all(|(e, t)| t != token && (e.called <= returned || t > token));
            clear.then_some((i, token))
        })
        .nth(nth)?;
    let entry = entries.get_mut(i)?;
    if let Some((Cmd::Acquire { ttl_ms, .. }, reply)) = entry.step.first_mut() {
        *ttl_ms = 1;
        *reply = Some(Reply::Int(token));
    }
    Some(entry.key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use spec::{Mode, Step};

    /// One key's entries from (step, called, returned) triples.
    fn entries(steps: &[(Step, u64, Option<u64>)]) -> Vec<Entry> {
        steps
            .iter()
            .map(|(step, called, returned)| Entry {
                key: 0,
                step: step.clone(),
                called: *called,
                returned: *returned,
            })
            .collect()
    }

    fn one(cmd: Cmd, reply: Reply) -> Step {
        vec![(cmd, Some(reply))]
    }

    fn linearizable(steps: &[(Step, u64, Option<u64>)], kills: &[u64]) -> bool {
        check(&entries(steps), kills).linearizable()
    }

    const A: u8 = 0;
    const B: u8 = 1;

    /// Leases far longer than these histories (stamps of a few ns).
    const HOUR_MS: u64 = 3_600_000;

    fn acquire(owner: u8) -> Cmd {
        Cmd::Acquire {
            owner,
            ttl_ms: HOUR_MS,
            mode: Mode::Exclusive,
        }
    }

    fn extend(owner: u8) -> Cmd {
        Cmd::Extend {
            owner,
            ttl_ms: HOUR_MS,
        }
    }

    fn release(owner: u8) -> Cmd {
        Cmd::Release { owner, all: false }
    }

    fn fence(owner: u8, at_least: Option<u64>) -> Cmd {
        Cmd::Fence { owner, at_least }
    }

    fn held(owner: u8, holds: u32, token: u64) -> Reply {
        Reply::Holder {
            owner,
            holds,
            token,
        }
    }

    #[test]
    fn a_sequential_history_of_the_lock_is_linearizable() {
        let steps = [
            (one(acquire(A), Reply::Int(10)), 0, Some(1)),
            (one(acquire(B), Reply::Nil), 2, Some(3)),
            (one(acquire(A), Reply::Int(10)), 4, Some(5)),
            (one(Cmd::Info, held(A, 2, 10)), 6, Some(7)),
            (one(extend(B), Reply::Int(0)), 8, Some(9)),
            (one(fence(A, Some(50)), Reply::Int(50)), 10, Some(11)),
            (
                one(
                    Cmd::Release {
                        owner: A,
                        all: true,
                    },
                    Reply::Int(0),
                ),
                12,
                Some(13),
            ),
            (one(acquire(B), Reply::Int(51)), 14, Some(15)),
        ];
        assert!(linearizable(&steps, &[]));
    }

    #[test]
    fn two_holders_at_once_are_not() {
        let steps = [
            (one(acquire(A), Reply::Int(10)), 0, Some(1)),
            (one(acquire(B), Reply::Int(11)), 2, Some(3)),
        ];
        assert!(!linearizable(&steps, &[]));
        // Concurrent with A's release, B's grant can come after it.
        let steps = [
            (one(acquire(A), Reply::Int(10)), 0, Some(1)),
            (one(acquire(B), Reply::Int(11)), 2, Some(5)),
            (one(release(A), Reply::Int(0)), 3, Some(4)),
        ];
        assert!(linearizable(&steps, &[]));
    }

    #[test]
    fn a_new_lock_needs_a_token_above_every_earlier_one() {
        let steps = [
            (one(acquire(A), Reply::Int(10)), 0, Some(1)),
            (one(release(A), Reply::Int(0)), 2, Some(3)),
            (one(acquire(B), Reply::Int(10)), 4, Some(5)),
        ];
        assert!(!linearizable(&steps, &[]));
        // Raised by ATLEAST: the next lock's token is above the floor.
        let steps = [
            (one(acquire(A), Reply::Int(10)), 0, Some(1)),
            (one(fence(A, Some(90)), Reply::Int(90)), 2, Some(3)),
            (one(release(A), Reply::Int(0)), 4, Some(5)),
            (one(acquire(B), Reply::Int(60)), 6, Some(7)),
        ];
        assert!(!linearizable(&steps, &[]));
    }

    #[test]
    fn a_step_without_a_reply_may_have_run_before_the_kill_or_not_at_all() {
        let lost_acquire = vec![(acquire(A), None)];
        // It ran: A holds the lock, with a token only seen later.
        let ran = [
            (lost_acquire.clone(), 0, None),
            (one(acquire(B), Reply::Nil), 3, Some(4)),
            (one(fence(A, None), Reply::Int(7)), 5, Some(6)),
        ];
        assert!(linearizable(&ran, &[2]));
        // It did not run.
        let not = [
            (lost_acquire.clone(), 0, None),
            (one(acquire(B), Reply::Int(7)), 3, Some(4)),
        ];
        assert!(linearizable(&not, &[2]));
        // It cannot have run after the kill: B's grant came after it, and
        // A's lock is not there.
        let late = [
            (lost_acquire, 0, None),
            (one(acquire(B), Reply::Int(7)), 3, Some(4)),
            (one(release(B), Reply::Int(0)), 5, Some(6)),
            (one(extend(A), Reply::Int(1)), 7, Some(8)),
        ];
        assert!(!linearizable(&late, &[2]));
        // Without the kill it could have run last.
        assert!(linearizable(&late, &[]));
    }

    #[test]
    fn a_lost_grant_s_token_still_bounds_the_next_lock_s() {
        // A's second grant ran (its release proves it), its token unseen but
        // above 10: B's new lock needs a token above that one, so 11 cannot
        // be (the model once left the bound at 10 and accepted it).
        let steps = |b_token| {
            [
                (one(acquire(A), Reply::Int(10)), 0, Some(1)),
                (one(release(A), Reply::Int(0)), 2, Some(3)),
                (vec![(acquire(A), None)], 4, None),
                (one(release(A), Reply::Int(0)), 6, Some(7)),
                (one(acquire(B), Reply::Int(b_token)), 8, Some(9)),
            ]
        };
        assert!(!linearizable(&steps(11), &[5]));
        assert!(linearizable(&steps(12), &[5]));
    }

    #[test]
    fn a_transaction_applies_at_once() {
        // B sees neither half of A's MULTI (acquire, release) ... or both.
        let multi = vec![
            (acquire(A), Some(Reply::Int(10))),
            (release(A), Some(Reply::Int(0))),
        ];
        let steps = [
            (multi.clone(), 0, Some(5)),
            (one(Cmd::Info, held(A, 1, 10)), 1, Some(2)),
        ];
        assert!(!linearizable(&steps, &[]));
        let steps = [
            (multi, 0, Some(5)),
            (one(acquire(B), Reply::Int(11)), 1, Some(2)),
        ];
        assert!(linearizable(&steps, &[]));
    }

    #[test]
    fn swapping_two_grants_tokens_breaks_the_history() {
        let mut steps = entries(&[
            (one(acquire(A), Reply::Int(10)), 0, Some(1)),
            (one(release(A), Reply::Int(0)), 2, Some(3)),
            (one(acquire(B), Reply::Int(12)), 4, Some(5)),
        ]);
        assert!(check(&steps, &[]).failed.is_empty());
        assert_eq!(swap_tokens(&mut steps), Some(0));
        assert_eq!(check(&steps, &[]).failed, vec![0]);
    }

    /// Milliseconds on the history's clock (nanoseconds).
    const fn ms(ms: u64) -> u64 {
        ms * 1_000_000
    }

    fn acquire_for(owner: u8, ttl_ms: u64) -> Cmd {
        Cmd::Acquire {
            owner,
            ttl_ms,
            mode: Mode::Exclusive,
        }
    }

    fn extend_for(owner: u8, ttl_ms: u64) -> Cmd {
        Cmd::Extend { owner, ttl_ms }
    }

    /// A's lease of 100 ms, granted in `[0, 1 ms]`, then B's acquisition
    /// (or `step`) in `[at, at + 1 ms]`.
    fn after_a_lease(step: Step, at: u64) -> bool {
        let steps = [
            (one(acquire_for(A, 100), Reply::Int(10)), 0, Some(ms(1))),
            (step, ms(at), Some(ms(at + 1))),
        ];
        linearizable(&steps, &[])
    }

    #[test]
    fn a_lease_cannot_end_before_its_ttl_less_the_allowance() {
        let b_granted = || one(acquire_for(B, 100), Reply::Int(11));
        // 100 ms after the grant was sent, less 0.1 ms (1000 ppm) and 5 ms.
        assert!(!after_a_lease(b_granted(), 50));
        assert!(!after_a_lease(b_granted(), 93));
        assert!(after_a_lease(b_granted(), 95));
        assert!(after_a_lease(b_granted(), 500));
        // Nor can it seem to end early to LOCK.INFO.
        assert!(!after_a_lease(one(Cmd::Info, Reply::Nil), 50));
        assert!(after_a_lease(one(Cmd::Info, Reply::Nil), 500));
    }

    #[test]
    fn a_lease_must_have_ended_by_its_ttl_plus_the_allowance() {
        // 100 ms after the grant's reply came, plus 0.1 ms and 20 ms.
        let b_refused = || one(acquire_for(B, 100), Reply::Nil);
        assert!(after_a_lease(b_refused(), 50));
        assert!(after_a_lease(b_refused(), 120));
        assert!(!after_a_lease(b_refused(), 122));
        assert!(!after_a_lease(one(Cmd::Info, held(A, 1, 10)), 500));
        assert!(!after_a_lease(one(extend_for(A, 100), Reply::Int(1)), 500));
        assert!(after_a_lease(one(extend_for(A, 100), Reply::Int(0)), 500));
        // A re-entry renews the lease; a release ends it at once.
        let steps = |second: Cmd, reply: Reply| {
            [
                (one(acquire_for(A, 100), Reply::Int(10)), 0, Some(ms(1))),
                (one(second, reply), ms(80), Some(ms(81))),
                (one(Cmd::Info, Reply::Nil), ms(150), Some(ms(151))),
            ]
        };
        assert!(!linearizable(
            &steps(acquire_for(A, 100), Reply::Int(10)),
            &[]
        ));
        assert!(linearizable(
            &steps(acquire_for(A, 10), Reply::Int(10)),
            &[]
        ));
        assert!(linearizable(&steps(release(A), Reply::Int(0)), &[]));
    }

    #[test]
    fn an_extension_shortens_or_lengthens_the_lease() {
        let steps = |ttl_ms: u64, reply: Reply| {
            [
                (one(acquire_for(A, 1_000), Reply::Int(10)), 0, Some(ms(1))),
                (
                    one(extend_for(A, ttl_ms), Reply::Int(1)),
                    ms(10),
                    Some(ms(11)),
                ),
                (one(Cmd::Info, reply), ms(300), Some(ms(301))),
            ]
        };
        // Shortened to 100 ms: over by 300 ms; without the extension, live.
        assert!(linearizable(&steps(100, Reply::Nil), &[]));
        assert!(!linearizable(&steps(100, held(A, 1, 10)), &[]));
        assert!(!linearizable(&steps(1_000, Reply::Nil), &[]));
        // Lengthened: live past the first lease's end.
        let steps = [
            (one(acquire_for(A, 100), Reply::Int(10)), 0, Some(ms(1))),
            (
                one(extend_for(A, 1_000), Reply::Int(1)),
                ms(50),
                Some(ms(51)),
            ),
            (
                one(acquire_for(B, 100), Reply::Int(11)),
                ms(300),
                Some(ms(301)),
            ),
        ];
        assert!(!linearizable(&steps, &[]));
    }

    #[test]
    fn a_lease_of_a_lost_grant_ends_within_the_same_bounds() {
        // A's grant was sent at 0 and its reply lost to a kill at 5 ms: if it
        // ran, its lease ends from 95 ms (sent + 100 ms - 5.1 ms) to
        // 125.1 ms (the kill + 100 ms + 20.1 ms).
        let steps = |at: u64, reply: Reply| {
            [
                (vec![(acquire_for(A, 100), None)], 0, None),
                (one(Cmd::Info, reply), ms(at), Some(ms(at + 1))),
            ]
        };
        assert!(linearizable(&steps(50, held(A, 1, 10)), &[ms(5)]));
        assert!(linearizable(&steps(50, Reply::Nil), &[ms(5)]));
        assert!(!linearizable(&steps(130, held(A, 1, 10)), &[ms(5)]));
    }

    fn wait(id: u32, owner: u8, timeout_ms: u64) -> spec::Wait {
        spec::Wait {
            id,
            owner,
            ttl_ms: HOUR_MS,
            timeout_ms,
            mode: Mode::Exclusive,
        }
    }

    /// A `WAIT` sent at `called`, seen blocked at `blocked`, answered
    /// `reply` at `returned`: its two steps.
    fn waited(
        wait: spec::Wait,
        called: u64,
        blocked: u64,
        reply: Reply,
        returned: u64,
    ) -> [(Step, u64, Option<u64>); 2] {
        [
            (
                one(
                    Cmd::Enqueue {
                        wait,
                        answer_by: returned,
                    },
                    Reply::Queued,
                ),
                called,
                Some(blocked),
            ),
            (one(Cmd::Answer(wait), reply), called, Some(returned)),
        ]
    }

    const C: u8 = 2;

    #[test]
    fn waiters_are_served_in_their_order() {
        // A holds; B then C queue (C sent after B was seen blocked); A
        // releases: B first, then (B releases) C.
        let history = |b_token: u64, c_token: u64| {
            let mut steps = vec![(one(acquire(A), Reply::Int(10)), 0, Some(1))];
            steps.extend(waited(wait(1, B, HOUR_MS), 2, 3, Reply::Int(b_token), 30));
            steps.extend(waited(wait(2, C, HOUR_MS), 4, 5, Reply::Int(c_token), 40));
            steps.push((one(release(A), Reply::Int(0)), 6, Some(7)));
            steps.push((one(release(B), Reply::Int(0)), 31, Some(32)));
            steps.push((one(release(C), Reply::Int(0)), 41, Some(42)));
            steps
        };
        assert!(linearizable(&history(11, 12), &[]));
        // C served before B, who was ahead of it: the head skipped.
        assert!(!linearizable(&history(12, 11), &[]));
        // C served first, then B: wrong when B was seen blocked before C
        // was sent; either order would do had their places been unknown
        // (C sent before B was seen blocked).
        let c_first = |b_blocked: u64, c_called: u64| {
            let mut steps = vec![(one(acquire(A), Reply::Int(10)), 0, Some(1))];
            steps.extend(waited(
                wait(1, B, HOUR_MS),
                2,
                b_blocked,
                Reply::Int(12),
                40,
            ));
            steps.extend(waited(wait(2, C, HOUR_MS), c_called, 5, Reply::Int(11), 30));
            steps.push((one(release(A), Reply::Int(0)), 6, Some(7)));
            steps.push((one(release(C), Reply::Int(0)), 31, Some(32)));
            steps.push((one(release(B), Reply::Int(0)), 41, Some(42)));
            steps
        };
        assert!(!linearizable(&c_first(3, 4), &[]));
        assert!(linearizable(&c_first(5, 4), &[]));
    }

    #[test]
    fn a_newcomer_does_not_overtake_a_waiter() {
        let history = |newcomer: Reply| {
            let mut steps = vec![(one(acquire(A), Reply::Int(10)), 0, Some(1))];
            steps.extend(waited(wait(1, B, HOUR_MS), 2, 3, Reply::Int(11), 100));
            steps.push((one(release(A), Reply::Int(0)), 4, Some(5)));
            steps.push((one(acquire(C), newcomer), 6, Some(7)));
            steps
        };
        assert!(linearizable(&history(Reply::Nil), &[]));
        assert!(!linearizable(&history(Reply::Int(11)), &[]));
    }

    #[test]
    fn a_waiter_times_out_no_earlier_than_its_timeout() {
        let history = |answered_at: u64| {
            let mut steps = vec![(one(acquire(A), Reply::Int(10)), 0, Some(ms(1)))];
            steps.extend(waited(
                wait(1, B, 100),
                ms(2),
                ms(3),
                Reply::Nil,
                ms(answered_at),
            ));
            steps
        };
        assert!(!linearizable(&history(50), &[]));
        assert!(linearizable(&history(150), &[]));
    }

    #[test]
    fn a_lease_end_hands_the_lock_to_the_head_no_earlier_than_it_ends() {
        let history = |answered_at: u64| {
            let mut steps = vec![(one(acquire_for(A, 100), Reply::Int(10)), 0, Some(ms(1)))];
            steps.extend(waited(
                wait(1, B, HOUR_MS),
                ms(2),
                ms(3),
                Reply::Int(11),
                ms(answered_at),
            ));
            steps
        };
        assert!(!linearizable(&history(50), &[]));
        assert!(linearizable(&history(130), &[]));
    }

    const D: u8 = 3;
    const E: u8 = 4;

    /// `LOCK.ACQUIRE key owner ttl SHARED [LIMIT limit]`.
    fn shared(owner: u8, ttl_ms: u64, limit: Option<u8>) -> Cmd {
        Cmd::Acquire {
            owner,
            ttl_ms,
            mode: Mode::Shared { limit },
        }
    }

    fn read(owner: u8) -> Cmd {
        shared(owner, HOUR_MS, None)
    }

    fn permit(owner: u8) -> Cmd {
        shared(owner, HOUR_MS, Some(2))
    }

    fn holders(n: u32) -> Reply {
        Reply::Shared { holders: n }
    }

    fn shared_wait(id: u32, owner: u8, timeout_ms: u64, limit: Option<u8>) -> spec::Wait {
        spec::Wait {
            mode: Mode::Shared { limit },
            ..wait(id, owner, timeout_ms)
        }
    }

    #[test]
    fn a_semaphore_admits_no_more_holders_than_its_limit() {
        let history = |third: Reply| {
            [
                (one(permit(A), Reply::Int(10)), 0, Some(1)),
                (one(permit(B), Reply::Int(11)), 2, Some(3)),
                (one(Cmd::Info, holders(2)), 4, Some(5)),
                (one(permit(C), third), 6, Some(7)),
            ]
        };
        assert!(linearizable(&history(Reply::Nil), &[]));
        assert!(!linearizable(&history(Reply::Int(12)), &[]));
        // Readers without a LIMIT: all of them.
        let steps = [
            (one(read(A), Reply::Int(10)), 0, Some(1)),
            (one(read(B), Reply::Int(11)), 2, Some(3)),
            (one(read(C), Reply::Int(12)), 4, Some(5)),
            (one(Cmd::Info, holders(3)), 6, Some(7)),
            (one(read(B), Reply::Int(11)), 8, Some(9)),
            (one(release(B), Reply::Int(1)), 10, Some(11)),
            (one(Cmd::Info, holders(3)), 12, Some(13)),
        ];
        assert!(linearizable(&steps, &[]));
        // Each new holder's token is above every earlier one.
        let steps = [
            (one(read(A), Reply::Int(10)), 0, Some(1)),
            (one(read(B), Reply::Int(9)), 2, Some(3)),
        ];
        assert!(!linearizable(&steps, &[]));
        // A release frees a permit.
        let steps = [
            (one(permit(A), Reply::Int(10)), 0, Some(1)),
            (one(permit(B), Reply::Int(11)), 2, Some(3)),
            (one(release(A), Reply::Int(0)), 4, Some(5)),
            (one(permit(C), Reply::Int(12)), 6, Some(7)),
            (one(Cmd::Info, holders(2)), 8, Some(9)),
        ];
        assert!(linearizable(&steps, &[]));
    }

    #[test]
    fn a_writer_waits_for_every_reader_and_readers_for_a_queued_writer() {
        let history = |writer: Reply| {
            [
                (one(read(A), Reply::Int(10)), 0, Some(1)),
                (one(read(B), Reply::Int(11)), 2, Some(3)),
                (one(release(A), Reply::Int(0)), 4, Some(5)),
                (one(acquire(D), writer), 6, Some(7)),
            ]
        };
        assert!(linearizable(&history(Reply::Nil), &[]));
        assert!(!linearizable(&history(Reply::Int(12)), &[]));
        // A writer queued behind a reader: a new reader does not join.
        let history = |reader: Reply| {
            let mut steps = vec![(one(read(A), Reply::Int(10)), 0, Some(1))];
            steps.extend(waited(wait(1, D, HOUR_MS), 2, 3, Reply::Int(12), 100));
            steps.push((one(read(B), reader), 4, Some(5)));
            steps.push((one(release(A), Reply::Int(0)), 6, Some(7)));
            steps
        };
        assert!(linearizable(&history(Reply::Nil), &[]));
        assert!(!linearizable(&history(Reply::Int(11)), &[]));
    }

    /// Writer E holds; readers B and C, then writer D, then reader A queue
    /// (each seen blocked before the next is sent); the writer releases:
    /// B and C are admitted together, D once both left, then A.
    fn readers_around_a_writer(b: u64, c: u64, d: u64, a: u64) -> Vec<(Step, u64, Option<u64>)> {
        let mut steps = vec![(one(acquire(E), Reply::Int(10)), 0, Some(1))];
        steps.extend(waited(
            shared_wait(1, B, HOUR_MS, None),
            2,
            3,
            Reply::Int(b),
            30,
        ));
        steps.extend(waited(
            shared_wait(2, C, HOUR_MS, None),
            4,
            5,
            Reply::Int(c),
            31,
        ));
        steps.extend(waited(wait(3, D, HOUR_MS), 6, 7, Reply::Int(d), 60));
        steps.extend(waited(
            shared_wait(4, A, HOUR_MS, None),
            8,
            9,
            Reply::Int(a),
            80,
        ));
        steps.push((one(release(E), Reply::Int(0)), 10, Some(11)));
        steps.push((one(Cmd::Info, holders(2)), 32, Some(33)));
        steps.push((one(release(B), Reply::Int(0)), 40, Some(41)));
        steps.push((one(release(C), Reply::Int(0)), 50, Some(51)));
        steps.push((one(release(D), Reply::Int(0)), 70, Some(71)));
        steps
    }

    #[test]
    fn a_queue_admits_a_run_of_readers_then_a_writer_then_the_next_readers() {
        assert!(linearizable(&readers_around_a_writer(11, 12, 13, 14), &[]));
        // The writer served before the readers ahead of it, or the reader
        // behind it before it.
        assert!(!linearizable(&readers_around_a_writer(11, 13, 12, 14), &[]));
        assert!(!linearizable(&readers_around_a_writer(11, 12, 14, 13), &[]));
    }

    #[test]
    fn swapping_a_reader_and_a_writer_in_the_queue_breaks_the_history() {
        let mut steps = entries(&readers_around_a_writer(11, 12, 13, 14));
        assert!(check(&steps, &[]).failed.is_empty());
        assert_eq!(
            swap_places(&mut steps, |_, first, second| first != second, true),
            Some(0)
        );
        assert_eq!(check(&steps, &[]).failed, vec![0]);
    }

    /// A holds the lock (exclusive: `holder`, or a permit of two with B
    /// holding the other) and releases it at 10 ms, or its 100 ms lease
    /// ends (`release` false); C waits from 2 ms with a timeout of
    /// `timeout_ms` and is answered `answer` at `answered` ms.
    fn served_late(
        semaphore: bool,
        released: bool,
        timeout_ms: u64,
        answer: Reply,
        answered: u64,
    ) -> bool {
        let (take, mode): (fn(u8, u64) -> Cmd, _) = if semaphore {
            (|owner, ttl| shared(owner, ttl, Some(2)), Some(Some(2)))
        } else {
            (acquire_for, None)
        };
        let ttl = if released { HOUR_MS } else { 100 };
        let mut steps = vec![(one(take(A, ttl), Reply::Int(10)), 0, Some(ms(1)))];
        if semaphore {
            steps.push((one(take(B, HOUR_MS), Reply::Int(11)), 0, Some(ms(1))));
        }
        let waiting = match mode {
            Some(limit) => shared_wait(1, C, timeout_ms, limit),
            None => spec::Wait {
                ttl_ms: HOUR_MS,
                ..wait(1, C, timeout_ms)
            },
        };
        steps.extend(waited(waiting, ms(2), ms(3), answer, ms(answered)));
        if released {
            steps.push((one(release(A), Reply::Int(0)), ms(10), Some(ms(11))));
        }
        linearizable(&steps, &[])
    }

    #[test]
    fn the_head_of_the_queue_is_served_soon_after_it_can_be() {
        for semaphore in [false, true] {
            for release in [true, false] {
                // Timed out 1 s after it queued: long after the lock came
                // free (a release's reply at 11 ms, a lease's latest end
                // at 121.1 ms), beyond the 100 ms allowance.
                assert!(
                    !served_late(semaphore, release, 1_000, Reply::Nil, 1_010),
                    "semaphore {semaphore}, release {release}"
                );
                // Timed out before the lock could come free.
                assert!(
                    served_late(semaphore, release, 5, Reply::Nil, 10),
                    "semaphore {semaphore}, release {release}"
                );
                // Granted: its answer may come later.
                assert!(
                    served_late(semaphore, release, 1_000, Reply::Int(12), 1_010),
                    "semaphore {semaphore}, release {release}"
                );
            }
        }
        // The lock seen free with the head still waiting: at 50 ms after
        // the release's reply, not at 150 ms.
        let history = |info_at: u64| {
            let mut steps = vec![(one(acquire(A), Reply::Int(10)), 0, Some(ms(1)))];
            steps.extend(waited(
                wait(1, B, HOUR_MS),
                ms(2),
                ms(3),
                Reply::Nil,
                ms(2_000),
            ));
            steps.push((one(release(A), Reply::Int(0)), ms(10), Some(ms(11))));
            steps.push((
                one(Cmd::Info, Reply::Nil),
                ms(info_at),
                Some(ms(info_at + 1)),
            ));
            steps
        };
        assert!(!linearizable(&history(150), &[]));
        // (B timed out after 2 s: it was never served, also late.)
        let early = {
            let mut steps = vec![(one(acquire(A), Reply::Int(10)), 0, Some(ms(1)))];
            steps.extend(waited(wait(1, B, 100), ms(2), ms(3), Reply::Nil, ms(200)));
            steps.push((one(release(A), Reply::Int(0)), ms(10), Some(ms(11))));
            steps.push((one(Cmd::Info, Reply::Nil), ms(50), Some(ms(51))));
            steps
        };
        // B timed out at 102 ms at the earliest, after the release at
        // 10 ms: too late to have been served by then? No: within the
        // allowance (11 + 100 ms), so either order is possible.
        assert!(linearizable(&early, &[]));
    }

    #[test]
    fn a_shared_holder_s_lease_ends_within_its_bounds() {
        // A and B hold the two permits, A's for 100 ms: C's permit cannot
        // come before A's lease can end (94.9 ms), and must by 121.1 ms.
        let history = |at: u64, reply: Reply| {
            [
                (one(shared(A, 100, Some(2)), Reply::Int(10)), 0, Some(ms(1))),
                (one(permit(B), Reply::Int(11)), 0, Some(ms(1))),
                (one(permit(C), reply), ms(at), Some(ms(at + 1))),
            ]
        };
        assert!(!linearizable(&history(50, Reply::Int(12)), &[]));
        assert!(linearizable(&history(95, Reply::Int(12)), &[]));
        assert!(linearizable(&history(50, Reply::Nil), &[]));
        assert!(!linearizable(&history(130, Reply::Nil), &[]));
        // Each holder's own lease: B's (an hour) keeps it a holder.
        let steps = [
            (one(shared(A, 100, None), Reply::Int(10)), 0, Some(ms(1))),
            (one(read(B), Reply::Int(11)), 0, Some(ms(1))),
            (one(Cmd::Info, holders(1)), ms(200), Some(ms(201))),
            (
                one(extend_for(A, 100), Reply::Int(0)),
                ms(202),
                Some(ms(203)),
            ),
            (
                one(extend_for(B, 100), Reply::Int(1)),
                ms(204),
                Some(ms(205)),
            ),
        ];
        assert!(linearizable(&steps, &[]));
    }

    #[test]
    fn a_semaphore_granted_beyond_its_limit_is_found() {
        let mut steps = entries(&[
            (one(permit(A), Reply::Int(10)), 0, Some(1)),
            (one(permit(B), Reply::Int(11)), 2, Some(3)),
            (one(Cmd::Info, holders(2)), 4, Some(5)),
            (one(permit(C), Reply::Nil), 6, Some(7)),
            (one(Cmd::Info, holders(2)), 8, Some(9)),
            (one(permit(D), Reply::Int(20)), 10, Some(11)),
        ]);
        // (D's permit: A's or B's lease cannot have ended; the history is
        // linearizable only without D's step.)
        steps.pop();
        assert!(check(&steps, &[]).failed.is_empty());
        assert_eq!(overfill(&mut steps, |_| true), Some(0));
        assert_eq!(
            steps.get(3).map(|e| e.step.clone()),
            Some(one(shared(C, 1, Some(2)), Reply::Int(12)))
        );
        assert_eq!(check(&steps, &[]).failed, vec![0]);
    }

    /// Reader A holds; writer D queues with a 100 ms timeout, reader B
    /// behind it (readers wait behind a queued writer); D times out (at
    /// 102 ms at the earliest, answered nil at 110 ms) and B, compatible
    /// with A, is answered `b` at `answered` ms: granted within the
    /// hand-off allowance, not when its own wait would end. (The module
    /// once left B waiting: nothing served the queue when its head left.)
    fn behind_a_writer_that_times_out(b: Reply, answered: u64) -> bool {
        let mut steps = vec![(one(read(A), Reply::Int(10)), 0, Some(ms(1)))];
        steps.extend(waited(wait(1, D, 100), ms(2), ms(3), Reply::Nil, ms(110)));
        steps.extend(waited(
            shared_wait(2, B, 5_000, None),
            ms(4),
            ms(5),
            b,
            ms(answered),
        ));
        linearizable(&steps, &[])
    }

    #[test]
    fn a_reader_behind_a_writer_that_times_out_is_admitted_soon() {
        assert!(behind_a_writer_that_times_out(Reply::Int(11), 120));
        // Its answer may come later than its grant.
        assert!(behind_a_writer_that_times_out(Reply::Int(11), 4_000));
        // Left waiting until its own timeout: served too late.
        assert!(!behind_a_writer_that_times_out(Reply::Nil, 5_010));
        // Granted before the writer could have timed out: out of turn.
        let mut steps = vec![(one(read(A), Reply::Int(10)), 0, Some(ms(1)))];
        steps.extend(waited(wait(1, D, 100), ms(2), ms(3), Reply::Nil, ms(110)));
        steps.extend(waited(
            shared_wait(2, B, 5_000, None),
            ms(4),
            ms(5),
            Reply::Int(11),
            ms(50),
        ));
        assert!(!linearizable(&steps, &[]));
    }

    #[test]
    fn a_check_out_of_budget_is_undecided_not_a_verdict() {
        let steps = entries(&readers_around_a_writer(11, 12, 13, 14));
        let verdict = check_within(&steps, &[], 3);
        assert_eq!(verdict.undecided, vec![0]);
        assert!(verdict.failed.is_empty());
        assert!(!verdict.linearizable() && !verdict.rejects(0));
        let verdict = check_within(&steps, &[], CHECK_BUDGET);
        assert!(verdict.linearizable());
        assert!(verdict.most_work > 3 && verdict.most_work < 1_000);
        // A history that is not linearizable is not "rejected" either when
        // the budget runs out first.
        let bad = entries(&readers_around_a_writer(11, 13, 12, 14));
        assert!(check_within(&bad, &[], CHECK_BUDGET).rejects(0));
        assert!(!check_within(&bad, &[], 3).rejects(0));
    }

    /// `cmd` with its wait's id moved up by `by` (a copy of a history on
    /// another key needs ids of its own).
    fn renumbered(cmd: Cmd, by: u32) -> Cmd {
        match cmd {
            Cmd::Enqueue {
                mut wait,
                answer_by,
            } => {
                wait.id += by;
                Cmd::Enqueue { wait, answer_by }
            }
            Cmd::Answer(mut wait) => {
                wait.id += by;
                Cmd::Answer(wait)
            }
            other => other,
        }
    }

    #[test]
    fn an_undecided_copy_is_followed_by_another_and_never_counts_as_accepted() {
        let bad = entries(&readers_around_a_writer(11, 13, 12, 14));
        assert_eq!(check_within(&bad, &[], 3).of_copy(0), CopyCheck::Undecided);
        assert_eq!(
            check_within(&bad, &[], CHECK_BUDGET).of_copy(0),
            CopyCheck::Rejected
        );
        let good = entries(&readers_around_a_writer(11, 12, 13, 14));
        assert_eq!(
            check_within(&good, &[], CHECK_BUDGET).of_copy(0),
            CopyCheck::Accepted
        );
        // Copies checked in turn; the nth copy's check needs `needs[nth]`
        // steps (it is the bad history, checked with a budget of 3 steps
        // when it is given fewer than it needs): the first decided outcome
        // wins, scouting first with a tenth of the budget, then the first
        // copies again with the whole; all undecided stays undecided; an
        // accepted copy is never passed over for a later one.
        let big = CHECK_BUDGET;
        let run = |needs: Vec<u64>, copy: Vec<Entry>| {
            let made = std::cell::Cell::new(Vec::new());
            let outcome = first_decided(
                |nth| (nth < needs.len()).then(|| (copy.clone(), nth)),
                |copy, nth, steps| {
                    let mut tried = made.take();
                    tried.push((nth, steps));
                    made.set(tried);
                    let given = if steps >= needs[nth] { big } else { 3 };
                    (nth, check_within(&copy, &[], given).of_copy(0))
                },
                big,
            );
            (outcome, made.take())
        };
        let scout = big / SCOUT_SHARE;
        // The second copy is cheap: found in the scouting round.
        assert_eq!(
            run(vec![big, 100], bad.clone()),
            (Some((1, CopyCheck::Rejected)), vec![(0, scout), (1, scout)])
        );
        // The first copy is cheap: the only one checked.
        assert_eq!(
            run(vec![100, 100], bad.clone()),
            (Some((0, CopyCheck::Rejected)), vec![(0, scout)])
        );
        // Every copy needs more than the scouts get: the first copy again
        // with the whole budget.
        assert_eq!(
            run(vec![big; 2], bad.clone()),
            (
                Some((0, CopyCheck::Rejected)),
                vec![(0, scout), (1, scout), (0, big)]
            )
        );
        // The 12th copy is the first cheap one: still found.
        let mut needs = vec![big + 1; SCOUT_TRIES - 1];
        needs.push(100);
        assert_eq!(
            run(needs, bad.clone()).0,
            Some((SCOUT_TRIES - 1, CopyCheck::Rejected))
        );
        // None can be decided: undecided, after every scout and COPY_TRIES
        // whole checks.
        let (outcome, tried) = run(vec![big + 1; 20], bad.clone());
        assert_eq!(outcome, Some((COPY_TRIES - 1, CopyCheck::Undecided)));
        assert_eq!(tried.len(), SCOUT_TRIES + COPY_TRIES, "{tried:?}");
        assert!(tried[SCOUT_TRIES..].iter().all(|&(_, steps)| steps == big));
        // An accepted copy ends the search, however cheap later ones are.
        assert_eq!(
            run(vec![100, 100], good.clone()),
            (Some((0, CopyCheck::Accepted)), vec![(0, scout)])
        );
        assert_eq!(run(vec![], bad), (None, vec![]));
        // The copies take the keys in turn: two keys with the same pairs,
        // key 0's first, then key 1's, then key 0's second.
        let mut two = entries(&readers_around_a_writer(11, 12, 13, 14));
        let of_key_1: Vec<Entry> = two
            .iter()
            .map(|e| Entry {
                key: 1,
                step: e
                    .step
                    .iter()
                    .map(|(cmd, reply)| (renumbered(*cmd, 100), *reply))
                    .collect(),
                ..e.clone()
            })
            .collect();
        two.extend(of_key_1);
        let any = |_: usize, a: Mode, b: Mode| a != b;
        let pairs = (0..4)
            .filter_map(|nth| swap_places_nth(&mut two.clone(), any, false, nth))
            .collect::<Vec<_>>();
        assert!(pairs.len() >= 2, "{pairs:?}");
        assert_eq!(pairs[..2], [0, 1], "{pairs:?}");
        // The candidates are distinct pairs: the nth one past the last is none.
        let mut first = entries(&readers_around_a_writer(11, 12, 13, 14));
        assert_eq!(
            swap_places_nth(&mut first, |_, a, b| a != b, true, 0),
            Some(0)
        );
        let mut past = entries(&readers_around_a_writer(11, 12, 13, 14));
        assert_eq!(swap_places_nth(&mut past, |_, a, b| a != b, true, 9), None);
    }

    #[test]
    fn a_prefix_shows_a_corruption_that_the_whole_history_shows() {
        let mut steps = entries(&readers_around_a_writer(11, 12, 13, 14));
        let original = steps.clone();
        assert_eq!(
            swap_places(&mut steps, |_, first, second| first != second, true),
            Some(0)
        );
        let until = corrupted_until(&original, &steps, 0);
        assert!(until >= 60, "the swapped waiters' answers: {until}");
        assert!(check(&prefix(&steps, until), &[]).rejects(0));
        assert!(check(&prefix(&original, until), &[]).linearizable());
        // Cut before the answers, the swap does not show: no false alarm.
        assert!(check(&prefix(&steps, 9), &[]).linearizable());
        // A step cut while it ran keeps no reply.
        let cut = prefix(&original, 31);
        assert!(cut.iter().all(|e| e.called <= 31));
        assert!(cut
            .iter()
            .filter(|e| !matches!(e.returned, Some(r) if r <= 31))
            .all(|e| e.step.iter().all(|(_, reply)| reply.is_none())));
    }

    /// Reader E holds the read-write lock; writer D waits (sent at 2 ms,
    /// seen blocked at 3), then reader B (a lease of `b_ttl` ms: sent at 4,
    /// seen blocked at 5); E releases at 150 ms, D is answered at 152 and
    /// releases at 160, B is answered at 162.
    fn a_writer_then_a_reader_behind_a_reader(b_ttl: u64) -> Vec<(Step, u64, Option<u64>)> {
        let mut steps = vec![(one(read(E), Reply::Int(10)), 0, Some(ms(1)))];
        steps.extend(waited(
            wait(1, D, HOUR_MS),
            ms(2),
            ms(3),
            Reply::Int(12),
            ms(152),
        ));
        let reader = spec::Wait {
            ttl_ms: b_ttl,
            ..shared_wait(2, B, HOUR_MS, None)
        };
        steps.extend(waited(reader, ms(4), ms(5), Reply::Int(13), ms(162)));
        steps.push((one(release(E), Reply::Int(0)), ms(150), Some(ms(151))));
        steps.push((one(release(D), Reply::Int(0)), ms(160), Some(ms(161))));
        steps
    }

    #[test]
    fn a_waiter_seen_blocked_was_queued_not_granted_at_once() {
        let original = entries(&a_writer_then_a_reader_behind_a_reader(100));
        assert!(check(&original, &[]).linearizable());
        // The reader put first: sent while only a reader held the lock and
        // nobody waited, it would have been granted at once, and it was
        // seen blocked: rejected.
        let mut swapped = original.clone();
        assert_eq!(
            swap_places(&mut swapped, |_, first, second| first != second, false),
            Some(0)
        );
        assert!(check(&swapped, &[]).rejects(0));
        // Where the model took "seen blocked" for "ran" (granted at once
        // or queued), the copy passed: the reader granted at once, its
        // 100 ms lease over before E's release, the writer handed the lock
        // then, and the reader's answer (its token) just late.
        let ran: Vec<Entry> = swapped
            .into_iter()
            .map(|mut e| {
                for (cmd, reply) in &mut e.step {
                    if matches!(cmd, Cmd::Enqueue { .. }) && *reply == Some(Reply::Queued) {
                        *reply = Some(Reply::Nil);
                    }
                }
                e
            })
            .collect();
        assert!(check(&ran, &[]).linearizable());
    }

    #[test]
    fn only_a_swap_that_must_show_is_picked() {
        // The reader's 100 ms lease could have ended before the writer's
        // answer (150 ms after it was sent): not picked. A 400 ms lease
        // could not have: picked, and rejected.
        let mut steps = entries(&a_writer_then_a_reader_behind_a_reader(100));
        assert_eq!(
            swap_places(&mut steps, |_, first, second| first != second, true),
            None
        );
        let mut steps = entries(&a_writer_then_a_reader_behind_a_reader(400));
        assert!(check(&steps, &[]).linearizable());
        assert_eq!(
            swap_places(&mut steps, |_, first, second| first != second, true),
            Some(0)
        );
        assert!(check(&steps, &[]).rejects(0));
        // Why a swap may not show: writer E holds; writer D waits, then a
        // reader B with a 100 ms lease; E releases at 400 ms, D's answer
        // comes late (520 ms: a slow reply), D releases at 530, B is
        // answered at 540. Put first, B is the head at 400 ms, its lease
        // ends by 496 ms, D is granted then and answered at 520: the copy
        // is linearizable, as the check finds. So it is never picked.
        let history = |d_answer: u64| {
            let mut steps = vec![(one(acquire(E), Reply::Int(10)), 0, Some(ms(1)))];
            steps.extend(waited(
                wait(1, D, HOUR_MS),
                ms(2),
                ms(3),
                Reply::Int(12),
                ms(d_answer),
            ));
            let reader = spec::Wait {
                ttl_ms: 100,
                ..shared_wait(2, B, HOUR_MS, None)
            };
            steps.extend(waited(reader, ms(4), ms(5), Reply::Int(13), ms(540)));
            steps.push((one(release(E), Reply::Int(0)), ms(400), Some(ms(401))));
            steps.push((one(release(D), Reply::Int(0)), ms(530), Some(ms(531))));
            entries(&steps)
        };
        let late = history(520);
        assert!(check(&late, &[]).linearizable());
        let mut swapped = late.clone();
        assert_eq!(
            swap_places(&mut swapped, |_, first, second| first != second, false),
            Some(0)
        );
        assert!(
            check(&swapped, &[]).linearizable(),
            "a swap that cannot show"
        );
        let mut picked = late;
        assert_eq!(
            swap_places(&mut picked, |_, first, second| first != second, true),
            None
        );
        // Answered at once (402 ms), the same swap shows.
        let mut prompt = history(402);
        assert!(check(&prompt, &[]).linearizable());
        assert_eq!(
            swap_places(&mut prompt, |_, first, second| first != second, false),
            Some(0)
        );
        assert!(check(&prompt, &[]).rejects(0));
    }
}
