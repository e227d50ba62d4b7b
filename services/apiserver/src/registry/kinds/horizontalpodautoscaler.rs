//! `autoscaling/v2` HorizontalPodAutoscaler: `minReplicas` defaulted to 1, at most
//! `maxReplicas`. Stored and served: nothing autoscales yet.

use keel_api::{FieldCause, Object};
use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, set_default, spec_mut};

pub struct HorizontalPodAutoscaler {
    merge: Option<MergeKeys>,
}

impl HorizontalPodAutoscaler {
    pub fn new() -> Self {
        HorizontalPodAutoscaler {
            merge: builtin_merge_keys("autoscaling/v2", "HorizontalPodAutoscaler"),
        }
    }
}

impl Kind for HorizontalPodAutoscaler {
    fn initial_status(&self) -> Option<Value> {
        Some(json!({"currentReplicas": 0, "desiredReplicas": 0}))
    }

    /// autoscaling/v2 `SetDefaults_HorizontalPodAutoscaler`: one replica at least, and a CPU
    /// utilization target of 80% when no metric is named.
    fn defaults(&self, obj: &mut Object) {
        if let Some(spec) = spec_mut(obj) {
            set_default(spec, "minReplicas", json!(1));
            if spec
                .get("metrics")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            {
                spec.insert(
                    "metrics".into(),
                    json!([{"type": "Resource", "resource": {"name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 80}}}]),
                );
            }
        }
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        let spec = obj.as_map().get("spec");
        let get = |f: &str| spec.and_then(|s| s.get(f)).and_then(Value::as_i64);
        match (get("minReplicas"), get("maxReplicas")) {
            (_, None) => causes.push(FieldCause::required("spec.maxReplicas")),
            (Some(min), Some(max)) if min > max => causes.push(FieldCause::invalid_value(
                "spec.maxReplicas",
                &Value::from(max),
                "must be greater than or equal to `minReplicas`",
            )),
            (Some(min), _) if min < 1 => causes.push(FieldCause::invalid_value(
                "spec.minReplicas",
                &Value::from(min),
                "must be greater than or equal to 1",
            )),
            _ => {}
        }
        if spec.and_then(|s| s.get("scaleTargetRef")).is_none() {
            causes.push(FieldCause::required("spec.scaleTargetRef"));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
