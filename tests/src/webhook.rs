//! A real HTTPS admission (or conversion) webhook server for tests: a CA of its own, a
//! certificate for `127.0.0.1`, `localhost` and the Service names tests give it, and a handler
//! the test writes, which sees every review and says what to answer. Every call is recorded.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What the handler answers one call with.
pub struct Reply {
    /// Wait this long first (a webhook slower than its timeout).
    pub delay: Duration,
    pub status: u16,
    pub body: Vec<u8>,
}

impl Reply {
    /// An `AdmissionReview` answering `review` with `response` (its `uid` filled in).
    pub fn review(review: &Value, mut response: Value) -> Reply {
        response["uid"] = review["request"]["uid"].clone();
        Reply::json(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        }))
    }

    /// Allowed, unchanged.
    pub fn allow(review: &Value) -> Reply {
        Reply::review(review, json!({"allowed": true}))
    }

    /// Allowed, with this JSON patch.
    pub fn patch(review: &Value, patch: Value) -> Reply {
        let encoded = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
        Reply::review(
            review,
            json!({"allowed": true, "patchType": "JSONPatch", "patch": encoded}),
        )
    }

    /// Denied with `message` and `code`.
    pub fn deny(review: &Value, message: &str, code: u16) -> Reply {
        Reply::review(
            review,
            json!({"allowed": false, "status": {"message": message, "code": code}}),
        )
    }

    pub fn json(body: &Value) -> Reply {
        Reply {
            delay: Duration::ZERO,
            status: 200,
            body: body.to_string().into_bytes(),
        }
    }

    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

type Handler = dyn Fn(&str, &Value) -> Reply + Send + Sync;

/// A CA and a server certificate it signed, in PEM.
pub struct TestCa {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestCa {
    /// A new CA, and a certificate of it for `127.0.0.1`, `localhost` and `names`.
    pub fn new(names: &[&str]) -> TestCa {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA");
        let issuer = Issuer::new(ca_params, ca_key);
        let mut all = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        all.extend(names.iter().map(|n| n.to_string()));
        let mut params = CertificateParams::new(all).expect("leaf params");
        params.is_ca = IsCa::ExplicitNoCa;
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &issuer).expect("leaf");
        TestCa {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// The CA as a `caBundle` (base64 of its PEM).
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }
}

/// A running webhook server; stops when dropped.
pub struct WebhookServer {
    pub addr: SocketAddr,
    pub ca: TestCa,
    calls: Arc<Mutex<Vec<(String, Value)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WebhookServer {
    /// Starts a server on a free loopback port whose certificate also names `names`;
    /// `handler` answers each call (its path, the review).
    pub async fn start(
        names: &[&str],
        handler: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
    ) -> WebhookServer {
        let ca = TestCa::new(names);
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(ca.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .expect("certificate");
        let key = PrivateKeyDer::from_pem_slice(ca.key_pem.as_bytes()).expect("key");
        let config = ServerConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let calls: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
        let handler: Arc<Handler> = Arc::new(handler);
        let recorded = calls.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, handler, calls) =
                    (acceptor.clone(), handler.clone(), recorded.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (handler, calls) = (handler.clone(), calls.clone());
                        async move {
                            let path = req.uri().path().to_string();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let review: Value =
                                serde_json::from_slice(&body).unwrap_or(Value::Null);
                            calls
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push((path.clone(), review.clone()));
                            let reply = handler(&path, &review);
                            if !reply.delay.is_zero() {
                                tokio::time::sleep(reply.delay).await;
                            }
                            let response = hyper::Response::builder()
                                .status(reply.status)
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(reply.body)))
                                .expect("response");
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        WebhookServer {
            addr,
            ca,
            calls,
            task,
        }
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// Every call so far: its path and review.
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The calls to `path` so far.
    pub fn calls_to(&self, path: &str) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r)
            .collect()
    }
}
