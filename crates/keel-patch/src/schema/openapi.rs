//! Merge rules read from an OpenAPI schema: a CustomResourceDefinition's, and (through
//! [`Walk`], which follows `$ref`s) Kubernetes' document of the built-in kinds.

use serde_json::{Map, Value};

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
    root: Value,
}

/// The schema node of a field, and whether `metadata` at a position is an `ObjectMeta`.
pub(crate) struct Resolved<'s> {
    pub(crate) node: Option<&'s Value>,
    /// Path lengths at which an embedded object (with its own `metadata`) starts.
    object_roots: Vec<usize>,
}

/// How many `$ref`s in a row are followed before a node is taken as it is (a reference
/// circle in a malformed document).
const MAX_REFS: usize = 16;

/// A walk through an OpenAPI document by field path: `definitions` are where `$ref`s point
/// (`#/definitions/<name>`, `#/components/schemas/<name>`); a CRD's schema has none.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Walk<'d> {
    pub(crate) definitions: Option<&'d Map<String, Value>>,
}

impl<'d> Walk<'d> {
    /// The schema `node` stands for: its `$ref` (or `allOf` of one reference, as v3 documents
    /// write a field of a named type) followed. A field's own extensions stay on `node`.
    pub(crate) fn target(self, mut node: &'d Value) -> &'d Value {
        for _ in 0..MAX_REFS {
            let reference = node.get("$ref").or_else(|| match node.get("allOf") {
                Some(Value::Array(all)) if all.len() == 1 => all[0].get("$ref"),
                _ => None,
            });
            let Some(name) = reference
                .and_then(Value::as_str)
                .map(|r| r.rsplit_once('/').map_or(r, |(_, name)| name))
            else {
                return node;
            };
            match self.definitions.and_then(|d| d.get(name)) {
                Some(next) => node = next,
                None => return node,
            }
        }
        node
    }

    /// The schema of the elements when `node` is a list, else the schema `node` stands for:
    /// paths name no list positions.
    pub(crate) fn element(self, node: &'d Value) -> &'d Value {
        let target = self.target(node);
        match target.get("items") {
            Some(items) if items.is_object() => self.target(items),
            _ => target,
        }
    }

    /// The field node at `path` below `root` (its own extensions, its `$ref` unfollowed), and
    /// where embedded objects start. Entering a free-form map consumes a path segment.
    pub(crate) fn resolve(self, root: &'d Value, path: &[&str]) -> Resolved<'d> {
        let mut object_roots = vec![0];
        let mut node = Some(root);
        for (i, segment) in path.iter().enumerate() {
            let Some(current) = node.map(|n| self.element(n)) else {
                break;
            };
            node = current
                .get("properties")
                .and_then(|properties| properties.get(*segment))
                .or_else(|| {
                    current
                        .get("additionalProperties")
                        .filter(|v| v.is_object())
                });
            if let Some(next) = node
                && (is_embedded(next) || is_embedded(self.element(next)))
            {
                object_roots.push(i + 1);
            }
        }
        Resolved { node, object_roots }
    }

    /// Server-side apply's list type (kube-openapi's `schemaconv`): `x-kubernetes-list-type`
    /// (`map` keyed by `x-kubernetes-list-map-keys`, `set`, `atomic`); without one, a patch
    /// strategy of `merge` makes it keyed by the patch merge key, or a set without one;
    /// anything else is atomic.
    pub(crate) fn list_type(self, node: &Value) -> ListStrategy {
        match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("map") => {
                let keys = list_map_keys(node);
                if keys.is_empty() {
                    ListStrategy::Replace
                } else {
                    ListStrategy::MergeByKeys(keys)
                }
            }
            Some("set") => ListStrategy::Set,
            Some(_) => ListStrategy::Replace,
            None if has_patch_strategy(node, "merge") => match patch_merge_key(node) {
                Some(key) => ListStrategy::MergeByKeys(vec![key.to_owned()]),
                None => ListStrategy::Set,
            },
            None => ListStrategy::Replace,
        }
    }

    /// Strategic merge patch's strategy for a list: `x-kubernetes-patch-strategy: merge`
    /// merges by `x-kubernetes-patch-merge-key` (a set without one); any other list is
    /// replaced. keel's one departure: where the list-map keys are the merge key and keys
    /// with a default (a port's `protocol`, TCP), elements merge by all of them, so that
    /// 53/TCP and 53/UDP are two ports while a patch naming only the port still names the
    /// TCP one.
    pub(crate) fn patch_list(self, node: &'d Value) -> ListStrategy {
        if !has_patch_strategy(node, "merge") {
            return ListStrategy::Replace;
        }
        let Some(key) = patch_merge_key(node) else {
            return ListStrategy::Set;
        };
        let keys = list_map_keys(node);
        let widened = node.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map")
            && keys.iter().any(|k| k == key)
            && keys
                .iter()
                .all(|k| k == key || self.key_default(node, k).is_some());
        if widened {
            ListStrategy::MergeByKeys(keys)
        } else {
            ListStrategy::MergeByKeys(vec![key.to_owned()])
        }
    }

    /// Whether the map at `node`, or each element of the list at `node`, is atomic to
    /// server-side apply (`x-kubernetes-map-type: atomic`, from `+mapType` or `+structType`).
    /// A field's own extension overrides its type's (a PersistentVolume's `claimRef` is a
    /// granular `ObjectReference`).
    pub(crate) fn map_atomic(self, node: &'d Value) -> bool {
        let target = self.target(node);
        let (own, of_type) = match target.get("items") {
            Some(items) if items.is_object() => (items, self.target(items)),
            _ => (node, target),
        };
        map_type(own).or_else(|| map_type(of_type)) == Some("atomic")
    }

    /// The `default` of the property `key` of the elements of the list at `node`.
    pub(crate) fn key_default(self, node: &'d Value, key: &str) -> Option<Value> {
        self.element(node)
            .get("properties")?
            .get(key)?
            .get("default")
            .cloned()
    }
}

fn map_type(node: &Value) -> Option<&str> {
    node.get("x-kubernetes-map-type").and_then(Value::as_str)
}

fn is_embedded(node: &Value) -> bool {
    node.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true))
}

fn list_map_keys(node: &Value) -> Vec<String> {
    node.get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|keys| {
            keys.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn patch_merge_key(node: &Value) -> Option<&str> {
    node.get("x-kubernetes-patch-merge-key")
        .and_then(Value::as_str)
}

/// Whether `x-kubernetes-patch-strategy` (comma-separated: `merge,retainKeys`) names
/// `strategy`.
pub(crate) fn has_patch_strategy(node: &Value, strategy: &str) -> bool {
    node.get("x-kubernetes-patch-strategy")
        .and_then(Value::as_str)
        .unwrap_or("")
        .split(',')
        .any(|s| s.trim() == strategy)
}

impl OpenApiSchema {
    /// Wraps the `openAPIV3Schema` of a CRD version (the object with `type: object` and
    /// `properties`). Any JSON is accepted: what the schema does not describe replaces.
    pub fn new(open_api_v3_schema: Value) -> Self {
        Self {
            root: open_api_v3_schema,
        }
    }

    fn resolve(&self, path: &[&str]) -> Resolved<'_> {
        Walk::default().resolve(&self.root, path)
    }

    /// The ObjectMeta rule for `path`, if `path` is inside an object's `metadata`.
    fn meta_rule(resolved: &Resolved<'_>, path: &[&str]) -> Option<Option<ListStrategy>> {
        resolved
            .object_roots
            .iter()
            .rev()
            .find_map(|&start| match path.get(start..) {
                Some(["metadata", rest @ ..]) => Some(object_meta_list(rest)),
                _ => None,
            })
    }
}

impl OpenApiSchema {
    /// Whether the object at `path` inside an `ObjectMeta` is a map of items (`labels`,
    /// `annotations`); `None` when `path` is not inside one.
    fn meta_items(resolved: &Resolved<'_>, path: &[&str]) -> Option<bool> {
        resolved
            .object_roots
            .iter()
            .rev()
            .find_map(|&start| match path.get(start..) {
                Some(["metadata", rest @ ..]) => Some(matches!(rest, ["labels" | "annotations"])),
                _ => None,
            })
    }
}

impl MergeSchema for OpenApiSchema {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        let resolved = self.resolve(path);
        if let Some(rule) = Self::meta_rule(&resolved, path) {
            return rule.unwrap_or(ListStrategy::Replace);
        }
        match resolved.node {
            Some(node) => Walk::default().list_type(node),
            None => ListStrategy::Replace,
        }
    }

    fn retain_keys(&self, path: &[&str]) -> bool {
        self.resolve(path)
            .node
            .is_some_and(|node| has_patch_strategy(node, "retainKeys"))
    }

    fn map_atomic(&self, path: &[&str]) -> bool {
        self.resolve(path)
            .node
            .is_some_and(|node| Walk::default().map_atomic(node))
    }

    fn keys_are_items(&self, path: &[&str]) -> bool {
        let resolved = self.resolve(path);
        if let Some(rule) = Self::meta_items(&resolved, path) {
            return rule;
        }
        resolved
            .node
            .map(|n| Walk::default().element(n))
            .is_some_and(|node| {
                node.get("properties").is_none()
                    && (node
                        .get("additionalProperties")
                        .is_some_and(Value::is_object)
                        || node.get("x-kubernetes-preserve-unknown-fields")
                            == Some(&Value::Bool(true)))
            })
    }

    fn merge_key_default(&self, path: &[&str], key: &str) -> Option<Value> {
        let node = self.resolve(path).node?;
        Walk::default().key_default(node, key)
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
