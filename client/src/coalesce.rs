//! One write per node for the commands of concurrent locks.
//!
//! Every lock of a client shares one connection per node, and each lock's
//! round sends its command on its own. The connection writes whatever is
//! queued when its writer runs, and on a multi-threaded runtime the writer
//! usually runs as soon as the first command arrives: one `writev` per
//! command per node, the client's largest cost (the kernel's loopback
//! path). Here, while other commands to the node are on their way, a
//! command goes through a queue; its task, woken by the first one, yields
//! once so that the other locks woken in the same turn (by the replies of
//! one read) queue theirs, then sends everything queued as one pipeline:
//! one write, and replies that come back together. A command with nothing
//! else on its way (one lock at a time) is sent at once, without the hop.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::ConnectionLike;
use redis::{Cmd, Value};
use tokio::sync::{mpsc, oneshot};

use crate::node_error::NodeError;

/// The most commands one write carries.
const MAX_BATCH: usize = 256;

type Reply = Result<Value, NodeError>;

struct Request {
    cmd: Cmd,
    reply: oneshot::Sender<Reply>,
}

/// The queue in front of one node's shared connection.
pub(crate) struct Coalescer<C> {
    queue: mpsc::UnboundedSender<Request>,
    conn: C,
    error: fn(redis::RedisError) -> NodeError,
    /// Commands sent and not answered yet (or given up on).
    on_the_way: Arc<AtomicUsize>,
}

/// Counts a command as on its way until it is answered or dropped.
struct OnTheWay(Arc<AtomicUsize>);

impl Drop for OnTheWay {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<C> Coalescer<C>
where
    C: ConnectionLike + Clone + Send + 'static,
{
    /// Starts the queue's task on the current runtime; it ends when the
    /// handle is dropped. `error` turns a connection error into a node's.
    pub fn start(conn: C, error: fn(redis::RedisError) -> NodeError) -> Coalescer<C> {
        let (queue, requests) = mpsc::unbounded_channel();
        tokio::spawn(run(conn.clone(), requests, error));
        Coalescer {
            queue,
            conn,
            error,
            on_the_way: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Sends `cmd` (with whatever else is queued, if anything else is on
    /// its way) and waits for its reply.
    pub async fn send(&self, cmd: &Cmd) -> Reply {
        let others = self.on_the_way.fetch_add(1, Ordering::Relaxed);
        let _counted = OnTheWay(Arc::clone(&self.on_the_way));
        if others == 0 {
            return self
                .conn
                .clone()
                .req_packed_command(cmd)
                .await
                .map_err(self.error);
        }
        let (reply, answer) = oneshot::channel();
        let request = Request {
            cmd: cmd.clone(),
            reply,
        };
        if self.queue.send(request).is_err() {
            return Err(NodeError::Connection(
                "the node's connection task ended".into(),
            ));
        }
        answer.await.unwrap_or_else(|_| {
            Err(NodeError::Connection(
                "the node's connection task ended".into(),
            ))
        })
    }
}

async fn run<C>(
    conn: C,
    mut requests: mpsc::UnboundedReceiver<Request>,
    error: fn(redis::RedisError) -> NodeError,
) where
    C: ConnectionLike + Clone + Send + 'static,
{
    let mut in_flight = FuturesUnordered::new();
    loop {
        tokio::select! {
            biased;
            Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
            first = requests.recv() => {
                let Some(first) = first else { break };
                // Let the locks woken in the same turn queue their commands.
                tokio::task::yield_now().await;
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match requests.try_recv() {
                        Ok(request) => batch.push(request),
                        Err(_) => break,
                    }
                }
                in_flight.push(send_batch(conn.clone(), batch, error));
            }
        }
    }
    // The handles are gone; answer what is still on its way.
    while in_flight.next().await.is_some() {}
}

/// One write for `batch`; each request gets its own reply (an error reply
/// is that command's alone).
async fn send_batch<C: ConnectionLike>(
    mut conn: C,
    batch: Vec<Request>,
    error: fn(redis::RedisError) -> NodeError,
) {
    if let [_] = batch.as_slice() {
        let Some(Request { cmd, reply }) = batch.into_iter().next() else {
            return;
        };
        let _ = reply.send(conn.req_packed_command(&cmd).await.map_err(error));
        return;
    }
    let count = batch.len();
    let mut pipe = redis::pipe();
    let mut replies = Vec::with_capacity(count);
    for Request { cmd, reply } in batch {
        pipe.add_command(cmd);
        replies.push(reply);
    }
    match conn.req_packed_commands(&pipe, 0, count).await {
        Ok(values) if values.len() == count => {
            for (reply, value) in replies.into_iter().zip(values) {
                let _ = reply.send(Ok(value));
            }
        }
        Ok(values) => {
            let why = format!("{} replies to {count} commands", values.len());
            for reply in replies {
                let _ = reply.send(Err(NodeError::UnexpectedReply(why.clone())));
            }
        }
        Err(e) => {
            let e = error(e);
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}
