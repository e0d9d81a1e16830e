//! Single-node acquisition: one plain attempt, then a server-side wait
//! (`LOCK.ACQUIRE … WAIT`) on a connection of its own, ended by the acquire
//! deadline. When it times out or its caller is gone, that connection is
//! ended on the server (`CLIENT KILL ID … ADDR …`, sent on the shared
//! connection) and the wait undone on the shared connection after it; in
//! a cluster, cut on every master where it is named, and the wait undone
//! on it (behind the wait, wherever that still runs).

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::acquire::Patience;
use crate::error::{Error, NodeError, Result};
use crate::handle::{answers, Grant, LockCore, OpGuard};
use crate::outcome::{Acquired, NodeOutcome, Reply};
use crate::protocol;

impl LockCore {
    /// Single-node mode: one plain attempt, then (if the lock is busy and
    /// the caller is patient) a server-side wait with `WAIT`, which is
    /// granted in arrival order the moment the lock is free. There is no
    /// quorum to protect, so the node's failure is returned as such.
    ///
    /// The wait ends by the acquire deadline: the server waits for the time
    /// left minus one per-node timeout (the allowance for the reply). A wait
    /// whose reply does not come in time, or whose caller is gone, has its
    /// connection killed on the server through the shared connection, and
    /// is undone there after the kill: nothing sent on the waiting
    /// connection runs after that (no late grant, no stale undo), and the
    /// undo is ahead of the handle's next command. Such a wait (or a
    /// waiting connection whose connect the deadline cuts short; one cut by
    /// the node timeout is the node's failure) is `NotAcquired`, its
    /// outcome the timeout: the node said busy, and a late reply is a slow
    /// or loaded node, not a failed one.
    ///
    /// The kill names the waiting connection by its client id and its
    /// address (`CLIENT INFO` when it opened): ids restart from 1 in a
    /// restarted server, so an id alone could cut another application's
    /// connection there. Only a reply of 1 counts as ended, except for a
    /// waiting connection that failed, which is undone on the shared
    /// connection after the kill whatever it answered. If the kill does not
    /// cut a live one (refused, lost, or no such client there), the wait is
    /// not ended early: the server ends it by its own timeout, and it is
    /// undone on its own connection after it (awaited until then and one
    /// node timeout more). A connection that cannot be named (no
    /// `client|info` in the user's ACL, a unix socket, whose clients all
    /// share one address) is not waited on: the acquisition retries as
    /// with several nodes, until the same deadline.
    ///
    /// A cluster's waiting connection is a cluster connection of its own,
    /// named (id and address, `CLIENT INFO`) on each master it had when it
    /// opened. A wait given up has that connection cut on each of those
    /// masters (`CLIENT KILL ID … ADDR …` from the shared connection, by
    /// the master's address), so a wait on one of them ends at once, and
    /// is then undone on the waiting connection itself: routed by slot, the
    /// undo goes behind the wait if the wait still runs on a connection of
    /// it that was not named (a master it was redirected to that it did
    /// not know, a reconnect; that wait ends by its own timeout, as without
    /// the cut), and otherwise on a new connection to the slot's master,
    /// after the cut. It is awaited until the wait's server-side end and
    /// one node timeout more, then sent on the shared connection.
    ///
    /// Returns the operation lock unless an undo in the background took it.
    pub(crate) async fn acquire_single(
        &self,
        patience: Patience,
        gone: oneshot::Receiver<()>,
        op: OpGuard,
    ) -> (Result<Grant>, Option<OpGuard>) {
        let mut op = Some(op);
        let result = self.acquire_single_with(patience, gone, &mut op).await;
        (result, op)
    }

    async fn acquire_single_with(
        &self,
        patience: Patience,
        mut gone: oneshot::Receiver<()>,
        op: &mut Option<OpGuard>,
    ) -> Result<Grant> {
        let config = self.client().config();
        let started = Instant::now();
        let round = match self.attempt().await {
            Ok(grant) => return Ok(grant),
            Err(round) => round,
        };
        let busy = round.count(|r| matches!(r, Reply::Busy)) == 1;
        if !busy {
            return Err(single_node_failure(round.outcomes));
        }
        let deadline = started
            + patience
                .timeout(config)
                .unwrap_or_else(|| config.retry_budget());
        let not_acquired = |attempts, outcomes| Error::NotAcquired {
            attempts,
            elapsed: started.elapsed(),
            outcomes,
        };
        let Some(node) = self.client().nodes().first() else {
            return Err(Error::InvalidConfig("no nodes".into()));
        };
        let room = deadline.saturating_duration_since(Instant::now());
        // The reply allowance: one round, with its acknowledgements.
        let allowance = config.round_timeout();
        if !patience.patient() || room <= allowance {
            return Err(not_acquired(1, round.outcomes));
        }
        let outcome = |result| NodeOutcome {
            node: node.name().to_string(),
            result,
        };
        let connect_bound = config.node_timeout.min(room - allowance);
        // Whether the acquisition's deadline, not the node timeout, bounds
        // the connect: then a connect that times out is a wait that did not
        // succeed in time (the node said busy a moment ago); bounded by the
        // node timeout it is the node's failure.
        let cut_by_deadline = connect_bound < config.node_timeout;
        let mut conn = match node.open_waiting(connect_bound).await {
            Ok(conn) => conn,
            Err(error @ crate::error::NodeError::Timeout(_)) if cut_by_deadline => {
                return Err(not_acquired(1, vec![outcome(Err(error))]));
            }
            Err(error) => {
                crate::metrics::node_error(node.name(), &error);
                return Err(single_node_failure(vec![outcome(Err(error))]));
            }
        };
        if !conn.named() && !conn.in_cluster() {
            // A wait that could not be ended from outside if given up (no
            // `client|info` in the user's ACL, a unix socket) would hold
            // the handle's order hostage to its connection: retry instead,
            // as with several nodes, until the same deadline.
            drop(conn);
            return self.acquire_quorum_since(patience, gone, started).await;
        }
        // The timer starts once the connection is there.
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(allowance);
        if wait.is_zero() {
            return Err(not_acquired(1, round.outcomes));
        }
        let cmd = protocol::acquire(
            self.resource(),
            self.owner(),
            self.ttl(),
            self.kind(),
            Some(wait),
        );
        let sent = Instant::now();
        let reply = tokio::select! {
            reply = tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), conn.send(&cmd, config.acknowledge.as_ref())) => match reply {
                Ok(reply) => Some(reply.and_then(protocol::parse_acquire)),
                Err(_) => None,
            },
            _ = &mut gone => None,
        };
        match reply {
            Some(Ok(Reply::Granted { token })) => {
                let grant = self
                    .granted_after_wait(
                        outcome(Ok(Reply::Granted { token })),
                        token,
                        sent,
                        deadline,
                    )
                    .await;
                if grant.is_err() {
                    self.release_everywhere().await;
                }
                grant
            }
            Some(Ok(reply)) => Err(not_acquired(2, vec![outcome(Ok(reply))])),
            other => {
                // No answer in time (or the caller left): the wait may
                // still be granted, and what the waiting connection sent
                // may still be on its way. End that connection on the
                // server from the shared one, then undo on the shared one,
                // in order: once the server has dropped the waiting client
                // nothing sent on it runs any more (neither the wait nor
                // anything after it), so the undo comes after every grant
                // it could make and before the handle's next command. In
                // the background, so that this returns by the deadline;
                // the undo keeps the operation lock until it is done.
                //
                // A server's waiting connection that failed (its server
                // restarted or dropped it, or only our end saw it break) is
                // killed too, so that a server still holding it runs
                // nothing of it after the undo; then undone on the shared
                // connection, whatever the kill answered (nothing can be
                // sent on it). A cluster connection that failed may have
                // sent the wait again on a new connection: it is undone on
                // it as below.
                let failed = conn.named() && matches!(other, Some(Err(NodeError::Connection(_))));
                // A cluster connection whose wait failed is not cut: the
                // cluster connection already gave it up.
                let cut_in_cluster = conn.in_cluster() && !matches!(other, Some(Err(_)));
                let kill = conn.kill_command();
                let release = protocol::release(self.resource(), self.owner(), true);
                let timeout = config.node_timeout;
                // When the server ends the wait by itself.
                let wait_ends = sent + wait;
                let op = op.take();
                let mut shared = node.shared();
                tokio::spawn(async move {
                    // Cut: 1, the waiting connection itself (its id and
                    // address). 0 is no such client there: for a live
                    // connection, the shared one reached another server
                    // process than the wait (a restart it has not seen
                    // yet): not known ended there.
                    let killed = match kill {
                        Some(kill) => matches!(
                            tokio::time::timeout(timeout, shared.send(&kill)).await,
                            Ok(Ok(redis::Value::Int(1)))
                        ),
                        None => false,
                    };
                    if killed || failed {
                        drop(conn);
                        let _ = tokio::time::timeout(timeout, shared.send(&release)).await;
                        drop(op);
                        return;
                    }
                    // A cluster's waiting connection: cut on every master
                    // where it is named. Whatever that answers, the undo
                    // goes on the waiting connection below: routed by
                    // slot, it reaches the slot's master on a new
                    // connection if the wait's was cut, and otherwise goes
                    // behind the wait on the connection it still runs on
                    // (one opened after the naming: a master it was
                    // redirected to that it did not know, a reconnect).
                    if cut_in_cluster {
                        shared.kill_on_masters(&conn, timeout).await;
                    }
                    // Not ended (the kill refused, lost or answered 0; a
                    // cluster's waiting connection): undo on the waiting
                    // connection, after the wait there, which the server
                    // ends by its own timeout unless it was cut; its reply
                    // is awaited until then and one node timeout more.
                    let bound = wait_ends
                        .saturating_duration_since(Instant::now())
                        .saturating_add(timeout);
                    let undone = tokio::time::timeout(bound, conn.send(&release, None)).await;
                    if !matches!(undone, Ok(Ok(_))) {
                        // The waiting connection broke (its wait ended with
                        // it) or is held up past the wait's end: closed, and
                        // a grant made before that is released here.
                        drop(conn);
                        let _ = tokio::time::timeout(timeout, shared.send(&release)).await;
                    }
                    drop(op);
                });
                match other {
                    // The waiting connection failed: the node's failure.
                    Some(Err(error)) => {
                        crate::metrics::node_error(node.name(), &error);
                        Err(single_node_failure(vec![outcome(Err(error))]))
                    }
                    // No answer by the deadline: the node said busy and the
                    // wait ran out (a wait's timeout reply that comes late on
                    // a loaded machine or a paused node): not acquired, as
                    // with N nodes, not a node failure.
                    _ => Err(not_acquired(
                        2,
                        vec![outcome(Err(crate::error::NodeError::Timeout(
                            sent.elapsed(),
                        )))],
                    )),
                }
            }
        }
    }

    /// A grant after waiting started somewhere between sending and the
    /// reply. Sending time is a safe lower bound for the lease start; when
    /// the wait was long that bound is poor, so the lease is renewed once
    /// to measure it again from now, if that round fits before the deadline.
    async fn granted_after_wait(
        &self,
        outcome: NodeOutcome,
        token: u64,
        sent: Instant,
        deadline: Instant,
    ) -> Result<Grant> {
        let config = self.client().config();
        let drift = self.drift(self.ttl());
        let mut ledger = self.new_ledger();
        ledger.apply(
            sent,
            self.ttl(),
            drift,
            &[crate::ledger::Answer::Holds(Some(token))],
        );
        let mut outcomes = vec![outcome];
        if sent.elapsed() > config.node_timeout
            && Instant::now() + config.round_timeout() <= deadline
        {
            let cmd = protocol::extend(self.resource(), self.owner(), self.ttl());
            let round = self.round(&cmd, protocol::parse_extend).await;
            ledger.apply(round.started, self.ttl(), drift, &answers(&round));
            outcomes = round.outcomes;
        }
        let validity = ledger.validity(1);
        let Some(validity) = validity else {
            return Err(Error::NotAcquired {
                attempts: 2,
                elapsed: sent.elapsed(),
                outcomes,
            });
        };
        Ok(Grant {
            ledger,
            max_granted: Some(token),
            acquired: Acquired {
                validity,
                holds: 1,
                attempts: 2,
                outcomes,
            },
        })
    }
}

fn single_node_failure(outcomes: Vec<NodeOutcome>) -> Error {
    match outcomes.into_iter().next() {
        Some(NodeOutcome {
            node,
            result: Err(error),
        }) => Error::Node { node, error },
        Some(outcome) => Error::NotAcquired {
            attempts: 1,
            elapsed: Duration::ZERO,
            outcomes: vec![outcome],
        },
        None => Error::InvalidConfig("no nodes".into()),
    }
}
