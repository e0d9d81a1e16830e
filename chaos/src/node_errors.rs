//! Every node error the clients meet, in every round (retries, undo rounds,
//! renewals and fencing rounds included, not only the rounds whose results
//! the workload sees), through the client's node-error observer; and the
//! servers' own state: a `panicked`, assertion or crash line in a log, or a
//! server that died without a fault.
//!
//! A node error the faults provoke is expected: no reply in time or a
//! failed connection (a node killed, stopped, slowed or cut off), `LOADING`
//! (a restarted node reading its data) and `RECOVERING` (a restarted node
//! in its recovery window refusing new locks). Any other error reply
//! (`ERR internal error …` from a module panic, an unknown command, a
//! wrong type), a reply outside the module's contract, or a missing
//! acknowledgement fails the run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};

use redis_lock_client::NodeError;

/// Whether the faults can have provoked `error`.
pub fn provoked(error: &NodeError) -> bool {
    match error {
        NodeError::Timeout(_) | NodeError::Connection(_) => true,
        NodeError::Reply(text) => text.starts_with("LOADING") || text.starts_with("RECOVERING"),
        NodeError::UnexpectedReply(_) | NodeError::Unacknowledged(_) => false,
    }
}

/// The node errors of one phase's nodes.
#[derive(Debug, Default)]
pub struct NodeErrors {
    provoked: AtomicU64,
    unprovoked: AtomicU64,
    first: Mutex<Option<String>>,
}

/// [`NodeErrors`] read out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeErrorFigures {
    pub provoked: u64,
    pub unprovoked: u64,
    pub first_unprovoked: Option<String>,
}

impl NodeErrorFigures {
    pub fn add(&mut self, other: &NodeErrorFigures) {
        self.provoked += other.provoked;
        self.unprovoked += other.unprovoked;
        if self.first_unprovoked.is_none() {
            self.first_unprovoked.clone_from(&other.first_unprovoked);
        }
    }
}

impl NodeErrors {
    /// Counts one node's error.
    pub fn note(&self, node: &str, error: &NodeError) {
        if provoked(error) {
            self.provoked.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.unprovoked.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first.lock().unwrap_or_else(|p| p.into_inner());
        if first.is_none() {
            *first = Some(format!("{node}: {error}"));
        }
    }

    pub fn figures(&self) -> NodeErrorFigures {
        NodeErrorFigures {
            provoked: self.provoked.load(Ordering::Relaxed),
            unprovoked: self.unprovoked.load(Ordering::Relaxed),
            first_unprovoked: self.first.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }
}

/// The phases that watch node errors now, by their nodes' ports (phases of
/// concurrent runs in one process have nodes on different ports).
static WATCHING: Mutex<Vec<(u16, Weak<NodeErrors>)>> = Mutex::new(Vec::new());
static OBSERVER: Once = Once::new();

fn observe(node: &str, error: &NodeError) {
    let Some(port) = node.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()) else {
        return;
    };
    let sink = WATCHING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(p, _)| *p == port)
        .and_then(|(_, sink)| sink.upgrade());
    if let Some(sink) = sink {
        sink.note(node, error);
    }
}

/// Counts the node errors of the nodes on `ports` while it lives.
pub struct Watch {
    pub errors: Arc<NodeErrors>,
    ports: Vec<u16>,
}

impl Watch {
    pub fn start(ports: Vec<u16>) -> Watch {
        OBSERVER.call_once(|| {
            redis_lock_client::observe_node_errors(observe);
        });
        let errors = Arc::new(NodeErrors::default());
        let mut watching = WATCHING.lock().unwrap_or_else(|p| p.into_inner());
        watching.retain(|(p, sink)| !ports.contains(p) && sink.strong_count() > 0);
        watching.extend(ports.iter().map(|p| (*p, Arc::downgrade(&errors))));
        Watch { errors, ports }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        WATCHING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(p, _)| !self.ports.contains(p));
    }
}

/// The lines of a server log that say the server or the module went wrong:
/// a caught module panic (`redis-lock: … panicked: …`), a failed assertion,
/// a crash report.
pub fn bad_log_lines(log: &str) -> Vec<&str> {
    const SIGNS: [&str; 5] = [
        "panicked",
        "ASSERTION FAILED",
        "BUG REPORT START",
        "Guru Meditation",
        "crashed by signal",
    ];
    log.lines()
        .filter(|line| SIGNS.iter().any(|sign| line.contains(sign)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_what_faults_cause_is_provoked() {
        for error in [
            NodeError::Timeout(Duration::from_millis(100)),
            NodeError::Connection("refused".into()),
            NodeError::Reply("LOADING Redis is loading the dataset in memory".into()),
            NodeError::Reply(
                "RECOVERING this node refuses new locks for another 50 ms (lock.recovery-ms)"
                    .into(),
            ),
        ] {
            assert!(provoked(&error), "{error}");
        }
        for error in [
            NodeError::Reply("ERR internal error in LOCK.FENCE: boom".into()),
            NodeError::Reply("ERR unknown command 'LOCK.ACQUIRE'".into()),
            NodeError::Reply("WRONGTYPE Operation against a key".into()),
            NodeError::UnexpectedReply("expected a token, got Okay".into()),
            NodeError::Unacknowledged("WAIT: 0 of 1 replicas".into()),
        ] {
            assert!(!provoked(&error), "{error}");
        }
    }

    #[test]
    fn an_unprovoked_error_is_counted_with_its_node() {
        let errors = NodeErrors::default();
        errors.note("127.0.0.1:7000", &NodeError::Timeout(Duration::ZERO));
        errors.note(
            "127.0.0.1:7001",
            &NodeError::Reply("ERR internal error in LOCK.ACQUIRE: boom".into()),
        );
        let figures = errors.figures();
        assert_eq!((figures.provoked, figures.unprovoked), (1, 1));
        assert_eq!(
            figures.first_unprovoked.as_deref(),
            Some("127.0.0.1:7001: error reply: ERR internal error in LOCK.ACQUIRE: boom")
        );
    }

    #[test]
    fn panics_assertions_and_crashes_in_a_log_are_found() {
        let log = "1:M 01 Jan 00:00:00.000 * Ready to accept connections tcp\n\
                   1:M 01 Jan 00:00:01.000 # redis-lock: LOCK.FENCE panicked: index out of bounds\n\
                   1:M 01 Jan 00:00:02.000 # === ASSERTION FAILED ===\n\
                   1:M 01 Jan 00:00:03.000 # Redis 7.0.15 crashed by signal: 11, si_code: 1\n\
                   1:M 01 Jan 00:00:04.000 * DB saved on disk\n";
        assert_eq!(bad_log_lines(log).len(), 3);
        assert!(bad_log_lines("1:M * Ready to accept connections tcp\n").is_empty());
    }
}
