//! The HTTP side port: `/healthz` (the process serves), `/readyz` (etcd answers and the watch
//! caches are loaded, and the server is not shutting down), open to anyone as in Kubernetes;
//! `/metrics` (Prometheus text format), for authenticated users when authentication is on.
//! Over TLS with the gRPC listener's certificate when it has one.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Extension, Router};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;

use crate::auth::Authenticator;
use crate::metrics::Metrics;
use crate::request::Handler;

/// A TLS handshake on the side port must be done within this, and a request's headers too.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections the side port serves at once (probes and scrapers need a handful); past it new
/// ones are closed at once.
const MAX_CONNECTIONS: usize = 256;

#[derive(Clone)]
pub struct HttpState {
    pub handler: Arc<Handler>,
    pub metrics: Metrics,
    /// True from the first SIGTERM: unready from then on, whatever else holds.
    pub draining: watch::Receiver<bool>,
    /// Who may read `/metrics`.
    pub auth: Arc<Authenticator>,
}

/// The verified client certificate of a TLS connection (DER), if it showed one.
#[derive(Clone)]
struct PeerCertificate(Option<Vec<u8>>);

/// Serves the side port until `stop` turns true: plain text, or TLS with `tls`.
pub async fn serve(
    listener: TcpListener,
    state: HttpState,
    tls: Option<Arc<ServerConfig>>,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let router = router(state);
    let Some(tls) = tls else {
        return axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|d| *d).await;
            })
            .await;
    };
    let acceptor = TlsAcceptor::from(tls);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|d| *d) => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors, say: wait rather than spin.
                tracing::warn!(error = %e, "side port: accept failed");
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
            let Ok(Ok(stream)) =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
            else {
                return; // a failed handshake: rustls has told the client why
            };
            let peer = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.to_vec());
            let service = router.layer(Extension(PeerCertificate(peer)));
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT)
                .serve_connection(
                    hyper_util::rt::TokioIo::new(stream),
                    hyper_util::service::TowerToHyperService::new(service),
                );
            let _ = watcher.watch(connection).await;
        });
    }
    // No new connections while those open finish.
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn readyz(State(s): State<HttpState>) -> impl IntoResponse {
    if *s.draining.borrow() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down\n".to_string(),
        );
    }
    match s.handler.readiness().await {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

async fn metrics(
    State(s): State<HttpState>,
    peer: Option<Extension<PeerCertificate>>,
    headers: HeaderMap,
) -> axum::response::Response {
    if s.auth.enabled() {
        // A header that is not text cannot be a bearer token: refused as malformed.
        let authorization = headers
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or_default());
        let certificate = peer.and_then(|Extension(PeerCertificate(c))| c);
        if let Err(e) = s.auth.authenticate(authorization, certificate.as_deref()) {
            return (StatusCode::UNAUTHORIZED, format!("{}\n", e.message)).into_response();
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
        .into_response()
}
