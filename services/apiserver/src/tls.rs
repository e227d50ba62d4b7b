//! The listeners' TLS, from `--tls-cert-file`, `--tls-private-key-file` and
//! `--client-ca-file`: rustls' configuration for the API listener (gRPC and REST, ALPN `h2` and
//! `http/1.1`) and for the HTTP side port (`http/1.1`), and the API listener's handshakes. Both
//! verify client certificates against the client CA when one is given, optionally (as
//! Kubernetes does: a client may authenticate with a bearer token instead).

use std::path::Path;
use std::sync::Arc;

use std::time::Duration;

use futures::StreamExt;
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::TcpIncoming;

use crate::config::Config;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A file's bytes, or an error naming it.
pub fn read(p: &Path) -> Result<Vec<u8>, BoxError> {
    std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()).into())
}

/// The PEM files of the listeners' TLS, read once.
pub struct Pems {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl Pems {
    /// `None`: no `--tls-cert-file`, the listeners serve plain text.
    pub fn read(config: &Config) -> Result<Option<Pems>, BoxError> {
        let (Some(cert), Some(key)) = (&config.tls_cert_file, &config.tls_private_key_file) else {
            return Ok(None);
        };
        Ok(Some(Pems {
            cert: read(cert)?,
            key: read(key)?,
            client_ca: config.client_ca_file.as_deref().map(read).transpose()?,
        }))
    }

    /// The API listener's: HTTP/2 for gRPC and for the clients that negotiate it (kubectl),
    /// HTTP/1.1 for the REST clients that only speak it (Python's urllib3).
    pub fn api(&self) -> Result<Arc<rustls::ServerConfig>, BoxError> {
        self.config(vec![b"h2".to_vec(), b"http/1.1".to_vec()])
    }

    /// The HTTP side port's (HTTP/1.1).
    pub fn http(&self) -> Result<Arc<rustls::ServerConfig>, BoxError> {
        self.config(vec![b"http/1.1".to_vec()])
    }

    fn config(&self, alpn: Vec<Vec<u8>>) -> Result<Arc<rustls::ServerConfig>, BoxError> {
        let bad = |what: &str, e: &dyn std::fmt::Display| format!("--{what}: {e}");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = CertificateDer::pem_slice_iter(&self.cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad("tls-cert-file", &e))?;
        if certs.is_empty() {
            return Err(bad("tls-cert-file", &"no PEM certificate in the file").into());
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key)
            .map_err(|e| bad("tls-private-key-file", &format!("no PEM private key: {e}")))?;
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match &self.client_ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in CertificateDer::pem_slice_iter(ca) {
                    roots
                        .add(c.map_err(|e| bad("client-ca-file", &e))?)
                        .map_err(|e| bad("client-ca-file", &e))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .allow_unauthenticated()
                .build()
                .map_err(|e| bad("client-ca-file", &e))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| bad("tls-cert-file", &e))?;
        config.alpn_protocols = alpn;
        Ok(Arc::new(config))
    }
}

/// Handshakes under way at once on the API listener; more connections wait their turn.
const MAX_HANDSHAKES: usize = 256;
/// A client that does not finish its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The API listener's connections, each once its TLS handshake is done. Handshakes run side
/// by side (a slow client holds up no one); the listener closes when the stream is dropped
/// (the server stopped accepting).
pub fn incoming(
    mut tcp: TcpIncoming,
    config: Arc<rustls::ServerConfig>,
) -> ReceiverStream<Result<TlsStream<TcpStream>, std::io::Error>> {
    let (tx, rx) = mpsc::channel(MAX_HANDSHAKES);
    let acceptor = TlsAcceptor::from(config);
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let conn = tokio::select! {
                conn = tcp.next() => conn,
                () = tx.closed() => return,
            };
            let stream = match conn {
                Some(Ok(s)) => s,
                Some(Err(e)) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                None => return,
            };
            let Ok(permit) = handshakes.clone().acquire_owned().await else {
                return;
            };
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!("TLS handshake timed out"),
                }
                drop(permit);
            });
        }
    });
    ReceiverStream::new(rx)
}
