//! The client: the set of independent nodes, the quorum over them, and the
//! settings every lock made from it shares.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::node::{IntoClient, Node};
use crate::owner::new_owner_id;
use crate::protocol::{self, NodeInfo};
use crate::timing;

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
    shared: Arc<Shared>,
}

struct Shared {
    nodes: Vec<Node>,
    quorum: usize,
    config: Config,
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
        reject_duplicate_nodes(&clients)?;
        let nodes = clients
            .into_iter()
            .map(|client| Node::new(client, config.node_timeout))
            .collect::<Result<Vec<Node>>>()?;
        if nodes.is_empty() {
            return Err(Error::InvalidConfig("at least one node is needed".into()));
        }
        let quorum = timing::quorum(nodes.len());
        Ok(Redlock {
            shared: Arc::new(Shared {
                nodes,
                quorum,
                config,
            }),
        })
    }

    /// A handle for `resource` with a fresh owner id, not yet acquired.
    pub fn lock(&self, resource: impl Into<String>, ttl: Duration) -> Result<Lock> {
        self.shared.config.validate_ttl(ttl)?;
        Ok(Lock::new(
            self.clone(),
            resource.into(),
            new_owner_id(),
            ttl,
        ))
    }

    /// [`Redlock::lock`] and [`Lock::acquire`] in one step.
    pub async fn acquire(&self, resource: impl Into<String>, ttl: Duration) -> Result<Lock> {
        let lock = self.lock(resource, ttl)?;
        lock.acquire().await?;
        Ok(lock)
    }

    /// `LOCK.INFO` on every node: who holds `resource` where (for
    /// diagnostics and demos; not part of the locking protocol).
    pub async fn info(&self, resource: &str) -> Vec<NodeInfo> {
        let cmd = protocol::info(resource);
        let timeout = self.shared.config.node_timeout;
        join_all(self.shared.nodes.iter().map(|node| {
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
        self.shared
            .nodes
            .iter()
            .map(|node| node.name().to_string())
            .collect()
    }

    /// Nodes that must agree: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.shared.quorum
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    pub(crate) fn nodes(&self) -> &[Node] {
        &self.shared.nodes
    }
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.node_names())
            .field("quorum", &self.shared.quorum)
            .field("config", &self.shared.config)
            .finish()
    }
}

/// Where a node is, as sockets: a host name resolved to its addresses, so
/// that `redis://localhost:7101` and `redis://127.0.0.1:7101/0` are the
/// same node. (The database number does not matter: it is one server.)
fn node_addresses(client: &redis::Client) -> Vec<String> {
    use std::net::ToSocketAddrs;
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => {
            match (host.as_str(), *port).to_socket_addrs() {
                Ok(addrs) => addrs.map(|addr| addr.to_string()).collect(),
                // Not resolvable now: compared by name (it is a failed
                // node in each round until it resolves).
                Err(_) => vec![format!("{}:{port}", host.to_ascii_lowercase())],
            }
        }
        other => vec![other.to_string()],
    }
}

/// One server listed twice would count twice towards a majority.
fn reject_duplicate_nodes(clients: &[redis::Client]) -> Result<()> {
    let mut seen: Vec<(String, String)> = Vec::new();
    for client in clients {
        let name = client.get_connection_info().addr().to_string();
        let mut addrs = node_addresses(client);
        addrs.sort();
        addrs.dedup();
        for addr in &addrs {
            if let Some((first, _)) = seen.iter().find(|(_, a)| a == addr) {
                return Err(Error::InvalidConfig(format!(
                    "nodes {first} and {name} are the same server ({addr}): each node must be an independent master"
                )));
            }
        }
        seen.extend(addrs.into_iter().map(|addr| (name.clone(), addr)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clients(urls: &[&str]) -> Vec<redis::Client> {
        urls.iter()
            .map(|url| redis::Client::open(*url).unwrap())
            .collect()
    }

    #[test]
    fn one_server_listed_twice_is_refused_in_any_spelling() {
        assert!(reject_duplicate_nodes(&clients(&[
            "redis://127.0.0.1:7101",
            "redis://127.0.0.1:7102",
            "redis://localhost:7103",
        ]))
        .is_ok());
        for pair in [
            ["redis://localhost:7101", "redis://127.0.0.1:7101/0"],
            ["redis://127.0.0.1:7101", "redis://127.0.0.1:7101/3"],
            ["redis://127.0.0.1:7101/", "redis://127.0.0.1:7101"],
        ] {
            let err = reject_duplicate_nodes(&clients(&pair));
            assert!(
                matches!(err, Err(Error::InvalidConfig(ref why)) if why.contains("same server")),
                "{pair:?}: {err:?}"
            );
        }
    }

    #[test]
    fn the_public_constructor_refuses_a_majority_made_of_one_server() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let nodes = [
                "redis://127.0.0.1:7101",
                "redis://127.0.0.1:7101/0",
                "redis://localhost:7101",
                "redis://127.0.0.1:7104",
                "redis://127.0.0.1:7105",
            ];
            assert!(matches!(Redlock::new(nodes), Err(Error::InvalidConfig(_))));
        });
    }
}
