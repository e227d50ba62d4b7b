//! The webhook server's TLS: rustls (with ring, as the rest of keel) from the PEM files of
//! `--tls-cert-file` and `--tls-private-key-file`, read once at start-up. API servers call
//! webhooks over HTTPS only.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why the serving certificate cannot be used; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file holds no PEM `CERTIFICATE` block (or a broken one).
    #[error("{path}: no PEM certificate: {why}")]
    Certificate { path: PathBuf, why: String },
    /// The file holds no PEM private key (PKCS#8, PKCS#1 or SEC1).
    #[error("{path}: no PEM private key: {why}")]
    Key { path: PathBuf, why: String },
    /// rustls refused the pair (the key does not match the certificate, say).
    #[error("the certificate {cert} and key {key} cannot serve TLS: {why}")]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        why: String,
    },
}

/// A file's bytes, or an error naming it.
pub fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The certificates of a PEM file's bytes (at least one).
pub fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |why: String| TlsError::Certificate {
        path: path.to_path_buf(),
        why,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("the file has no CERTIFICATE block".into()));
    }
    Ok(certs)
}

/// rustls' server configuration for the certificate chain `cert` and its key `key` (PEM
/// files), speaking HTTP/1.1, which is what API servers call webhooks with.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certificates(cert, &read(cert)?)?;
    let private_key = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| TlsError::Key {
        path: key.to_path_buf(),
        why: e.to_string(),
    })?;
    let pair = |why: String| TlsError::Pair {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        why,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| pair(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(|e| pair(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
