//! Wiring: builds each layer on the one below it (etcd → storage → registry → request handling
//! → transports), starts the background tasks and the listeners, and shuts down gracefully on
//! SIGTERM (DESIGN.md, "Graceful shutdown and rolling restarts").

use std::sync::Arc;
use std::time::Duration;

use keel_api::proto::discovery_server::DiscoveryServer;
use keel_api::proto::objects_server::ObjectsServer;

use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use tonic::service::interceptor::InterceptedService;

use crate::auth::Authenticator;
use crate::config::Config;
use crate::etcd::Etcd;
use crate::metrics::Metrics;
use crate::registry::{FinalizerRules, Registry, Resources};
use crate::request::Handler;
use crate::shutdown::Signals;
use crate::storage::{self, Store, StoreConfig};
use crate::transport::{grpc, http};

/// Largest gRPC message decoded. Well above the object limit so that oversized objects get
/// keel's typed `RequestEntityTooLarge` naming the object; still a bound on memory per request.
const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// How long the side port may take to close once the gRPC server has drained.
const HTTP_CLOSE_WAIT: Duration = Duration::from_secs(2);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The gRPC listener's TLS, from the certificate and key files (and the client CA's).
fn tls_config(config: &Config) -> Result<Option<ServerTlsConfig>, BoxError> {
    let (Some(cert), Some(key)) = (&config.tls_cert_file, &config.tls_private_key_file) else {
        return Ok(None);
    };
    let read = |p: &std::path::Path| -> Result<Vec<u8>, BoxError> {
        std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()).into())
    };
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(read(cert)?, read(key)?));
    if let Some(ca) = &config.client_ca_file {
        tls = tls
            .client_ca_root(Certificate::from_pem(read(ca)?))
            .client_auth_optional(true);
    }
    Ok(Some(tls))
}

/// Runs the API server until SIGTERM or Ctrl-C, then shuts it down: unready at once, serving
/// on for `--shutdown-delay`, then no new connections, GOAWAY on every connection, watches
/// ended, and in-flight requests answered within `--shutdown-grace`. A second signal exits at
/// once.
pub async fn run(config: Config) -> Result<(), BoxError> {
    let metrics = Metrics::new();
    let etcd = Etcd::connect(&config.etcd_servers, metrics.clone()).await?;
    // Turns true first on SIGTERM: /readyz and gRPC health answer unready, all else serves.
    let (draining_tx, draining_rx) = tokio::sync::watch::channel(false);
    // Turns true after --shutdown-delay: watches end and the gRPC listener stops accepting.
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

    // From here on SIGTERM is ours to handle (until here its default action ends the process:
    // nothing is served yet, so nothing needs draining).
    let mut signals = Signals::new();
    let grpc_listener = tokio::net::TcpListener::bind(config.listen).await?;
    let http_listener = tokio::net::TcpListener::bind(config.http_listen).await?;
    let grpc_addr = grpc_listener.local_addr()?;
    let http_addr = http_listener.local_addr()?;
    // A line for scripts and tests that start us on port 0.
    println!("keel-apiserver listening grpc={grpc_addr} http={http_addr}");
    tracing::info!(
        %grpc_addr,
        %http_addr,
        tls = config.tls_cert_file.is_some(),
        client_certificates = config.client_ca_file.is_some(),
        etcd = ?config.etcd_servers,
        "keel-apiserver serving"
    );

    let http_state = http::HttpState {
        handler: handler.clone(),
        metrics: metrics.clone(),
        draining: draining_rx,
    };
    // The side port outlives the gRPC drain, so that probes see 503, not a refused connection.
    let (http_stop_tx, mut http_stop) = tokio::sync::watch::channel(false);
    let http_server = tokio::spawn(async move {
        axum::serve(http_listener, http::router(http_state))
            .with_graceful_shutdown(async move {
                let _ = http_stop.wait_for(|d| *d).await;
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
    // Every API call authenticates first (gRPC health stays open, as /healthz and /readyz).
    let authenticator = Arc::new(Authenticator::new(
        config.token_auth_file.as_deref(),
        config.client_ca_file.is_some(),
    )?);
    let objects = InterceptedService::new(objects, grpc::authenticate(authenticator.clone()));
    let discovery = InterceptedService::new(discovery, grpc::authenticate(authenticator));

    let mut grpc_shutdown = shutdown_tx.subscribe();
    // tonic's graceful shutdown, once `grpc_shutdown` fires: the listener is closed (new
    // connects are refused), every connection gets hyper's graceful GOAWAY (first with the
    // last stream id 2^31-1, then, a PING round trip later, with the last stream it took:
    // the client knows any later stream went unprocessed), streams already taken run to
    // their end, and the future resolves once every connection has closed.
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls_config(&config)? {
        builder = builder.tls_config(tls)?;
    }
    let mut grpc_server = tokio::spawn(
        builder
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .add_service(health_service)
            .add_service(objects)
            .add_service(discovery)
            .serve_with_incoming_shutdown(
                // Without TCP_NODELAY, responses larger than a segment wait ~40 ms for delayed
                // ACKs.
                tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true)),
                async move {
                    let _ = grpc_shutdown.wait_for(|d| *d).await;
                },
            ),
    );

    tokio::select! {
        res = &mut grpc_server => {
            // The server stopped by itself (its listener failed): nothing left to drain.
            res??;
            return Ok(());
        }
        () = signals.next() => {}
    }

    // 1. Unready, first of all, while everything still serves.
    draining_tx.send_replace(true);
    health_reporter
        .set_not_serving::<ObjectsServer<grpc::ObjectsService>>()
        .await;
    tracing::info!(
        delay = ?config.shutdown_delay,
        "shutting down: unready now, serving on for the shutdown delay"
    );
    // 2. Serve on, unready, so that load balancers probing /readyz stop sending new
    //    connections here before the listener closes.
    tokio::select! {
        () = tokio::time::sleep(config.shutdown_delay) => {}
        () = signals.next() => return Err("a second signal during the shutdown delay".into()),
    }
    // 3. Stop accepting, GOAWAY, end the watches (clients resume them elsewhere from their
    //    last resourceVersion), and answer what is in flight.
    shutdown_tx.send_replace(true);
    tracing::info!(
        grace = ?config.shutdown_grace,
        "closing the listener and the watches, draining requests"
    );
    tokio::select! {
        res = tokio::time::timeout(config.shutdown_grace, &mut grpc_server) => match res {
            Ok(res) => res??,
            Err(_) => tracing::warn!("requests still running after the shutdown grace; exiting"),
        },
        () = signals.next() => return Err("a second signal while draining requests".into()),
    }
    // 4. The side port last.
    http_stop_tx.send_replace(true);
    let _ = tokio::time::timeout(HTTP_CLOSE_WAIT, http_server).await;
    tracing::info!("shut down");
    Ok(())
}
