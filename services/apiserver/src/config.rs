//! Command-line flags, each also an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::registry::allocator::{IpRange, PortRange};

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
    /// CA of etcd's serving certificate (PEM): etcd is reached over TLS (`https://` servers).
    #[arg(long, env = "KEEL_ETCD_CAFILE")]
    pub etcd_cafile: Option<PathBuf>,
    /// The client certificate (PEM) this server shows etcd (`--client-cert-auth`).
    #[arg(
        long,
        env = "KEEL_ETCD_CERTFILE",
        requires_all = ["etcd_keyfile", "etcd_cafile"]
    )]
    pub etcd_certfile: Option<PathBuf>,
    /// The private key of `--etcd-certfile` (PEM).
    #[arg(long, env = "KEEL_ETCD_KEYFILE", requires = "etcd_certfile")]
    pub etcd_keyfile: Option<PathBuf>,
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
    /// How long a core Event lives after its last write; etcd leases delete it then
    /// (Kubernetes' `--event-ttl`). 0 keeps Events forever.
    #[arg(long, env = "KEEL_EVENT_TTL", default_value = "1h", value_parser = humantime::parse_duration)]
    pub event_ttl: Duration,
    /// PATCHes that may wait on one object before callers get TooManyRequests.
    #[arg(long, env = "KEEL_MAX_QUEUED_PATCHES", default_value_t = 10_000)]
    pub max_queued_patches: usize,
    /// The IPv4 range Service cluster IPs are allocated from: a CIDR of at most a /12 and at
    /// least 8 addresses (IPv6 is refused). Every API server must be given the same.
    #[arg(long, env = "KEEL_SERVICE_CLUSTER_IP_RANGE", default_value = "10.96.0.0/12", value_parser = cluster_ip_range)]
    pub service_cluster_ip_range: IpRange,
    /// The range Service node ports are allocated from: `30000-32767`, `30000+2767` or one
    /// port. Every API server must be given the same.
    #[arg(long, env = "KEEL_SERVICE_NODE_PORT_RANGE", default_value = "30000-32767", value_parser = node_port_range)]
    pub service_node_port_range: PortRange,
    /// How often the Service ranges are rebuilt from the Services (a value no Service holds is
    /// freed once three repairs in a row found it so; one a Service holds is marked).
    #[arg(long, env = "KEEL_SERVICE_RANGE_REPAIR_INTERVAL", default_value = "3m", value_parser = positive_duration)]
    pub service_range_repair_interval: Duration,
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
    /// The private key (PKCS#8 PEM, RSA or P-256) ServiceAccount tokens are signed with
    /// (TokenRequest, `kubectl create token`) and checked against. Every API server of a
    /// cluster must have the same; the controller-manager needs it too for the tokens it keeps
    /// in Secrets.
    #[arg(long, env = "KEEL_SERVICE_ACCOUNT_SIGNING_KEY_FILE")]
    pub service_account_signing_key_file: Option<PathBuf>,
    /// The `iss` of the tokens issued, and of the OpenID discovery document.
    #[arg(long, env = "KEEL_SERVICE_ACCOUNT_ISSUER", default_value = keel_token::DEFAULT_ISSUER)]
    pub service_account_issuer: String,
    /// What tokens are meant for when a TokenRequest names no audience, and what a token must
    /// be meant for to authenticate here; the issuer when empty.
    #[arg(long, env = "KEEL_API_AUDIENCES", value_delimiter = ',')]
    pub api_audiences: Vec<String>,
    /// How authenticated requests are authorized: `RBAC` (Roles, ClusterRoles and their
    /// bindings; the group `system:masters` may do everything) or `AlwaysAllow`. Without
    /// authentication there is no user to authorize and every request is allowed.
    #[arg(
        long,
        env = "KEEL_AUTHORIZATION_MODE",
        value_enum,
        default_value = "RBAC"
    )]
    pub authorization_mode: AuthorizationMode,
    /// Get and List requests in flight at once; past it clients get TooManyRequests (retry
    /// after 1 s). 0: no limit.
    #[arg(long, env = "KEEL_MAX_REQUESTS_INFLIGHT", default_value_t = 400)]
    pub max_requests_inflight: usize,
    /// Create, Update, Patch and Delete requests in flight at once; past it clients get
    /// TooManyRequests (retry after 1 s). 0: no limit.
    #[arg(
        long,
        env = "KEEL_MAX_MUTATING_REQUESTS_INFLIGHT",
        default_value_t = 200
    )]
    pub max_mutating_requests_inflight: usize,
    /// Watches open at once (they do not count as requests in flight). 0: no limit.
    #[arg(long, env = "KEEL_MAX_WATCHES", default_value_t = 10_000)]
    pub max_watches: usize,
    /// Requests per second each authenticated user may make on average (a token bucket per
    /// user and replica; the group `system:masters` is exempt). 0: no limit.
    #[arg(long, env = "KEEL_USER_QPS", default_value_t = 1000.0, value_parser = qps)]
    pub user_qps: f64,
    /// Requests a user may make at once above `--user-qps`.
    #[arg(long, env = "KEEL_USER_BURST", default_value_t = 2000)]
    pub user_burst: u32,
    /// Append a JSON line per request (user, verb, resource, object, result code, latency) to
    /// this file.
    #[arg(long, env = "KEEL_AUDIT_LOG_PATH")]
    pub audit_log_path: Option<PathBuf>,
    /// Size in megabytes at which the audit log is rotated (to `<path>.1`, ...); 0: 100.
    #[arg(long, env = "KEEL_AUDIT_LOG_MAXSIZE", default_value_t = 100)]
    pub audit_log_maxsize: u64,
    /// Rotated audit logs kept (0: all of them, as in Kubernetes).
    #[arg(long, env = "KEEL_AUDIT_LOG_MAXBACKUP", default_value_t = 10)]
    pub audit_log_maxbackup: usize,
    /// After the listener closes, how long in-flight requests may take to finish.
    #[arg(long, env = "KEEL_SHUTDOWN_GRACE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
}

/// `--authorization-mode`, named as Kubernetes names its modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthorizationMode {
    #[value(name = "RBAC")]
    Rbac,
    #[value(name = "AlwaysAllow")]
    AlwaysAllow,
}

/// `--service-cluster-ip-range`.
fn cluster_ip_range(s: &str) -> Result<IpRange, String> {
    IpRange::parse(s).map_err(|e| e.to_string())
}

/// `--service-node-port-range`.
fn node_port_range(s: &str) -> Result<PortRange, String> {
    PortRange::parse(s).map_err(|e| e.to_string())
}

/// A duration other than zero.
fn positive_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be more than 0".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// `--user-qps`: a rate, finite and not negative.
fn qps(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(q) if q.is_finite() && q >= 0.0 => Ok(q),
        _ => Err(format!(
            "{s:?} is not a rate: a number of requests per second, 0 or more"
        )),
    }
}
