//! The CronJob controller: a Job at each time of a cron schedule, as Kubernetes'
//! `cronjob-controller` (v2).
//!
//! - `schedule` is standard cron (five fields, names, `@hourly`-style descriptors), in
//!   `timeZone` (IANA) or UTC; parsed with `croner`, zones from `chrono-tz`.
//! - At each schedule time (the latest one missed, if several were: as Kubernetes, one Job,
//!   and a `TooManyMissedTimes` warning past 100) a Job `<cronjob>-<minutes since the epoch>`
//!   is created from `jobTemplate`, unless `startingDeadlineSeconds` has passed
//!   (`MissSchedule`), the CronJob is suspended, or `concurrencyPolicy` says otherwise
//!   (`Forbid`: not while one runs; `Replace`: the running ones are deleted first).
//! - `status.active` follows the Jobs that run, `lastScheduleTime` and `lastSuccessfulTime`
//!   are kept, and finished Jobs beyond `successfulJobsHistoryLimit` and
//!   `failedJobsHistoryLimit` are deleted, oldest first.
//!
//! The controller's clock can run faster than real time (`--cronjob-time-scale`), so that
//! tests and demonstrations see a schedule fire every simulated minute without waiting.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use keel_api::Metadata;
use keel_client::{ApiError, Client, DeleteParams, PropagationPolicy, Reason};
use keel_runtime::{
    Action, Controller, ObjectKey, Recorder, ShardBy, Store, WatchOptions, WorkQueue,
    enqueue_handler,
};
use prometheus_client::registry::Registry;
use serde_json::{Map, Value, json};

use super::job::is_finished;
use super::{Context, SetupError, Start};
use crate::objects;

pub const NAME: &str = "cronjob";
pub const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// Missed schedule times past which Kubernetes warns (and this controller too).
const TOO_MANY_MISSED: usize = 100;

struct CronJobController {
    client: Client,
    cronjobs: Store,
    jobs: Store,
    events: Recorder,
    clock: Clock,
}

/// The controller's clock: real time, or time running `scale` times faster from when the
/// controller started.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: SystemTime,
    scale: u32,
}

impl Clock {
    pub fn new(start: SystemTime, scale: u32) -> Clock {
        Clock {
            start,
            scale: scale.max(1),
        }
    }

    pub fn now_at(&self, real: SystemTime) -> SystemTime {
        let elapsed = real.duration_since(self.start).unwrap_or(Duration::ZERO);
        self.start + elapsed.saturating_mul(self.scale)
    }

    fn now(&self) -> SystemTime {
        self.now_at(SystemTime::now())
    }

    /// How long in real time until `d` of this clock's time has passed.
    fn real(&self, d: Duration) -> Duration {
        d / self.scale
    }
}

pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    let cj_informer = ctx.factory.informer_with(
        &objects::cronjobs(),
        ctx.options(WatchOptions::default(), ShardBy::Name),
    );
    // A CronJob's Jobs are in its shard.
    let job_informer = ctx.factory.informer_with(
        &objects::jobs(),
        ctx.options(WatchOptions::default(), ShardBy::Owner),
    );
    let queue = WorkQueue::default_controller_queue();
    cj_informer.add_handler(enqueue_handler(queue.clone()));
    job_informer.add_handler(super::statefulset::owner_handler(queue.clone(), "CronJob"));
    let this = Arc::new(CronJobController {
        client: ctx.client.clone(),
        cronjobs: cj_informer.store(),
        jobs: job_informer.store(),
        events: ctx.events.for_component("cronjob-controller"),
        clock: Clock::new(SystemTime::now(), ctx.config.cronjob_time_scale),
    });
    let controller = Controller::new(NAME, queue)
        .workers(ctx.config.workers)
        .metrics(registry);
    Ok(super::start(
        ctx.gate.reading(&[&cj_informer, &job_informer]),
        NAME,
        controller,
        this,
        super::by_name(ctx),
        |this, key| async move { this.reconcile(key).await },
    ))
}

/// A parsed schedule in its time zone.
pub struct Schedule {
    cron: Cron,
    zone: chrono_tz::Tz,
}

impl Schedule {
    /// `schedule` in `zone` (UTC when absent). Errors are in Kubernetes' words.
    pub fn parse(schedule: &str, zone: Option<&str>) -> Result<Schedule, String> {
        let zone = match zone.filter(|z| !z.is_empty()) {
            None => chrono_tz::UTC,
            Some(z) => z
                .parse::<chrono_tz::Tz>()
                .map_err(|_| format!("unknown time zone {z}"))?,
        };
        let text = match schedule.trim() {
            "@midnight" => "0 0 * * *",
            s => s,
        };
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(text)
            .map_err(|e| format!("unparseable schedule {schedule:?}: {e}"))?;
        Ok(Schedule { cron, zone })
    }

    /// The first schedule time strictly after `t`.
    pub fn next_after(&self, t: SystemTime) -> Option<SystemTime> {
        let at = DateTime::<Utc>::from(t).with_timezone(&self.zone);
        self.cron
            .find_next_occurrence(&at, false)
            .ok()
            .map(|n| SystemTime::from(n.with_timezone(&Utc)))
    }

    /// The latest schedule time in `(since, now]`, and how many there were (counted up to
    /// just past [`TOO_MANY_MISSED`]).
    pub fn most_recent(&self, since: SystemTime, now: SystemTime) -> (Option<SystemTime>, usize) {
        let mut latest = None;
        let mut count = 0;
        let mut t = since;
        while let Some(next) = self.next_after(t).filter(|n| *n <= now) {
            latest = Some(next);
            count += 1;
            t = next;
            if count > TOO_MANY_MISSED {
                // Jump to the last one before `now` rather than walk every missed time.
                let at = DateTime::<Utc>::from(now).with_timezone(&self.zone);
                latest = self
                    .cron
                    .find_previous_occurrence(&at, true)
                    .ok()
                    .map(|p| SystemTime::from(p.with_timezone(&Utc)))
                    .or(latest);
                break;
            }
        }
        (latest, count)
    }
}

/// The Job a schedule time makes: named by the minutes since the epoch, as Kubernetes names it.
pub fn job_name(cronjob: &str, scheduled: SystemTime) -> String {
    let minutes = scheduled
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() / 60)
        .unwrap_or(0);
    format!("{cronjob}-{minutes}")
}

fn job_failed(job: &Value) -> bool {
    job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Failed" && c["status"] == "True")
}

fn job_reference(job: &Value) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job", "name": job.name(),
        "namespace": job.namespace(), "uid": job.uid(),
        "resourceVersion": job.resource_version(),
    })
}

/// Finished Jobs past the history limits, oldest first.
pub fn beyond_history(cj: &Value, jobs: &[Arc<Value>]) -> Vec<Arc<Value>> {
    let limit = |f: &str, default: i64| {
        usize::try_from(cj["spec"][f].as_i64().unwrap_or(default)).unwrap_or(0)
    };
    let mut out = Vec::new();
    for (failed, max) in [
        (false, limit("successfulJobsHistoryLimit", 3)),
        (true, limit("failedJobsHistoryLimit", 1)),
    ] {
        let mut done: Vec<&Arc<Value>> = jobs
            .iter()
            .filter(|j| is_finished(j) && job_failed(j) == failed && !j.is_deleting())
            .collect();
        done.sort_by_key(|j| {
            (
                j["status"]["startTime"]
                    .as_str()
                    .or(j.creation_timestamp())
                    .unwrap_or("")
                    .to_string(),
                j.name().to_string(),
            )
        });
        let excess = done.len().saturating_sub(max);
        out.extend(done.into_iter().take(excess).cloned());
    }
    out
}

impl CronJobController {
    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(cj) = self.cronjobs.get(&key) else {
            return Ok(Action::await_change());
        };
        let jobs = objects::owned(&self.jobs, &cj);
        let mut status = cj["status"].as_object().cloned().unwrap_or_default();
        let mut active = self.follow_active(&cj, &jobs, &mut status);
        if cj.is_deleting() {
            self.write_status(&cj, status, active).await?;
            return Ok(Action::await_change());
        }
        let now = self.clock.now();
        let schedule = match Schedule::parse(
            cj["spec"]["schedule"].as_str().unwrap_or(""),
            cj["spec"]["timeZone"].as_str(),
        ) {
            Ok(s) => s,
            Err(e) => {
                let reason = if e.starts_with("unknown time zone") {
                    "UnknownTimeZone"
                } else {
                    "UnparseableSchedule"
                };
                self.events.warning(&cj, reason, e);
                self.write_status(&cj, status, active).await?;
                return Ok(Action::await_change());
            }
        };
        let requeue_at = |t: SystemTime| {
            schedule
                .next_after(t)
                .and_then(|n| n.duration_since(now).ok())
                .map(|d| self.clock.real(d) + Duration::from_millis(100))
        };
        if cj["spec"]["suspend"] == json!(true) {
            self.write_status(&cj, status, active).await?;
            self.clean_up(&cj, &jobs).await?;
            return Ok(Action::await_change());
        }
        let since = status
            .get("lastScheduleTime")
            .and_then(Value::as_str)
            .or(cj.creation_timestamp())
            .and_then(objects::parse_time)
            .unwrap_or(now);
        let (scheduled, missed) = schedule.most_recent(since, now);
        let Some(scheduled) = scheduled else {
            self.write_status(&cj, status, active).await?;
            self.clean_up(&cj, &jobs).await?;
            return Ok(requeue_at(now).map_or_else(Action::await_change, Action::requeue));
        };
        if missed > TOO_MANY_MISSED {
            self.events.warning(
                &cj,
                "TooManyMissedTimes",
                "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
            );
        }
        let deadline = cj["spec"]["startingDeadlineSeconds"]
            .as_u64()
            .map(|s| scheduled + Duration::from_secs(s));
        let name = job_name(cj.name(), scheduled);
        let policy = cj["spec"]["concurrencyPolicy"].as_str().unwrap_or("Allow");
        let already = jobs.iter().any(|j| j.name() == name);
        if deadline.is_some_and(|d| d < now) {
            self.events.warning(
                &cj,
                "MissSchedule",
                format!(
                    "Missed scheduled time to start a job: {}",
                    objects::format_time(scheduled)
                ),
            );
        } else if already {
            // Created already (a write of its status was lost): only the status is behind.
        } else if policy == "Forbid" && !active.is_empty() {
            self.events.normal(
                &cj,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid",
            );
            return Ok(requeue_at(now).map_or_else(Action::await_change, Action::requeue));
        } else {
            if policy == "Replace" {
                for j in jobs.iter().filter(|j| !is_finished(j) && !j.is_deleting()) {
                    self.delete_job(&cj, j).await?;
                }
                active.clear();
            }
            if let Some(job) = self.create_job(&cj, &name, scheduled).await? {
                active.push(job_reference(&job));
            }
        }
        status.insert(
            "lastScheduleTime".into(),
            json!(objects::format_time(scheduled)),
        );
        self.write_status(&cj, status, active).await?;
        self.clean_up(&cj, &jobs).await?;
        Ok(requeue_at(now).map_or_else(Action::await_change, Action::requeue))
    }

    /// `status.active` as the Jobs now are: finished ones leave it (`SawCompletedJob`; a
    /// success sets `lastSuccessfulTime`), running ones of this CronJob are in it.
    fn follow_active(
        &self,
        cj: &Value,
        jobs: &[Arc<Value>],
        status: &mut Map<String, Value>,
    ) -> Vec<Value> {
        let listed: Vec<Value> = status
            .get("active")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut active = Vec::new();
        for j in jobs {
            let was_listed = listed.iter().any(|r| r["uid"] == j.uid());
            if is_finished(j) {
                if was_listed {
                    let how = if job_failed(j) { "Failed" } else { "Complete" };
                    self.events.normal(
                        cj,
                        "SawCompletedJob",
                        format!("Saw completed job: {}, status: {how}", j.name()),
                    );
                    if !job_failed(j)
                        && let Some(done) = j["status"]["completionTime"].as_str()
                    {
                        let later = status
                            .get("lastSuccessfulTime")
                            .and_then(Value::as_str)
                            .is_none_or(|t| t < done);
                        if later {
                            status.insert("lastSuccessfulTime".into(), json!(done));
                        }
                    }
                }
            } else if !j.is_deleting() {
                active.push(job_reference(j));
            }
        }
        // A listed Job the cache does not hold yet (just created) stays listed.
        for r in listed {
            let known = jobs.iter().any(|j| r["uid"] == j.uid());
            if !known && r["name"].as_str().is_some_and(|n| n.starts_with(cj.name())) {
                active.push(r);
            }
        }
        active
    }

    async fn create_job(
        &self,
        cj: &Value,
        name: &str,
        scheduled: SystemTime,
    ) -> Result<Option<Value>, ApiError> {
        let template = &cj["spec"]["jobTemplate"];
        let mut meta = Map::new();
        meta.insert("name".into(), json!(name));
        meta.insert("namespace".into(), json!(cj.namespace()));
        if let Some(l) = template["metadata"].get("labels") {
            meta.insert("labels".into(), l.clone());
        }
        let mut annotations = template["metadata"]["annotations"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        annotations.insert(
            SCHEDULED_ANNOTATION.into(),
            json!(objects::format_time(scheduled)),
        );
        meta.insert("annotations".into(), Value::Object(annotations));
        meta.insert(
            "ownerReferences".into(),
            json!([objects::controller_reference(cj)]),
        );
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                         "spec": template["spec"]});
        match self
            .client
            .create(&objects::jobs(), cj.namespace(), &job)
            .await
        {
            Ok(created) => {
                self.events
                    .normal(cj, "SuccessfulCreate", format!("Created job {name}"));
                Ok(Some(created))
            }
            Err(e) if e.reason == Reason::AlreadyExists => Ok(None),
            Err(e) => {
                if !super::replicaset::namespace_terminating(&e) {
                    self.events
                        .warning(cj, "FailedCreate", format!("Error creating job: {e}"));
                }
                Err(e)
            }
        }
    }

    async fn delete_job(&self, cj: &Value, job: &Value) -> Result<(), ApiError> {
        let params = DeleteParams {
            uid: job.uid().to_string(),
            propagation: PropagationPolicy::Background,
            ..DeleteParams::default()
        };
        match self
            .client
            .delete(&objects::jobs(), job.namespace(), job.name(), &params)
            .await
        {
            Ok(_) => {
                self.events.normal(
                    cj,
                    "SuccessfulDelete",
                    format!("Deleted job {}", job.name()),
                );
                Ok(())
            }
            Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn clean_up(&self, cj: &Value, jobs: &[Arc<Value>]) -> Result<(), ApiError> {
        for j in beyond_history(cj, jobs) {
            self.delete_job(cj, &j).await?;
        }
        Ok(())
    }

    async fn write_status(
        &self,
        cj: &Value,
        mut status: Map<String, Value>,
        active: Vec<Value>,
    ) -> Result<(), ApiError> {
        if active.is_empty() {
            // A merge patch keeps what it does not name.
            status.insert("active".into(), Value::Null);
            if cj["status"].get("active").is_none() {
                status.remove("active");
            }
        } else {
            status.insert("active".into(), Value::Array(active));
        }
        super::write_status(
            &self.client,
            &objects::cronjobs(),
            cj,
            Value::Object(status),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SystemTime {
        objects::parse_time(s).unwrap()
    }

    #[test]
    fn schedules_are_standard_cron_in_a_time_zone() {
        let every5 = Schedule::parse("*/5 * * * *", None).unwrap();
        assert_eq!(
            every5.next_after(at("2026-03-01T10:02:30Z")),
            Some(at("2026-03-01T10:05:00Z"))
        );
        let nine = Schedule::parse("0 9 * * MON-FRI", Some("Europe/Berlin")).unwrap();
        // Sunday 1 March 2026: the next weekday 09:00 in Berlin is Monday 08:00 UTC.
        assert_eq!(
            nine.next_after(at("2026-03-01T12:00:00Z")),
            Some(at("2026-03-02T08:00:00Z"))
        );
        let hourly = Schedule::parse("@hourly", None).unwrap();
        assert_eq!(
            hourly.next_after(at("2026-03-01T10:00:00Z")),
            Some(at("2026-03-01T11:00:00Z"))
        );
        assert!(Schedule::parse("@midnight", None).is_ok());
        assert!(
            Schedule::parse("* * * * * *", None).is_err(),
            "no seconds field"
        );
        assert!(Schedule::parse("61 * * * *", None).is_err());
        assert_eq!(
            Schedule::parse("* * * * *", Some("Mars/Olympus"))
                .err()
                .unwrap(),
            "unknown time zone Mars/Olympus"
        );
    }

    #[test]
    fn the_latest_missed_time_is_run_and_the_missed_are_counted() {
        let s = Schedule::parse("* * * * *", None).unwrap();
        let (latest, count) = s.most_recent(at("2026-03-01T10:00:00Z"), at("2026-03-01T10:03:30Z"));
        assert_eq!(latest, Some(at("2026-03-01T10:03:00Z")));
        assert_eq!(count, 3);
        let (none, zero) = s.most_recent(at("2026-03-01T10:03:00Z"), at("2026-03-01T10:03:30Z"));
        assert_eq!((none, zero), (None, 0));
        let (latest, count) = s.most_recent(at("2026-03-01T00:00:00Z"), at("2026-03-02T00:00:30Z"));
        assert_eq!(latest, Some(at("2026-03-02T00:00:00Z")));
        assert!(count > TOO_MANY_MISSED);
    }

    #[test]
    fn jobs_are_named_by_their_minute() {
        assert_eq!(
            job_name("hello", at("2026-03-01T10:03:00Z")),
            format!(
                "hello-{}",
                at("2026-03-01T10:03:00Z")
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
                    / 60
            )
        );
    }

    #[test]
    fn a_scaled_clock_runs_faster_from_its_start() {
        let start = at("2026-03-01T10:00:00Z");
        let clock = Clock::new(start, 60);
        assert_eq!(
            clock.now_at(start + Duration::from_secs(2)),
            at("2026-03-01T10:02:00Z")
        );
        assert_eq!(clock.real(Duration::from_secs(60)), Duration::from_secs(1));
        assert_eq!(
            Clock::new(start, 0).now_at(start + Duration::from_secs(2)),
            start + Duration::from_secs(2)
        );
    }

    #[test]
    fn finished_jobs_beyond_the_history_limits_go_oldest_first() {
        let job = |name: &str, start: &str, cond: &str| {
            Arc::new(
                json!({"metadata": {"name": name}, "status": {"startTime": start,
                "conditions": [{"type": cond, "status": "True"}]}}),
            )
        };
        let cj = json!({"spec": {"successfulJobsHistoryLimit": 2, "failedJobsHistoryLimit": 1}});
        let jobs = vec![
            job("a", "2026-01-01T00:01:00Z", "Complete"),
            job("b", "2026-01-01T00:02:00Z", "Complete"),
            job("c", "2026-01-01T00:03:00Z", "Complete"),
            job("d", "2026-01-01T00:04:00Z", "Failed"),
            job("e", "2026-01-01T00:05:00Z", "Failed"),
            Arc::new(json!({"metadata": {"name": "running"}, "status": {}})),
        ];
        let names: Vec<String> = beyond_history(&cj, &jobs)
            .iter()
            .map(|j| j.name().to_string())
            .collect();
        assert_eq!(names, ["a", "d"]);
    }
}
