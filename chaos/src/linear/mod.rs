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
use spec::{Cmd, LockSpec, Reply};

/// What the checker found.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    pub keys: usize,
    pub steps: usize,
    /// Steps without a reply (the node was killed first).
    pub unknown: usize,
    /// Keys whose history is not linearizable.
    pub failed: Vec<usize>,
}

/// Checks every key's history; `kills` in increasing order.
pub fn check(entries: &[Entry], kills: &[u64]) -> Verdict {
    let mut verdict = Verdict::default();
    for (key, entries) in history::by_key(entries) {
        verdict.keys += 1;
        verdict.steps += entries.len();
        verdict.unknown += entries.iter().filter(|e| e.returned.is_none()).count();
        if !WGLChecker::<LockSpec>::is_linearizable(history::history(&entries, kills)) {
            verdict.failed.push(key);
        }
    }
    verdict
}

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
    pub corrupted: Option<(usize, bool)>,
    /// `WAIT`s: handed the lock when it was released or its lease ended,
    /// timed out, granted at once.
    pub handed_off: u64,
    pub timed_out: u64,
    pub at_once: u64,
    /// With waiters: the key whose history was corrupted on purpose (two
    /// waiters' places in the queue swapped: the node served the later one
    /// first), and whether the checker rejected it.
    pub skipped: Option<(usize, bool)>,
}

impl Report {
    /// The history is linearizable and its corrupted copies are not.
    pub fn passed(&self) -> bool {
        let waits = self.handed_off + self.timed_out + self.at_once;
        self.verdict.failed.is_empty()
            && matches!(self.corrupted, Some((_, true)))
            && (waits == 0 || matches!(self.skipped, Some((_, true))))
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
            if v.failed.is_empty() {
                "every key's history is linearizable".to_string()
            } else {
                format!("NOT LINEARIZABLE: keys {:?}", v.failed)
            }
        )?;
        match self.corrupted {
            Some((key, true)) => write!(f, "corrupted   key {key}, two grants' tokens swapped: rejected, as it must be"),
            Some((key, false)) => write!(f, "corrupted   key {key}, two grants' tokens swapped: ACCEPTED (the checker proves nothing)"),
            None => write!(f, "corrupted   no key had two grants to swap"),
        }?;
        if self.handed_off + self.timed_out + self.at_once > 0 {
            write!(
                f,
                "\nwaits       {} handed the lock at a release or lease end, {} timed out, {} granted at once",
                self.handed_off, self.timed_out, self.at_once
            )?;
            match self.skipped {
                Some((key, true)) => write!(f, "\nskipped     key {key}, two waiters' places swapped (the head skipped): rejected, as it must be"),
                Some((key, false)) => write!(f, "\nskipped     key {key}, two waiters' places swapped (the head skipped): ACCEPTED (FIFO is not checked)"),
                None => write!(f, "\nskipped     no key had two waiters in a known order"),
            }?;
        }
        Ok(())
    }
}

/// Records a history ([`recorder::record`]), checks it, then checks copies
/// corrupted on purpose ([`swap_tokens`], [`swap_places`]).
pub async fn run(settings: &recorder::Settings) -> Result<Report, String> {
    let run = recorder::record(settings).await?;
    let mut entries = run.recorder.entries();
    let kills = run.recorder.kills();
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let verdict = check(&entries, &kills);
        let check_time = started.elapsed();
        let grants = entries
            .iter()
            .flat_map(|e| &e.step)
            .filter(|(cmd, reply)| {
                matches!((cmd, reply), (Cmd::Acquire { .. }, Some(Reply::Int(_))))
            })
            .count();
        // The other keys' histories are unchanged: only the corrupted
        // key's is checked again.
        let mut waits = entries.clone();
        let skipped = swap_places(&mut waits).map(|key| {
            waits.retain(|e| e.key == key);
            (key, check(&waits, &kills).failed == vec![key])
        });
        let corrupted = swap_tokens(&mut entries).map(|key| {
            entries.retain(|e| e.key == key);
            (key, check(&entries, &kills).failed == vec![key])
        });
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
        }
    })
    .await
    .map_err(|e| format!("the checker failed: {e}"))
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

/// Corrupts the history on purpose: two waiters on one key, both seen
/// blocked (the first before the second was sent) and both granted later,
/// swap their places in the queue (their [`Cmd::Enqueue`] steps' stamps):
/// the node then served the later one first, skipping the queue's head.
/// Returns the key, or `None` if no key has two such waiters.
pub fn swap_places(entries: &mut [Entry]) -> Option<usize> {
    // Each WAIT's enqueue (index, called, seen blocked) and whether it was
    // handed the lock after it was seen blocked.
    let mut answered = std::collections::BTreeMap::new();
    for entry in entries.iter() {
        if let [(Cmd::Answer(wait), Some(Reply::Int(_)))] = entry.step.as_slice() {
            answered.insert(wait.id, entry.returned);
        }
    }
    let waited: Vec<(usize, usize, u64, u64, u64)> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, entry)| match entry.step.as_slice() {
            [(Cmd::Enqueue { wait, .. }, Some(Reply::Nil))] => {
                let blocked = entry.returned?;
                let answer = (*answered.get(&wait.id)?)?;
                (blocked < answer).then_some((i, entry.key, entry.called, blocked, answer))
            }
            _ => None,
        })
        .collect();
    // The second was sent after the first was seen blocked, and seen
    // blocked before the first was answered: both waited together.
    let (first, second) = waited.iter().find_map(|&(i, key, _, blocked, answer)| {
        waited
            .iter()
            .find(|&&(j, other, called, seen, _)| {
                j != i && other == key && called > blocked && seen < answer
            })
            .map(|&(j, ..)| (i, j))
    })?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use spec::Step;

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
        check(&entries(steps), kills).failed.is_empty()
    }

    const A: u8 = 0;
    const B: u8 = 1;

    /// Leases far longer than these histories (stamps of a few ns).
    const HOUR_MS: u64 = 3_600_000;

    fn acquire(owner: u8) -> Cmd {
        Cmd::Acquire {
            owner,
            ttl_ms: HOUR_MS,
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
        Cmd::Acquire { owner, ttl_ms }
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
                    Reply::Nil,
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
}
