//! One lock node: its address, its shared reconnecting connection, and
//! command calls bounded by a timeout.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::{AsyncConnectionConfig, Cmd, Value};

use crate::acknowledge::Acknowledge;
use crate::coalesce::{Coalescer, MAX_BATCH};
use crate::error::{Error, NodeError, Result};

/// Something that names a node: a `redis://` URL or a ready-made
/// [`redis::Client`] (for TLS, authentication or RESP3 settings).
pub trait IntoClient {
    fn into_client(self) -> Result<redis::Client>;
}

impl IntoClient for redis::Client {
    fn into_client(self) -> Result<redis::Client> {
        Ok(self)
    }
}

fn is_tls_url(url: &str) -> bool {
    url.starts_with("rediss://") || url.starts_with("valkeys://")
}

/// The TLS certificates of a cluster's connections ([`crate::Tls`]'s, with
/// the `tls` feature); the default trusts the system's roots.
#[derive(Default)]
pub(crate) struct ClusterTls {
    #[cfg(feature = "tls")]
    pub certificates: Option<redis::TlsCertificates>,
}

impl IntoClient for &str {
    fn into_client(self) -> Result<redis::Client> {
        let tls = is_tls_url(self);
        #[cfg(feature = "tls")]
        if tls {
            crate::crypto::ensure_provider();
        }
        #[cfg(not(feature = "tls"))]
        if tls {
            return Err(Error::InvalidConfig(format!(
                "node URL {self:?}: TLS needs redis-lock-client's `tls` feature"
            )));
        }
        redis::Client::open(self)
            .map_err(|e| Error::InvalidConfig(format!("node URL {self:?}: {e}")))
    }
}

impl IntoClient for String {
    fn into_client(self) -> Result<redis::Client> {
        self.as_str().into_client()
    }
}

impl IntoClient for &String {
    fn into_client(self) -> Result<redis::Client> {
        self.as_str().into_client()
    }
}

/// Where a node's connections go: one server, or a Redis Cluster that acts
/// as one logical node (each lock goes to the shard that serves its key).
/// One per node, so the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Target {
    Server(redis::Client),
    Cluster(ClusterClient),
}

/// A connection of the node.
#[derive(Clone)]
enum Conn {
    /// The node's shared, reconnecting connection to its server.
    Server(ConnectionManager),
    /// The cluster's connection: routes by key, follows `MOVED`/`ASK`,
    /// retries `TRYAGAIN`.
    Cluster(ClusterConnection),
    /// A connection of its own to a server (for one blocking command).
    Own(MultiplexedConnection),
}

impl Conn {
    async fn send(&mut self, cmd: &Cmd, ack: Option<&Acknowledge>) -> Result<Value, NodeError> {
        match self {
            Conn::Server(conn) => send_on(conn, cmd, ack).await,
            Conn::Cluster(conn) => send_on(conn, cmd, ack).await,
            Conn::Own(conn) => send_on(conn, cmd, ack).await,
        }
    }
}

/// A node with one multiplexed connection that every lock of the client
/// shares (commands from concurrent locks are pipelined on it).
pub(crate) struct Node {
    name: String,
    target: Target,
    conn: Conn,
    /// Hands the commands of concurrent locks to the connection together,
    /// each only while its caller waits (a server's shared connection; a
    /// cluster's connection routes each command itself).
    coalescer: Option<Arc<Coalescer<ConnectionManager>>>,
}

impl Node {
    /// Sets up the node's connection without waiting for it: a node that is
    /// down now is a failed node in each round, not a construction error.
    /// Must run inside a tokio runtime (the connection's tasks live there).
    pub fn new(client: redis::Client, node_timeout: Duration) -> Result<Node> {
        let name = client.get_connection_info().addr().to_string();
        // Replies are bounded by our own per-call timeout, so the manager
        // needs none (a WAIT call legitimately takes long). Reconnection is
        // kept short and retried on the next command, so that a node that
        // comes back is used again within a round or two.
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(connect_timeout(node_timeout)))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100))
            // Room for a whole batch of the queue's requests (and direct
            // ones beside it) in the connection's channel without waiting.
            .set_pipeline_buffer_size(MAX_BATCH * 2);
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| Error::InvalidConfig(format!("node {name}: {e}")))?;
        // Connect in the background now, so the first lock round does not
        // pay the connection set-up inside its per-node timeout.
        let mut warm = conn.clone();
        tokio::spawn(async move {
            let _ = warm.send_packed_command(&redis::cmd("PING")).await;
        });
        Ok(Node {
            name,
            target: Target::Server(client),
            coalescer: Some(Arc::new(Coalescer::start(conn.clone(), node_error))),
            conn: Conn::Server(conn),
        })
    }

    /// A Redis Cluster, reached through `seeds` (any of its nodes), as one
    /// logical node. Connects in the background, like [`Node::new`].
    pub fn cluster(seeds: Vec<String>, node_timeout: Duration, tls: ClusterTls) -> Result<Node> {
        let name = format!("cluster({})", seeds.join(","));
        if seeds.iter().any(|seed| is_tls_url(seed)) {
            #[cfg(feature = "tls")]
            crate::crypto::ensure_provider();
            #[cfg(not(feature = "tls"))]
            return Err(Error::InvalidConfig(format!(
                "{name}: TLS needs redis-lock-client's `tls` feature"
            )));
        }
        #[allow(unused_mut)]
        let mut builder = ClusterClient::builder(seeds.iter().map(String::as_str))
            .connection_timeout(connect_timeout(node_timeout));
        #[cfg(feature = "tls")]
        if let Some(certificates) = tls.certificates {
            builder = builder.certs(certificates);
        }
        #[cfg(not(feature = "tls"))]
        let ClusterTls {} = tls;
        let client = builder
            .build()
            .map_err(|e| Error::InvalidConfig(format!("{name}: {e}")))?;
        let conn = client.get_pending_async_connection_with_config(
            ClusterConfig::new().set_connection_timeout(connect_timeout(node_timeout)),
        );
        Ok(Node {
            name,
            target: Target::Cluster(client),
            conn: Conn::Cluster(conn),
            coalescer: None,
        })
    }

    /// With a cluster: `cmd` (a command that touches no key) to every
    /// master that serves slots, as the cluster connection knows them, all at
    /// once and within `timeout`; each master's reply (an error reply as
    /// [`Value::ServerError`]) by its address. `None` for a single server.
    /// An error when no per-master answer came: the time ran out, or a
    /// master could not be reached (the cluster connection then fails the
    /// whole call).
    pub async fn to_every_master(
        &self,
        cmd: Cmd,
        timeout: Duration,
    ) -> Option<Result<Vec<(String, Value)>, NodeError>> {
        let Conn::Cluster(conn) = &self.conn else {
            return None;
        };
        let mut conn = conn.clone();
        let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        let replies = match tokio::time::timeout(timeout, conn.route_command(cmd, routing)).await {
            Ok(Ok(Value::Map(replies))) => replies,
            Ok(Ok(other)) => {
                return Some(Err(NodeError::UnexpectedReply(format!(
                    "not one reply per master: {other:?}"
                ))))
            }
            Ok(Err(error)) => return Some(Err(node_error(error))),
            Err(_) => return Some(Err(NodeError::Timeout(timeout))),
        };
        Some(Ok(replies
            .into_iter()
            .map(|(address, reply)| {
                let address = match address {
                    Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                    other => format!("{other:?}"),
                };
                (address, reply)
            })
            .collect()))
    }

    /// `host:port` (or `cluster(seeds)`), used in every report.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sends `cmd` on the shared connection and waits at most `timeout`.
    pub async fn call(&self, cmd: &Cmd, timeout: Duration) -> Result<Value, NodeError> {
        match tokio::time::timeout(timeout, self.send(cmd, None)).await {
            Ok(result) => result,
            Err(_) => Err(NodeError::Timeout(timeout)),
        }
    }

    /// Sends `cmd` (and the acknowledgements `ack` asks for, in the same
    /// write) on the shared connection with no time bound of its own: the
    /// caller bounds it (a round bounds all its nodes with one timer).
    pub async fn send(&self, cmd: &Cmd, ack: Option<&Acknowledge>) -> Result<Value, NodeError> {
        match (&self.coalescer, ack) {
            (Some(coalescer), None) => coalescer.send(cmd).await,
            // Through the queue's count too, so that it keeps its order
            // with the queued commands (see `coalesce.rs`).
            (Some(coalescer), Some(ack)) => {
                let (pipe, count) = with_acknowledgements(cmd, ack);
                ack.accept(coalescer.send_pipeline(&pipe, count).await?)
            }
            (None, _) => self.conn.clone().send(cmd, ack).await,
        }
    }

    /// Opens a connection of its own for a command that blocks on the
    /// server (`LOCK.ACQUIRE … WAIT`), within `timeout`, and learns its
    /// client id and address there (`CLIENT INFO`): Redis serves a blocked
    /// client's later commands only once it is unblocked, so on the shared
    /// connection the wait would stall every other lock of this client. The
    /// caller's timer for the wait starts after this returns.
    ///
    /// In a cluster it is a cluster connection of its own, which has a
    /// connection to every master; its id and address on each master are
    /// asked with one `CLIENT INFO` to every master (the replies name the
    /// master, where a command routed by slot does not say which node
    /// answered), so that the wait can be ended on whichever of those
    /// masters it runs, including one a `MOVED`/`ASK` or a `TRYAGAIN` retry
    /// sends it to. A master that refuses or does not answer within
    /// `timeout`, or a connection the cluster connection opens later (a
    /// master it did not know, a reconnect), is not named: a wait there is
    /// not ended early.
    pub async fn open_waiting(&self, timeout: Duration) -> Result<WaitingConn, NodeError> {
        let until = tokio::time::Instant::now() + timeout;
        let open = async {
            match &self.target {
                Target::Server(client) => {
                    let config = AsyncConnectionConfig::new()
                        .set_response_timeout(None)
                        .set_connection_timeout(Some(timeout));
                    let mut conn = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?;
                    let id = match conn
                        .send_packed_command(redis::cmd("CLIENT").arg("INFO"))
                        .await
                    {
                        Ok(info) => WaitingId::read(&info),
                        // Refused (an ACL without `client|info`): not
                        // named, and the caller does not wait on it.
                        Err(error)
                            if matches!(
                                error.kind(),
                                redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
                            ) =>
                        {
                            None
                        }
                        Err(error) => return Err(error),
                    };
                    Ok::<_, redis::RedisError>(WaitingConn {
                        conn: Conn::Own(conn),
                        id,
                        masters: Vec::new(),
                    })
                }
                Target::Cluster(client) => {
                    let config = ClusterConfig::new().set_connection_timeout(timeout);
                    let conn = client.get_async_connection_with_config(config).await?;
                    Ok(WaitingConn {
                        conn: Conn::Cluster(conn),
                        id: None,
                        masters: Vec::new(),
                    })
                }
            }
        };
        let mut waiting = match tokio::time::timeout_at(until, open).await {
            Ok(Ok(conn)) => conn,
            // redis-rs's own connection timeout (the same `timeout`) usually
            // fires first: the same outcome as ours.
            Ok(Err(error)) if error.is_timeout() => return Err(NodeError::Timeout(timeout)),
            Ok(Err(error)) => return Err(node_error(error)),
            Err(_) => return Err(NodeError::Timeout(timeout)),
        };
        if let Conn::Cluster(conn) = &waiting.conn {
            let mut conn = conn.clone();
            let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let asked = conn.route_command(redis::cmd("CLIENT").arg("INFO").clone(), routing);
            if let Ok(Ok(Value::Map(replies))) = tokio::time::timeout_at(until, asked).await {
                waiting.masters = MasterId::read_all(replies);
            }
        }
        Ok(waiting)
    }

    /// A handle on the shared connection that outlives a borrow of the node
    /// (for work in the background).
    pub fn shared(&self) -> SharedConn {
        SharedConn {
            conn: self.conn.clone(),
            coalescer: self.coalescer.clone(),
        }
    }
}

/// How long setting up a connection may take: at least 250 ms, whatever
/// the per-node timeout.
fn connect_timeout(node_timeout: Duration) -> Duration {
    node_timeout.max(Duration::from_millis(250))
}

/// The node's shared connection, detached from the node.
pub(crate) struct SharedConn {
    conn: Conn,
    /// Its commands take the queue's count too (see [`Node::send`]).
    coalescer: Option<Arc<Coalescer<ConnectionManager>>>,
}

impl SharedConn {
    pub async fn send(&mut self, cmd: &Cmd) -> Result<Value, NodeError> {
        match &self.coalescer {
            Some(coalescer) => coalescer.send(cmd).await,
            None => self.conn.send(cmd, None).await,
        }
    }

    /// In a cluster: cuts `waiting`'s connection on every master where it
    /// is named ([`Node::open_waiting`]), with `CLIENT KILL ID <id> ADDR
    /// <addr>` sent to that master by its address, all at once and each
    /// within `timeout`. Returns how many masters answered 1 (that
    /// connection was there and is cut: nothing sent on it runs any more);
    /// 0 from a master is no such client there (gone, or the master is
    /// another process now, whose ids start from 1 again: the address keeps
    /// the id from naming another client there).
    pub async fn kill_on_masters(&self, waiting: &WaitingConn, timeout: Duration) -> usize {
        let Conn::Cluster(conn) = &self.conn else {
            return 0;
        };
        let kills = waiting.masters.iter().map(|master| {
            let mut conn = conn.clone();
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: master.host.clone(),
                port: master.port,
            });
            let kill = master.id.kill_command();
            async move {
                matches!(
                    tokio::time::timeout(timeout, conn.route_command(kill, routing)).await,
                    Ok(Ok(Value::Int(1)))
                )
            }
        });
        futures_util::future::join_all(kills)
            .await
            .into_iter()
            .filter(|killed| *killed)
            .count()
    }
}

/// A connection of its own for one blocking command. Commands sent on it
/// after the blocking one are served after it, in order.
pub(crate) struct WaitingConn {
    conn: Conn,
    /// On its server (a server's connection of its own).
    id: Option<WaitingId>,
    /// A cluster connection's: on each master it had when it opened.
    masters: Vec<MasterId>,
}

/// A cluster's waiting connection on one master: the master's address as
/// the cluster connection names it, and who the connection is there.
#[derive(Clone, Debug, PartialEq, Eq)]
struct MasterId {
    host: String,
    port: u16,
    id: WaitingId,
}

impl MasterId {
    /// Reads the replies of one `CLIENT INFO` to every master, by the
    /// master's address `host:port` (the last colon ends the host, which
    /// may be IPv6); a master whose reply is not a named connection (an
    /// error reply, a unix socket) or whose address does not parse is
    /// left out.
    fn read_all(replies: Vec<(Value, Value)>) -> Vec<MasterId> {
        replies
            .into_iter()
            .filter_map(|(address, info)| {
                let address = match address {
                    Value::BulkString(bytes) => String::from_utf8(bytes).ok()?,
                    Value::SimpleString(text) => text,
                    _ => return None,
                };
                let (host, port) = address.rsplit_once(':')?;
                Some(MasterId {
                    host: host.to_string(),
                    port: port.parse().ok()?,
                    id: WaitingId::read(&info)?,
                })
            })
            .collect()
    }
}

/// Who a waiting connection is on its server: its client id and the
/// address the server sees it from, as `CLIENT INFO` said. Ids are per
/// server process (a restarted server counts from 1 again), so the id alone
/// may name another client of a new process on the same address; the id
/// and the address together name this connection only (the address is its
/// own port, which no other connection has while this one is open).
#[derive(Clone, Debug, PartialEq, Eq)]
struct WaitingId {
    id: i64,
    addr: String,
}

impl WaitingId {
    /// `CLIENT KILL ID id ADDR addr`.
    fn kill_command(&self) -> Cmd {
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("KILL")
            .arg("ID")
            .arg(self.id)
            .arg("ADDR")
            .arg(&self.addr);
        cmd
    }

    /// Reads `id=` and `addr=` from a `CLIENT INFO` reply.
    fn read(info: &Value) -> Option<WaitingId> {
        let text = match info {
            Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?,
            Value::VerbatimString { text, .. } => text.as_str(),
            Value::SimpleString(text) => text.as_str(),
            _ => return None,
        };
        let field = |name: &str| {
            text.split_ascii_whitespace()
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        };
        let id = field("id")?.parse().ok()?;
        // A unix socket's clients all read `<path>:0`: no address of its
        // own, so not named.
        let addr = field("addr").filter(|addr| !addr.is_empty() && !addr.ends_with(":0"))?;
        Some(WaitingId {
            id,
            addr: addr.to_string(),
        })
    }
}

impl WaitingConn {
    /// Sends `cmd` (with the acknowledgements `ack` asks for) and waits for
    /// its reply, with no time bound of its own.
    pub async fn send(&mut self, cmd: &Cmd, ack: Option<&Acknowledge>) -> Result<Value, NodeError> {
        self.conn.send(cmd, ack).await
    }

    /// Whether the connection is named by its id and address (`CLIENT
    /// INFO` answered, over TCP), so that [`WaitingConn::kill_command`] can
    /// end it.
    pub fn named(&self) -> bool {
        self.id.is_some()
    }

    /// Whether it is a cluster connection (named on each master instead:
    /// see [`SharedConn::kill_on_masters`]).
    pub fn in_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// `CLIENT KILL ID id ADDR addr`, to end this connection on the server
    /// from another one: a reply of 1 says it was there and is cut, and
    /// nothing sent on it runs any more; 0, that no client of that server
    /// is this connection (gone, or the server is another process now).
    /// The address is this connection's own port while it is open, and a
    /// new process reaches the same id with the same port only after the
    /// client's ports came round again.
    pub fn kill_command(&self) -> Option<Cmd> {
        Some(self.id.as_ref()?.kill_command())
    }
}

/// `cmd` on `conn`; with `ack`, followed in the same write by the
/// acknowledgement commands, whose replies decide whether it counts.
async fn send_on<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    cmd: &Cmd,
    ack: Option<&Acknowledge>,
) -> Result<Value, NodeError> {
    let Some(ack) = ack else {
        return conn.req_packed_command(cmd).await.map_err(node_error);
    };
    let (pipe, count) = with_acknowledgements(cmd, ack);
    let replies = conn
        .req_packed_commands(&pipe, 0, count)
        .await
        .map_err(node_error)?;
    ack.accept(replies)
}

/// `cmd` followed by the acknowledgement commands `ack` asks for, and
/// how many commands that is.
fn with_acknowledgements(cmd: &Cmd, ack: &Acknowledge) -> (redis::Pipeline, usize) {
    let mut pipe = redis::pipe();
    pipe.add_command(cmd.clone());
    let extra = ack.commands();
    let count = 1 + extra.len();
    for command in extra {
        pipe.add_command(command);
    }
    (pipe, count)
}

fn node_error(error: redis::RedisError) -> NodeError {
    if error.is_timeout() {
        NodeError::Connection(format!("timed out: {error}"))
    } else if matches!(
        error.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    ) {
        NodeError::Reply(error.to_string())
    } else if error.kind() == redis::ErrorKind::ClusterConnectionNotFound {
        // The cluster connection keeps no cause (a refused connection and a
        // failed TLS handshake read the same), so say where to look.
        NodeError::Connection(format!(
            "{error} (no node of the cluster could be reached: check the seeds' \
             addresses and, for rediss:// seeds, the TLS settings)"
        ))
    } else {
        NodeError::Connection(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_connection_is_named_by_its_id_and_address() {
        let line = "id=7 addr=127.0.0.1:51234 laddr=127.0.0.1:6379 fd=9 name= age=0 \
                    idle=0 flags=N db=0 cmd=client|info user=default\n";
        let named = |value: Value| WaitingId::read(&value);
        let expected = Some(WaitingId {
            id: 7,
            addr: "127.0.0.1:51234".into(),
        });
        // RESP2 bulk string, RESP3 verbatim string.
        assert_eq!(named(Value::BulkString(line.as_bytes().to_vec())), expected);
        assert_eq!(
            named(Value::VerbatimString {
                format: redis::VerbatimFormat::Text,
                text: line.into(),
            }),
            expected
        );
        // `laddr=` is not `addr=`; IPv6 keeps its colons.
        let v6 = "laddr=[::1]:6379 id=3 addr=[::1]:40000 fd=8";
        assert_eq!(
            named(Value::BulkString(v6.as_bytes().to_vec())),
            Some(WaitingId {
                id: 3,
                addr: "[::1]:40000".into(),
            })
        );
        // Without either field, or with an id that is not a number: not
        // named (the wait is then not ended early).
        for text in [
            "addr=127.0.0.1:1 fd=3",
            "id=4 fd=3",
            "id=x addr=a:1",
            "id=4 addr=",
            // A unix socket's client: every one of them has this address.
            "id=4 addr=/tmp/redis.sock:0 laddr=/tmp/redis.sock:0",
        ] {
            assert_eq!(
                named(Value::BulkString(text.as_bytes().to_vec())),
                None,
                "{text}"
            );
        }
        assert_eq!(named(Value::Int(7)), None);
    }

    #[test]
    fn a_waiting_cluster_connection_is_named_on_each_master_by_its_address() {
        let text = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let read = MasterId::read_all(vec![
            (
                text("127.0.0.1:7001"),
                text("id=5 addr=127.0.0.1:40001 fd=9"),
            ),
            // IPv6: the port is after the last colon.
            (text("::1:7002"), text("id=9 addr=[::1]:40002 fd=9")),
            // Not `CLIENT INFO`'s text (an error reply: no `client|info`
            // there), a unix socket, no port, a port out of range: left out.
            (text("127.0.0.1:7003"), Value::Nil),
            (text("127.0.0.1:7004"), text("id=3 addr=/tmp/r.sock:0 fd=9")),
            (text("no-port"), text("id=1 addr=127.0.0.1:40005 fd=9")),
            (
                text("127.0.0.1:70000"),
                text("id=2 addr=127.0.0.1:40006 fd=9"),
            ),
        ]);
        let named = |host: &str, port, id, addr: &str| MasterId {
            host: host.into(),
            port,
            id: WaitingId {
                id,
                addr: addr.into(),
            },
        };
        assert_eq!(
            read,
            vec![
                named("127.0.0.1", 7001, 5, "127.0.0.1:40001"),
                named("::1", 7002, 9, "[::1]:40002"),
            ]
        );
        // The cut names the id and the address together.
        let kill = read[0].id.kill_command();
        assert_eq!(
            kill.args_iter()
                .map(|arg| match arg {
                    redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    _ => String::new(),
                })
                .collect::<Vec<_>>(),
            ["CLIENT", "KILL", "ID", "5", "ADDR", "127.0.0.1:40001"]
        );
        assert!(MasterId::read_all(vec![]).is_empty());
    }
}
