//! `policy/v1` PodDisruptionBudget: `minAvailable` or `maxUnavailable`, not both.

use keel_api::{FieldCause, Object};
use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys};

pub struct PodDisruptionBudget {
    merge: Option<MergeKeys>,
}

impl PodDisruptionBudget {
    pub fn new() -> Self {
        PodDisruptionBudget {
            merge: builtin_merge_keys("policy/v1", "PodDisruptionBudget"),
        }
    }
}

impl Kind for PodDisruptionBudget {
    fn initial_status(&self) -> Option<Value> {
        Some(
            json!({"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0}),
        )
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        let spec = obj.as_map().get("spec");
        let set = |f: &str| spec.and_then(|s| s.get(f)).is_some_and(|v| !v.is_null());
        if set("minAvailable") && set("maxUnavailable") {
            causes.push(FieldCause::invalid(
                "spec",
                "",
                "minAvailable and maxUnavailable cannot be both set",
            ));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
