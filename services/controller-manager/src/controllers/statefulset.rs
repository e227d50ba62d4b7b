//! The StatefulSet controller: Pods with a stable identity (`web-0`, `web-1`, ...), each with
//! its own PersistentVolumeClaims, started, stopped and updated in order, as Kubernetes'
//! `statefulset-controller`.
//!
//! - `OrderedReady`: a Pod is created only once every Pod before it is Running and Ready, and
//!   removed (scaling down, highest ordinal first) only once the ones above it are gone.
//!   `Parallel`: all at once.
//! - Revisions are ControllerRevisions ([`history`]); every Pod carries its revision's name
//!   in `controller-revision-hash`. `RollingUpdate` replaces
//!   Pods not at the update revision from the highest ordinal down to `partition`, one at a
//!   time, each once its successor is Ready; `OnDelete` waits for Pods to be deleted.
//!   `revisionHistoryLimit` old revisions are kept.
//! - `volumeClaimTemplates` become claims `<template>-<set>-<ordinal>`, created before their Pod
//!   and kept when it goes (`persistentVolumeClaimRetentionPolicy` `Retain`; `whenDeleted:
//!   Delete` makes the set their owner). Nothing binds them: keel has no volumes.
//!
//! What a sync does is decided by [`plan`] from the cache alone; [`StatefulSetController`]
//! carries it out.

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
use crate::objects::{self, controller_of};

pub const NAME: &str = "statefulset";
pub const REVISION_LABEL: &str = "controller-revision-hash";
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

struct StatefulSetController {
    client: Client,
    sets: Store,
    pods: Store,
    revisions: Store,
    expectations: Expectations,
    events: Recorder,
}

pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    let set_informer = ctx.factory.informer_with(
        &objects::statefulsets(),
        ctx.options(WatchOptions::default(), ShardBy::Name),
    );
    let pod_informer = ctx
        .factory
        .informer_with(&objects::pods(), objects::pods_by_owner(ctx));
    let revision_informer = ctx.factory.informer_with(
        &objects::controllerrevisions(),
        ctx.options(WatchOptions::default(), ShardBy::Owner),
    );
    let queue = WorkQueue::default_controller_queue();
    let expectations = Expectations::default();
    set_informer.add_handler(enqueue_handler(queue.clone()));
    pod_informer.add_handler(owned_pods_handler(
        queue.clone(),
        expectations.clone(),
        "StatefulSet",
    ));
    revision_informer.add_handler(owner_handler(queue.clone(), "StatefulSet"));
    let this = Arc::new(StatefulSetController {
        client: ctx.client.clone(),
        sets: set_informer.store(),
        pods: pod_informer.store(),
        revisions: revision_informer.store(),
        expectations,
        events: ctx.events.for_component("statefulset-controller"),
    });
    let controller = Controller::new(NAME, queue)
        .workers(ctx.config.workers)
        .metrics(registry);
    Ok(super::start(
        ctx.gate
            .reading(&[&set_informer, &pod_informer, &revision_informer]),
        NAME,
        controller,
        this,
        super::by_name(ctx),
        |this, key| async move { this.reconcile(key).await },
    ))
}

/// Pod events wake the controlling owner of this kind and check off its expectations.
pub(crate) fn owned_pods_handler(
    queue: WorkQueue<ObjectKey>,
    x: Expectations,
    kind: &'static str,
) -> HandlerFns {
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue);
    let (x1, x2) = (x.clone(), x);
    HandlerFns::new()
        .added(move |pod| {
            if let Some((owner, _)) = controller_of(pod, kind) {
                x1.creation_observed(&owner);
                q1.add(owner);
            }
        })
        .updated(move |_, new| {
            if let Some((owner, _)) = controller_of(new, kind) {
                q2.add(owner);
            }
        })
        .deleted(move |pod| {
            if let Some((owner, _)) = controller_of(pod, kind) {
                x2.deletion_observed(&owner, pod.name());
                q3.add(owner);
            }
        })
}

/// Wakes the owner of this kind that controls the object (a workload's ControllerRevisions).
pub(crate) fn owner_handler(queue: WorkQueue<ObjectKey>, kind: &'static str) -> HandlerFns {
    let wake = move |obj: &Value| {
        if let Some((owner, _)) = controller_of(obj, kind) {
            queue.add(owner);
        }
    };
    let (w1, w2, w3) = (wake.clone(), wake.clone(), wake);
    HandlerFns::new()
        .added(move |o| w1(o))
        .updated(move |_, n| w2(n))
        .deleted(move |o| w3(o))
}

/// What one sync does to the Pods.
#[derive(Debug, Clone, PartialEq)]
pub enum Act {
    /// Create the Pod of this ordinal, at the update revision (`true`) or the current one.
    Create { ordinal: i64, update: bool },
    /// Delete this Pod: failed (it is created again), beyond the replicas, or at an old
    /// revision.
    Delete(String),
}

fn ordinal_of(set_name: &str, pod: &Value) -> Option<i64> {
    let rest = pod.name().strip_prefix(set_name)?.strip_prefix('-')?;
    if rest.starts_with('0') && rest.len() > 1 {
        return None;
    }
    rest.parse().ok().filter(|n: &i64| *n >= 0)
}

fn start_ordinal(set: &Value) -> i64 {
    set["spec"]["ordinals"]["start"]
        .as_i64()
        .unwrap_or(0)
        .max(0)
}

fn running_and_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running" && objects::pod_is_ready(pod)
}

fn has_ended(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Failed") | Some("Succeeded")
    )
}

fn rolling_partition(set: &Value) -> Option<i64> {
    let strategy = &set["spec"]["updateStrategy"];
    match strategy["type"].as_str().unwrap_or("RollingUpdate") {
        "RollingUpdate" => Some(
            strategy["rollingUpdate"]["partition"]
                .as_i64()
                .unwrap_or(0)
                .max(0),
        ),
        _ => None,
    }
}

/// What the set's Pods need next, from the cache: the first missing or failed Pod (all of
/// them, `Parallel`), then the condemned ones highest first, then the rolling update from
/// the highest ordinal down. `OrderedReady` stops at the first Pod not yet Running and Ready.
pub fn plan(set: &Value, pods: &[Arc<Value>], update_revision: &str) -> Vec<Act> {
    let name = set.name();
    let start = start_ordinal(set);
    let end = start + objects::spec_replicas(set);
    let parallel = set["spec"]["podManagementPolicy"] == "Parallel";
    let partition = rolling_partition(set);
    let by_ordinal: BTreeMap<i64, &Arc<Value>> = pods
        .iter()
        .filter_map(|p| ordinal_of(name, p).map(|o| (o, p)))
        .collect();
    let mut acts = Vec::new();
    for ordinal in start..end {
        let blocked = match by_ordinal.get(&ordinal) {
            None => {
                let update = partition.is_none_or(|p| ordinal >= start + p);
                acts.push(Act::Create { ordinal, update });
                true
            }
            Some(p) if p.is_deleting() => true,
            Some(p) if has_ended(p) => {
                acts.push(Act::Delete(p.name().to_string()));
                true
            }
            Some(p) => !running_and_ready(p),
        };
        if blocked && !parallel {
            return acts;
        }
    }
    for (_, p) in by_ordinal
        .range(..start)
        .chain(by_ordinal.range(end..))
        .rev()
    {
        if !parallel && !acts.is_empty() {
            return acts;
        }
        if p.is_deleting() {
            if !parallel {
                return acts;
            }
            continue;
        }
        acts.push(Act::Delete(p.name().to_string()));
    }
    if !acts.is_empty() {
        return acts;
    }
    let Some(partition) = partition else {
        return acts;
    };
    for ordinal in (start + partition..end).rev() {
        let Some(p) = by_ordinal.get(&ordinal) else {
            return acts;
        };
        if p.label(REVISION_LABEL) != Some(update_revision) && !p.is_deleting() {
            acts.push(Act::Delete(p.name().to_string()));
            return acts;
        }
        if !running_and_ready(p) {
            return acts;
        }
    }
    acts
}

impl StatefulSetController {
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
            history::update_revision(&self.client, &objects::statefulsets(), &set, &mut revisions)
                .await?
        else {
            return Ok(Action::await_change());
        };
        let current = set["status"]["currentRevision"]
            .as_str()
            .and_then(|c| revisions.iter().find(|r| r.name() == c))
            .cloned()
            .unwrap_or_else(|| update.clone());

        if !set.is_deleting() {
            let acts = plan(&set, &pods, update.name());
            self.carry_out(&key, &set, &acts, &current, &update).await?;
        }
        let in_use = |r: &Value| {
            r.name() == current.name()
                || r.name() == update.name()
                || pods
                    .iter()
                    .any(|p| p.label(REVISION_LABEL) == Some(r.name()))
        };
        history::prune(&self.client, &set, &revisions, in_use).await?;
        let requeue = self.write_status(&set, &pods, &current, &update).await?;
        Ok(requeue.map_or_else(Action::await_change, Action::requeue))
    }

    async fn carry_out(
        &self,
        key: &ObjectKey,
        set: &Value,
        acts: &[Act],
        current: &Value,
        update: &Value,
    ) -> Result<(), ApiError> {
        let creations = acts
            .iter()
            .filter(|a| matches!(a, Act::Create { .. }))
            .count();
        let deletions: Vec<String> = acts
            .iter()
            .filter_map(|a| match a {
                Act::Delete(n) => Some(n.clone()),
                Act::Create { .. } => None,
            })
            .collect();
        self.expectations.expect_creations(key, creations);
        self.expectations
            .expect_deletions(key, deletions.iter().cloned());
        let results = futures::future::join_all(acts.iter().map(|act| async move {
            match act {
                Act::Create { ordinal, update: u } => {
                    let revision = if *u { update } else { current };
                    self.create_pod(set, *ordinal, revision).await
                }
                Act::Delete(name) => self.delete_pod(set, name).await,
            }
        }))
        .await;
        let mut first_error = None;
        for (act, r) in acts.iter().zip(results) {
            if let Err(e) = r {
                match act {
                    Act::Create { .. } => self.expectations.creation_observed(key),
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

    /// The Pod of `ordinal` at `revision`, after its claims.
    async fn create_pod(
        &self,
        set: &Value,
        ordinal: i64,
        revision: &Value,
    ) -> Result<(), ApiError> {
        let pod_name = format!("{}-{ordinal}", set.name());
        let template = history::revision_template(revision);
        let mut labels = template["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        labels.insert(REVISION_LABEL.into(), json!(revision.name()));
        labels.insert(POD_NAME_LABEL.into(), json!(pod_name));
        labels.insert(POD_INDEX_LABEL.into(), json!(ordinal.to_string()));
        let mut spec = template["spec"].as_object().cloned().unwrap_or_default();
        spec.insert("hostname".into(), json!(pod_name));
        if let Some(service) = set["spec"]["serviceName"]
            .as_str()
            .filter(|s| !s.is_empty())
        {
            spec.insert("subdomain".into(), json!(service));
        }
        let mut volumes: Vec<Value> = spec
            .get("volumes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for claim in set["spec"]["volumeClaimTemplates"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let claim_name = format!("{}-{pod_name}", claim.name());
            self.create_claim(set, claim, &claim_name, &pod_name)
                .await?;
            volumes.retain(|v| v["name"].as_str() != Some(claim.name()));
            volumes.push(json!({"name": claim.name(),
                                "persistentVolumeClaim": {"claimName": claim_name}}));
        }
        if !volumes.is_empty() {
            spec.insert("volumes".into(), Value::Array(volumes));
        }
        let mut meta = Map::new();
        meta.insert("name".into(), json!(pod_name));
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
            Ok(_) => {
                self.events.normal(
                    set,
                    "SuccessfulCreate",
                    format!(
                        "create Pod {pod_name} in StatefulSet {} successful",
                        set.name()
                    ),
                );
                Ok(())
            }
            Err(e) => {
                if !super::replicaset::namespace_terminating(&e) {
                    self.events.warning(
                        set,
                        "FailedCreate",
                        format!(
                            "create Pod {pod_name} in StatefulSet {} failed error: {e}",
                            set.name()
                        ),
                    );
                }
                Err(e)
            }
        }
    }

    /// A claim of the Pod's, unless it exists (claims outlive their Pods).
    async fn create_claim(
        &self,
        set: &Value,
        template: &Value,
        claim_name: &str,
        pod_name: &str,
    ) -> Result<(), ApiError> {
        let mut labels = template["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        if let Some(m) = set["spec"]["selector"]["matchLabels"].as_object() {
            labels.extend(m.clone());
        }
        let mut meta = json!({"name": claim_name, "namespace": set.namespace(), "labels": labels});
        if let Some(a) = template["metadata"].get("annotations") {
            meta["annotations"] = a.clone();
        }
        if set["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete" {
            let mut owner = objects::controller_reference(set);
            owner["controller"] = json!(false);
            meta["ownerReferences"] = json!([owner]);
        }
        let claim = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": meta, "spec": template["spec"],
        });
        match self
            .client
            .create(&objects::persistentvolumeclaims(), set.namespace(), &claim)
            .await
        {
            Ok(_) => {
                self.events.normal(
                    set,
                    "SuccessfulCreate",
                    format!(
                        "create Claim {claim_name} Pod {pod_name} in StatefulSet {} success",
                        set.name()
                    ),
                );
                Ok(())
            }
            Err(e) if e.reason == Reason::AlreadyExists => Ok(()),
            Err(e) => Err(e),
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
                self.events.normal(
                    set,
                    "SuccessfulDelete",
                    format!("delete Pod {name} in StatefulSet {} successful", set.name()),
                );
                Ok(())
            }
            Err(e) if e.reason == Reason::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The status from the cache's Pods; the rollout is complete (the update revision becomes
    /// the current one) once every replica is updated and Ready. When a Pod becomes available
    /// later (`minReadySeconds`), how long until then.
    async fn write_status(
        &self,
        set: &Value,
        pods: &[Arc<Value>],
        current: &Value,
        update: &Value,
    ) -> Result<Option<Duration>, ApiError> {
        let min_ready = Duration::from_secs(set["spec"]["minReadySeconds"].as_u64().unwrap_or(0));
        let now = SystemTime::now();
        let live: Vec<&Arc<Value>> = pods
            .iter()
            .filter(|p| !p.is_deleting() && ordinal_of(set.name(), p).is_some())
            .collect();
        let count = |f: &dyn Fn(&Value) -> bool| live.iter().filter(|p| f(p)).count() as i64;
        let replicas = count(&|_| true);
        let ready = count(&|p| running_and_ready(p));
        let available =
            count(&|p| running_and_ready(p) && objects::pod_is_available(p, min_ready, now));
        let at = |rev: &str| count(&|p| p.label(REVISION_LABEL) == Some(rev));
        let updated = at(update.name());
        let (mut current_name, mut current_replicas) = (current.name(), at(current.name()));
        let want = objects::spec_replicas(set);
        if rolling_partition(set).is_some() && updated == want && replicas == want && ready == want
        {
            current_name = update.name();
            current_replicas = updated;
        }
        let mut status = set["status"].as_object().cloned().unwrap_or_default();
        status.insert("observedGeneration".into(), json!(set.generation()));
        status.insert("replicas".into(), json!(replicas));
        status.insert("readyReplicas".into(), json!(ready));
        status.insert("availableReplicas".into(), json!(available));
        status.insert("currentReplicas".into(), json!(current_replicas));
        status.insert("updatedReplicas".into(), json!(updated));
        status.insert("currentRevision".into(), json!(current_name));
        status.insert("updateRevision".into(), json!(update.name()));
        status.entry("collisionCount").or_insert_with(|| json!(0));
        super::write_status(
            &self.client,
            &objects::statefulsets(),
            set,
            Value::Object(status),
        )
        .await?;
        Ok((available < ready && !min_ready.is_zero()).then_some(Duration::from_secs(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(replicas: i64, policy: &str, partition: Option<i64>) -> Value {
        let strategy = match partition {
            Some(p) => json!({"type": "RollingUpdate", "rollingUpdate": {"partition": p}}),
            None => json!({"type": "OnDelete"}),
        };
        json!({"metadata": {"name": "web"}, "spec": {
            "replicas": replicas, "podManagementPolicy": policy, "updateStrategy": strategy}})
    }

    fn pod(ordinal: i64, phase: &str, ready: bool, rev: &str) -> Arc<Value> {
        Arc::new(json!({
            "metadata": {"name": format!("web-{ordinal}"), "labels": {REVISION_LABEL: rev}},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
    }

    #[test]
    fn ordinals_are_read_from_names() {
        let p = |n: &str| json!({"metadata": {"name": n}});
        assert_eq!(ordinal_of("web", &p("web-0")), Some(0));
        assert_eq!(ordinal_of("web", &p("web-12")), Some(12));
        assert_eq!(ordinal_of("web", &p("web-01")), None);
        assert_eq!(ordinal_of("web", &p("webx-1")), None);
        assert_eq!(ordinal_of("web", &p("web-a")), None);
    }

    #[test]
    fn ordered_ready_creates_one_pod_at_a_time() {
        let s = set(3, "OrderedReady", Some(0));
        assert_eq!(
            plan(&s, &[], "r1"),
            [Act::Create {
                ordinal: 0,
                update: true
            }]
        );
        let starting = [pod(0, "Pending", false, "r1")];
        assert_eq!(plan(&s, &starting, "r1"), []);
        let ready = [pod(0, "Running", true, "r1")];
        assert_eq!(
            plan(&s, &ready, "r1"),
            [Act::Create {
                ordinal: 1,
                update: true
            }]
        );
    }

    #[test]
    fn parallel_creates_every_missing_pod_at_once() {
        let s = set(3, "Parallel", Some(0));
        assert_eq!(plan(&s, &[pod(1, "Pending", false, "r1")], "r1").len(), 2);
    }

    #[test]
    fn scaling_down_removes_the_highest_ordinal_first() {
        let s = set(1, "OrderedReady", Some(0));
        let pods = [
            pod(0, "Running", true, "r1"),
            pod(1, "Running", true, "r1"),
            pod(2, "Running", true, "r1"),
        ];
        assert_eq!(plan(&s, &pods, "r1"), [Act::Delete("web-2".into())]);
        let parallel = set(1, "Parallel", Some(0));
        assert_eq!(
            plan(&parallel, &pods, "r1"),
            [Act::Delete("web-2".into()), Act::Delete("web-1".into())]
        );
    }

    #[test]
    fn a_failed_pod_is_deleted_to_be_created_again() {
        let s = set(2, "OrderedReady", Some(0));
        let pods = [pod(0, "Failed", false, "r1"), pod(1, "Running", true, "r1")];
        assert_eq!(plan(&s, &pods, "r1"), [Act::Delete("web-0".into())]);
    }

    #[test]
    fn a_rolling_update_goes_down_to_the_partition_one_ready_pod_at_a_time() {
        let s = set(3, "OrderedReady", Some(1));
        let old = [
            pod(0, "Running", true, "r1"),
            pod(1, "Running", true, "r1"),
            pod(2, "Running", true, "r1"),
        ];
        assert_eq!(plan(&s, &old, "r2"), [Act::Delete("web-2".into())]);
        // web-2 recreated at r2 and not yet ready: wait.
        let mid = [
            pod(0, "Running", true, "r1"),
            pod(1, "Running", true, "r1"),
            pod(2, "Running", false, "r2"),
        ];
        assert_eq!(plan(&s, &mid, "r2"), []);
        let next = [
            pod(0, "Running", true, "r1"),
            pod(1, "Running", true, "r1"),
            pod(2, "Running", true, "r2"),
        ];
        assert_eq!(plan(&s, &next, "r2"), [Act::Delete("web-1".into())]);
        // Below the partition nothing is touched; a missing one comes back at the old revision.
        let done = [
            pod(0, "Running", true, "r1"),
            pod(1, "Running", true, "r2"),
            pod(2, "Running", true, "r2"),
        ];
        assert_eq!(plan(&s, &done, "r2"), []);
        assert_eq!(
            plan(&s, &done[1..], "r2"),
            [Act::Create {
                ordinal: 0,
                update: false
            }]
        );
        // OnDelete replaces nothing itself.
        assert_eq!(plan(&set(3, "OrderedReady", None), &old, "r2"), []);
    }
}
