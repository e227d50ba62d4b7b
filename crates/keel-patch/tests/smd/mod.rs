//! What keel-patch's tests against structured-merge-diff share: one schema, as smd reads it
//! and as keel reads it, and keel's engine driven as the API server drives it
//! (`services/apiserver/src/registry/managed.rs`).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use keel_patch::OpenApiSchema;
use keel_patch::apply::{ApplyError, apply};
use keel_patch::fieldpath::{self, Set};
use keel_patch::managed::{self, Entry, Operation, Writer};
use serde_json::{Map, Value, json};

/// The one schema, as smd reads it. Every list type (atomic, set, keyed by one field and by
/// two with a defaulted key) and every map type (granular, atomic; structs and maps of
/// items), with lists and maps inside keyed items.
pub const SMD_SCHEMA: &str = r#"
types:
- name: root
  map:
    fields:
    - {name: mode, type: {scalar: string}}
    - {name: labels, type: {map: {elementType: {scalar: string}}}}
    - {name: selector, type: {map: {elementType: {scalar: string}, elementRelationship: atomic}}}
    - {name: settings, type: {map: {elementType: {namedType: setting}}}}
    - {name: tags, type: {list: {elementType: {scalar: string}, elementRelationship: associative}}}
    - {name: args, type: {list: {elementType: {scalar: string}, elementRelationship: atomic}}}
    - {name: spec, type: {namedType: spec}}
    - {name: items, type: {list: {elementType: {namedType: item}, elementRelationship: associative, keys: [name]}}}
    - {name: ports, type: {list: {elementType: {namedType: port}, elementRelationship: associative, keys: [port, protocol]}}}
- name: setting
  map:
    fields:
    - {name: value, type: {scalar: string}}
    - {name: priority, type: {scalar: numeric}}
- name: spec
  map:
    fields:
    - {name: paused, type: {scalar: boolean}}
    - {name: strategy, type: {namedType: strategy}}
- name: strategy
  map:
    fields:
    - {name: type, type: {scalar: string}}
    - {name: maxSurge, type: {scalar: numeric}}
- name: item
  map:
    fields:
    - {name: name, type: {scalar: string}}
    - {name: value, type: {scalar: string}}
    - {name: count, type: {scalar: numeric}}
    - {name: flags, type: {list: {elementType: {scalar: string}, elementRelationship: associative}}}
    - {name: env, type: {list: {elementType: {namedType: env}, elementRelationship: associative, keys: [name]}}}
    - {name: config, type: {map: {elementType: {scalar: string}}}}
    - {name: opts, type: {namedType: opts}}
    - {name: args, type: {list: {elementType: {scalar: string}, elementRelationship: atomic}}}
- name: env
  map:
    fields:
    - {name: name, type: {scalar: string}}
    - {name: value, type: {scalar: string}}
- name: opts
  map:
    elementRelationship: atomic
    fields:
    - {name: a, type: {scalar: string}}
    - {name: b, type: {scalar: string}}
- name: port
  map:
    fields:
    - {name: port, type: {scalar: numeric}}
    - {name: protocol, type: {scalar: string}, default: TCP}
    - {name: name, type: {scalar: string}}
    - {name: hosts, type: {list: {elementType: {scalar: string}, elementRelationship: associative}}}
"#;

/// [`SMD_SCHEMA`] as a CustomResourceDefinition's `openAPIV3Schema`, as keel reads it.
pub fn open_api() -> Value {
    let string = json!({"type": "string"});
    let set = json!({"type": "array", "x-kubernetes-list-type": "set", "items": string});
    let atomic_list = json!({"type": "array", "x-kubernetes-list-type": "atomic", "items": string});
    json!({
        "type": "object",
        "properties": {
            "mode": string,
            "labels": {"type": "object", "additionalProperties": string},
            "selector": {"type": "object", "additionalProperties": string,
                         "x-kubernetes-map-type": "atomic"},
            "settings": {"type": "object", "additionalProperties": {
                "type": "object", "properties": {
                    "value": string, "priority": {"type": "integer"}}}},
            "tags": set,
            "args": atomic_list,
            "spec": {"type": "object", "properties": {
                "paused": {"type": "boolean"},
                "strategy": {"type": "object", "properties": {
                    "type": string, "maxSurge": {"type": "integer"}}}}},
            "items": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "properties": {
                          "name": string, "value": string, "count": {"type": "integer"},
                          "flags": set,
                          "env": {"type": "array", "x-kubernetes-list-type": "map",
                                  "x-kubernetes-list-map-keys": ["name"],
                                  "items": {"type": "object", "properties": {
                                      "name": string, "value": string}}},
                          "config": {"type": "object", "additionalProperties": string},
                          "opts": {"type": "object", "x-kubernetes-map-type": "atomic",
                                   "properties": {"a": string, "b": string}},
                          "args": atomic_list}}},
            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["port", "protocol"],
                      "items": {"type": "object", "properties": {
                          "port": {"type": "integer"},
                          "protocol": {"type": "string", "default": "TCP"},
                          "name": string,
                          "hosts": set}}},
        },
    })
}

// ---------------------------------------------------------------------------------------
// keel's engine, driven as the API server drives it.

const NOW: &str = "2025-01-02T03:04:05Z";

pub struct Keel {
    schema: OpenApiSchema,
    /// `None`: no object yet.
    pub object: Option<Map<String, Value>>,
    pub entries: Vec<Entry>,
}

/// What an operation left, in a form both sides give.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Done {
        object: Value,
        /// (manager, operation) → FieldsV1.
        fields: BTreeMap<(String, String), String>,
    },
    Conflicts(Vec<(String, String, String)>),
    /// Where the refused result held nulls.
    Invalid(Vec<String>),
    Error(String),
}

fn writer(manager: &str, operation: Operation) -> Writer {
    Writer {
        manager: manager.into(),
        operation,
        api_version: "v1".into(),
        subresource: String::new(),
    }
}

impl Keel {
    pub fn new(schema: OpenApiSchema) -> Keel {
        Keel {
            schema,
            object: None,
            entries: Vec::new(),
        }
    }

    pub fn run(&mut self, op: &Value) -> Outcome {
        let object = op.get("object").cloned().unwrap_or(json!({}));
        let manager = op.get("manager").and_then(Value::as_str).unwrap_or("");
        let Value::Object(new) = object.clone() else {
            return Outcome::Error("not an object".into());
        };
        match op.get("op").and_then(Value::as_str) {
            Some("untracked") => {
                self.object = Some(new);
                self.entries.clear();
            }
            Some("update") => match &self.object {
                // A create: the manager owns everything (registry/managed.rs `record_create`).
                None => match fieldpath::changed_fields(&Map::new(), &new, &self.schema) {
                    Ok(fields) => {
                        self.entries = managed::record_update(
                            &[],
                            &writer(manager, Operation::Update),
                            &fields,
                            &Set::new(),
                            NOW,
                        );
                        self.object = Some(new);
                    }
                    Err(e) => return Outcome::Error(e.to_string()),
                },
                // An object nobody is recorded as owning stays untracked by updates.
                Some(_) if self.entries.is_empty() => self.object = Some(new),
                // registry/managed.rs `record_update`.
                Some(live) => match fieldpath::compare_fields(live, &new, &self.schema) {
                    Ok(diff) => {
                        let mut entries = managed::record_update(
                            &self.entries,
                            &writer(manager, Operation::Update),
                            &diff.changed,
                            &diff.removed,
                            NOW,
                        );
                        managed::cap_updates(&mut entries);
                        self.entries = entries;
                        self.object = Some(new);
                    }
                    Err(e) => return Outcome::Error(e.to_string()),
                },
            },
            Some("apply") => {
                // registry/managed.rs `apply`.
                let empty = Map::new();
                let live = self.object.as_ref().unwrap_or(&empty);
                let mut entries = self.entries.clone();
                if self.object.is_some()
                    && entries.is_empty()
                    && let Ok(fields) = fieldpath::field_set_of(live, &self.schema)
                {
                    entries.push(Entry {
                        manager: "before-first-apply".into(),
                        operation: Operation::Update,
                        api_version: "v1".into(),
                        time: None,
                        subresource: String::new(),
                        fields: Arc::new(fields),
                    });
                }
                let force = op.get("force").and_then(Value::as_bool).unwrap_or(false);
                let w = writer(manager, Operation::Apply);
                match apply(live, &object, &self.schema, &entries, &w, force, NOW) {
                    Ok(applied) => {
                        let Value::Object(o) = applied.object else {
                            return Outcome::Error("apply made no object".into());
                        };
                        let mut nulls = Vec::new();
                        for (k, v) in &o {
                            null_paths(v, &format!(".{k}"), &mut nulls);
                        }
                        if !nulls.is_empty() {
                            nulls.sort();
                            return Outcome::Invalid(nulls);
                        }
                        self.object = Some(o);
                        self.entries = applied.entries;
                    }
                    Err(ApplyError::Conflicts(found)) => {
                        let mut out = Vec::new();
                        for c in found {
                            // `"alice"`, or `"bob" using v1` for an Update.
                            let (name, rest) = c.manager[1..].split_once('"').unwrap_or(("", ""));
                            let operation = if rest.contains(" using ") {
                                "Update"
                            } else {
                                "Apply"
                            };
                            for p in c.paths {
                                out.push((name.to_string(), operation.to_string(), p.to_string()));
                            }
                        }
                        out.sort();
                        return Outcome::Conflicts(out);
                    }
                    Err(e) => return Outcome::Error(e.to_string()),
                }
            }
            other => return Outcome::Error(format!("unknown op {other:?}")),
        }
        self.outcome()
    }

    fn outcome(&self) -> Outcome {
        let fields = self
            .entries
            .iter()
            .filter(|e| !e.fields.is_empty())
            .map(|e| {
                (
                    (e.manager.clone(), e.operation.as_str().to_string()),
                    e.fields.to_fields_v1(),
                )
            })
            .collect();
        Outcome::Done {
            object: Value::Object(self.object.clone().unwrap_or_default()),
            fields,
        }
    }
}

/// Where `v` holds nulls: `.field`, and `[]` for a list's item.
pub fn null_paths(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::Null => out.push(at.to_string()),
        Value::Object(m) => {
            for (k, x) in m {
                null_paths(x, &format!("{at}.{k}"), out);
            }
        }
        Value::Array(items) => {
            for x in items {
                null_paths(x, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}
