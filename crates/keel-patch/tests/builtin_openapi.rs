//! The built-in kinds' list and map types are those of Kubernetes' OpenAPI document: every
//! field of every kind, walked through the document the API server serves
//! (`services/apiserver/src/registry/builtin-openapi.json`, written by
//! `scripts/gen-builtin-openapi.py` from Kubernetes 1.32's), read here with the rules of
//! Kubernetes' own readers, and compared with what `BuiltinSchema` (which reads its own cut of
//! the document, `builtin-types.json`) answers to server-side apply and to strategic merge
//! patch.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use keel_patch::{BuiltinSchema, ListStrategy, MergeSchema};
use serde_json::Value;

fn document() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../services/apiserver/src/registry/builtin-openapi.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Kubernetes' document: `schemas` by name, fields of a named type written
/// `allOf: [{$ref: #/components/schemas/<name>}]`.
struct Doc {
    schemas: serde_json::Map<String, Value>,
}

impl Doc {
    /// The named type a field refers to, if it does.
    fn named<'a>(&'a self, field: &'a Value) -> Option<(&'a str, &'a Value)> {
        let reference = field["allOf"][0]["$ref"].as_str()?;
        let name = reference.strip_prefix("#/components/schemas/").unwrap();
        let (name, schema) = self.schemas.get_key_value(name).unwrap();
        Some((name.as_str(), schema))
    }

    /// The schema of a field's values: its named type, or itself.
    fn of<'a>(&'a self, field: &'a Value) -> &'a Value {
        self.named(field).map_or(field, |(_, s)| s)
    }

    /// The elements' schema of a list field, and their type's name.
    fn items<'a>(&'a self, field: &'a Value) -> Option<(Option<&'a str>, &'a Value)> {
        let items = self.of(field).get("items")?;
        Some(match self.named(items) {
            Some((name, s)) => (Some(name), s),
            None => (None, items),
        })
    }
}

/// Every field of a kind: its path as `MergeSchema` takes it (no segment for a list element,
/// `*` for a map key) and its schema node. A type already on the way down is not entered
/// again (`JSONSchemaProps` holds itself).
fn fields<'a>(
    doc: &'a Doc,
    schema: &'a Value,
    path: &mut Vec<String>,
    entered: &mut Vec<&'a str>,
    out: &mut Vec<(Vec<String>, &'a Value)>,
) {
    let (name, mut body) = match doc.named(schema) {
        Some((n, s)) => (Some(n), s),
        None => (None, schema),
    };
    if let Some(items) = body.get("items") {
        body = items;
        return fields(doc, body, path, entered, out);
    }
    if let Some(n) = name {
        if entered.contains(&n) {
            return;
        }
        entered.push(n);
    }
    if let Some(props) = body.get("properties").and_then(Value::as_object) {
        for (field, node) in props {
            path.push(field.clone());
            out.push((path.clone(), node));
            fields(doc, node, path, entered, out);
            path.pop();
        }
    } else if let Some(values) = body.get("additionalProperties").filter(|v| v.is_object()) {
        path.push("*".into());
        out.push((path.clone(), values));
        fields(doc, values, path, entered, out);
        path.pop();
    }
    if name.is_some() {
        entered.pop();
    }
}

fn text<'a>(node: &'a Value, extension: &str) -> Option<&'a str> {
    node.get(extension).and_then(Value::as_str)
}

fn strategies(node: &Value) -> Vec<&str> {
    text(node, "x-kubernetes-patch-strategy")
        .map(|s| s.split(',').collect())
        .unwrap_or_default()
}

fn map_keys(node: &Value) -> Vec<String> {
    node.get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|keys| {
            keys.iter()
                .map(|k| k.as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A list element's property's `default`.
fn key_default(doc: &Doc, node: &Value, key: &str) -> Option<Value> {
    let (_, items) = doc.items(node)?;
    doc.of(items)["properties"][key].get("default").cloned()
}

/// Server-side apply's list type, as kube-openapi's schemaconv reads it (docs/server-side-
/// apply.md §5.3): the list type, else a `merge` patch strategy (by its key, or a set), else
/// atomic.
fn apply_list(node: &Value) -> ListStrategy {
    match text(node, "x-kubernetes-list-type") {
        Some("map") => ListStrategy::MergeByKeys(map_keys(node)),
        Some("set") => ListStrategy::Set,
        Some("atomic") => ListStrategy::Replace,
        Some(other) => panic!("list type {other}"),
        None if strategies(node).contains(&"merge") => {
            match text(node, "x-kubernetes-patch-merge-key") {
                Some(key) => ListStrategy::MergeByKeys(vec![key.to_owned()]),
                None => ListStrategy::Set,
            }
        }
        None => ListStrategy::Replace,
    }
}

/// Strategic merge patch's list strategy, as Kubernetes' `strategicpatch` reads struct tags:
/// `merge` by the merge key (a set without one), anything else replaced. keel's departure
/// (DESIGN.md): list-map keys that add only defaulted keys to the merge key merge by all.
fn strategic_list(doc: &Doc, node: &Value) -> ListStrategy {
    if !strategies(node).contains(&"merge") {
        return ListStrategy::Replace;
    }
    let Some(key) = text(node, "x-kubernetes-patch-merge-key") else {
        return ListStrategy::Set;
    };
    let keys = map_keys(node);
    if text(node, "x-kubernetes-list-type") == Some("map")
        && keys.iter().any(|k| k == key)
        && keys
            .iter()
            .all(|k| k == key || key_default(doc, node, k).is_some())
    {
        ListStrategy::MergeByKeys(keys)
    } else {
        ListStrategy::MergeByKeys(vec![key.to_owned()])
    }
}

/// Kubernetes' converter makes RawExtension an untyped atomic value by its name.
const UNTYPED_ATOMIC: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";

/// Whether server-side apply owns the map at the field (or each element of the list) whole:
/// the field's own `x-kubernetes-map-type`, else its type's.
fn atomic(doc: &Doc, node: &Value) -> bool {
    let (own, name, of_type) = match doc.items(node) {
        Some((name, items)) => (items, name, doc.of(items)),
        None => (node, doc.named(node).map(|(n, _)| n), doc.of(node)),
    };
    match text(own, "x-kubernetes-map-type").or_else(|| text(of_type, "x-kubernetes-map-type")) {
        Some(t) => t == "atomic",
        None => name == Some(UNTYPED_ATOMIC),
    }
}

/// Whether server-side apply owns the keys of the object at the field (or of each element)
/// as items: a map (`additionalProperties`), not a struct (`properties`).
fn keys_are_items(doc: &Doc, node: &Value) -> bool {
    let value = match doc.items(node) {
        Some((_, items)) => doc.of(items),
        None => doc.of(node),
    };
    value.get("properties").is_none()
        && value
            .get("additionalProperties")
            .is_some_and(Value::is_object)
}

fn api_version(key: &str) -> (String, &str) {
    let (group, rest) = key.split_once('/').unwrap();
    let (version, kind) = rest.split_once('/').unwrap();
    let api_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    (api_version, kind)
}

/// What was compared, and where keel differs.
#[derive(Default)]
struct Checks {
    /// How many of each, to be sure the walk saw what it should.
    seen: BTreeMap<&'static str, usize>,
    mismatches: Vec<String>,
}

impl Checks {
    fn count(&mut self, what: &'static str) {
        *self.seen.entry(what).or_default() += 1;
    }

    fn check(&mut self, at: &str, what: &'static str, got: String, want: String) {
        self.count(what);
        if got != want {
            self.mismatches
                .push(format!("{at}: {what} {got}, Kubernetes' {want}"));
        }
    }
}

#[test]
fn every_field_of_every_kind_has_the_types_of_kubernetes_document() {
    let raw = document();
    let doc = Doc {
        schemas: raw["schemas"].as_object().unwrap().clone(),
    };
    let kinds = raw["kinds"].as_object().unwrap();
    assert_eq!(kinds.len(), 40);
    let mut c = Checks::default();
    for (key, name) in kinds {
        let (api_version, kind) = api_version(key);
        let schema = BuiltinSchema::for_kind(&api_version, kind)
            .unwrap_or_else(|| panic!("no schema for {api_version} {kind}"));
        let root = &doc.schemas[name.as_str().unwrap()];
        let mut all = Vec::new();
        fields(&doc, root, &mut Vec::new(), &mut Vec::new(), &mut all);
        for (path, node) in all {
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            let at = format!("{api_version} {kind} {}", path.join("."));
            let is_list = doc.of(node).get("items").is_some();
            if is_list {
                let apply = apply_list(node);
                let strategic = strategic_list(&doc, node);
                c.check(
                    &at,
                    "list (apply)",
                    format!("{:?}", schema.list_strategy(&path)),
                    format!("{apply:?}"),
                );
                c.check(
                    &at,
                    "list (strategic)",
                    format!("{:?}", schema.patch_strategy(&path)),
                    format!("{strategic:?}"),
                );
                if apply != ListStrategy::Replace {
                    c.count("non-atomic lists");
                }
                for strategy in [apply, strategic] {
                    if let ListStrategy::MergeByKeys(keys) = strategy {
                        for k in keys {
                            c.check(
                                &at,
                                "key default",
                                format!("{:?}", schema.merge_key_default(&path, &k)),
                                format!("{:?}", key_default(&doc, node, &k)),
                            );
                        }
                    }
                }
            } else {
                c.check(
                    &at,
                    "list (apply) of a non-list",
                    format!("{:?}", schema.list_strategy(&path)),
                    format!("{:?}", ListStrategy::Replace),
                );
            }
            let map_atomic = atomic(&doc, node);
            if map_atomic {
                c.count("atomic maps");
            }
            c.check(
                &at,
                "map atomic",
                schema.map_atomic(&path).to_string(),
                map_atomic.to_string(),
            );
            let items = keys_are_items(&doc, node);
            if items {
                c.count("maps");
            }
            c.check(
                &at,
                "keys are items",
                schema.keys_are_items(&path).to_string(),
                items.to_string(),
            );
            c.check(
                &at,
                "retainKeys",
                schema.retain_keys(&path).to_string(),
                strategies(node).contains(&"retainKeys").to_string(),
            );
            c.check(
                &at,
                "replace",
                schema.patch_replaces(&path).to_string(),
                strategies(node).contains(&"replace").to_string(),
            );
        }
    }
    assert!(
        c.mismatches.is_empty(),
        "{} mismatches:\n{}",
        c.mismatches.len(),
        c.mismatches.join("\n")
    );
    let seen = c.seen;
    // The walk reached what it must: thousands of fields, hundreds of keyed lists and atomic
    // maps (a walk that stopped at the kinds' roots would check nothing).
    assert!(seen["map atomic"] > 10_000, "{seen:?}");
    assert!(seen["non-atomic lists"] > 300, "{seen:?}");
    assert!(seen["atomic maps"] > 350, "{seen:?}");
    assert!(seen["key default"] > 500, "{seen:?}");
    assert!(seen["maps"] > 300, "{seen:?}");
}

#[test]
fn the_document_is_kubernetes_1_32_with_its_extensions() {
    let raw = document();
    let from = raw["generatedFrom"].as_str().unwrap();
    assert!(from.contains("release-1.32"), "{from}");
    let pod_spec = &raw["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"];
    let spread = &pod_spec["topologySpreadConstraints"];
    assert_eq!(spread["x-kubernetes-list-type"], "map");
    assert_eq!(
        spread["x-kubernetes-list-map-keys"],
        serde_json::json!(["topologyKey", "whenUnsatisfiable"])
    );
    assert_eq!(spread["x-kubernetes-patch-merge-key"], "topologyKey");
    assert_eq!(
        pod_spec["volumes"]["x-kubernetes-patch-strategy"],
        "merge,retainKeys"
    );
}

/// What is not in Kubernetes' document, kept by hand (the generator's HAND_KEPT).
#[test]
fn keels_own_types_are_kept_by_hand() {
    let keyed = |k: &str| ListStrategy::MergeByKeys(vec![k.to_owned()]);
    let pod = BuiltinSchema::for_kind("v1", "Pod").unwrap();
    let pending = ["metadata", "initializers", "pending"];
    assert_eq!(pod.list_strategy(&pending), keyed("name"));
    assert_eq!(pod.patch_strategy(&pending), keyed("name"));
    let deployment = BuiltinSchema::for_kind("apps/v1", "Deployment").unwrap();
    let template_pending = ["spec", "template", "metadata", "initializers", "pending"];
    assert_eq!(deployment.patch_strategy(&template_pending), keyed("name"));
    let ic = BuiltinSchema::for_kind(
        "admissionregistration.k8s.io/v1alpha1",
        "InitializerConfiguration",
    )
    .unwrap();
    assert_eq!(ic.patch_strategy(&["initializers"]), keyed("name"));
    assert_eq!(
        ic.list_strategy(&["metadata", "finalizers"]),
        ListStrategy::Set
    );
    let v1beta1 =
        BuiltinSchema::for_kind("apiextensions.k8s.io/v1beta1", "CustomResourceDefinition")
            .unwrap();
    let v1 =
        BuiltinSchema::for_kind("apiextensions.k8s.io/v1", "CustomResourceDefinition").unwrap();
    assert_eq!(v1beta1, v1);
}
