//! A lock over TLS: `rediss://` nodes whose certificate a private CA signed,
//! with an optional client certificate for servers that ask for one.
//!
//! A server to try it on (certificates valid for a day, in the current
//! directory):
//!
//!     openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=lock-test-ca -keyout ca.key -out ca.crt
//!     openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout server.key -out server.csr
//!     openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -copy_extensions copy -out server.crt
//!     redis-server --port 0 --tls-port 6380 --tls-cert-file server.crt --tls-key-file server.key \
//!         --tls-ca-cert-file ca.crt --tls-auth-clients no --loadmodule target/release/libredis_lock.so
//!     REDIS_LOCK_CA=ca.crt cargo run -p redis-lock-client --features tls --example tls rediss://127.0.0.1:6380
//!
//! `REDIS_LOCK_CA`: the CA to trust (else the system's roots);
//! `REDIS_LOCK_CERT` and `REDIS_LOCK_KEY`: a client certificate and key.

mod common;

use std::time::Duration;

use redis_lock_client::{Redlock, Tls};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::exit_code(run().await)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut tls = Tls::new();
    if let Ok(ca) = std::env::var("REDIS_LOCK_CA") {
        tls = tls.ca_pem(std::fs::read(ca)?);
    }
    if let (Ok(cert), Ok(key)) = (
        std::env::var("REDIS_LOCK_CERT"),
        std::env::var("REDIS_LOCK_KEY"),
    ) {
        tls = tls.client_pem(std::fs::read(cert)?, std::fs::read(key)?);
    }
    let urls: Vec<String> = std::env::args().skip(1).collect();
    let urls = if urls.is_empty() {
        vec!["rediss://127.0.0.1:6380".to_string()]
    } else {
        urls
    };
    let redlock = Redlock::new(urls.iter().map(|url| tls.node(url.as_str())))?;
    let lock = redlock
        .acquire("tls:example", Duration::from_secs(10))
        .await?;
    let token = lock.fencing_token().await?;
    println!(
        "held tls:example over TLS with token {token} (valid for {:?})",
        lock.validity().unwrap_or_default()
    );
    lock.release().await?;
    println!("released");
    Ok(())
}
