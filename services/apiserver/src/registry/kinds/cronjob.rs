//! `batch/v1` CronJob: a schedule and a job template, defaulted and validated as Kubernetes'
//! batch/v1 does; the controller-manager's `cronjob` controller runs it.

use keel_api::{FieldCause, Object};
use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, job, pod, set_default, spec_mut};

const CONCURRENCY: &[&str] = &["Allow", "Forbid", "Replace"];
const MACROS: &[&str] = &[
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

pub struct CronJob {
    merge: Option<MergeKeys>,
}

impl CronJob {
    pub fn new() -> Self {
        CronJob {
            merge: builtin_merge_keys("batch/v1", "CronJob"),
        }
    }
}

impl Kind for CronJob {
    /// `SetDefaults_CronJob`, and the pod template's defaults.
    fn defaults(&self, obj: &mut Object) {
        pod::template_defaults(obj, &["spec", "jobTemplate", "spec", "template"]);
        let Some(spec) = spec_mut(obj) else { return };
        set_default(spec, "concurrencyPolicy", json!("Allow"));
        set_default(spec, "suspend", json!(false));
        set_default(spec, "successfulJobsHistoryLimit", json!(3));
        set_default(spec, "failedJobsHistoryLimit", json!(1));
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        let Some(spec) = obj.as_map().get("spec").and_then(Value::as_object) else {
            causes.push(FieldCause::required("spec"));
            return;
        };
        match spec.get("schedule").and_then(Value::as_str) {
            None | Some("") => causes.push(FieldCause::required("spec.schedule")),
            Some(s) if !is_schedule(s) => causes.push(FieldCause::invalid(
                "spec.schedule",
                s,
                "unparseable cron schedule: expected exactly 5 fields or a descriptor",
            )),
            Some(_) => {}
        }
        let policy = spec
            .get("concurrencyPolicy")
            .and_then(Value::as_str)
            .unwrap_or("Allow");
        if !CONCURRENCY.contains(&policy) {
            causes.push(FieldCause::not_supported(
                "spec.concurrencyPolicy",
                policy,
                CONCURRENCY,
            ));
        }
        let job_spec = spec.get("jobTemplate").and_then(|t| t.get("spec"));
        if job_spec.and_then(|s| s.get("template")).is_none() {
            causes.push(FieldCause::required("spec.jobTemplate.spec.template"));
        }
        job::job_spec(job_spec, "spec.jobTemplate.spec", causes);
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}

/// A cron schedule: five fields of digits, `*`, `?`, ranges, steps, lists and names, or a
/// descriptor (`@hourly`, `@every 1h`), optionally after `TZ=` / `CRON_TZ=`.
fn is_schedule(s: &str) -> bool {
    let s = s.trim();
    if MACROS.contains(&s) || s.starts_with("@every ") {
        return true;
    }
    let fields: Vec<&str> = s.split_whitespace().collect();
    fields.len() == 5
        && fields.iter().all(|f| {
            f.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '*' | '?' | '-' | '/' | ','))
        })
}
