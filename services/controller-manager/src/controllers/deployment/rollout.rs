//! What one sync of a Deployment decides, from the informers' caches alone: the ReplicaSets it
//! claims, which of them is new and which old, the one step it takes next, and the status it
//! writes. No I/O: the controller (`mod.rs`) carries the decisions out; the tests below feed
//! real stores and play the cluster's part.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use keel_api::Metadata;
use keel_api::selector::LabelSelector;
use keel_runtime::ObjectKey;
use serde_json::{Map, Value, json};

use super::plan::{self, Rs, Strategy, pod_template_hash};
use super::status;
use crate::objects;

pub const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
const HASH_LABEL: &str = "pod-template-hash";
/// Deployment annotations that are not copied to its ReplicaSets (Kubernetes' list).
const NOT_COPIED: [&str; 5] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    "deployment.kubernetes.io/revision-history",
    DESIRED_REPLICAS,
    MAX_REPLICAS,
];

/// The ReplicaSets of a Deployment's namespace, by what its sync does with them.
#[derive(Debug, Default)]
pub struct Claims {
    /// Controlled by the Deployment and selected by it.
    pub owned: Vec<Arc<Value>>,
    /// Selected orphans, to adopt (neither side being deleted).
    pub adopt: Vec<Arc<Value>>,
    /// Controlled by the Deployment but no longer selected, to release.
    pub release: Vec<Arc<Value>>,
}

/// Sorts `candidates` (the ReplicaSets of `d`'s namespace) into those `d` owns, adopts and
/// releases, as Kubernetes' `ClaimReplicaSets`. A ReplicaSet of another controller is none
/// of them.
pub fn claims(d: &Value, selector: &LabelSelector, candidates: Vec<Arc<Value>>) -> Claims {
    let mut claims = Claims::default();
    for rs in candidates {
        let matches = objects::selects(selector, &rs);
        match rs.controller_uid() {
            Some(u) if u == d.uid() => {
                if matches {
                    claims.owned.push(rs);
                } else {
                    claims.release.push(rs);
                }
            }
            None if matches && !d.is_deleting() && !rs.is_deleting() => claims.adopt.push(rs),
            _ => {}
        }
    }
    claims
}

/// The one step a sync takes.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Create this ReplicaSet: the Deployment's template as the newest revision.
    CreateNewRs(Value),
    /// Bring the revision up to date on the new ReplicaSet (these annotations, when stale) and
    /// on the Deployment (this `deployment.kubernetes.io/revision`, when stale).
    SyncRevisions {
        annotations: Option<Map<String, Value>>,
        revision: Option<String>,
    },
    /// Resize these ReplicaSets, each as the cache holds it (its `resourceVersion` is the
    /// write's precondition).
    Scale(Vec<(Arc<Value>, i64)>),
    /// Wait for the ReplicaSets or their Pods to catch up; their events bring the Deployment
    /// back.
    Wait,
    /// Nothing left to roll; delete these old revisions beyond `revisionHistoryLimit`.
    Done { prune: Vec<Arc<Value>> },
}

/// A Deployment and the ReplicaSets it controls: the new one (of its current template) and
/// the old ones, oldest revision first.
#[derive(Debug, Clone)]
pub struct Rollout {
    d: Arc<Value>,
    replicas: i64,
    strategy: Strategy,
    new_rs: Option<Arc<Value>>,
    olds: Vec<Arc<Value>>,
}

impl Rollout {
    /// The rollout of `d` over the ReplicaSets it owns; `Err` when its strategy cannot be read.
    pub fn new(d: Arc<Value>, owned: Vec<Arc<Value>>) -> Result<Rollout, String> {
        let replicas = objects::spec_replicas(&d);
        let strategy = Strategy::of(&d, replicas)?;
        let template = &d["spec"]["template"];
        let (mut news, mut olds): (Vec<Arc<Value>>, Vec<Arc<Value>>) = owned
            .into_iter()
            .partition(|rs| plan::same_template(&rs["spec"]["template"], template));
        // Several ReplicaSets with the Deployment's template (e.g. adopted): the oldest is the
        // new one, the others are old.
        news.sort_by_key(|rs| {
            (
                rs.creation_timestamp().map(str::to_string),
                rs.name().to_string(),
            )
        });
        let new_rs = if news.is_empty() {
            None
        } else {
            Some(news.remove(0))
        };
        olds.extend(news);
        olds.sort_by_key(|rs| (revision(rs), rs.creation_timestamp().map(str::to_string)));
        Ok(Rollout {
            d,
            replicas,
            strategy,
            new_rs,
            olds,
        })
    }

    pub fn deployment(&self) -> &Arc<Value> {
        &self.d
    }

    pub fn new_rs(&self) -> Option<&Arc<Value>> {
        self.new_rs.as_ref()
    }

    /// The new ReplicaSet, then the old ones.
    pub fn replica_sets(&self) -> impl Iterator<Item = &Arc<Value>> {
        self.new_rs.iter().chain(self.olds.iter())
    }

    /// The new ReplicaSet, just created by the step this rollout decided.
    pub fn created(&mut self, rs: Arc<Value>) {
        self.new_rs = Some(rs);
    }

    /// The next step. `caught_up`: the cache holds this controller's last write of every
    /// ReplicaSet ([`OwnWrites::caught_up`]); until it does, their counts predate that write
    /// and nothing is planned from them.
    pub fn next_step(&self, caught_up: bool) -> Step {
        let d = &*self.d;
        let paused = d["spec"]["paused"].as_bool().unwrap_or(false);
        let nothing = Step::Done { prune: Vec::new() };
        if d.is_deleting() {
            return nothing;
        }
        let all_settled = caught_up && self.replica_sets().all(|rs| settled(rs));
        let Some(new) = &self.new_rs else {
            if paused {
                return nothing;
            }
            let size = if all_settled { self.initial_size() } else { 0 };
            return Step::CreateNewRs(self.new_rs_body(size));
        };
        if !caught_up {
            return Step::Wait;
        }
        if let Some(sync) = self.revision_sync(new) {
            return sync;
        }
        if paused {
            return nothing;
        }
        if !all_settled {
            return Step::Wait;
        }
        match self.strategy {
            Strategy::Recreate => self.recreate(new),
            Strategy::RollingUpdate {
                max_surge,
                max_unavailable,
            } => self.rolling(new, max_surge, max_unavailable),
        }
    }

    /// The Deployment's status from its ReplicaSets at `now`, and when to look again (to
    /// notice a passed progress deadline). `event`: what the step just taken did.
    pub fn status(&self, event: status::Event, now: SystemTime) -> (Value, Option<Duration>) {
        let all: Vec<&Value> = self.replica_sets().map(|r| r.as_ref()).collect();
        status::compute(&status::Input {
            deployment: &self.d,
            new_rs: self.new_rs.as_deref(),
            all: &all,
            max_unavailable: self.strategy.max_unavailable(),
            event,
            now,
        })
    }

    /// The size a new ReplicaSet starts at: what the strategy allows right away.
    fn initial_size(&self) -> i64 {
        match self.strategy {
            Strategy::Recreate => {
                let old_pods = self.olds.iter().any(|rs| {
                    objects::spec_replicas(rs) > 0 || objects::status_i64(rs, "replicas") > 0
                });
                if old_pods { 0 } else { self.replicas }
            }
            Strategy::RollingUpdate { max_surge, .. } => {
                let views: Vec<Rs> = self.olds.iter().map(|r| view(r)).collect();
                plan::new_rs_target(self.replicas, max_surge, &Rs::default(), &views)
            }
        }
    }

    /// The ReplicaSet of the Deployment's current template, as the newest revision, named by
    /// its `pod-template-hash` (and `status.collisionCount`, which a name taken by another
    /// template raises).
    fn new_rs_body(&self, size: i64) -> Value {
        let d = &*self.d;
        let collision = d["status"]["collisionCount"].as_i64();
        let hash = pod_template_hash(&d["spec"]["template"], collision);
        let mut template = d["spec"]["template"].clone();
        template["metadata"]["labels"][HASH_LABEL] = json!(hash);
        let mut selector = d["spec"]["selector"].clone();
        selector["matchLabels"][HASH_LABEL] = json!(hash);
        let next_revision = self.olds.iter().map(|r| revision(r)).max().unwrap_or(0) + 1;
        let mut annotations = copied_annotations(d);
        annotations.insert(REVISION.into(), json!(next_revision.to_string()));
        annotations.insert(DESIRED_REPLICAS.into(), json!(self.replicas.to_string()));
        annotations.insert(
            MAX_REPLICAS.into(),
            json!((self.replicas + self.strategy.max_surge()).to_string()),
        );
        let mut spec = json!({"replicas": size, "selector": selector, "template": template});
        if let Some(m) = d["spec"].get("minReadySeconds") {
            spec["minReadySeconds"] = m.clone();
        }
        json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": format!("{}-{hash}", d.name()),
                "namespace": d.namespace(),
                "labels": template["metadata"]["labels"],
                "annotations": annotations,
                "ownerReferences": [objects::controller_reference(d)],
            },
            "spec": spec,
        })
    }

    /// The new ReplicaSet must be the newest revision (a rollback makes an old one new again),
    /// and the Deployment carries its revision; `None` when both already are.
    fn revision_sync(&self, new: &Value) -> Option<Step> {
        let max_old = self.olds.iter().map(|r| revision(r)).max().unwrap_or(0);
        let want = if revision(new) > max_old {
            revision(new)
        } else {
            max_old + 1
        };
        let mut annotations = copied_annotations(&self.d);
        annotations.insert(REVISION.into(), json!(want.to_string()));
        annotations.insert(DESIRED_REPLICAS.into(), json!(self.replicas.to_string()));
        annotations.insert(
            MAX_REPLICAS.into(),
            json!((self.replicas + self.strategy.max_surge()).to_string()),
        );
        let stale = annotations
            .iter()
            .any(|(k, v)| new.annotation(k) != v.as_str());
        let want = want.to_string();
        let revision = (self.d.annotation(REVISION) != Some(want.as_str())).then_some(want);
        (stale || revision.is_some()).then(|| Step::SyncRevisions {
            annotations: stale.then_some(annotations),
            revision,
        })
    }

    /// Recreate: every old Pod goes, then the new ReplicaSet grows.
    fn recreate(&self, new: &Arc<Value>) -> Step {
        let shrink: Vec<(Arc<Value>, i64)> = self
            .olds
            .iter()
            .filter(|r| objects::spec_replicas(r) > 0)
            .map(|r| (r.clone(), 0))
            .collect();
        if !shrink.is_empty() {
            return Step::Scale(shrink);
        }
        if self.olds.iter().any(|rs| has_pods(rs)) {
            return Step::Wait;
        }
        if objects::spec_replicas(new) != self.replicas {
            return Step::Scale(vec![(new.clone(), self.replicas)]);
        }
        Step::Done {
            prune: self.prunable(),
        }
    }

    /// Rolling update: the new ReplicaSet grows within `maxSurge`, then the old ones shrink
    /// within `maxUnavailable`, one step per settled state.
    fn rolling(&self, new: &Arc<Value>, max_surge: i64, max_unavailable: i64) -> Step {
        let old_views: Vec<Rs> = self.olds.iter().map(|r| view(r)).collect();
        let new_view = view(new);
        let target = plan::new_rs_target(self.replicas, max_surge, &new_view, &old_views);
        if target != new_view.spec {
            return Step::Scale(vec![(new.clone(), target)]);
        }
        let downs = plan::old_rs_targets(self.replicas, max_unavailable, &new_view, &old_views);
        if !downs.is_empty() {
            return Step::Scale(
                downs
                    .into_iter()
                    .map(|(i, size)| (self.olds[i].clone(), size))
                    .collect(),
            );
        }
        let done = new_view.spec == self.replicas
            && new_view.available == self.replicas
            && old_views.iter().all(|r| r.spec == 0);
        if done {
            Step::Done {
                prune: self.prunable(),
            }
        } else {
            Step::Wait
        }
    }

    /// Old ReplicaSets beyond `revisionHistoryLimit` (default 10) without Pods, oldest first.
    fn prunable(&self) -> Vec<Arc<Value>> {
        let limit = usize::try_from(
            self.d["spec"]["revisionHistoryLimit"]
                .as_i64()
                .unwrap_or(10),
        )
        .unwrap_or(0);
        let idle: Vec<&Arc<Value>> = self
            .olds
            .iter()
            .filter(|r| {
                objects::spec_replicas(r) == 0
                    && objects::status_i64(r, "replicas") == 0
                    && !r.is_deleting()
            })
            .collect();
        let surplus = idle.len().saturating_sub(limit);
        idle[..surplus].iter().map(|r| (*r).clone()).collect()
    }
}

/// The merge patch resizing `rs`, pinned to the version the size was planned from.
pub fn scale_patch(rs: &Value, size: i64) -> Value {
    json!({
        "metadata": {"resourceVersion": rs["metadata"]["resourceVersion"]},
        "spec": {"replicas": size},
    })
}

/// The merge patch setting these annotations on `rs`, pinned to its version.
pub fn annotations_patch(rs: &Value, annotations: &Map<String, Value>) -> Value {
    json!({"metadata": {"annotations": annotations,
        "resourceVersion": rs["metadata"]["resourceVersion"]}})
}

/// The merge patch setting the Deployment's revision, pinned to its version.
pub fn revision_patch(d: &Value, revision: &str) -> Value {
    json!({"metadata": {"annotations": {REVISION: revision},
        "resourceVersion": d["metadata"]["resourceVersion"]}})
}

/// The `resourceVersion` of this controller's last write of each ReplicaSet (by
/// namespace/name): until the cache holds that version, the ReplicaSet's counts predate our
/// own change. Entries go once the cache catches up; bounded by the ReplicaSets.
#[derive(Debug, Default)]
pub struct OwnWrites(Mutex<HashMap<ObjectKey, i64>>);

impl OwnWrites {
    /// Remembers `rs` as this controller just wrote it.
    pub fn remember(&self, rs: &Value) {
        if let Ok(k) = ObjectKey::from_object(rs) {
            self.lock().insert(k, resource_version(rs));
        }
    }

    /// Whether the cache, which holds these ReplicaSets, holds this controller's last write of
    /// each.
    pub fn caught_up<'a>(&self, rss: impl Iterator<Item = &'a Arc<Value>>) -> bool {
        let mut written = self.lock();
        let mut all = true;
        for rs in rss {
            let Ok(k) = ObjectKey::from_object(rs) else {
                continue;
            };
            if let Some(want) = written.get(&k) {
                if resource_version(rs) >= *want {
                    written.remove(&k);
                } else {
                    all = false;
                }
            }
        }
        all
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, i64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn revision(rs: &Value) -> i64 {
    rs.annotation(REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn resource_version(obj: &Value) -> i64 {
    obj.resource_version().parse().unwrap_or(0)
}

/// Whether Pods of the ReplicaSet may still exist, running or terminating, as its controller
/// last counted them (and it has counted since its last resize).
fn has_pods(rs: &Value) -> bool {
    objects::status_i64(rs, "observedGeneration") < rs.generation()
        || objects::status_i64(rs, "replicas") > 0
        || objects::status_i64(rs, "terminatingReplicas") > 0
}

/// The ReplicaSet's controller has observed its size and has exactly that many Pods.
fn settled(rs: &Value) -> bool {
    objects::status_i64(rs, "observedGeneration") >= rs.generation()
        && objects::status_i64(rs, "replicas") == objects::spec_replicas(rs)
}

fn view(rs: &Value) -> Rs {
    Rs {
        spec: objects::spec_replicas(rs),
        available: objects::status_i64(rs, "availableReplicas"),
    }
}

/// The Deployment's annotations a ReplicaSet carries (e.g. `kubernetes.io/change-cause`).
fn copied_annotations(d: &Value) -> Map<String, Value> {
    d.annotations()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use keel_patch::apply_merge_patch;
    use keel_runtime::{BY_NAMESPACE, Store};
    use serde_json::json;
    use tokio::time::Instant;

    use super::*;
    use crate::controllers::deployment::status::{
        Event, NEW_RS_AVAILABLE, NEW_RS_CREATED, PAUSED, RS_UPDATED, TIMED_OUT,
    };

    const NS: &str = "default";

    fn t0() -> SystemTime {
        objects::parse_time("2026-01-01T00:00:00Z").unwrap()
    }

    fn rolling(max_surge: i64, max_unavailable: i64) -> Value {
        json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": max_unavailable}})
    }

    fn template(image: &str) -> Value {
        json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "nginx", "image": image}]}})
    }

    /// The Deployment `web`: `replicas` Pods of nginx at `image`.
    fn deployment(replicas: i64, image: &str, strategy: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": NS, "uid": "uid-web", "generation": 1,
                "resourceVersion": "1"},
            "spec": {"replicas": replicas, "strategy": strategy,
                "selector": {"matchLabels": {"app": "web"}}, "template": template(image)}})
    }

    fn image(rs: &Value) -> &str {
        rs["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap_or("")
    }

    fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
        status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == kind))
            .unwrap_or(&Value::Null)
    }

    fn progressing(status: &Value) -> (&str, &str) {
        let c = condition(status, "Progressing");
        (
            c["status"].as_str().unwrap_or(""),
            c["reason"].as_str().unwrap_or(""),
        )
    }

    /// Wall time that moves with tokio's clock (paused in the tests that use it).
    struct Clock {
        start: Instant,
    }

    impl Clock {
        fn new() -> Clock {
            Clock {
                start: Instant::now(),
            }
        }

        fn now(&self) -> SystemTime {
            t0() + self.start.elapsed()
        }
    }

    /// The world around the controller, as these tests play it: the two informers' caches
    /// (real stores), written as the API server writes (a new `resourceVersion` each time, a
    /// new `generation` when the spec changes, a write's `resourceVersion` precondition); and
    /// the moves the world makes on its own: the ReplicaSet controller sizing one
    /// ReplicaSet's Pods, terminating Pods going, Pods starting.
    struct Cluster {
        deployments: Store,
        replicasets: Store,
        /// The controller's own record of its writes, as `mod.rs` keeps it.
        written: OwnWrites,
        /// The last `resourceVersion` given out.
        version: i64,
        /// ReplicaSets created so far: each is a second younger than the one before.
        created: u64,
    }

    impl Cluster {
        fn new(d: Value) -> Cluster {
            let c = Cluster {
                deployments: Store::new(),
                replicasets: Store::new(),
                written: OwnWrites::default(),
                version: 1,
                created: 0,
            };
            c.deployments.insert(Arc::new(d)).unwrap();
            c
        }

        fn deployment(&self) -> Arc<Value> {
            self.deployments.get(&ObjectKey::new(NS, "web")).unwrap()
        }

        /// The ReplicaSet of the template with this image.
        fn replica_set(&self, img: &str) -> Option<Arc<Value>> {
            self.replicasets
                .list()
                .into_iter()
                .find(|rs| image(rs) == img)
        }

        /// `(spec.replicas, status.availableReplicas)` of the ReplicaSet of this image.
        fn sizes(&self, img: &str) -> (i64, i64) {
            self.replica_set(img).map_or((0, 0), |rs| {
                (
                    objects::spec_replicas(&rs),
                    objects::status_i64(&rs, "availableReplicas"),
                )
            })
        }

        /// Pods there are, and Pods available, across every ReplicaSet.
        fn pods(&self) -> (i64, i64) {
            let rss = self.replicasets.list();
            let sum = |f: &str| rss.iter().map(|r| objects::status_i64(r, f)).sum();
            (sum("replicas"), sum("availableReplicas"))
        }

        /// Writes `obj` as the API server would, replacing `old`.
        fn put(&mut self, store: &Store, old: Option<&Value>, mut obj: Value) -> Value {
            if let Some(old) = old
                && old["spec"] != obj["spec"]
            {
                obj["metadata"]["generation"] = json!(old.generation() + 1);
            }
            self.version += 1;
            obj["metadata"]["resourceVersion"] = json!(self.version.to_string());
            store.insert(Arc::new(obj.clone())).unwrap();
            obj
        }

        /// A merge patch of `target`; `None` (a `Conflict`) when its `resourceVersion` is not
        /// the current one.
        fn patch(&mut self, store: &Store, target: &Value, patch: &Value) -> Option<Value> {
            let current = store.get(&ObjectKey::from_object(target).unwrap())?;
            if let Some(rv) = patch["metadata"]["resourceVersion"].as_str()
                && rv != current.resource_version()
            {
                return None;
            }
            let patched = apply_merge_patch(&current, patch);
            Some(self.put(store, Some(&current), patched))
        }

        /// A user's change of the Deployment.
        fn update_deployment(&mut self, change: impl FnOnce(&mut Value)) {
            let current = self.deployment();
            let mut next = (*current).clone();
            change(&mut next);
            let store = self.deployments.clone();
            self.put(&store, Some(&current), next);
        }

        /// The Rollout one sync plans from (the Deployment owning every ReplicaSet it selects).
        fn rollout(&self) -> Rollout {
            let d = self.deployment();
            let selector = objects::selector(&d).unwrap();
            let candidates = self.replicasets.by_index(BY_NAMESPACE, d.namespace());
            let claims = claims(&d, &selector, candidates);
            assert!(claims.adopt.is_empty() && claims.release.is_empty());
            Rollout::new(d, claims.owned).unwrap()
        }

        /// One sync, carried out as the controller carries it out: the step it took, the
        /// status it computed (and wrote), and when it asked to look again.
        fn sync(&mut self, now: SystemTime) -> (Step, Value, Option<Duration>) {
            let mut rollout = self.rollout();
            let step = rollout.next_step(self.written.caught_up(rollout.replica_sets()));
            let event = self.take(&mut rollout, step.clone());
            let (status, recheck) = rollout.status(event, now);
            self.write_status(rollout.deployment(), status.clone());
            (step, status, recheck)
        }

        fn take(&mut self, rollout: &mut Rollout, step: Step) -> Event {
            let rss = self.replicasets.clone();
            match step {
                Step::CreateNewRs(mut rs) => {
                    self.created += 1;
                    let created = t0() + Duration::from_secs(self.created);
                    rs["metadata"]["uid"] = json!(format!("uid-{}", rs.name()));
                    rs["metadata"]["generation"] = json!(1);
                    rs["metadata"]["creationTimestamp"] = json!(objects::format_time(created));
                    let rs = self.put(&rss, None, rs);
                    self.written.remember(&rs);
                    rollout.created(Arc::new(rs));
                    return Event::CreatedNewRs;
                }
                Step::SyncRevisions {
                    annotations,
                    revision,
                } => {
                    if let (Some(annotations), Some(new)) = (annotations, rollout.new_rs()) {
                        let patch = annotations_patch(new, &annotations);
                        if let Some(written) = self.patch(&rss, new, &patch) {
                            self.written.remember(&written);
                        }
                    }
                    if let Some(revision) = revision {
                        let (ds, d) = (self.deployments.clone(), rollout.deployment().clone());
                        self.patch(&ds, &d, &revision_patch(&d, &revision));
                    }
                }
                Step::Scale(sizes) => {
                    for (rs, size) in sizes {
                        if let Some(written) = self.patch(&rss, &rs, &scale_patch(&rs, size)) {
                            self.written.remember(&written);
                        }
                    }
                }
                Step::Wait => {}
                Step::Done { prune } => {
                    for rs in prune {
                        rss.remove(&ObjectKey::from_object(&rs).unwrap());
                    }
                }
            }
            Event::None
        }

        /// Syncs until a sync writes nothing, as the events of each write would bring the
        /// Deployment back; the last sync's.
        fn sync_until_quiet(&mut self, now: SystemTime) -> (Step, Value, Option<Duration>) {
            for _ in 0..10 {
                let version = self.version;
                let last = self.sync(now);
                if self.version == version {
                    return last;
                }
            }
            panic!("the Deployment's syncs keep writing");
        }

        /// The status write: none when unchanged, refused when the Deployment changed since.
        fn write_status(&mut self, from: &Value, status: Value) {
            let current = self.deployment();
            if status == from["status"] || current.resource_version() != from.resource_version() {
                return;
            }
            let mut next = (*current).clone();
            next["status"] = status;
            let store = self.deployments.clone();
            self.put(&store, Some(&current), next);
        }

        /// The ReplicaSet controller's move: one ReplicaSet it has not caught up with gets its
        /// Pods made (not yet available) or told to terminate, and its generation observed.
        /// One growing goes first: Pods made before others go is the worst case for the bounds.
        fn replicaset_controller(&mut self) -> bool {
            let rss = self.replicasets.clone();
            let behind = rss.list().into_iter().filter(|rs| {
                objects::status_i64(rs, "observedGeneration") != rs.generation()
                    || objects::status_i64(rs, "replicas") != objects::spec_replicas(rs)
            });
            let growing =
                |rs: &Value| objects::spec_replicas(rs) > objects::status_i64(rs, "replicas");
            let Some(rs) = behind.min_by_key(|rs| (!growing(rs), rs.name().to_string())) else {
                return false;
            };
            let spec = objects::spec_replicas(&rs);
            let pods = objects::status_i64(&rs, "replicas");
            let terminating =
                objects::status_i64(&rs, "terminatingReplicas") + (pods - spec).max(0);
            let available = objects::status_i64(&rs, "availableReplicas").min(spec);
            let mut next = (*rs).clone();
            next["status"] = json!({"replicas": spec, "readyReplicas": available,
                "availableReplicas": available, "terminatingReplicas": terminating,
                "observedGeneration": rs.generation()});
            self.put(&rss, Some(&rs), next);
            true
        }

        /// The terminating Pods' move: they are gone.
        fn pods_terminate(&mut self) -> bool {
            self.each_status(|status| {
                let gone = status["terminatingReplicas"].as_i64().unwrap_or(0) > 0;
                status["terminatingReplicas"] = json!(0);
                gone
            })
        }

        /// The Pods' move: every Pod there is becomes ready and available.
        fn pods_start(&mut self) -> bool {
            self.each_status(|status| {
                let pods = status["replicas"].clone();
                let started = status["availableReplicas"] != pods;
                status["readyReplicas"] = pods.clone();
                status["availableReplicas"] = pods;
                started
            })
        }

        /// Applies `change` to each ReplicaSet's status, writing those it changed.
        fn each_status(&mut self, change: impl Fn(&mut Value) -> bool) -> bool {
            let rss = self.replicasets.clone();
            let mut moved = false;
            for rs in rss.list() {
                let mut next = (*rs).clone();
                if change(&mut next["status"]) {
                    self.put(&rss, Some(&rs), next);
                    moved = true;
                }
            }
            moved
        }

        /// Syncs, letting the world make one move after each sync that wrote nothing, until
        /// neither has anything left to do. `check` sees the cluster after every change.
        fn settle(&mut self, now: SystemTime, check: &mut dyn FnMut(&Cluster)) -> Vec<Step> {
            let mut steps = Vec::new();
            for _ in 0..200 {
                let (step, _, _) = self.sync(now);
                check(self);
                let wrote = step != Step::Wait && step != (Step::Done { prune: Vec::new() });
                steps.push(step);
                if wrote {
                    continue;
                }
                if !self.replicaset_controller() && !self.pods_terminate() && !self.pods_start() {
                    return steps;
                }
                check(self);
            }
            panic!("the Deployment did not settle: {steps:#?}");
        }
    }

    #[test]
    fn a_new_deployment_gets_a_replica_set_named_by_its_pod_template_hash() {
        let mut d = deployment(3, "nginx:1", rolling(1, 1));
        d["metadata"]["annotations"] = json!({"kubernetes.io/change-cause": "first",
            "kubectl.kubernetes.io/last-applied-configuration": "{}"});
        let mut c = Cluster::new(d.clone());
        let (step, status, _) = c.sync(t0());
        let Step::CreateNewRs(rs) = step else {
            panic!("{step:?}")
        };
        let hash = pod_template_hash(&d["spec"]["template"], None);
        assert_eq!(rs.name(), format!("web-{hash}"));
        assert_eq!(rs.namespace(), NS);
        let labels = json!({"app": "web", "pod-template-hash": hash});
        assert_eq!(rs["metadata"]["labels"], labels);
        assert_eq!(rs["spec"]["selector"]["matchLabels"], labels);
        assert_eq!(rs["spec"]["template"]["metadata"]["labels"], labels);
        assert_eq!(
            rs["spec"]["replicas"], 3,
            "nothing old to replace: all at once"
        );
        let owner = rs.controller_ref().unwrap();
        assert_eq!(
            (&owner["kind"], &owner["name"], &owner["uid"]),
            (&json!("Deployment"), &json!("web"), &json!("uid-web"))
        );
        assert_eq!(rs.annotation(REVISION), Some("1"));
        assert_eq!(rs.annotation("kubernetes.io/change-cause"), Some("first"));
        assert_eq!(
            rs.annotation("kubectl.kubernetes.io/last-applied-configuration"),
            None
        );
        assert_eq!(progressing(&status), ("True", NEW_RS_CREATED));
        assert_eq!(
            condition(&status, "Progressing")["message"],
            format!("Created new replica set \"web-{hash}\"")
        );

        let (step, _, _) = c.sync(t0());
        assert!(!matches!(step, Step::CreateNewRs(_)), "{step:?}");
        assert_eq!(c.replicasets.len(), 1, "found again, not created twice");
    }

    #[test]
    fn a_template_change_rolls_within_max_surge_and_max_unavailable() {
        let mut c = Cluster::new(deployment(4, "nginx:1", rolling(1, 1)));
        c.settle(t0(), &mut |_| {});
        assert_eq!(c.sizes("nginx:1"), (4, 4));

        c.update_deployment(|d| d["spec"]["template"] = template("nginx:2"));
        let (mut most_pods, mut fewest_available) = (0, i64::MAX);
        let steps = c.settle(t0(), &mut |c| {
            let (pods, available) = c.pods();
            let sizes: i64 = c
                .replicasets
                .list()
                .iter()
                .map(|r| objects::spec_replicas(r))
                .sum();
            assert!(
                pods <= 5 && sizes <= 5,
                "past maxSurge: {pods} Pods, sizes {sizes}"
            );
            assert!(available >= 3, "past maxUnavailable: {available} available");
            most_pods = most_pods.max(pods);
            fewest_available = fewest_available.min(available);
        });
        assert!(
            matches!(&steps[0], Step::CreateNewRs(rs) if rs["spec"]["replicas"] == 1),
            "the new ReplicaSet starts at the surge: {:?}",
            steps[0]
        );
        assert_eq!(
            (most_pods, fewest_available),
            (5, 3),
            "both bounds reached, neither passed"
        );
        assert_eq!(c.sizes("nginx:2"), (4, 4));
        assert_eq!(c.sizes("nginx:1"), (0, 0));
        let new = c.replica_set("nginx:2").unwrap();
        assert_eq!(new.annotation(REVISION), Some("2"));
        assert_eq!(c.deployment().annotation(REVISION), Some("2"));
        let (_, status, _) = c.sync(t0());
        assert_eq!(progressing(&status), ("True", NEW_RS_AVAILABLE));
        assert_eq!(
            (
                &status["replicas"],
                &status["updatedReplicas"],
                &status["availableReplicas"]
            ),
            (&json!(4), &json!(4), &json!(4))
        );
    }

    #[test]
    fn recreate_stops_every_old_pod_before_a_new_one_starts() {
        let mut c = Cluster::new(deployment(3, "nginx:1", json!({"type": "Recreate"})));
        c.settle(t0(), &mut |_| {});
        c.update_deployment(|d| d["spec"]["template"] = template("nginx:2"));
        let mut fewest_pods = i64::MAX;
        c.settle(t0(), &mut |c| {
            let pods = |img: &str| {
                c.replica_set(img).map_or(0, |r| {
                    objects::status_i64(&r, "replicas")
                        + objects::status_i64(&r, "terminatingReplicas")
                })
            };
            let (old, new) = (pods("nginx:1"), pods("nginx:2"));
            assert!(
                old == 0 || new == 0,
                "old and new Pods at once: {old} and {new}"
            );
            fewest_pods = fewest_pods.min(old + new);
        });
        assert_eq!(fewest_pods, 0);
        assert_eq!(c.sizes("nginx:2"), (3, 3));
        assert_eq!(c.sizes("nginx:1"), (0, 0));
    }

    #[test]
    fn a_paused_deployment_does_not_roll_until_resumed() {
        let mut c = Cluster::new(deployment(2, "nginx:1", rolling(1, 0)));
        c.settle(t0(), &mut |_| {});
        c.update_deployment(|d| {
            d["spec"]["paused"] = json!(true);
            d["spec"]["template"] = template("nginx:2");
        });
        let steps = c.settle(t0(), &mut |_| {});
        assert!(c.replica_set("nginx:2").is_none(), "{steps:?}");
        assert_eq!(c.sizes("nginx:1"), (2, 2));
        let (_, status, _) = c.sync(t0());
        assert_eq!(progressing(&status), ("Unknown", PAUSED));

        c.update_deployment(|d| d["spec"]["paused"] = json!(false));
        c.settle(t0(), &mut |_| {});
        assert_eq!(c.sizes("nginx:2"), (2, 2));
        assert_eq!(c.sizes("nginx:1"), (0, 0));
    }

    #[test]
    fn pausing_mid_rollout_holds_every_replica_set_at_its_size() {
        let mut c = Cluster::new(deployment(4, "nginx:1", rolling(1, 1)));
        c.settle(t0(), &mut |_| {});
        c.update_deployment(|d| d["spec"]["template"] = template("nginx:2"));
        // A few syncs into the rollout: both ReplicaSets have Pods.
        for _ in 0..3 {
            c.sync(t0());
            c.replicaset_controller();
            c.pods_start();
        }
        let before = (c.sizes("nginx:1"), c.sizes("nginx:2"));
        assert!(before.1.0 > 0 && before.0.0 > 0, "mid-rollout: {before:?}");

        c.update_deployment(|d| d["spec"]["paused"] = json!(true));
        let steps = c.settle(t0(), &mut |_| {});
        assert_eq!(
            (c.sizes("nginx:1"), c.sizes("nginx:2")),
            before,
            "{steps:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_rollout_without_progress_fails_at_its_deadline() {
        let clock = Clock::new();
        let mut d = deployment(2, "nginx:1", rolling(1, 0));
        d["spec"]["progressDeadlineSeconds"] = json!(60);
        let mut c = Cluster::new(d);
        c.settle(clock.now(), &mut |_| {});
        c.update_deployment(|d| d["spec"]["template"] = template("nginx:2"));
        let (step, status, _) = c.sync(clock.now());
        assert!(matches!(step, Step::CreateNewRs(_)), "{step:?}");
        assert_eq!(progressing(&status), ("True", NEW_RS_CREATED));

        // Its Pod is made half a minute later, and never becomes available.
        tokio::time::advance(Duration::from_secs(30)).await;
        c.replicaset_controller();
        // Its writes bring the Deployment back until it has nothing to write: the progress
        // recorded, it asks to be looked at again once the deadline, counted from that
        // progress, has passed.
        let (_, status, recheck) = c.sync_until_quiet(clock.now());
        assert_eq!(progressing(&status), ("True", RS_UPDATED));
        let recheck = recheck.expect("a recheck at the deadline");
        assert!(recheck > Duration::from_secs(60), "{recheck:?}");

        tokio::time::advance(Duration::from_secs(59)).await;
        let (step, status, recheck) = c.sync(clock.now());
        assert_eq!(step, Step::Wait);
        assert_eq!(
            progressing(&status),
            ("True", RS_UPDATED),
            "59 s after the last progress"
        );
        tokio::time::advance(recheck.expect("a recheck at the deadline")).await;
        let (_, status, recheck) = c.sync(clock.now());
        assert_eq!(progressing(&status), ("False", TIMED_OUT));
        let new = c.replica_set("nginx:2").unwrap();
        assert_eq!(
            condition(&status, "Progressing")["message"],
            format!("ReplicaSet \"{}\" has timed out progressing.", new.name())
        );
        assert_eq!(
            condition(&status, "Available")["status"],
            "True",
            "the old Pods still serve"
        );
        assert_eq!(recheck, None);
    }

    /// A ReplicaSet of the `web` Deployment's labels at `image`, controlled by `owner`.
    fn replica_set(name: &str, img: &str, owner: Option<&str>, status: [i64; 3]) -> Value {
        let mut rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                "generation": 1, "resourceVersion": "1", "labels": {"app": "web"}},
            "spec": {"replicas": status[0], "selector": {"matchLabels": {"app": "web"}},
                "template": template(img)},
            "status": {"replicas": status[0], "readyReplicas": status[1],
                "availableReplicas": status[2], "observedGeneration": 1}});
        if let Some(uid) = owner {
            rs["metadata"]["ownerReferences"] =
                json!([{"kind": "Deployment", "name": "web", "uid": uid, "controller": true}]);
        }
        rs
    }

    #[test]
    fn status_counts_come_from_the_replica_sets_the_deployment_owns() {
        let mut d = deployment(5, "nginx:2", rolling(1, 1));
        d["metadata"]["generation"] = json!(7);
        let c = Cluster::new(d);
        for rs in [
            replica_set("new", "nginx:2", Some("uid-web"), [3, 2, 1]),
            replica_set("old", "nginx:1", Some("uid-web"), [3, 3, 3]),
            replica_set("others", "nginx:2", Some("uid-other"), [9, 9, 9]),
        ] {
            c.replicasets.insert(Arc::new(rs)).unwrap();
        }
        let (status, _) = c.rollout().status(Event::None, t0());
        assert_eq!(status["observedGeneration"], 7);
        assert_eq!(status["replicas"], 6);
        assert_eq!(status["updatedReplicas"], 3, "the new ReplicaSet's Pods");
        assert_eq!(status["readyReplicas"], 5);
        assert_eq!(status["availableReplicas"], 4);
        assert_eq!(status["unavailableReplicas"], 1);
        assert_eq!(
            condition(&status, "Available")["status"],
            "True",
            "4 >= 5 - 1"
        );
    }

    #[test]
    fn rolling_back_makes_the_old_replica_set_the_newest_revision() {
        let mut c = Cluster::new(deployment(2, "nginx:1", rolling(1, 0)));
        c.settle(t0(), &mut |_| {});
        c.update_deployment(|d| d["spec"]["template"] = template("nginx:2"));
        c.settle(t0(), &mut |_| {});
        c.update_deployment(|d| d["spec"]["template"] = template("nginx:1"));
        let (step, _, _) = c.sync(t0());
        let Step::SyncRevisions {
            annotations: Some(annotations),
            revision,
        } = &step
        else {
            panic!("{step:?}")
        };
        assert_eq!(annotations[REVISION], "3");
        assert_eq!(revision.as_deref(), Some("3"));
        c.settle(t0(), &mut |_| {});
        assert_eq!(c.replicasets.len(), 2, "no third ReplicaSet");
        assert_eq!(c.sizes("nginx:1"), (2, 2));
        assert_eq!(c.sizes("nginx:2"), (0, 0));
        let back = c.replica_set("nginx:1").unwrap();
        assert_eq!(back.annotation(REVISION), Some("3"));
        assert_eq!(c.deployment().annotation(REVISION), Some("3"));
    }

    #[test]
    fn old_revisions_beyond_the_history_limit_are_deleted_oldest_first() {
        let mut d = deployment(1, "nginx:1", rolling(1, 0));
        d["spec"]["revisionHistoryLimit"] = json!(1);
        let mut c = Cluster::new(d);
        for img in ["nginx:1", "nginx:2", "nginx:3"] {
            c.update_deployment(|d| d["spec"]["template"] = template(img));
            c.settle(t0(), &mut |_| {});
        }
        let mut left: Vec<String> = c
            .replicasets
            .list()
            .iter()
            .map(|r| image(r).to_string())
            .collect();
        left.sort();
        assert_eq!(left, ["nginx:2", "nginx:3"]);
    }

    #[test]
    fn nothing_is_planned_from_a_cache_without_this_controllers_last_write() {
        let mut c = Cluster::new(deployment(4, "nginx:1", rolling(1, 1)));
        c.settle(t0(), &mut |_| {});
        c.update_deployment(|d| d["spec"]["template"] = template("nginx:2"));
        c.sync(t0());
        c.replicaset_controller();
        c.pods_start();
        // This controller wrote the old ReplicaSet at a version its cache has not seen yet.
        let old = c.replica_set("nginx:1").unwrap();
        let mut ours = (*old).clone();
        let next = old.resource_version().parse::<i64>().unwrap() + 1;
        ours["metadata"]["resourceVersion"] = json!(next.to_string());
        c.written.remember(&ours);

        let rollout = c.rollout();
        assert!(!c.written.caught_up(rollout.replica_sets()));
        assert_eq!(rollout.next_step(false), Step::Wait);
        assert_ne!(
            rollout.next_step(true),
            Step::Wait,
            "from a cache that had caught up, the rollout goes on"
        );
        c.replicasets.insert(Arc::new(ours)).unwrap();
        assert!(c.written.caught_up(c.rollout().replica_sets()));
    }

    #[test]
    fn matching_orphans_are_adopted_and_owned_replica_sets_that_stop_matching_released() {
        let d = deployment(1, "nginx:1", rolling(1, 0));
        let mut unmatched = replica_set("unmatched", "nginx:1", Some("uid-web"), [1, 1, 1]);
        unmatched["metadata"]["labels"] = json!({"app": "db"});
        let mut stray = replica_set("stray", "nginx:1", None, [1, 1, 1]);
        stray["metadata"]["labels"] = json!({"app": "db"});
        let mut leaving = replica_set("leaving", "nginx:1", None, [1, 1, 1]);
        leaving["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let candidates: Vec<Arc<Value>> = [
            replica_set("mine", "nginx:1", Some("uid-web"), [1, 1, 1]),
            unmatched,
            replica_set("orphan", "nginx:1", None, [1, 1, 1]),
            stray,
            leaving,
            replica_set("others", "nginx:1", Some("uid-other"), [1, 1, 1]),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let selector = objects::selector(&d).unwrap();
        let names = |rss: &[Arc<Value>]| -> Vec<String> {
            rss.iter().map(|r| r.name().to_string()).collect()
        };
        let c = claims(&d, &selector, candidates.clone());
        assert_eq!(names(&c.owned), ["mine"]);
        assert_eq!(names(&c.adopt), ["orphan"]);
        assert_eq!(names(&c.release), ["unmatched"]);

        let mut deleting = d.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let c = claims(&deleting, &selector, candidates);
        assert!(
            c.adopt.is_empty(),
            "a Deployment being deleted adopts nothing"
        );
    }
}
