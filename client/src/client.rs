//! The client: the set of independent nodes, the quorum over them, and the
//! settings every lock made from it shares.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::kind::Kind;
use crate::lock::Lock;
use crate::node::{ClusterTls, IntoClient};
use crate::owner::new_owner_id;
use crate::protocol::{self, NodeInfo};
use crate::quorum::Quorum;
use crate::semaphore::Semaphore;

/// A Redlock client over N independent module-loaded masters (N = 1 is
/// single-node mode). Cheap to clone: clones share the connections.
///
/// ```no_run
/// # async fn demo() -> Result<(), redis_lock_client::Error> {
/// use std::time::Duration;
/// use redis_lock_client::Redlock;
///
/// let redlock = Redlock::new([
///     "redis://127.0.0.1:7101",
///     "redis://127.0.0.1:7102",
///     "redis://127.0.0.1:7103",
///     "redis://127.0.0.1:7104",
///     "redis://127.0.0.1:7105",
/// ])?;
/// let lock = redlock.acquire("orders:42", Duration::from_secs(10)).await?;
/// let token = lock.fencing_token().await?;
/// println!("holding orders:42 with token {token} for {:?}", lock.validity());
/// lock.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    quorum: Arc<Quorum>,
}

impl Redlock {
    /// A client with the default [`Config`]. Must be called inside a tokio
    /// runtime; connecting happens in the background, so nodes that are down
    /// now only count as failed nodes later.
    pub fn new<I>(nodes: I) -> Result<Redlock>
    where
        I: IntoIterator,
        I::Item: IntoClient,
    {
        Self::with_config(nodes, Config::default())
    }

    /// A client with the given settings.
    pub fn with_config<I>(nodes: I, config: Config) -> Result<Redlock>
    where
        I: IntoIterator,
        I::Item: IntoClient,
    {
        config.validate()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::Runtime(
                "the async client needs a tokio runtime; use redis_lock_client::blocking without one".into(),
            ));
        }
        let clients = nodes
            .into_iter()
            .map(IntoClient::into_client)
            .collect::<Result<Vec<redis::Client>>>()?;
        Ok(Redlock {
            quorum: Arc::new(Quorum::new(clients, config)?),
        })
    }

    /// A Redis Cluster as the lock service: one logical node that sends
    /// each lock's commands to the shard serving its key (through the
    /// `redis` crate's cluster connection, which follows `MOVED`/`ASK` and
    /// retries `TRYAGAIN` while slots move). Like a single node it waits on
    /// the server (`WAIT`), and fencing, the watchdog and acknowledged
    /// grants (`WAIT` to the shard's replicas) work as there. `seeds` are
    /// `redis://host:port` URLs of any of the cluster's nodes.
    pub fn cluster<I>(seeds: I) -> Result<Redlock>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Self::cluster_with_config(seeds, Config::default())
    }

    /// [`Redlock::cluster`] with the given settings.
    pub fn cluster_with_config<I>(seeds: I, config: Config) -> Result<Redlock>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Self::cluster_from(seeds, config, ClusterTls::default())
    }

    /// [`Redlock::cluster_with_config`] over TLS with `tls`'s settings (a
    /// private CA, a client certificate): `seeds` are `rediss://` URLs, and
    /// every shard the cluster connection reaches is trusted the same way
    /// (the nodes must announce their TLS ports: `tls-cluster yes`).
    #[cfg(feature = "tls")]
    pub fn cluster_tls<I>(seeds: I, tls: &crate::Tls, config: Config) -> Result<Redlock>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let seeds: Vec<String> = seeds.into_iter().map(Into::into).collect();
        if let Some(plain) = seeds.iter().find(|seed| !seed.starts_with("rediss://")) {
            return Err(Error::InvalidConfig(format!(
                "seed {plain:?}: TLS settings need rediss:// URLs"
            )));
        }
        let tls = ClusterTls {
            certificates: Some(tls.certificates()),
        };
        Self::cluster_from(seeds, config, tls)
    }

    fn cluster_from<I>(seeds: I, config: Config, tls: ClusterTls) -> Result<Redlock>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::Runtime(
                "the async client needs a tokio runtime".into(),
            ));
        }
        let seeds = seeds.into_iter().map(Into::into).collect();
        Ok(Redlock {
            quorum: Arc::new(Quorum::cluster(seeds, config, tls)?),
        })
    }

    /// [`Redlock::with_config`], then [`Redlock::verify`]: the settings are
    /// checked against the servers before the first lock.
    pub async fn connect<I>(nodes: I, config: Config) -> Result<Redlock>
    where
        I: IntoIterator,
        I::Item: IntoClient,
    {
        let redlock = Self::with_config(nodes, config)?;
        redlock.verify().await?;
        Ok(redlock)
    }

    /// Checks every node that answers now: the redis-lock module is loaded,
    /// and `WAITAOF` exists when [`Config::acknowledge`] asks for fsyncs
    /// (Redis 7.0 has none). A node that does not answer is not an error
    /// here: it is a failed node in each round until it answers.
    pub async fn verify(&self) -> Result<()> {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("INFO").arg("LOCK.ACQUIRE").arg("WAITAOF");
        // Connecting may take longer than one reply.
        let timeout = self
            .quorum
            .config()
            .node_timeout
            .max(Duration::from_secs(1));
        let fsyncs = self
            .quorum
            .config()
            .acknowledge
            .is_some_and(|ack| ack.needs_waitaof());
        let replies = join_all(
            self.quorum
                .nodes()
                .iter()
                .map(|node| async { (node.name(), node.call(&cmd, timeout).await) }),
        )
        .await;
        for (node, reply) in replies {
            let Ok(redis::Value::Array(infos)) = reply else {
                continue;
            };
            let known = |i: usize| !matches!(infos.get(i), None | Some(redis::Value::Nil));
            if !known(0) {
                return Err(Error::InvalidConfig(format!(
                    "node {node}: the redis-lock module is not loaded (no LOCK.ACQUIRE)"
                )));
            }
            if fsyncs && !known(1) {
                return Err(Error::InvalidConfig(format!(
                    "node {node}: the server has no WAITAOF (Redis before 7.2), so it cannot acknowledge fsyncs: drop fsync_local/fsync_replicas from Config::acknowledge or use Redis 7.2+ or Valkey"
                )));
            }
        }
        Ok(())
    }

    /// A handle for `resource` with a fresh owner id, not yet acquired.
    pub fn lock(&self, resource: impl Into<String>, ttl: Duration) -> Result<Lock> {
        self.lock_as(resource.into(), ttl, Kind::Exclusive)
    }

    /// A handle of `kind` for `resource` with a fresh owner id, not yet
    /// acquired.
    fn lock_as(&self, resource: String, ttl: Duration, kind: Kind) -> Result<Lock> {
        self.quorum.config().validate_ttl(ttl)?;
        Ok(Lock::new(
            Arc::clone(&self.quorum),
            resource,
            new_owner_id(),
            ttl,
            kind,
        ))
    }

    /// [`Redlock::lock`] and [`Lock::acquire`] in one step.
    pub async fn acquire(&self, resource: impl Into<String>, ttl: Duration) -> Result<Lock> {
        let lock = self.lock(resource, ttl)?;
        lock.acquire().await?;
        Ok(lock)
    }

    /// A handle for a **shared** (read) lock on `resource`, not yet
    /// acquired: held together with other shared holders, never with an
    /// exclusive one. Each holder has its own fencing token, lease and
    /// watchdog; the Redlock rules are those of an exclusive lock.
    pub fn lock_shared(&self, resource: impl Into<String>, ttl: Duration) -> Result<Lock> {
        self.lock_as(resource.into(), ttl, Kind::SHARED)
    }

    /// [`Redlock::lock_shared`] and [`Lock::acquire`] in one step.
    pub async fn acquire_shared(&self, resource: impl Into<String>, ttl: Duration) -> Result<Lock> {
        let lock = self.lock_shared(resource, ttl)?;
        lock.acquire().await?;
        Ok(lock)
    }

    /// A semaphore of `permits` leased permits on `resource`: each
    /// [`Semaphore::acquire`] takes one (a shared lock limited to `permits`
    /// holders). Every user of the resource must use the same number of
    /// permits: a node refuses a request whose number differs from the
    /// holders' (`ERR LIMIT … does not match …`).
    pub fn semaphore(&self, resource: impl Into<String>, permits: u32) -> Result<Semaphore> {
        let permits = NonZeroU32::new(permits)
            .ok_or_else(|| Error::InvalidConfig("a semaphore needs at least one permit".into()))?;
        Ok(Semaphore::new(
            Arc::clone(&self.quorum),
            resource.into(),
            permits,
        ))
    }

    /// `LOCK.INFO` on every node: who holds `resource` where (for
    /// diagnostics and demos; not part of the locking protocol).
    pub async fn info(&self, resource: &str) -> Vec<NodeInfo> {
        let cmd = protocol::info(resource);
        let timeout = self.quorum.config().node_timeout;
        join_all(self.quorum.nodes().iter().map(|node| {
            let cmd = &cmd;
            async move {
                let info = node.call(cmd, timeout).await.and_then(protocol::parse_info);
                NodeInfo {
                    node: node.name().to_string(),
                    info,
                }
            }
        }))
        .await
    }

    /// The nodes' names (`host:port`), in the order given.
    pub fn node_names(&self) -> Vec<String> {
        self.quorum
            .nodes()
            .iter()
            .map(|node| node.name().to_string())
            .collect()
    }

    /// Nodes that must agree: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.quorum.quorum()
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        self.quorum.config()
    }
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.node_names())
            .field("quorum", &self.quorum.quorum())
            .field("config", self.quorum.config())
            .finish()
    }
}
