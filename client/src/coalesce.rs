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

    /// Commands counted as on their way now (for the unit tests).
    #[cfg(test)]
    fn on_the_way(&self) -> usize {
        self.on_the_way.load(Ordering::Acquire)
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

/// The queue on a connection of the test's own that records each command
/// when it takes it (the moment a real connection would queue it for
/// writing) and answers only once the test opens its gate: no network, and
/// every step decided by the test on a single-threaded runtime.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::future::Future;
    use std::pin::{pin, Pin};
    use std::sync::{Arc, Mutex};
    use std::task::Poll;

    use redis::aio::ConnectionLike;
    use redis::{Cmd, RedisFuture, Value};
    use tokio::sync::watch;

    use super::Coalescer;
    use crate::node_error::NodeError;

    #[derive(Clone)]
    struct Recorder {
        /// The commands taken, by their one argument, in order.
        taken: Arc<Mutex<Vec<String>>>,
        /// Replies wait until this is true.
        open: watch::Receiver<bool>,
    }

    fn name(cmd: &Cmd) -> String {
        match cmd.args_iter().nth(1) {
            Some(redis::Arg::Simple(arg)) => String::from_utf8_lossy(arg).into_owned(),
            _ => String::new(),
        }
    }

    impl ConnectionLike for Recorder {
        fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
            let taken = Arc::clone(&self.taken);
            let mut open = self.open.clone();
            Box::pin(async move {
                taken.lock().unwrap().push(name(cmd));
                let _ = open.wait_for(|open| *open).await;
                Ok(Value::Okay)
            })
        }

        fn req_packed_commands<'a>(
            &'a mut self,
            pipe: &'a redis::Pipeline,
            _offset: usize,
            count: usize,
        ) -> RedisFuture<'a, Vec<Value>> {
            let taken = Arc::clone(&self.taken);
            let mut open = self.open.clone();
            Box::pin(async move {
                taken.lock().unwrap().extend(pipe.cmd_iter().map(name));
                let _ = open.wait_for(|open| *open).await;
                Ok(vec![Value::Okay; count])
            })
        }

        fn get_db(&self) -> i64 {
            0
        }
    }

    fn error(error: redis::RedisError) -> NodeError {
        NodeError::Connection(error.to_string())
    }

    struct Setup {
        queue: Coalescer<Recorder>,
        taken: Arc<Mutex<Vec<String>>>,
        gate: watch::Sender<bool>,
    }

    impl Setup {
        fn start() -> Setup {
            let (gate, open) = watch::channel(false);
            let taken = Arc::new(Mutex::new(Vec::new()));
            let conn = Recorder {
                taken: Arc::clone(&taken),
                open,
            };
            Setup {
                queue: Coalescer::start(conn, error),
                taken,
                gate,
            }
        }

        fn taken(&self) -> Vec<String> {
            self.taken.lock().unwrap().clone()
        }
    }

    fn cmd(name: &str) -> Cmd {
        let mut cmd = redis::cmd("CMD");
        cmd.arg(name);
        cmd
    }

    /// Polls `future` once: the step a caller takes before it waits.
    async fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
        let mut future = Some(future);
        std::future::poll_fn(|cx| {
            let future = future.take().expect("polled once");
            Poll::Ready(future.poll(cx))
        })
        .await
    }

    /// Lets the queue's task run until it has nothing left to do.
    async fn settle() {
        for _ in 0..64 {
            tokio::task::yield_now().await;
        }
    }

    /// A command queued behind another, whose caller is gone before the
    /// queue's task takes it, is never sent; while the task has not dropped
    /// it, it counts as on its way, so the same caller's next command takes
    /// the queue behind it instead of the direct path.
    #[tokio::test(flavor = "current_thread")]
    async fn a_queued_command_whose_caller_is_gone_is_never_sent() {
        let setup = Setup::start();
        let a = cmd("a");
        let mut first = pin!(setup.queue.send(&a));
        assert!(poll_once(first.as_mut()).await.is_pending());
        // Nothing else on its way: the direct path, taken at once.
        assert_eq!(setup.taken(), ["a"]);
        assert_eq!(setup.queue.on_the_way(), 1);

        let b = cmd("b");
        let mut second = Box::pin(setup.queue.send(&b));
        assert!(poll_once(second.as_mut()).await.is_pending());
        assert_eq!(
            setup.taken(),
            ["a"],
            "a command behind another was not queued"
        );
        assert_eq!(setup.queue.on_the_way(), 2);
        drop(second);
        // Still queued: it counts until the task drops it.
        assert_eq!(setup.queue.on_the_way(), 2);

        let c = cmd("c");
        let mut third = pin!(setup.queue.send(&c));
        assert!(poll_once(third.as_mut()).await.is_pending());
        assert_eq!(
            setup.taken(),
            ["a"],
            "the next command overtook the queued one on the direct path"
        );
        assert_eq!(setup.queue.on_the_way(), 3);

        settle().await;
        assert_eq!(
            setup.taken(),
            ["a", "c"],
            "a command whose caller was gone was sent"
        );
        assert_eq!(setup.queue.on_the_way(), 2);
        setup.gate.send(true).unwrap();
        assert!(matches!(first.await, Ok(Value::Okay)));
        assert!(matches!(third.await, Ok(Value::Okay)));
        assert_eq!(setup.queue.on_the_way(), 0);
        settle().await;
        assert_eq!(setup.taken(), ["a", "c"]);
    }

    /// A queued command the connection took counts as on its way until it
    /// is answered, or until the task drops it once its caller is gone; a
    /// direct one until its caller's future is dropped.
    #[tokio::test(flavor = "current_thread")]
    async fn the_count_lasts_as_long_as_the_request() {
        let setup = Setup::start();
        let x = cmd("x");
        let mut direct = Box::pin(setup.queue.send(&x));
        assert!(poll_once(direct.as_mut()).await.is_pending());
        let q = cmd("q");
        let mut queued = Box::pin(setup.queue.send(&q));
        assert!(poll_once(queued.as_mut()).await.is_pending());
        settle().await;
        assert_eq!(setup.taken(), ["x", "q"]);
        assert_eq!(setup.queue.on_the_way(), 2);
        // Its caller gone, the taken request counts until the task drops it.
        drop(queued);
        assert_eq!(setup.queue.on_the_way(), 2);
        settle().await;
        assert_eq!(setup.queue.on_the_way(), 1);
        drop(direct);
        assert_eq!(setup.queue.on_the_way(), 0);

        // Answered: counted until the answer.
        let y = cmd("y");
        let z = cmd("z");
        let mut direct = Box::pin(setup.queue.send(&y));
        assert!(poll_once(direct.as_mut()).await.is_pending());
        let mut queued = Box::pin(setup.queue.send(&z));
        assert!(poll_once(queued.as_mut()).await.is_pending());
        settle().await;
        assert_eq!(setup.queue.on_the_way(), 2);
        setup.gate.send(true).unwrap();
        assert!(matches!(queued.await, Ok(Value::Okay)));
        assert_eq!(setup.queue.on_the_way(), 1);
        assert!(matches!(direct.await, Ok(Value::Okay)));
        assert_eq!(setup.queue.on_the_way(), 0);
    }

    /// One caller's commands, each given up after a different number of
    /// steps while another caller keeps the queue in use, reach the
    /// connection in the order they were issued, each only while its
    /// caller waited for it (or never).
    #[tokio::test(flavor = "current_thread")]
    async fn one_callers_commands_keep_their_order() {
        let setup = Setup::start();
        let names: Vec<String> = (0..48).map(|k| format!("h{k:02}")).collect();
        let commands: Vec<Cmd> = names.iter().map(|name| cmd(name)).collect();
        let other_names: Vec<String> = (0..48).map(|k| format!("o{k:02}")).collect();
        let other_commands: Vec<Cmd> = other_names.iter().map(|name| cmd(name)).collect();
        let mut others = Vec::new();
        // For each of the caller's commands, how many commands had been
        // taken when its caller gave up.
        let mut given_up = Vec::new();
        for (k, command) in commands.iter().enumerate() {
            if k % 3 == 0 {
                // Another caller's command on its way (kept, never answered).
                let mut other = Box::pin(setup.queue.send(&other_commands[k]));
                assert!(poll_once(other.as_mut()).await.is_pending());
                others.push(other);
            }
            if k % 5 == 0 && !others.is_empty() {
                // ... and one of them gives up.
                drop(others.remove(0));
            }
            let mut mine = Box::pin(setup.queue.send(command));
            assert!(poll_once(mine.as_mut()).await.is_pending());
            match k % 4 {
                0 => {}
                1 => tokio::task::yield_now().await,
                2 => settle().await,
                _ => {
                    tokio::task::yield_now().await;
                    tokio::task::yield_now().await;
                }
            }
            drop(mine);
            given_up.push(setup.taken().len());
        }
        settle().await;
        let taken = setup.taken();
        let mine: Vec<(usize, usize)> = taken
            .iter()
            .enumerate()
            .filter_map(|(at, name)| Some((at, names.iter().position(|n| n == name)?)))
            .collect();
        assert!(
            mine.windows(2).all(|pair| pair[0].1 < pair[1].1),
            "one caller's commands out of order: {taken:?}"
        );
        for (at, k) in &mine {
            assert!(
                *at < given_up[*k],
                "{} was taken after its caller gave up: {taken:?}",
                names[*k]
            );
        }
        // Some went on, some were dropped: the test covers both.
        assert!(!mine.is_empty() && mine.len() < names.len(), "{taken:?}");
    }
}
