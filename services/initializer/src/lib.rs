//! keel-initializer: the Envoy sidecar injector of the seeds. For each Pod whose
//! `metadata.initializers.pending` starts with this initializer's name ([`initializer`]), it
//! reads the `envoy-initializer` ConfigMap (followed by an informer: [`configmap`]) and PATCHes
//! the Pod with the sidecar, removing its own name in the same patch ([`inject`]). Its patches
//! are idempotent and carry the Pod's uid, so several replicas may run side by side without
//! leader election.

#![forbid(unsafe_code)]

pub mod config;
pub mod configmap;
pub mod initializer;
pub mod inject;

use keel_runtime::ObjectKey;

pub use config::Config;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs until SIGTERM, then drains in-flight Pods.
pub async fn run(config: Config) -> Result<(), BoxError> {
    let configmap: ObjectKey = config
        .configmap
        .parse()
        .map_err(|e| format!("--configmap {:?}: {e}", config.configmap))?;
    initializer::run(config, configmap).await
}
