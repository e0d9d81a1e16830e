//! Sending one command to every node at once.
//!
//! All commands leave before any reply is awaited, so a round costs the
//! slowest node's round trip (at most the per-node timeout), not the sum of
//! them: the shorter the round, the smaller the window in which two
//! contending clients can split the nodes between them.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::{Cmd, Value};

use crate::error::NodeError;
use crate::node::Node;
use crate::outcome::{NodeOutcome, Reply, Round};

/// Sends `cmd` to every node in parallel, each bounded by `timeout`, and
/// reads each reply with `parse`.
pub(crate) async fn round(
    nodes: &[Node],
    cmd: &Cmd,
    timeout: Duration,
    parse: fn(Value) -> Result<Reply, NodeError>,
) -> Round {
    let start = Instant::now();
    let calls = nodes.iter().map(|node| async move {
        let result = node.call(cmd, timeout).await.and_then(parse);
        NodeOutcome {
            node: node.name().to_string(),
            result,
        }
    });
    let outcomes = join_all(calls).await;
    Round {
        outcomes,
        started: start,
        elapsed: start.elapsed(),
    }
}
