//! A recorded history: each step with the moment it was sent and the
//! moment its reply came, on one sequence that every connection draws
//! from (a step's call is drawn before it is sent and its return after the
//! reply is read, so the order is never tighter than what happened), and
//! the moments the node was known dead.
//!
//! A step whose reply never came took effect before the first kill after
//! it was sent, or not at all (a killed node runs nothing more, and a
//! restarted one never sees the old connection's requests): its return is
//! that kill, or the end of the history when no kill came after it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use todc_utils::linearizability::history::{Action, History};

use super::spec::Step;

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
#[derive(Default)]
pub struct Recorder {
    clock: AtomicU64,
    entries: Mutex<Vec<Entry>>,
    kills: Mutex<Vec<u64>>,
}

impl Recorder {
    /// The next moment on the shared sequence.
    pub fn now(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
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
pub fn history(entries: &[Entry], kills: &[u64]) -> History<Step> {
    let mut actions: Vec<(u64, usize, usize, Action<Step>)> = Vec::new();
    for (process, entry) in entries.iter().enumerate() {
        let returned = entry.returned.unwrap_or_else(|| {
            kills
                .iter()
                .copied()
                .find(|&kill| kill > entry.called)
                .unwrap_or(u64::MAX)
        });
        actions.push((entry.called, 0, process, Action::Call(entry.step.clone())));
        // At one moment (a kill), returns after calls: never tighter.
        actions.push((returned, 1, process, Action::Response(entry.step.clone())));
    }
    actions.sort_by_key(|&(at, order, process, _)| (at, order, process));
    History::from_actions(
        actions
            .into_iter()
            .map(|(_, _, process, action)| (process, action))
            .collect(),
    )
}
