//! Command-line flags, each also an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// keel-apiserver: a gRPC API over Kubernetes-shaped JSON objects stored in etcd.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "keel-apiserver", version, about)]
pub struct Config {
    /// gRPC listen address (port 0 picks a free port; the chosen one is printed).
    #[arg(long, env = "KEEL_LISTEN", default_value = "127.0.0.1:6443")]
    pub listen: SocketAddr,
    /// etcd endpoints, comma-separated.
    #[arg(
        long,
        env = "KEEL_ETCD_SERVERS",
        default_value = "http://127.0.0.1:2379",
        value_delimiter = ','
    )]
    pub etcd_servers: Vec<String>,
    /// Prefix of every key in etcd.
    #[arg(long, env = "KEEL_ETCD_PREFIX", default_value = "/registry")]
    pub etcd_prefix: String,
    /// HTTP listen address for /healthz, /readyz and /metrics.
    #[arg(long, env = "KEEL_HTTP_LISTEN", default_value = "127.0.0.1:6080")]
    pub http_listen: SocketAddr,
    /// Recent events kept per resource for watchers that resume.
    #[arg(long, env = "KEEL_WATCH_CACHE_SIZE", default_value_t = 10_000)]
    pub watch_cache_size: usize,
    /// How often etcd history is compacted (keeping one interval); 0 disables compaction.
    #[arg(long, env = "KEEL_COMPACTION_INTERVAL", default_value = "5m", value_parser = humantime::parse_duration)]
    pub compaction_interval: Duration,
    /// How often watchers that allow bookmarks receive one.
    #[arg(long, env = "KEEL_WATCH_BOOKMARK_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub watch_bookmark_interval: Duration,
    /// PATCHes that may wait on one object before callers get TooManyRequests.
    #[arg(long, env = "KEEL_MAX_QUEUED_PATCHES", default_value_t = 10_000)]
    pub max_queued_patches: usize,
    /// After SIGTERM, how long to keep serving everything while /readyz answers 503, before the
    /// listener closes: time for a load balancer that probes /readyz to stop sending new
    /// connections here. keel-client needs none (it fails over on GOAWAY and refused connects).
    #[arg(long, env = "KEEL_SHUTDOWN_DELAY", default_value = "0s", value_parser = humantime::parse_duration)]
    pub shutdown_delay: Duration,
    /// The gRPC listener's TLS certificate (PEM); with `--tls-private-key-file`, the listener
    /// serves TLS only.
    #[arg(long, env = "KEEL_TLS_CERT_FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of `--tls-cert-file` (PEM).
    #[arg(long, env = "KEEL_TLS_PRIVATE_KEY_FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// CA whose client certificates the TLS listener accepts (PEM); a client may still connect
    /// without one.
    #[arg(long, env = "KEEL_CLIENT_CA_FILE", requires = "tls_cert_file")]
    pub client_ca_file: Option<PathBuf>,
    /// Bearer tokens, in Kubernetes' static token file format (`token,user,uid,"g1,g2"`).
    /// With this or `--client-ca-file`, every API request must authenticate.
    #[arg(long, env = "KEEL_TOKEN_AUTH_FILE")]
    pub token_auth_file: Option<PathBuf>,
    /// After the listener closes, how long in-flight requests may take to finish.
    #[arg(long, env = "KEEL_SHUTDOWN_GRACE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
}
