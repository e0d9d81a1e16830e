//! Lock metrics through the `metrics` crate's facade (the `metrics`
//! feature; without it every function here is empty). The application
//! installs a recorder, e.g. `metrics-exporter-prometheus`; the names follow
//! Prometheus conventions under one prefix:
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `redis_lock_client_acquire_duration_seconds` | histogram | `outcome` | one `acquire`/`try_acquire` call (or a re-entry), from call to answer |
//! | `redis_lock_client_wait_duration_seconds` | histogram | `outcome` | the calls that met the lock held (a retry, or a server-side wait): the time spent waiting for it |
//! | `redis_lock_client_extensions_total` | counter | `result` | extensions, the watchdog's renewals included: `ok`, `failed` |
//! | `redis_lock_client_releases_total` | counter | `result` | final releases: `released` (a majority freed it), `lapsed` (the leases had ended), `failed` |
//! | `redis_lock_client_lost_total` | counter | | locks a watchdog reported lost |
//! | `redis_lock_client_node_errors_total` | counter | `node`, `kind` | a node that did not answer usably: `timeout`, `connection`, `reply`, `unexpected`, `unacknowledged`; in cluster mode also a master that missed the raise of its token counter (`node`: the master's address, or the cluster's name when the cluster connection failed the raise as a whole) |
//! | `redis_lock_client_held` | gauge | | lock handles of this process that hold their lock now |
//!
//! `outcome` is `acquired`, `contended` (not acquired, a node said another
//! owner holds it) or `failed` (not acquired for any other reason).

use std::time::Duration;

use crate::error::{Error, NodeError};
use crate::outcome::{NodeOutcome, Reply};

/// How an acquisition ended, as the `outcome` label says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireOutcome {
    Acquired,
    Contended,
    Failed,
}

impl AcquireOutcome {
    pub fn of<T>(result: &Result<T, Error>) -> AcquireOutcome {
        let busy =
            |outcomes: &[NodeOutcome]| outcomes.iter().any(|o| matches!(o.result, Ok(Reply::Busy)));
        match result {
            Ok(_) => AcquireOutcome::Acquired,
            Err(Error::NotAcquired { outcomes, .. } | Error::QuorumLost { outcomes, .. })
                if busy(outcomes) =>
            {
                AcquireOutcome::Contended
            }
            Err(_) => AcquireOutcome::Failed,
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            AcquireOutcome::Acquired => "acquired",
            AcquireOutcome::Contended => "contended",
            AcquireOutcome::Failed => "failed",
        }
    }
}

#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
fn node_error_kind(error: &NodeError) -> &'static str {
    match error {
        NodeError::Timeout(_) => "timeout",
        NodeError::Connection(_) => "connection",
        NodeError::Reply(_) => "reply",
        NodeError::UnexpectedReply(_) => "unexpected",
        NodeError::Unacknowledged(_) => "unacknowledged",
    }
}

#[cfg(feature = "metrics")]
mod record {
    use super::*;

    pub fn acquire(outcome: AcquireOutcome, took: Duration, waited: bool) {
        let label = outcome.label();
        metrics::histogram!("redis_lock_client_acquire_duration_seconds", "outcome" => label)
            .record(took.as_secs_f64());
        if waited {
            metrics::histogram!("redis_lock_client_wait_duration_seconds", "outcome" => label)
                .record(took.as_secs_f64());
        }
    }

    pub fn extension(ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        metrics::counter!("redis_lock_client_extensions_total", "result" => result).increment(1);
    }

    pub fn release(result: &'static str) {
        metrics::counter!("redis_lock_client_releases_total", "result" => result).increment(1);
    }

    pub fn lost() {
        metrics::counter!("redis_lock_client_lost_total").increment(1);
    }

    pub fn node_error(node: &str, error: &NodeError) {
        metrics::counter!(
            "redis_lock_client_node_errors_total",
            "node" => node.to_string(),
            "kind" => node_error_kind(error)
        )
        .increment(1);
    }

    pub fn held(change: f64) {
        metrics::gauge!("redis_lock_client_held").increment(change);
    }
}

#[cfg(not(feature = "metrics"))]
mod record {
    use super::*;

    pub fn acquire(_: AcquireOutcome, _: Duration, _: bool) {}
    pub fn extension(_: bool) {}
    pub fn release(_: &'static str) {}
    pub fn lost() {}
    pub fn node_error(_: &str, _: &NodeError) {}
    pub fn held(_: f64) {}
}

/// An acquisition call ended; `waited`: it met the lock held and waited
/// (retried, or waited on the server).
pub(crate) fn acquire(outcome: AcquireOutcome, took: Duration, waited: bool) {
    record::acquire(outcome, took, waited);
}

pub(crate) fn extension(ok: bool) {
    record::extension(ok);
}

/// A final release: freed by a majority, `lapsed` (the leases had ended
/// on a majority), or failed.
pub(crate) fn release(result: &Result<crate::outcome::Release, Error>) {
    record::release(match result {
        Ok(release) if release.lapsed() => "lapsed",
        Ok(_) => "released",
        Err(_) => "failed",
    });
}

pub(crate) fn lost() {
    record::lost();
}

/// Counts the failed nodes of a round.
pub(crate) fn node_errors(outcomes: &[NodeOutcome]) {
    for outcome in outcomes {
        if let Err(error) = &outcome.result {
            node_error(&outcome.node, error);
        }
    }
}

pub(crate) fn node_error(node: &str, error: &NodeError) {
    if let Some(observer) = OBSERVER.get() {
        observer(node, error);
    }
    record::node_error(node, error);
}

static OBSERVER: std::sync::OnceLock<fn(&str, &NodeError)> = std::sync::OnceLock::new();

/// Has `observer` called with the node's name and its error for every node
/// that did not answer usably, in every round of every client of this
/// process (what `redis_lock_client_node_errors_total` counts). For test
/// suites (the chaos suite fails a run on a node error it did not provoke);
/// not part of the stable API. Set once: returns false if one was set.
#[doc(hidden)]
pub fn observe_node_errors(observer: fn(&str, &NodeError)) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// A handle began (+1) or stopped (-1) holding its lock.
pub(crate) fn held(change: f64) {
    record::held(change);
}
