//! An OpenAPI schema compiled for lookups by field path: only what merging reads (the list,
//! map and patch extensions, a property's `default`, embedded resources), with each `$ref`
//! turned into the index of its definition, so that a lookup costs one hash per path segment.
//! Kubernetes' readers' rules over it: server-side apply's list and map types (kube-openapi's
//! `schemaconv`) and strategic merge patch's strategies (`strategicpatch`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use serde_json::{Map, Value};

use super::{ListStrategy, Properties};
use crate::Shared;

/// One schema node: a field, a list's elements or a map's values.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Node {
    /// The definition a `$ref` names (an `allOf` of one reference, as v3 documents write a
    /// field of a named type): where the path goes on. The node's own extensions stay here.
    reference: Option<u32>,
    properties: Properties<Arc<Node>>,
    /// Whether the schema declares `properties` (a struct), even none.
    declares_properties: bool,
    items: Option<Arc<Node>>,
    additional: Option<Arc<Node>>,
    /// `x-kubernetes-embedded-resource`: an object with its own `metadata`.
    embedded: bool,
    /// `x-kubernetes-preserve-unknown-fields`.
    preserve_unknown: bool,
    /// What few nodes have, apart: most nodes of a large schema have none of it.
    extensions: Option<Box<Extensions>>,
}

/// A node's list, map and patch extensions and its `default`.
#[derive(Debug, Clone, Default, PartialEq)]
struct Extensions {
    /// `x-kubernetes-list-type`.
    list_type: Option<String>,
    /// `x-kubernetes-list-map-keys`.
    list_map_keys: Vec<String>,
    /// `x-kubernetes-map-type`.
    map_type: Option<String>,
    /// `x-kubernetes-patch-merge-key`.
    merge_key: Option<String>,
    /// `x-kubernetes-patch-strategy`, split at its commas (`merge,retainKeys`).
    patch_strategies: Vec<String>,
    default: Option<Value>,
}

/// How many `$ref`s in a row are followed before a node is taken as it is (a reference
/// circle in a malformed document).
const MAX_REFS: usize = 16;

/// Schemas nested deeper are cut there (parsed JSON is at most 128 deep).
const MAX_NESTING: usize = 256;

/// Named definitions, and how to compile schemas that reference them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Definitions {
    nodes: Vec<Node>,
    by_name: HashMap<String, u32>,
}

impl Definitions {
    /// Compiles `definitions` (name → schema, referencing each other as `#/definitions/<name>`
    /// or `#/components/schemas/<name>`). A reference to a missing definition is dropped.
    pub(crate) fn compile(definitions: &Map<String, Value>) -> Self {
        let by_name: HashMap<String, u32> = definitions
            .keys()
            .zip(0..)
            .map(|(name, i)| (name.clone(), i))
            .collect();
        let nodes = definitions
            .values()
            .map(|schema| compile(schema, &by_name, 0))
            .collect();
        Self { nodes, by_name }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Node> {
        self.by_name
            .get(name)
            .and_then(|&i| self.nodes.get(i as usize))
    }

    /// The node `node` stands for: its references followed.
    pub(crate) fn target<'a>(&'a self, mut node: &'a Node) -> &'a Node {
        for _ in 0..MAX_REFS {
            match node.reference.and_then(|i| self.nodes.get(i as usize)) {
                Some(next) => node = next,
                None => return node,
            }
        }
        node
    }

    /// The elements' node when `node` is a list, else the node `node` stands for: paths name
    /// no list positions.
    pub(crate) fn element<'a>(&'a self, node: &'a Node) -> &'a Node {
        let target = self.target(node);
        match &target.items {
            Some(items) => self.target(items),
            None => target,
        }
    }

    /// The field node at `path` below `root` (its own extensions, its reference unfollowed);
    /// `None` where the schema says nothing. Entering a free-form map consumes a segment.
    /// `embedded` gets the path lengths at which an embedded resource starts.
    pub(crate) fn resolve<'a>(
        &'a self,
        root: &'a Node,
        path: &[&str],
        mut embedded: Option<&mut Vec<usize>>,
    ) -> Option<&'a Node> {
        let mut node = root;
        for (i, segment) in path.iter().enumerate() {
            let current = self.element(node);
            node = match current.properties.get(segment) {
                Some(field) => field,
                None => current.additional.as_deref()?,
            };
            if let Some(roots) = embedded.as_deref_mut()
                && (node.embedded || self.element(node).embedded)
            {
                roots.push(i + 1);
            }
        }
        Some(node)
    }

    /// Server-side apply's list type (kube-openapi's `schemaconv`): `x-kubernetes-list-type`
    /// (`map` keyed by `x-kubernetes-list-map-keys`, `set`, `atomic`); without one, a patch
    /// strategy of `merge` makes it keyed by the patch merge key, or a set without one;
    /// anything else is atomic.
    pub(crate) fn list_type(&self, node: &Node) -> ListStrategy {
        let ext = node.extensions();
        match ext.list_type.as_deref() {
            Some("map") if !ext.list_map_keys.is_empty() => {
                ListStrategy::MergeByKeys(ext.list_map_keys.clone())
            }
            Some("set") => ListStrategy::Set,
            Some(_) => ListStrategy::Replace,
            None if node.has_strategy("merge") => match &ext.merge_key {
                Some(key) => ListStrategy::MergeByKeys(vec![key.clone()]),
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
    pub(crate) fn patch_list(&self, node: &Node) -> ListStrategy {
        if !node.has_strategy("merge") {
            return ListStrategy::Replace;
        }
        let ext = node.extensions();
        let Some(key) = &ext.merge_key else {
            return ListStrategy::Set;
        };
        let keys = &ext.list_map_keys;
        let widened = ext.list_type.as_deref() == Some("map")
            && keys.contains(key)
            && keys
                .iter()
                .all(|k| k == key || self.key_default(node, k).is_some());
        if widened {
            ListStrategy::MergeByKeys(keys.clone())
        } else {
            ListStrategy::MergeByKeys(vec![key.clone()])
        }
    }

    /// Whether the map at `node`, or each element of the list at `node`, is atomic to
    /// server-side apply (`x-kubernetes-map-type: atomic`, from `+mapType` or `+structType`).
    /// A field's own extension overrides its type's (a PersistentVolume's `claimRef` is a
    /// granular `ObjectReference`).
    pub(crate) fn map_atomic<'a>(&'a self, node: &'a Node) -> bool {
        let target = self.target(node);
        let (own, of_type) = match &target.items {
            Some(items) => (&**items, self.target(items)),
            None => (node, target),
        };
        let map_type = |n: &'a Node| n.extensions().map_type.as_deref();
        map_type(own).or(map_type(of_type)) == Some("atomic")
    }

    /// Whether the object at `node` (or each element of the list at `node`) is a map whose
    /// keys are items (`additionalProperties`, or unknown fields preserved) rather than a
    /// struct of declared `properties`.
    pub(crate) fn keys_are_items(&self, node: &Node) -> bool {
        let element = self.element(node);
        !element.declares_properties && (element.additional.is_some() || element.preserve_unknown)
    }

    /// The `default` of the property `key` of the elements of the list at `node`.
    pub(crate) fn key_default(&self, node: &Node, key: &str) -> Option<Value> {
        self.element(node)
            .properties
            .get(key)?
            .extensions()
            .default
            .clone()
    }
}

impl Node {
    /// Compiles a schema that references no definitions (a CRD's).
    pub(crate) fn standalone(schema: &Value) -> Self {
        compile(schema, &HashMap::new(), 0)
    }

    /// What makes a node without references what it is ([`share`]): what merging reads of
    /// it, and its children's addresses.
    fn key(&self) -> Option<String> {
        let address = |n: &Arc<Node>| Arc::as_ptr(n) as usize;
        let ext = self.extensions();
        let properties: Vec<(&str, usize)> = self
            .properties
            .iter()
            .map(|(name, sub)| (name, address(sub)))
            .collect();
        let own = (
            self.declares_properties,
            self.embedded,
            self.preserve_unknown,
            (&ext.list_type, &ext.list_map_keys, &ext.map_type),
            (&ext.merge_key, &ext.patch_strategies, &ext.default),
        );
        let children = (
            properties,
            self.items.as_ref().map(address),
            self.additional.as_ref().map(address),
        );
        serde_json::to_string(&(own, children)).ok()
    }

    /// Whether `x-kubernetes-patch-strategy` names `strategy`.
    pub(crate) fn has_strategy(&self, strategy: &str) -> bool {
        self.extensions()
            .patch_strategies
            .iter()
            .any(|s| s == strategy)
    }

    fn extensions(&self) -> &Extensions {
        static NONE: Extensions = Extensions {
            list_type: None,
            list_map_keys: Vec::new(),
            map_type: None,
            merge_key: None,
            patch_strategies: Vec::new(),
            default: None,
        };
        self.extensions.as_deref().unwrap_or(&NONE)
    }
}

fn compile(schema: &Value, names: &HashMap<String, u32>, depth: usize) -> Node {
    let Value::Object(m) = schema else {
        return Node::default();
    };
    if depth > MAX_NESTING {
        return Node::default();
    }
    let text = |key: &str| m.get(key).and_then(Value::as_str).map(str::to_owned);
    let reference = m
        .get("$ref")
        .or_else(|| match m.get("allOf") {
            Some(Value::Array(all)) if all.len() == 1 => all[0].get("$ref"),
            _ => None,
        })
        .and_then(Value::as_str)
        .map(|r| r.rsplit_once('/').map_or(r, |(_, name)| name))
        .and_then(|name| names.get(name).copied());
    // Without definitions (a CRD's schema), equal subschemas are one node.
    let node = |schema: &Value| {
        let node = compile(schema, names, depth + 1);
        if names.is_empty() {
            share(node)
        } else {
            Arc::new(node)
        }
    };
    let child = |key: &str| m.get(key).filter(|v| v.is_object()).map(node);
    let extensions = Extensions {
        list_type: text("x-kubernetes-list-type"),
        list_map_keys: m
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|keys| {
                keys.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        map_type: text("x-kubernetes-map-type"),
        merge_key: text("x-kubernetes-patch-merge-key"),
        patch_strategies: text("x-kubernetes-patch-strategy")
            .map(|s| s.split(',').map(|s| s.trim().to_owned()).collect())
            .unwrap_or_default(),
        default: m.get("default").cloned(),
    };
    Node {
        reference,
        properties: m
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| {
                props
                    .iter()
                    .map(|(name, p)| (name.clone(), node(p)))
                    .collect()
            })
            .unwrap_or_default(),
        declares_properties: m.contains_key("properties"),
        items: child("items"),
        additional: child("additionalProperties"),
        embedded: m.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true)),
        preserve_unknown: m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)),
        extensions: (extensions != Extensions::default()).then(|| Box::new(extensions)),
    }
}

/// Compiled nodes of schemas without definitions (CRDs') shared by every schema that repeats
/// them (issue 45): a node is a function of what merging reads of it and of its children, so
/// equal subschemas, and those that differ only in what merging does not read (types, formats,
/// descriptions), compile to one. Keyed by that and the children's addresses ([`Node::key`]):
/// a live entry's node holds its children, so no address in a live key is reused.
static SHARED: LazyLock<Shared<Node>> = LazyLock::new(Shared::default);

/// `node`, or an equal node compiled before that is still in use.
fn share(node: Node) -> Arc<Node> {
    match node.key() {
        Some(key) => SHARED.share(key, node),
        None => Arc::new(node),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_crds_equal_subschemas_are_one_node_and_what_merging_reads_tells_them_apart() {
        let ports = |keys: &str| {
            json!({"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": [keys],
                "items": {"type": "object", "properties": {"port": {"type": "integer"}}}})
        };
        let schema = json!({"type": "object", "properties": {
            "a": ports("port"),
            "b": {"description": "the same, described", "maxItems": 3,
                "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
                "items": {"type": "object", "properties": {"port": {"type": "integer"}}}},
            "c": ports("name")}});
        let root = Node::standalone(&schema);
        let [a, b, c] = ["a", "b", "c"].map(|n| root.properties.get(n).unwrap());
        // What merging does not read (description, maxItems) does not make another node.
        assert!(Arc::ptr_eq(a, b));
        assert!(!Arc::ptr_eq(a, c), "other list-map keys are another node");
        assert!(Arc::ptr_eq(
            a.items.as_ref().unwrap(),
            c.items.as_ref().unwrap()
        ));
        // Definitions' nodes hold indexes into their own table: never shared.
        let defs = Definitions::compile(schema["properties"].as_object().unwrap());
        assert!(!Arc::ptr_eq(
            defs.get("a").unwrap().items.as_ref().unwrap(),
            a.items.as_ref().unwrap()
        ));
    }

    fn definitions() -> Definitions {
        let defs = json!({
            "Spec": {"properties": {
                "ref": {"$ref": "#/definitions/Ref", "x-kubernetes-map-type": "granular"},
                "refs": {"type": "array", "items": {"$ref": "#/definitions/Ref"},
                         "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name", "kind"],
                         "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
                "byName": {"additionalProperties": {"allOf": [{"$ref": "#/components/schemas/Ref"}]}},
                "loop": {"$ref": "#/definitions/Loop"},
                "dangling": {"$ref": "#/definitions/Nowhere", "x-kubernetes-list-type": "set"},
            }},
            "Ref": {"x-kubernetes-map-type": "atomic",
                    "properties": {"name": {"type": "string"}, "kind": {"default": "Pod"}}},
            "Loop": {"$ref": "#/definitions/Loop"},
        });
        Definitions::compile(defs.as_object().unwrap())
    }

    #[test]
    fn references_are_followed_and_a_fields_own_extensions_win() {
        let d = definitions();
        let spec = d.get("Spec").unwrap();
        let at = |path: &[&str]| d.resolve(spec, path, None);
        assert!(!d.map_atomic(at(&["ref"]).unwrap()));
        assert!(d.map_atomic(at(&["refs"]).unwrap()));
        assert!(d.map_atomic(at(&["byName", "any"]).unwrap()));
        assert!(at(&["byName", "any", "name"]).is_some());
        assert!(at(&["refs", "nope"]).is_none());
        // A reference circle ends; a reference to nothing is dropped, the node kept.
        assert!(at(&["loop", "x"]).is_none());
        assert_eq!(d.list_type(at(&["dangling"]).unwrap()), ListStrategy::Set);
    }

    #[test]
    fn apply_keys_by_list_map_keys_and_strategic_widens_by_defaulted_ones() {
        let d = definitions();
        let refs = d.resolve(d.get("Spec").unwrap(), &["refs"], None).unwrap();
        let keys =
            |k: &[&str]| ListStrategy::MergeByKeys(k.iter().map(|s| s.to_string()).collect());
        assert_eq!(d.list_type(refs), keys(&["name", "kind"]));
        assert_eq!(d.patch_list(refs), keys(&["name", "kind"]));
        assert_eq!(d.key_default(refs, "kind"), Some(json!("Pod")));
        assert_eq!(d.key_default(refs, "name"), None);
    }
}
