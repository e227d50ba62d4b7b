//! The pod-lifecycle controller: keel has no nodes, so this plays the kubelet. A new Pod becomes
//! `Running` and `Ready` once `--pod-start-delay` has passed since this controller first saw it;
//! a Pod marked for deletion (held by finalizers) stops being Ready once `--pod-grace-period`
//! has passed since its `deletionTimestamp`. Without finalizers the API server removes a
//! deleted Pod at once (a grace period of 0, keel's default), so there is nothing to stop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use keel_api::Metadata;
use keel_client::{ApiError, Client, PatchType, Reason};
use keel_runtime::{Action, Controller, ObjectKey, ShardBy, Store, WorkQueue, enqueue_handler};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Context, SetupError, Start};
use crate::objects;

struct PodLifecycle {
    client: Client,
    pods: Store,
    start_delay: Duration,
    grace_period: Duration,
    /// When each pending Pod (by uid) was first seen; entries leave when the Pod runs or goes.
    /// Bounded by the Pods in the cache.
    first_seen: Mutex<HashMap<String, Instant>>,
}

pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    // The ReplicaSet controller's informer: each Pod in its ReplicaSet's shard.
    let informer = ctx
        .factory
        .informer_with(&objects::pods(), objects::pods_by_owner(ctx));
    let queue = WorkQueue::default_controller_queue();
    informer.add_handler(enqueue_handler(queue.clone()));
    let this = Arc::new(PodLifecycle {
        client: ctx.client.clone(),
        pods: informer.store(),
        start_delay: ctx.config.pod_start_delay,
        grace_period: ctx.config.pod_grace_period,
        first_seen: Mutex::new(HashMap::new()),
    });
    let controller = Controller::new("podlifecycle", queue)
        .workers(ctx.config.workers)
        .metrics(registry);
    let shards = ctx.shards.clone();
    Ok(super::start(
        ctx.gate.reading(&[&informer]),
        "podlifecycle",
        controller,
        this,
        // A Pod's shard is its owner's; one gone from the cache only has its memory here
        // forgotten, under the shard of its own name.
        move |this, key| {
            Some(match this.pods.get(key) {
                Some(pod) => shards.shard_of_object(&pod, ShardBy::Owner),
                None => shards.shard_for(&key.namespace, &key.name),
            })
        },
        |this, key| async move { this.reconcile(key).await },
    ))
}

impl PodLifecycle {
    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.first_seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(pod) = self.pods.get(&key) else {
            // Forget Pods that are gone (their uid is unknown now: drop whatever is stale).
            let live: std::collections::HashSet<String> = self
                .pods
                .list()
                .iter()
                .map(|p| p.uid().to_string())
                .collect();
            self.seen().retain(|uid, _| live.contains(uid));
            return Ok(Action::await_change());
        };
        let uid = pod.uid().to_string();
        if !pod.is_initialized() {
            // A kubelet never sees a Pod whose initializers are pending.
            return Ok(Action::await_change());
        }
        if pod.is_deleting() {
            self.seen().remove(&uid);
            return self.stop(&pod).await;
        }
        let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
        if phase != "Pending" {
            self.seen().remove(&uid);
            return Ok(Action::await_change());
        }
        let first = *self.seen().entry(uid.clone()).or_insert_with(Instant::now);
        let due = first + self.start_delay;
        let now = Instant::now();
        if now < due {
            return Ok(Action::requeue(due - now));
        }
        self.patch_status(&pod, running_status(&pod)).await?;
        self.seen().remove(&uid);
        Ok(Action::await_change())
    }

    /// A Pod being deleted stops after its grace period: containers terminated, not Ready.
    async fn stop(&self, pod: &Value) -> Result<Action, ApiError> {
        if pod["status"]["phase"].as_str() == Some("Succeeded") {
            return Ok(Action::await_change());
        }
        let since = pod
            .deletion_timestamp()
            .and_then(objects::parse_time)
            .unwrap_or_else(SystemTime::now);
        let elapsed = SystemTime::now()
            .duration_since(since)
            .unwrap_or(Duration::ZERO);
        if elapsed < self.grace_period {
            return Ok(Action::requeue(self.grace_period - elapsed));
        }
        self.patch_status(pod, stopped_status(pod)).await?;
        Ok(Action::await_change())
    }

    async fn patch_status(&self, pod: &Value, status: Value) -> Result<(), ApiError> {
        let body = json!({"metadata": {"uid": pod.uid()}, "status": status});
        match self
            .client
            .patch_subresource(
                &objects::pods(),
                pod.namespace(),
                pod.name(),
                "status",
                PatchType::Merge,
                serde_json::to_vec(&body).unwrap_or_default(),
            )
            .await
        {
            Ok(_) => Ok(()),
            // Gone, or replaced by a Pod of the same name (the uid precondition): that one has its own events.
            Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    pod["spec"]["containers"].as_array().into_iter().flatten()
}

fn condition(kind: &str, status: &str, now: &str) -> Value {
    json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": now})
}

/// The status a kubelet reports once every container has started.
fn running_status(pod: &Value) -> Value {
    let now = objects::now_rfc3339();
    let statuses: Vec<Value> = containers(pod)
        .map(|c| {
            json!({
                "name": c["name"], "image": c["image"], "imageID": "",
                "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    json!({
        "phase": "Running",
        "startTime": now,
        "hostIP": "127.0.0.1",
        "conditions": [
            condition("PodScheduled", "True", &now),
            condition("Initialized", "True", &now),
            condition("ContainersReady", "True", &now),
            condition("Ready", "True", &now),
        ],
        "containerStatuses": statuses,
    })
}

/// The status once every container has ended on deletion.
fn stopped_status(pod: &Value) -> Value {
    let now = objects::now_rfc3339();
    let statuses: Vec<Value> = containers(pod)
        .map(|c| {
            json!({
                "name": c["name"], "image": c["image"], "imageID": "",
                "ready": false, "started": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now}},
            })
        })
        .collect();
    json!({
        "phase": "Succeeded",
        "conditions": [
            condition("PodScheduled", "True", &now),
            condition("Initialized", "True", &now),
            condition("ContainersReady", "False", &now),
            condition("Ready", "False", &now),
        ],
        "containerStatuses": statuses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_pods_are_ready_and_stopped_ones_are_not() {
        let pod = json!({"spec": {"containers": [{"name": "nginx", "image": "nginx:1.7.9"}]}});
        let running = json!({"status": running_status(&pod)});
        assert!(objects::pod_is_ready(&running));
        assert!(objects::pod_is_active(&running));
        assert_eq!(
            running["status"]["containerStatuses"][0]["image"],
            "nginx:1.7.9"
        );
        let stopped = json!({"status": stopped_status(&pod)});
        assert!(!objects::pod_is_ready(&stopped));
        assert!(!objects::pod_is_active(&stopped));
    }
}
