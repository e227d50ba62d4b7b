//! One vocabulary for the metadata every object carries, whatever form the object is held in
//! (kube-core's `ResourceExt`): a type says where its `metadata` map is, and every reader of
//! names, owners, finalizers and initializers follows from that, with one meaning everywhere.
//!
//! Absent or mistyped fields read as absent: an empty string for the string fields, 0 for
//! `generation`, `None` or an empty list for the rest. Nothing here fails or allocates beyond
//! the lists it returns.

use serde_json::{Map, Value};

use crate::Object;

/// The metadata of a Kubernetes-shaped object. Implement [`Metadata::metadata`]; every other
/// method is provided.
///
/// Implemented for [`Object`] and for an object's JSON ([`serde_json::Value`]). What selectors
/// read ([`Selectable`](crate::Selectable)) an [`Object`] answers with these methods.
pub trait Metadata {
    /// `metadata`, if the object has one that is a JSON object.
    fn metadata(&self) -> Option<&Map<String, Value>>;

    /// `metadata.name` ("" when absent).
    fn name(&self) -> &str {
        meta_str(self.metadata(), "name")
    }

    /// `metadata.namespace` ("" when absent: a cluster-scoped object).
    fn namespace(&self) -> &str {
        meta_str(self.metadata(), "namespace")
    }

    /// `metadata.uid` ("" before the API server has created the object).
    fn uid(&self) -> &str {
        meta_str(self.metadata(), "uid")
    }

    /// `metadata.resourceVersion` ("" when absent).
    fn resource_version(&self) -> &str {
        meta_str(self.metadata(), "resourceVersion")
    }

    /// `metadata.generation` (0 when absent).
    fn generation(&self) -> i64 {
        field(self.metadata(), "generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    }

    /// `metadata.creationTimestamp`, as written (RFC 3339).
    fn creation_timestamp(&self) -> Option<&str> {
        field(self.metadata(), "creationTimestamp").and_then(Value::as_str)
    }

    /// `metadata.deletionTimestamp`, as written (RFC 3339); `None` when absent or null.
    fn deletion_timestamp(&self) -> Option<&str> {
        field(self.metadata(), "deletionTimestamp").and_then(Value::as_str)
    }

    /// Whether the object is being deleted: it has a `deletionTimestamp` (a null one is none).
    /// Only the API server sets it, always as a string.
    fn is_deleting(&self) -> bool {
        self.deletion_timestamp().is_some()
    }

    /// `metadata.labels`, if any.
    fn labels(&self) -> Option<&Map<String, Value>> {
        field(self.metadata(), "labels").and_then(Value::as_object)
    }

    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str> {
        self.labels()?.get(key)?.as_str()
    }

    /// `metadata.annotations`, if any.
    fn annotations(&self) -> Option<&Map<String, Value>> {
        field(self.metadata(), "annotations").and_then(Value::as_object)
    }

    /// The value of annotation `key`.
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations()?.get(key)?.as_str()
    }

    /// `metadata.finalizers`, in order.
    fn finalizers(&self) -> Vec<&str> {
        field(self.metadata(), "finalizers")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    /// Whether `metadata.finalizers` holds `name`.
    fn has_finalizer(&self, name: &str) -> bool {
        self.finalizers().contains(&name)
    }

    /// `metadata.ownerReferences`, each as written (`apiVersion`, `kind`, `name`, `uid`,
    /// `controller`, `blockOwnerDeletion`).
    fn owner_references(&self) -> &[Value] {
        field(self.metadata(), "ownerReferences")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The owner reference of the object's controller: the first with `controller: true`
    /// (Kubernetes' `GetControllerOf`).
    fn controller_ref(&self) -> Option<&Value> {
        self.owner_references()
            .iter()
            .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
    }

    /// The name of the object's controller (see [`Metadata::controller_ref`]).
    fn controller_owner(&self) -> Option<&str> {
        self.controller_ref()?.get("name")?.as_str()
    }

    /// The uid of the object's controller (see [`Metadata::controller_ref`]).
    fn controller_uid(&self) -> Option<&str> {
        self.controller_ref()?.get("uid")?.as_str()
    }

    /// The names in `metadata.initializers.pending`, in order: the initializers that still
    /// have to act, the first being the one to act now. An entry without a name has no name to
    /// give and is left out here, yet it still keeps the object uninitialized
    /// ([`Metadata::is_initialized`]); the API server never stores one.
    fn pending_initializers(&self) -> Vec<&str> {
        pending(self.metadata())
            .iter()
            .filter_map(|p| p.get("name").and_then(Value::as_str))
            .collect()
    }

    /// Whether the object is initialized: `metadata.initializers.pending` has no entry at all.
    /// As in Kubernetes, any entry counts as pending, named or not; an absent, null or empty
    /// list is none.
    fn is_initialized(&self) -> bool {
        pending(self.metadata()).is_empty()
    }
}

fn field<'a>(meta: Option<&'a Map<String, Value>>, key: &str) -> Option<&'a Value> {
    meta?.get(key)
}

fn meta_str<'a>(meta: Option<&'a Map<String, Value>>, key: &str) -> &'a str {
    field(meta, key).and_then(Value::as_str).unwrap_or("")
}

fn pending(meta: Option<&Map<String, Value>>) -> &[Value] {
    field(meta, "initializers")
        .and_then(|i| i.get("pending"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

impl Metadata for Object {
    fn metadata(&self) -> Option<&Map<String, Value>> {
        Object::metadata(self)
    }
}

/// A whole object's JSON (not its `metadata` alone).
impl Metadata for Value {
    fn metadata(&self) -> Option<&Map<String, Value>> {
        self.get("metadata").and_then(Value::as_object)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Metadata;
    use crate::Object;

    fn pod() -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "web-1", "namespace": "prod", "uid": "u-1", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web", "n": 1},
            "annotations": {"note": "hi"},
            "finalizers": ["a/b", 7, "c/d"],
            "ownerReferences": [
                {"kind": "Node", "name": "n1", "uid": "n-u"},
                {"kind": "ReplicaSet", "name": "web", "uid": "rs-u", "controller": true},
                {"kind": "ReplicaSet", "name": "other", "uid": "o-u", "controller": true},
            ],
        }})
    }

    #[test]
    fn reads_every_field_of_an_objects_json() {
        let p = pod();
        assert_eq!((p.name(), p.namespace(), p.uid()), ("web-1", "prod", "u-1"));
        assert_eq!((p.resource_version(), p.generation()), ("42", 3));
        assert_eq!(p.creation_timestamp(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(p.label("app"), Some("web"));
        assert_eq!(p.label("n"), None, "a label that is not a string is none");
        assert_eq!(p.labels().map(|l| l.len()), Some(2));
        assert_eq!(p.annotation("note"), Some("hi"));
        assert_eq!(p.annotation("other"), None);
        assert_eq!(p.finalizers(), ["a/b", "c/d"]);
        assert!(p.has_finalizer("c/d") && !p.has_finalizer("x"));
        assert_eq!(p.owner_references().len(), 3);
        assert!(!p.is_deleting());
        assert!(p.is_initialized());
    }

    #[test]
    fn the_controller_is_the_first_reference_marked_controller() {
        let p = pod();
        assert_eq!(p.controller_ref().unwrap()["kind"], "ReplicaSet");
        assert_eq!(p.controller_owner(), Some("web"));
        assert_eq!(p.controller_uid(), Some("rs-u"));
        let not_a_controller = json!({"metadata": {"ownerReferences": [
            {"name": "rs", "uid": "u", "controller": false},
            {"name": "rs2", "uid": "u2", "controller": "true"},
        ]}});
        assert!(not_a_controller.controller_ref().is_none());
        assert_eq!(not_a_controller.controller_owner(), None);
        assert_eq!(not_a_controller.controller_uid(), None);
    }

    #[test]
    fn absent_or_mistyped_metadata_reads_as_absent() {
        for o in [
            json!({}),
            json!({"metadata": null}),
            json!({"metadata": "x"}),
            json!([1]),
            json!({"metadata": {"name": 1, "generation": "3", "labels": [],
                "finalizers": "a", "ownerReferences": {}, "initializers": {"pending": "x"}}}),
        ] {
            assert_eq!((o.name(), o.namespace(), o.uid()), ("", "", ""), "{o}");
            assert_eq!((o.resource_version(), o.generation()), ("", 0), "{o}");
            assert!(o.labels().is_none() && o.annotations().is_none(), "{o}");
            assert!(o.finalizers().is_empty(), "{o}");
            assert!(o.owner_references().is_empty(), "{o}");
            assert!(o.controller_ref().is_none(), "{o}");
            assert!(o.pending_initializers().is_empty(), "{o}");
            assert!(o.is_initialized(), "{o}");
            assert!(!o.is_deleting(), "{o}");
        }
    }

    #[test]
    fn a_null_deletion_timestamp_is_not_a_deletion() {
        let null = json!({"metadata": {"deletionTimestamp": null}});
        assert_eq!(null.deletion_timestamp(), None);
        assert!(!null.is_deleting());
        let set = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert_eq!(set.deletion_timestamp(), Some("2026-01-01T00:00:00Z"));
        assert!(set.is_deleting());
    }

    #[test]
    fn any_pending_entry_leaves_the_object_uninitialized() {
        let with = |pending: serde_json::Value| json!({"metadata": {"initializers": {"pending": pending}}});
        let two = with(json!([{"name": "a.b.c"}, {"name": "d.e.f"}]));
        assert_eq!(two.pending_initializers(), ["a.b.c", "d.e.f"]);
        assert!(!two.is_initialized());
        // An entry without a name is still pending (Kubernetes: initialized only when
        // `pending` is empty); it has no name to list.
        let nameless = with(json!([{}]));
        assert!(!nameless.is_initialized());
        assert!(nameless.pending_initializers().is_empty());
        let nameless_head = with(json!([{"name": null}, {"name": "d.e.f"}]));
        assert!(!nameless_head.is_initialized());
        assert_eq!(nameless_head.pending_initializers(), ["d.e.f"]);
        assert!(with(json!([])).is_initialized());
        assert!(with(json!(null)).is_initialized());
        assert!(json!({"metadata": {"initializers": null}}).is_initialized());
    }

    #[test]
    fn an_object_reads_as_its_json_does() {
        let json = pod();
        let obj = Object::from_value(json.clone()).unwrap();
        assert_eq!(Metadata::name(&obj), json.name());
        assert_eq!(Metadata::namespace(&obj), json.namespace());
        assert_eq!(obj.uid(), json.uid());
        assert_eq!(obj.controller_ref(), json.controller_ref());
        assert_eq!(obj.finalizers(), json.finalizers());
        assert_eq!(obj.metadata(), json.metadata());
    }

    #[test]
    fn selectors_read_the_same_vocabulary() {
        use crate::Selectable;
        let p = Object::from_value(pod()).unwrap();
        assert_eq!(Selectable::controller_owner(&p), Some("web"));
        assert_eq!(Selectable::label(&p, "app"), Some("web"));
        assert_eq!(Selectable::namespace(&p), "prod");
        let nameless =
            Object::from_value(json!({"metadata": {"initializers": {"pending": [{}]}}})).unwrap();
        assert!(!Selectable::is_initialized(&nameless));
    }
}
