//! A real Redis Cluster of module-loaded nodes on loopback, made with
//! `redis-cli --cluster create`, and what tests do to it: find who serves
//! a slot, move a slot with `redis-cli --cluster reshard`, fail a shard
//! over.

use std::process::Command;
use std::time::Duration;

use redis::Value;

use crate::{cli_binary, wait_until, RedisServer, ServerOptions};

/// Options of a cluster node (with the module, like every test server).
pub fn cluster_options() -> ServerOptions {
    ServerOptions::default().args([
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "2000",
    ])
}

/// The cluster's nodes: the masters first, then their replicas.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// `masters` masters with `replicas` replicas each, every slot served,
    /// every node seeing the cluster ok.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        Self::start_with(masters, replicas, cluster_options)
    }

    /// [`RedisCluster::start`] with each node's options from `options`
    /// (which starts from [`cluster_options`]), e.g. a TLS port each.
    pub fn start_with(
        masters: usize,
        replicas: usize,
        options: impl FnMut() -> ServerOptions,
    ) -> RedisCluster {
        let nodes: Vec<RedisServer> = std::iter::repeat_with(options)
            .take(masters * (1 + replicas))
            .map(RedisServer::start_with)
            .collect();
        let mut create = Command::new(cli_binary());
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
        let output = create.output().expect("redis-cli must be installed");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok(&cluster.nodes.iter().collect::<Vec<_>>());
        // Every replica in sync with its master.
        for master in &cluster.nodes[..masters] {
            let synced = wait_until(Duration::from_secs(30), || {
                let info = master.replication_info();
                info.contains(&format!("connected_slaves:{replicas}"))
                    && !info.contains("state=wait_bgsave")
            });
            assert!(synced, "the replicas of {} never synced", master.port());
        }
        cluster
    }

    /// Waits until each of `nodes` sees the cluster ok with every node.
    pub fn wait_ok(&self, nodes: &[&RedisServer]) {
        for node in nodes {
            let mut c = node.conn();
            let ok = wait_until(Duration::from_secs(30), || {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{}", self.nodes.len()))
            });
            assert!(ok, "node {} never saw the cluster ok", node.port());
        }
    }

    /// `redis://127.0.0.1:PORT` of every node.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port()))
            .collect()
    }

    /// The node listening on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// The node listening on `port`, to stop or restart it.
    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn key_slot(&self, key: &str) -> i64 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].conn())
            .unwrap()
    }

    /// The port of the master serving `slot`, as `via` sees it.
    pub fn owner_port(via: &RedisServer, slot: i64) -> u16 {
        let slots: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut via.conn())
            .unwrap();
        let Value::Array(ranges) = slots else {
            panic!("{slots:?}")
        };
        for range in ranges {
            let Value::Array(parts) = range else { continue };
            let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(master))) =
                (parts.first(), parts.get(1), parts.get(2))
            else {
                continue;
            };
            if (*lo..=*hi).contains(&slot) {
                let Some(Value::Int(port)) = master.get(1) else {
                    panic!("{master:?}")
                };
                return u16::try_from(*port).unwrap();
            }
        }
        panic!("no node serves slot {slot}");
    }

    /// The master serving `key`.
    pub fn master_of(&self, key: &str) -> &RedisServer {
        self.node(Self::owner_port(&self.nodes[0], self.key_slot(key)))
    }

    /// A replica of `master` (by `ROLE` on each node).
    pub fn replica_of(&self, master: &RedisServer) -> &RedisServer {
        self.nodes
            .iter()
            .find(|node| {
                let role: Value = redis::cmd("ROLE").query(&mut node.conn()).unwrap();
                let Value::Array(parts) = role else {
                    return false;
                };
                let text = |v: Option<&Value>| match v {
                    Some(Value::BulkString(b)) => String::from_utf8_lossy(b).to_string(),
                    Some(Value::SimpleString(s)) => s.clone(),
                    _ => String::new(),
                };
                text(parts.first()) == "slave"
                    && matches!(parts.get(2), Some(Value::Int(p)) if *p == i64::from(master.port()))
            })
            .unwrap_or_else(|| panic!("no replica of {}", master.port()))
    }

    /// Moves one slot (the lowest `from` serves) to `to` with
    /// `redis-cli --cluster reshard`, and waits until `to` serves `slot`.
    pub fn reshard_one_slot(from: &RedisServer, to: &RedisServer, slot: i64) {
        Self::reshard_one_slot_with(from, to, slot, &[]);
    }

    /// [`Self::reshard_one_slot`] with more `--cluster reshard` options
    /// (e.g. Valkey 9's `--cluster-use-atomic-slot-migration`).
    pub fn reshard_one_slot_with(from: &RedisServer, to: &RedisServer, slot: i64, extra: &[&str]) {
        let output = Command::new(cli_binary())
            .args([
                "--cluster",
                "reshard",
                &format!("127.0.0.1:{}", from.port()),
            ])
            .args([
                "--cluster-from",
                &node_id(from),
                "--cluster-to",
                &node_id(to),
            ])
            .args(["--cluster-slots", "1", "--cluster-yes"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "reshard failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(wait_until(Duration::from_secs(30), || {
            Self::owner_port(to, slot) == to.port()
        }));
    }
}

/// `CLUSTER MYID`.
pub fn node_id(node: &RedisServer) -> String {
    redis::cmd("CLUSTER")
        .arg("MYID")
        .query(&mut node.conn())
        .unwrap()
}

/// The lowest slot `node` serves.
pub fn lowest_slot(node: &RedisServer) -> i64 {
    let slots: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut node.conn())
        .unwrap();
    let Value::Array(ranges) = slots else {
        panic!("{slots:?}")
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(parts) = range else {
                return None;
            };
            let (Some(Value::Int(lo)), Some(Value::Array(master))) = (parts.first(), parts.get(2))
            else {
                return None;
            };
            (master.get(1) == Some(&Value::Int(i64::from(node.port())))).then_some(*lo)
        })
        .min()
        .unwrap()
}
