//! Acknowledged grants: after a node grants, extends or fences, the same
//! write carries `WAIT` (replicas that have the change in memory) and/or
//! `WAITAOF` (the change fsynced locally and/or on replicas), so a node
//! counts only once its change would survive what the acknowledgement
//! covers, at no extra round trip.
//!
//! What each makes safe:
//! - `replicas(n)`: one primary with replicas and failover (Sentinel, a
//!   Cluster shard, an operator's `REPLICAOF NO ONE`). A replica that
//!   acknowledged holds the lock with the same owner and token, so the
//!   one promoted after the primary dies still refuses everyone else
//!   (if it is one of the `n`: with one replica, `replicas(1)`).
//! - `fsync_local()`: a node with `appendfsync everysec` (or `no`): the
//!   grant is on disk before it counts, so it survives `kill -9` and a
//!   power loss like `appendfsync always` would, for the locks alone.
//! - `fsync_replicas(n)`: both, on disk on the replicas.
//!
//! `WAITAOF` needs Redis 7.2 or Valkey; [`crate::Redlock::connect`] checks
//! the nodes for it.

use std::time::Duration;

use redis::{Cmd, Value};

use crate::error::{Error, NodeError, Result};

/// What a node must confirm before its grant, extension or fencing-token
/// write-back counts (see [`crate::Config::acknowledge`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acknowledge {
    /// Replicas that must have the change (`WAIT replicas timeout`).
    pub replicas: u32,
    /// The change must be fsynced to the node's own AOF (`WAITAOF 1 …`).
    pub local_fsync: bool,
    /// Replicas that must have fsynced it (`WAITAOF … n …`).
    pub replica_fsyncs: u32,
    /// How long the node may wait for the acknowledgements (added to the
    /// per-node timeout of the rounds that ask for them).
    pub timeout: Duration,
}

/// The acknowledgement timeout unless one is given.
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

impl Acknowledge {
    /// `n` replicas must have the change in memory.
    pub fn replicas(n: u32) -> Acknowledge {
        Acknowledge {
            replicas: n,
            local_fsync: false,
            replica_fsyncs: 0,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The change must be fsynced to the node's AOF.
    pub fn fsync_local() -> Acknowledge {
        Acknowledge {
            local_fsync: true,
            ..Acknowledge::replicas(0)
        }
    }

    /// `n` replicas must have fsynced the change to their AOF.
    pub fn fsync_replicas(n: u32) -> Acknowledge {
        Acknowledge {
            replica_fsyncs: n,
            ..Acknowledge::replicas(0)
        }
    }

    /// Also fsynced locally.
    pub fn and_fsync_local(self) -> Acknowledge {
        Acknowledge {
            local_fsync: true,
            ..self
        }
    }

    /// Waits at most `timeout` for the acknowledgements.
    pub fn within(self, timeout: Duration) -> Acknowledge {
        Acknowledge { timeout, ..self }
    }

    /// Whether `WAITAOF` is needed.
    pub fn needs_waitaof(&self) -> bool {
        self.local_fsync || self.replica_fsyncs > 0
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.replicas == 0 && !self.needs_waitaof() {
            return Err(Error::InvalidConfig(
                "acknowledge asks for nothing: give replicas, fsync_local or fsync_replicas".into(),
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::InvalidConfig(
                "acknowledge timeout must be positive".into(),
            ));
        }
        Ok(())
    }

    /// The commands that follow the lock command in the same write.
    pub(crate) fn commands(&self) -> Vec<Cmd> {
        // 0 would mean "wait forever" to the server.
        let ms = u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut cmds = Vec::new();
        if self.replicas > 0 {
            let mut wait = redis::cmd("WAIT");
            wait.arg(self.replicas).arg(ms);
            cmds.push(wait);
        }
        if self.needs_waitaof() {
            let mut waitaof = redis::cmd("WAITAOF");
            waitaof
                .arg(u32::from(self.local_fsync))
                .arg(self.replica_fsyncs)
                .arg(ms);
            cmds.push(waitaof);
        }
        cmds
    }

    /// The lock command's reply if the node acknowledged it, given the
    /// replies to it and to [`Acknowledge::commands`]. A reply that changed
    /// nothing (busy, not held, an error) needs no acknowledgement.
    pub(crate) fn accept(&self, mut replies: Vec<Value>) -> std::result::Result<Value, NodeError> {
        if replies.is_empty() {
            return Err(NodeError::UnexpectedReply("no reply".into()));
        }
        let reply = replies.remove(0);
        if !matches!(reply, Value::Int(n) if n != 0) {
            return Ok(reply);
        }
        let mut acks = replies.into_iter();
        if self.replicas > 0 {
            match acks.next() {
                Some(Value::Int(n)) if n >= i64::from(self.replicas) => {}
                Some(Value::Int(n)) => {
                    return Err(NodeError::Unacknowledged(format!(
                        "{n} of {} replicas within {} ms (WAIT)",
                        self.replicas,
                        self.timeout.as_millis()
                    )))
                }
                other => return Err(ack_error("WAIT", other)),
            }
        }
        if self.needs_waitaof() {
            match acks.next() {
                Some(Value::Array(counts)) => {
                    let count = |i: usize| match counts.get(i) {
                        Some(Value::Int(n)) => *n,
                        _ => -1,
                    };
                    let (local, replicas) = (count(0), count(1));
                    if local < i64::from(self.local_fsync)
                        || replicas < i64::from(self.replica_fsyncs)
                    {
                        return Err(NodeError::Unacknowledged(format!(
                            "fsynced locally {local} of {}, on {replicas} of {} replicas within {} ms (WAITAOF)",
                            u32::from(self.local_fsync),
                            self.replica_fsyncs,
                            self.timeout.as_millis()
                        )));
                    }
                }
                other => return Err(ack_error("WAITAOF", other)),
            }
        }
        Ok(reply)
    }
}

/// An acknowledgement command that failed: an error reply (no `WAITAOF`
/// before Redis 7.2, `WAITAOF` without `appendonly`) or something else.
fn ack_error(command: &str, reply: Option<Value>) -> NodeError {
    match reply {
        Some(Value::ServerError(error)) => {
            let text = match error.details() {
                Some(details) => format!("{} {details}", error.code()),
                None => error.code().to_string(),
            };
            let hint = if text.contains("unknown command") {
                " (WAITAOF needs Redis 7.2+ or Valkey)"
            } else {
                ""
            };
            NodeError::Reply(format!("{command}: {text}{hint}"))
        }
        other => NodeError::UnexpectedReply(format!("{command} replied {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_asked_or_a_zero_timeout_is_refused() {
        assert!(Acknowledge::replicas(0).validate().is_err());
        assert!(Acknowledge::replicas(1)
            .within(Duration::ZERO)
            .validate()
            .is_err());
        assert!(Acknowledge::replicas(1).validate().is_ok());
        assert!(Acknowledge::fsync_local().validate().is_ok());
    }

    #[test]
    fn the_commands_follow_the_settings() {
        let ack = Acknowledge::replicas(2)
            .and_fsync_local()
            .within(Duration::from_micros(10));
        let packed: Vec<Vec<u8>> = ack.commands().iter().map(Cmd::get_packed_command).collect();
        assert_eq!(packed.len(), 2);
        assert_eq!(
            packed[0],
            redis::cmd("WAIT").arg(2).arg(1).get_packed_command()
        );
        assert_eq!(
            packed[1],
            redis::cmd("WAITAOF")
                .arg(1)
                .arg(0)
                .arg(1)
                .get_packed_command()
        );
        assert_eq!(Acknowledge::replicas(1).commands().len(), 1);
    }

    #[test]
    fn a_grant_counts_only_when_acknowledged() {
        let ack = Acknowledge::replicas(1).and_fsync_local();
        let aof = |local, replicas| Value::Array(vec![Value::Int(local), Value::Int(replicas)]);
        assert_eq!(
            ack.accept(vec![Value::Int(7), Value::Int(1), aof(1, 0)]),
            Ok(Value::Int(7))
        );
        assert!(matches!(
            ack.accept(vec![Value::Int(7), Value::Int(0), aof(1, 0)]),
            Err(NodeError::Unacknowledged(_))
        ));
        assert!(matches!(
            ack.accept(vec![Value::Int(7), Value::Int(1), aof(0, 0)]),
            Err(NodeError::Unacknowledged(_))
        ));
        // Busy and not held changed nothing: no acknowledgement needed.
        assert_eq!(
            ack.accept(vec![Value::Nil, Value::Int(0), aof(0, 0)]),
            Ok(Value::Nil)
        );
        assert_eq!(
            ack.accept(vec![Value::Int(0), Value::Int(0), aof(0, 0)]),
            Ok(Value::Int(0))
        );
    }
}
