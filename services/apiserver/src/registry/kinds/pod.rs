//! `v1` Pod: a pod spec with named containers and images, `Pending` at birth, evictable, and
//! its spec fixed once it is initialized (but for images, the active deadline and added
//! tolerations, as Kubernetes' pod update validation has it).

use keel_api::validation::dns1123_label;
use keel_api::{FieldCause, Metadata, Object};
use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys};
use crate::registry::initializers;

pub struct Pod {
    merge: Option<MergeKeys>,
}

impl Pod {
    pub fn new() -> Self {
        Pod {
            merge: builtin_merge_keys("v1", "Pod"),
        }
    }
}

impl Kind for Pod {
    /// Kubernetes' Pod fields but `spec.hostNetwork` (a missing boolean would compare as
    /// `""`, not Go's `false`).
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]
    }

    /// `eviction` is created only (`POST pods/NAME/eviction`, the request layer's `Evict`),
    /// never read or written as the others are.
    fn subresources(&self) -> &'static [&'static str] {
        &["eviction"]
    }

    fn initial_status(&self) -> Option<Value> {
        Some(json!({"phase": "Pending"}))
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        pod_spec(obj.as_map().get("spec"), "spec", causes);
    }

    /// While a Pod is uninitialized its initializers may change anything (that is their
    /// point); once it is initialized, its spec is fixed.
    fn prepare_for_update(&self, new: &mut Object, old: &Object, causes: &mut Vec<FieldCause>) {
        if old.is_initialized() {
            causes.extend(initializers::check_pod_spec_update(old, new));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}

/// A pod spec at `path`: containers (and init containers) each with a DNS-1123 label name,
/// unique, and an image.
pub(super) fn pod_spec(spec: Option<&Value>, path: &str, causes: &mut Vec<FieldCause>) {
    let Some(spec) = spec.and_then(Value::as_object) else {
        causes.push(FieldCause::required(path));
        return;
    };
    for list in ["initContainers", "containers"] {
        let field = format!("{path}.{list}");
        let containers = match spec.get(list) {
            None | Some(Value::Null) if list == "initContainers" => continue,
            None | Some(Value::Null) => {
                causes.push(FieldCause::required(field.clone()));
                continue;
            }
            Some(Value::Array(a)) => a,
            Some(_) => {
                causes.push(FieldCause::type_error(
                    field.clone(),
                    "a list of containers",
                ));
                continue;
            }
        };
        if containers.is_empty() && list == "containers" {
            causes.push(FieldCause::required(field.clone()));
        }
        let mut names = Vec::new();
        for (i, c) in containers.iter().enumerate() {
            let cpath = format!("{field}[{i}]");
            let Some(c) = c.as_object() else {
                causes.push(FieldCause::type_error(cpath, "a container object"));
                continue;
            };
            match c.get("name").and_then(Value::as_str) {
                None | Some("") => causes.push(FieldCause::required(format!("{cpath}.name"))),
                Some(n) => {
                    for e in dns1123_label(n) {
                        causes.push(FieldCause::invalid(format!("{cpath}.name"), n, e));
                    }
                    if names.contains(&n) {
                        causes.push(FieldCause::invalid(
                            format!("{cpath}.name"),
                            n,
                            "Duplicate value",
                        ));
                    }
                    names.push(n);
                }
            }
            match c.get("image") {
                Some(Value::String(s)) if !s.trim().is_empty() => {}
                _ => causes.push(FieldCause::required(format!("{cpath}.image"))),
            }
        }
    }
}
