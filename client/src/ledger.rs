//! What the client may assume about each node's lease and token, and the
//! validity that follows from it. Pure bookkeeping, tested exactly.
//!
//! Every lock command that sets a lease (`ACQUIRE`, re-entry, `EXTEND`) sets
//! it to the node's `now + ttl`, so it can lengthen the lease or shorten it.
//! The ledger keeps, per node, a lower bound on when the node's lease for us
//! ends, on the client's clock: `round start + ttl - drift` for a node that
//! confirmed the command (the node ran it after the round started). A node
//! that did not answer may or may not have run it, so its bound becomes the
//! earlier of the two; a node that said it does not hold the lock, or that
//! another owner does, has none. The lock is certainly held until the
//! `quorum`-th latest bound: at least a majority of nodes hold it until then.
//! So a failed or partial extension or re-entry that shortened leases
//! shortens the validity too, never the other way round.
//!
//! Tokens: the ledger remembers the token each node last reported for us.
//! A grant that reports another token (or comes from a node we have no
//! token for) may be a fresh grant after our lease lapsed there, with a
//! token above those of holders in between: the cached fencing token is
//! then stale (see `Lock::fencing_token`).

use std::time::{Duration, Instant};

/// One node's answer to a command that sets the lease, for the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The node ran it and holds the lock for us (with this token, when the
    /// reply carries one).
    Holds(Option<u64>),
    /// The node does not hold it for us (not held, or held by another).
    Denied,
    /// No answer: it may or may not have run the command.
    Unknown,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Ledger {
    /// Per node, in client order: the earliest time its lease for us may end.
    leases: Vec<Option<Instant>>,
    /// Per node: the token it last reported for our lock.
    tokens: Vec<Option<u64>>,
}

impl Ledger {
    /// A ledger for `nodes` nodes, none known to hold the lock.
    pub fn new(nodes: usize) -> Ledger {
        Ledger {
            leases: vec![None; nodes],
            tokens: vec![None; nodes],
        }
    }

    /// A round of a lease-setting command with `ttl` and `drift`, started at
    /// `started`, answered with `answers` (one per node). Returns whether a
    /// node granted with a token other than the one it reported before (a
    /// possibly fresh grant).
    pub fn apply(
        &mut self,
        started: Instant,
        ttl: Duration,
        drift: Duration,
        answers: &[Answer],
    ) -> bool {
        let end = lease_end(started, ttl, drift);
        let mut fresh = false;
        for (i, answer) in answers.iter().enumerate() {
            let (Some(lease), Some(known)) = (self.leases.get_mut(i), self.tokens.get_mut(i))
            else {
                continue;
            };
            match *answer {
                Answer::Holds(token) => {
                    *lease = end;
                    if let Some(token) = token {
                        fresh |= *known != Some(token);
                        *known = Some(token);
                    }
                }
                Answer::Denied => *lease = None,
                Answer::Unknown => *lease = lease.zip(end).map(|(old, new)| old.min(new)),
            }
        }
        fresh
    }

    /// The token a node reported (from `LOCK.FENCE`).
    pub fn saw_token(&mut self, node: usize, token: u64) {
        if let Some(known) = self.tokens.get_mut(node) {
            *known = Some(token);
        }
    }

    /// How long from now at least `quorum` nodes certainly hold the lock
    /// for us; `None` when that time has passed (or never came).
    pub fn validity(&self, quorum: usize) -> Option<Duration> {
        self.valid_until(quorum)?
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
    }

    /// Until when at least `quorum` nodes certainly hold the lock for us.
    pub fn valid_until(&self, quorum: usize) -> Option<Instant> {
        let mut ends: Vec<Instant> = self.leases.iter().flatten().copied().collect();
        if quorum == 0 || ends.len() < quorum {
            return None;
        }
        ends.sort_unstable_by(|a, b| b.cmp(a));
        ends.get(quorum - 1).copied()
    }
}

/// `started + ttl - drift`, or `None` when that overflows or the drift
/// exceeds the ttl (no time at all is certain).
pub(crate) fn lease_end(started: Instant, ttl: Duration, drift: Duration) -> Option<Instant> {
    started.checked_add(ttl.checked_sub(drift)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_quorum_of_confirmations_is_valid_until_start_plus_ttl_minus_drift() {
        let t0 = Instant::now();
        let mut ledger = Ledger::new(5);
        let answers = [
            Answer::Holds(Some(1)),
            Answer::Holds(Some(2)),
            Answer::Holds(Some(3)),
            Answer::Denied,
            Answer::Unknown,
        ];
        ledger.apply(t0, ms(1_000), ms(12), &answers);
        assert_eq!(ledger.valid_until(3), Some(t0 + ms(988)));
        // Two confirmations are not a majority of five.
        let mut two = Ledger::new(5);
        two.apply(t0, ms(1_000), ms(12), &answers[1..]);
        assert_eq!(two.valid_until(3), None);
    }

    #[test]
    fn a_failed_shorter_extension_shortens_the_validity() {
        let t0 = Instant::now();
        let mut ledger = Ledger::new(5);
        ledger.apply(t0, ms(10_000), ms(0), &[Answer::Holds(Some(1)); 5]);
        // extend_with(1 s) ran on two nodes; three did not answer.
        let t1 = t0 + ms(100);
        let answers = [
            Answer::Holds(None),
            Answer::Holds(None),
            Answer::Unknown,
            Answer::Unknown,
            Answer::Unknown,
        ];
        ledger.apply(t1, ms(1_000), ms(0), &answers);
        assert_eq!(ledger.valid_until(3), Some(t1 + ms(1_000)));
    }

    #[test]
    fn a_failed_renewal_after_a_longer_extension_comes_back_to_the_ttl() {
        let t0 = Instant::now();
        let mut ledger = Ledger::new(3);
        ledger.apply(t0, ms(60_000), ms(0), &[Answer::Holds(Some(1)); 3]);
        let t1 = t0 + ms(10);
        // A renewal at the original 1 s TTL that nobody confirmed in time.
        ledger.apply(t1, ms(1_000), ms(0), &[Answer::Unknown; 3]);
        assert_eq!(ledger.valid_until(2), Some(t1 + ms(1_000)));
        // Nodes that deny lose their bound entirely.
        ledger.apply(
            t1,
            ms(1_000),
            ms(0),
            &[Answer::Denied, Answer::Denied, Answer::Unknown],
        );
        assert_eq!(ledger.valid_until(2), None);
    }

    #[test]
    fn another_token_from_a_granting_node_is_a_possibly_fresh_grant() {
        let t0 = Instant::now();
        let mut ledger = Ledger::new(3);
        assert!(ledger.apply(t0, ms(1_000), ms(0), &[Answer::Holds(Some(5)); 3]));
        let same = [
            Answer::Holds(Some(5)),
            Answer::Holds(Some(5)),
            Answer::Unknown,
        ];
        assert!(!ledger.apply(t0, ms(1_000), ms(0), &same));
        // The fencing write-back raised node 1's token to 9.
        ledger.saw_token(1, 9);
        let raised = [
            Answer::Holds(Some(5)),
            Answer::Holds(Some(9)),
            Answer::Denied,
        ];
        assert!(!ledger.apply(t0, ms(1_000), ms(0), &raised));
        // Node 2 grants afresh after its lease lapsed.
        let fresh = [
            Answer::Holds(Some(5)),
            Answer::Holds(Some(9)),
            Answer::Holds(Some(12)),
        ];
        assert!(ledger.apply(t0, ms(1_000), ms(0), &fresh));
    }

    #[test]
    fn overflowing_ends_are_no_bound() {
        let t0 = Instant::now();
        assert_eq!(lease_end(t0, ms(5), ms(6)), None);
        assert_eq!(lease_end(t0, Duration::MAX, ms(0)), None);
        let mut ledger = Ledger::new(1);
        ledger.apply(t0, ms(5), ms(6), &[Answer::Holds(None)]);
        assert_eq!(ledger.valid_until(1), None);
    }

    /// The property: for random sequences of lease-setting rounds (acquire,
    /// extend with random TTLs, re-entry, renewals) with random per-node
    /// outcomes, the validity the ledger reports never outlasts the leases
    /// that guarantee it: at the reported end, at least a quorum of nodes
    /// still hold a lease set by one of our rounds.
    /// The nodes' true lease ends are simulated: a node that ran a command
    /// at some moment inside the round sets its lease to that moment + ttl,
    /// seen on a clock that runs fast against the client's by up to `drift`.
    #[test]
    fn the_reported_validity_never_outlasts_a_majority_of_leases() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x15);
        for _ in 0..2_000 {
            let nodes = rng.random_range(1..=7usize);
            let quorum = nodes / 2 + 1;
            let mut ledger = Ledger::new(nodes);
            let t0 = Instant::now();
            // The true end of each node's lease for us (None: not held).
            let mut truth: Vec<Option<Instant>> = vec![None; nodes];
            let mut clock = t0;
            for _ in 0..rng.random_range(1..12) {
                clock += ms(rng.random_range(0..500));
                let started = clock;
                let length = ms(rng.random_range(0..50));
                let ttl = ms(rng.random_range(1..3_000));
                let drift = ttl.mul_f64(0.01) + ms(2);
                let mut answers = Vec::new();
                for node in truth.iter_mut() {
                    // When (inside the round) the node ran the command, and
                    // how fast its clock ran against ours (the lease ends
                    // earlier on our clock by at most the drift).
                    let ran_at = started + length.mul_f64(rng.random_range(0.0..=1.0));
                    let fast = drift.mul_f64(rng.random_range(0.0..=1.0));
                    let ran_end = ran_at + ttl - fast.min(ttl);
                    let answer = match rng.random_range(0..6) {
                        // Ran, and we heard it: only a node that still held
                        // our lock (or granted afresh) sets it.
                        0..=2 => {
                            *node = Some(ran_end);
                            Answer::Holds(Some(1))
                        }
                        3 => {
                            *node = None;
                            Answer::Denied
                        }
                        // Ran, reply lost.
                        4 => {
                            if node.is_some() {
                                *node = Some(ran_end);
                            }
                            Answer::Unknown
                        }
                        // Never ran.
                        _ => Answer::Unknown,
                    };
                    answers.push(answer);
                }
                clock = started + length;
                // A renewal that finished after the validity ended: its
                // confirmations count as unknown (`hold.rs`).
                if ledger
                    .valid_until(quorum)
                    .is_none_or(|until| clock >= until)
                {
                    for answer in &mut answers {
                        if matches!(answer, Answer::Holds(_)) {
                            *answer = Answer::Unknown;
                        }
                    }
                }
                ledger.apply(started, ttl, drift, &answers);
                if let Some(until) = ledger.valid_until(quorum) {
                    let holding = truth
                        .iter()
                        .filter(|end| end.is_some_and(|end| end >= until))
                        .count();
                    assert!(
                        holding >= quorum,
                        "valid until {:?} after t0, but only {holding} of {nodes} nodes hold a lease that long",
                        until - t0
                    );
                }
            }
        }
    }
}
