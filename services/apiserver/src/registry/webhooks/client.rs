//! The HTTPS client webhooks are called with: one pooled client per CA bundle and server name,
//! each trusting only its webhook's `caBundle` (rustls, ring), as Kubernetes' webhook client
//! does; at most [`MAX_CLIENTS`] kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// Clients kept at most (one per CA bundle and server name); past it, the pool starts over.
const MAX_CLIENTS: usize = 256;
/// The largest answer read from a webhook.
pub const MAX_ANSWER_BYTES: usize = 16 << 20;
/// How long an idle connection to a webhook is kept.
const IDLE: Duration = Duration::from_secs(90);

type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Who the client talks to: the CA it trusts, and the name the certificate must carry
/// (`None`: the URL's host).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    ca: Vec<Vec<u8>>,
    server_name: Option<String>,
}

/// The pooled clients.
#[derive(Default)]
pub struct Clients {
    pool: Mutex<HashMap<ClientKey, HttpsClient>>,
}

impl Clients {
    /// POSTs `body` (JSON) to `uri`, trusting `ca` and verifying the server's certificate
    /// for `server_name` (else the URI's host), within `timeout`. Errors are worded as Go's
    /// HTTP client words them (`Post "…": context deadline exceeded`), for Kubernetes'
    /// messages.
    pub async fn post(
        &self,
        uri: &http::Uri,
        server_name: Option<&str>,
        ca: &[CertificateDer<'static>],
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, String> {
        let call = format!("Post {:?}", uri.to_string());
        let client = self
            .client(ca, server_name)
            .map_err(|e| format!("{call}: {e}"))?;
        let request = http::Request::post(uri.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .body(Full::new(body))
            .map_err(|e| format!("{call}: {e}"))?;
        let answer = async {
            let response = client
                .request(request)
                .await
                .map_err(|e| format!("{call}: {}", chain(&e)))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| format!("{call}: reading the answer: {e}"))?
                .to_bytes();
            if !status.is_success() {
                let text = String::from_utf8_lossy(&body[..body.len().min(1024)]).to_string();
                return Err(format!("{call}: the server answered {status}: {text}"));
            }
            Ok(body)
        };
        match tokio::time::timeout(timeout, answer).await {
            Ok(answered) => answered,
            Err(_) => Err(format!("{call}: context deadline exceeded")),
        }
    }

    fn client(
        &self,
        ca: &[CertificateDer<'static>],
        server_name: Option<&str>,
    ) -> Result<HttpsClient, String> {
        let key = ClientKey {
            ca: ca.iter().map(|c| c.as_ref().to_vec()).collect(),
            server_name: server_name.map(str::to_string),
        };
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = pool.get(&key) {
            return Ok(c.clone());
        }
        if ca.is_empty() {
            return Err("the webhook has no caBundle to verify its certificate by".into());
        }
        let mut roots = RootCertStore::empty();
        for c in ca {
            roots
                .add(c.clone())
                .map_err(|e| format!("x509: the caBundle's certificate is unusable: {e}"))?;
        }
        let tls = ClientConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only();
        let https = match server_name {
            Some(name) => {
                let name = ServerName::try_from(name.to_string())
                    .map_err(|e| format!("invalid server name {name:?}: {e}"))?;
                builder
                    .with_server_name_resolver(FixedServerNameResolver::new(name))
                    .enable_http1()
                    .wrap_connector(http)
            }
            None => builder.enable_http1().wrap_connector(http),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE)
            .build(https);
        if pool.len() >= MAX_CLIENTS {
            pool.clear();
        }
        pool.insert(key, client.clone());
        Ok(client)
    }
}

/// An error with its sources, as one line (`…: tls handshake: invalid peer certificate`).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
