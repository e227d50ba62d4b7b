//! Deletion and finalizers: when an object is held back from removal, what a Delete does
//! (preconditions, propagation recorded as finalizers, `deletionTimestamp`, immediate removal
//! when nothing holds it), and Kubernetes' namespace rules on both.

use std::sync::Arc;
use std::time::SystemTime;

use keel_api::{ApiError, Metadata, Object, ResourceInfo};
use serde_json::Value;

use super::kinds::Kind;
use crate::storage::{Draft, Mutation, target};

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

/// Whether finalizers hold the object back from removal: `metadata.finalizers`, and those
/// the kind keeps elsewhere (a Namespace's `spec.finalizers`).
pub fn has_finalizers(kind: &dyn Kind, obj: &Object) -> bool {
    !obj.finalizers().is_empty() || kind.held_by_own_finalizers(obj)
}

/// The Delete of one object, as a mutation of its current state (so it goes through the same
/// guaranteed-update loop as every write): the preconditions and the namespace rules must
/// hold; an object held by finalizers (or by the finalizer its propagation policy adds) is
/// only marked with `deletionTimestamp` (a namespace becomes `Terminating`), any other is
/// removed. `expected_revision` is `opts.resource_version` parsed.
pub fn deletion(
    info: &Arc<ResourceInfo>,
    kind: Arc<dyn Kind>,
    opts: DeleteOptions,
    expected_revision: Option<i64>,
) -> Mutation {
    let info = info.clone();
    Box::new(move |draft: &Draft| {
        let current = &draft.object;
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
        kind.check_delete(&t, current)?;
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
        if !has_finalizers(&*kind, &obj) {
            return Ok(draft.remove(obj));
        }
        if obj.deletion_timestamp().is_none() {
            let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
            let meta = obj.metadata_mut();
            meta.insert("deletionTimestamp".into(), Value::String(now));
            meta.insert("deletionGracePeriodSeconds".into(), Value::from(0));
            kind.prepare_for_deletion(&mut obj);
        }
        Ok(draft.put(obj))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::kinds::testing::{info, kind};
    use crate::registry::{RegistryRules, Resources};
    use crate::storage::{Change, WriteRules};
    use keel_api::Reason;
    use serde_json::json;

    fn check_delete(i: &ResourceInfo, stored: &Object) -> Result<(), ApiError> {
        kind(&i.kind).check_delete(&target(i, stored.name()), stored)
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
        kind("Namespace").prepare_for_deletion(&mut ns);
        assert_eq!(ns.as_map()["status"]["phase"], "Terminating");
        ns.set_meta_str("deletionTimestamp", "2026-01-01T00:00:00Z");
        let e = check_delete(&i, &ns).unwrap_err();
        assert_eq!(e.reason, Reason::Conflict);
        assert!(e.message.starts_with(
            "Operation cannot be fulfilled on namespaces \"a\": The system is ensuring all content is removed"
        ));
        check_delete(&info("ConfigMap"), &ns).unwrap();
    }

    fn delete(kind_name: &str, stored: &Object, opts: DeleteOptions) -> Result<Change, ApiError> {
        let expected = opts.resource_version.parse().ok();
        deletion(&info(kind_name), kind(kind_name), opts, expected)(&Draft::from_object(
            stored.clone(),
        ))
    }

    #[test]
    fn an_object_nothing_holds_is_removed_as_it_is() {
        let stored = obj(json!({"metadata": {"name": "a", "uid": "u", "resourceVersion": "5"}}));
        let change = delete("ConfigMap", &stored, DeleteOptions::default()).unwrap();
        assert_eq!(change, Change::Remove(Draft::from_object(stored)));
    }

    #[test]
    fn an_object_held_by_finalizers_is_only_marked() {
        let stored = obj(json!({"metadata": {"name": "a", "finalizers": ["x/y"]}}));
        let Change::Put(Draft { object: marked, .. }) =
            delete("ConfigMap", &stored, DeleteOptions::default()).unwrap()
        else {
            panic!("a held object must be kept")
        };
        assert!(marked.deletion_timestamp().is_some());
        assert_eq!(marked.as_map()["metadata"]["deletionGracePeriodSeconds"], 0);
        // Deleting it again changes nothing.
        assert_eq!(
            delete("ConfigMap", &marked, DeleteOptions::default()).unwrap(),
            Change::Put(Draft::from_object(marked.clone()))
        );
        let rules = RegistryRules(Arc::new(Resources::builtin()));
        assert!(rules.is_finished(&info("ConfigMap"), &{
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
        let Change::Put(Draft { object: marked, .. }) = delete("ConfigMap", &stored, opts).unwrap()
        else {
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
