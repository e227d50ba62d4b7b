//! `scheduling.k8s.io/v1` PriorityClass: a value fixed once set, its preemption policy
//! defaulted.

use keel_api::{FieldCause, Object};
use serde_json::json;

use super::{Kind, MergeKeys, builtin_merge_keys, set_default};

pub struct PriorityClass {
    merge: Option<MergeKeys>,
}

impl PriorityClass {
    pub fn new() -> Self {
        PriorityClass {
            merge: builtin_merge_keys("scheduling.k8s.io/v1", "PriorityClass"),
        }
    }
}

impl Kind for PriorityClass {
    fn defaults(&self, obj: &mut Object) {
        set_default(
            obj.as_map_mut(),
            "preemptionPolicy",
            json!("PreemptLowerPriority"),
        );
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        match obj.as_map().get("value") {
            Some(v) if v.is_i64() => {}
            _ => causes.push(FieldCause::required("value")),
        }
    }

    fn validate_update(&self, new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
        let (n, o) = (new.as_map().get("value"), old.as_map().get("value"));
        if n != o {
            causes.push(FieldCause::forbidden(
                "value",
                "may not be changed in an update.",
            ));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
