//! The HTTP side port: `/healthz` (the process serves), `/readyz` (etcd answers and the watch
//! caches are loaded), `/metrics` (Prometheus text format).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::storage::Store;

#[derive(Clone)]
pub struct HttpState {
    pub store: Arc<Store>,
    pub metrics: Metrics,
    /// Set once the built-in namespaces exist.
    pub bootstrapped: Arc<AtomicBool>,
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
    let deadline = Instant::now() + Duration::from_secs(2);
    if let Err(e) = s.store.etcd().current_revision(deadline).await {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("etcd: {}\n", e.message),
        );
    }
    if !s.store.caches_ready() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "watch caches are loading\n".to_string(),
        );
    }
    if !s.bootstrapped.load(Ordering::Acquire) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "creating the built-in namespaces\n".to_string(),
        );
    }
    (StatusCode::OK, "ok\n".to_string())
}

async fn metrics(State(s): State<HttpState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}
