//! `v1` PersistentVolumeClaim: `Pending` at birth, its volume mode defaulted. Stored and
//! served: nothing binds claims to volumes yet.

use keel_api::Object;
use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, set_default, spec_mut};

pub struct PersistentVolumeClaim {
    merge: Option<MergeKeys>,
}

impl PersistentVolumeClaim {
    pub fn new() -> Self {
        PersistentVolumeClaim {
            merge: builtin_merge_keys("v1", "PersistentVolumeClaim"),
        }
    }
}

impl Kind for PersistentVolumeClaim {
    fn initial_status(&self) -> Option<Value> {
        Some(json!({"phase": "Pending"}))
    }

    fn defaults(&self, obj: &mut Object) {
        if let Some(spec) = spec_mut(obj) {
            set_default(spec, "volumeMode", json!("Filesystem"));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
