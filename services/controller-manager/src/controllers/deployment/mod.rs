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
//!
//! What a sync does is decided in [`rollout`] from the caches alone (pure, tested there with
//! real stores); this file reads the caches, carries the decision out and writes the status.

mod plan;
mod rollout;
mod status;

use std::sync::Arc;
use std::time::SystemTime;

use keel_api::Metadata;
use keel_client::{ApiError, Client, DeleteParams, PatchType, Reason};
use keel_runtime::{
    Action, BY_NAMESPACE, Controller, HandlerFns, ObjectKey, Recorder, ShardBy, Store,
    WatchOptions, WorkQueue, enqueue_handler,
};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tracing::{debug, info};

pub use plan::{Rs, Strategy, pod_template_hash};
pub use rollout::REVISION;
use rollout::{Claims, OwnWrites, Rollout, Step};

use super::{Context, SetupError, Start};
use crate::objects::{self, controller_of};

struct DeploymentController {
    client: Client,
    deployments: Store,
    replicasets: Store,
    /// This controller's last write of each ReplicaSet, which the cache must hold before
    /// anything is planned from it.
    written: OwnWrites,
    events: Recorder,
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
        written: OwnWrites::default(),
        events: ctx.events.for_component("deployment-controller"),
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
        let in_namespace = self.replicasets.by_index(BY_NAMESPACE, d.namespace());
        let owned = self
            .claim(&d, rollout::claims(&d, &selector, in_namespace))
            .await?;
        let mut rollout = match Rollout::new(d, owned) {
            Ok(r) => r,
            Err(e) => {
                info!(deployment = %key, "invalid strategy: {e}");
                return Ok(Action::await_change());
            }
        };
        let step = rollout.next_step(self.written.caught_up(rollout.replica_sets()));
        let event = self.take(&mut rollout, step).await?;
        let (status, recheck) = rollout.status(event, SystemTime::now());
        super::write_status(
            &self.client,
            &objects::deployments(),
            rollout.deployment(),
            status,
        )
        .await?;
        Ok(match recheck {
            Some(after) => Action::requeue(after),
            None => Action::await_change(),
        })
    }

    /// Adopts and releases as `claims` says; the ReplicaSets the Deployment then owns.
    async fn claim(&self, d: &Value, claims: Claims) -> Result<Vec<Arc<Value>>, ApiError> {
        let mut owned = claims.owned;
        for rs in &claims.release {
            self.patch_rs(
                rs,
                PatchType::Strategic,
                objects::release_patch(d.uid(), rs),
            )
            .await?;
        }
        for rs in &claims.adopt {
            if let Some(adopted) = self
                .patch_rs(rs, PatchType::Strategic, objects::adopt_patch(d, rs))
                .await?
            {
                owned.push(Arc::new(adopted));
            }
        }
        Ok(owned)
    }

    /// Carries out `step`; what it did, for the `Progressing` condition.
    async fn take(&self, rollout: &mut Rollout, step: Step) -> Result<status::Event, ApiError> {
        let d = rollout.deployment().clone();
        match step {
            Step::CreateNewRs(rs) => {
                let created = self.create_new_rs(&d, rs).await?;
                rollout.created(created);
                return Ok(status::Event::CreatedNewRs);
            }
            Step::SyncRevisions {
                annotations,
                revision,
            } => {
                if let (Some(annotations), Some(new)) = (annotations, rollout.new_rs()) {
                    let patch = rollout::annotations_patch(new, &annotations);
                    self.patch_rs(new, PatchType::Merge, patch).await?;
                }
                if let Some(revision) = revision {
                    self.patch_deployment(&d, rollout::revision_patch(&d, &revision))
                        .await?;
                }
            }
            Step::Scale(sizes) => {
                for (rs, size) in sizes {
                    let from = objects::spec_replicas(&rs);
                    debug!(deployment = %d.name(), replicaset = %rs.name(), from, to = size, "scaling");
                    if self
                        .patch_rs(&rs, PatchType::Merge, rollout::scale_patch(&rs, size))
                        .await?
                        .is_some()
                    {
                        let way = if size > from { "up" } else { "down" };
                        self.events.normal(
                            &d,
                            "ScalingReplicaSet",
                            format!(
                                "Scaled {way} replica set {} from {from} to {size}",
                                rs.name()
                            ),
                        );
                    }
                }
            }
            Step::Wait => {}
            Step::Done { prune } => self.prune(&d, &prune).await?,
        }
        Ok(status::Event::None)
    }

    /// Creates the new ReplicaSet `rs`. A ReplicaSet of that name that is not this template's
    /// (a hash collision) bumps `status.collisionCount`, which changes the name next time.
    async fn create_new_rs(&self, d: &Value, rs: Value) -> Result<Arc<Value>, ApiError> {
        let rs_name = rs.name().to_string();
        info!(deployment = %d.name(), replicaset = %rs_name, size = objects::spec_replicas(&rs), "creating the new replica set");
        match self
            .client
            .create(&objects::replicasets(), d.namespace(), &rs)
            .await
        {
            Ok(created) => {
                self.written.remember(&created);
                let size = objects::spec_replicas(&created);
                if size > 0 {
                    self.events.normal(
                        d,
                        "ScalingReplicaSet",
                        format!("Scaled up replica set {rs_name} from 0 to {size}"),
                    );
                }
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
                let count = d["status"]["collisionCount"].as_i64().unwrap_or(0) + 1;
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

    /// Patches the Deployment; a Deployment changed since the cache read it, or gone, is no
    /// error: its newer version (or deletion) brings the key back.
    async fn patch_deployment(&self, d: &Value, patch: Value) -> Result<(), ApiError> {
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
            Ok(_) => Ok(()),
            Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
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
                self.written.remember(&written);
                Ok(Some(written))
            }
            // The ReplicaSet changed since the cache read it, or is gone: its event brings the key back.
            Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes old revisions, each by uid.
    async fn prune(&self, d: &Value, olds: &[Arc<Value>]) -> Result<(), ApiError> {
        for rs in olds {
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
