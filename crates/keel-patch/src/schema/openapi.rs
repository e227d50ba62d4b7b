//! Merge rules read from the OpenAPI v3 schema of a CustomResourceDefinition.

use serde_json::Value;

use super::tree::{Definitions, Node};
use super::{ListStrategy, MergeSchema, object_meta_list};

/// The merge rules of a custom kind, from the OpenAPI v3 schema of its CRD version.
///
/// Lists follow `x-kubernetes-list-type` (`map` merges by `x-kubernetes-list-map-keys`, `set`
/// merges as a set, `atomic` or absent replaces); the `x-kubernetes-patch-strategy` /
/// `x-kubernetes-patch-merge-key` extensions of built-in OpenAPI documents are honoured too.
/// A missing list-map key takes its property's `default`. `metadata` follows the `ObjectMeta`
/// rules, at the root and in any `x-kubernetes-embedded-resource`. Kubernetes refuses strategic
/// patches on custom resources; accepting them with these rules (server-side apply's, for both
/// kinds of patch) is a keel extension.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenApiSchema {
    root: Node,
    /// None: a CRD's schema references nothing.
    definitions: Definitions,
}

impl OpenApiSchema {
    /// Wraps the `openAPIV3Schema` of a CRD version (the object with `type: object` and
    /// `properties`). Any JSON is accepted: what the schema does not describe replaces.
    pub fn new(open_api_v3_schema: Value) -> Self {
        Self {
            root: Node::standalone(&open_api_v3_schema),
            definitions: Definitions::default(),
        }
    }

    /// The field node at `path`, and the path lengths at which an object (with its own
    /// `metadata`) starts.
    fn resolve(&self, path: &[&str]) -> (Option<&Node>, Vec<usize>) {
        let mut object_roots = vec![0];
        let node = self
            .definitions
            .resolve(&self.root, path, Some(&mut object_roots));
        (node, object_roots)
    }

    fn node(&self, path: &[&str]) -> Option<&Node> {
        self.definitions.resolve(&self.root, path, None)
    }

    /// The part of `path` below an object's `metadata`, if `path` is inside one.
    fn in_meta<'p>(object_roots: &[usize], path: &'p [&'p str]) -> Option<&'p [&'p str]> {
        object_roots
            .iter()
            .rev()
            .find_map(|&start| match path.get(start..) {
                Some(["metadata", rest @ ..]) => Some(rest),
                _ => None,
            })
    }
}

impl MergeSchema for OpenApiSchema {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        let (node, object_roots) = self.resolve(path);
        if let Some(rest) = Self::in_meta(&object_roots, path) {
            return object_meta_list(rest).unwrap_or(ListStrategy::Replace);
        }
        node.map_or(ListStrategy::Replace, |node| {
            self.definitions.list_type(node)
        })
    }

    fn retain_keys(&self, path: &[&str]) -> bool {
        self.node(path)
            .is_some_and(|node| node.has_strategy("retainKeys"))
    }

    fn map_atomic(&self, path: &[&str]) -> bool {
        self.node(path)
            .is_some_and(|node| self.definitions.map_atomic(node))
    }

    /// An `ObjectMeta`'s `labels` and `annotations` are maps; elsewhere, what the schema
    /// says.
    fn keys_are_items(&self, path: &[&str]) -> bool {
        let (node, object_roots) = self.resolve(path);
        if let Some(rest) = Self::in_meta(&object_roots, path) {
            return matches!(rest, ["labels" | "annotations"]);
        }
        node.is_some_and(|node| self.definitions.keys_are_items(node))
    }

    fn merge_key_default(&self, path: &[&str], key: &str) -> Option<Value> {
        self.definitions.key_default(self.node(path)?, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn atomic_maps_are_those_the_schema_marks_so_as_items_too() {
        let s = OpenApiSchema::new(json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic"},
                "ports": {"type": "array", "items": {
                    "type": "object", "x-kubernetes-map-type": "atomic"}},
                "labels": {"type": "object", "x-kubernetes-map-type": "granular"},
            }}},
        }));
        assert!(s.map_atomic(&["spec", "selector"]));
        assert!(s.map_atomic(&["spec", "ports"]));
        assert!(!s.map_atomic(&["spec", "labels"]));
        assert!(!s.map_atomic(&["spec"]));
    }

    fn schema() -> OpenApiSchema {
        OpenApiSchema::new(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "backends": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["host", "port"],
                            "items": {
                                "type": "object",
                                "properties": {
                                    "host": {"type": "string"},
                                    "port": {"type": "integer", "default": 80},
                                    "tags": {"type": "array", "x-kubernetes-list-type": "set",
                                             "items": {"type": "string"}},
                                },
                            },
                        },
                        "args": {"type": "array", "items": {"type": "string"}},
                        "atomic": {"type": "array", "x-kubernetes-list-type": "atomic"},
                        "legacy": {"type": "array", "x-kubernetes-patch-strategy": "merge",
                                   "x-kubernetes-patch-merge-key": "name"},
                        "source": {"type": "object",
                                   "x-kubernetes-patch-strategy": "retainKeys"},
                        "byName": {"type": "object", "additionalProperties": {
                            "type": "object", "properties": {
                                "items": {"type": "array", "x-kubernetes-list-type": "set"}}}},
                        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                                     "properties": {}},
                    },
                },
            },
        }))
    }

    #[test]
    fn list_types_give_the_strategy() {
        let s = schema();
        assert_eq!(
            s.list_strategy(&["spec", "backends"]),
            ListStrategy::MergeByKeys(vec!["host".into(), "port".into()])
        );
        assert_eq!(
            s.list_strategy(&["spec", "backends", "tags"]),
            ListStrategy::Set
        );
        assert_eq!(s.list_strategy(&["spec", "args"]), ListStrategy::Replace);
        assert_eq!(s.list_strategy(&["spec", "atomic"]), ListStrategy::Replace);
        assert_eq!(
            s.list_strategy(&["spec", "legacy"]),
            ListStrategy::MergeByKeys(vec!["name".into()])
        );
        assert_eq!(
            s.list_strategy(&["spec", "byName", "anything", "items"]),
            ListStrategy::Set
        );
        assert_eq!(
            s.list_strategy(&["spec", "unknown", "deeper"]),
            ListStrategy::Replace
        );
        assert!(s.retain_keys(&["spec", "source"]));
        assert!(!s.retain_keys(&["spec", "backends"]));
        assert_eq!(
            s.merge_key_default(&["spec", "backends"], "port"),
            Some(json!(80))
        );
        assert_eq!(s.merge_key_default(&["spec", "backends"], "host"), None);
    }

    #[test]
    fn metadata_rules_apply_at_the_root_and_in_embedded_objects() {
        let s = schema();
        assert_eq!(
            s.list_strategy(&["metadata", "finalizers"]),
            ListStrategy::Set
        );
        assert_eq!(
            s.list_strategy(&["metadata", "ownerReferences"]),
            ListStrategy::MergeByKeys(vec!["uid".into()])
        );
        assert_eq!(
            s.list_strategy(&["spec", "template", "metadata", "finalizers"]),
            ListStrategy::Set
        );
        assert_eq!(
            s.list_strategy(&["spec", "metadata", "finalizers"]),
            ListStrategy::Replace
        );
        // Even an empty schema knows ObjectMeta.
        let empty = OpenApiSchema::new(json!({}));
        assert_eq!(
            empty.list_strategy(&["metadata", "initializers", "pending"]),
            ListStrategy::MergeByKeys(vec!["name".into()])
        );
    }
}
