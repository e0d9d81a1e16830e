//! The process-wide crypto provider rustls needs for TLS connections (the
//! `tls` feature): ring, unless the application installed another first.

/// Installs ring as rustls's provider if none is installed yet.
pub(crate) fn ensure_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err only if another thread installed one meanwhile: that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
