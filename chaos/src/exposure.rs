//! How many holders a fault actually threatened: for each validity window,
//! the faults injected inside it on the nodes that granted it, counting
//! only faults that can make a node forget a grant or end it early
//! ([`FaultKind::can_undo_grants`]): a restart of a node that can lose
//! acknowledged writes, a power loss, a lease clock run fast or jumped.
//! A slow, stopped or cut-off node, a wall-clock step or a lost reply
//! leaves the node's grants in force, so it threatens no hold. A window
//! *lost its majority* when the granting nodes no fault touched inside it
//! are fewer than a majority of all nodes: from then on the hold is safe
//! only through the mechanisms under test (persistence, the recovery
//! window, the client's validity and fencing), not through untouched
//! grants. A run whose faults never did that proves little, so the short
//! run in `make test` has a floor on it.

use std::collections::BTreeSet;

use crate::checker::Holder;
use crate::faults::FaultEvent;

/// Windows and the faults inside them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exposure {
    /// Windows of positive length.
    pub windows: u64,
    /// With a fault on one of their granting nodes inside them.
    pub threatened: u64,
    /// With fewer than a majority of all nodes left untouched among their
    /// granting nodes.
    pub lost_majority: u64,
}

impl Exposure {
    /// The exposure of `holders` to `events` on a cluster of `nodes`;
    /// `can_forget(node)`: whether a restart of that node can cost it
    /// leases (its persistence can lose acknowledged writes, or its clock
    /// may be set back, which the restart steps forward).
    pub fn of(
        holders: &[Holder],
        events: &[FaultEvent],
        nodes: usize,
        can_forget: impl Fn(usize) -> bool,
    ) -> Exposure {
        let events: Vec<(&FaultEvent, Vec<usize>)> = events
            .iter()
            .map(|e| {
                let undone = e
                    .nodes
                    .iter()
                    .copied()
                    .filter(|&node| e.kind.can_undo_grants(can_forget(node)))
                    .collect();
                (e, undone)
            })
            .collect();
        let majority = nodes / 2 + 1;
        let mut exposure = Exposure::default();
        for holder in holders {
            if holder.window_end <= holder.window_start {
                continue;
            }
            exposure.windows += 1;
            let hit: BTreeSet<usize> = events
                .iter()
                .filter(|(e, _)| e.at >= holder.window_start && e.at < holder.window_end)
                .flat_map(|(_, undone)| undone.iter().copied())
                .filter(|node| holder.granted_by.contains(node))
                .collect();
            if hit.is_empty() {
                continue;
            }
            exposure.threatened += 1;
            if holder.granted_by.len().saturating_sub(hit.len()) < majority {
                exposure.lost_majority += 1;
            }
        }
        exposure
    }

    pub fn add(&mut self, other: &Exposure) {
        self.windows += other.windows;
        self.threatened += other.threatened;
        self.lost_majority += other.lost_majority;
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::checker::HoldKind;
    use crate::plan::FaultKind;

    fn holder(start: Instant, ms: u64, granted_by: Vec<usize>) -> Holder {
        Holder {
            resource: "r".into(),
            client: 0,
            acquire_started: start,
            window_start: start,
            window_end: start + Duration::from_millis(ms),
            token: None,
            granted_by,
            kind: HoldKind::Exclusive,
        }
    }

    fn event(at: Instant, nodes: Vec<usize>) -> FaultEvent {
        event_of(FaultKind::Kill9Restart, at, nodes)
    }

    fn event_of(kind: FaultKind, at: Instant, nodes: Vec<usize>) -> FaultEvent {
        FaultEvent {
            at,
            kind,
            nodes,
            detail: String::new(),
        }
    }

    #[test]
    fn only_faults_on_granting_nodes_inside_the_window_count() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let holders = [
            holder(t, 100, vec![0, 1, 2]),          // node 1 hit inside
            holder(ms(200), 100, vec![0, 1, 2]),    // hits outside or elsewhere
            holder(ms(400), 100, vec![0, 1, 2, 3]), // 2 of 4 hit: 2 left < 3
            holder(ms(600), 0, vec![0]),            // empty window
        ];
        let events = [
            event(ms(50), vec![1]),
            event(ms(150), vec![0]),
            event(ms(250), vec![3, 4]),
            event(ms(410), vec![0]),
            event(ms(420), vec![3, 4]),
            event(ms(600), vec![0]),
        ];
        let exposure = Exposure::of(&holders, &events, 5, |_| true);
        assert_eq!(
            exposure,
            Exposure {
                windows: 3,
                threatened: 2,
                lost_majority: 2,
            }
        );
        // Three granters untouched of four: still a majority of five.
        let exposure = Exposure::of(&holders[2..3], &events[4..5], 5, |_| true);
        assert_eq!(exposure.lost_majority, 0);
        assert_eq!(exposure.threatened, 1);
    }

    #[test]
    fn only_faults_that_can_undo_a_grant_count() {
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let window = [holder(t, 1_000, vec![0, 1, 2])];
        // Faults that leave every grant in force: none threatens the hold.
        let harmless = [
            FaultKind::StopNode,
            FaultKind::SlowNode,
            FaultKind::ClockOffset,
            FaultKind::ClientPause,
            FaultKind::Partition,
            FaultKind::SplitMajorities,
            FaultKind::OneWayLoss,
            FaultKind::Delay,
            FaultKind::FlakyLink,
            FaultKind::ClientSlowLink,
            FaultKind::ClientReconnect,
        ];
        let events: Vec<FaultEvent> = harmless
            .iter()
            .enumerate()
            .map(|(i, &kind)| event_of(kind, ms(10 + i as u64), vec![0, 1, 2]))
            .collect();
        let exposure = Exposure::of(&window, &events, 3, |_| true);
        assert_eq!(exposure.threatened, 0, "{exposure:?}");
        // A restart threatens the hold only on a node that can lose writes.
        let restart = [event(ms(10), vec![0, 1])];
        assert_eq!(Exposure::of(&window, &restart, 3, |_| false).threatened, 0);
        let lost = Exposure::of(&window, &restart, 3, |node| node == 1);
        assert_eq!((lost.threatened, lost.lost_majority), (1, 0));
        // Power loss and the lease clock count on any node.
        for kind in [FaultKind::PowerLoss, FaultKind::LeaseClockSkew] {
            let events = [event_of(kind, ms(10), vec![0, 1])];
            let exposure = Exposure::of(&window, &events, 3, |_| false);
            assert_eq!((exposure.threatened, exposure.lost_majority), (1, 1));
        }
    }
}
