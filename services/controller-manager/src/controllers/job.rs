//! The Job controller: Pods that run to completion, as Kubernetes' `job-controller` (batch/v1,
//! `NonIndexed` completion mode).
//!
//! - `parallelism` Pods run at once, up to `completions` successes; without `completions`, the
//!   first success ends the Job once the Pods still running end.
//! - A failed Pod is replaced after a backoff (10 s · 2^(failures since the last success − 1),
//!   at most 6 minutes, `--job-backoff-base`); more failures than `backoffLimit` (restarts, for
//!   `restartPolicy: OnFailure`) fail the Job (`BackoffLimitExceeded`), as does running past
//!   `activeDeadlineSeconds` (`DeadlineExceeded`); the Pods still running are then deleted.
//! - Every Pod is counted exactly once, with Kubernetes' tracking finalizer: a Pod is created
//!   with `batch.kubernetes.io/job-tracking`; once it has ended (or is being deleted) its uid
//!   goes into `status.uncountedTerminatedPods`, then the finalizer is removed, then the uid
//!   moves into `succeeded` or `failed`. A crash between the steps repeats a step, never a count.
//! - Conditions as Kubernetes 1.32 writes them: `SuccessCriteriaMet` then `Complete`,
//!   `FailureTarget` then `Failed`, `Suspended`; Events `SuccessfulCreate`, `SuccessfulDelete`,
//!   `FailedCreate`, `Completed`, `BackoffLimitExceeded`, `DeadlineExceeded`, `Suspended`,
//!   `Resumed`.
//!
//! Departures: `Indexed` completion mode, `podFailurePolicy`, `successPolicy` and
//! `backoffLimitPerIndex` are not run (such a Job runs as `NonIndexed`); orphan Pods matching a
//! Job's selector are not adopted (a Job's selector names its own uid unless `manualSelector`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use keel_api::Metadata;
use keel_client::{ApiError, Client, DeleteParams, PatchType, Reason};
use keel_runtime::{
    Action, BY_NAMESPACE, Controller, HandlerFns, ObjectKey, Recorder, ShardBy, Store,
    WatchOptions, WorkQueue, enqueue_handler,
};
use prometheus_client::registry::Registry;
use serde_json::{Map, Value, json};

use super::expectations::Expectations;
use super::{Context, SetupError, Start};
use crate::objects::{self, controller_of};

pub const NAME: &str = "job";
/// Kubernetes' `batch.kubernetes.io/job-tracking`.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// Kubernetes' `MaxJobPodFailureBackOff` before 1.28's raise: a failed Pod's replacement waits
/// at most this long.
const MAX_BACKOFF: Duration = Duration::from_secs(360);
/// Pods created or deleted in one sync (Kubernetes' `MaxPodCreateDeletePerSync`).
const BURST: usize = 500;

struct JobController {
    client: Client,
    jobs: Store,
    pods: Store,
    /// Pod creations and deletions not yet seen.
    expectations: Expectations,
    /// Tracking finalizers removed (by Pod uid) and not yet seen removed: until they are, the
    /// cache could show a counted Pod as uncounted.
    finalizers: Expectations,
    events: Recorder,
    backoff_base: Duration,
    /// The revision of this controller's last status write of each Job not yet in the cache:
    /// a sync waits for it, so that counts are never planned from a status older than its
    /// own (which would create a Pod too many). One entry per Job, dropped when seen.
    last_written: Mutex<HashMap<ObjectKey, u64>>,
}

pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    let job_informer = ctx.factory.informer_with(
        &objects::jobs(),
        ctx.options(WatchOptions::default(), ShardBy::Name),
    );
    let pod_informer = ctx
        .factory
        .informer_with(&objects::pods(), objects::pods_by_owner(ctx));
    let queue = WorkQueue::default_controller_queue();
    let (expectations, finalizers) = (Expectations::default(), Expectations::default());
    job_informer.add_handler(enqueue_handler(queue.clone()));
    pod_informer.add_handler(pod_handler(
        queue.clone(),
        expectations.clone(),
        finalizers.clone(),
    ));
    let this = Arc::new(JobController {
        client: ctx.client.clone(),
        jobs: job_informer.store(),
        pods: pod_informer.store(),
        expectations,
        finalizers,
        events: ctx.events.for_component("job-controller"),
        backoff_base: ctx.config.job_backoff_base,
        last_written: Mutex::new(HashMap::new()),
    });
    let controller = Controller::new(NAME, queue)
        .workers(ctx.config.workers)
        .metrics(registry);
    Ok(super::start(
        ctx.gate.reading(&[&job_informer, &pod_informer]),
        NAME,
        controller,
        this,
        super::by_name(ctx),
        |this, key| async move { this.reconcile(key).await },
    ))
}

/// Pod events wake the owning Job and check off its expectations: creations, deletions, and
/// the tracking finalizers it removed.
fn pod_handler(queue: WorkQueue<ObjectKey>, x: Expectations, fin: Expectations) -> HandlerFns {
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue);
    let (x1, x2) = (x.clone(), x);
    let (f1, f2) = (fin.clone(), fin);
    HandlerFns::new()
        .added(move |pod| {
            if let Some((owner, _)) = controller_of(pod, "Job") {
                x1.creation_observed(&owner);
                q1.add(owner);
            }
        })
        .updated(move |_, new| {
            if let Some((owner, _)) = controller_of(new, "Job") {
                if !new.has_finalizer(TRACKING_FINALIZER) {
                    f1.deletion_observed(&owner, new.uid());
                }
                q2.add(owner);
            }
        })
        .deleted(move |pod| {
            if let Some((owner, _)) = controller_of(pod, "Job") {
                x2.deletion_observed(&owner, pod.name());
                f2.deletion_observed(&owner, pod.uid());
                q3.add(owner);
            }
        })
}

/// A Job's `status.uncountedTerminatedPods`.
#[derive(Debug, Default, Clone, PartialEq)]
struct Uncounted {
    succeeded: Vec<String>,
    failed: Vec<String>,
}

impl Uncounted {
    fn of(job: &Value) -> Uncounted {
        let uids = |f: &str| -> Vec<String> {
            job["status"]["uncountedTerminatedPods"][f]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|u| u.as_str().map(str::to_string))
                .collect()
        };
        Uncounted {
            succeeded: uids("succeeded"),
            failed: uids("failed"),
        }
    }

    fn contains(&self, uid: &str) -> bool {
        self.succeeded.iter().chain(&self.failed).any(|u| u == uid)
    }

    fn is_empty(&self) -> bool {
        self.succeeded.is_empty() && self.failed.is_empty()
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if !self.succeeded.is_empty() {
            m.insert("succeeded".into(), json!(self.succeeded));
        }
        if !self.failed.is_empty() {
            m.insert("failed".into(), json!(self.failed));
        }
        Value::Object(m)
    }
}

/// How a Job ends.
#[derive(Debug, Clone, PartialEq)]
struct Finish {
    failed: bool,
    reason: &'static str,
    message: &'static str,
}

const COMPLETE: Finish = Finish {
    failed: false,
    reason: "CompletionsReached",
    message: "Reached expected number of succeeded pods",
};
const BACKOFF_LIMIT: Finish = Finish {
    failed: true,
    reason: "BackoffLimitExceeded",
    message: "Job has reached the specified backoff limit",
};
const DEADLINE: Finish = Finish {
    failed: true,
    reason: "DeadlineExceeded",
    message: "Job was active longer than specified deadline",
};

fn spec_i64(job: &Value, f: &str) -> Option<i64> {
    job["spec"][f].as_i64()
}

fn has_condition(job: &Value, kind: &str) -> bool {
    job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// Complete or Failed: nothing more runs.
pub fn is_finished(job: &Value) -> bool {
    has_condition(job, "Complete") || has_condition(job, "Failed")
}

fn pod_succeeded(pod: &Value) -> bool {
    pod["status"]["phase"] == "Succeeded"
}

/// Failed, or being deleted before it succeeded (Kubernetes' `isPodFailed` with the default
/// `podReplacementPolicy`).
fn pod_failed(pod: &Value) -> bool {
    pod["status"]["phase"] == "Failed" || (pod.is_deleting() && !pod_succeeded(pod))
}

/// When a Pod ended: its containers' latest `finishedAt`, else its last condition change.
fn finish_time(pod: &Value) -> Option<SystemTime> {
    let containers = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["state"]["terminated"]["finishedAt"].as_str());
    let conditions = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["lastTransitionTime"].as_str());
    containers
        .chain(conditions)
        .filter_map(objects::parse_time)
        .max()
}

/// How long a new Pod must wait after the failures since the last success: base · 2^(n−1),
/// at most [`MAX_BACKOFF`], from the last failure.
fn backoff_remaining(pods: &[Arc<Value>], base: Duration, now: SystemTime) -> Option<Duration> {
    let last_success = pods
        .iter()
        .filter(|p| pod_succeeded(p))
        .filter_map(|p| finish_time(p))
        .max();
    let failures: Vec<SystemTime> = pods
        .iter()
        .filter(|p| p["status"]["phase"] == "Failed")
        .filter_map(|p| finish_time(p))
        .filter(|t| last_success.is_none_or(|s| *t > s))
        .collect();
    let last = failures.iter().max()?;
    let exp = u32::try_from(failures.len().saturating_sub(1))
        .unwrap_or(u32::MAX)
        .min(16);
    let delay = base.saturating_mul(1 << exp).min(MAX_BACKOFF);
    (*last + delay).duration_since(now).ok()
}

/// Restarts of the containers of the Pods still running: what `backoffLimit` counts for
/// `restartPolicy: OnFailure`.
fn restarts(active: &[Arc<Value>]) -> i64 {
    active
        .iter()
        .flat_map(|p| {
            ["containerStatuses", "initContainerStatuses"]
                .into_iter()
                .flat_map(|f| p["status"][f].as_array().into_iter().flatten())
                .map(|c| c["restartCount"].as_i64().unwrap_or(0))
                .collect::<Vec<_>>()
        })
        .sum()
}

/// How many Pods should be running: `parallelism`, within the completions left; without
/// `completions`, none new once one has succeeded.
fn want_active(job: &Value, succeeded: i64, active: i64) -> i64 {
    let parallelism = spec_i64(job, "parallelism").unwrap_or(1).max(0);
    match spec_i64(job, "completions") {
        Some(c) => (c - succeeded).clamp(0, parallelism),
        None if succeeded > 0 => active.min(parallelism),
        None => parallelism,
    }
}

fn condition(kind: &str, status: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": kind, "status": status, "lastProbeTime": now,
           "lastTransitionTime": now, "reason": reason, "message": message})
}

/// `conditions` with `kind` set to `status` (its transition time kept when unchanged).
fn set_condition(conditions: &mut Vec<Value>, new: Value) {
    match conditions.iter_mut().find(|c| c["type"] == new["type"]) {
        Some(c) if c["status"] == new["status"] => {}
        Some(c) => *c = new,
        None => conditions.push(new),
    }
}

impl JobController {
    /// Records (`Some`) or forgets (`None`) the revision of this controller's last write.
    fn written(&self, key: ObjectKey, rev: Option<u64>) {
        let mut w = self
            .last_written
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match rev {
            Some(r) => {
                w.insert(key, r);
            }
            None => {
                w.remove(&key);
            }
        }
    }

    /// Whether the cache holds this controller's own last write of the Job.
    fn caught_up(&self, key: &ObjectKey, job: &Value) -> bool {
        let mut w = self
            .last_written
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match w.get(key) {
            Some(r) if revision(job) < *r => false,
            Some(_) => {
                w.remove(key);
                true
            }
            None => true,
        }
    }

    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(job) = self.jobs.get(&key) else {
            self.expectations.forget(&key);
            self.finalizers.forget(&key);
            self.written(key.clone(), None);
            self.release_orphans(&key).await?;
            return Ok(Action::await_change());
        };
        let pods = objects::owned(&self.pods, &job);
        if !self.expectations.satisfied(&key)
            || !self.finalizers.satisfied(&key)
            || !self.caught_up(&key, &job)
        {
            return Ok(Action::await_change());
        }
        if is_finished(&job) {
            // Finished: what still holds the finalizer is let go, not counted (Kubernetes'
            // `removeTrackingFinalizersFromAllPods`).
            let held: Vec<&Arc<Value>> = pods
                .iter()
                .filter(|p| p.has_finalizer(TRACKING_FINALIZER))
                .collect();
            for r in futures::future::join_all(held.iter().map(|p| self.remove_finalizer(p))).await
            {
                r?;
            }
            return Ok(Action::await_change());
        }
        let now = SystemTime::now();
        let now_text = objects::format_time(now);
        let mut status = job["status"].as_object().cloned().unwrap_or_default();
        let mut uncounted = Uncounted::of(&job);

        // Pods that ended since the last sync join the uncounted ones.
        for pod in &pods {
            if !pod.has_finalizer(TRACKING_FINALIZER) || uncounted.contains(pod.uid()) {
                continue;
            }
            if pod_succeeded(pod) {
                uncounted.succeeded.push(pod.uid().to_string());
            } else if pod_failed(pod) {
                uncounted.failed.push(pod.uid().to_string());
            }
        }
        let counted =
            |s: &Map<String, Value>, f: &str| s.get(f).and_then(Value::as_i64).unwrap_or(0);
        let succeeded = counted(&status, "succeeded") + len(&uncounted.succeeded);
        let failed = counted(&status, "failed") + len(&uncounted.failed);
        let mut active: Vec<Arc<Value>> = pods
            .iter()
            .filter(|p| objects::pod_is_active(p))
            .cloned()
            .collect();

        // What the Job's state asks for.
        let suspended = job["spec"]["suspend"] == json!(true);
        let mut finish = None;
        let mut requeue = None;
        {
            if status.get("startTime").is_none_or(Value::is_null) && !suspended {
                status.insert("startTime".into(), json!(now_text));
            }
            let on_failure = job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure";
            let limit = spec_i64(&job, "backoffLimit").unwrap_or(6);
            let over_limit = if on_failure {
                let r = restarts(&active) + failed;
                if limit == 0 { r > 0 } else { r >= limit }
            } else {
                failed > limit
            };
            let deadline = spec_i64(&job, "activeDeadlineSeconds").and_then(|s| {
                let start = status
                    .get("startTime")?
                    .as_str()
                    .and_then(objects::parse_time)?;
                Some(start + Duration::from_secs(u64::try_from(s).unwrap_or(0)))
            });
            let want_done = match spec_i64(&job, "completions") {
                Some(c) => succeeded >= c,
                None => succeeded > 0 && active.is_empty(),
            };
            if over_limit {
                finish = Some(BACKOFF_LIMIT);
            } else if deadline.is_some_and(|d| d <= now) && !suspended {
                finish = Some(DEADLINE);
            } else if want_done {
                finish = Some(COMPLETE);
            } else if let Some(d) = deadline.filter(|_| !suspended) {
                requeue = d.duration_since(now).ok();
            }
        }

        // Pods: none once the Job is finishing or suspended; else `want_active` of them.
        if finish.is_some() || suspended {
            let stopping = active.clone();
            if !stopping.is_empty() {
                self.delete_pods(&key, &job, &stopping).await?;
                if finish.as_ref().is_some_and(|f| f.failed) {
                    // Killed Pods count as failed, as Kubernetes counts them.
                    status.insert(
                        "failed".into(),
                        json!(counted(&status, "failed") + len(&stopping)),
                    );
                }
                active.clear();
            }
        } else {
            let want = want_active(&job, succeeded, len(&active));
            let have = len(&active);
            if have > want {
                let victims = super::replicaset::pods_to_delete(
                    &active,
                    usize::try_from(have - want).unwrap_or(0).min(BURST),
                );
                self.delete_pods(&key, &job, &victims).await?;
                let gone: HashSet<&str> = victims.iter().map(|p| p.uid()).collect();
                active.retain(|p| !gone.contains(p.uid()));
            } else if have < want {
                match backoff_remaining(&pods, self.backoff_base, now) {
                    Some(wait) if !wait.is_zero() => {
                        requeue = Some(requeue.map_or(wait, |r: Duration| r.min(wait)));
                    }
                    _ => {
                        let n = usize::try_from(want - have).unwrap_or(0).min(BURST);
                        self.create_pods(&key, &job, n).await?;
                    }
                }
            }
        }

        // Count: record the uncounted, remove their finalizers, then move them into the
        // counters. Finishing waits until nothing is left uncounted.
        let job = match self
            .flush(&key, &job, &mut status, &mut uncounted, &pods)
            .await?
        {
            Some(j) => j,
            None => return Ok(Action::await_change()),
        };
        status.insert(
            "active".into(),
            json!(len(&active
                .iter()
                .filter(|p| !p.is_deleting())
                .collect::<Vec<_>>())),
        );
        status.insert(
            "ready".into(),
            json!(len(&active
                .iter()
                .filter(|p| objects::pod_is_ready(p))
                .collect::<Vec<_>>())),
        );
        status.insert(
            "terminating".into(),
            json!(len(&pods
                .iter()
                .filter(|p| p.is_deleting()
                    && !pod_succeeded(p)
                    && p["status"]["phase"] != "Failed")
                .collect::<Vec<_>>())),
        );
        let mut conditions: Vec<Value> = status
            .get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        {
            self.suspension(&job, suspended, &mut conditions, &mut status, &now_text);
        }
        let mut newly_finished = None;
        if let Some(f) = finish
            && uncounted.is_empty()
        {
            let (target, last) = if f.failed {
                ("FailureTarget", "Failed")
            } else {
                ("SuccessCriteriaMet", "Complete")
            };
            set_condition(
                &mut conditions,
                condition(target, "True", f.reason, f.message, &now_text),
            );
            set_condition(
                &mut conditions,
                condition(last, "True", f.reason, f.message, &now_text),
            );
            if !f.failed {
                status.insert("completionTime".into(), json!(now_text));
            }
            status.insert("active".into(), json!(0));
            status.insert("ready".into(), json!(0));
            newly_finished = Some(f);
        }
        if !conditions.is_empty() {
            status.insert("conditions".into(), Value::Array(conditions));
        }
        status.insert("uncountedTerminatedPods".into(), uncounted.to_json());
        if self
            .write_status(&job, Value::Object(status))
            .await?
            .is_some()
            && let Some(f) = newly_finished
        {
            if f.failed {
                self.events.warning(&job, f.reason, f.message);
            } else {
                self.events.normal(&job, "Completed", "Job completed");
            }
        }
        Ok(match requeue {
            Some(d) => Action::requeue(d.max(Duration::from_millis(100))),
            None => Action::await_change(),
        })
    }

    /// `Suspended`: set when the Job is suspended, cleared (with a new start time) when it
    /// resumes; with their Events.
    fn suspension(
        &self,
        job: &Value,
        suspended: bool,
        conditions: &mut Vec<Value>,
        status: &mut Map<String, Value>,
        now: &str,
    ) {
        let was = has_condition(job, "Suspended");
        if suspended && !was {
            set_condition(
                conditions,
                condition("Suspended", "True", "JobSuspended", "Job suspended", now),
            );
            status.insert("startTime".into(), Value::Null);
            self.events.normal(job, "Suspended", "Job suspended");
        } else if !suspended && was {
            set_condition(
                conditions,
                condition("Suspended", "False", "JobResumed", "Job resumed", now),
            );
            status.insert("startTime".into(), json!(now));
            self.events.normal(job, "Resumed", "Job resumed");
        }
    }

    /// Writes the uncounted uids, removes their Pods' tracking finalizers, and moves those
    /// removed into `succeeded` and `failed` (`status` and `uncounted` are updated to match).
    /// The Job as last written; `None` when it changed meanwhile (its event brings it back).
    async fn flush(
        &self,
        key: &ObjectKey,
        job: &Arc<Value>,
        status: &mut Map<String, Value>,
        uncounted: &mut Uncounted,
        pods: &[Arc<Value>],
    ) -> Result<Option<Arc<Value>>, ApiError> {
        if uncounted == &Uncounted::of(job) && uncounted.is_empty() {
            return Ok(Some(job.clone()));
        }
        let mut job = job.clone();
        if uncounted != &Uncounted::of(&job) {
            let mut first = status.clone();
            first.insert("uncountedTerminatedPods".into(), uncounted.to_json());
            match self.write_status(&job, Value::Object(first)).await? {
                Some(j) => job = Arc::new(j),
                None => return Ok(None),
            }
        }
        let holding: Vec<&Arc<Value>> = pods
            .iter()
            .filter(|p| p.has_finalizer(TRACKING_FINALIZER) && uncounted.contains(p.uid()))
            .collect();
        self.finalizers
            .expect_deletions(key, holding.iter().map(|p| p.uid().to_string()));
        let mut removed: HashSet<String> = HashSet::new();
        let results =
            futures::future::join_all(holding.iter().map(|p| self.remove_finalizer(p))).await;
        let mut first_error = None;
        for (p, r) in holding.iter().zip(results) {
            match r {
                Ok(()) => {
                    removed.insert(p.uid().to_string());
                }
                Err(e) => {
                    self.finalizers.deletion_observed(key, p.uid());
                    first_error.get_or_insert(e);
                }
            }
        }
        // Uncounted Pods no longer holding the finalizer (removed now, or before a crash, or
        // gone) are counted.
        let still_held: HashSet<&str> = pods
            .iter()
            .filter(|p| p.has_finalizer(TRACKING_FINALIZER) && !removed.contains(p.uid()))
            .map(|p| p.uid())
            .collect();
        let count = |list: &mut Vec<String>| {
            let before = len(list);
            list.retain(|u| still_held.contains(u.as_str()));
            before - len(list)
        };
        let (s, f) = (
            count(&mut uncounted.succeeded),
            count(&mut uncounted.failed),
        );
        for (field, n) in [("succeeded", s), ("failed", f)] {
            let was = status.get(field).and_then(Value::as_i64).unwrap_or(0);
            status.insert(field.into(), json!(was + n));
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(Some(job)),
        }
    }

    async fn remove_finalizer(&self, pod: &Value) -> Result<(), ApiError> {
        let patch = json!({"metadata": {
            "$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER],
            "uid": pod.uid(),
        }});
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
            Ok(_) => Ok(()),
            Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A Job gone: its Pods that still hold the tracking finalizer are let go (the garbage
    /// collector deletes them).
    async fn release_orphans(&self, key: &ObjectKey) -> Result<(), ApiError> {
        let held: Vec<Arc<Value>> = self
            .pods
            .by_index(BY_NAMESPACE, &key.namespace)
            .into_iter()
            .filter(|p| p.has_finalizer(TRACKING_FINALIZER))
            .filter(|p| controller_of(p, "Job").is_some_and(|(k, _)| &k == key))
            .collect();
        for r in futures::future::join_all(held.iter().map(|p| self.remove_finalizer(p))).await {
            r?;
        }
        Ok(())
    }

    async fn create_pods(&self, key: &ObjectKey, job: &Value, n: usize) -> Result<(), ApiError> {
        self.expectations.expect_creations(key, n);
        let mut remaining = n;
        let mut batch = 1;
        while remaining > 0 {
            let size = batch.min(remaining);
            let results = futures::future::join_all((0..size).map(|_| self.create_pod(job))).await;
            remaining -= size;
            let mut first_error = None;
            for r in results {
                match r {
                    Ok(name) => {
                        self.events
                            .normal(job, "SuccessfulCreate", format!("Created pod: {name}"))
                    }
                    Err(e) => {
                        self.expectations.creation_observed(key);
                        if !super::replicaset::namespace_terminating(&e) {
                            self.events.warning(
                                job,
                                "FailedCreate",
                                format!("Error creating: {e}"),
                            );
                            first_error.get_or_insert(e);
                        }
                    }
                }
            }
            if let Some(e) = first_error {
                for _ in 0..remaining {
                    self.expectations.creation_observed(key);
                }
                return Err(e);
            }
            batch *= 2;
        }
        Ok(())
    }

    /// A Pod of the Job's template, named by the API server from `<job>-`, holding the
    /// tracking finalizer. Its name.
    async fn create_pod(&self, job: &Value) -> Result<String, ApiError> {
        let template = &job["spec"]["template"];
        let mut meta = Map::new();
        for f in ["labels", "annotations"] {
            if let Some(v) = template["metadata"].get(f) {
                meta.insert(f.into(), v.clone());
            }
        }
        meta.insert("generateName".into(), json!(format!("{}-", job.name())));
        meta.insert("namespace".into(), json!(job.namespace()));
        meta.insert("finalizers".into(), json!([TRACKING_FINALIZER]));
        meta.insert(
            "ownerReferences".into(),
            json!([objects::controller_reference(job)]),
        );
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"],
        });
        let created = self
            .client
            .create(&objects::pods(), job.namespace(), &pod)
            .await?;
        Ok(created.name().to_string())
    }

    /// Deletes Pods, first letting go of their tracking finalizers: a Pod the Job deletes
    /// is not counted (Kubernetes' `deleteJobPods`).
    async fn delete_pods(
        &self,
        key: &ObjectKey,
        job: &Value,
        pods: &[Arc<Value>],
    ) -> Result<(), ApiError> {
        let names: Vec<String> = pods.iter().map(|p| p.name().to_string()).collect();
        self.expectations
            .expect_deletions(key, names.iter().cloned());
        let results = futures::future::join_all(pods.iter().map(|p| async move {
            self.remove_finalizer(p).await?;
            let params = DeleteParams::default();
            self.client
                .delete(&objects::pods(), p.namespace(), p.name(), &params)
                .await
                .map(|_| ())
        }))
        .await;
        let mut first_error = None;
        for (name, r) in names.iter().zip(results) {
            match r {
                Ok(()) => {
                    self.events
                        .normal(job, "SuccessfulDelete", format!("Deleted pod: {name}"))
                }
                Err(e) => {
                    self.expectations.deletion_observed(key, name);
                    if e.reason != Reason::NotFound {
                        self.events
                            .warning(job, "FailedDelete", format!("Error deleting: {e}"));
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes `status` as a merge patch of the status subresource, pinned to the
    /// `resourceVersion` it was computed from. The Job as written; `None` when it changed or
    /// went meanwhile (its event brings the key back).
    async fn write_status(&self, job: &Value, status: Value) -> Result<Option<Value>, ApiError> {
        if status == job["status"] {
            return Ok(Some(job.clone()));
        }
        // A merge patch keeps what it does not name: an emptied list of uids is a null.
        let mut status = status;
        if let Some(u) = status.get_mut("uncountedTerminatedPods") {
            for f in ["succeeded", "failed"] {
                if u.get(f).is_none() {
                    u[f] = Value::Null;
                }
            }
        }
        let body = json!({
            "metadata": {"resourceVersion": job.resource_version()},
            "status": status,
        });
        match self
            .client
            .patch_subresource(
                &objects::jobs(),
                job.namespace(),
                job.name(),
                "status",
                PatchType::Merge,
                serde_json::to_vec(&body).unwrap_or_default(),
            )
            .await
        {
            Ok(j) => {
                if let Ok(key) = ObjectKey::from_object(&j) {
                    self.written(key, Some(revision(&j)));
                }
                Ok(Some(j))
            }
            Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

fn revision(obj: &Value) -> u64 {
    obj.resource_version().parse().unwrap_or(0)
}

fn len<T>(v: &[T]) -> i64 {
    i64::try_from(v.len()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(spec: Value) -> Value {
        json!({"spec": spec})
    }

    fn pod(phase: &str, finished: &str) -> Arc<Value> {
        Arc::new(json!({"status": {"phase": phase, "containerStatuses": [
            {"state": {"terminated": {"finishedAt": finished}}}]}}))
    }

    #[test]
    fn parallelism_within_the_completions_left() {
        let j = job(json!({"completions": 5, "parallelism": 2}));
        assert_eq!(want_active(&j, 0, 0), 2);
        assert_eq!(want_active(&j, 4, 2), 1);
        assert_eq!(want_active(&j, 5, 0), 0);
        let work_queue = job(json!({"parallelism": 3}));
        assert_eq!(want_active(&work_queue, 0, 0), 3);
        assert_eq!(
            want_active(&work_queue, 1, 2),
            2,
            "no new pods after a success"
        );
    }

    #[test]
    fn replacements_back_off_after_failures_since_the_last_success() {
        let base = Duration::from_secs(10);
        let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s);
        let at = |s: u64| objects::format_time(t(s));
        let pods = vec![pod("Failed", &at(0))];
        assert_eq!(
            backoff_remaining(&pods, base, t(4)),
            Some(Duration::from_secs(6))
        );
        assert_eq!(backoff_remaining(&pods, base, t(11)), None);
        let pods = vec![pod("Failed", &at(0)), pod("Failed", &at(10))];
        assert_eq!(
            backoff_remaining(&pods, base, t(10)),
            Some(Duration::from_secs(20))
        );
        let pods = vec![pod("Failed", &at(0)), pod("Succeeded", &at(5))];
        assert_eq!(backoff_remaining(&pods, base, t(1)), None);
    }

    #[test]
    fn a_pod_being_deleted_before_it_succeeded_has_failed() {
        let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                              "status": {"phase": "Running"}});
        assert!(pod_failed(&deleting));
        let done = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                          "status": {"phase": "Succeeded"}});
        assert!(!pod_failed(&done) && pod_succeeded(&done));
    }

    #[test]
    fn uncounted_pods_read_and_write_as_kubernetes_spells_them() {
        let j =
            json!({"status": {"uncountedTerminatedPods": {"succeeded": ["a"], "failed": ["b"]}}});
        let u = Uncounted::of(&j);
        assert!(u.contains("a") && u.contains("b") && !u.contains("c"));
        assert_eq!(u.to_json(), j["status"]["uncountedTerminatedPods"]);
        assert_eq!(Uncounted::default().to_json(), json!({}));
    }
}
