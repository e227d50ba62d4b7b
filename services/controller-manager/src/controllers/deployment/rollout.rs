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

