//! TLS for `rediss://` nodes (the `tls` feature): which certificate
//! authority to trust, and the client's own certificate for mutual TLS.
//!
//! A plain `rediss://host:port` URL already works with the feature on and
//! trusts the system's roots; [`Tls`] is for a private CA (the usual case
//! for Redis) and for servers started with `tls-auth-clients yes`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), redis_lock_client::Error> {
//! use redis_lock_client::{Redlock, Tls};
//!
//! let tls = Tls::new()
//!     .ca_pem(std::fs::read("ca.crt").unwrap_or_default())
//!     .client_pem(
//!         std::fs::read("client.crt").unwrap_or_default(),
//!         std::fs::read("client.key").unwrap_or_default(),
//!     );
//! let redlock = Redlock::new([
//!     tls.node("rediss://10.0.0.1:6380"),
//!     tls.node("rediss://10.0.0.2:6380"),
//!     tls.node("rediss://10.0.0.3:6380"),
//! ])?;
//! # Ok(()) }
//! ```

use redis::{ClientTlsConfig, TlsCertificates};

use crate::error::{Error, Result};
use crate::node::IntoClient;

/// TLS settings shared by a client's nodes: the CA certificates to trust
/// instead of the system's roots, and a client certificate and key for
/// mutual TLS, all PEM.
#[derive(Clone, Default)]
pub struct Tls {
    ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys are never printed.
        f.debug_struct("Tls")
            .field("ca", &self.ca.as_ref().map(|_| "<pem>"))
            .field("identity", &self.identity.as_ref().map(|_| "<pem>"))
            .finish()
    }
}

impl Tls {
    /// Trusts the system's roots, presents no client certificate.
    pub fn new() -> Tls {
        Tls::default()
    }

    /// Trusts the CA certificate(s) in `pem` instead of the system's roots.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Tls {
        self.ca = Some(pem.into());
        self
    }

    /// Presents this certificate (chain) and private key, both PEM, to
    /// servers that ask for one (`tls-auth-clients yes`).
    pub fn client_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Tls {
        self.identity = Some((cert.into(), key.into()));
        self
    }

    /// The certificates as the `redis` crate takes them.
    pub(crate) fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: self
                .identity
                .clone()
                .map(|(client_cert, client_key)| ClientTlsConfig {
                    client_cert,
                    client_key,
                }),
            root_cert: self.ca.clone(),
        }
    }

    /// A node at `url` (`rediss://host:port[/db]`) with these settings.
    pub fn node(&self, url: impl Into<String>) -> TlsNode {
        TlsNode {
            url: url.into(),
            tls: self.clone(),
        }
    }
}

/// A `rediss://` node and its TLS settings (from [`Tls::node`]).
#[derive(Clone, Debug)]
pub struct TlsNode {
    url: String,
    tls: Tls,
}

impl IntoClient for TlsNode {
    fn into_client(self) -> Result<redis::Client> {
        if !self.url.starts_with("rediss://") {
            return Err(Error::InvalidConfig(format!(
                "node URL {:?}: TLS settings need a rediss:// URL",
                self.url
            )));
        }
        crate::crypto::ensure_provider();
        redis::Client::build_with_tls(self.url.as_str(), self.tls.certificates())
            .map_err(|e| Error::InvalidConfig(format!("node URL {:?}: {e}", self.url)))
    }
}
