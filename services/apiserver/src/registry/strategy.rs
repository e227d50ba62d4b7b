//! What the server does to an object on its way into storage, per kind: system fields on
//! create, immutable fields and the `status` subresource on update, defaults and validation.
//! Pure functions: no I/O, so every rule is unit-tested.

use std::time::SystemTime;

use keel_api::validation::{dns1123_label, dns1123_subdomain, label_key, label_value, object_meta};
use keel_api::{ApiError, FieldCause, Object, ResourceInfo, Target};
use serde_json::{Map, Value, json};

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object; `status` is ignored when the resource has a status subresource.
    Main,
    /// Only `status`; everything else is ignored.
    Status,
}

impl Subresource {
    pub fn parse(info: &ResourceInfo, s: &str, target: &Target) -> Result<Subresource, ApiError> {
        match s {
            "" => Ok(Subresource::Main),
            "status" if info.status_subresource => Ok(Subresource::Status),
            other => Err(ApiError::not_found(target.clone()).with_message(format!(
                "{} has no subresource {other:?}",
                info.qualified_name()
            ))),
        }
    }
}

trait WithMessage {
    fn with_message(self, m: String) -> Self;
}

impl WithMessage for ApiError {
    fn with_message(mut self, m: String) -> Self {
        self.message = m;
        self
    }
}

/// The target naming an object of this resource in errors: by resource, as Kubernetes does
/// (`deployments.apps "web" not found`).
pub fn target(info: &ResourceInfo, name: &str) -> Target {
    Target::new(&info.gvr.group, &info.gvr.resource, name)
}

/// The target of an `Invalid` error: by kind, as Kubernetes does
/// (`Deployment.apps "web" is invalid: ...`).
pub fn kind_target(info: &ResourceInfo, name: &str) -> Target {
    Target::new(&info.gvr.group, &info.kind, name)
}

/// Metadata fields only the server sets.
const SYSTEM_FIELDS: [&str; 6] = [
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "resourceVersion",
];

/// Parses a request body into an object of this resource: apiVersion and kind must match the
/// resource (they are filled in when absent).
pub fn decode(info: &ResourceInfo, bytes: &[u8]) -> Result<Object, ApiError> {
    let mut obj = parse_object(info, bytes)?;
    let want_av = info.api_version();
    let t = target(info, obj.name());
    let av = obj.api_version().to_string();
    if av.is_empty() {
        obj.as_map_mut()
            .insert("apiVersion".into(), Value::String(want_av.clone()));
    } else if av != want_av {
        return Err(ApiError::bad_request(
            t,
            format!(
                "the API version in the data ({av}) does not match the expected API version ({want_av})"
            ),
        ));
    }
    let kind = obj.kind().to_string();
    if kind.is_empty() {
        obj.as_map_mut()
            .insert("kind".into(), Value::String(info.kind.clone()));
    } else if kind != info.kind {
        return Err(ApiError::bad_request(
            t,
            format!(
                "the kind in the data ({kind}) does not match the resource {} (kind {})",
                info.qualified_name(),
                info.kind
            ),
        ));
    }
    Ok(obj)
}

/// Parses JSON bytes into an object, mapping every failure to a typed error naming the resource.
pub fn parse_object(info: &ResourceInfo, bytes: &[u8]) -> Result<Object, ApiError> {
    use keel_api::ObjectError;
    Object::from_slice(bytes).map_err(|e| {
        let t = target(info, "");
        match e {
            ObjectError::TooLarge { .. } => ApiError::too_large(t, e.to_string()),
            ObjectError::TooDeep => ApiError::bad_request(t, e.to_string()),
            _ => ApiError::bad_request(
                t,
                format!("the body is not a valid {} object: {e}", info.kind),
            ),
        }
    })
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Sets the system fields of a new object and its kind's defaults.
pub fn prepare_for_create(info: &ResourceInfo, obj: &mut Object) {
    let meta = obj.metadata_mut();
    for f in SYSTEM_FIELDS {
        meta.remove(f);
    }
    meta.insert(
        "uid".into(),
        Value::String(uuid::Uuid::new_v4().to_string()),
    );
    meta.insert("creationTimestamp".into(), Value::String(now()));
    meta.insert("generation".into(), json!(1));
    if !info.namespaced {
        meta.remove("namespace");
    }
    if info.status_subresource {
        let status = initial_status(&info.kind);
        obj.as_map_mut().insert("status".into(), status);
    }
    apply_defaults(info, obj);
}

fn initial_status(kind: &str) -> Value {
    match kind {
        "Pod" => json!({"phase": "Pending"}),
        "Namespace" => json!({"phase": "Active"}),
        _ => json!({}),
    }
}

fn apply_defaults(info: &ResourceInfo, obj: &mut Object) {
    if matches!(info.kind.as_str(), "Deployment" | "ReplicaSet")
        && let Some(spec) = obj
            .as_map_mut()
            .get_mut("spec")
            .and_then(Value::as_object_mut)
    {
        spec.entry("replicas").or_insert(json!(1));
    }
}

/// Everything of an object but `metadata` and `status`: what `generation` counts changes of.
fn spec_part(obj: &Object) -> Map<String, Value> {
    obj.as_map()
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Builds the object to store from the one a client sent (`new`) and the stored one (`old`):
/// the system fields stay the server's, name and namespace cannot change, `status` and the
/// rest are split by subresource, and `generation` moves when the spec does.
pub fn prepare_for_update(
    info: &ResourceInfo,
    mut new: Object,
    old: &Object,
    sub: Subresource,
) -> Result<Object, ApiError> {
    let t = target(info, old.name());
    if sub == Subresource::Status {
        let mut out = old.clone();
        match new.as_map_mut().remove("status") {
            Some(s) => out.as_map_mut().insert("status".into(), s),
            None => out.as_map_mut().remove("status"),
        };
        return Ok(out);
    }
    let mut causes = Vec::new();
    if new.name() != old.name() {
        causes.push(FieldCause::invalid(
            "metadata.name",
            new.name(),
            "field is immutable",
        ));
    }
    if info.namespaced && !new.namespace().is_empty() && new.namespace() != old.namespace() {
        causes.push(FieldCause::invalid(
            "metadata.namespace",
            new.namespace(),
            "field is immutable",
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(kind_target(info, &t.name), causes));
    }
    if !new.uid().is_empty() && new.uid() != old.uid() {
        return Err(ApiError::conflict(
            t,
            format!(
                "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                new.uid(),
                old.uid()
            ),
        ));
    }
    if old.deletion_timestamp().is_some() {
        let before = old.finalizers();
        let added: Vec<String> = new
            .finalizers()
            .into_iter()
            .filter(|f| !before.contains(f))
            .map(str::to_string)
            .collect();
        if !added.is_empty() {
            return Err(ApiError::invalid(
                kind_target(info, &t.name),
                vec![FieldCause::forbidden(
                    "metadata.finalizers",
                    format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    ),
                )],
            ));
        }
    }
    let old_meta = old.metadata().cloned().unwrap_or_default();
    {
        let meta = new.metadata_mut();
        for f in SYSTEM_FIELDS {
            match old_meta.get(f) {
                Some(v) => meta.insert(f.into(), v.clone()),
                None => meta.remove(f),
            };
        }
        if let Some(ns) = old_meta.get("namespace") {
            meta.insert("namespace".into(), ns.clone());
        }
    }
    if info.status_subresource {
        match old.as_map().get("status") {
            Some(s) => new.as_map_mut().insert("status".into(), s.clone()),
            None => new.as_map_mut().remove("status"),
        };
    }
    apply_defaults(info, &mut new);
    if spec_part(&new) != spec_part(old) {
        let generation = old.generation() + 1;
        new.metadata_mut()
            .insert("generation".into(), json!(generation));
    }
    Ok(new)
}

/// Validates a whole object of this resource: metadata, then the kind's own rules.
pub fn validate(info: &ResourceInfo, obj: &Object) -> Result<(), ApiError> {
    let name_check = if info.kind == "Namespace" {
        dns1123_label
    } else {
        dns1123_subdomain
    };
    let mut causes = object_meta(obj, info.namespaced, name_check);
    let root = obj.as_map();
    match info.kind.as_str() {
        "Pod" => pod_spec(root.get("spec"), "spec", &mut causes),
        "Deployment" | "ReplicaSet" => workload_spec(root.get("spec"), &mut causes),
        "ConfigMap" => config_map(root, &mut causes),
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(kind_target(info, obj.name()), causes))
    }
}

fn pod_spec(spec: Option<&Value>, path: &str, causes: &mut Vec<FieldCause>) {
    let Some(spec) = spec.and_then(Value::as_object) else {
        causes.push(FieldCause::required(path));
        return;
    };
    for list in ["initContainers", "containers"] {
        let field = format!("{path}.{list}");
        let containers = match spec.get(list) {
            None | Some(Value::Null) if list == "initContainers" => continue,
            None | Some(Value::Null) => {
                causes.push(FieldCause::required(field.clone()));
                continue;
            }
            Some(Value::Array(a)) => a,
            Some(_) => {
                causes.push(FieldCause::type_error(
                    field.clone(),
                    "a list of containers",
                ));
                continue;
            }
        };
        if containers.is_empty() && list == "containers" {
            causes.push(FieldCause::required(field.clone()));
        }
        let mut names = Vec::new();
        for (i, c) in containers.iter().enumerate() {
            let cpath = format!("{field}[{i}]");
            let Some(c) = c.as_object() else {
                causes.push(FieldCause::type_error(cpath, "a container object"));
                continue;
            };
            match c.get("name").and_then(Value::as_str) {
                None | Some("") => causes.push(FieldCause::required(format!("{cpath}.name"))),
                Some(n) => {
                    for e in dns1123_label(n) {
                        causes.push(FieldCause::invalid(format!("{cpath}.name"), n, e));
                    }
                    if names.contains(&n) {
                        causes.push(FieldCause::invalid(
                            format!("{cpath}.name"),
                            n,
                            "Duplicate value",
                        ));
                    }
                    names.push(n);
                }
            }
            match c.get("image") {
                Some(Value::String(s)) if !s.trim().is_empty() => {}
                _ => causes.push(FieldCause::required(format!("{cpath}.image"))),
            }
        }
    }
}

fn string_map_of(v: Option<&Value>) -> Option<Vec<(String, String)>> {
    v?.as_object().map(|m| {
        m.iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
            .collect()
    })
}

fn workload_spec(spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let Some(spec) = spec.and_then(Value::as_object) else {
        causes.push(FieldCause::required("spec"));
        return;
    };
    match spec.get("replicas") {
        None => {}
        Some(r) if r.as_i64().is_some_and(|n| n >= 0) => {}
        Some(r) => causes.push(FieldCause::invalid(
            "spec.replicas",
            &r.to_string(),
            "must be a non-negative integer",
        )),
    }
    let selector = spec.get("selector").and_then(Value::as_object);
    let match_labels = selector.and_then(|s| string_map_of(s.get("matchLabels")));
    let has_expressions = selector
        .and_then(|s| s.get("matchExpressions"))
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if match_labels.as_ref().is_none_or(|m| m.is_empty()) && !has_expressions {
        causes.push(FieldCause::required("spec.selector"));
    }
    for (k, v) in match_labels.iter().flatten() {
        if !label_key(k).is_empty() || !label_value(v).is_empty() {
            causes.push(FieldCause::invalid(
                "spec.selector.matchLabels",
                k,
                "invalid label",
            ));
        }
    }
    let template = spec.get("template").and_then(Value::as_object);
    let Some(template) = template else {
        causes.push(FieldCause::required("spec.template"));
        return;
    };
    let labels = template
        .get("metadata")
        .and_then(|m| string_map_of(m.get("labels")))
        .unwrap_or_default();
    if let Some(want) = &match_labels {
        let selected = want
            .iter()
            .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v));
        if !selected {
            causes.push(FieldCause::invalid(
                "spec.template.metadata.labels",
                &format!("{labels:?}"),
                "`selector` does not match template `labels`",
            ));
        }
    }
    pod_spec(template.get("spec"), "spec.template.spec", causes);
}

fn config_map(root: &Map<String, Value>, causes: &mut Vec<FieldCause>) {
    for field in ["data", "binaryData"] {
        match root.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    let key_ok = !k.is_empty()
                        && k.len() <= 253
                        && k.chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
                    if !key_ok {
                        causes.push(FieldCause::invalid(
                            field,
                            k,
                            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                        ));
                    }
                    if !v.is_string() {
                        causes.push(FieldCause::type_error(format!("{field}.{k}"), "a string"));
                    }
                }
            }
            Some(_) => causes.push(FieldCause::type_error(field, "a map of strings")),
        }
    }
}

/// The bytes stored in etcd: the object without `resourceVersion` (the key's revision is).
pub fn to_storage(obj: &Object) -> Vec<u8> {
    let mut o = obj.clone();
    o.set_resource_version("");
    o.to_vec()
}

/// An object read from etcd, with its `resourceVersion` set from the key's revision.
pub fn from_storage(info: &ResourceInfo, bytes: &[u8], revision: i64) -> Result<Object, ApiError> {
    let mut obj = Object::from_slice(bytes).map_err(|e| {
        ApiError::internal(format!(
            "stored {} is unreadable: {e}",
            info.qualified_name()
        ))
    })?;
    obj.set_resource_version(&revision.to_string());
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_api::Reason;

    fn info(kind: &str) -> ResourceInfo {
        keel_api::builtin_resources()
            .into_iter()
            .find(|r| r.kind == kind)
            .unwrap()
    }

    fn obj(v: Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn create_sets_system_fields_and_ignores_client_values() {
        let i = info("Pod");
        let mut o = obj(
            json!({"metadata": {"name": "p", "uid": "mine", "generation": 7, "resourceVersion": "9"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Running"}}),
        );
        prepare_for_create(&i, &mut o);
        assert_ne!(o.uid(), "mine");
        assert_eq!(o.generation(), 1);
        assert_eq!(o.resource_version(), "");
        assert_eq!(o.as_map()["status"], json!({"phase": "Pending"}));
    }

    #[test]
    fn main_update_keeps_status_and_bumps_generation_on_spec_change() {
        let i = info("Deployment");
        let old = obj(
            json!({"metadata": {"name": "d", "uid": "u", "generation": 3},
            "spec": {"replicas": 1}, "status": {"replicas": 1}}),
        );
        let new = obj(
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 2}, "status": {"replicas": 99}}),
        );
        let out = prepare_for_update(&i, new, &old, Subresource::Main).unwrap();
        assert_eq!(out.generation(), 4);
        assert_eq!(out.uid(), "u");
        assert_eq!(out.as_map()["status"], json!({"replicas": 1}));
        let same =
            obj(json!({"metadata": {"name": "d", "labels": {"a": "b"}}, "spec": {"replicas": 1}}));
        assert_eq!(
            prepare_for_update(&i, same, &old, Subresource::Main)
                .unwrap()
                .generation(),
            3
        );
    }

    #[test]
    fn status_update_changes_only_status() {
        let i = info("Deployment");
        let old = obj(json!({"metadata": {"name": "d", "generation": 1}, "spec": {"replicas": 1}}));
        let new = obj(
            json!({"metadata": {"name": "d", "labels": {"x": "y"}}, "spec": {"replicas": 5}, "status": {"replicas": 1}}),
        );
        let out = prepare_for_update(&i, new, &old, Subresource::Status).unwrap();
        assert_eq!(out.as_map()["spec"], json!({"replicas": 1}));
        assert_eq!(out.as_map()["status"], json!({"replicas": 1}));
        assert_eq!(out.label("x"), None);
    }

    #[test]
    fn renames_and_foreign_uids_are_refused() {
        let i = info("ConfigMap");
        let old = obj(json!({"metadata": {"name": "a", "uid": "u"}}));
        let e = prepare_for_update(
            &i,
            obj(json!({"metadata": {"name": "b"}})),
            &old,
            Subresource::Main,
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::Invalid);
        let e = prepare_for_update(
            &i,
            obj(json!({"metadata": {"name": "a", "uid": "v"}})),
            &old,
            Subresource::Main,
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::Conflict);
    }

    #[test]
    fn no_finalizer_may_be_added_while_deleting() {
        let i = info("ConfigMap");
        let old = obj(
            json!({"metadata": {"name": "a", "deletionTimestamp": "t", "finalizers": ["x/a"]}}),
        );
        let new = obj(json!({"metadata": {"name": "a", "finalizers": ["x/a", "x/b"]}}));
        assert!(prepare_for_update(&i, new, &old, Subresource::Main).is_err());
    }

    #[test]
    fn kinds_are_validated_with_field_paths() {
        let e = validate(
            &info("Pod"),
            &obj(json!({"metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "Bad"}]}})),
        )
        .unwrap_err();
        let fields: Vec<_> = e.causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.containers[0].name", "spec.containers[0].image"]
        );
        let e = validate(&info("Deployment"), &obj(json!({"metadata": {"name": "d", "namespace": "x"},
            "spec": {"selector": {"matchLabels": {"app": "a"}},
                     "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})))
        .unwrap_err();
        assert_eq!(e.causes[0].field, "spec.template.metadata.labels");
        assert!(
            validate(
                &info("ConfigMap"),
                &obj(json!({"metadata": {"name": "c", "namespace": "x"}, "data": {"k": 1}}))
            )
            .is_err()
        );
    }

    #[test]
    fn decode_refuses_a_foreign_kind() {
        let e = decode(
            &info("ConfigMap"),
            br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"}}"#,
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::BadRequest);
        let e = decode(
            &info("ConfigMap"),
            br#"{"apiVersion":"apps/v1","kind":"ConfigMap"}"#,
        )
        .unwrap_err();
        assert_eq!(e.reason, Reason::BadRequest);
        let o = decode(&info("ConfigMap"), br#"{"metadata":{"name":"x"}}"#).unwrap();
        assert_eq!(o.kind(), "ConfigMap");
    }
}
