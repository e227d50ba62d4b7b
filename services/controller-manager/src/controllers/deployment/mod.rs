//! The Deployment controller: one ReplicaSet per pod template (named by its
//! `pod-template-hash`), rolled from old to new by the Deployment's strategy, as Kubernetes'
//! `DeploymentController`.
//!
//! One reconcile takes at most one step (create the new ReplicaSet, resize the new one, or
//! resize the old ones) and then waits for the ReplicaSets to settle: their controller has
//! observed the new size and has exactly that many Pods (`status.observedGeneration ==
//! generation`, `status.replicas == spec.replicas`), and this controller's cache holds its own
//! last write of each ReplicaSet. Only then are their counts facts, and only from facts can the
//! next step keep `maxSurge` and `maxUnavailable` at every moment. Writes carry the
//! `resourceVersion` they were planned from, so a plan from a stale cache is refused.
//!
//! Revisions (`deployment.kubernetes.io/revision`), `revisionHistoryLimit`, `paused`,
//! `progressDeadlineSeconds` and rollback (a template equal to an old ReplicaSet's brings it
//! back as the newest revision; `keelctl rollout undo` writes that template) as in Kubernetes.

mod plan;
mod status;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use keel_api::Metadata;
use keel_client::{ApiError, Client, DeleteParams, PatchType, Reason};
use keel_runtime::{
    Action, BY_NAMESPACE, Controller, HandlerFns, ObjectKey, ShardBy, Store, WatchOptions,
    WorkQueue, enqueue_handler,
};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tracing::{debug, info};

pub use plan::{Rs, Strategy, pod_template_hash};

use super::{Context, SetupError, Start};
use crate::objects::{self, controller_of};

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

struct DeploymentController {
    client: Client,
    deployments: Store,
    replicasets: Store,
    /// The `resourceVersion` of this controller's last write of each ReplicaSet (by
    /// namespace/name): until the cache holds that version, the ReplicaSet's counts predate
    /// our own change and nothing is planned from them. Entries go once the cache catches up;
    /// bounded by the ReplicaSets.
    written: Mutex<HashMap<ObjectKey, i64>>,
}

pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    // A Deployment's shard is that of its name; its ReplicaSets are in the same shard (by
    // owner). Its Pods are not (they go with their ReplicaSet): what this controller needs of
    // them, it reads from the ReplicaSets' status.
    let d_informer = ctx.factory.informer_with(
        &objects::deployments(),
        ctx.options(WatchOptions::default(), ShardBy::Name),
    );
    let rs_informer = ctx.factory.informer_with(
        &objects::replicasets(),
        ctx.options(WatchOptions::default(), ShardBy::Owner),
    );
    let queue = WorkQueue::default_controller_queue();
    d_informer.add_handler(enqueue_handler(queue.clone()));
    rs_informer.add_handler(replicaset_handler(queue.clone(), d_informer.store()));
    let this = Arc::new(DeploymentController {
        client: ctx.client.clone(),
        deployments: d_informer.store(),
        replicasets: rs_informer.store(),
        written: Mutex::new(HashMap::new()),
    });
    let controller = Controller::new("deployment", queue)
        .workers(ctx.config.workers)
        .metrics(registry);
    Ok(super::start(
        ctx.gate.reading(&[&d_informer, &rs_informer]),
        "deployment",
        controller,
        this,
        super::by_name(ctx),
        |this, key| async move { this.reconcile(key).await },
    ))
}

/// A ReplicaSet's events wake its Deployment; an orphan wakes the Deployments selecting it.
fn replicaset_handler(queue: WorkQueue<ObjectKey>, deployments: Store) -> HandlerFns {
    let wake = move |rs: &Value| match controller_of(rs, "Deployment") {
        Some((owner, _)) => queue.add(owner),
        None => {
            for d in deployments.by_index(BY_NAMESPACE, rs.namespace()) {
                if objects::selector(&d).is_ok_and(|s| objects::selects(&s, rs))
                    && let Ok(k) = ObjectKey::from_object(&d)
                {
                    queue.add(k);
                }
            }
        }
    };
    let (w1, w2, w3) = (wake.clone(), wake.clone(), wake);
    HandlerFns::new()
        .added(move |rs| w1(rs))
        .updated(move |old, new| {
            if controller_of(old, "Deployment") != controller_of(new, "Deployment") {
                w2(old);
            }
            w2(new);
        })
        .deleted(move |rs| w3(rs))
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

/// What a step did.
enum Step {
    /// Wrote something; the resulting events bring the Deployment back.
    Wrote,
    /// Waiting for ReplicaSets or Pods to catch up; their events bring it back.
    Waiting,
    /// Nothing left to do.
    Done,
}

impl DeploymentController {
    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(d) = self.deployments.get(&key) else {
            return Ok(Action::await_change());
        };
        let selector = match objects::selector(&d) {
            Ok(s) => s,
            Err(e) => {
                info!(deployment = %key, "invalid selector: {e}");
                return Ok(Action::await_change());
            }
        };
        let rss = self.claim_replica_sets(&d, &selector).await?;
        let replicas = objects::spec_replicas(&d);
        let strategy = match Strategy::of(&d, replicas) {
            Ok(s) => s,
            Err(e) => {
                info!(deployment = %key, "invalid strategy: {e}");
                return Ok(Action::await_change());
            }
        };
        let template = &d["spec"]["template"];
        let (mut news, mut olds): (Vec<Arc<Value>>, Vec<Arc<Value>>) = rss
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
        let mut new_rs = if news.is_empty() {
            None
        } else {
            Some(news.remove(0))
        };
        olds.extend(news);
        olds.sort_by_key(|rs| (revision(rs), rs.creation_timestamp().map(str::to_string)));

        let caught_up = self.caught_up(new_rs.iter().chain(olds.iter()));
        let all_settled = caught_up && new_rs.iter().chain(olds.iter()).all(|rs| settled(rs));
        let paused = d["spec"]["paused"].as_bool().unwrap_or(false);
        let deleting = d.is_deleting();

        let mut event = status::Event::None;
        let step = if deleting {
            Step::Done
        } else if new_rs.is_none() && !paused {
            let size = if all_settled {
                self.initial_size(&strategy, replicas, &olds)
            } else {
                0
            };
            new_rs = Some(self.create_new_rs(&d, &olds, size).await?);
            event = status::Event::CreatedNewRs;
            Step::Wrote
        } else if !caught_up {
            Step::Waiting
        } else if let Some(new) = &new_rs
            && self.sync_revisions(&d, new, &olds, &strategy).await?
        {
            Step::Wrote
        } else if paused {
            Step::Done
        } else if !all_settled {
            Step::Waiting
        } else if let Some(new) = &new_rs {
            match strategy {
                Strategy::Recreate => self.recreate(&d, new, &olds, replicas).await?,
                Strategy::RollingUpdate {
                    max_surge,
                    max_unavailable,
                } => {
                    self.rolling(&d, new, &olds, replicas, max_surge, max_unavailable)
                        .await?
                }
            }
        } else {
            Step::Done
        };
        if matches!(step, Step::Done) && !deleting && !paused {
            self.clean_up(&d, &olds).await?;
        }

        let all: Vec<&Value> = new_rs
            .iter()
            .map(|r| r.as_ref())
            .chain(olds.iter().map(|r| r.as_ref()))
            .collect();
        let (status, recheck) = status::compute(&status::Input {
            deployment: &d,
            new_rs: new_rs.as_deref(),
            all: &all,
            max_unavailable: strategy.max_unavailable(),
            event,
            now: SystemTime::now(),
        });
        super::write_status(&self.client, &objects::deployments(), &d, status).await?;
        Ok(match recheck {
            Some(after) => Action::requeue(after),
            None => Action::await_change(),
        })
    }

    /// Whether the cache holds this controller's last write of each ReplicaSet.
    fn caught_up<'a>(&self, rss: impl Iterator<Item = &'a Arc<Value>>) -> bool {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
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

    fn remember_write(&self, rs: &Value) {
        if let Ok(k) = ObjectKey::from_object(rs) {
            self.written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(k, resource_version(rs));
        }
    }

    /// The ReplicaSets this Deployment controls, after adopting matching orphans and releasing
    /// owned ones that no longer match.
    async fn claim_replica_sets(
        &self,
        d: &Value,
        selector: &keel_api::selector::LabelSelector,
    ) -> Result<Vec<Arc<Value>>, ApiError> {
        let mut owned = Vec::new();
        for rs in self.replicasets.by_index(BY_NAMESPACE, d.namespace()) {
            let matches = objects::selects(selector, &rs);
            match rs.controller_uid() {
                Some(u) if u == d.uid() => {
                    if matches {
                        owned.push(rs);
                    } else {
                        self.patch_rs(
                            &rs,
                            PatchType::Strategic,
                            objects::release_patch(d.uid(), &rs),
                        )
                        .await?;
                    }
                }
                None if matches && !d.is_deleting() && !rs.is_deleting() => {
                    if let Some(adopted) = self
                        .patch_rs(&rs, PatchType::Strategic, objects::adopt_patch(d, &rs))
                        .await?
                    {
                        owned.push(Arc::new(adopted));
                    }
                }
                _ => {}
            }
        }
        Ok(owned)
    }

    /// The size a new ReplicaSet starts at: what the strategy allows right away.
    fn initial_size(&self, strategy: &Strategy, replicas: i64, olds: &[Arc<Value>]) -> i64 {
        match strategy {
            Strategy::Recreate => {
                let old_pods = olds.iter().any(|rs| {
                    objects::spec_replicas(rs) > 0 || objects::status_i64(rs, "replicas") > 0
                });
                if old_pods { 0 } else { replicas }
            }
            Strategy::RollingUpdate { max_surge, .. } => {
                let views: Vec<Rs> = olds.iter().map(|r| view(r)).collect();
                plan::new_rs_target(replicas, *max_surge, &Rs::default(), &views)
            }
        }
    }

    /// Creates the ReplicaSet of the Deployment's current template, as the newest revision. A
    /// ReplicaSet of that name that is not this template's (a hash collision) bumps
    /// `status.collisionCount`, which changes the name next time.
    async fn create_new_rs(
        &self,
        d: &Value,
        olds: &[Arc<Value>],
        size: i64,
    ) -> Result<Arc<Value>, ApiError> {
        let collision = d["status"]["collisionCount"].as_i64();
        let hash = pod_template_hash(&d["spec"]["template"], collision);
        let rs_name = format!("{}-{hash}", d.name());
        let mut template = d["spec"]["template"].clone();
        template["metadata"]["labels"][HASH_LABEL] = json!(hash);
        let mut selector = d["spec"]["selector"].clone();
        selector["matchLabels"][HASH_LABEL] = json!(hash);
        let next_revision = olds.iter().map(|r| revision(r)).max().unwrap_or(0) + 1;
        let mut annotations = copied_annotations(d);
        annotations.insert(REVISION.into(), json!(next_revision.to_string()));
        let replicas = objects::spec_replicas(d);
        let surge = Strategy::of(d, replicas)
            .map(|s| s.max_surge())
            .unwrap_or(0);
        annotations.insert(DESIRED_REPLICAS.into(), json!(replicas.to_string()));
        annotations.insert(MAX_REPLICAS.into(), json!((replicas + surge).to_string()));
        let mut spec = json!({"replicas": size, "selector": selector, "template": template});
        if let Some(m) = d["spec"].get("minReadySeconds") {
            spec["minReadySeconds"] = m.clone();
        }
        let rs = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": rs_name,
                "namespace": d.namespace(),
                "labels": template["metadata"]["labels"],
                "annotations": annotations,
                "ownerReferences": [objects::controller_reference(d)],
            },
            "spec": spec,
        });
        info!(deployment = %d.name(), replicaset = %rs_name, size, "creating the new replica set");
        match self
            .client
            .create(&objects::replicasets(), d.namespace(), &rs)
            .await
        {
            Ok(created) => {
                self.remember_write(&created);
                Ok(Arc::new(created))
            }
            Err(e) if e.reason == Reason::AlreadyExists => {
                let existing = self
                    .client
                    .get(&objects::replicasets(), d.namespace(), &rs_name)
                    .await?;
                if existing.controller_uid() == Some(d.uid())
                    && plan::same_template(&existing["spec"]["template"], &d["spec"]["template"])
                {
                    return Ok(Arc::new(existing));
                }
                let count = collision.unwrap_or(0) + 1;
                let body = json!({"metadata": {"resourceVersion": d["metadata"]["resourceVersion"]},
                    "status": {"collisionCount": count}});
                self.client
                    .patch_subresource(
                        &objects::deployments(),
                        d.namespace(),
                        d.name(),
                        "status",
                        PatchType::Merge,
                        serde_json::to_vec(&body).unwrap_or_default(),
                    )
                    .await?;
                Err(ApiError::conflict(
                    keel_api::Target::new("apps", "replicasets", &rs_name),
                    "a replica set of another template has this name; collisionCount raised",
                ))
            }
            Err(e) => Err(e),
        }
    }

    /// The new ReplicaSet must be the newest revision (a rollback makes an old one new again),
    /// and the Deployment carries its revision. True when it wrote.
    async fn sync_revisions(
        &self,
        d: &Value,
        new: &Value,
        olds: &[Arc<Value>],
        strategy: &Strategy,
    ) -> Result<bool, ApiError> {
        let max_old = olds.iter().map(|r| revision(r)).max().unwrap_or(0);
        let want = if revision(new) > max_old {
            revision(new)
        } else {
            max_old + 1
        };
        let replicas = objects::spec_replicas(d);
        let mut wrote = false;
        let mut annotations = copied_annotations(d);
        annotations.insert(REVISION.into(), json!(want.to_string()));
        annotations.insert(DESIRED_REPLICAS.into(), json!(replicas.to_string()));
        annotations.insert(
            MAX_REPLICAS.into(),
            json!((replicas + strategy.max_surge()).to_string()),
        );
        let stale = annotations
            .iter()
            .any(|(k, v)| new.annotation(k) != v.as_str());
        if stale {
            let patch = json!({"metadata": {"annotations": annotations,
                "resourceVersion": new["metadata"]["resourceVersion"]}});
            self.patch_rs(new, PatchType::Merge, patch).await?;
            wrote = true;
        }
        if d.annotation(REVISION) != Some(want.to_string().as_str()) {
            let patch = json!({"metadata": {"annotations": {REVISION: want.to_string()},
                "resourceVersion": d["metadata"]["resourceVersion"]}});
            match self
                .client
                .patch(
                    &objects::deployments(),
                    d.namespace(),
                    d.name(),
                    PatchType::Merge,
                    &patch,
                )
                .await
            {
                Ok(_) => wrote = true,
                // Changed since the cache read it, or gone: its newer version (or deletion) brings the key back.
                Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => wrote = true,
                Err(e) => return Err(e),
            }
        }
        Ok(wrote)
    }

    /// Recreate: every old Pod goes, then the new ReplicaSet grows.
    async fn recreate(
        &self,
        d: &Value,
        new: &Arc<Value>,
        olds: &[Arc<Value>],
        replicas: i64,
    ) -> Result<Step, ApiError> {
        let mut wrote = false;
        for rs in olds.iter().filter(|r| objects::spec_replicas(r) > 0) {
            self.scale(d, rs, 0).await?;
            wrote = true;
        }
        if wrote {
            return Ok(Step::Wrote);
        }
        if olds.iter().any(|rs| has_pods(rs)) {
            return Ok(Step::Waiting);
        }
        if objects::spec_replicas(new) != replicas {
            self.scale(d, new, replicas).await?;
            return Ok(Step::Wrote);
        }
        Ok(Step::Done)
    }

    /// Rolling update: the new ReplicaSet grows within `maxSurge`, then the old ones shrink
    /// within `maxUnavailable`, one step per settled state.
    async fn rolling(
        &self,
        d: &Value,
        new: &Arc<Value>,
        olds: &[Arc<Value>],
        replicas: i64,
        max_surge: i64,
        max_unavailable: i64,
    ) -> Result<Step, ApiError> {
        let old_views: Vec<Rs> = olds.iter().map(|r| view(r)).collect();
        let new_view = view(new);
        let target = plan::new_rs_target(replicas, max_surge, &new_view, &old_views);
        if target != new_view.spec {
            self.scale(d, new, target).await?;
            return Ok(Step::Wrote);
        }
        let downs = plan::old_rs_targets(replicas, max_unavailable, &new_view, &old_views);
        for (i, size) in &downs {
            self.scale(d, &olds[*i], *size).await?;
        }
        if !downs.is_empty() {
            return Ok(Step::Wrote);
        }
        let done = new_view.spec == replicas
            && new_view.available == replicas
            && old_views.iter().all(|r| r.spec == 0);
        Ok(if done { Step::Done } else { Step::Waiting })
    }

    async fn scale(&self, d: &Value, rs: &Value, size: i64) -> Result<(), ApiError> {
        debug!(deployment = %d.name(), replicaset = %rs.name(), from = objects::spec_replicas(rs), to = size, "scaling");
        let patch = json!({
            "metadata": {"resourceVersion": rs["metadata"]["resourceVersion"]},
            "spec": {"replicas": size},
        });
        self.patch_rs(rs, PatchType::Merge, patch).await?;
        Ok(())
    }

    /// Patches a ReplicaSet and remembers the written version; `None` when it is gone or the
    /// patch's precondition failed (its newer version is on its way to the cache).
    async fn patch_rs(
        &self,
        rs: &Value,
        kind: PatchType,
        patch: Value,
    ) -> Result<Option<Value>, ApiError> {
        match self
            .client
            .patch(
                &objects::replicasets(),
                rs.namespace(),
                rs.name(),
                kind,
                &patch,
            )
            .await
        {
            Ok(written) => {
                self.remember_write(&written);
                Ok(Some(written))
            }
            // The ReplicaSet changed since the cache read it, or is gone: its event brings the key back.
            Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Old ReplicaSets beyond `revisionHistoryLimit` (default 10) are deleted, oldest first,
    /// once they have no Pods.
    async fn clean_up(&self, d: &Value, olds: &[Arc<Value>]) -> Result<(), ApiError> {
        let limit =
            usize::try_from(d["spec"]["revisionHistoryLimit"].as_i64().unwrap_or(10)).unwrap_or(0);
        let idle: Vec<&Arc<Value>> = olds
            .iter()
            .filter(|r| {
                objects::spec_replicas(r) == 0
                    && objects::status_i64(r, "replicas") == 0
                    && !r.is_deleting()
            })
            .collect();
        if idle.len() <= limit {
            return Ok(());
        }
        for rs in &idle[..idle.len() - limit] {
            info!(deployment = %d.name(), replicaset = %rs.name(), "deleting an old revision");
            let params = DeleteParams {
                uid: rs.uid().to_string(),
                ..Default::default()
            };
            match self
                .client
                .delete(&objects::replicasets(), rs.namespace(), rs.name(), &params)
                .await
            {
                Ok(_) => {}
                // Gone already, or replaced (the uid precondition): this old revision is not there.
                Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The Deployment's annotations a ReplicaSet carries (e.g. `kubernetes.io/change-cause`).
fn copied_annotations(d: &Value) -> serde_json::Map<String, Value> {
    d.annotations()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}
