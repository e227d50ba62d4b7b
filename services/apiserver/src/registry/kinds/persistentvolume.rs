//! `v1` PersistentVolume: `Pending` at birth, its reclaim policy and volume mode defaulted.

use keel_api::Object;
use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, set_default, spec_mut};

pub struct PersistentVolume {
    merge: Option<MergeKeys>,
}

impl PersistentVolume {
    pub fn new() -> Self {
        PersistentVolume {
            merge: builtin_merge_keys("v1", "PersistentVolume"),
        }
    }
}

impl Kind for PersistentVolume {
    fn initial_status(&self) -> Option<Value> {
        Some(json!({"phase": "Pending"}))
    }

    fn defaults(&self, obj: &mut Object) {
        if let Some(spec) = spec_mut(obj) {
            set_default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
            set_default(spec, "volumeMode", json!("Filesystem"));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
