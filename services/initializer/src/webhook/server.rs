//! The webhook server: HTTPS (rustls) on `--webhook-listen`, answering `POST <--webhook-path>`
//! with [`admission::review`] and `GET /healthz` with `ok`. The I/O shell around the pure
//! answer: body limit, TLS, connection bounds, logs and metrics.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tracing::{debug, info, warn};

use crate::configmap::SidecarConfigMap;
use crate::webhook::admission::{self, Answer, Outcome};
use crate::webhook::metrics::{ErrorReason, WebhookMetrics};

/// Request bodies past this are refused (413) before they are read whole. An API server sends
/// a Pod of at most ~1.5 MiB (etcd's default request limit) once in a CREATE's review, so
/// 3 MiB leaves room for the review around it and no room for abuse.
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// A TLS handshake must be done within this, and a request's headers too.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// After SIGTERM, requests under way get this long to finish before the server stops anyway
/// (a client trickling a body in must not hold the process up).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);
/// Connections served at once (API servers keep a few each); past it new ones are closed at
/// once, and the API server applies the webhook's failure policy.
const MAX_CONNECTIONS: usize = 1024;

/// What the handlers share.
#[derive(Clone)]
pub struct WebhookState {
    /// Where the sidecar comes from: the same informer-fed ConfigMap the initializer reads.
    pub configmap: SidecarConfigMap,
    pub metrics: WebhookMetrics,
}

/// The routes: `POST path` (AdmissionReviews) and `GET /healthz`. `path` starts with `/` and
/// is not `/healthz` ([`crate::config::Config::mode`] checks both).
pub fn router(path: &str, state: WebhookState) -> Router {
    Router::new()
        .route(path, post(admit))
        .route("/healthz", get(|| async { "ok\n" }))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

async fn admit(State(s): State<WebhookState>, body: Bytes) -> Response {
    s.metrics.request();
    if !s.configmap.has_synced() {
        // Answering "admitted unchanged" now would let Pods in without the sidecar while the
        // process starts; an error lets the failure policy decide.
        s.metrics.error(ErrorReason::NotReady);
        let why = format!(
            "the sidecar's ConfigMap {} has not been read yet; try again",
            s.configmap.key()
        );
        return (StatusCode::SERVICE_UNAVAILABLE, why + "\n").into_response();
    }
    match admission::review(&body, || s.configmap.sidecar()) {
        Ok(answer) => answered(&s.metrics, &answer),
        Err(e) if e.is_bad_request() => {
            warn!("refused a request: {e}");
            s.metrics.error(ErrorReason::Malformed);
            (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response()
        }
        Err(e) => failed(&s.metrics, &e),
    }
}

/// The AdmissionReview as JSON, after logging and counting what it does.
fn answered(metrics: &WebhookMetrics, answer: &Answer) -> Response {
    let bytes = match serde_json::to_vec(&answer.review) {
        Ok(b) => b,
        Err(e) => return failed(metrics, &e),
    };
    let pod = &answer.object;
    match &answer.outcome {
        Outcome::Injected { operations } => info!(%pod, operations, "injected the sidecar"),
        Outcome::AlreadyInjected => info!(%pod, "has the sidecar already; admitted unchanged"),
        Outcome::NoSidecar(why) => warn!(%pod, "{why}; admitted without the sidecar"),
        Outcome::NotAPodCreate => debug!(object = %pod, "not a Pod CREATE; admitted unchanged"),
    }
    metrics.outcome(&answer.outcome);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response()
}

fn failed(metrics: &WebhookMetrics, e: &dyn std::fmt::Display) -> Response {
    warn!("cannot answer a request: {e}");
    metrics.error(ErrorReason::Internal);
    (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
}

/// Binds the webhook's address (port 0 picks one): the address is known, and taken, before
/// anything is registered to call it.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("--webhook-listen {addr}: {e}")))
}

/// Serves `router` over TLS on `listener` until `shutdown` completes; then stops accepting
/// and waits for the requests under way (at most [`DRAIN_TIMEOUT`]).
pub async fn serve(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    router: Router,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors, say: wait rather than spin.
                warn!(error = %e, "webhook: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            continue; // dropped: closed
        };
        let (acceptor, router, watcher) = (acceptor.clone(), router.clone(), graceful.watcher());
        tokio::spawn(async move {
            let _permit = permit;
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return debug!(error = %e, "webhook: TLS handshake failed"),
                Err(_) => return debug!("webhook: TLS handshake timed out"),
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT)
                .serve_connection(
                    hyper_util::rt::TokioIo::new(stream),
                    hyper_util::service::TowerToHyperService::new(router),
                );
            if let Err(e) = watcher.watch(connection).await {
                debug!(error = %e, "webhook: connection ended");
            }
        });
    }
    // No new connections while those open finish.
    drop(listener);
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        warn!("webhook: connections still open after {DRAIN_TIMEOUT:?}; stopping anyway");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use base64::Engine;
    use http_body_util::{BodyExt, Full};
    use keel_runtime::{ObjectKey, Store};
    use prometheus_client::registry::Registry;
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    use serde_json::{Value, json};
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::ServerName;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tower::ServiceExt;

    use crate::inject::{self, Sidecar};

    const CONFIG: &str = "\
containers:
  - name: envoy
    image: lyft/envoy:845747db88f102c0fd262ab234308e9e22f693a1
    command: [\"/usr/local/bin/envoy\"]
volumes:
  - name: envoy-conf
    configMap:
      name: envoy
";

    fn configmap_key() -> ObjectKey {
        ObjectKey::new("default", "envoy-initializer")
    }

    /// A store as the informer fills it: synced, holding the ConfigMap when `with_configmap`.
    fn configmap(with_configmap: bool) -> SidecarConfigMap {
        let store = Store::new();
        if with_configmap {
            store
                .insert(Arc::new(json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "envoy-initializer", "namespace": "default"},
                    "data": {"config": CONFIG},
                })))
                .unwrap();
        }
        store.set_synced();
        SidecarConfigMap::new(configmap_key(), store)
    }

    fn state(configmap: SidecarConfigMap) -> WebhookState {
        WebhookState {
            configmap,
            metrics: WebhookMetrics::register(&mut Registry::default()),
        }
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "myapp-pod", "namespace": "default"},
            "spec": {"containers": [{"name": "myapp-container", "image": "busybox"}]}
        })
    }

    fn pod_create(uid: &str, pod: &Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "default",
                "operation": "CREATE",
                "object": pod,
            }
        }))
        .unwrap()
    }

    /// A CA, and a serving certificate it signed for localhost and 127.0.0.1 (not a CA
    /// itself: rustls refuses CA certificates as end entities), written as PEM files.
    struct Certs {
        dir: tempfile::TempDir,
        ca_pem: String,
    }

    impl Certs {
        fn new() -> Certs {
            let ca_key = KeyPair::generate().unwrap();
            let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            ca.distinguished_name
                .push(DnType::CommonName, "webhook-test-ca");
            ca.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
            let issuer = Issuer::new(ca, ca_key);
            let key = KeyPair::generate().unwrap();
            let mut leaf =
                CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                    .unwrap();
            leaf.is_ca = IsCa::ExplicitNoCa;
            leaf.distinguished_name.push(DnType::CommonName, "webhook");
            leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            let cert = leaf.signed_by(&key, &issuer).unwrap();
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
            std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
            Certs { dir, ca_pem }
        }

        fn server_config(&self) -> Arc<ServerConfig> {
            let (cert, key) = (
                self.dir.path().join("tls.crt"),
                self.dir.path().join("tls.key"),
            );
            crate::webhook::tls::server_config(&cert, &key).unwrap()
        }

        /// A TLS client that trusts only the test CA.
        fn connector(&self) -> TlsConnector {
            let mut roots = rustls::RootCertStore::empty();
            for c in rustls::pki_types::CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
                roots.add(c.unwrap()).unwrap();
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            TlsConnector::from(Arc::new(config))
        }
    }

    /// One request over a new HTTPS connection to `localhost` at `addr`.
    async fn https(
        connector: &TlsConnector,
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(StatusCode, Bytes), Box<dyn std::error::Error + Send + Sync>> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let tls = connector
            .connect(ServerName::try_from("localhost")?, tcp)
            .await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
        tokio::spawn(connection);
        let request = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "localhost")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        Ok((status, response.into_body().collect().await?.to_bytes()))
    }

    #[tokio::test]
    async fn the_https_server_answers_an_admission_review_with_the_sidecar_patch() {
        let certs = Certs::new();
        let state = state(configmap(true));
        let metrics = state.metrics.clone();
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            certs.server_config(),
            router("/inject", state),
            async {
                let _ = stopped.await;
            },
        ));
        let connector = certs.connector();

        // Ready when /healthz answers, within a deadline.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match https(&connector, addr, "GET", "/healthz", Vec::new()).await {
                Ok((StatusCode::OK, body)) => {
                    assert_eq!(&body[..], b"ok\n");
                    break;
                }
                other => assert!(
                    tokio::time::Instant::now() < deadline,
                    "the server is not ready: {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let pod = pod();
        let (status, body) = https(&connector, addr, "POST", "/inject", pod_create("u-1", &pod))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        let review: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(review["kind"], "AdmissionReview");
        assert_eq!(review["response"]["uid"], "u-1");
        assert_eq!(review["response"]["allowed"], true);
        assert_eq!(review["response"]["patchType"], "JSONPatch");
        let patch = base64::engine::general_purpose::STANDARD
            .decode(review["response"]["patch"].as_str().unwrap())
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &patch.0).unwrap();
        let sidecar = Sidecar::from_config(CONFIG).unwrap();
        assert_eq!(patched, inject::injected_pod(&pod, &sidecar));

        let (status, body) = https(&connector, addr, "POST", "/inject", b"{\"kind\":".to_vec())
            .await
            .unwrap();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            String::from_utf8_lossy(&body).starts_with("the body is not an AdmissionReview"),
            "{body:?}"
        );
        assert_eq!(metrics.requests(), 2);
        assert_eq!(metrics.injections(), 1);
        assert_eq!(metrics.errors(ErrorReason::Malformed), 1);

        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the server stops")
            .unwrap();
    }

    async fn call(router: Router, method: &str, path: &str, body: Vec<u8>) -> (StatusCode, Bytes) {
        let request = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .body(axum::body::Body::from(body))
            .unwrap();
        let response = router.oneshot(request).await.unwrap();
        let status = response.status();
        (
            status,
            response.into_body().collect().await.unwrap().to_bytes(),
        )
    }

    #[tokio::test]
    async fn before_the_configmap_is_read_the_webhook_answers_503() {
        let unsynced = SidecarConfigMap::new(configmap_key(), Store::new());
        let state = state(unsynced);
        let metrics = state.metrics.clone();
        let (status, body) = call(
            router("/inject", state),
            "POST",
            "/inject",
            pod_create("u", &pod()),
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(String::from_utf8_lossy(&body).contains("default/envoy-initializer"));
        assert_eq!(metrics.errors(ErrorReason::NotReady), 1);
    }

    #[tokio::test]
    async fn without_the_configmap_pods_are_admitted_unchanged() {
        let (status, body) = call(
            router("/inject", state(configmap(false))),
            "POST",
            "/inject",
            pod_create("u-2", &pod()),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let review: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(review["response"], json!({"uid": "u-2", "allowed": true}));
    }

    #[tokio::test]
    async fn bodies_past_the_limit_are_refused_and_only_post_is_served() {
        let router = router("/inject", state(configmap(true)));
        let (status, _) = call(router.clone(), "POST", "/inject", vec![b' '; MAX_BODY + 1]).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        let (status, _) = call(router.clone(), "GET", "/inject", Vec::new()).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        let (status, _) = call(router, "POST", "/other", Vec::new()).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
}
