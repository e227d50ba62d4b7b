//! The pod-lifecycle controller: keel has no nodes, so this plays the kubelet, in the spirit of
//! KWOK's stages.
//!
//! - A new Pod becomes `Running` and `Ready` once `--pod-start-delay` has passed since this
//!   controller first saw it, with an address of `--pod-cidr` ([`super::podips`]); Ready only
//!   after its `keel.dev/ready-after` annotation (a duration), if it has one.
//! - Its containers then run for the Pod's `keel.dev/run-time` annotation (a duration) and exit
//!   with its `keel.dev/exit-code` (0 by default). Without the annotation a Pod that restarts
//!   `Always` runs until it is deleted, and one that restarts `Never` or `OnFailure` (a Job's,
//!   a `helm test` hook) runs for `--pod-run-time`.
//! - What an exit does follows `restartPolicy`: `Always`, and `OnFailure` after a failure,
//!   restart the containers in place (`restartCount` counts them; the Pod stays `Running`);
//!   otherwise the Pod ends `Succeeded` (every exit code 0) or `Failed`.
//! - A Pod marked for deletion (held by finalizers) stops being Ready once `--pod-grace-period`
//!   has passed since its `deletionTimestamp`: its containers are killed (137) and it is
//!   `Failed`. Without finalizers the API server removes a deleted Pod at once (a grace period
//!   of 0, keel's default), so there is nothing to stop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use keel_api::Metadata;
use keel_client::{ApiError, Client, PatchType, Reason};
use keel_runtime::{
    Action, Controller, ObjectKey, Recorder, ShardBy, Store, WorkQueue, enqueue_handler,
};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::podips::{PodCidr, PodIps};
use super::{Context, SetupError, Start};
use crate::objects;

struct PodLifecycle {
    client: Client,
    pods: Store,
    start_delay: Duration,
    run_time: Duration,
    grace_period: Duration,
    events: Recorder,
    ips: PodIps,
    shards: keel_runtime::ShardHandle,
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
        run_time: ctx.config.pod_run_time,
        grace_period: ctx.config.pod_grace_period,
        events: ctx.events.for_component("kubelet"),
        ips: PodIps::new(
            PodCidr::parse(&ctx.config.pod_cidr, ctx.config.shards)
                .map_err(|e| SetupError::failed("podlifecycle", e))?,
        ),
        shards: ctx.shards.clone(),
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
        match pod["status"]["phase"].as_str().unwrap_or("Pending") {
            "Pending" => {}
            "Running" => {
                self.seen().remove(&uid);
                return self.run(&pod).await;
            }
            _ => {
                self.seen().remove(&uid);
                return Ok(Action::await_change());
            }
        }
        let first = *self.seen().entry(uid.clone()).or_insert_with(Instant::now);
        let due = first + self.start_delay;
        let now = Instant::now();
        if now < due {
            return Ok(Action::requeue(due - now));
        }
        let (behaviour, problems) = Behaviour::of(&pod, self.run_time);
        for problem in problems {
            self.events.warning(&pod, "InvalidAnnotation", problem);
        }
        let shard = self.shards.shard_of_object(&pod, ShardBy::Owner);
        let ip = self.ips.assign(&pod, shard, &self.pods.list());
        if ip.is_none() {
            self.events.warning(
                &pod,
                "FailedCreatePodSandBox",
                "no free address in this shard's block of --pod-cidr",
            );
        }
        let ready = behaviour.ready_after.is_zero();
        self.patch_status(&pod, running_status(&pod, ip, ready))
            .await?;
        self.seen().remove(&uid);
        Ok(if ready {
            Action::await_change()
        } else {
            Action::requeue(behaviour.ready_after)
        })
    }

    /// A running Pod's containers exit once they have run their time: restarted in place, or
    /// the Pod ends.
    async fn run(&self, pod: &Value) -> Result<Action, ApiError> {
        let (behaviour, _) = Behaviour::of(pod, self.run_time);
        let now = SystemTime::now();
        let started = containers_started(pod).unwrap_or(now);
        if !objects::pod_is_ready(pod) && !behaviour.ready_after.is_zero() {
            let ready_at = started + behaviour.ready_after;
            if let Ok(left) = ready_at.duration_since(now)
                && !left.is_zero()
            {
                return Ok(Action::requeue(left));
            }
            self.patch_status(pod, ready_status(pod)).await?;
            return Ok(Action::await_change());
        }
        let Some(run_for) = behaviour.run_for else {
            return Ok(Action::await_change());
        };
        let ends = started + run_for;
        if let Ok(left) = ends.duration_since(now)
            && !left.is_zero()
        {
            return Ok(Action::requeue(left));
        }
        let code = behaviour.exit_code;
        let restart = match pod["spec"]["restartPolicy"].as_str().unwrap_or("Always") {
            "Never" => false,
            "OnFailure" => code != 0,
            _ => true,
        };
        let status = if restart {
            restarted_status(pod, code)
        } else {
            terminated_status(pod, code)
        };
        self.patch_status(pod, status).await?;
        Ok(Action::await_change())
    }

    /// A Pod being deleted stops after its grace period: containers terminated, not Ready.
    async fn stop(&self, pod: &Value) -> Result<Action, ApiError> {
        if matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded") | Some("Failed")
        ) {
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

/// The status a kubelet reports once every container has started, at address `ip`; Ready
/// or not yet (`keel.dev/ready-after`).
fn running_status(pod: &Value, ip: Option<std::net::Ipv4Addr>, ready: bool) -> Value {
    let now = objects::now_rfc3339();
    let is_ready = if ready { "True" } else { "False" };
    let statuses: Vec<Value> = containers(pod)
        .map(|c| {
            json!({
                "name": c["name"], "image": c["image"], "imageID": "",
                "ready": ready, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    let mut status = json!({
        "phase": "Running",
        "startTime": now,
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "conditions": [
            condition("PodScheduled", "True", &now),
            condition("Initialized", "True", &now),
            condition("ContainersReady", is_ready, &now),
            condition("Ready", is_ready, &now),
        ],
        "containerStatuses": statuses,
    });
    if let Some(ip) = ip {
        status["podIP"] = json!(ip.to_string());
        status["podIPs"] = json!([{"ip": ip.to_string()}]);
    }
    status
}

/// A running Pod's containers have become ready.
fn ready_status(pod: &Value) -> Value {
    let now = objects::now_rfc3339();
    let mut conditions: Vec<Value> = pod["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for c in &mut conditions {
        if matches!(c["type"].as_str(), Some("Ready") | Some("ContainersReady")) {
            *c = condition(c["type"].as_str().unwrap_or(""), "True", &now);
        }
    }
    let mut statuses: Vec<Value> = pod["status"]["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for c in &mut statuses {
        c["ready"] = json!(true);
    }
    json!({"conditions": conditions, "containerStatuses": statuses})
}

/// The status once every container has been killed on deletion: exit code 137, the Pod
/// `Failed`, as a kubelet reports a Pod deleted while it ran.
fn stopped_status(pod: &Value) -> Value {
    terminated_status(pod, 137)
}

/// How long a Pod's containers run (the annotation; `None`: until deleted) and the code they
/// exit with.
pub const RUN_TIME_ANNOTATION: &str = "keel.dev/run-time";
pub const EXIT_CODE_ANNOTATION: &str = "keel.dev/exit-code";
/// How long after its containers start a Pod becomes Ready (a readiness probe's delay).
pub const READY_AFTER_ANNOTATION: &str = "keel.dev/ready-after";

#[derive(Debug, Clone, PartialEq)]
struct Behaviour {
    run_for: Option<Duration>,
    exit_code: i64,
    ready_after: Duration,
}

impl Behaviour {
    /// What the Pod's annotations ask for, over the defaults; with what in them could not be
    /// read (the defaults stand in for it).
    fn of(pod: &Value, default_run_time: Duration) -> (Behaviour, Vec<String>) {
        let mut problems = Vec::new();
        let restarts_always = pod["spec"]["restartPolicy"]
            .as_str()
            .is_none_or(|p| p == "Always");
        let default = (!restarts_always).then_some(default_run_time);
        let run_for = match pod.annotation(RUN_TIME_ANNOTATION) {
            None => default,
            Some(text) => match humantime::parse_duration(text.trim()) {
                Ok(d) => Some(d),
                Err(e) => {
                    problems.push(format!(
                        "metadata.annotations[{RUN_TIME_ANNOTATION}]: Invalid value: {text:?}: \
                         must be a duration such as 30s or 2m ({e})"
                    ));
                    default
                }
            },
        };
        let exit_code = match pod.annotation(EXIT_CODE_ANNOTATION) {
            None => 0,
            Some(text) => match text.trim().parse::<i64>() {
                Ok(n) if (0..=255).contains(&n) => n,
                _ => {
                    problems.push(format!(
                        "metadata.annotations[{EXIT_CODE_ANNOTATION}]: Invalid value: {text:?}: \
                         must be an exit code from 0 to 255"
                    ));
                    0
                }
            },
        };
        let ready_after = match pod.annotation(READY_AFTER_ANNOTATION) {
            None => Duration::ZERO,
            Some(text) => humantime::parse_duration(text.trim()).unwrap_or_else(|e| {
                problems.push(format!(
                    "metadata.annotations[{READY_AFTER_ANNOTATION}]: Invalid value: {text:?}: \
                     must be a duration such as 30s or 2m ({e})"
                ));
                Duration::ZERO
            }),
        };
        (
            Behaviour {
                run_for,
                exit_code,
                ready_after,
            },
            problems,
        )
    }
}

/// When the containers last (re)started: the latest `state.running.startedAt`.
fn containers_started(pod: &Value) -> Option<SystemTime> {
    pod["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .filter_map(|c| c["state"]["running"]["startedAt"].as_str())
        .filter_map(objects::parse_time)
        .max()
}

/// A container's `terminated` state: exited with `code` at `now`, having started at `started`.
fn terminated(code: i64, started: &Value, now: &str) -> Value {
    let reason = if code == 0 { "Completed" } else { "Error" };
    let mut state = json!({"exitCode": code, "reason": reason, "finishedAt": now});
    if !started.is_null() {
        state["startedAt"] = started.clone();
    }
    json!({"terminated": state})
}

/// Each container with its restart count so far and its `terminated` state, as all exit with
/// `code` now.
fn exits(pod: &Value, code: i64, now: &str) -> Vec<(Value, i64, Value)> {
    let old = pod["status"]["containerStatuses"].as_array();
    containers(pod)
        .map(|c| {
            let prev = old
                .and_then(|l| l.iter().find(|s| s["name"] == c["name"]))
                .cloned()
                .unwrap_or(Value::Null);
            let started = &prev["state"]["running"]["startedAt"];
            let restarts = prev["restartCount"].as_i64().unwrap_or(0);
            (c.clone(), restarts, terminated(code, started, now))
        })
        .collect()
}

/// The containers exited and were started again, the Pod still Running.
fn restarted_status(pod: &Value, code: i64) -> Value {
    let now = objects::now_rfc3339();
    let statuses: Vec<Value> = exits(pod, code, &now)
        .into_iter()
        .map(|(c, restarts, exit)| {
            json!({
                "name": c["name"], "image": c["image"], "imageID": "",
                "ready": true, "started": true,
                "restartCount": restarts + 1,
                "lastState": exit,
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    json!({"containerStatuses": statuses})
}

/// Every container exited and none restarts: the Pod has ended.
fn terminated_status(pod: &Value, code: i64) -> Value {
    let now = objects::now_rfc3339();
    let statuses: Vec<Value> = exits(pod, code, &now)
        .into_iter()
        .map(|(c, restarts, exit)| {
            json!({
                "name": c["name"], "image": c["image"], "imageID": "",
                "ready": false, "started": false,
                "restartCount": restarts,
                "state": exit,
            })
        })
        .collect();
    let done = |kind: &str| {
        json!({"type": kind, "status": "False", "lastProbeTime": null,
               "lastTransitionTime": now, "reason": "PodCompleted"})
    };
    json!({
        "phase": if code == 0 { "Succeeded" } else { "Failed" },
        "conditions": [
            condition("PodScheduled", "True", &now),
            condition("Initialized", "True", &now),
            done("ContainersReady"),
            done("Ready"),
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
        let ip = Some(std::net::Ipv4Addr::new(10, 244, 0, 1));
        let running = json!({"status": running_status(&pod, ip, true)});
        assert_eq!(running["status"]["podIP"], "10.244.0.1");
        let starting = json!({"status": running_status(&pod, ip, false)});
        assert!(!objects::pod_is_ready(&starting));
        let later = json!({"status": ready_status(&starting)});
        assert!(objects::pod_is_ready(&later));
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

    fn annotated(policy: &str, annotations: Value) -> Value {
        json!({"metadata": {"annotations": annotations},
               "spec": {"restartPolicy": policy,
                        "containers": [{"name": "main", "image": "busybox"}]}})
    }

    #[test]
    fn pods_that_restart_always_run_until_deleted_unless_annotated() {
        let d = Duration::from_secs(1);
        let (b, problems) = Behaviour::of(&annotated("Always", json!({})), d);
        assert_eq!((b.run_for, b.exit_code, problems.len()), (None, 0, 0));
        let (b, _) = Behaviour::of(&annotated("Never", json!({})), d);
        assert_eq!(b.run_for, Some(d));
        let (b, _) = Behaviour::of(&annotated("OnFailure", json!({})), d);
        assert_eq!(b.run_for, Some(d));
        let (b, problems) = Behaviour::of(
            &annotated(
                "Always",
                json!({RUN_TIME_ANNOTATION: "2m", EXIT_CODE_ANNOTATION: "3"}),
            ),
            d,
        );
        assert_eq!(b.run_for, Some(Duration::from_secs(120)));
        assert_eq!((b.exit_code, problems.len()), (3, 0));
    }

    #[test]
    fn bad_annotations_are_named_and_the_defaults_stand() {
        let (b, problems) = Behaviour::of(
            &annotated(
                "Never",
                json!({RUN_TIME_ANNOTATION: "soon", EXIT_CODE_ANNOTATION: "256"}),
            ),
            Duration::from_secs(1),
        );
        assert_eq!(b.run_for, Some(Duration::from_secs(1)));
        assert_eq!(b.exit_code, 0);
        assert_eq!(problems.len(), 2);
        assert!(
            problems[0]
                .starts_with("metadata.annotations[keel.dev/run-time]: Invalid value: \"soon\"")
        );
        assert!(problems[1].contains("keel.dev/exit-code"));
    }

    #[test]
    fn an_exit_restarts_in_place_or_ends_the_pod() {
        let mut pod = annotated("OnFailure", json!({}));
        pod["status"] = running_status(&pod, None, true);
        let started =
            pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].clone();
        assert!(containers_started(&pod).is_some());
        let again = restarted_status(&pod, 1);
        let c = &again["containerStatuses"][0];
        assert_eq!(c["restartCount"], 1);
        assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(c["lastState"]["terminated"]["reason"], "Error");
        assert_eq!(c["lastState"]["terminated"]["startedAt"], started);
        assert!(c["state"]["running"]["startedAt"].is_string());
        assert!(again.get("phase").is_none(), "still Running");

        let done = json!({"status": terminated_status(&pod, 0)});
        assert_eq!(done["status"]["phase"], "Succeeded");
        assert_eq!(
            done["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert!(!objects::pod_is_ready(&done) && !objects::pod_is_active(&done));
        let failed = terminated_status(&pod, 2);
        assert_eq!(failed["phase"], "Failed");
        assert_eq!(
            failed["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            2
        );
    }
}
