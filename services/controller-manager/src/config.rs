//! Command-line flags, each also an environment variable.

use std::net::SocketAddr;
use std::time::Duration;

/// keel-controller-manager: the controllers that make declared objects happen.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "keel-controller-manager",
    version,
    about,
    args_override_self = true
)]
pub struct Config {
    #[command(flatten)]
    pub connect: keel_client::ConnectFlags,
    /// Controllers to run, comma-separated: replicaset, deployment, podlifecycle,
    /// garbagecollector, namespace, network, clusterroleaggregation, serviceaccount, job,
    /// statefulset, daemonset, simulatednodes, cronjob, endpoints, serviceaccount-token;
    /// `*` is every one, `-name` leaves one out.
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
    /// How long the containers of a Pod that restarts `Never` or `OnFailure` run before they
    /// exit, unless its `keel.dev/run-time` annotation says otherwise.
    #[arg(long, env = "KEEL_POD_RUN_TIME", default_value = "1s", value_parser = humantime::parse_duration)]
    pub pod_run_time: Duration,
    /// The network Pods get their addresses from: split into a block per shard, whose holder
    /// gives each of its Pods the lowest free address, as a node's IPAM does.
    #[arg(long, env = "KEEL_POD_CIDR", default_value = "10.244.0.0/16")]
    pub pod_cidr: String,
    /// How long a Pod marked for deletion keeps running before the pod-lifecycle controller
    /// stops it (its containers end and it is no longer Ready).
    #[arg(long, env = "KEEL_POD_GRACE_PERIOD", default_value = "0s", value_parser = humantime::parse_duration)]
    pub pod_grace_period: Duration,
    /// Register this many simulated Nodes (`keel-node-0`, ...), Ready, with heartbeats
    /// (Leases in `kube-node-lease`): what DaemonSets run on. 0: none.
    #[arg(long, env = "KEEL_SIMULATED_NODES", default_value_t = 0)]
    pub simulated_nodes: u32,
    /// For tests and demonstrations: the CronJob controller's clock runs this many times
    /// faster than real time from the moment it starts (60: a schedule's minute passes every
    /// second). 1 is real time.
    #[arg(long, env = "KEEL_CRONJOB_TIME_SCALE", default_value_t = 1)]
    pub cronjob_time_scale: u32,
    /// The API servers' `--service-account-signing-key-file`: the token controller signs the
    /// tokens of `kubernetes.io/service-account-token` Secrets with it. Without it they stay
    /// empty.
    #[arg(long, env = "KEEL_SERVICE_ACCOUNT_PRIVATE_KEY_FILE")]
    pub service_account_private_key_file: Option<std::path::PathBuf>,
    /// The CA certificate (PEM) token Secrets carry as `ca.crt`: the one the API servers'
    /// serving certificate is signed by.
    #[arg(long, env = "KEEL_ROOT_CA_FILE")]
    pub root_ca_file: Option<std::path::PathBuf>,
    /// How long a Job's first replacement of a failed Pod waits; each further failure since
    /// the last success doubles it, up to 6 minutes (Kubernetes: 10 s).
    #[arg(long, env = "KEEL_JOB_BACKOFF_BASE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub job_backoff_base: Duration,
    /// How many shards each controller's keyspace is split into. Replicas share the shards
    /// through Leases `keel-system/keel-controller-manager-shard-<i>`; every replica must be
    /// given the same count.
    #[arg(long, env = "KEEL_SHARDS", default_value_t = 32)]
    pub shards: u32,
    /// How long a shard lease lasts without renewal.
    #[arg(long, env = "KEEL_SHARD_LEASE_DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shard_lease_duration: Duration,
    /// A replica whose renewal of a shard lease has not succeeded for this long stops acting
    /// on the shard.
    #[arg(long, env = "KEEL_SHARD_RENEW_DEADLINE", default_value = "7s", value_parser = humantime::parse_duration)]
    pub shard_renew_deadline: Duration,
    /// How often the shard leases are renewed, and free ones tried for.
    #[arg(long, env = "KEEL_SHARD_RETRY_PERIOD", default_value = "2s", value_parser = humantime::parse_duration)]
    pub shard_retry_period: Duration,
    /// How long a shard handed over (or every shard, on SIGTERM) waits for its in-flight
    /// reconciles before its lease is released anyway.
    #[arg(long, env = "KEEL_SHARD_DRAIN_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub shard_drain_timeout: Duration,
    /// Append a line of JSON per reconcile to this file (controller, key, shard, replica,
    /// start and end in Unix nanoseconds): what the tests check "never two replicas on one
    /// key at once" from.
    #[arg(long, env = "KEEL_RECONCILE_LOG")]
    pub reconcile_log: Option<std::path::PathBuf>,
    /// For benchmarks: every reconcile first waits this long, as a controller calling a slow
    /// external system would.
    #[arg(long, env = "KEEL_SIMULATED_LATENCY", default_value = "0s", value_parser = humantime::parse_duration)]
    pub simulated_latency: Duration,
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
