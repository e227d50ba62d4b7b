//! The ReplicaSet controller: `spec.replicas` active Pods matching the selector, each controlled
//! by the ReplicaSet (ownerReferences), as Kubernetes' `ReplicaSetController`.
//!
//! - Orphan Pods that match are adopted, owned Pods that stop matching are released.
//! - Expectations keep a stale cache from over-creating or over-deleting.
//! - Creations go in slow-start batches (1, 2, 4, ...) so a failing create costs one call.
//! - `status` (replicas, ready, available, `observedGeneration`) is written only from a cache
//!   that has seen this controller's own writes: `observedGeneration` moves only when
//!   expectations are met, so a reader (the Deployment controller) can trust the counts of a
//!   ReplicaSet whose `status.observedGeneration` equals its `generation`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use keel_api::Metadata;
use keel_client::{ApiError, Client, DeleteParams, PatchType, Reason};
use keel_runtime::{
    Action, BY_NAMESPACE, Controller, HandlerFns, ObjectKey, Recorder, ShardBy, Store,
    WatchOptions, WorkQueue, enqueue_handler,
};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tracing::{debug, info};

use super::expectations::Expectations;
use super::{Context, SetupError, Start};
use crate::objects::{self, controller_of};

/// At most this many Pods are created or deleted in one sync (Kubernetes' `burstReplicas`).
const BURST: usize = 500;
/// Pod names: `<replicaset>-<5 chars>` from Kubernetes' alphabet without vowels or look-alikes.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

struct ReplicaSetController {
    client: Client,
    replicasets: Store,
    pods: Store,
    expectations: Expectations,
    events: Recorder,
}

pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    // A ReplicaSet's shard is that of its name; its Pods are in the same shard (by owner).
    let rs_informer = ctx.factory.informer_with(
        &objects::replicasets(),
        ctx.options(WatchOptions::default(), ShardBy::Name),
    );
    let pod_informer = ctx
        .factory
        .informer_with(&objects::pods(), objects::pods_by_owner(ctx));
    let queue = WorkQueue::default_controller_queue();
    let expectations = Expectations::default();
    rs_informer.add_handler(enqueue_handler(queue.clone()));
    pod_informer.add_handler(pod_handler(
        queue.clone(),
        rs_informer.store(),
        expectations.clone(),
    ));
    let this = Arc::new(ReplicaSetController {
        client: ctx.client.clone(),
        replicasets: rs_informer.store(),
        pods: pod_informer.store(),
        expectations,
        events: ctx.events.for_component("replicaset-controller"),
    });
    let controller = Controller::new("replicaset", queue)
        .workers(ctx.config.workers)
        .metrics(registry);
    Ok(super::start(
        ctx.gate.reading(&[&rs_informer, &pod_informer]),
        "replicaset",
        controller,
        this,
        super::by_name(ctx),
        |this, key| async move { this.reconcile(key).await },
    ))
}

/// Pod events wake the owning ReplicaSet (and check off its expectations); an orphan wakes
/// every ReplicaSet of its namespace that selects it, which may adopt it.
fn pod_handler(queue: WorkQueue<ObjectKey>, rss: Store, x: Expectations) -> HandlerFns {
    let matching = move |pod: &Value| -> Vec<ObjectKey> {
        rss.by_index(BY_NAMESPACE, pod.namespace())
            .iter()
            .filter(|rs| objects::selector(rs).is_ok_and(|s| objects::selects(&s, pod)))
            .filter_map(|rs| ObjectKey::from_object(rs).ok())
            .collect()
    };
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue);
    let (m1, m2) = (matching.clone(), matching);
    let (x1, x2) = (x.clone(), x);
    HandlerFns::new()
        .added(move |pod| match controller_of(pod, "ReplicaSet") {
            Some((owner, _)) => {
                x1.creation_observed(&owner);
                q1.add(owner);
            }
            None => m1(pod).into_iter().for_each(|k| q1.add(k)),
        })
        .updated(move |old, new| {
            let (o, n) = (
                controller_of(old, "ReplicaSet"),
                controller_of(new, "ReplicaSet"),
            );
            if let Some((k, _)) = &o
                && o != n
            {
                q2.add(k.clone());
            }
            match n {
                Some((k, _)) => q2.add(k),
                None => m2(new).into_iter().for_each(|k| q2.add(k)),
            }
        })
        .deleted(move |pod| {
            if let Some((owner, _)) = controller_of(pod, "ReplicaSet") {
                x2.deletion_observed(&owner, pod.name());
                q3.add(owner);
            }
        })
}

impl ReplicaSetController {
    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(rs) = self.replicasets.get(&key) else {
            self.expectations.forget(&key);
            return Ok(Action::await_change());
        };
        let selector = match objects::selector(&rs) {
            Ok(s) => s,
            Err(e) => {
                // Nothing to do until the object changes: the API server validates selectors,
                // so this is an object written before that rule.
                info!(replicaset = %key, "invalid selector: {e}");
                return Ok(Action::await_change());
            }
        };
        let rs_uid = rs.uid();
        let mut owned = Vec::new();
        for pod in self.pods.by_index(BY_NAMESPACE, &key.namespace) {
            let matches = objects::selects(&selector, &pod);
            match pod.controller_uid() {
                Some(u) if u == rs_uid => {
                    if matches {
                        owned.push(pod);
                    } else {
                        self.patch_pod(&pod, objects::release_patch(rs_uid, &pod))
                            .await?;
                    }
                }
                None if matches
                    && !rs.is_deleting()
                    && !pod.is_deleting()
                    && self
                        .patch_pod(&pod, objects::adopt_patch(&rs, &pod))
                        .await? =>
                {
                    owned.push(pod);
                }
                _ => {}
            }
        }
        let active: Vec<Arc<Value>> = owned
            .iter()
            .filter(|p| objects::pod_is_active(p))
            .cloned()
            .collect();

        let satisfied = self.expectations.satisfied(&key);
        let mut wrote = false;
        if satisfied && !rs.is_deleting() {
            wrote = self.manage_replicas(&key, &rs, &active).await?;
        }
        self.update_status(&rs, &owned, satisfied && !wrote).await?;
        Ok(Action::await_change())
    }

    /// Creates or deletes Pods towards `spec.replicas`; true when it wrote anything.
    async fn manage_replicas(
        &self,
        key: &ObjectKey,
        rs: &Value,
        active: &[Arc<Value>],
    ) -> Result<bool, ApiError> {
        let want = usize::try_from(objects::spec_replicas(rs)).unwrap_or(0);
        if active.len() < want {
            let n = (want - active.len()).min(BURST);
            self.expectations.expect_creations(key, n);
            debug!(replicaset = %key, n, "creating pods");
            let mut remaining = n;
            let mut batch = 1;
            let mut first_error = None;
            while remaining > 0 {
                let size = batch.min(remaining);
                let results =
                    futures::future::join_all((0..size).map(|_| self.create_pod(rs))).await;
                remaining -= size;
                let mut failed = 0;
                for r in results {
                    match r {
                        Ok(name) => self.events.normal(
                            rs,
                            "SuccessfulCreate",
                            format!("Created pod: {name}"),
                        ),
                        Err(e) => {
                            failed += 1;
                            self.expectations.creation_observed(key);
                            // As Kubernetes: a namespace being deleted refuses new Pods, and
                            // the ReplicaSet goes with it; that is no error to retry.
                            if !namespace_terminating(&e) {
                                self.events.warning(
                                    rs,
                                    "FailedCreate",
                                    format!("Error creating: {e}"),
                                );
                                first_error.get_or_insert(e);
                            }
                        }
                    }
                }
                if failed > 0 {
                    // The rest are skipped: they would fail the same way.
                    for _ in 0..remaining {
                        self.expectations.creation_observed(key);
                    }
                    break;
                }
                batch *= 2;
            }
            return match first_error {
                Some(e) => Err(e),
                None => Ok(true),
            };
        }
        if active.len() > want {
            let n = (active.len() - want).min(BURST);
            let victims = pods_to_delete(active, n);
            let names: Vec<String> = victims.iter().map(|p| p.name().to_string()).collect();
            self.expectations
                .expect_deletions(key, names.iter().cloned());
            debug!(replicaset = %key, n, "deleting pods");
            let (pods, params) = (objects::pods(), DeleteParams::default());
            let results = futures::future::join_all(
                names
                    .iter()
                    .map(|n| self.client.delete(&pods, &key.namespace, n, &params)),
            )
            .await;
            let mut first_error = None;
            for (n, r) in names.iter().zip(results) {
                match r {
                    Ok(_) => {
                        self.events
                            .normal(rs, "SuccessfulDelete", format!("Deleted pod: {n}"))
                    }
                    Err(e) if e.reason == Reason::NotFound => {
                        self.expectations.deletion_observed(key, n)
                    }
                    Err(e) => {
                        self.expectations.deletion_observed(key, n);
                        first_error.get_or_insert(e);
                    }
                }
            }
            return match first_error {
                Some(e) => Err(e),
                None => Ok(true),
            };
        }
        Ok(false)
    }

    /// Creates a Pod of the template; its name.
    async fn create_pod(&self, rs: &Value) -> Result<String, ApiError> {
        let template = &rs["spec"]["template"];
        let mut meta = serde_json::Map::new();
        for f in ["labels", "annotations"] {
            if let Some(v) = template["metadata"].get(f) {
                meta.insert(f.into(), v.clone());
            }
        }
        meta.insert("namespace".into(), json!(rs.namespace()));
        meta.insert(
            "ownerReferences".into(),
            json!([objects::controller_reference(rs)]),
        );
        let mut last = None;
        // A clash of random names is rare; three tries make it negligible.
        for _ in 0..3 {
            let name = pod_name(rs.name());
            meta.insert("name".into(), json!(name));
            let pod = json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "spec": template["spec"],
            });
            match self
                .client
                .create(&objects::pods(), rs.namespace(), &pod)
                .await
            {
                Ok(_) => return Ok(name),
                Err(e) if e.reason == Reason::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| ApiError::internal("no pod name found")))
    }

    /// Adopts or releases a Pod; false when the Pod is gone or was replaced.
    async fn patch_pod(&self, pod: &Value, patch: Value) -> Result<bool, ApiError> {
        match self
            .client
            .patch(
                &objects::pods(),
                pod.namespace(),
                pod.name(),
                PatchType::Strategic,
                &patch,
            )
            .await
        {
            Ok(_) => Ok(true),
            // Gone, or replaced (the uid in the patch): the caller counts it as not adopted.
            Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn update_status(
        &self,
        rs: &Value,
        owned: &[Arc<Value>],
        observed: bool,
    ) -> Result<(), ApiError> {
        let min_ready = Duration::from_secs(rs["spec"]["minReadySeconds"].as_u64().unwrap_or(0));
        let now = SystemTime::now();
        let active: Vec<&Arc<Value>> = owned.iter().filter(|p| objects::pod_is_active(p)).collect();
        let template_labels = rs["spec"]["template"]["metadata"]["labels"].as_object();
        let fully_labeled = active
            .iter()
            .filter(|p| {
                template_labels.is_none_or(|want| {
                    want.iter()
                        .all(|(k, v)| p.labels().and_then(|l| l.get(k)) == Some(v))
                })
            })
            .count();
        let mut status = rs["status"].as_object().cloned().unwrap_or_default();
        status.insert("replicas".into(), json!(active.len()));
        // As Kubernetes 1.33's `terminatingReplicas`: Pods being deleted that still exist. A
        // Recreate rollout waits for them (it reads this, not the Pods: they are cached in the
        // ReplicaSet's shard, which may not be the Deployment's).
        status.insert(
            "terminatingReplicas".into(),
            json!(owned.iter().filter(|p| p.is_deleting()).count()),
        );
        status.insert("fullyLabeledReplicas".into(), json!(fully_labeled));
        status.insert(
            "readyReplicas".into(),
            json!(active.iter().filter(|p| objects::pod_is_ready(p)).count()),
        );
        status.insert(
            "availableReplicas".into(),
            json!(
                active
                    .iter()
                    .filter(|p| objects::pod_is_available(p, min_ready, now))
                    .count()
            ),
        );
        if observed {
            status.insert("observedGeneration".into(), json!(rs.generation()));
        }
        super::write_status(
            &self.client,
            &objects::replicasets(),
            rs,
            Value::Object(status),
        )
        .await
    }
}

pub(crate) fn namespace_terminating(e: &ApiError) -> bool {
    e.reason == Reason::Forbidden && e.causes.iter().any(|c| c.reason == "NamespaceTerminating")
}

/// `<base>-<5 random chars>`, the base cut so the name stays within 63 characters.
fn pod_name(base: &str) -> String {
    let random = uuid::Uuid::new_v4();
    let suffix: String = random
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| NAME_ALPHABET[usize::from(*b) % NAME_ALPHABET.len()] as char)
        .collect();
    let base: String = base.chars().take(57).collect();
    format!("{base}-{suffix}")
}

/// Which Pods go first when scaling down, as Kubernetes ranks them: not yet running before
/// running, not ready before ready, and newer before older.
pub(crate) fn pods_to_delete(active: &[Arc<Value>], n: usize) -> Vec<Arc<Value>> {
    let mut ranked: Vec<Arc<Value>> = active.to_vec();
    ranked.sort_by(|a, b| {
        let rank = |p: &Value| {
            (
                p["status"]["phase"].as_str() == Some("Running"),
                objects::pod_is_ready(p),
            )
        };
        let created = |p: &Value| p.creation_timestamp().unwrap_or("").to_string();
        rank(a)
            .cmp(&rank(b))
            .then_with(|| created(b).cmp(&created(a)))
            .then_with(|| b.name().cmp(a.name()))
    });
    ranked.truncate(n);
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, phase: &str, ready: bool, created: &str) -> Arc<Value> {
        Arc::new(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
    }

    #[test]
    fn scale_down_takes_pending_then_unready_then_newest() {
        let pods = vec![
            pod("old-ready", "Running", true, "2026-01-01T00:00:00Z"),
            pod("new-ready", "Running", true, "2026-01-01T00:00:05Z"),
            pod("unready", "Running", false, "2026-01-01T00:00:00Z"),
            pod("pending", "Pending", false, "2026-01-01T00:00:00Z"),
        ];
        let names = |n| {
            pods_to_delete(&pods, n)
                .iter()
                .map(|p| p.name().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(1), ["pending"]);
        assert_eq!(names(3), ["pending", "unready", "new-ready"]);
        assert_eq!(names(9).len(), 4);
    }

    #[test]
    fn pod_names_are_short_and_random() {
        let a = pod_name("web-5d8f7c9b6");
        let b = pod_name("web-5d8f7c9b6");
        assert!(a.starts_with("web-5d8f7c9b6-") && a.len() == "web-5d8f7c9b6-".len() + 5);
        assert_ne!(a, b);
        assert!(pod_name(&"x".repeat(300)).len() <= 63);
        assert!(
            a.trim_start_matches("web-5d8f7c9b6-")
                .bytes()
                .all(|c| NAME_ALPHABET.contains(&c))
        );
    }
}
