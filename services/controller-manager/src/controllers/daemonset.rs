//! The DaemonSet controller: one Pod on every Node that should run it, as Kubernetes'
//! `daemonset-controller`.
//!
//! - A Node should run the daemon when the template's `nodeSelector` and required node
//!   affinity select it and the template tolerates its `NoSchedule` and `NoExecute` taints
//!   (with the tolerations Kubernetes adds to every daemon Pod: not-ready, unreachable, the
//!   pressure conditions, unschedulable). No Node, no Pod: the set is satisfied with 0.
//! - keel has no scheduler: the controller binds each Pod itself (`spec.nodeName`), beside the
//!   node affinity Kubernetes' controller writes for the scheduler.
//! - A failed daemon Pod is deleted and created again; Pods on Nodes that should not run the
//!   daemon, or that are gone, are deleted; extra Pods on one Node too.
//! - `RollingUpdate` replaces Pods of an older revision, at most `maxUnavailable` Nodes
//!   without an available Pod at a time; `OnDelete` waits for Pods to be deleted. Revisions
//!   are ControllerRevisions ([`super::history`]); `maxSurge` is not run (treated as 0).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use keel_api::Metadata;
use keel_client::{ApiError, Client, DeleteParams, Reason};
use keel_runtime::{
    Action, Controller, HandlerFns, ObjectKey, Recorder, ShardBy, Store, WatchOptions, WorkQueue,
    enqueue_handler,
};
use prometheus_client::registry::Registry;
use serde_json::{Map, Value, json};

use super::expectations::Expectations;
use super::history;
use super::{Context, SetupError, Start};
use crate::objects;

pub const NAME: &str = "daemonset";
const REVISION_LABEL: &str = "controller-revision-hash";

struct DaemonSetController {
    client: Client,
    sets: Store,
    pods: Store,
    nodes: Store,
    revisions: Store,
    expectations: Expectations,
    events: Recorder,
}

pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    let set_informer = ctx.factory.informer_with(
        &objects::daemonsets(),
        ctx.options(WatchOptions::default(), ShardBy::Name),
    );
    let pod_informer = ctx
        .factory
        .informer_with(&objects::pods(), objects::pods_by_owner(ctx));
    let revision_informer = ctx.factory.informer_with(
        &objects::controllerrevisions(),
        ctx.options(WatchOptions::default(), ShardBy::Owner),
    );
    // Every replica needs every Node: each set it holds may run on any of them.
    let node_informer = ctx
        .factory
        .informer_with(&objects::nodes(), WatchOptions::default());
    let queue = WorkQueue::default_controller_queue();
    let expectations = Expectations::default();
    set_informer.add_handler(enqueue_handler(queue.clone()));
    pod_informer.add_handler(super::statefulset::owned_pods_handler(
        queue.clone(),
        expectations.clone(),
        "DaemonSet",
    ));
    revision_informer.add_handler(super::statefulset::owner_handler(
        queue.clone(),
        "DaemonSet",
    ));
    node_informer.add_handler(every_set(queue.clone(), set_informer.store()));
    let this = Arc::new(DaemonSetController {
        client: ctx.client.clone(),
        sets: set_informer.store(),
        pods: pod_informer.store(),
        nodes: node_informer.store(),
        revisions: revision_informer.store(),
        expectations,
        events: ctx.events.for_component("daemonset-controller"),
    });
    let controller = Controller::new(NAME, queue)
        .workers(ctx.config.workers)
        .metrics(registry);
    Ok(super::start(
        ctx.gate.reading(&[
            &set_informer,
            &pod_informer,
            &revision_informer,
            &node_informer,
        ]),
        NAME,
        controller,
        this,
        super::by_name(ctx),
        |this, key| async move { this.reconcile(key).await },
    ))
}

/// A Node added, changed or removed may change where every set runs.
fn every_set(queue: WorkQueue<ObjectKey>, sets: Store) -> HandlerFns {
    let wake = move |_: &Value| {
        for s in sets.list() {
            if let Ok(k) = ObjectKey::from_object(&s) {
                queue.add(k);
            }
        }
    };
    let (w1, w2, w3) = (wake.clone(), wake.clone(), wake);
    HandlerFns::new()
        .added(move |n| w1(n))
        .updated(move |_, n| w2(n))
        .deleted(move |n| w3(n))
}

/// The tolerations Kubernetes adds to every daemon Pod (`util.AddOrUpdateDaemonPodTolerations`).
fn daemon_tolerations() -> Vec<Value> {
    let exists =
        |key: &str, effect: &str| json!({"key": key, "operator": "Exists", "effect": effect});
    vec![
        exists("node.kubernetes.io/not-ready", "NoExecute"),
        exists("node.kubernetes.io/unreachable", "NoExecute"),
        exists("node.kubernetes.io/disk-pressure", "NoSchedule"),
        exists("node.kubernetes.io/memory-pressure", "NoSchedule"),
        exists("node.kubernetes.io/pid-pressure", "NoSchedule"),
        exists("node.kubernetes.io/unschedulable", "NoSchedule"),
    ]
}

/// Whether a toleration tolerates a taint (`v1.Toleration.ToleratesTaint`).
fn tolerates(t: &Value, taint: &Value) -> bool {
    let effect = t["effect"].as_str().unwrap_or("");
    if !effect.is_empty() && Some(effect) != taint["effect"].as_str() {
        return false;
    }
    let key = t["key"].as_str().unwrap_or("");
    if !key.is_empty() && Some(key) != taint["key"].as_str() {
        return false;
    }
    match t["operator"].as_str().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" => t["value"].as_str().unwrap_or("") == taint["value"].as_str().unwrap_or(""),
        _ => false,
    }
}

/// One `NodeSelectorRequirement` against a Node's labels (`matchExpressions`) or its name
/// (`matchFields`, `metadata.name` only).
fn requirement(req: &Value, value: Option<&str>) -> bool {
    let values: Vec<&str> = req["values"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let number = |s: &str| s.parse::<i64>().ok();
    match req["operator"].as_str().unwrap_or("") {
        "In" => value.is_some_and(|v| values.contains(&v)),
        "NotIn" => value.is_none_or(|v| !values.contains(&v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => {
            matches!((value.and_then(number), values.first().and_then(|v| number(v))), (Some(v), Some(w)) if v > w)
        }
        "Lt" => {
            matches!((value.and_then(number), values.first().and_then(|v| number(v))), (Some(v), Some(w)) if v < w)
        }
        _ => false,
    }
}

/// Whether a daemon Pod of this template should run on this Node.
pub fn should_run(template: &Value, node: &Value) -> bool {
    let spec = &template["spec"];
    if let Some(selector) = spec["nodeSelector"].as_object()
        && !selector.iter().all(|(k, v)| node.label(k) == v.as_str())
    {
        return false;
    }
    let terms = spec
        .pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array);
    if let Some(terms) = terms
        && !terms.iter().any(|term| {
            let exprs = term["matchExpressions"].as_array().into_iter().flatten();
            let fields = term["matchFields"].as_array().into_iter().flatten();
            let mut any = false;
            let ok = exprs
                .map(|r| {
                    any = true;
                    requirement(r, r["key"].as_str().and_then(|k| node.label(k)))
                })
                .collect::<Vec<_>>()
                .into_iter()
                .chain(fields.map(|r| {
                    any = true;
                    r["key"] == "metadata.name" && requirement(r, Some(node.name()))
                }))
                .all(|b| b);
            // An empty term selects nothing, as in Kubernetes.
            ok && any
        })
    {
        return false;
    }
    let mut tolerations: Vec<Value> = spec["tolerations"].as_array().cloned().unwrap_or_default();
    tolerations.extend(daemon_tolerations());
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| matches!(t["effect"].as_str(), Some("NoSchedule") | Some("NoExecute")))
        .all(|taint| tolerations.iter().any(|t| tolerates(t, taint)))
}

/// What one sync does.
#[derive(Debug, Clone, PartialEq)]
pub enum Act {
    Create(String),
    Delete(String),
}

/// The set's Pods by Node; Pods bound to no Node are put under "".
fn by_node(pods: &[Arc<Value>]) -> BTreeMap<String, Vec<Arc<Value>>> {
    let mut m: BTreeMap<String, Vec<Arc<Value>>> = BTreeMap::new();
    for p in pods.iter().filter(|p| !p.is_deleting()) {
        let node = p["spec"]["nodeName"].as_str().unwrap_or("").to_string();
        m.entry(node).or_default().push(p.clone());
    }
    m
}

fn ended(p: &Value) -> bool {
    matches!(
        p["status"]["phase"].as_str(),
        Some("Failed") | Some("Succeeded")
    )
}

fn available(p: &Value, min_ready: Duration, now: SystemTime) -> bool {
    objects::pod_is_available(p, min_ready, now)
}

/// What the set's Pods need, from the cache: a Pod on every Node that should run one and has
/// none, no Pod elsewhere (nor a second one, nor a failed one), then the rolling update.
pub fn plan(
    set: &Value,
    nodes: &[Arc<Value>],
    pods: &[Arc<Value>],
    update_hash: &str,
    now: SystemTime,
) -> Vec<Act> {
    let template = &set["spec"]["template"];
    let min_ready = Duration::from_secs(set["spec"]["minReadySeconds"].as_u64().unwrap_or(0));
    let mut placed = by_node(pods);
    let mut acts = Vec::new();
    let mut olds: Vec<(String, Arc<Value>)> = Vec::new();
    let mut unavailable = 0usize;
    for node in nodes {
        let here = placed.remove(node.name()).unwrap_or_default();
        if !should_run(template, node) {
            acts.extend(here.iter().map(|p| Act::Delete(p.name().to_string())));
            continue;
        }
        let (failed, mut running): (Vec<_>, Vec<_>) = here.into_iter().partition(|p| ended(p));
        acts.extend(failed.iter().map(|p| Act::Delete(p.name().to_string())));
        if running.is_empty() {
            if failed.is_empty() {
                acts.push(Act::Create(node.name().to_string()));
            }
            unavailable += 1;
            continue;
        }
        // The oldest stays.
        running.sort_by_key(|p| {
            (
                p.creation_timestamp().unwrap_or("").to_string(),
                p.name().to_string(),
            )
        });
        acts.extend(
            running
                .iter()
                .skip(1)
                .map(|p| Act::Delete(p.name().to_string())),
        );
        let pod = &running[0];
        if !available(pod, min_ready, now) {
            unavailable += 1;
        }
        if pod.label(REVISION_LABEL) != Some(update_hash) {
            olds.push((node.name().to_string(), pod.clone()));
        }
    }
    // Pods on Nodes that are gone, or on none.
    for pods in placed.values() {
        acts.extend(pods.iter().map(|p| Act::Delete(p.name().to_string())));
    }
    let strategy = &set["spec"]["updateStrategy"];
    if strategy["type"].as_str().unwrap_or("RollingUpdate") == "RollingUpdate" {
        let desired = nodes.iter().filter(|n| should_run(template, n)).count();
        let max = max_unavailable(&strategy["rollingUpdate"]["maxUnavailable"], desired);
        for (_, pod) in olds {
            if !available(&pod, min_ready, now) {
                // Already unavailable: replacing it costs nothing more.
                acts.push(Act::Delete(pod.name().to_string()));
            } else if unavailable < max {
                unavailable += 1;
                acts.push(Act::Delete(pod.name().to_string()));
            }
        }
    }
    acts
}

/// `maxUnavailable` of `desired`: a number, or a percentage rounded up; at least 1.
fn max_unavailable(v: &Value, desired: usize) -> usize {
    let n = match v {
        Value::Number(n) => usize::try_from(n.as_u64().unwrap_or(1)).unwrap_or(1),
        Value::String(s) => match s.strip_suffix('%').and_then(|p| p.parse::<usize>().ok()) {
            Some(p) => (desired * p).div_ceil(100),
            None => 1,
        },
        _ => 1,
    };
    n.max(1)
}

impl DaemonSetController {
    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(set) = self.sets.get(&key) else {
            self.expectations.forget(&key);
            return Ok(Action::await_change());
        };
        if !self.expectations.satisfied(&key) {
            return Ok(Action::await_change());
        }
        let pods = objects::owned(&self.pods, &set);
        let mut revisions = objects::owned(&self.revisions, &set);
        revisions.sort_by_key(|r| history::revision_number(r));
        let Some(update) =
            history::update_revision(&self.client, &objects::daemonsets(), &set, &mut revisions)
                .await?
        else {
            return Ok(Action::await_change());
        };
        let hash = update
            .name()
            .strip_prefix(&format!("{}-", set.name()))
            .unwrap_or(update.name())
            .to_string();
        let mut nodes = self.nodes.list();
        nodes.sort_by(|a, b| a.name().cmp(b.name()));
        let now = SystemTime::now();
        if !set.is_deleting() {
            let acts = plan(&set, &nodes, &pods, &hash, now);
            self.carry_out(&key, &set, &acts, &hash).await?;
        }
        let in_use = |r: &Value| {
            r.name() == update.name()
                || pods.iter().any(|p| {
                    p.label(REVISION_LABEL)
                        .is_some_and(|h| r.name() == format!("{}-{h}", set.name()))
                })
        };
        history::prune(&self.client, &set, &revisions, in_use).await?;
        self.write_status(&set, &nodes, &pods, &hash, now).await?;
        let min_ready = set["spec"]["minReadySeconds"].as_u64().unwrap_or(0);
        Ok(if min_ready > 0 {
            Action::requeue(Duration::from_secs(1))
        } else {
            Action::await_change()
        })
    }

    async fn carry_out(
        &self,
        key: &ObjectKey,
        set: &Value,
        acts: &[Act],
        hash: &str,
    ) -> Result<(), ApiError> {
        let creations = acts.iter().filter(|a| matches!(a, Act::Create(_))).count();
        self.expectations.expect_creations(key, creations);
        self.expectations.expect_deletions(
            key,
            acts.iter().filter_map(|a| match a {
                Act::Delete(n) => Some(n.clone()),
                Act::Create(_) => None,
            }),
        );
        let results = futures::future::join_all(acts.iter().map(|a| async move {
            match a {
                Act::Create(node) => self.create_pod(set, node, hash).await,
                Act::Delete(name) => self.delete_pod(set, name).await,
            }
        }))
        .await;
        let mut first_error = None;
        for (a, r) in acts.iter().zip(results) {
            if let Err(e) = r {
                match a {
                    Act::Create(_) => self.expectations.creation_observed(key),
                    Act::Delete(n) => self.expectations.deletion_observed(key, n),
                }
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn create_pod(&self, set: &Value, node: &str, hash: &str) -> Result<(), ApiError> {
        let template = &set["spec"]["template"];
        let mut labels = template["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        labels.insert(REVISION_LABEL.into(), json!(hash));
        labels.insert(
            "pod-template-generation".into(),
            json!(set.generation().to_string()),
        );
        let mut spec = template["spec"].as_object().cloned().unwrap_or_default();
        spec.insert("nodeName".into(), json!(node));
        let mut affinity = spec.get("affinity").cloned().unwrap_or(json!({}));
        affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]
        });
        spec.insert("affinity".into(), affinity);
        let mut tolerations: Vec<Value> = spec
            .get("tolerations")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for t in daemon_tolerations() {
            if !tolerations.contains(&t) {
                tolerations.push(t);
            }
        }
        spec.insert("tolerations".into(), Value::Array(tolerations));
        let mut meta = Map::new();
        meta.insert("generateName".into(), json!(format!("{}-", set.name())));
        meta.insert("namespace".into(), json!(set.namespace()));
        meta.insert("labels".into(), Value::Object(labels));
        if let Some(a) = template["metadata"].get("annotations") {
            meta.insert("annotations".into(), a.clone());
        }
        meta.insert(
            "ownerReferences".into(),
            json!([objects::controller_reference(set)]),
        );
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec});
        match self
            .client
            .create(&objects::pods(), set.namespace(), &pod)
            .await
        {
            Ok(created) => {
                self.events.normal(
                    set,
                    "SuccessfulCreate",
                    format!("Created pod: {}", created.name()),
                );
                Ok(())
            }
            Err(e) => {
                if !super::replicaset::namespace_terminating(&e) {
                    self.events
                        .warning(set, "FailedCreate", format!("Error creating: {e}"));
                }
                Err(e)
            }
        }
    }

    async fn delete_pod(&self, set: &Value, name: &str) -> Result<(), ApiError> {
        match self
            .client
            .delete(
                &objects::pods(),
                set.namespace(),
                name,
                &DeleteParams::default(),
            )
            .await
        {
            Ok(_) => {
                self.events
                    .normal(set, "SuccessfulDelete", format!("Deleted pod: {name}"));
                Ok(())
            }
            Err(e) if e.reason == Reason::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn write_status(
        &self,
        set: &Value,
        nodes: &[Arc<Value>],
        pods: &[Arc<Value>],
        hash: &str,
        now: SystemTime,
    ) -> Result<(), ApiError> {
        let template = &set["spec"]["template"];
        let min_ready = Duration::from_secs(set["spec"]["minReadySeconds"].as_u64().unwrap_or(0));
        let placed = by_node(pods);
        let (mut desired, mut current, mut misscheduled) = (0, 0, 0);
        let (mut ready, mut avail, mut updated) = (0, 0, 0);
        for node in nodes {
            let here: Vec<&Arc<Value>> = placed
                .get(node.name())
                .into_iter()
                .flatten()
                .filter(|p| !ended(p))
                .collect();
            if !should_run(template, node) {
                if !here.is_empty() {
                    misscheduled += 1;
                }
                continue;
            }
            desired += 1;
            let Some(pod) = here.first() else { continue };
            current += 1;
            if objects::pod_is_ready(pod) {
                ready += 1;
            }
            if available(pod, min_ready, now) {
                avail += 1;
            }
            if pod.label(REVISION_LABEL) == Some(hash) {
                updated += 1;
            }
        }
        let mut status = set["status"].as_object().cloned().unwrap_or_default();
        for (f, v) in [
            ("desiredNumberScheduled", desired),
            ("currentNumberScheduled", current),
            ("numberMisscheduled", misscheduled),
            ("numberReady", ready),
            ("numberAvailable", avail),
            ("numberUnavailable", desired - avail),
            ("updatedNumberScheduled", updated),
        ] {
            status.insert(f.into(), json!(v));
        }
        status.insert("observedGeneration".into(), json!(set.generation()));
        super::write_status(
            &self.client,
            &objects::daemonsets(),
            set,
            Value::Object(status),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: Value, taints: Value) -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}))
    }

    fn set(template_spec: Value) -> Value {
        json!({"metadata": {"name": "agent"}, "spec": {
            "template": {"spec": template_spec},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}}})
    }

    fn pod(name: &str, node: &str, hash: &str, ready: bool) -> Arc<Value> {
        Arc::new(json!({
            "metadata": {"name": name, "labels": {REVISION_LABEL: hash},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
    }

    #[test]
    fn node_selectors_affinity_and_taints_choose_the_nodes() {
        let linux = node("a", json!({"os": "linux", "size": "8"}), json!([]));
        let tainted = node(
            "b",
            json!({"os": "linux"}),
            json!([{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
        );
        let soft = node(
            "c",
            json!({}),
            json!([{"key": "x", "effect": "PreferNoSchedule"}]),
        );
        let t = |spec: Value| json!({"spec": spec});
        assert!(should_run(&t(json!({})), &linux));
        assert!(!should_run(&t(json!({})), &tainted));
        assert!(should_run(&t(json!({})), &soft));
        assert!(should_run(
            &t(json!({"tolerations": [{"key": "gpu", "operator": "Exists"}]})),
            &tainted
        ));
        assert!(!should_run(
            &t(json!({"tolerations": [{"key": "gpu", "value": "no"}]})),
            &tainted
        ));
        assert!(should_run(
            &t(json!({"nodeSelector": {"os": "linux"}})),
            &linux
        ));
        assert!(!should_run(
            &t(json!({"nodeSelector": {"os": "linux"}})),
            &soft
        ));
        let affinity = |term: Value| {
            t(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [term]}}}}),
            )
        };
        assert!(should_run(
            &affinity(
                json!({"matchExpressions": [{"key": "size", "operator": "Gt", "values": ["4"]}]})
            ),
            &linux
        ));
        assert!(!should_run(
            &affinity(
                json!({"matchExpressions": [{"key": "size", "operator": "Lt", "values": ["4"]}]})
            ),
            &linux
        ));
        assert!(should_run(
            &affinity(
                json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]})
            ),
            &linux
        ));
        assert!(!should_run(&affinity(json!({})), &linux));
        // The daemon tolerations: an unschedulable node still runs daemons.
        let cordoned = node(
            "d",
            json!({}),
            json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
        );
        assert!(should_run(&t(json!({})), &cordoned));
    }

    #[test]
    fn one_pod_per_node_and_none_elsewhere() {
        let s = set(json!({"nodeSelector": {"os": "linux"}}));
        let nodes = [
            node("a", json!({"os": "linux"}), json!([])),
            node("b", json!({"os": "linux"}), json!([])),
            node("w", json!({"os": "windows"}), json!([])),
        ];
        let pods = [
            pod("p1", "a", "h1", true),
            pod("p2", "a", "h1", true),
            pod("p3", "w", "h1", true),
            pod("p4", "gone", "h1", true),
        ];
        let mut acts = plan(&s, &nodes, &pods, "h1", SystemTime::now());
        acts.sort_by_key(|a| format!("{a:?}"));
        assert_eq!(
            acts,
            [
                Act::Create("b".into()),
                Act::Delete("p2".into()),
                Act::Delete("p3".into()),
                Act::Delete("p4".into()),
            ]
        );
    }

    #[test]
    fn a_rolling_update_keeps_max_unavailable() {
        let s = set(json!({}));
        let nodes = [
            node("a", json!({}), json!([])),
            node("b", json!({}), json!([])),
            node("c", json!({}), json!([])),
        ];
        let pods = [
            pod("p1", "a", "old", true),
            pod("p2", "b", "old", true),
            pod("p3", "c", "old", true),
        ];
        assert_eq!(
            plan(&s, &nodes, &pods, "new", SystemTime::now()),
            [Act::Delete("p1".into())]
        );
        // A node already without an available pod uses up the budget.
        let pods = [
            pod("p1", "a", "new", false),
            pod("p2", "b", "old", true),
            pod("p3", "c", "old", true),
        ];
        assert_eq!(plan(&s, &nodes, &pods, "new", SystemTime::now()), []);
        assert_eq!(max_unavailable(&json!("50%"), 3), 2);
        assert_eq!(max_unavailable(&json!(0), 3), 1);
    }
}
