//! `v1` Namespace: held by the namespace controller's finalizer from birth, finalized through
//! its `finalize` subresource, `Terminating` while its content goes, and the built-in ones
//! never deleted (Kubernetes' namespace strategy and lifecycle).

use keel_api::validation::{dns1123_subdomain, label_value};
use keel_api::{ApiError, FieldCause, Metadata, Object, Target};
use serde_json::{Map, Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys};
use crate::registry::errors::forbidden;

/// The finalizer in a Namespace's `spec.finalizers` that the namespace controller removes once
/// the namespace is empty (Kubernetes' `FinalizerKubernetes`).
pub const NAMESPACE_FINALIZER: &str = "kubernetes";

/// Namespaces that always exist and cannot be deleted (Kubernetes protects `default`,
/// `kube-system` and `kube-public`).
pub const PROTECTED_NAMESPACES: [&str; 2] = ["default", "keel-system"];

pub struct Namespace {
    merge: Option<MergeKeys>,
}

impl Namespace {
    pub fn new() -> Self {
        Namespace {
            merge: builtin_merge_keys("v1", "Namespace"),
        }
    }
}

impl Kind for Namespace {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.phase"]
    }

    fn subresources(&self) -> &'static [&'static str] {
        &["finalize"]
    }

    fn initial_status(&self) -> Option<Value> {
        Some(json!({"phase": "Active"}))
    }

    /// As Kubernetes: every namespace starts held by the namespace controller, which lets it
    /// go once its content is gone.
    fn prepare_for_create(&self, obj: &mut Object) {
        let finalizers = spec_mut(obj)
            .entry("finalizers")
            .or_insert_with(|| json!([]));
        if !finalizers.is_array() {
            *finalizers = json!([]);
        }
        if let Value::Array(list) = finalizers
            && !list.iter().any(|f| f == NAMESPACE_FINALIZER)
        {
            list.push(json!(NAMESPACE_FINALIZER));
        }
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        validate_spec(obj.as_map().get("spec"), causes);
    }

    /// As Kubernetes: `spec.finalizers` changes only through `finalize`.
    fn prepare_for_update(&self, new: &mut Object, old: &Object, _causes: &mut Vec<FieldCause>) {
        copy_spec_finalizers(new, old);
    }

    /// Only `spec.finalizers` moves; removing the last finalizer of a namespace being deleted
    /// removes it (see `held_by_own_finalizers`).
    fn finalize(&self, out: &mut Object, new: &Object) {
        copy_spec_finalizers(out, new);
    }

    /// Kubernetes' `ShouldDeleteNamespaceDuringUpdate`: `spec.finalizers` hold it too.
    fn held_by_own_finalizers(&self, obj: &Object) -> bool {
        !spec_finalizers(obj).is_empty()
    }

    /// The built-in namespaces cannot be deleted, and a namespace already terminating answers
    /// a second Delete with `Conflict` while its content is being removed.
    fn check_delete(&self, t: &Target, stored: &Object) -> Result<(), ApiError> {
        if PROTECTED_NAMESPACES.contains(&stored.name()) {
            return Err(forbidden(t.clone(), "this namespace may not be deleted"));
        }
        if stored.deletion_timestamp().is_some() && !spec_finalizers(stored).is_empty() {
            return Err(ApiError::conflict(
                t.clone(),
                "The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system.",
            ));
        }
        Ok(())
    }

    /// Its phase becomes `Terminating`.
    fn prepare_for_deletion(&self, obj: &mut Object) {
        let status = obj
            .as_map_mut()
            .entry("status")
            .or_insert_with(|| json!({}));
        if !status.is_object() {
            *status = json!({});
        }
        if let Value::Object(s) = status {
            s.insert("phase".into(), json!("Terminating"));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}

/// A Namespace's `spec.finalizers`.
fn spec_finalizers(obj: &Object) -> Vec<&str> {
    obj.as_map()
        .get("spec")
        .and_then(|s| s.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `spec`, created empty when absent (or replaced when not an object).
fn spec_mut(obj: &mut Object) -> &mut Map<String, Value> {
    let spec = obj.as_map_mut().entry("spec").or_insert_with(|| json!({}));
    if !spec.is_object() {
        *spec = json!({});
    }
    match spec {
        Value::Object(m) => m,
        _ => unreachable!("spec was just made an object"),
    }
}

/// Sets `spec.finalizers` of `obj` to those of `from` (absent when `from` has none).
fn copy_spec_finalizers(obj: &mut Object, from: &Object) {
    let finalizers = from
        .as_map()
        .get("spec")
        .and_then(|s| s.get("finalizers"))
        .cloned();
    match finalizers {
        Some(f) => {
            spec_mut(obj).insert("finalizers".into(), f);
        }
        None => {
            if let Some(spec) = obj
                .as_map_mut()
                .get_mut("spec")
                .and_then(Value::as_object_mut)
            {
                spec.remove("finalizers");
            }
        }
    }
}

/// `spec.finalizers`: names, either qualified (`example.com/x`) or the standard `kubernetes`.
fn validate_spec(spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let Some(finalizers) = spec
        .and_then(|s| s.get("finalizers"))
        .filter(|f| !f.is_null())
    else {
        return;
    };
    let Some(list) = finalizers.as_array() else {
        causes.push(FieldCause::type_error(
            "spec.finalizers",
            "a list of strings",
        ));
        return;
    };
    for (i, f) in list.iter().enumerate() {
        let path = format!("spec.finalizers[{i}]");
        match f.as_str() {
            None => causes.push(FieldCause::type_error(path, "a string")),
            Some(name) if !name.contains('/') && name != NAMESPACE_FINALIZER => {
                causes.push(FieldCause::invalid(
                    path,
                    name,
                    "name is neither a standard finalizer name nor is it fully qualified",
                ))
            }
            Some(name) => {
                let (prefix, rest) = name.split_once('/').unwrap_or(("", name));
                if name.contains('/')
                    && (rest.is_empty()
                        || !dns1123_subdomain(prefix).is_empty()
                        || !label_value(rest).is_empty())
                {
                    causes.push(FieldCause::invalid(path, name, "not a qualified name"));
                }
            }
        }
    }
}
