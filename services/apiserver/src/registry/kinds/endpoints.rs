//! `v1` Endpoints: the addresses behind a service, its ports' protocol defaulted to TCP.

use keel_api::Object;
use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, items_mut, set_default};

pub struct Endpoints {
    merge: Option<MergeKeys>,
}

impl Endpoints {
    pub fn new() -> Self {
        Endpoints {
            merge: builtin_merge_keys("v1", "Endpoints"),
        }
    }
}

impl Kind for Endpoints {
    fn defaults(&self, obj: &mut Object) {
        for subset in obj
            .as_map_mut()
            .get_mut("subsets")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            for p in items_mut(subset, "ports") {
                set_default(p, "protocol", json!("TCP"));
            }
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
