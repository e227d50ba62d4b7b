//! Wiring: builds each layer on the one below it (etcd → storage → registry → request handling
//! → transports), starts the background tasks and the listeners, and shuts down on SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use keel_api::proto::discovery_server::DiscoveryServer;
use keel_api::proto::objects_server::ObjectsServer;

use crate::config::Config;
use crate::etcd::Etcd;
use crate::metrics::Metrics;
use crate::registry::{FinalizerRules, Registry, Resources};
use crate::request::Handler;
use crate::storage::{self, Store, StoreConfig};
use crate::transport::{grpc, http};

/// Largest gRPC message decoded. Well above the object limit so that oversized objects get
/// keel's typed `RequestEntityTooLarge` naming the object; still a bound on memory per request.
const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

async fn shutdown_signal() {
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

/// Runs the API server until SIGTERM or Ctrl-C.
pub async fn run(config: Config) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let metrics = Metrics::new();
    let etcd = Etcd::connect(&config.etcd_servers, metrics.clone()).await?;
    // Watches end when this turns true, and the listeners stop accepting.
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let resources = Arc::new(Resources::builtin());
    let store = Store::new(
        etcd.clone(),
        StoreConfig {
            prefix: config.etcd_prefix.clone(),
            watch_cache_size: config.watch_cache_size,
            bookmark_interval: config.watch_bookmark_interval,
        },
        Arc::new(FinalizerRules),
        metrics.clone(),
        shutdown_rx,
    );
    for info in resources.all() {
        store.cache(&info);
    }
    let registry = Registry::new(resources, store, config.max_queued_patches, metrics.clone());
    {
        let registry = registry.clone();
        tokio::spawn(async move { registry.bootstrap().await });
    }
    tokio::spawn(registry.clone().enforce_initializer_timeouts());
    tokio::spawn(registry.clone().serve_custom_resources());
    if !config.compaction_interval.is_zero() {
        tokio::spawn(storage::compactor::run(
            etcd.clone(),
            config.compaction_interval,
        ));
    }
    let handler = Arc::new(Handler::new(registry, metrics.clone()));

    let grpc_listener = tokio::net::TcpListener::bind(config.listen).await?;
    let http_listener = tokio::net::TcpListener::bind(config.http_listen).await?;
    let grpc_addr = grpc_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;
    // A line for scripts and tests that start us on port 0.
    println!("keel-apiserver listening grpc={grpc_addr} http={http_addr}");
    tracing::info!(%grpc_addr, %http_addr, etcd = ?config.etcd_servers, "keel-apiserver serving");

    let http_state = http::HttpState {
        handler: handler.clone(),
        metrics: metrics.clone(),
    };
    let mut http_shutdown = shutdown_tx.subscribe();
    let http_server = tokio::spawn(async move {
        axum::serve(http_listener, http::router(http_state))
            .with_graceful_shutdown(async move {
                let _ = http_shutdown.wait_for(|d| *d).await;
            })
            .await
    });

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<ObjectsServer<grpc::ObjectsService>>()
        .await;
    let objects = ObjectsServer::new(grpc::ObjectsService {
        handler: handler.clone(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let discovery = DiscoveryServer::new(grpc::DiscoveryService { handler });

    let mut grpc_shutdown = shutdown_tx.subscribe();
    let grpc_server = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .add_service(health_service)
        .add_service(objects)
        .add_service(discovery)
        .serve_with_incoming_shutdown(
            // Without TCP_NODELAY, responses larger than a segment wait ~40 ms for delayed ACKs.
            tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
            async move {
                let _ = grpc_shutdown.wait_for(|d| *d).await;
            },
        );
    let mut grpc_server = std::pin::pin!(grpc_server);
    tokio::select! {
        res = &mut grpc_server => res?,
        _ = shutdown_signal() => {
            tracing::info!("shutting down: closing watches and draining requests");
            health_reporter.set_not_serving::<ObjectsServer<grpc::ObjectsService>>().await;
            let _ = shutdown_tx.send(true);
            if tokio::time::timeout(config.shutdown_grace, &mut grpc_server).await.is_err() {
                tracing::warn!("requests still running after the grace period; exiting");
            }
        }
    }
    let _ = shutdown_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), http_server).await;
    Ok(())
}
