//! The HTTP side port: `/healthz` (the process serves), `/readyz` (etcd answers and the watch
//! caches are loaded, and the server is not shutting down), `/metrics` (Prometheus text
//! format).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;
use crate::request::Handler;

#[derive(Clone)]
pub struct HttpState {
    pub handler: Arc<Handler>,
    pub metrics: Metrics,
    /// True from the first SIGTERM: unready from then on, whatever else holds.
    pub draining: tokio::sync::watch::Receiver<bool>,
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

async fn metrics(State(s): State<HttpState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}
