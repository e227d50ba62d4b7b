//! Command-line flags, each also an environment variable.

use std::net::SocketAddr;
use std::time::Duration;

/// keel-controller-manager: the controllers that make declared objects happen.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "keel-controller-manager", version, about)]
pub struct Config {
    /// API servers, comma-separated (requests fail over between them).
    #[arg(
        long,
        env = "KEEL_SERVER",
        default_value = "http://127.0.0.1:6443",
        value_delimiter = ','
    )]
    pub server: Vec<String>,
    /// Controllers to run, comma-separated: replicaset, deployment, podlifecycle,
    /// garbagecollector, namespace; `*` is every one, `-name` leaves one out.
    #[arg(
        long,
        env = "KEEL_CONTROLLERS",
        default_value = "*",
        value_delimiter = ','
    )]
    pub controllers: Vec<String>,
    /// Workers per controller: keys reconciled at once (one key is never reconciled twice at
    /// once).
    #[arg(long, env = "KEEL_WORKERS", default_value_t = 5)]
    pub workers: usize,
    /// This replica's identity in leases; default the host name.
    #[arg(long, env = "KEEL_ID")]
    pub id: Option<String>,
    /// HTTP listen address for /healthz, /readyz and /metrics.
    #[arg(long, env = "KEEL_HTTP_LISTEN", default_value = "127.0.0.1:6090")]
    pub http_listen: SocketAddr,
    /// How long a new Pod stays Pending before the pod-lifecycle controller (keel's stand-in
    /// for a kubelet) makes it Running and Ready.
    #[arg(long, env = "KEEL_POD_START_DELAY", default_value = "1s", value_parser = humantime::parse_duration)]
    pub pod_start_delay: Duration,
    /// How long a Pod marked for deletion keeps running before the pod-lifecycle controller
    /// stops it (its containers end and it is no longer Ready).
    #[arg(long, env = "KEEL_POD_GRACE_PERIOD", default_value = "0s", value_parser = humantime::parse_duration)]
    pub pod_grace_period: Duration,
    /// Elect one active replica through a Lease; the others wait with warm caches.
    #[arg(long, env = "KEEL_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// How long a leader's lease lasts without renewal.
    #[arg(long, env = "KEEL_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = humantime::parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// A leader that has not renewed for this long stops acting.
    #[arg(long, env = "KEEL_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often the lease is renewed, or tried for.
    #[arg(long, env = "KEEL_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = humantime::parse_duration)]
    pub leader_elect_retry_period: Duration,
}

impl Config {
    /// This replica's identity: `--id`, or the host name.
    pub fn identity(&self) -> String {
        if let Some(id) = self.id.as_ref().filter(|s| !s.is_empty()) {
            return id.clone();
        }
        std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| format!("keel-controller-manager-{}", std::process::id()))
    }
}
