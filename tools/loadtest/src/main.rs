//! keel-loadtest: many concurrent writers against keel, checking that no update is lost.
//!
//! - `patch`: writers PATCH their own field of shared objects; lost updates are counted. Over
//!   gRPC, Kubernetes' REST dialect, or both one after the other (`--protocol`); by merge, JSON
//!   or strategic merge patch, or by server-side apply, each writer its own field manager.
//! - `replace`: the same by read-modify-write Update, retrying on Conflict.
//! - `fill`: N ConfigMaps of about B bytes, by W concurrent writers, with progress: the start
//!   of every scale measurement.
//! - `etcd`: the ceiling, straight to etcd: puts to distinct keys, get+CAS on shared keys.
//! - `watch`: watchers on a namespace while writers write; delivery latency, missed events.
//! - `table`: turns `--json` results into the Markdown table of BENCHMARKS.md.
//! - `webhook-server`: admission webhooks to measure writes through (`bench/webhooks.sh`).
//!
//! Every mode counts failed requests by cause (`errors_by_cause`; `--error-log` also writes
//! each with its time). Exit status 1 when an update was lost or an event missed or repeated.

#![forbid(unsafe_code)]

mod causes;
mod etcd;
mod fill;
mod initialize;
mod report;
mod rest;
mod scrape;
mod table;
mod verify;
mod watch;
mod webhook;
mod writers;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use keel_client::{Client, PatchType};

/// Options every mode shares.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// The API servers (writers are spread over them), and how to reach them.
    #[command(flatten)]
    pub connect: keel_client::ConnectFlags,
    /// How long to write.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, global = true)]
    pub duration: Duration,
    /// Namespace of the test objects (created when missing).
    #[arg(long, default_value = "loadtest", global = true)]
    pub namespace: String,
    /// The servers' metrics URLs (e.g. http://127.0.0.1:6080/metrics), comma-separated, to
    /// report server-side PATCH retries and batch sizes.
    #[arg(long, value_delimiter = ',', global = true)]
    pub metrics_url: Vec<String>,
    /// Print the result as one JSON object.
    #[arg(long, global = true)]
    pub json: bool,
    /// Append a line per client-visible error to this file, as it happens: unix time in ms of
    /// the failure and of the request, what failed (the mode, or `watch-stream`), the index of
    /// the writer or watcher, cause, message; tab-separated.
    #[arg(long, value_parser = causes::ErrorLog::parse, global = true)]
    pub error_log: Option<causes::ErrorLog>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Protocol {
    Grpc,
    Rest,
    /// gRPC, then REST with the same writers and objects.
    Both,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Patch {
    Merge,
    Json,
    Strategic,
    /// Server-side apply: writer i applies, as field manager `writer-<i>`, a configuration
    /// that holds only its own field.
    Apply,
}

#[derive(Parser)]
#[command(
    name = "keel-loadtest",
    version,
    about = "Concurrent writers and watchers against keel, with lost-update checks"
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Writers PATCH their own field of M shared ConfigMaps; counts lost updates.
    Patch {
        #[arg(long, default_value_t = 64)]
        writers: usize,
        /// Writers are spread over this many objects (1: the hot-object case).
        #[arg(long, default_value_t = 1)]
        objects: usize,
        #[arg(long, value_enum, default_value = "merge")]
        patch_type: Patch,
        /// Bytes of padding in each written value.
        #[arg(long, default_value_t = 0)]
        payload_bytes: usize,
        /// What the writers speak: keel's gRPC, Kubernetes' REST dialect (PATCH over HTTP/2
        /// in plain text), or both, one after the other.
        #[arg(long, value_enum, default_value = "grpc")]
        protocol: Protocol,
    },
    /// Creates N ConfigMaps of about B bytes of JSON each over K namespaces with W concurrent
    /// writers, showing progress; reports objects/s. Objects already there are left as they
    /// are (a fill can be run again).
    Fill {
        #[arg(long)]
        objects: usize,
        #[arg(long, default_value_t = 230)]
        object_bytes: usize,
        /// Spread over this many namespaces (`<namespace>-0` ...); 1: `--namespace` itself.
        #[arg(long, default_value_t = 1)]
        namespaces: usize,
        #[arg(long, default_value_t = 64)]
        writers: usize,
    },
    /// Writers read, modify and Update (replace), retrying on Conflict; reports the conflict rate.
    Replace {
        #[arg(long, default_value_t = 8)]
        writers: usize,
        #[arg(long, default_value_t = 1)]
        objects: usize,
        #[arg(long, default_value_t = 0)]
        payload_bytes: usize,
    },
    /// The ceiling: the same concurrency straight to etcd (puts to distinct keys, then get+CAS).
    Etcd {
        #[arg(
            long,
            env = "KEEL_ETCD_SERVERS",
            default_value = "http://127.0.0.1:2379",
            value_delimiter = ','
        )]
        etcd_servers: Vec<String>,
        #[arg(long, default_value_t = 64)]
        writers: usize,
        /// Keys the get+CAS writers share.
        #[arg(long, default_value_t = 1)]
        objects: usize,
        #[arg(long, default_value_t = 0)]
        payload_bytes: usize,
        /// Only this one (default: put, floor and get+CAS, one after the other).
        #[arg(long, value_parser = ["put", "floor", "cas"])]
        only: Option<String>,
    },
    /// Watchers on a namespace while writers write at a fixed rate.
    Watch {
        #[arg(long, default_value_t = 100)]
        watchers: usize,
        #[arg(long, default_value_t = 8)]
        writers: usize,
        #[arg(long, default_value_t = 8)]
        objects: usize,
        /// Total writes per second.
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        /// What the watchers speak (writers always use gRPC): keel's gRPC, Kubernetes' REST
        /// dialect (newline-delimited WatchEvents over HTTP/2 in plain text), or both, one
        /// after the other.
        #[arg(long, value_enum, default_value = "grpc")]
        protocol: Protocol,
    },
    /// Pods created at a fixed rate while an initializer runs: create → visible and initialized
    /// latency, and every Pod arrives with its sidecar.
    Initialize {
        /// Pods created per second.
        #[arg(long, default_value_t = 100)]
        rate: u64,
        /// The container the initializer adds.
        #[arg(long, default_value = "envoy")]
        sidecar: String,
    },
    /// Serves admission webhooks over HTTPS until stopped: `/mutate` annotates every object
    /// (a JSON patch), `/validate` allows it (`bench/webhooks.sh`).
    WebhookServer {
        #[arg(long, default_value = "127.0.0.1:36445")]
        listen: std::net::SocketAddr,
        #[arg(long)]
        tls_cert_file: std::path::PathBuf,
        #[arg(long)]
        tls_private_key_file: std::path::PathBuf,
    },
    /// Prints JSON results (one per line, from files or stdin) as a Markdown table.
    Table {
        /// Files of `--json` results; none: standard input.
        files: Vec<std::path::PathBuf>,
    },
}

/// One client (a connection to each server) per this many concurrent callers: HTTP/2 servers
/// cap concurrent streams per connection (hyper: 200), and a connection's flow control is
/// shared by its streams.
const CALLERS_PER_CONNECTION: usize = 64;

/// Clients that each know every server: requests go round-robin over them and fail over when
/// one is down.
pub(crate) async fn clients(
    common: &Common,
    callers: usize,
) -> Result<Vec<Client>, keel_client::ApiError> {
    let mut out = Vec::new();
    for _ in 0..callers.div_ceil(CALLERS_PER_CONNECTION).max(1) {
        let config = common.connect.config()?.timeout(Duration::from_secs(30));
        out.push(Client::connect(&config).await?);
    }
    Ok(out)
}

/// `n` REST clients (each a connection to every server), for `--protocol rest`.
async fn rest_clients(
    common: &Common,
    n: usize,
) -> Result<Vec<Arc<rest::RestClient>>, keel_client::ApiError> {
    let mut out = Vec::new();
    for _ in 0..n {
        let c = rest::RestClient::connect(&common.connect.server, Duration::from_secs(30)).await?;
        out.push(Arc::new(c));
    }
    Ok(out)
}

async fn run(cli: Cli) -> Result<Vec<report::Summary>, String> {
    let c = &cli.common;
    let e = |e: keel_client::ApiError| format!("{:?}: {}", e.reason, e.message);
    Ok(match cli.cmd {
        Cmd::Patch {
            writers,
            objects,
            patch_type,
            payload_bytes,
            protocol,
        } => {
            let kind = match patch_type {
                Patch::Merge => PatchType::Merge,
                Patch::Json => PatchType::Json,
                Patch::Strategic => PatchType::Strategic,
                Patch::Apply => PatchType::Apply,
            };
            let cl = clients(c, writers).await.map_err(e)?;
            let mut runs: Vec<Vec<writers::Caller>> = Vec::new();
            if protocol != Protocol::Rest {
                runs.push(cl.iter().cloned().map(writers::Caller::Grpc).collect());
            }
            if protocol != Protocol::Grpc {
                let rest = rest_clients(c, cl.len()).await.map_err(e)?;
                runs.push(rest.into_iter().map(writers::Caller::Rest).collect());
            }
            let mut out = Vec::new();
            for callers in runs {
                let mode = writers::Mode::Patch(kind);
                let (objects, payload) = (objects.max(1), payload_bytes);
                out.push(
                    writers::run(c, &cl, &callers, mode, writers, objects, payload)
                        .await
                        .map_err(e)?,
                );
            }
            out
        }
        Cmd::Fill {
            objects,
            object_bytes,
            namespaces,
            writers,
        } => {
            let cl = clients(c, writers).await.map_err(e)?;
            vec![
                fill::run(c, &cl, objects, object_bytes, namespaces, writers)
                    .await
                    .map_err(e)?,
            ]
        }
        Cmd::Replace {
            writers,
            objects,
            payload_bytes,
        } => {
            let cl = clients(c, writers).await.map_err(e)?;
            let callers: Vec<_> = cl.iter().cloned().map(writers::Caller::Grpc).collect();
            vec![
                writers::run(
                    c,
                    &cl,
                    &callers,
                    writers::Mode::Replace,
                    writers,
                    objects.max(1),
                    payload_bytes,
                )
                .await
                .map_err(e)?,
            ]
        }
        Cmd::Etcd {
            etcd_servers,
            writers,
            objects,
            payload_bytes,
            only,
        } => {
            let mut out = Vec::new();
            let kinds = match only.as_deref() {
                Some("put") => vec![etcd::Kind::Put],
                Some("floor") => vec![etcd::Kind::Floor],
                Some(_) => vec![etcd::Kind::GetCas],
                None => vec![etcd::Kind::Put, etcd::Kind::Floor, etcd::Kind::GetCas],
            };
            for k in kinds {
                out.push(
                    etcd::run(c, &etcd_servers, k, writers, objects, payload_bytes)
                        .await
                        .map_err(|e| format!("etcd: {e}"))?,
                );
            }
            out
        }
        Cmd::Watch {
            watchers,
            writers,
            objects,
            rate,
            protocol,
        } => {
            let cl = clients(c, watchers).await.map_err(e)?;
            let mut out = Vec::new();
            if protocol != Protocol::Rest {
                out.push(
                    watch::run(c, &cl, None, watchers, writers, objects.max(1), rate)
                        .await
                        .map_err(e)?,
                );
            }
            if protocol != Protocol::Grpc {
                let rest = rest_clients(c, cl.len()).await.map_err(e)?;
                out.push(
                    watch::run(c, &cl, Some(&rest), watchers, writers, objects.max(1), rate)
                        .await
                        .map_err(e)?,
                );
            }
            out
        }
        Cmd::Initialize { rate, sidecar } => {
            let cl = clients(c, 1).await.map_err(e)?;
            let Some(client) = cl.first() else {
                return Err("no client".into());
            };
            vec![
                initialize::run(c, client, rate, &sidecar)
                    .await
                    .map_err(e)?,
            ]
        }
        Cmd::WebhookServer {
            listen,
            tls_cert_file,
            tls_private_key_file,
        } => {
            webhook::serve(listen, &tls_cert_file, &tls_private_key_file).await?;
            Vec::new()
        }
        Cmd::Table { files } => {
            table::print(&files)?;
            Vec::new()
        }
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.common.json;
    match run(cli).await {
        Ok(summaries) => {
            for s in &summaries {
                s.print(json);
            }
            if summaries.iter().any(|s| s.failed()) {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("keel-loadtest: {e}");
            ExitCode::from(2)
        }
    }
}
