//! `apps/v1` ControllerRevision: an immutable snapshot of a workload's state, stored as sent.

use keel_api::{FieldCause, Object};
use serde_json::Value;

use super::{Kind, MergeKeys, builtin_merge_keys};

pub struct ControllerRevision {
    merge: Option<MergeKeys>,
}

impl ControllerRevision {
    pub fn new() -> Self {
        ControllerRevision {
            merge: builtin_merge_keys("apps/v1", "ControllerRevision"),
        }
    }
}

impl Kind for ControllerRevision {
    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        if obj
            .as_map()
            .get("revision")
            .and_then(Value::as_i64)
            .is_none_or(|r| r < 0)
        {
            causes.push(FieldCause::required("revision"));
        }
    }

    fn validate_update(&self, new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
        if new.as_map().get("data") != old.as_map().get("data") {
            causes.push(FieldCause::forbidden("data", "field is immutable"));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
