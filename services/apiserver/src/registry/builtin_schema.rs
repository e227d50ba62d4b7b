//! Kubernetes' OpenAPI v3 schemas of the built-in kinds (`builtin-openapi.json`, made by
//! `scripts/gen-builtin-openapi.py` from Kubernetes 1.32's OpenAPI document, extensions
//! included): what `/openapi/v3` and `/openapi/v2` publish, for `kubectl explain` and for
//! clients that read list and map types, and the fields `fieldValidation=Strict` accepts. The
//! same script writes keel-patch's cut of them (`BuiltinSchema`'s list and map types).

use std::sync::LazyLock;

use keel_api::ResourceInfo;
use serde_json::{Map, Value};

/// `kinds`: `group/version/Kind` → schema name; `schemas`: every schema by name, referencing
/// each other as `#/components/schemas/<name>`.
static DOCUMENT: LazyLock<Value> = LazyLock::new(|| {
    serde_json::from_str(include_str!("builtin-openapi.json")).unwrap_or_else(|e| {
        tracing::error!(error = %e, "builtin-openapi.json does not parse: built-in kinds have no schemas");
        Value::Null
    })
});

/// At most this many unknown fields are named in one error.
const MAX_NAMED: usize = 10;

/// The whole document.
pub fn document() -> &'static Value {
    &DOCUMENT
}

/// The schema name of a built-in kind, if Kubernetes publishes one.
pub fn schema_name(info: &ResourceInfo) -> Option<&'static str> {
    let key = format!("{}/{}/{}", info.gvr.group, info.gvr.version, info.kind);
    DOCUMENT["kinds"][&key].as_str()
}

/// `apps/v1` as the `kinds` keys write it (`/v1` for the core group).
fn group_version(api_version: &str) -> String {
    match api_version.rsplit_once('/') {
        Some((g, v)) => format!("{g}/{v}"),
        None => format!("/{api_version}"),
    }
}

/// The fields of `value` (an object of the kind, or a merge or strategic merge patch of one)
/// that its schema does not declare, named as Kubernetes names them (`spec.replica`,
/// `spec.template.spec.containers[0].imagee`); at most [`MAX_NAMED`]. Keys of a patch's
/// directives (`$patch`, `$setElementOrder/...`, `$retainKeys`, ...) are not fields, and a
/// null sets nothing (a patch removing a misspelt field is not refused). Empty for kinds
/// without a schema.
pub fn unknown_fields(info: &ResourceInfo, object: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(name) = schema_name(info) {
        walk_map(object, &DOCUMENT["schemas"][name], "", &mut out);
    }
    out
}

/// Drops the fields of `obj` (an object of the kind) that its schema does not declare, as
/// Kubernetes does when it decodes into its types; `metadata.initializers`, keel's (Kubernetes
/// 1.7-1.13 had it), stays. Nothing for kinds without a schema.
pub fn prune(info: &ResourceInfo, obj: &mut Map<String, Value>) {
    // The object may be in its stored version already (a v1 HorizontalPodAutoscaler as v2, an
    // events.k8s.io Event as a core one).
    let stored = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|v| {
            let group = v.rsplit_once('/').map_or("", |(g, _)| g);
            group == info.gvr.group || group == keel_api::conversion::storage_group(info)
        })
        .and_then(|v| DOCUMENT["kinds"][&format!("{}/{}", group_version(v), info.kind)].as_str());
    let Some(name) = stored.or_else(|| schema_name(info)) else {
        return;
    };
    let initializers = obj
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove("initializers"));
    prune_map(obj, &DOCUMENT["schemas"][name]);
    if let (Some(i), Some(Value::Object(m))) = (initializers, obj.get_mut("metadata")) {
        m.insert("initializers".into(), i);
    }
}

fn prune_value(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(m) => prune_map(m, schema),
        Value::Array(items) => {
            if let Some(s) = resolve(schema).get("items") {
                items.iter_mut().for_each(|v| prune_value(v, s));
            }
        }
        _ => {}
    }
}

fn prune_map(m: &mut Map<String, Value>, schema: &Value) {
    let schema = resolve(schema);
    if let Some(props) = schema["properties"].as_object() {
        m.retain(|k, v| props.get(k).map(|s| prune_value(v, s)).is_some());
    } else if let Some(values) = schema.get("additionalProperties") {
        m.values_mut().for_each(|v| prune_value(v, values));
    }
}

/// The schema a property's points to (`allOf: [{$ref}]` as Kubernetes writes references).
fn resolve(schema: &Value) -> &Value {
    let reference = schema["$ref"]
        .as_str()
        .or_else(|| schema["allOf"][0]["$ref"].as_str());
    match reference.and_then(|r| r.strip_prefix("#/components/schemas/")) {
        Some(name) => &DOCUMENT["schemas"][name],
        None => schema,
    }
}

fn walk(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(m) => walk_map(m, schema, path, out),
        Value::Array(items) => {
            if let Some(s) = resolve(schema).get("items") {
                for (i, v) in items.iter().enumerate() {
                    walk(v, s, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn walk_map(m: &Map<String, Value>, schema: &Value, path: &str, out: &mut Vec<String>) {
    let schema = resolve(schema);
    let field = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    if let Some(props) = schema["properties"].as_object() {
        for (k, v) in m {
            if out.len() >= MAX_NAMED {
                return;
            }
            if k.starts_with('$') || v.is_null() {
                continue;
            }
            match props.get(k) {
                Some(s) => walk(v, s, &field(k), out),
                None => out.push(field(k)),
            }
        }
    } else if let Some(values) = schema.get("additionalProperties") {
        for (k, v) in m {
            if !k.starts_with('$') {
                walk(v, values, &field(k), out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(group: &str, kind: &str) -> ResourceInfo {
        keel_api::builtin_resources()
            .into_iter()
            .find(|r| r.gvr.group == group && r.kind == kind)
            .unwrap_or_else(|| panic!("no built-in {kind}"))
    }

    #[test]
    fn every_builtin_kubernetes_kind_has_a_schema() {
        for r in keel_api::builtin_resources() {
            // keel's own InitializerConfiguration, and versions Kubernetes 1.32 no longer
            // serves (CRDs' v1beta1).
            if r.gvr.group.starts_with("admissionregistration") || r.gvr.version == "v1beta1" {
                continue;
            }
            assert!(schema_name(&r).is_some(), "{}/{}", r.gvr.group, r.kind);
        }
    }

    #[test]
    fn unknown_fields_are_named_with_their_paths() {
        let d = info("apps", "Deployment");
        let ok = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"any": "label"}},
            "spec": {"replicas": 1, "strategy": {"rollingUpdate": {"maxSurge": "25%"}},
                     "template": {"spec": {"containers": [{"name": "a", "image": "x",
                                  "resources": {"limits": {"cpu": "1"}}}]}}}});
        assert_eq!(
            unknown_fields(&d, ok.as_object().unwrap()),
            Vec::<String>::new()
        );
        let bad = json!({"spec": {"replica": 1, "template": {"spec": {"containers": [
            {"name": "a"}, {"name": "b", "imagee": "x"}]}}}, "extra": true});
        assert_eq!(
            unknown_fields(&d, bad.as_object().unwrap()),
            [
                "extra",
                "spec.replica",
                "spec.template.spec.containers[1].imagee"
            ]
        );
    }

    #[test]
    fn undeclared_fields_are_dropped_and_initializers_kept() {
        let mut obj = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "initializers": {"pending": [{"name": "x"}]}, "bogus": 1},
            "spec": {"replica": 3, "replicas": 2, "template": {"spec": {"containers": [
                {"name": "c", "image": "i", "imagee": "j"}]}}},
        });
        let Value::Object(map) = &mut obj else {
            unreachable!()
        };
        prune(&info("apps", "Deployment"), map);
        assert_eq!(
            obj,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "d", "initializers": {"pending": [{"name": "x"}]}},
                "spec": {"replicas": 2, "template": {"spec": {"containers": [
                    {"name": "c", "image": "i"}]}}},
            })
        );
        // ConfigMap data is a map: its keys are not fields.
        let mut cm = json!({"kind": "ConfigMap", "data": {"any key": "v"}, "dta": {}});
        let Value::Object(map) = &mut cm else {
            unreachable!()
        };
        prune(&info("", "ConfigMap"), map);
        assert_eq!(cm, json!({"kind": "ConfigMap", "data": {"any key": "v"}}));
    }

    #[test]
    fn patch_directives_are_not_fields() {
        let d = info("apps", "Deployment");
        let patch = json!({"spec": {"replica": null, "template": {"spec": {
            "$setElementOrder/containers": [{"name": "a"}],
            "containers": [{"name": "b", "$patch": "delete"}]}}}});
        assert_eq!(
            unknown_fields(&d, patch.as_object().unwrap()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn at_most_ten_are_named() {
        let cm = info("", "ConfigMap");
        let many: serde_json::Map<String, Value> =
            (0..50).map(|i| (format!("f{i}"), json!(1))).collect();
        assert_eq!(unknown_fields(&cm, &many).len(), MAX_NAMED);
    }
}
