//! What server-side apply and strategic merge patch need to know about a kind: how each list
//! is keyed, which maps are atomic, which objects are unions.
//!
//! Kubernetes declares these twice, and the two families differ: server-side apply reads
//! `x-kubernetes-list-type`, `x-kubernetes-list-map-keys` and `x-kubernetes-map-type`
//! (container ports keyed by `containerPort` and `protocol`), strategic merge patch reads
//! `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key` (container ports merged by
//! `containerPort`). [`MergeSchema`] answers for each.

mod builtin;
mod openapi;
mod properties;
mod tree;

pub use builtin::BuiltinSchema;
pub use openapi::OpenApiSchema;
pub use properties::Properties;
use serde_json::Value;

/// How a list field merges, in a strategic merge patch or in server-side apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListStrategy {
    /// The patch's list replaces the whole list: Kubernetes' default (`atomic`).
    Replace,
    /// Elements are objects identified by the values of these fields; a patch element merges
    /// into the element with the same key, or is appended when there is none.
    MergeByKeys(Vec<String>),
    /// The list is a set of primitives: a patch adds the values that are missing, and
    /// `$deleteFromPrimitiveList/<field>` removes values.
    Set,
}

/// The merge rules of one kind, asked field by field.
///
/// A `path` is the field names from the object root to the field, e.g.
/// `["spec", "template", "spec", "containers"]`. Entering a list element adds no segment (the
/// fields of a container are under `[.., "containers", "env"]`), and entering a free-form map
/// (labels, data) adds the map key as a segment.
///
/// [`MergeSchema::list_strategy`], [`MergeSchema::map_atomic`] and
/// [`MergeSchema::keys_are_items`] are server-side apply's (`fieldpath`, `apply`); [`MergeSchema::patch_strategy`], [`MergeSchema::patch_replaces`]
/// and [`MergeSchema::retain_keys`] strategic merge patch's; [`MergeSchema::merge_key_default`]
/// both's.
pub trait MergeSchema {
    /// How server-side apply keys the list at `path` (`x-kubernetes-list-type`: `map` by its
    /// `x-kubernetes-list-map-keys`, `set`, `atomic`). Unknown fields are atomic, as in
    /// Kubernetes.
    fn list_strategy(&self, path: &[&str]) -> ListStrategy;

    /// How a strategic merge patch merges the list at `path` (Kubernetes'
    /// `x-kubernetes-patch-strategy: merge` and `x-kubernetes-patch-merge-key`); by default as
    /// server-side apply keys it.
    fn patch_strategy(&self, path: &[&str]) -> ListStrategy {
        self.list_strategy(path)
    }

    /// Whether a strategic merge patch replaces the map at `path` whole instead of merging
    /// into it (`x-kubernetes-patch-strategy: replace`: a PodDisruptionBudget's `selector`).
    fn patch_replaces(&self, _path: &[&str]) -> bool {
        false
    }

    /// Whether the map at `path` (or each element of the list of maps at `path`) is a union
    /// whose patches carry `$retainKeys`, so that setting one member clears the others
    /// (Kubernetes `patchStrategy: retainKeys`, e.g. a volume's source).
    fn retain_keys(&self, _path: &[&str]) -> bool {
        false
    }

    /// The value merge key `key` of the list at `path` takes when an element omits it (a
    /// container port's `protocol` is `"TCP"`), so that omitting it and spelling out the
    /// default name the same element.
    fn merge_key_default(&self, _path: &[&str], _key: &str) -> Option<Value> {
        None
    }

    /// Whether the map at `path` (or each element of the list of maps at `path`) is one value
    /// to server-side apply: owned, compared and replaced whole (Kubernetes'
    /// `+structType=atomic` and `+mapType=atomic`: a `LabelSelector`, an `OwnerReference`, a
    /// Service's `selector`). Strategic merge patches still merge it key by key.
    fn map_atomic(&self, _path: &[&str]) -> bool {
        false
    }

    /// Whether the object at `path` (or each element of the list of objects at `path`) is a
    /// map whose keys are its items (OpenAPI `additionalProperties`: labels, a map of
    /// settings), not a struct of declared fields (`properties`). Server-side apply owns a
    /// map's keys as items (an applier of `{"s1": {"value": "on"}}` owns `s1` itself, which
    /// therefore goes whole when it stops applying it) but not a struct's fields, which stay
    /// while anything below them is owned (structured-merge-diff's `FindField`). The default,
    /// structs everywhere, is what kinds whose maps hold only scalars need.
    fn keys_are_items(&self, _path: &[&str]) -> bool {
        false
    }

    /// Whether the kind's objects are Go structs in Kubernetes, where a `null` field is one
    /// left out: a map or list an apply's removal empties is then removed, where
    /// structured-merge-diff leaves it `null` (Kubernetes' typed objects drop it). A custom
    /// resource's stays `null`, for its schema to judge, as Kubernetes does.
    fn typed(&self) -> bool {
        false
    }
}

/// The rules of a kind with no schema (structured-merge-diff's deduced type): every list is
/// atomic and every map granular, but `ObjectMeta`'s lists are as every kind has them.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeducedSchema;

impl MergeSchema for DeducedSchema {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        match path {
            ["metadata", rest @ ..] => object_meta_list(rest).unwrap_or(ListStrategy::Replace),
            _ => ListStrategy::Replace,
        }
    }
}

/// The list rules of `ObjectMeta`, which every kind shares: `rest` is the path below
/// `metadata`.
pub(crate) fn object_meta_list(rest: &[&str]) -> Option<ListStrategy> {
    match rest {
        ["finalizers"] => Some(ListStrategy::Set),
        ["ownerReferences"] => Some(ListStrategy::MergeByKeys(vec!["uid".into()])),
        ["initializers", "pending"] => Some(ListStrategy::MergeByKeys(vec!["name".into()])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_meta_lists_are_known_and_nothing_else() {
        assert_eq!(object_meta_list(&["finalizers"]), Some(ListStrategy::Set));
        assert_eq!(
            object_meta_list(&["ownerReferences"]),
            Some(ListStrategy::MergeByKeys(vec!["uid".into()]))
        );
        assert_eq!(
            object_meta_list(&["initializers", "pending"]),
            Some(ListStrategy::MergeByKeys(vec!["name".into()]))
        );
        assert_eq!(object_meta_list(&["managedFields"]), None);
        assert_eq!(object_meta_list(&["labels", "finalizers"]), None);
    }
}
