//! `webhook-server`: admission webhooks for `bench/webhooks.sh`, over HTTPS with a given
//! certificate. `/mutate` allows every object with a JSON patch that annotates it
//! (`bench.keel.dev/mutated`); `/validate` allows it; `/healthz` answers 200. Its own cost is
//! small beside the API server's: one JSON parse and a short answer per call.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The largest review read.
const MAX_BODY: usize = 4 << 20;

/// Serves until the process ends.
pub async fn serve(listen: SocketAddr, cert: &Path, key: &Path) -> Result<(), String> {
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_slice(&read(key)?)
        .map_err(|e| format!("{}: {e}", key.display()))?;
    let config = ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| e.to_string())?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("{listen}: {e}"))?;
    eprintln!("webhook server on https://{listen} (/mutate, /validate)");
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                let path = req.uri().path().to_string();
                let body = Limited::new(req.into_body(), MAX_BODY)
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let (status, answer) = answer(&path, &body);
                hyper::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Full::new(answer))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

/// The status and body answering a call to `path` with `body`.
fn answer(path: &str, body: &[u8]) -> (u16, Bytes) {
    if path == "/healthz" {
        return (200, Bytes::from_static(b"ok"));
    }
    let Ok(review) = serde_json::from_slice::<Value>(body) else {
        return (400, Bytes::from_static(b"not an AdmissionReview"));
    };
    let request = &review["request"];
    let mut response = json!({"uid": request["uid"], "allowed": true});
    if path == "/mutate" {
        let has = request["object"]["metadata"]["annotations"].is_object();
        let patch = if has {
            json!([{"op": "add", "path": "/metadata/annotations/bench.keel.dev~1mutated", "value": "true"}])
        } else {
            json!([{"op": "add", "path": "/metadata/annotations", "value": {"bench.keel.dev/mutated": "true"}}])
        };
        response["patchType"] = json!("JSONPatch");
        response["patch"] =
            json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
    }
    let out = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
    (200, Bytes::from(out.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutate_annotates_and_validate_allows() {
        let review = json!({"request": {"uid": "u", "object": {"metadata": {"name": "a"}}}});
        let body = review.to_string();
        let (status, out) = answer("/mutate", body.as_bytes());
        assert_eq!(status, 200);
        let out: Value = serde_json::from_slice(&out).unwrap_or_default();
        assert_eq!(out["response"]["uid"], "u");
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        let (_, out) = answer("/validate", body.as_bytes());
        let out: Value = serde_json::from_slice(&out).unwrap_or_default();
        assert_eq!(out["response"]["allowed"], true);
        assert!(out["response"]["patch"].is_null());
        assert_eq!(answer("/validate", b"garbage").0, 400);
    }
}
