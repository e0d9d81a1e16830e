//! The five lock nodes: real `redis-server` processes (testkit) with the
//! module loaded, each behind an async mutex that a fault holds while it
//! acts on the node, so that two faults never act on one node at once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use testkit::{FaultProxy, NetNs, RedisServer, ServerOptions};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::network::Lab;
use crate::plan::NodeProfile;
use crate::Error;

/// One node: its profile, address, and the server process.
pub struct Node {
    pub index: usize,
    pub profile: NodeProfile,
    pub port: u16,
    pub url: String,
    /// The wall-clock offset the node runs with now, ms (0 after a restart).
    pub offset_ms: AtomicI64,
    /// How much of the server's log has been read for bad lines.
    log_read: AtomicUsize,
    dir: PathBuf,
    server: Arc<Mutex<RedisServer>>,
}

/// A node claimed by a fault.
pub type Claimed = OwnedMutexGuard<RedisServer>;

/// A (client group, node) link claimed by a network fault.
pub type ClaimedLink = OwnedMutexGuard<()>;

impl Node {
    /// Claims the node for a fault, once no other fault has it.
    pub async fn claim(&self) -> Claimed {
        self.server.clone().lock_owned().await
    }

    /// Whether a restart now can cost the node leases: it can forget them,
    /// or its clock runs behind (the restart steps it forward).
    pub fn restart_hurts(&self) -> bool {
        self.profile.persistence.can_forget() || self.offset_ms.load(Ordering::Relaxed) < 0
    }

    /// The server's data directory (kept across restarts).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The nodes of one phase; every server is killed when this is dropped
/// (testkit's `Drop`), also on an early return or a panic.
pub struct Cluster {
    pub nodes: Vec<Node>,
    /// The network namespaces the nodes run in (the network phase).
    pub lab: Option<Arc<Lab>>,
    /// One claim per (group, node) link, `group * nodes + node`.
    links: Vec<Arc<Mutex<()>>>,
    /// A fault proxy in front of each node, through which the loopback
    /// clients reach it when the phase has client-side link faults (empty
    /// otherwise): stalls, delays and cuts of the client's own links.
    proxies: Vec<FaultProxy>,
    /// What went wrong with the servers themselves: a node that died
    /// without a fault, a panic, assertion or crash in a log.
    troubles: std::sync::Mutex<Vec<String>>,
}

/// The `redis-server` options for a profile: the module with its debug knob
/// (for `LOCK.DEBUG WALLCLOCK-OFFSET`) and the recovery window, and the
/// persistence settings.
pub fn server_options(profile: &NodeProfile) -> ServerOptions {
    ServerOptions::default()
        .module_args(["recovery-ms".to_string(), profile.recovery_ms.to_string()])
        .args(profile.persistence.server_args())
}

impl Cluster {
    /// Starts one server per profile (in `lab`'s node namespaces, if
    /// given); returns once each answers `PING`.
    pub async fn start(profiles: &[NodeProfile], lab: Option<Arc<Lab>>) -> Result<Cluster, Error> {
        let mut nodes = Vec::with_capacity(profiles.len());
        for (index, profile) in profiles.iter().enumerate() {
            let mut options = server_options(profile);
            if let Some(lab) = &lab {
                options.netns = Some(NetNs {
                    name: lab.node_ns(index),
                    address: lab.admin_address(index),
                });
            }
            let server = tokio::task::spawn_blocking(move || RedisServer::start_with(options))
                .await
                .map_err(|e| Error::Setup(format!("node {index} did not start: {e}")))?;
            nodes.push(Node {
                index,
                profile: profile.clone(),
                port: server.port(),
                url: server.url(),
                offset_ms: AtomicI64::new(0),
                log_read: AtomicUsize::new(0),
                dir: server.dir().to_path_buf(),
                server: Arc::new(Mutex::new(server)),
            });
        }
        let links = lab.as_ref().map_or(0, |lab| lab.groups() * lab.nodes());
        Ok(Cluster {
            nodes,
            lab,
            links: (0..links).map(|_| Arc::new(Mutex::new(()))).collect(),
            proxies: Vec::new(),
            troubles: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Puts a fault proxy in front of every node for the clients
    /// ([`Cluster::client_urls`]); the suite's own commands still go
    /// straight to the nodes.
    pub fn proxy_clients(&mut self) {
        self.proxies = self
            .nodes
            .iter()
            .map(|node| FaultProxy::start(node.port))
            .collect();
    }

    /// Node `i`'s proxy, if the clients go through proxies.
    pub fn proxy(&self, i: usize) -> Option<&FaultProxy> {
        self.proxies.get(i)
    }

    /// The nodes' URLs as the loopback clients reach them: through the
    /// proxies, if any.
    pub fn client_urls(&self) -> Vec<String> {
        if self.proxies.is_empty() {
            return self.urls();
        }
        self.proxies.iter().map(FaultProxy::url).collect()
    }

    /// Every port a client may name a node by (the node's, its proxy's).
    pub fn client_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .map(|n| n.port)
            .chain(self.proxies.iter().map(FaultProxy::port))
            .collect()
    }

    fn note_trouble(&self, trouble: String) {
        self.troubles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(trouble);
    }

    /// What went wrong with the servers so far.
    pub fn troubles(&self) -> Vec<String> {
        self.troubles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Looks at node `i`'s server (claimed by the caller) before a fault
    /// acts on it, or at the end of the phase (`when`): it must be running
    /// (no fault has it down now, so one that is not died by itself: a
    /// kill that ignores it would hide the crash), and the part of its log
    /// not read yet must have no panic, assertion or crash line.
    pub fn check_server(&self, i: usize, server: &mut RedisServer, when: &str) {
        if !server.is_running() {
            self.note_trouble(format!(
                "node {i} was not running {when}: it died without a fault"
            ));
        }
        let Some(node) = self.nodes.get(i) else {
            return;
        };
        let log = server.log();
        let from = node.log_read.swap(log.len(), Ordering::Relaxed);
        let bad = crate::node_errors::bad_log_lines(log.get(from..).unwrap_or(""));
        if !bad.is_empty() {
            self.note_trouble(format!("node {i}'s log ({when}): {}", bad.join(" | ")));
        }
    }

    /// At the end of a phase, once no fault holds a node: every server
    /// running, and no bad line in any log.
    pub async fn check_servers(&self) {
        for node in &self.nodes {
            let mut server = node.server.lock().await;
            self.check_server(node.index, &mut server, "at the end of the phase");
        }
    }

    /// The nodes' URLs as the suite (and the loopback phases' clients)
    /// reach them.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url.clone()).collect()
    }

    /// The nodes' URLs as the clients of `group` reach them (the network
    /// phase: over that group's links).
    pub fn group_urls(&self, group: usize) -> Vec<String> {
        match &self.lab {
            Some(lab) => self
                .nodes
                .iter()
                .map(|n| format!("redis://{}:{}/", lab.node_address(group, n.index), n.port))
                .collect(),
            None => self.urls(),
        }
    }

    /// Claims the link between `group` and `node` for a network fault, once
    /// no other fault has it; `None` if there is no such link.
    pub fn claim_link(
        &self,
        group: usize,
        node: usize,
    ) -> Option<impl std::future::Future<Output = ClaimedLink>> {
        let lab = self.lab.as_ref()?;
        let link = self.links.get(group * lab.nodes() + node)?.clone();
        Some(link.lock_owned())
    }

    /// The node index for a client outcome's node name (`host:port`).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        let port: u16 = name.rsplit(':').next()?.parse().ok()?;
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .or_else(|| self.proxies.iter().position(|p| p.port() == port))
    }

    /// Waits until no fault holds any node (faults end by themselves: a
    /// stopped node is always resumed, a killed one restarted).
    pub async fn settle(&self) {
        for node in &self.nodes {
            drop(node.server.lock().await);
        }
        for link in &self.links {
            drop(link.lock().await);
        }
    }
}

/// Runs a blocking testkit operation on a claimed server off the async
/// threads; gives the claim back. A panic inside testkit (a server that did
/// not come back) is returned as an error, the claim is then lost and the
/// node stays as it is until the cluster is dropped.
pub async fn blocking<F>(mut claim: Claimed, op: F) -> Result<Claimed, Error>
where
    F: FnOnce(&mut RedisServer) + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        op(&mut claim);
        claim
    })
    .await
    .map_err(|e| Error::Fault(format!("server operation failed: {e}")))
}

/// One command on a fresh connection, bounded by `timeout`.
pub async fn command(
    url: &str,
    cmd: &redis::Cmd,
    timeout: Duration,
) -> Result<redis::Value, Error> {
    let call = async {
        let client = redis::Client::open(url)?;
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(timeout));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        cmd.query_async::<redis::Value>(&mut conn).await
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Error::Fault(format!("{url}: {e}"))),
        Err(_) => Err(Error::Fault(format!(
            "{url}: no reply within {} ms",
            timeout.as_millis()
        ))),
    }
}
