//! OpenAPI, as kubectl reads it: `/openapi/v3` lists a document per group version, each with
//! the resource paths and their operations (tagged with `x-kubernetes-group-version-kind`; a
//! PATCH that takes `fieldValidation` tells kubectl to let the server validate) and the schemas
//! keel has: a custom resource's `openAPIV3Schema`. `/openapi/v2` is `openapi_v2`'s.
//!
//! Built-in kinds have Kubernetes' schemas (`registry/builtin-openapi.json`, made by
//! `scripts/gen-builtin-openapi.py` from Kubernetes 1.32's own OpenAPI document: field names,
//! types, descriptions, required fields, and the extensions clients read list and map types
//! from: `x-kubernetes-list-type`, `-list-map-keys`, `-map-type`, `-patch-strategy`,
//! `-patch-merge-key`), for `kubectl explain` and for clients that merge or diff as server-side
//! apply does (Argo CD's server-side diff). Their PATCH operations declare no request body, so
//! kubectl computes strategic merge patches from its own compiled-in types (which carry the
//! same merge keys), as it does against any server that publishes no strategic-merge-patch
//! body for a kind.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use keel_api::ResourceInfo;
use serde_json::{Map, Value, json};

use crate::request::Handler;

/// The query parameters of a PATCH: `fieldValidation` among them.
fn patch_parameters() -> Value {
    let query = |name: &str, description: &str| {
        json!({"name": name, "in": "query", "description": description,
               "schema": {"type": "string", "uniqueItems": true}})
    };
    json!([
        query(
            "dryRun",
            "When present, indicates that modifications should not be persisted."
        ),
        query(
            "fieldManager",
            "A name associated with the actor or entity that is making these changes."
        ),
        query(
            "fieldValidation",
            "How the server handles unknown and duplicate fields: Ignore, Warn or Strict."
        ),
    ])
}

fn gvk_extension(r: &ResourceInfo) -> Value {
    json!({"group": r.gvr.group, "version": r.gvr.version, "kind": r.kind})
}

/// The schema's name in `components.schemas` (Kubernetes': the reversed group, then the
/// version and kind: `io.k8s.samplecrd.v1.Network`).
fn schema_name(r: &ResourceInfo) -> String {
    let group: Vec<&str> = r.gvr.group.split('.').rev().collect();
    let group = if r.gvr.group.is_empty() {
        "io.k8s.api.core".to_string()
    } else {
        group.join(".")
    };
    format!("{group}.{}.{}", r.gvr.version, r.kind)
}

fn operation(r: &ResourceInfo, action: &str, parameters: Value) -> Value {
    let name = Handler::builtin_schema_name(r).map_or_else(|| schema_name(r), str::to_string);
    let reference = json!({"$ref": format!("#/components/schemas/{name}")});
    json!({
        "description": format!("{action} {}", r.kind),
        "operationId": format!("{action}{}", r.kind),
        "parameters": parameters,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk_extension(r),
    })
}

/// The paths of one resource: its collection and its objects, in a namespace when namespaced.
fn paths(r: &ResourceInfo, out: &mut Map<String, Value>) {
    let prefix = if r.gvr.group.is_empty() {
        format!("/api/{}", r.gvr.version)
    } else {
        format!("/apis/{}/{}", r.gvr.group, r.gvr.version)
    };
    let scope = if r.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", r.gvr.resource)
    } else {
        format!("{prefix}/{}", r.gvr.resource)
    };
    out.insert(
        scope.clone(),
        json!({
            "get": operation(r, "list", json!([])),
            "post": operation(r, "post", patch_parameters()),
        }),
    );
    out.insert(
        format!("{scope}/{{name}}"),
        json!({
            "get": operation(r, "get", json!([])),
            "put": operation(r, "put", patch_parameters()),
            "patch": operation(r, "patch", patch_parameters()),
            "delete": operation(r, "delete", json!([])),
        }),
    );
}

/// A custom resource's schema `s`, with the fields every object has and its kind.
fn schema(mut s: Value, r: &ResourceInfo) -> Value {
    if let Some(props) = s.get_mut("properties").and_then(Value::as_object_mut) {
        props
            .entry("apiVersion")
            .or_insert_with(|| json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
        props
            .entry("kind")
            .or_insert_with(|| json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
        props.entry("metadata").or_insert_with(
            || json!({"type": "object", "description": "Standard object's metadata."}),
        );
    }
    s["x-kubernetes-group-version-kind"] = json!([gvk_extension(r)]);
    s
}

/// Adds the built-in schema `name` and every schema it references, once each.
fn add_builtin(name: &str, out: &mut Map<String, Value>) {
    let builtin = Handler::builtin_openapi();
    let mut todo = vec![name.to_string()];
    let mut seen = BTreeSet::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) || out.contains_key(&name) {
            continue;
        }
        let Some(s) = builtin["schemas"].get(&name) else {
            continue;
        };
        refs(s, &mut todo);
        out.insert(name, s.clone());
    }
}

/// The schema names `v` references.
fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str)
                && let Some(name) = r.strip_prefix("#/components/schemas/")
            {
                out.push(name.to_string());
            }
            m.values().for_each(|x| refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

/// The served resources by group version (`api/v1`, `apis/apps/v1`).
fn by_group_version(handler: &Handler) -> BTreeMap<String, Vec<std::sync::Arc<ResourceInfo>>> {
    let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
    // Reviews are left out: kubectl reads no schema of them.
    for r in handler.resources().into_iter().filter(|r| !r.create_only) {
        let key = if r.gvr.group.is_empty() {
            format!("api/{}", r.gvr.version)
        } else {
            format!("apis/{}/{}", r.gvr.group, r.gvr.version)
        };
        out.entry(key).or_default().push(r);
    }
    out
}

fn document(handler: &Handler, resources: &[std::sync::Arc<ResourceInfo>]) -> Value {
    let mut all_paths = Map::new();
    let mut schemas = Map::new();
    for r in resources {
        paths(r, &mut all_paths);
        if let Some(s) = handler.openapi_schema(&r.gvr) {
            schemas.insert(schema_name(r), schema(s, r));
        } else if let Some(name) = Handler::builtin_schema_name(r) {
            add_builtin(name, &mut schemas);
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": all_paths,
        "components": {"schemas": schemas},
    })
}

/// A hash of what a group version's document is made from: its resources, the CRD version
/// each custom one is served from, and the built-in schemas (this build's). It changes when the
/// document does (and, at worst, when a CRD changes without changing it), without building
/// every document for every request of the root.
fn hash(handler: &Handler, resources: &[std::sync::Arc<ResourceInfo>]) -> String {
    static BUILTIN: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        Handler::builtin_openapi().to_string().hash(&mut h);
        h.finish()
    });
    let mut h = std::collections::hash_map::DefaultHasher::new();
    BUILTIN.hash(&mut h);
    for r in resources {
        format!("{r:?}").hash(&mut h);
        handler.custom_version(&r.gvr).hash(&mut h);
    }
    format!("{:016X}", h.finish())
}

/// `/openapi/v3`: where each group version's document is; its hash changes with the document,
/// so that clients may cache it.
pub fn root(handler: &Handler) -> Value {
    let paths: Map<String, Value> = by_group_version(handler)
        .into_iter()
        .map(|(gv, resources)| {
            let url = format!("/openapi/v3/{gv}?hash={}", hash(handler, &resources));
            (gv, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// `/openapi/v3/{api/v1 | apis/group/version}`.
pub fn group_version(handler: &Handler, gv: &str) -> Option<Value> {
    by_group_version(handler)
        .get(gv.trim_matches('/'))
        .map(|resources| document(handler, resources))
}
