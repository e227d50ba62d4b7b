//! Merge rules read from an OpenAPI v3 schema, as a CustomResourceDefinition carries it.

use serde_json::Value;

use super::{ListStrategy, MergeSchema, object_meta_list};

/// The merge rules of a custom kind, from the OpenAPI v3 schema of its CRD version.
///
/// Lists follow `x-kubernetes-list-type` (`map` merges by `x-kubernetes-list-map-keys`, `set`
/// merges as a set, `atomic` or absent replaces); the `x-kubernetes-patch-strategy` /
/// `x-kubernetes-patch-merge-key` extensions of built-in OpenAPI documents are honoured too.
/// A missing list-map key takes its property's `default`. `metadata` follows the `ObjectMeta`
/// rules, at the root and in any `x-kubernetes-embedded-resource`. Kubernetes refuses strategic
/// patches on custom resources; accepting them with these rules is a keel extension.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenApiSchema {
    root: Value,
}

/// The schema node of a field, and whether `metadata` at a position is an `ObjectMeta`.
struct Resolved<'s> {
    node: Option<&'s Value>,
    /// Path lengths at which an embedded object (with its own `metadata`) starts.
    object_roots: Vec<usize>,
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
        let mut object_roots = vec![0];
        let mut node = Some(&self.root);
        for (i, segment) in path.iter().enumerate() {
            let Some(current) = node.map(element_schema) else {
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
                && (is_embedded(next) || is_embedded(element_schema(next)))
            {
                object_roots.push(i + 1);
            }
        }
        Resolved { node, object_roots }
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

/// Fields of a list's elements are reached through `items`: paths name no list positions.
fn element_schema(node: &Value) -> &Value {
    node.get("items")
        .filter(|items| items.is_object())
        .unwrap_or(node)
}

fn is_embedded(node: &Value) -> bool {
    node.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true))
}

fn patch_strategy(node: &Value) -> impl Iterator<Item = &str> {
    node.get("x-kubernetes-patch-strategy")
        .and_then(Value::as_str)
        .unwrap_or("")
        .split(',')
        .map(str::trim)
}

impl MergeSchema for OpenApiSchema {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        let resolved = self.resolve(path);
        if let Some(rule) = Self::meta_rule(&resolved, path) {
            return rule.unwrap_or(ListStrategy::Replace);
        }
        let Some(node) = resolved.node else {
            return ListStrategy::Replace;
        };
        match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("map") => {
                let keys: Vec<String> = node
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|keys| {
                        keys.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                if keys.is_empty() {
                    ListStrategy::Replace
                } else {
                    ListStrategy::MergeByKeys(keys)
                }
            }
            Some("set") => ListStrategy::Set,
            Some(_) => ListStrategy::Replace,
            None if patch_strategy(node).any(|s| s == "merge") => {
                match node
                    .get("x-kubernetes-patch-merge-key")
                    .and_then(Value::as_str)
                {
                    Some(key) => ListStrategy::MergeByKeys(vec![key.to_owned()]),
                    None => ListStrategy::Set,
                }
            }
            None => ListStrategy::Replace,
        }
    }

    fn retain_keys(&self, path: &[&str]) -> bool {
        self.resolve(path)
            .node
            .is_some_and(|node| patch_strategy(node).any(|s| s == "retainKeys"))
    }

    fn map_atomic(&self, path: &[&str]) -> bool {
        self.resolve(path).node.is_some_and(|node| {
            element_schema(node)
                .get("x-kubernetes-map-type")
                .and_then(Value::as_str)
                == Some("atomic")
        })
    }

    fn keys_are_items(&self, path: &[&str]) -> bool {
        let resolved = self.resolve(path);
        if let Some(rule) = Self::meta_items(&resolved, path) {
            return rule;
        }
        resolved.node.map(element_schema).is_some_and(|node| {
            node.get("properties").is_none()
                && (node
                    .get("additionalProperties")
                    .is_some_and(Value::is_object)
                    || node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)))
        })
    }

    fn merge_key_default(&self, path: &[&str], key: &str) -> Option<Value> {
        let node = self.resolve(path).node?;
        element_schema(node)
            .get("properties")?
            .get(key)?
            .get("default")
            .cloned()
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
