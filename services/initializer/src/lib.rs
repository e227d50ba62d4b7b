//! keel-initializer: the Envoy sidecar injector of the seeds, in two modes that make the same
//! injection ([`inject::injected_pod`]) from the same ConfigMap (`default/envoy-initializer`,
//! followed by an informer: [`configmap`]).
//!
//! - The initializer (2018, the default; [`initializer`]): for each Pod whose
//!   `metadata.initializers.pending` starts with this initializer's name, it PATCHes the Pod
//!   with the sidecar, removing its own name in the same strategic merge patch. Its patches
//!   are idempotent and carry the Pod's uid, so several replicas may run side by side without
//!   leader election.
//! - The mutating admission webhook (`--webhook`; [`webhook`]), the way Istio injects since
//!   Kubernetes 1.14 removed initializers: an HTTPS server answering each Pod CREATE's
//!   AdmissionReview with the sidecar as a JSON Patch, optionally registering its own
//!   MutatingWebhookConfiguration at start-up. Stateless: replicas behind a Service.
//!
//! Both serve `/healthz`, `/readyz` and `/metrics` on the side port (`--http-listen`).

#![forbid(unsafe_code)]

pub mod config;
pub mod configmap;
pub mod initializer;
pub mod inject;
pub mod webhook;

use keel_runtime::ObjectKey;

pub use config::{Config, Mode};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the mode the flags ask for until SIGTERM.
pub async fn run(config: Config) -> Result<(), BoxError> {
    let configmap: ObjectKey = config
        .configmap
        .parse()
        .map_err(|e| format!("--configmap {:?}: {e}", config.configmap))?;
    match config.mode()? {
        Mode::Initializer => initializer::run(config, configmap).await,
        Mode::Webhook(webhook) => webhook::run(config, *webhook, configmap).await,
    }
}
