//! The set of independent nodes a client locks on, the majority over them,
//! and the settings: what every lock handle of a client shares, and the one
//! round (a command to every node at once) that every operation is made of.

use redis::{Cmd, Value};

use crate::config::Config;
use crate::error::{Error, NodeError, Result};
use crate::fanout;
use crate::metrics;
use crate::node::{ClusterTls, Node};
use crate::outcome::{Reply, Round};
use crate::protocol;
use crate::timing;

pub(crate) struct Quorum {
    nodes: Vec<Node>,
    quorum: usize,
    config: Config,
}

impl Quorum {
    /// Validates the settings and the node list (no server twice) and sets
    /// up each node's connection in the background.
    pub fn new(clients: Vec<redis::Client>, config: Config) -> Result<Quorum> {
        config.validate()?;
        reject_duplicate_nodes(&clients)?;
        let nodes = clients
            .into_iter()
            .map(|client| Node::new(client, config.node_timeout))
            .collect::<Result<Vec<Node>>>()?;
        if nodes.is_empty() {
            return Err(Error::InvalidConfig("at least one node is needed".into()));
        }
        let quorum = match config.unsafe_quorum {
            None => timing::quorum(nodes.len()),
            Some(quorum) if (1..=nodes.len()).contains(&quorum) => quorum,
            Some(quorum) => {
                return Err(Error::InvalidConfig(format!(
                    "unsafe_quorum {quorum} is not between 1 and the {} nodes",
                    nodes.len()
                )))
            }
        };
        Ok(Quorum {
            quorum,
            nodes,
            config,
        })
    }

    /// A Redis Cluster as the one node (reached through `seeds`): each lock
    /// is served by the shard that owns its key.
    pub fn cluster(seeds: Vec<String>, config: Config, tls: ClusterTls) -> Result<Quorum> {
        config.validate()?;
        if seeds.is_empty() {
            return Err(Error::InvalidConfig(
                "a cluster needs at least one seed node".into(),
            ));
        }
        Ok(Quorum {
            quorum: 1,
            nodes: vec![Node::cluster(seeds, config.node_timeout, tls)?],
            config,
        })
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Nodes that must agree: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// `cmd` to every node at once, each bounded by the per-node timeout;
    /// `acknowledged`: a command that sets leases or tokens, followed in the
    /// same write by the acknowledgements the settings ask for (and bounded
    /// by their timeout too).
    pub async fn round(
        &self,
        cmd: &Cmd,
        parse: fn(Value) -> std::result::Result<Reply, NodeError>,
        acknowledged: bool,
    ) -> Round {
        let ack = self.config.acknowledge.filter(|_| acknowledged);
        let timeout = match ack {
            Some(_) => self.config.round_timeout(),
            None => self.config.node_timeout,
        };
        fanout::round(&self.nodes, cmd, timeout, parse, ack.as_ref()).await
    }
}

impl Quorum {
    /// In cluster mode with [`Config::raise_cluster_counters`]: raises every
    /// master's token counter to at least `token` (`LOCK.FLOOR`), all at
    /// once within the per-node timeout, so that any later grant on any
    /// master, after a slot move whatever the clocks, gets a higher token.
    /// A master that refuses or cannot be reached in time does not fail the
    /// caller: it is reported as a node error (metrics, tracing) and the
    /// number of such misses is returned. `None`: nothing to raise (not a
    /// cluster, or switched off).
    pub async fn raise_cluster_counters(&self, token: u64) -> Option<usize> {
        if !self.config.raise_cluster_counters {
            return None;
        }
        let [node] = self.nodes.as_slice() else {
            return None;
        };
        let replies = node
            .to_every_master(protocol::floor(token), self.config.node_timeout)
            .await?;
        let missed = match replies {
            Ok(replies) => replies
                .into_iter()
                .filter_map(|(master, reply)| {
                    protocol::parse_floor(reply, token)
                        .err()
                        .map(|error| (master, error))
                })
                .inspect(|(master, error)| raise_missed(master, error))
                .count(),
            Err(error) => {
                // Which masters were raised is unknown: counted as one miss
                // of the cluster as a whole.
                raise_missed(node.name(), &error);
                1
            }
        };
        Some(missed)
    }
}

fn raise_missed(master: &str, error: &NodeError) {
    #[cfg(feature = "tracing")]
    tracing::warn!(%master, %error, "a master's token counter was not raised");
    metrics::node_error(master, error);
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
    fn the_constructor_refuses_a_majority_made_of_one_server() {
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
            let clients = clients(&nodes);
            assert!(matches!(
                Quorum::new(clients, Config::default()),
                Err(Error::InvalidConfig(_))
            ));
        });
    }
}
