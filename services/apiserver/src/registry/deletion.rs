//! Deletion and finalizers: when an object is held back from removal, what a Delete does
//! (preconditions, propagation recorded as finalizers, `deletionTimestamp`, immediate removal
//! when nothing holds it), and Kubernetes' namespace rules on both.

use std::sync::Arc;
use std::time::SystemTime;

use keel_api::{ApiError, Object, ResourceInfo};
use serde_json::{Value, json};

use super::errors::forbidden;
use crate::storage::{Change, Mutation, RemovalPolicy, target};

/// How a delete treats dependents (recorded as finalizers for the garbage collector).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

impl Propagation {
    /// The finalizer that records the policy on the deleted object (none for `Background`).
    fn finalizer(self) -> Option<&'static str> {
        match self {
            Propagation::Foreground => Some("foregroundDeletion"),
            Propagation::Orphan => Some("orphan"),
            Propagation::Background => None,
        }
    }
}

/// What a Delete insists on and asks for.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// Precondition: the object's `uid` (empty: any).
    pub uid: String,
    /// Precondition: the object's `resourceVersion` as the client sent it (empty: any).
    pub resource_version: String,
    pub propagation: Propagation,
    /// Say what the delete would do, and do nothing (`dryRun=All`).
    pub dry_run: bool,
}

/// The finalizer in a Namespace's `spec.finalizers` that the namespace controller removes once
/// the namespace is empty (Kubernetes' `FinalizerKubernetes`).
pub const NAMESPACE_FINALIZER: &str = "kubernetes";

/// Namespaces that always exist and cannot be deleted (Kubernetes protects `default`,
/// `kube-system` and `kube-public`).
pub const PROTECTED_NAMESPACES: [&str; 2] = ["default", "keel-system"];

/// A Namespace's `spec.finalizers`.
fn spec_finalizers(obj: &Object) -> Vec<&str> {
    obj.as_map()
        .get("spec")
        .and_then(|s| s.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether finalizers hold the object back from removal: `metadata.finalizers`, and for a
/// Namespace also `spec.finalizers` (Kubernetes' `ShouldDeleteNamespaceDuringUpdate`).
pub fn has_finalizers(info: &ResourceInfo, obj: &Object) -> bool {
    !obj.finalizers().is_empty() || (info.kind == "Namespace" && !spec_finalizers(obj).is_empty())
}

/// Whether a Delete may proceed against the stored object; Kubernetes' namespace rules:
/// the built-in namespaces cannot be deleted, and a namespace already terminating answers a
/// second Delete with `Conflict` while its content is being removed.
pub fn check_delete(info: &ResourceInfo, stored: &Object) -> Result<(), ApiError> {
    if info.kind != "Namespace" {
        return Ok(());
    }
    let t = target(info, stored.name());
    if PROTECTED_NAMESPACES.contains(&stored.name()) {
        return Err(forbidden(t, "this namespace may not be deleted"));
    }
    if stored.deletion_timestamp().is_some() && !spec_finalizers(stored).is_empty() {
        return Err(ApiError::conflict(
            t,
            "The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system.",
        ));
    }
    Ok(())
}

/// What the first Delete of an object held by finalizers changes besides
/// `deletionTimestamp`: a Namespace's phase becomes `Terminating`.
pub fn prepare_for_deletion(info: &ResourceInfo, obj: &mut Object) {
    if info.kind == "Namespace" {
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
}

/// The registry's [`RemovalPolicy`]: a write removes an object once it is marked for deletion
/// and no finalizer holds it any more.
pub struct FinalizerRules;

impl RemovalPolicy for FinalizerRules {
    fn is_finished(&self, info: &ResourceInfo, obj: &Object) -> bool {
        obj.deletion_timestamp().is_some() && !has_finalizers(info, obj)
    }
}

/// The Delete of one object, as a mutation of its current state (so it goes through the same
/// guaranteed-update loop as every write): the preconditions and the namespace rules must
/// hold; an object held by finalizers (or by the finalizer its propagation policy adds) is
/// only marked with `deletionTimestamp` (a namespace becomes `Terminating`), any other is
/// removed. `expected_revision` is `opts.resource_version` parsed.
pub fn deletion(
    info: &Arc<ResourceInfo>,
    opts: DeleteOptions,
    expected_revision: Option<i64>,
) -> Mutation {
    let info = info.clone();
    Box::new(move |current: &Object| {
        let t = target(&info, current.name());
        if !opts.uid.is_empty() && current.uid() != opts.uid {
            return Err(ApiError::conflict(
                t,
                format!(
                    "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                    opts.uid,
                    current.uid()
                ),
            ));
        }
        if let Some(expected) = expected_revision
            && current.resource_version().parse::<i64>().ok() != Some(expected)
        {
            return Err(ApiError::conflict(
                t,
                format!(
                    "Precondition failed: ResourceVersion in precondition: {}, ResourceVersion in object meta: {}",
                    opts.resource_version,
                    current.resource_version()
                ),
            ));
        }
        check_delete(&info, current)?;
        let mut obj = current.clone();
        if let Some(f) = opts.propagation.finalizer()
            && current.deletion_timestamp().is_none()
            && !obj.finalizers().contains(&f)
        {
            let list = obj
                .metadata_mut()
                .entry("finalizers")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(a) = list {
                a.push(Value::String(f.into()));
            }
        }
        if !has_finalizers(&info, &obj) {
            return Ok(Change::Remove(obj));
        }
        if obj.deletion_timestamp().is_none() {
            let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
            let meta = obj.metadata_mut();
            meta.insert("deletionTimestamp".into(), Value::String(now));
            meta.insert("deletionGracePeriodSeconds".into(), Value::from(0));
            prepare_for_deletion(&info, &mut obj);
        }
        Ok(Change::Put(obj))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_api::Reason;

    fn info(kind: &str) -> Arc<ResourceInfo> {
        Arc::new(
            keel_api::builtin_resources()
                .into_iter()
                .find(|r| r.kind == kind)
                .unwrap(),
        )
    }

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn namespace_deletion_follows_kubernetes() {
        let i = info("Namespace");
        let e = check_delete(&i, &obj(json!({"metadata": {"name": "default"}}))).unwrap_err();
        assert_eq!(e.reason, Reason::Forbidden);
        assert_eq!(
            e.message,
            "namespaces \"default\" is forbidden: this namespace may not be deleted"
        );
        let mut ns = obj(
            json!({"metadata": {"name": "a"}, "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"}}),
        );
        check_delete(&i, &ns).unwrap();
        prepare_for_deletion(&i, &mut ns);
        assert_eq!(ns.as_map()["status"]["phase"], "Terminating");
        ns.set_meta_str("deletionTimestamp", "2026-01-01T00:00:00Z");
        let e = check_delete(&i, &ns).unwrap_err();
        assert_eq!(e.reason, Reason::Conflict);
        assert!(e.message.starts_with(
            "Operation cannot be fulfilled on namespaces \"a\": The system is ensuring all content is removed"
        ));
        check_delete(&info("ConfigMap"), &ns).unwrap();
    }

    fn delete(kind: &str, stored: &Object, opts: DeleteOptions) -> Result<Change, ApiError> {
        let expected = opts.resource_version.parse().ok();
        deletion(&info(kind), opts, expected)(stored)
    }

    #[test]
    fn an_object_nothing_holds_is_removed_as_it_is() {
        let stored = obj(json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "5"}}));
        let change = delete("ConfigMap", &stored, DeleteOptions::default()).unwrap();
        assert_eq!(change, Change::Remove(stored));
    }

    #[test]
    fn an_object_held_by_finalizers_is_only_marked() {
        let stored = obj(json!({"metadata": {"name": "a", "finalizers": ["x/y"]}}));
        let Change::Put(marked) = delete("ConfigMap", &stored, DeleteOptions::default()).unwrap()
        else {
            panic!("a held object must be kept")
        };
        assert!(marked.deletion_timestamp().is_some());
        assert_eq!(marked.as_map()["metadata"]["deletionGracePeriodSeconds"], 0);
        // Deleting it again changes nothing.
        assert_eq!(
            delete("ConfigMap", &marked, DeleteOptions::default()).unwrap(),
            Change::Put(marked.clone())
        );
        assert!(FinalizerRules.is_finished(&info("ConfigMap"), &{
            let mut done = marked;
            done.metadata_mut().remove("finalizers");
            done
        }));
    }

    #[test]
    fn propagation_policies_are_recorded_as_finalizers() {
        let stored = obj(json!({"metadata": {"name": "a"}}));
        let opts = DeleteOptions {
            propagation: Propagation::Foreground,
            ..DeleteOptions::default()
        };
        let Change::Put(marked) = delete("ConfigMap", &stored, opts).unwrap() else {
            panic!("foreground deletion must wait for the garbage collector")
        };
        assert_eq!(marked.finalizers(), ["foregroundDeletion"]);
    }

    #[test]
    fn preconditions_are_conflicts_worded_as_kubernetes() {
        let stored = obj(json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "5"}}));
        let e = delete(
            "ConfigMap",
            &stored,
            DeleteOptions {
                uid: "other".into(),
                ..DeleteOptions::default()
            },
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::Conflict);
        assert!(
            e.message.ends_with(
                "Precondition failed: UID in precondition: other, UID in object meta: u"
            )
        );
        let e = delete(
            "ConfigMap",
            &stored,
            DeleteOptions {
                resource_version: "4".into(),
                ..DeleteOptions::default()
            },
        )
        .unwrap_err();
        assert!(e.message.ends_with(
            "Precondition failed: ResourceVersion in precondition: 4, ResourceVersion in object meta: 5"
        ));
        assert!(
            delete(
                "ConfigMap",
                &stored,
                DeleteOptions {
                    uid: "u".into(),
                    resource_version: "5".into(),
                    ..DeleteOptions::default()
                },
            )
            .is_ok()
        );
    }
}
