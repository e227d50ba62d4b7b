//! The HTTP side port: `/healthz` (the process serves), `/readyz` (every informer's cache is
//! synced, on the active replica and on standbys alike), `/metrics` (Prometheus text).

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use keel_runtime::InformerFactory;
use prometheus_client::registry::Registry;

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
