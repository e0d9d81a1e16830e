//! The pure arithmetic of Redlock: quorum size, drift allowance and retry
//! delays (validity is the ledger's). Kept free of I/O so it is tested exactly.

use std::time::Duration;

/// Nodes that must agree among `nodes`: a strict majority, so that two
/// quorums always share at least one node.
pub fn quorum(nodes: usize) -> usize {
    nodes / 2 + 1
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
