//! `v1` ConfigMap: keys of `data` and `binaryData` as Kubernetes allows them, string values.

use keel_api::{FieldCause, Object};
use serde_json::{Map, Value};

use super::{Kind, MergeKeys, builtin_merge_keys};

pub struct ConfigMap {
    merge: Option<MergeKeys>,
}

impl ConfigMap {
    pub fn new() -> Self {
        ConfigMap {
            merge: builtin_merge_keys("v1", "ConfigMap"),
        }
    }
}

impl Kind for ConfigMap {
    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        for field in ["data", "binaryData"] {
            keys_and_strings(obj.as_map(), field, causes);
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}

/// `field` of `o`, if there, is a map of valid config keys to strings (a ConfigMap's `data`
/// and `binaryData`, a Secret's `data`).
pub(super) fn keys_and_strings(o: &Map<String, Value>, field: &str, causes: &mut Vec<FieldCause>) {
    match o.get(field) {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                // Kubernetes' `ValidateConfigMap`/`ValidateSecret`: at `data[<key>]`.
                for e in keel_api::validation::config_map_key(k) {
                    causes.push(FieldCause::invalid(format!("{field}[{k}]"), k, e));
                }
                if !v.is_string() {
                    causes.push(FieldCause::type_error(format!("{field}.{k}"), "a string"));
                }
            }
        }
        Some(_) => causes.push(FieldCause::type_error(field, "a map of strings")),
    }
}
