//! Sending one command to every node at once.
//!
//! All commands leave before any reply is awaited, so a round costs the
//! slowest node's round trip (at most the per-node timeout), not the sum of
//! them: the shorter the round, the smaller the window in which two
//! contending clients can split the nodes between them.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_util::future::{maybe_done, poll_fn, MaybeDone};
use redis::{Cmd, Value};

use crate::acknowledge::Acknowledge;
use crate::node::Node;
use crate::node_error::NodeError;
use crate::outcome::{NodeOutcome, Reply, Round};

/// Sends `cmd` to every node in parallel, each bounded by `timeout`, and
/// reads each reply with `parse`. All nodes share one timer: a node that has
/// not answered when it fires is a timeout (a timer per node call was the
/// client's largest cost after the socket writes).
pub(crate) async fn round(
    nodes: &[Node],
    cmd: &Cmd,
    timeout: Duration,
    parse: fn(Value) -> Result<Reply, NodeError>,
    ack: Option<&Acknowledge>,
) -> Round {
    let start = Instant::now();
    let mut calls: Vec<Pin<Box<MaybeDone<_>>>> = nodes
        .iter()
        .map(|node| Box::pin(maybe_done(node.send(cmd, ack))))
        .collect();
    let all_answered = poll_fn(|cx| {
        let mut waiting = false;
        for call in &mut calls {
            waiting |= call.as_mut().poll(cx).is_pending();
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    });
    // Either way the calls that finished keep their output; the rest are
    // dropped (their replies, if they come, are discarded by the connection).
    let _ = tokio::time::timeout(timeout, all_answered).await;
    let outcomes = nodes
        .iter()
        .zip(&mut calls)
        .map(|(node, call)| NodeOutcome {
            node: node.name().to_string(),
            result: call
                .as_mut()
                .take_output()
                .unwrap_or(Err(NodeError::Timeout(timeout)))
                .and_then(parse),
        })
        .collect::<Vec<_>>();
    crate::metrics::node_errors(&outcomes);
    Round {
        outcomes,
        started: start,
    }
}
