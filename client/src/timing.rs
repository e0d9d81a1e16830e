//! The pure arithmetic of Redlock: quorum size, drift allowance and retry
//! delays (validity is the ledger's). Kept free of I/O so it is tested exactly.

use std::time::Duration;

/// Nodes that must agree among `nodes`: a strict majority, so that two
/// quorums always share at least one node.
pub fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// Nodes that must grant a permit of a semaphore of `permits` among
/// `nodes`: more than `nodes × permits / (permits + 1)`, so that
/// `permits + 1` holders can never all have won theirs while no node grants
/// more than `permits` (they would need more grants than the nodes have).
/// A majority is not enough once `permits` ≥ 2: with five nodes and two
/// permits, three clients that each reach a different majority win {0,1,2},
/// {0,3,4} and {1,2,3}, and no node granted more than two. One permit needs
/// a majority; five nodes need four grants for two or three permits, all
/// five from four permits on.
pub fn permit_quorum(nodes: usize, permits: u32) -> usize {
    let (n, p) = (nodes as u128, u128::from(permits.max(1)));
    usize::try_from(n * p / (p + 1) + 1).unwrap_or(nodes)
}

/// The clock drift allowance for a lease of `ttl`: `factor × ttl + min`.
/// Nodes and client measure the lease with different clocks; the lease is
/// only trusted for as long as the slowest plausible clock agrees.
pub fn drift(ttl: Duration, factor: f64, min: Duration) -> Duration {
    // `factor` is validated to lie in 0..1, so the product cannot overflow.
    ttl.mul_f64(factor) + min
}

/// A retry delay: `base` plus a uniformly random part of `0..=jitter`
/// (`unit` is a uniform sample in `0.0..=1.0`, passed in for testability).
pub fn retry_delay(base: Duration, jitter: Duration, unit: f64) -> Duration {
    base + jitter.mul_f64(unit.clamp(0.0, 1.0))
}

/// [`retry_delay`] with a fresh random sample.
pub fn random_retry_delay(base: Duration, jitter: Duration) -> Duration {
    retry_delay(base, jitter, rand::random_range(0.0..=1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
        assert_eq!(quorum(6), 4);
        assert_eq!(quorum(7), 4);
        // Any two quorums overlap.
        for n in 1..20 {
            assert!(2 * quorum(n) > n, "n = {n}");
        }
    }

    #[test]
    fn permits_need_enough_grants_that_one_holder_too_many_cannot_win() {
        assert_eq!(permit_quorum(5, 1), 3);
        assert_eq!(permit_quorum(5, 2), 4);
        assert_eq!(permit_quorum(5, 3), 4);
        assert_eq!(permit_quorum(5, 4), 5);
        assert_eq!(permit_quorum(5, u32::MAX), 5);
        assert_eq!(permit_quorum(1, 7), 1);
        for nodes in 1..12 {
            assert_eq!(permit_quorum(nodes, 1), quorum(nodes));
            for permits in 1..40u32 {
                let (q, p) = (permit_quorum(nodes, permits), permits as usize);
                assert!(q <= nodes);
                // permits + 1 holders would need more grants than exist...
                assert!((p + 1) * q > nodes * p, "{nodes} nodes, {permits}");
                // ...and one grant fewer would not be enough (the smallest).
                assert!((p + 1) * (q - 1) <= nodes * p, "{nodes} nodes, {permits}");
            }
        }
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms_by_default() {
        assert_eq!(drift(ms(10_000), 0.01, ms(2)), ms(102));
        assert_eq!(drift(ms(1_000), 0.01, ms(2)), ms(12));
        assert_eq!(drift(ms(1_000), 0.0, ms(0)), ms(0));
    }

    #[test]
    fn retry_delay_stays_within_base_and_base_plus_jitter() {
        assert_eq!(retry_delay(ms(200), ms(100), 0.0), ms(200));
        assert_eq!(retry_delay(ms(200), ms(100), 1.0), ms(300));
        assert_eq!(retry_delay(ms(200), ms(100), 0.5), ms(250));
        assert_eq!(retry_delay(ms(200), ms(100), 7.0), ms(300), "clamped");
        assert_eq!(retry_delay(ms(200), ms(100), -1.0), ms(200), "clamped");
        let samples: Vec<Duration> = (0..1_000)
            .map(|_| random_retry_delay(ms(200), ms(100)))
            .collect();
        assert!(samples.iter().all(|d| (ms(200)..=ms(300)).contains(d)));
        // Jitter actually varies the delay (1,000 equal samples would mean
        // the random part is stuck).
        let first = samples[0];
        assert!(samples.iter().any(|d| *d != first));
    }
}
