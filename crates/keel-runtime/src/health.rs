//! The HTTP side port of a controller binary: `/healthz` (the process serves), `/readyz` (every
//! informer's cache is synced), `/metrics` (Prometheus text of the registry).

use std::sync::{Arc, Mutex};

use crate::InformerFactory;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// Binds `addr` and serves the side port in a task; returns the bound address (port 0 picks
/// one). The side port is plain text, so it listens on loopback only (in a container: its
/// own loopback, where its health check runs): any other address is refused.
pub async fn serve(
    addr: std::net::SocketAddr,
    state: HttpState,
) -> std::io::Result<std::net::SocketAddr> {
    if !addr.ip().is_loopback() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "--http-listen {addr}: the side port serves plain text, so on loopback only \
                 (e.g. 127.0.0.1:{})",
                addr.port()
            ),
        ));
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(%bound, "side port (/healthz, /readyz, /metrics): plain text, on loopback only");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(state)).await {
            tracing::warn!("http side port: {e}");
        }
    });
    Ok(bound)
}

#[derive(Clone)]
pub struct HttpState {
    pub factory: InformerFactory,
    /// Filled while controllers are set up, read on every scrape.
    pub registry: Arc<Mutex<Registry>>,
}

pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn readyz(State(s): State<HttpState>) -> impl IntoResponse {
    if s.factory.has_synced() {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "informer caches are syncing\n",
        )
    }
}

async fn metrics(State(s): State<HttpState>) -> impl IntoResponse {
    let mut out = String::new();
    let encoded = match s.registry.lock() {
        Ok(r) => prometheus_client::encoding::text::encode(&mut out, &r).is_ok(),
        Err(_) => false,
    };
    if !encoded {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain")],
            "metrics unavailable\n".to_string(),
        );
    }
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
}

/// Resolves on SIGTERM or Ctrl-C: when a controller binary should drain and stop.
pub async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
