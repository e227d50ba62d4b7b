//! The webhook mode, the way Istio injects since Kubernetes 1.14 removed initializers: an
//! HTTPS server the API server calls with an `admission.k8s.io/v1` AdmissionReview for each
//! Pod CREATE, answering with the sidecar as a JSON Patch, and optionally registering itself.
//!
//! - [`admission`]: the answer to an AdmissionReview (pure).
//! - [`server`]: the HTTPS server around it (`POST --webhook-path`, `GET /healthz`).
//! - [`tls`]: its certificate.
//! - [`registration`]: the MutatingWebhookConfiguration, put until the API server takes it.
//! - [`selector`]: `--webhook-object-selector` as a `LabelSelector` object (pure).
//! - [`metrics`]: its counters.

pub mod admission;
pub mod metrics;
pub mod registration;
pub mod selector;
pub mod server;
pub mod tls;

use std::sync::{Arc, Mutex};

use keel_client::Client;
use keel_runtime::{InformerFactory, ObjectKey};
use prometheus_client::registry::Registry;
use tracing::info;

use crate::config::WebhookConfig;
use crate::configmap::SidecarConfigMap;
use crate::{BoxError, Config};

/// Serves the webhook until SIGTERM, then finishes the requests under way.
///
/// Order matters: the server listens before anything is registered to call it, and the
/// registration waits for the ConfigMap to be read, so the first Pods the API server sends
/// find the sidecar known.
pub async fn run(
    config: Config,
    webhook: WebhookConfig,
    configmap: ObjectKey,
) -> Result<(), BoxError> {
    // The files first: a bad certificate fails at once, before anything connects.
    let tls = tls::server_config(&webhook.cert_file, &webhook.key_file)?;
    let configuration = match &webhook.registration {
        Some(r) => {
            let ca_pem = tls::read(&r.ca_file)?;
            tls::certificates(&r.ca_file, &ca_pem)?;
            Some(r.configuration(&ca_pem))
        }
        None => None,
    };
    let client = Client::connect(&config.connect.config()?).await?;
    let factory = InformerFactory::new(client.clone());
    let configmap = SidecarConfigMap::follow(&factory, configmap);
    let mut registry = Registry::default();
    let metrics = metrics::WebhookMetrics::register(&mut registry);
    let side_port = keel_runtime::health::HttpState {
        factory: factory.clone(),
        registry: Arc::new(Mutex::new(registry)),
    };
    let http = keel_runtime::health::serve(config.http_listen, side_port).await?;
    let listener = server::bind(webhook.listen).await?;
    let bound = listener.local_addr()?;
    let router = server::router(
        &webhook.path,
        server::WebhookState {
            configmap: configmap.clone(),
            metrics,
        },
    );
    let serving = tokio::spawn(server::serve(
        listener,
        tls,
        router,
        keel_runtime::termination(),
    ));
    println!(
        "keel-initializer webhook=https://{bound}{} http={http}",
        webhook.path
    );
    info!(%bound, path = %webhook.path, configmap = %configmap.key(), "serving the sidecar webhook");
    factory.start();
    let registering = configuration.map(|configuration| {
        let factory = factory.clone();
        tokio::spawn(async move {
            factory.wait_for_cache_sync().await;
            registration::register(&client, &configuration, registration::backoff()).await;
        })
    });
    let served = serving.await;
    if let Some(r) = registering {
        r.abort();
    }
    factory.shut_down();
    served?;
    Ok(())
}
