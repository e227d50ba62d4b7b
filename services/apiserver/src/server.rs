//! Wiring: builds each layer on the one below it (etcd → storage → registry → request handling
//! → transports), starts the background tasks and the listeners, and shuts down gracefully on
//! SIGTERM (DESIGN.md, "Graceful shutdown and rolling restarts").

use std::sync::Arc;
use std::time::Duration;

use keel_wire::proto::discovery_server::DiscoveryServer;
use keel_wire::proto::objects_server::ObjectsServer;

use tonic::service::interceptor::InterceptedService;

use crate::auth::Authenticator;
use crate::config::{AuthorizationMode, Config};
use crate::etcd::{Etcd, EtcdTls, KeyValue};
use crate::metrics::Metrics;
use crate::registry::{
    Policies, Registry, RegistryRules, Resources, ServiceRanges, policy_resources,
};
use crate::request::{AuditConfig, AuditLog, Handler, Limits, LimitsConfig};
use crate::shutdown::Signals;
use crate::storage::{self, Store, StoreConfig};
use crate::tls::{self, Pems, read};
use crate::transport::{grpc, http, rest};

/// How long the side port may take to close once the gRPC server has drained.
const HTTP_CLOSE_WAIT: Duration = Duration::from_secs(2);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// TLS towards etcd, from `--etcd-cafile` (and the client certificate's files).
fn etcd_tls(config: &Config) -> Result<Option<EtcdTls>, BoxError> {
    let Some(ca) = &config.etcd_cafile else {
        return Ok(None);
    };
    let identity = match (&config.etcd_certfile, &config.etcd_keyfile) {
        (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
        _ => None,
    };
    if let Some(plain) = config
        .etcd_servers
        .iter()
        .find(|s| !s.starts_with("https://"))
    {
        return Err(
            format!("--etcd-cafile is given but the etcd server {plain} is not https://").into(),
        );
    }
    Ok(Some(EtcdTls {
        ca: read(ca)?,
        identity,
    }))
}

/// Whether an etcd URL may be plain text: `http://` to a loopback address or `localhost`.
fn plain_ok(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return url.starts_with("https://");
    };
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = match host.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Runs the API server until SIGTERM or Ctrl-C, then shuts it down: unready at once, serving
/// on for `--shutdown-delay`, then no new connections, GOAWAY on every connection, watches
/// ended, and in-flight requests answered within `--shutdown-grace`. A second signal exits at
/// once.
pub async fn run(config: Config) -> Result<(), BoxError> {
    let metrics = Metrics::new();
    let pems = Pems::read(&config)?;
    // Parsed now, so that a bad certificate or key stops the server before it serves.
    let http_tls = pems.as_ref().map(Pems::http).transpose()?;
    let api_tls = pems.as_ref().map(Pems::api).transpose()?;
    // etcd in plain text: on loopback only, as keel's own listeners.
    if config.etcd_cafile.is_none()
        && let Some(plain) = config.etcd_servers.iter().find(|s| !plain_ok(s))
    {
        return Err(format!(
            "--etcd-servers {plain}: plain text to etcd is allowed on loopback only; give \
             https:// servers and --etcd-cafile"
        )
        .into());
    }
    if pems.is_none() {
        // Plain text: for a developer's machine only, never on a network.
        for (flag, addr) in [
            ("--listen", config.listen),
            ("--http-listen", config.http_listen),
        ] {
            if !addr.ip().is_loopback() {
                return Err(format!(
                    "{flag} {addr}: without --tls-cert-file and --tls-private-key-file the \
                     server speaks plain text, which it serves on loopback only"
                )
                .into());
            }
        }
        tracing::warn!("serving plain text on loopback: no --tls-cert-file");
    }
    let etcd: Arc<dyn KeyValue> = Arc::new(
        Etcd::connect(
            &config.etcd_servers,
            etcd_tls(&config)?.as_ref(),
            metrics.clone(),
        )
        .await?,
    );
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
            event_ttl: config.event_ttl,
        },
        Arc::new(RegistryRules(resources.clone())),
        metrics.clone(),
        shutdown_rx,
    );
    for info in resources.cached_at_start() {
        store.cache(&info);
    }
    let policies = Arc::new(Policies::default());
    let registry = Registry::new(
        resources.clone(),
        store.clone(),
        policies.clone(),
        config.max_queued_patches,
        ServiceRanges {
            cluster_ips: config.service_cluster_ip_range,
            node_ports: config.service_node_port_range,
        },
        metrics.clone(),
    );
    crate::registry::controllers::spawn(&registry, config.service_range_repair_interval);
    match policy_resources().map(|gvr| resources.lookup(Some(&gvr))) {
        [Ok(r), Ok(cr), Ok(b), Ok(cb)] => {
            tokio::spawn(policies.follow(store.clone(), [r, cr, b, cb], registry.bootstrapped()));
        }
        _ => return Err("the RBAC resources are not served".into()),
    }
    if !config.compaction_interval.is_zero() {
        tokio::spawn(storage::compactor::run(
            etcd.clone(),
            config.compaction_interval,
        ));
    }
    let rbac = config.authorization_mode == AuthorizationMode::Rbac;
    let limits = Limits::new(
        LimitsConfig {
            max_read_only: config.max_requests_inflight,
            max_mutating: config.max_mutating_requests_inflight,
            max_watches: config.max_watches,
            user_qps: config.user_qps,
            user_burst: config.user_burst,
        },
        &metrics,
    );
    let audit = match &config.audit_log_path {
        Some(path) => Some(
            AuditLog::open(AuditConfig {
                path: path.clone(),
                max_bytes: match config.audit_log_maxsize {
                    0 => 100,
                    mb => mb,
                }
                .saturating_mul(1024 * 1024),
                max_backups: config.audit_log_maxbackup,
            })
            .map_err(|e| format!("cannot open the audit log {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let sa_key = match &config.service_account_signing_key_file {
        None => None,
        Some(path) => {
            let pem = std::fs::read_to_string(path).map_err(|e| {
                format!("--service-account-signing-key-file {}: {e}", path.display())
            })?;
            Some(Arc::new(keel_token::SigningKey::from_pem(&pem).map_err(
                |e| format!("--service-account-signing-key-file {}: {e}", path.display()),
            )?))
        }
    };
    let audiences = if config.api_audiences.is_empty() {
        vec![config.service_account_issuer.clone()]
    } else {
        config.api_audiences.clone()
    };
    let mut handler = Handler::new(registry.clone(), metrics.clone(), rbac, limits, audit);
    if let Some(key) = &sa_key {
        handler = handler.with_tokens(Arc::new(crate::request::TokenIssuer {
            key: key.clone(),
            issuer: config.service_account_issuer.clone(),
            audiences: audiences.clone(),
        }));
    }
    let handler = Arc::new(handler);

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

    // Every API call authenticates first (gRPC health stays open, as /healthz and /readyz).
    let mut authenticator = Authenticator::new(
        config.token_auth_file.as_deref(),
        config.client_ca_file.is_some(),
    )?;
    if let Some(key) = sa_key {
        let (store, resources) = (store.clone(), resources.clone());
        let lookup: crate::auth::ObjectLookup = Arc::new(move |resource, namespace, name| {
            let gvr = keel_api::GroupVersionResource::new("", "v1", resource);
            let info = resources.lookup(Some(&gvr)).ok()?;
            store
                .cached_object(&info, namespace, name)
                .map(|o| o.map(keel_api::Object::into_value))
        });
        authenticator = authenticator.with_service_accounts(crate::auth::ServiceAccountTokens {
            key,
            issuer: config.service_account_issuer.clone(),
            audiences,
            lookup,
        });
    }
    let authenticator = Arc::new(authenticator);
    let http_state = http::HttpState {
        handler: handler.clone(),
        metrics: metrics.clone(),
        draining: draining_rx,
        auth: authenticator.clone(),
    };
    // The side port outlives the gRPC drain, so that probes see 503, not a refused connection.
    let (http_stop_tx, http_stop) = tokio::sync::watch::channel(false);
    let http_server = tokio::spawn(http::serve(http_listener, http_state, http_tls, http_stop));

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<ObjectsServer<grpc::ObjectsService>>()
        .await;
    let objects = ObjectsServer::new(grpc::ObjectsService {
        handler: handler.clone(),
    })
    .max_decoding_message_size(grpc::MAX_MESSAGE_BYTES)
    .max_encoding_message_size(grpc::MAX_MESSAGE_BYTES);
    let discovery = DiscoveryServer::new(grpc::DiscoveryService {
        handler: handler.clone(),
    });
    let objects = InterceptedService::new(objects, grpc::authenticate(authenticator.clone()));
    let discovery = InterceptedService::new(discovery, grpc::authenticate(authenticator.clone()));
    // Kubernetes' REST dialect on the same port: the routes gRPC's services are added to.
    let routes = tonic::service::Routes::from(rest::router(rest::RestState {
        handler: handler.clone(),
        auth: authenticator,
        discovery: Default::default(),
    }))
    .add_service(health_service)
    .add_service(objects)
    .add_service(discovery);

    let mut grpc_shutdown = shutdown_tx.subscribe();
    // tonic's graceful shutdown, once `grpc_shutdown` fires: the listener is closed (new
    // connects are refused), every connection gets hyper's graceful GOAWAY (first with the
    // last stream id 2^31-1, then, a PING round trip later, with the last stream it took:
    // the client knows any later stream went unprocessed), streams already taken run to
    // their end, and the future resolves once every connection has closed.
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        // kubectl speaks HTTP/1.1 where it has no TLS to negotiate HTTP/2 with.
        .accept_http1(true)
        // Oversized gRPC requests get keel's typed error, checked before tonic decodes them.
        .layer(grpc::MessageLimitLayer {
            limit: grpc::MAX_MESSAGE_BYTES,
        })
        .add_routes(routes);
    // Without TCP_NODELAY, responses larger than a segment wait ~40 ms for delayed ACKs.
    let tcp = tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true));
    let stopped = async move {
        let _ = grpc_shutdown.wait_for(|d| *d).await;
    };
    let mut grpc_server = match api_tls {
        // TLS of keel's own (not tonic's), to offer HTTP/1.1 beside HTTP/2 in ALPN.
        Some(config) => {
            tokio::spawn(router.serve_with_incoming_shutdown(tls::incoming(tcp, config), stopped))
        }
        None => tokio::spawn(router.serve_with_incoming_shutdown(tcp, stopped)),
    };

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

#[cfg(test)]
mod tests {
    use super::plain_ok;

    #[test]
    fn plain_text_to_etcd_only_on_loopback() {
        for ok in [
            "http://127.0.0.1:2379",
            "http://localhost:2379",
            "http://[::1]:2379",
            "https://etcd-0:2379",
        ] {
            assert!(plain_ok(ok), "{ok}");
        }
        for bad in ["http://etcd-0:2379", "http://10.0.0.1:2379", "etcd-0:2379"] {
            assert!(!plain_ok(bad), "{bad}");
        }
    }
}
