//! Command-line flags, each also an environment variable.

use std::net::SocketAddr;

/// keel-initializer: injects the Envoy sidecar into new Pods before anyone sees them.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "keel-initializer", version, about)]
pub struct Config {
    #[command(flatten)]
    pub connect: keel_client::ConnectFlags,
    /// This initializer's name: it acts on Pods whose `metadata.initializers.pending` starts
    /// with it.
    #[arg(
        long,
        env = "KEEL_INITIALIZER_NAME",
        default_value = "envoy.initializer.kubernetes.io"
    )]
    pub name: String,
    /// The ConfigMap (namespace/name) whose `data.config` holds the containers and volumes to
    /// inject.
    #[arg(
        long,
        env = "KEEL_INITIALIZER_CONFIGMAP",
        default_value = "default/envoy-initializer"
    )]
    pub configmap: String,
    /// Pods initialized at once.
    #[arg(long, env = "KEEL_WORKERS", default_value_t = 5)]
    pub workers: usize,
    /// HTTP listen address for /healthz, /readyz and /metrics.
    #[arg(long, env = "KEEL_HTTP_LISTEN", default_value = "127.0.0.1:6091")]
    pub http_listen: SocketAddr,
}
