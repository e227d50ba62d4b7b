//! `batch/v1` Job: its selector generated from its uid, defaulted and validated as Kubernetes'
//! batch/v1 does; the controller-manager's `job` controller runs it.

use keel_api::{FieldCause, Metadata, Object};
use serde_json::{Map, Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, pod, set_default, spec_mut, workload};

/// The labels a generated selector matches on, legacy and current.
const UID_LABELS: [&str; 2] = ["batch.kubernetes.io/controller-uid", "controller-uid"];
const NAME_LABELS: [&str; 2] = ["batch.kubernetes.io/job-name", "job-name"];
pub(super) const RESTART_POLICIES: &[&str] = &["OnFailure", "Never"];

pub struct Job {
    merge: Option<MergeKeys>,
}

impl Job {
    pub fn new() -> Self {
        Job {
            merge: builtin_merge_keys("batch/v1", "Job"),
        }
    }
}

impl Kind for Job {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.successful"]
    }

    /// Unless `spec.manualSelector`, the Job selects its pods by its own uid (Kubernetes'
    /// `generateSelector`), and its template carries that label and its name.
    fn prepare_for_create(&self, obj: &mut Object) {
        let uid = obj.uid().to_string();
        let name = obj.name().to_string();
        let Some(spec) = spec_mut(obj) else { return };
        if spec.get("manualSelector") == Some(&json!(true)) {
            return;
        }
        let mut labels = Map::new();
        for l in UID_LABELS {
            labels.insert(l.into(), json!(uid));
        }
        for l in NAME_LABELS {
            labels.insert(l.into(), json!(name));
        }
        if spec.get("selector").is_none_or(Value::is_null) {
            spec.insert(
                "selector".into(),
                json!({"matchLabels": {UID_LABELS[0]: uid}}),
            );
        }
        let template = spec.entry("template").or_insert_with(|| json!({}));
        if let Some(t) = template.as_object_mut() {
            let meta = t.entry("metadata").or_insert_with(|| json!({}));
            if let Some(meta) = meta.as_object_mut() {
                let l = meta.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = l.as_object_mut() {
                    for (k, v) in labels {
                        l.entry(k).or_insert(v);
                    }
                }
            }
        }
    }

    /// `SetDefaults_Job`.
    fn defaults(&self, obj: &mut Object) {
        pod::template_defaults(obj, &["spec", "template"]);
        if let Some(spec) = spec_mut(obj) {
            job_spec_defaults(spec);
        }
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        let spec = obj.as_map().get("spec");
        workload::workload_spec(spec, causes);
        job_spec(spec, "spec", causes);
    }

    fn validate_update(&self, new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
        workload::selector_unchanged(new, old, causes);
        let field = |o: &Object, f: &str| o.as_map().get("spec").and_then(|s| s.get(f)).cloned();
        if field(new, "completionMode") != field(old, "completionMode") {
            causes.push(FieldCause::invalid(
                "spec.completionMode",
                &field(new, "completionMode")
                    .unwrap_or(Value::Null)
                    .to_string(),
                "field is immutable",
            ));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}

/// The defaults of a job spec, a Job's or a CronJob's job template's.
pub(super) fn job_spec_defaults(spec: &mut Map<String, Value>) {
    let unset = |s: &Map<String, Value>, f: &str| s.get(f).is_none_or(Value::is_null);
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    set_default(spec, "backoffLimit", json!(6));
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    let replacement = if unset(spec, "podFailurePolicy") {
        "TerminatingOrFailed"
    } else {
        "Failed"
    };
    set_default(spec, "podReplacementPolicy", json!(replacement));
}

/// A job spec's own rules at `path`: non-negative counts and a pod template that does not
/// restart `Always`.
pub(super) fn job_spec(spec: Option<&Value>, path: &str, causes: &mut Vec<FieldCause>) {
    let Some(spec) = spec.and_then(Value::as_object) else {
        return;
    };
    for f in [
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
    ] {
        match spec.get(f) {
            None | Some(Value::Null) => {}
            Some(v) if v.as_i64().is_some_and(|n| n >= 0) => {}
            Some(v) => causes.push(FieldCause::invalid_value(
                format!("{path}.{f}"),
                v,
                "must be greater than or equal to 0",
            )),
        }
    }
    let restart = spec
        .get("template")
        .and_then(|t| t.pointer("/spec/restartPolicy"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if !RESTART_POLICIES.contains(&restart) {
        causes.push(FieldCause::not_supported(
            format!("{path}.template.spec.restartPolicy"),
            restart,
            RESTART_POLICIES,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::kinds::testing::{info, kind};
    use crate::registry::strategy;

    #[test]
    fn a_job_selects_its_pods_by_its_uid_and_is_defaulted() {
        let mut job = Object::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "pi", "image": "perl:5.34"}]}}},
        }))
        .unwrap();
        strategy::prepare_for_create(&info("Job"), &*kind("Job"), &mut job);
        let uid = job.uid().to_string();
        let spec = &job.as_map()["spec"];
        assert_eq!(
            spec["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
        );
        let labels = &spec["template"]["metadata"]["labels"];
        assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
        assert_eq!(labels["controller-uid"], json!(uid));
        assert_eq!(
            (
                &spec["completions"],
                &spec["parallelism"],
                &spec["backoffLimit"]
            ),
            (&json!(1), &json!(1), &json!(6))
        );
        let mut causes = Vec::new();
        Job::new().validate(&job, &mut causes);
        assert!(causes.is_empty(), "{causes:?}");

        let mut always = job.clone();
        always.as_map_mut()["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        Job::new().validate(&always, &mut causes);
        assert_eq!(causes[0].field, "spec.template.spec.restartPolicy");
    }
}
