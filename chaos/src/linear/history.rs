//! A recorded history: each step with the moment it was sent and the
//! moment its reply came, on one clock that every connection reads (a
//! step's call is read before it is sent and its return after the reply is
//! read, so the order is never tighter than what happened), and the
//! moments the node was known dead. The clock is the machine's monotonic
//! clock in nanoseconds from the recorder's start, made strictly
//! increasing: the order of the moments is the order they were read in,
//! and the lease model ([`super::spec`]) measures time on it.
//!
//! A step whose reply never came took effect before the first kill after
//! it was sent, or not at all (a killed node runs nothing more, and a
//! restarted one never sees the old connection's requests): its return is
//! that kill, or the end of the history when no kill came after it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use todc_utils::linearizability::history::{Action, History};

use super::spec::{Step, Timed};

/// One step on one key.
#[derive(Clone, Debug)]
pub struct Entry {
    pub key: usize,
    pub step: Step,
    pub called: u64,
    /// `None`: no reply (every reply in `step` is `None` too).
    pub returned: Option<u64>,
}

/// The history of a run, filled by every connection at once.
pub struct Recorder {
    origin: Instant,
    clock: AtomicU64,
    entries: Mutex<Vec<Entry>>,
    kills: Mutex<Vec<u64>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            origin: Instant::now(),
            clock: AtomicU64::new(0),
            entries: Mutex::default(),
            kills: Mutex::default(),
        }
    }
}

impl Recorder {
    /// Now, in nanoseconds since the recorder started: the monotonic
    /// clock, or one more than the latest moment drawn if that is not
    /// below it (every moment is drawn once).
    pub fn now(&self) -> u64 {
        let elapsed = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let next = |last: u64| last.saturating_add(1).max(elapsed);
        match self
            .clock
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| Some(next(last)))
        {
            Ok(last) | Err(last) => next(last),
        }
    }

    pub fn record(&self, entry: Entry) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entry);
    }

    /// The node is dead (called after `kill -9` returned).
    pub fn killed(&self) {
        let at = self.now();
        self.kills
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(at);
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn kills(&self) -> Vec<u64> {
        self.kills.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Each key's entries, by key.
pub fn by_key(entries: &[Entry]) -> BTreeMap<usize, Vec<Entry>> {
    let mut keys: BTreeMap<usize, Vec<Entry>> = BTreeMap::new();
    for entry in entries {
        keys.entry(entry.key).or_default().push(entry.clone());
    }
    keys
}

/// One key's entries as a history of calls and returns in the order they
/// happened (each entry its own process), for `todc_utils`'s checker.
/// `kills` in increasing order.
pub fn history(entries: &[Entry], kills: &[u64]) -> History<Timed> {
    let mut actions: Vec<(u64, usize, usize, Action<Timed>)> = Vec::new();
    for (process, entry) in entries.iter().enumerate() {
        let returned = entry.returned.unwrap_or_else(|| {
            kills
                .iter()
                .copied()
                .find(|&kill| kill > entry.called)
                .unwrap_or(u64::MAX)
        });
        let timed = Timed {
            step: entry.step.clone(),
            called: entry.called,
            returned,
        };
        actions.push((entry.called, 0, process, Action::Call(timed.clone())));
        // At one moment (a kill), returns after calls: never tighter.
        actions.push((returned, 1, process, Action::Response(timed)));
    }
    actions.sort_by_key(|&(at, order, process, _)| (at, order, process));
    History::from_actions(
        actions
            .into_iter()
            .map(|(_, _, process, action)| (process, action))
            .collect(),
    )
}
