//! `apps/v1` Deployment: a workload (replicas, selector, pod template, `scale`) with a rollout
//! strategy, defaulted and validated as Kubernetes' apps/v1 does.

use keel_api::{FieldCause, Object};
use serde_json::{Map, Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, pod, set_default, workload};

pub struct Deployment {
    merge: Option<MergeKeys>,
}

impl Deployment {
    pub fn new() -> Self {
        Deployment {
            merge: builtin_merge_keys("apps/v1", "Deployment"),
        }
    }
}

impl Kind for Deployment {
    fn subresources(&self) -> &'static [&'static str] {
        workload::SUBRESOURCES
    }

    fn scale(&self) -> Option<keel_api::scale::ScalePaths> {
        Some(keel_api::scale::ScalePaths::workload())
    }

    fn defaults(&self, obj: &mut Object) {
        workload::default_replicas(obj);
        pod::template_defaults(obj, &["spec", "template"]);
        if let Some(spec) = obj
            .as_map_mut()
            .get_mut("spec")
            .and_then(Value::as_object_mut)
        {
            deployment_defaults(spec);
        }
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        let spec = obj.as_map().get("spec");
        workload::workload_spec(spec, causes);
        deployment_spec(spec, causes);
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}

/// apps/v1 `SetDefaults_Deployment`: a RollingUpdate strategy of 25% surge and 25%
/// unavailable, 10 old ReplicaSets kept, a 600 s progress deadline. `minReadySeconds` stays
/// absent (0), as in Kubernetes.
fn deployment_defaults(spec: &mut Map<String, Value>) {
    let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
    if strategy.is_null() {
        *strategy = json!({});
    }
    if let Some(strategy) = strategy.as_object_mut() {
        let kind = strategy
            .entry("type")
            .or_insert_with(|| json!("RollingUpdate"));
        if kind.is_null() || kind == "" {
            *kind = json!("RollingUpdate");
        }
        if kind == "RollingUpdate" {
            let rolling = strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
            if rolling.is_null() {
                *rolling = json!({});
            }
            if let Some(rolling) = rolling.as_object_mut() {
                for field in ["maxUnavailable", "maxSurge"] {
                    set_default(rolling, field, json!("25%"));
                }
            }
        }
    }
    for (field, default) in [
        ("revisionHistoryLimit", 10),
        ("progressDeadlineSeconds", 600),
    ] {
        set_default(spec, field, json!(default));
    }
}

/// A Deployment's own fields (apps/v1 `ValidateDeploymentSpec`): the strategy, its
/// rolling-update bounds, and the non-negative counters.
fn deployment_spec(spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let Some(spec) = spec.and_then(Value::as_object) else {
        return;
    };
    for field in [
        "minReadySeconds",
        "revisionHistoryLimit",
        "progressDeadlineSeconds",
    ] {
        match spec.get(field) {
            None | Some(Value::Null) => {}
            Some(v) if v.as_i64().is_some_and(|n| n >= 0) => {}
            Some(v) => causes.push(FieldCause::invalid_value(
                format!("spec.{field}"),
                v,
                "must be greater than or equal to 0",
            )),
        }
    }
    if let (Some(deadline), min_ready) = (
        spec.get("progressDeadlineSeconds").and_then(Value::as_i64),
        spec.get("minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0),
    ) && deadline >= 0
        && deadline <= min_ready
    {
        causes.push(FieldCause::invalid_value(
            "spec.progressDeadlineSeconds",
            &Value::from(deadline),
            "must be greater than minReadySeconds",
        ));
    }
    let Some(strategy) = spec.get("strategy").filter(|s| !s.is_null()) else {
        return;
    };
    let Some(strategy) = strategy.as_object() else {
        causes.push(FieldCause::type_error("spec.strategy", "an object"));
        return;
    };
    let rolling = strategy.get("rollingUpdate").filter(|r| !r.is_null());
    match strategy.get("type").and_then(Value::as_str) {
        Some("Recreate") => {
            if rolling.is_some() {
                causes.push(FieldCause::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        Some("RollingUpdate") => match rolling.map(Value::as_object) {
            None => causes.push(FieldCause::required("spec.strategy.rollingUpdate")),
            Some(None) => causes.push(FieldCause::type_error(
                "spec.strategy.rollingUpdate",
                "an object",
            )),
            Some(Some(r)) => rolling_update(r, causes),
        },
        other => {
            let value = match (other, strategy.get("type")) {
                (Some(s), _) => s.to_string(),
                (None, Some(v)) => v.to_string(),
                (None, None) => String::new(),
            };
            causes.push(FieldCause::not_supported(
                "spec.strategy.type",
                &value,
                &["Recreate", "RollingUpdate"],
            ));
        }
    }
}

/// An int-or-percent field as Kubernetes reads it: `Some(n)` for an integer or an `"n%"`
/// string, `None` for anything else.
fn int_or_percent(v: &Value) -> Option<(i64, bool)> {
    match v {
        Value::Number(n) => n.as_i64().map(|n| (n, false)),
        Value::String(s) => {
            let digits = s.strip_suffix('%')?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse::<i64>().ok().map(|n| (n, true))
        }
        _ => None,
    }
}

/// `ValidateRollingUpdateDeployment`: each bound an integer >= 0 or a percentage, not both
/// zero, and at most 100% unavailable.
fn rolling_update(r: &Map<String, Value>, causes: &mut Vec<FieldCause>) {
    let mut values = [None, None];
    for (i, field) in ["maxUnavailable", "maxSurge"].into_iter().enumerate() {
        let path = format!("spec.strategy.rollingUpdate.{field}");
        let Some(v) = r.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        match int_or_percent(v) {
            Some((n, _)) if n < 0 => causes.push(FieldCause::invalid_value(
                path,
                v,
                "must be greater than or equal to 0",
            )),
            Some(parsed) => values[i] = Some(parsed),
            None if v.is_string() => causes.push(FieldCause::invalid(
                path,
                v.as_str().unwrap_or(""),
                "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
            )),
            None => causes.push(FieldCause::type_error(
                path,
                "an integer or a percentage string",
            )),
        }
    }
    let [unavailable, surge] = values;
    let zero = |v: Option<(i64, bool)>| v.is_some_and(|(n, _)| n == 0);
    if zero(unavailable) && zero(surge) {
        causes.push(FieldCause::invalid_value(
            "spec.strategy.rollingUpdate.maxUnavailable",
            r.get("maxUnavailable").unwrap_or(&Value::Null),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
    if let Some((n, true)) = unavailable
        && n > 100
    {
        causes.push(FieldCause::invalid(
            "spec.strategy.rollingUpdate.maxUnavailable",
            &format!("{n}%"),
            "must not be greater than 100%",
        ));
    }
}
