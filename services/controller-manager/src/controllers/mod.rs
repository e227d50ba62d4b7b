//! The controllers, and how one is chosen by name and set up.

pub mod clusterroleaggregation;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod endpoints;
pub mod expectations;
pub mod garbagecollector;
pub mod history;
pub mod job;
pub mod namespace;
pub mod network;
pub mod nodes;
pub mod podips;
pub mod podlifecycle;
pub mod replicaset;
pub mod serviceaccount;
pub mod statefulset;
pub mod tokens;

use std::fmt::Display;
use std::hash::Hash;
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use futures::future::BoxFuture;
use keel_api::Metadata;
use keel_client::{ApiError, Client, GroupVersionResource, PatchType, Reason};
use keel_runtime::{
    Action, Controller, Informer, InformerFactory, ObjectKey, Recorder, ShardBy, ShardHandle,
    WatchOptions,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use crate::config::Config;
use crate::shutdown::Shutdown;

/// Every controller, by the name `--controllers` uses.
pub const ALL: [&str; 15] = [
    "replicaset",
    "deployment",
    "podlifecycle",
    "garbagecollector",
    "namespace",
    "network",
    clusterroleaggregation::NAME,
    serviceaccount::NAME,
    job::NAME,
    statefulset::NAME,
    daemonset::NAME,
    nodes::NAME,
    cronjob::NAME,
    endpoints::NAME,
    tokens::NAME,
];

/// What every controller is set up with.
pub struct Context {
    pub client: Client,
    /// Shared: one watch per resource and options however many controllers read it.
    pub factory: InformerFactory,
    pub config: Arc<Config>,
    /// The shards this replica holds: work on a key begins only while its shard's lease is
    /// held, and sharded informers cache only those shards.
    pub shards: ShardHandle,
    /// What every reconcile is wrapped in: the shard gate, the reconcile log, the simulated
    /// latency, the per-shard counter.
    pub gate: Gate,
    /// Events about the objects controllers act on; each controller names itself with
    /// [`Recorder::for_component`].
    pub events: Recorder,
}

impl Context {
    /// `base`, caching only this replica's shards (by `by`). Even with one shard: an informer
    /// that follows the held set lists again when the shard is gained, so keys dropped while
    /// it was not held come back.
    pub fn options(&self, base: WatchOptions, by: ShardBy) -> WatchOptions {
        base.sharded(by)
    }
}

/// How soon a key of a shard whose caches are still loading comes back.
const SHARD_SYNC_WAIT: Duration = Duration::from_millis(100);

/// Wraps each reconcile: it begins only while the key's shard is held (and the handover of
/// the shard waits for it to end), is counted by shard, logged to `--reconcile-log`, and
/// delayed by `--simulated-latency`.
#[derive(Clone)]
pub struct Gate {
    shards: ShardHandle,
    /// The informers the controller reads: a shard just gained is worked on only once each
    /// of them holds it in full.
    informers: Arc<Vec<Informer>>,
    latency: Duration,
    log: Option<Arc<ReconcileLog>>,
    reconciles: Family<ShardLabels, Counter>,
    skipped: Family<ControllerLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    controller: String,
    shard: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

impl Gate {
    pub fn new(
        shards: ShardHandle,
        config: &Config,
        registry: &mut Registry,
    ) -> std::io::Result<Gate> {
        let log = match &config.reconcile_log {
            Some(path) => Some(Arc::new(ReconcileLog::open(path)?)),
            None => None,
        };
        let gate = Gate {
            shards,
            informers: Arc::new(Vec::new()),
            latency: config.simulated_latency,
            log,
            reconciles: Family::default(),
            skipped: Family::default(),
        };
        registry.register(
            "keel_controller_shard_reconciles",
            "Reconciles begun, by controller and shard",
            gate.reconciles.clone(),
        );
        registry.register(
            "keel_controller_shard_skipped",
            "Keys dropped because this replica does not hold their shard (its holder has them)",
            gate.skipped.clone(),
        );
        Ok(gate)
    }

    /// This gate for a controller that reads these informers.
    pub fn reading(&self, informers: &[&Informer]) -> Gate {
        Gate {
            informers: Arc::new(informers.iter().map(|i| (*i).clone()).collect()),
            ..self.clone()
        }
    }

    /// Runs `work` if `shard` is active here, holding the shard for its duration; otherwise
    /// the key is dropped: its shard's holder reconciles it. A shard just gained waits
    /// (the key comes back shortly) until every informer holds it in full.
    async fn run<K, Fut, E>(
        &self,
        controller: &str,
        key: &K,
        shard: Option<u32>,
        work: impl FnOnce() -> Fut,
    ) -> Result<Action, E>
    where
        K: Display,
        Fut: Future<Output = Result<Action, E>>,
    {
        let guard = shard.and_then(|s| self.shards.begin(s));
        if let Some(g) = &guard
            && !self.informers.iter().all(|i| i.has_synced_shard(g.shard()))
        {
            return Ok(Action::requeue(SHARD_SYNC_WAIT));
        }
        let Some(guard) = guard else {
            self.skipped
                .get_or_create(&ControllerLabel {
                    controller: controller.to_string(),
                })
                .inc();
            return Ok(Action::await_change());
        };
        self.reconciles
            .get_or_create(&ShardLabels {
                controller: controller.to_string(),
                shard: guard.shard(),
            })
            .inc();
        let start = SystemTime::now();
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let result = work().await;
        if let Some(log) = &self.log {
            log.record(
                controller,
                &key.to_string(),
                guard.shard(),
                self.shards.identity(),
                start,
            );
        }
        drop(guard);
        result
    }
}

/// `--reconcile-log`: a line of JSON per reconcile, appended with one write each so that lines
/// of a process killed mid-run are whole.
pub struct ReconcileLog {
    file: Mutex<std::fs::File>,
}

impl ReconcileLog {
    fn open(path: &std::path::Path) -> std::io::Result<ReconcileLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(ReconcileLog {
            file: Mutex::new(file),
        })
    }

    fn record(&self, controller: &str, key: &str, shard: u32, replica: &str, start: SystemTime) {
        let nanos = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        };
        let line = json!({
            "controller": controller,
            "key": key,
            "shard": shard,
            "replica": replica,
            "start": nanos(start).to_string(),
            "end": nanos(SystemTime::now()).to_string(),
        });
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = file.write_all(format!("{line}\n").as_bytes()) {
            tracing::warn!("reconcile log: {e}");
        }
    }
}

/// The shard of an object key's own name: the `shard_of` of a controller whose keys are the
/// objects it caches by name.
pub fn by_name<T>(ctx: &Context) -> impl Fn(&T, &ObjectKey) -> Option<u32> + use<T> {
    let shards = ctx.shards.clone();
    move |_, key| Some(shards.shard_for(&key.namespace, &key.name))
}

/// A controller whose informers and handlers are registered: running it is the last step.
pub type Start = Box<dyn FnOnce(Shutdown) -> BoxFuture<'static, ()> + Send>;

/// The [`Start`] of controller `name` whose reconcile is `reconcile(this, key)`, run through
/// `gate` (the context's) for the shard `shard_of(this, key)` gives (`None`: nothing to do
/// here), on the controller's workers until the shutdown signal, then drained.
pub fn start<K, T, F, Fut, E, S>(
    gate: Gate,
    name: &'static str,
    controller: Controller<K>,
    this: Arc<T>,
    shard_of: S,
    reconcile: F,
) -> Start
where
    K: Clone + Eq + Hash + Display + Send + Sync + 'static,
    T: Send + Sync + 'static,
    S: Fn(&T, &K) -> Option<u32> + Send + Sync + 'static,
    F: Fn(Arc<T>, K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: Display + Send + 'static,
{
    let shard_of = Arc::new(shard_of);
    let reconcile = Arc::new(reconcile);
    Box::new(move |shutdown| {
        async move {
            controller
                .run(
                    move |key: K| {
                        let (gate, this) = (gate.clone(), this.clone());
                        let (shard_of, reconcile) = (shard_of.clone(), reconcile.clone());
                        async move {
                            let shard = shard_of(&this, &key);
                            gate.run(name, &key, shard, || reconcile(this, key.clone()))
                                .await
                        }
                    },
                    shutdown.wait(),
                )
                .await
        }
        .boxed()
    })
}

/// Writes `status` of `obj` as a merge patch of the status subresource, unless it is unchanged.
/// See [`write_status_to`].
pub async fn write_status(
    client: &Client,
    gvr: &GroupVersionResource,
    obj: &Value,
    status: Value,
) -> Result<(), ApiError> {
    write_status_to(client, gvr, obj, status, true).await
}

/// Writes `status` of `obj` as a merge patch, unless it is unchanged: of the status
/// subresource, or (`subresource` false: a custom resource whose CRD has none, where status
/// is an ordinary part of the object) of the object itself. The `resourceVersion` it was
/// computed from is a precondition: a status from a stale cache is refused (`Conflict`), and
/// the newer object's event brings the key back, so that is no error. Nor is `NotFound` for an
/// object that is gone; `NotFound` for one that is there (no such subresource) is.
pub async fn write_status_to(
    client: &Client,
    gvr: &GroupVersionResource,
    obj: &Value,
    status: Value,
    subresource: bool,
) -> Result<(), ApiError> {
    if status == obj["status"] {
        return Ok(());
    }
    let (ns, name) = (obj.namespace(), obj.name());
    let body = json!({"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": status});
    let sub = if subresource { "status" } else { "" };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    match client
        .patch_subresource(gvr, ns, name, sub, PatchType::Merge, body)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.reason == Reason::Conflict => Ok(()),
        Err(e) if e.reason == Reason::NotFound => match client.get(gvr, ns, name).await {
            Err(gone) if gone.reason == Reason::NotFound => Ok(()),
            _ => Err(e),
        },
        Err(e) => Err(e),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("unknown controller {0:?}; known: {known}", known = ALL.join(", "))]
    Unknown(String),
    #[error("controller {controller}: {message}")]
    Failed { controller: String, message: String },
}

/// The controllers `--controllers` names: `*` is all of them, `-name` takes one out.
pub fn enabled(flags: &[String]) -> Result<Vec<&'static str>, SetupError> {
    let mut on: Vec<&'static str> = Vec::new();
    let mut off: Vec<&'static str> = Vec::new();
    for f in flags.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        if f == "*" {
            on.extend(ALL);
            continue;
        }
        let (list, name) = match f.strip_prefix('-') {
            Some(n) => (&mut off, n),
            None => (&mut on, f),
        };
        let known = ALL
            .iter()
            .find(|c| **c == name)
            .ok_or_else(|| SetupError::Unknown(name.to_string()))?;
        list.push(known);
    }
    if on.is_empty() && !off.is_empty() {
        on.extend(ALL);
    }
    let mut out: Vec<&'static str> = ALL
        .iter()
        .copied()
        .filter(|c| on.contains(c) && !off.contains(c))
        .collect();
    out.dedup();
    Ok(out)
}

/// Sets up one controller: registers its informers, handlers and metrics.
pub fn setup(name: &str, ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    match name {
        "replicaset" => replicaset::setup(ctx, registry),
        "deployment" => deployment::setup(ctx, registry),
        "podlifecycle" => podlifecycle::setup(ctx, registry),
        "garbagecollector" => garbagecollector::setup(ctx, registry),
        "namespace" => namespace::setup(ctx, registry),
        "network" => network::setup(ctx, registry),
        clusterroleaggregation::NAME => clusterroleaggregation::setup(ctx, registry),
        serviceaccount::NAME => serviceaccount::setup(ctx, registry),
        job::NAME => job::setup(ctx, registry),
        statefulset::NAME => statefulset::setup(ctx, registry),
        daemonset::NAME => daemonset::setup(ctx, registry),
        nodes::NAME => nodes::setup(ctx, registry),
        cronjob::NAME => cronjob::setup(ctx, registry),
        endpoints::NAME => endpoints::setup(ctx, registry),
        tokens::NAME => tokens::setup(ctx, registry),
        other => Err(SetupError::Unknown(other.to_string())),
    }
}

impl SetupError {
    pub fn failed(controller: &str, e: impl std::fmt::Display) -> SetupError {
        SetupError::Failed {
            controller: controller.to_string(),
            message: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(flags: &[&str]) -> Result<Vec<&'static str>, SetupError> {
        enabled(&flags.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn controllers_are_chosen_by_name() {
        assert_eq!(names(&["*"]).unwrap(), ALL.to_vec());
        assert_eq!(
            names(&["deployment", "replicaset"]).unwrap(),
            vec!["replicaset", "deployment"]
        );
        let without_namespace: Vec<&str> =
            ALL.iter().copied().filter(|c| *c != "namespace").collect();
        assert_eq!(names(&["*", "-namespace"]).unwrap(), without_namespace);
        assert_eq!(names(&["-namespace"]).unwrap(), without_namespace);
        assert!(matches!(names(&["kubelet"]), Err(SetupError::Unknown(_))));
    }
}
