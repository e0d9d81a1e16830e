//! Client settings and the checks that reject settings that could never
//! produce a valid lock.

use std::time::Duration;

use crate::acknowledge::Acknowledge;
use crate::error::{Error, Result};
use crate::timing;

/// How the client talks to the nodes, retries, and accounts for clock drift.
///
/// Start from [`Config::default`] and change what you need:
///
/// ```
/// use std::time::Duration;
/// use redis_lock_client::Config;
///
/// let config = Config {
///     node_timeout: Duration::from_millis(20),
///     retry_count: 10,
///     ..Config::default()
/// };
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// How long to wait for one node's reply. Keep it small next to the TTL:
    /// a dead or paused node then costs at most this much per round.
    pub node_timeout: Duration,
    /// Retries after a failed acquisition attempt (0: one attempt only).
    pub retry_count: u32,
    /// Base delay before a retry.
    pub retry_delay: Duration,
    /// A uniformly random extra delay in `0..=retry_jitter` added to each
    /// retry, so that clients that collided do not collide again.
    pub retry_jitter: Duration,
    /// Overall acquire deadline. `None`: bounded by `retry_count` alone (and
    /// in single-node mode the server-side wait lasts as long as the retries
    /// would have, see [`Config::retry_budget`]).
    pub acquire_timeout: Option<Duration>,
    /// Clock drift allowance as a fraction of the TTL (0.01 = 1%).
    pub drift_factor: f64,
    /// Constant clock drift allowance added to the proportional one.
    pub drift_min: Duration,
    /// How often a [`Watchdog`](crate::Watchdog) renews the lease. `None`:
    /// a third of the TTL. A renewal also starts early enough to finish
    /// (one `node_timeout`) before the loss signal.
    pub watchdog_interval: Option<Duration>,
    /// How long before the validity ends a watchdog reports the lock lost
    /// (and `with_lock` cancels its work), so that work stopped on the
    /// signal stops while the lock is still certainly held.
    pub watchdog_margin: Duration,
    /// What a node must confirm (replicas, fsync) after it grants, extends
    /// or fences before it counts; asked in the same write as the command
    /// (see [`Acknowledge`]). `None`: the node's reply is enough.
    pub acknowledge: Option<Acknowledge>,
    /// With [`Redlock::cluster`](crate::Redlock::cluster): before a hold's
    /// fencing token is first returned, raise every master's token counter
    /// to at least that token (`LOCK.FLOOR`, to all masters at once, within
    /// `node_timeout`), so that a token issued later for the key, after its
    /// slot moved to another master while the lock was free, is higher
    /// whatever the masters' clocks. A master that cannot be raised in time
    /// does not fail the call (it is counted as a node error); see the
    /// README for the exact bound then. `false`: one round trip less per
    /// token, and tokens across a slot move are ordered only as far as the
    /// masters' clocks agree. Ignored outside cluster mode (Redlock's
    /// write-back to a majority already orders tokens). Default `true`.
    pub raise_cluster_counters: bool,
    /// For the chaos suite's negative control only: after a failed
    /// extension or re-entry, keep the validity from before it (the unsafe
    /// rule of earlier clients: the round may have shortened leases).
    #[doc(hidden)]
    pub unsafe_keep_validity_on_failure: bool,
    /// For the chaos suite's network negative control only: the number of
    /// nodes that must grant, in place of a majority (or a permit's larger
    /// quorum). Below a majority two clients can both win: that is the
    /// point of the control. Must be between 1 and the number of nodes.
    #[doc(hidden)]
    pub unsafe_quorum: Option<usize>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_timeout: Duration::from_millis(100),
            retry_count: 3,
            retry_delay: Duration::from_millis(200),
            retry_jitter: Duration::from_millis(100),
            acquire_timeout: None,
            drift_factor: 0.01,
            drift_min: Duration::from_millis(2),
            watchdog_interval: None,
            watchdog_margin: Duration::from_millis(10),
            acknowledge: None,
            raise_cluster_counters: true,
            unsafe_keep_validity_on_failure: false,
            unsafe_quorum: None,
        }
    }
}

/// The longest any duration setting may be (a year): deadlines are computed
/// as `Instant + duration`, which panics on overflow, so a setting near
/// `Duration::MAX` is refused here instead.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

impl Config {
    /// Rejects settings that can never work, independent of any TTL.
    pub fn validate(&self) -> Result<()> {
        for (name, value) in [
            ("node_timeout", Some(self.node_timeout)),
            ("retry_delay", Some(self.retry_delay)),
            ("retry_jitter", Some(self.retry_jitter)),
            ("acquire_timeout", self.acquire_timeout),
            ("drift_min", Some(self.drift_min)),
            ("watchdog_interval", self.watchdog_interval),
            ("watchdog_margin", Some(self.watchdog_margin)),
            (
                "acknowledge timeout",
                self.acknowledge.map(|ack| ack.timeout),
            ),
        ] {
            if value.is_some_and(|value| value > MAX_DURATION) {
                return invalid(format!("{name} must be at most one year"));
            }
        }
        if self.node_timeout.is_zero() {
            return invalid("node_timeout must be positive");
        }
        if !(0.0..1.0).contains(&self.drift_factor) {
            return invalid("drift_factor must be in 0.0..1.0");
        }
        if self.acquire_timeout.is_some_and(|t| t.is_zero()) {
            return invalid("acquire_timeout must be positive");
        }
        if self.watchdog_interval.is_some_and(|i| i.is_zero()) {
            return invalid("watchdog_interval must be positive");
        }
        if let Some(ack) = &self.acknowledge {
            ack.validate()?;
        }
        Ok(())
    }

    /// The longest a round that sets leases may take: the per-node timeout,
    /// plus the acknowledgement timeout when acknowledgements are asked.
    pub fn round_timeout(&self) -> Duration {
        self.node_timeout + self.acknowledge.map_or(Duration::ZERO, |ack| ack.timeout)
    }

    /// Rejects a TTL with which no acquisition could ever be valid: one that
    /// is not a whole positive number of milliseconds, or not longer than one
    /// round (the per-node timeout) plus the drift allowance.
    pub fn validate_ttl(&self, ttl: Duration) -> Result<()> {
        self.validate()?;
        if ttl.as_millis() == 0 || ttl.subsec_nanos() % 1_000_000 != 0 {
            return invalid("ttl must be a positive whole number of milliseconds");
        }
        if ttl.as_millis() > i64::MAX as u128 {
            return invalid("ttl is too large");
        }
        let drift = self.drift(ttl);
        if ttl <= self.round_timeout() + drift {
            return invalid(format!(
                "ttl ({} ms) must exceed node_timeout ({} ms, with the acknowledgement timeout) plus drift ({} ms)",
                ttl.as_millis(),
                self.round_timeout().as_millis(),
                drift.as_millis()
            ));
        }
        if let Some(interval) = self.watchdog_interval {
            if interval + self.round_timeout() + self.watchdog_margin >= ttl - drift {
                return invalid(format!(
                    "watchdog_interval ({} ms) plus node_timeout ({} ms) plus watchdog_margin ({} ms) must be shorter than ttl minus drift ({} ms): a renewal must be able to finish before the lock's validity ends",
                    interval.as_millis(),
                    self.round_timeout().as_millis(),
                    self.watchdog_margin.as_millis(),
                    (ttl - drift).as_millis()
                ));
            }
        }
        Ok(())
    }

    /// The clock drift allowance for `ttl`.
    pub fn drift(&self, ttl: Duration) -> Duration {
        timing::drift(ttl, self.drift_factor, self.drift_min)
    }

    /// The longest the retries can take when every attempt fails: each
    /// attempt is an acquire round and an undo round (at most `node_timeout`
    /// each), and each retry waits at most `retry_delay + retry_jitter`. The
    /// single-node wait lasts this long when no `acquire_timeout` is set
    /// (at most a year, [`MAX_DURATION`]: with a `retry_count` near
    /// `u32::MAX` the budget is clamped, not sent to the module as a wait
    /// it refuses).
    pub fn retry_budget(&self) -> Duration {
        let rounds = self
            .round_timeout()
            .saturating_mul(2)
            .saturating_mul(self.retry_count.saturating_add(1));
        // At most a year (MAX_DURATION): the module refuses a WAIT above
        // its own limit (ten years), and a huge retry_count must still wait.
        rounds
            .saturating_add((self.retry_delay + self.retry_jitter).saturating_mul(self.retry_count))
            .min(MAX_DURATION)
    }

    /// The renewal period of a watchdog for `ttl`.
    pub fn watchdog_interval_for(&self, ttl: Duration) -> Duration {
        self.watchdog_interval.unwrap_or(ttl / 3)
    }
}

fn invalid<T>(why: impl Into<String>) -> Result<T> {
    Err(Error::InvalidConfig(why.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn every_duration_near_the_maximum_is_refused_not_a_panic_later() {
        let fields: [fn(&mut Config); 7] = [
            |c| c.node_timeout = Duration::MAX,
            |c| c.retry_delay = Duration::MAX,
            |c| c.retry_jitter = Duration::MAX,
            |c| c.acquire_timeout = Some(Duration::MAX),
            |c| c.drift_min = Duration::MAX,
            |c| c.watchdog_interval = Some(Duration::MAX),
            |c| c.watchdog_margin = Duration::MAX,
        ];
        for set in fields {
            let mut config = Config::default();
            set(&mut config);
            assert!(
                matches!(config.validate(), Err(Error::InvalidConfig(ref why)) if why.contains("at most one year")),
                "{config:?}"
            );
            // Nothing that a valid config feeds into can overflow.
            let mut config = Config::default();
            set(&mut config);
            let capped = Config {
                node_timeout: config.node_timeout.min(MAX_DURATION),
                retry_delay: config.retry_delay.min(MAX_DURATION),
                retry_jitter: config.retry_jitter.min(MAX_DURATION),
                acquire_timeout: config.acquire_timeout.map(|d| d.min(MAX_DURATION)),
                drift_min: config.drift_min.min(MAX_DURATION),
                watchdog_interval: config.watchdog_interval.map(|d| d.min(MAX_DURATION)),
                watchdog_margin: config.watchdog_margin.min(MAX_DURATION),
                ..config
            };
            assert!(capped.validate().is_ok());
            let _ = capped.retry_budget();
            let _ = std::time::Instant::now() + capped.retry_budget();
            let _ = std::time::Instant::now()
                + capped.retry_delay
                + capped.retry_jitter
                + capped.node_timeout
                + capped.acquire_timeout.unwrap_or_default();
        }
    }

    #[test]
    fn defaults_are_valid_for_ordinary_ttls() {
        let config = Config::default();
        assert!(config.validate().is_ok());
        assert!(config.validate_ttl(ms(1_000)).is_ok());
        assert!(config.validate_ttl(ms(30_000)).is_ok());
    }

    #[test]
    fn a_ttl_no_round_can_beat_is_rejected() {
        let config = Config::default();
        // 100 ms timeout + 2 ms + 1% of 100 ms drift: 100 ms can never work.
        assert!(matches!(
            config.validate_ttl(ms(100)),
            Err(Error::InvalidConfig(_))
        ));
        assert!(matches!(
            config.validate_ttl(ms(103)),
            Err(Error::InvalidConfig(_))
        ));
        assert!(config.validate_ttl(ms(104)).is_ok());
    }

    #[test]
    fn sub_millisecond_ttls_are_rejected() {
        let config = Config::default();
        assert!(config.validate_ttl(Duration::ZERO).is_err());
        assert!(config
            .validate_ttl(Duration::from_micros(1_000_500))
            .is_err());
    }

    #[test]
    fn nonsensical_settings_are_rejected() {
        let bad = [
            Config {
                node_timeout: Duration::ZERO,
                ..Config::default()
            },
            Config {
                drift_factor: 1.0,
                ..Config::default()
            },
            Config {
                drift_factor: -0.1,
                ..Config::default()
            },
            Config {
                drift_factor: f64::NAN,
                ..Config::default()
            },
            Config {
                acquire_timeout: Some(Duration::ZERO),
                ..Config::default()
            },
            Config {
                watchdog_interval: Some(Duration::ZERO),
                ..Config::default()
            },
        ];
        for config in bad {
            assert!(
                matches!(config.validate(), Err(Error::InvalidConfig(_))),
                "{config:?}"
            );
        }
    }

    #[test]
    fn a_watchdog_slower_than_the_lease_is_rejected() {
        let config = Config {
            watchdog_interval: Some(ms(990)),
            ..Config::default()
        };
        assert!(config.validate_ttl(ms(1_000)).is_err());
        let config = Config {
            watchdog_interval: Some(ms(500)),
            ..Config::default()
        };
        assert!(config.validate_ttl(ms(1_000)).is_ok());
        // A renewal started at the interval must finish (one node timeout)
        // before the loss signal (margin before the validity's end).
        let config = Config {
            watchdog_interval: Some(ms(880)),
            ..Config::default()
        };
        // 880 + 100 + 10 >= 1000 - 12
        assert!(config.validate_ttl(ms(1_000)).is_err());
        let config = Config {
            watchdog_interval: Some(ms(870)),
            ..Config::default()
        };
        assert!(config.validate_ttl(ms(1_000)).is_ok());
        assert_eq!(Config::default().watchdog_interval_for(ms(900)), ms(300));
    }

    #[test]
    fn retry_budget_covers_every_attempt() {
        let config = Config {
            node_timeout: ms(10),
            retry_count: 2,
            retry_delay: ms(100),
            retry_jitter: ms(50),
            ..Config::default()
        };
        // Three attempts of two 10 ms rounds, two pauses of at most 150 ms.
        assert_eq!(config.retry_budget(), ms(3 * 2 * 10 + 2 * 150));
        let once = Config {
            retry_count: 0,
            ..config
        };
        assert_eq!(once.retry_budget(), ms(20));
        let endless = Config {
            retry_count: u32::MAX,
            ..Config::default()
        };
        assert_eq!(endless.retry_budget(), MAX_DURATION);
    }
}
