//! `storage.k8s.io/v1` StorageClass: a provisioner, its reclaim policy and binding mode
//! defaulted, and what it provisions fixed once created.

use keel_api::{FieldCause, Object};
use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, set_default};

pub struct StorageClass {
    merge: Option<MergeKeys>,
}

impl StorageClass {
    pub fn new() -> Self {
        StorageClass {
            merge: builtin_merge_keys("storage.k8s.io/v1", "StorageClass"),
        }
    }
}

impl Kind for StorageClass {
    fn defaults(&self, obj: &mut Object) {
        let o = obj.as_map_mut();
        set_default(o, "reclaimPolicy", json!("Delete"));
        set_default(o, "volumeBindingMode", json!("Immediate"));
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        match obj.as_map().get("provisioner").and_then(Value::as_str) {
            Some(p) if !p.is_empty() => {}
            _ => causes.push(FieldCause::required("provisioner")),
        }
    }

    fn validate_update(&self, new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
        for field in [
            "parameters",
            "provisioner",
            "reclaimPolicy",
            "volumeBindingMode",
        ] {
            if new.as_map().get(field) != old.as_map().get(field) {
                causes.push(FieldCause::forbidden(
                    field,
                    format!("updates to {field} are forbidden."),
                ));
            }
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
