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
//! one read) queue theirs, then hands everything queued to the connection
//! in one go: its writer finds them queued together (one write, or a few
//! when it starts before the last is handed over), and the replies come
//! back together. A command with nothing else on its way (one lock at a
//! time) is sent at once, without the hop.
//!
//! A command reaches the connection only while its caller waits for it,
//! or never: the queue's task passes each command on as a request of its
//! own, checks before every step that its caller is still there, and drops
//! it the moment the caller is gone. A dropped request that the connection
//! had not taken yet (held while it reconnects, say) is never written; one
//! it had taken is ahead of anything sent later, in the connection's own
//! order. A lock handle sends its next command to a node only after the
//! caller of its previous one there stopped waiting (one operation at a
//! time, one round at a time), so the previous one is either ahead of it
//! or never sent: commands of a handle reach the node in the order it
//! issued them. For that a queued command counts as on its way until the
//! task has dropped it, not until its caller gave up: while it counts, the
//! handle's next command takes the queue too, behind it, instead of racing
//! it to the connection on the direct path.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::aio::ConnectionLike;
use redis::{Cmd, Value};
use tokio::sync::{mpsc, oneshot};

use crate::node_error::NodeError;

/// The most commands one write carries.
pub(crate) const MAX_BATCH: usize = 256;

type Reply = Result<Value, NodeError>;

/// A queued command, or a pipeline of commands that go together (a
/// command and its acknowledgements).
enum Packed {
    One(Cmd),
    Many(redis::Pipeline, usize),
}

struct Request {
    packed: Packed,
    reply: oneshot::Sender<Reply>,
    /// Counted as on its way until answered or dropped by the task.
    _counted: OnTheWay,
}

/// The queue in front of one node's shared connection.
pub(crate) struct Coalescer<C> {
    queue: mpsc::UnboundedSender<Request>,
    conn: C,
    error: fn(redis::RedisError) -> NodeError,
    /// Commands sent and not answered yet (nor dropped).
    on_the_way: Arc<AtomicUsize>,
}

/// Counts a command as on its way until it is answered or dropped.
struct OnTheWay(Arc<AtomicUsize>);

impl Drop for OnTheWay {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
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
        let mut conn = self.conn.clone();
        self.route(async move { conn.req_packed_command(cmd).await }, || {
            Packed::One(cmd.clone())
        })
        .await
    }

    /// Sends `pipe` (its `count` commands in one write) the same way, and
    /// waits for their replies.
    pub async fn send_pipeline(
        &self,
        pipe: &redis::Pipeline,
        count: usize,
    ) -> Result<Vec<Value>, NodeError> {
        let mut conn = self.conn.clone();
        let reply = self
            .route(
                async move {
                    conn.req_packed_commands(pipe, 0, count)
                        .await
                        .map(Value::Array)
                },
                || Packed::Many(pipe.clone(), count),
            )
            .await?;
        match reply {
            Value::Array(values) => Ok(values),
            other => Err(NodeError::UnexpectedReply(format!(
                "{other:?} for a pipeline"
            ))),
        }
    }

    /// `direct` at once when nothing else is on its way, else `queued()`
    /// through the queue.
    async fn route(
        &self,
        direct: impl std::future::Future<Output = redis::RedisResult<Value>>,
        queued: impl FnOnce() -> Packed,
    ) -> Reply {
        let others = self.on_the_way.fetch_add(1, Ordering::AcqRel);
        let counted = OnTheWay(Arc::clone(&self.on_the_way));
        if others == 0 {
            // The caller's own request: dropped with its future.
            let reply = direct.await.map_err(self.error);
            drop(counted);
            return reply;
        }
        let (reply, answer) = oneshot::channel();
        let request = Request {
            packed: queued(),
            reply,
            _counted: counted,
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
                // All of them reach the connection in the next poll of
                // `in_flight`, one after the other: its writer finds them
                // queued together.
                for request in batch {
                    if !request.reply.is_closed() {
                        in_flight.push(send_one(conn.clone(), request, error));
                    }
                }
            }
        }
    }
    // The handles are gone; answer what is still on its way.
    while in_flight.next().await.is_some() {}
}

/// One request on the connection, dropped (unsent if not yet written) the
/// moment its caller stops waiting.
async fn send_one<C: ConnectionLike>(
    mut conn: C,
    request: Request,
    error: fn(redis::RedisError) -> NodeError,
) {
    let Request {
        packed,
        mut reply,
        _counted,
    } = request;
    let send = async {
        match &packed {
            Packed::One(cmd) => conn.req_packed_command(cmd).await,
            Packed::Many(pipe, count) => conn
                .req_packed_commands(pipe, 0, *count)
                .await
                .map(Value::Array),
        }
    };
    // The caller first: once it is gone, the command is not polled again.
    let answer = tokio::select! {
        biased;
        () = reply.closed() => return,
        answer = send => answer.map_err(error),
    };
    let _ = reply.send(answer);
}
