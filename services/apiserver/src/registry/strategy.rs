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
    /// A Namespace's `finalize`: only `spec.finalizers`; everything else is ignored.
    Finalize,
}

impl Subresource {
    pub fn parse(info: &ResourceInfo, s: &str, target: &Target) -> Result<Subresource, ApiError> {
        match s {
            "" => Ok(Subresource::Main),
            "status" if info.status_subresource => Ok(Subresource::Status),
            "finalize" if info.kind == "Namespace" => Ok(Subresource::Finalize),
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

/// The finalizer in a Namespace's `spec.finalizers` that the namespace controller removes once
/// the namespace is empty (Kubernetes' `FinalizerKubernetes`).
pub const NAMESPACE_FINALIZER: &str = "kubernetes";

/// Namespaces that always exist and cannot be deleted (Kubernetes protects `default`,
/// `kube-system` and `kube-public`).
pub const PROTECTED_NAMESPACES: [&str; 2] = ["default", "keel-system"];

/// Kubernetes' `Forbidden` wording: `namespaces "default" is forbidden: <why>`.
fn forbidden(t: Target, why: &str) -> ApiError {
    let what = if t.group.is_empty() {
        t.kind.clone()
    } else {
        format!("{}.{}", t.kind, t.group)
    };
    let message = format!("{what} {:?} is forbidden: {why}", t.name);
    ApiError::new(keel_api::Reason::Forbidden, t, message)
}

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
    if info.kind == "Namespace" {
        // As Kubernetes: every namespace starts held by the namespace controller, which lets
        // it go once its content is gone.
        let finalizers = spec_mut(obj)
            .entry("finalizers")
            .or_insert_with(|| json!([]));
        if !finalizers.is_array() {
            *finalizers = json!([]);
        }
        if let Value::Array(list) = finalizers
            && !list.iter().any(|f| f == NAMESPACE_FINALIZER)
        {
            list.push(json!(NAMESPACE_FINALIZER));
        }
    }
    apply_defaults(info, obj);
}

/// `spec`, created empty when absent (or replaced when not an object).
fn spec_mut(obj: &mut Object) -> &mut Map<String, Value> {
    let spec = obj.as_map_mut().entry("spec").or_insert_with(|| json!({}));
    if !spec.is_object() {
        *spec = json!({});
    }
    match spec {
        Value::Object(m) => m,
        _ => unreachable!("spec was just made an object"),
    }
}

/// A Namespace's `spec.finalizers`.
fn spec_finalizers(obj: &Object) -> Vec<&str> {
    obj.as_map()
        .get("spec")
        .and_then(|s| s.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Sets `spec.finalizers` of `obj` to those of `from` (absent when `from` has none).
fn copy_spec_finalizers(obj: &mut Object, from: &Object) {
    let finalizers = from
        .as_map()
        .get("spec")
        .and_then(|s| s.get("finalizers"))
        .cloned();
    match finalizers {
        Some(f) => {
            spec_mut(obj).insert("finalizers".into(), f);
        }
        None => {
            if let Some(spec) = obj
                .as_map_mut()
                .get_mut("spec")
                .and_then(Value::as_object_mut)
            {
                spec.remove("finalizers");
            }
        }
    }
}

/// Whether finalizers hold the object back from removal: `metadata.finalizers`, and for a
/// Namespace also `spec.finalizers` (Kubernetes' `ShouldDeleteNamespaceDuringUpdate`).
pub fn has_finalizers(info: &ResourceInfo, obj: &Object) -> bool {
    !obj.finalizers().is_empty() || (info.kind == "Namespace" && !spec_finalizers(obj).is_empty())
}

/// Whether a Delete may proceed against the stored object; Kubernetes' namespace rules:
/// the built-in namespaces cannot be deleted, and a namespace already terminating answers a
/// second Delete with `Conflict` while its content is being removed.
pub fn check_delete(info: &ResourceInfo, stored: &Object) -> Result<(), ApiError> {
    if info.kind != "Namespace" {
        return Ok(());
    }
    let t = target(info, stored.name());
    if PROTECTED_NAMESPACES.contains(&stored.name()) {
        return Err(forbidden(t, "this namespace may not be deleted"));
    }
    if stored.deletion_timestamp().is_some() && !spec_finalizers(stored).is_empty() {
        return Err(ApiError::conflict(
            t,
            "The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system.",
        ));
    }
    Ok(())
}

/// What the first Delete of an object held by finalizers changes besides
/// `deletionTimestamp`: a Namespace's phase becomes `Terminating`.
pub fn prepare_for_deletion(info: &ResourceInfo, obj: &mut Object) {
    if info.kind == "Namespace" {
        let status = obj
            .as_map_mut()
            .entry("status")
            .or_insert_with(|| json!({}));
        if !status.is_object() {
            *status = json!({});
        }
        if let Value::Object(s) = status {
            s.insert("phase".into(), json!("Terminating"));
        }
    }
}

/// The error of a Create into a namespace being deleted, worded as Kubernetes' namespace
/// lifecycle admission words it; `t` names the object that was to be created.
pub fn namespace_terminating(t: Target, namespace: &str) -> ApiError {
    let mut e = forbidden(
        t,
        &format!(
            "unable to create new content in namespace {namespace} because it is being terminated"
        ),
    );
    e.causes.push(FieldCause {
        reason: "NamespaceTerminating".into(),
        message: format!("namespace {namespace} is being terminated"),
        field: "metadata.namespace".into(),
    });
    e
}

fn initial_status(kind: &str) -> Value {
    match kind {
        "Pod" => json!({"phase": "Pending"}),
        "Namespace" => json!({"phase": "Active"}),
        _ => json!({}),
    }
}

/// Kubernetes' defaults of a kind (`SetDefaults_*`), on create and on every update.
fn apply_defaults(info: &ResourceInfo, obj: &mut Object) {
    let kind = info.kind.as_str();
    if !matches!(kind, "Deployment" | "ReplicaSet") {
        return;
    }
    let Some(spec) = obj
        .as_map_mut()
        .get_mut("spec")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    spec.entry("replicas").or_insert(json!(1));
    if kind == "Deployment" {
        deployment_defaults(spec);
    }
}

/// apps/v1 `SetDefaults_Deployment`: a RollingUpdate strategy of 25% surge and 25%
/// unavailable, 10 old ReplicaSets kept, a 600 s progress deadline. `minReadySeconds` stays
/// absent (0), as in Kubernetes.
fn deployment_defaults(spec: &mut Map<String, Value>) {
    let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
    if strategy.is_null() {
        *strategy = json!({});
    }
    if let Some(strategy) = strategy.as_object_mut() {
        let kind = strategy
            .entry("type")
            .or_insert_with(|| json!("RollingUpdate"));
        if kind.is_null() || kind == "" {
            *kind = json!("RollingUpdate");
        }
        if kind == "RollingUpdate" {
            let rolling = strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
            if rolling.is_null() {
                *rolling = json!({});
            }
            if let Some(rolling) = rolling.as_object_mut() {
                for field in ["maxUnavailable", "maxSurge"] {
                    let v = rolling.entry(field).or_insert_with(|| json!("25%"));
                    if v.is_null() {
                        *v = json!("25%");
                    }
                }
            }
        }
    }
    for (field, default) in [
        ("revisionHistoryLimit", 10),
        ("progressDeadlineSeconds", 600),
    ] {
        let v = spec.entry(field).or_insert_with(|| json!(default));
        if v.is_null() {
            *v = json!(default);
        }
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
    if sub == Subresource::Finalize {
        // Only `spec.finalizers` moves; removing the last finalizer of a namespace being
        // deleted removes it (see `has_finalizers`).
        let mut out = old.clone();
        copy_spec_finalizers(&mut out, &new);
        return Ok(out);
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
    if info.kind == "Namespace" {
        // As Kubernetes: `spec.finalizers` changes only through `finalize`.
        copy_spec_finalizers(&mut new, old);
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
        "Deployment" => {
            workload_spec(root.get("spec"), &mut causes);
            deployment_spec(root.get("spec"), &mut causes);
        }
        "ReplicaSet" => workload_spec(root.get("spec"), &mut causes),
        "Namespace" => namespace_spec(root.get("spec"), &mut causes),
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

/// A Deployment's own fields (apps/v1 `ValidateDeploymentSpec`): the strategy, its
/// rolling-update bounds, and the non-negative counters.
fn deployment_spec(spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let Some(spec) = spec.and_then(Value::as_object) else {
        return;
    };
    for field in [
        "minReadySeconds",
        "revisionHistoryLimit",
        "progressDeadlineSeconds",
    ] {
        match spec.get(field) {
            None | Some(Value::Null) => {}
            Some(v) if v.as_i64().is_some_and(|n| n >= 0) => {}
            Some(v) => causes.push(FieldCause::invalid(
                format!("spec.{field}"),
                &v.to_string(),
                "must be greater than or equal to 0",
            )),
        }
    }
    if let (Some(deadline), min_ready) = (
        spec.get("progressDeadlineSeconds").and_then(Value::as_i64),
        spec.get("minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0),
    ) && deadline >= 0
        && deadline <= min_ready
    {
        causes.push(FieldCause::invalid(
            "spec.progressDeadlineSeconds",
            &deadline.to_string(),
            "must be greater than minReadySeconds",
        ));
    }
    let Some(strategy) = spec.get("strategy").filter(|s| !s.is_null()) else {
        return;
    };
    let Some(strategy) = strategy.as_object() else {
        causes.push(FieldCause::type_error("spec.strategy", "an object"));
        return;
    };
    let rolling = strategy.get("rollingUpdate").filter(|r| !r.is_null());
    match strategy.get("type").and_then(Value::as_str) {
        Some("Recreate") => {
            if rolling.is_some() {
                causes.push(FieldCause::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        Some("RollingUpdate") => match rolling.map(Value::as_object) {
            None => causes.push(FieldCause::required("spec.strategy.rollingUpdate")),
            Some(None) => causes.push(FieldCause::type_error(
                "spec.strategy.rollingUpdate",
                "an object",
            )),
            Some(Some(r)) => rolling_update(r, causes),
        },
        other => {
            let value = match (other, strategy.get("type")) {
                (Some(s), _) => s.to_string(),
                (None, Some(v)) => v.to_string(),
                (None, None) => String::new(),
            };
            causes.push(FieldCause {
                reason: "FieldValueNotSupported".into(),
                message: format!(
                    "Unsupported value: {value:?}: supported values: \"Recreate\", \"RollingUpdate\""
                ),
                field: "spec.strategy.type".into(),
            });
        }
    }
}

/// An int-or-percent field as Kubernetes reads it: `Some(n)` for an integer or an `"n%"`
/// string, `None` for anything else.
fn int_or_percent(v: &Value) -> Option<(i64, bool)> {
    match v {
        Value::Number(n) => n.as_i64().map(|n| (n, false)),
        Value::String(s) => {
            let digits = s.strip_suffix('%')?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse::<i64>().ok().map(|n| (n, true))
        }
        _ => None,
    }
}

/// `ValidateRollingUpdateDeployment`: each bound an integer >= 0 or a percentage, not both
/// zero, and at most 100% unavailable.
fn rolling_update(r: &Map<String, Value>, causes: &mut Vec<FieldCause>) {
    let mut values = [None, None];
    for (i, field) in ["maxUnavailable", "maxSurge"].into_iter().enumerate() {
        let path = format!("spec.strategy.rollingUpdate.{field}");
        let Some(v) = r.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        match int_or_percent(v) {
            Some((n, _)) if n < 0 => causes.push(FieldCause::invalid(
                path,
                &v.to_string(),
                "must be greater than or equal to 0",
            )),
            Some(parsed) => values[i] = Some(parsed),
            None if v.is_string() => causes.push(FieldCause::invalid(
                path,
                v.as_str().unwrap_or(""),
                "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
            )),
            None => causes.push(FieldCause::type_error(
                path,
                "an integer or a percentage string",
            )),
        }
    }
    let [unavailable, surge] = values;
    let zero = |v: Option<(i64, bool)>| v.is_some_and(|(n, _)| n == 0);
    if zero(unavailable) && zero(surge) {
        causes.push(FieldCause::invalid(
            "spec.strategy.rollingUpdate.maxUnavailable",
            &r.get("maxUnavailable")
                .map(Value::to_string)
                .unwrap_or_default(),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
    if let Some((n, true)) = unavailable
        && n > 100
    {
        causes.push(FieldCause::invalid(
            "spec.strategy.rollingUpdate.maxUnavailable",
            &format!("{n}%"),
            "must not be greater than 100%",
        ));
    }
}

/// A Namespace's `spec.finalizers`: names, either qualified (`example.com/x`) or the standard
/// `kubernetes`.
fn namespace_spec(spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let Some(finalizers) = spec
        .and_then(|s| s.get("finalizers"))
        .filter(|f| !f.is_null())
    else {
        return;
    };
    let Some(list) = finalizers.as_array() else {
        causes.push(FieldCause::type_error(
            "spec.finalizers",
            "a list of strings",
        ));
        return;
    };
    for (i, f) in list.iter().enumerate() {
        let path = format!("spec.finalizers[{i}]");
        match f.as_str() {
            None => causes.push(FieldCause::type_error(path, "a string")),
            Some(name) if !name.contains('/') && name != NAMESPACE_FINALIZER => {
                causes.push(FieldCause::invalid(
                    path,
                    name,
                    "name is neither a standard finalizer name nor is it fully qualified",
                ))
            }
            Some(name) => {
                let (prefix, rest) = name.split_once('/').unwrap_or(("", name));
                if name.contains('/')
                    && (rest.is_empty()
                        || !dns1123_subdomain(prefix).is_empty()
                        || !label_value(rest).is_empty())
                {
                    causes.push(FieldCause::invalid(path, name, "not a qualified name"));
                }
            }
        }
    }
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
        let mut old = obj(
            json!({"metadata": {"name": "d", "uid": "u", "generation": 3},
            "spec": {"replicas": 1}, "status": {"replicas": 1}}),
        );
        // As stored: with the kind's defaults.
        apply_defaults(&i, &mut old);
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

    fn deployment(spec: Value) -> Object {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": "a"}});
        spec["template"] = json!({"metadata": {"labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "x"}, "spec": spec}))
    }

    fn fields(e: &ApiError) -> Vec<&str> {
        e.causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn deployments_get_kubernetes_defaults_on_create_and_update() {
        let i = info("Deployment");
        let mut d = deployment(json!({}));
        prepare_for_create(&i, &mut d);
        let spec = &d.as_map()["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(
            spec["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        );
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["progressDeadlineSeconds"], 600);
        assert!(spec.get("minReadySeconds").is_none());
        validate(&i, &d).unwrap();

        // Given values stay; a partly given rolling update is completed.
        let mut d = deployment(json!({"revisionHistoryLimit": 2,
            "strategy": {"rollingUpdate": {"maxSurge": 3}}}));
        prepare_for_create(&i, &mut d);
        let spec = &d.as_map()["spec"];
        assert_eq!(spec["revisionHistoryLimit"], 2);
        assert_eq!(
            spec["strategy"]["rollingUpdate"],
            json!({"maxSurge": 3, "maxUnavailable": "25%"})
        );

        // Recreate gets no rolling update; an update is defaulted too.
        let old = d.clone();
        let new = deployment(json!({"strategy": {"type": "Recreate"}}));
        let out = prepare_for_update(&i, new, &old, Subresource::Main).unwrap();
        assert_eq!(
            out.as_map()["spec"]["strategy"],
            json!({"type": "Recreate"})
        );
        assert_eq!(out.as_map()["spec"]["progressDeadlineSeconds"], 600);
        validate(&i, &out).unwrap();

        // A ReplicaSet gets its replicas and nothing more.
        let mut rs = obj(json!({"metadata": {"name": "r"}, "spec": {}}));
        prepare_for_create(&info("ReplicaSet"), &mut rs);
        assert_eq!(rs.as_map()["spec"], json!({"replicas": 1}));
    }

    #[test]
    fn deployment_strategies_are_validated_by_field() {
        let i = info("Deployment");
        let invalid = |spec: Value| validate(&i, &deployment(spec)).unwrap_err();

        let e = invalid(json!({"strategy": {"type": "BlueGreen"}}));
        assert_eq!(fields(&e), ["spec.strategy.type"]);
        assert_eq!(e.causes[0].reason, "FieldValueNotSupported");
        assert_eq!(
            e.causes[0].message,
            "Unsupported value: \"BlueGreen\": supported values: \"Recreate\", \"RollingUpdate\""
        );

        let e = invalid(json!({"strategy": {"type": "Recreate",
            "rollingUpdate": {"maxSurge": 1}}}));
        assert_eq!(fields(&e), ["spec.strategy.rollingUpdate"]);
        assert_eq!(e.causes[0].reason, "FieldValueForbidden");

        let e = invalid(json!({"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}}));
        assert_eq!(fields(&e), ["spec.strategy.rollingUpdate.maxUnavailable"]);
        assert!(
            e.message.contains("may not be 0 when `maxSurge` is 0"),
            "{}",
            e.message
        );

        let e = invalid(json!({"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": -1, "maxUnavailable": "ten%"}}}));
        assert_eq!(
            fields(&e),
            [
                "spec.strategy.rollingUpdate.maxUnavailable",
                "spec.strategy.rollingUpdate.maxSurge"
            ]
        );

        let e = invalid(json!({"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "150%"}}}));
        assert_eq!(fields(&e), ["spec.strategy.rollingUpdate.maxUnavailable"]);

        let e = invalid(json!({"strategy": {"type": "RollingUpdate"}}));
        assert_eq!(fields(&e), ["spec.strategy.rollingUpdate"]);

        let e = invalid(json!({"revisionHistoryLimit": -1, "minReadySeconds": 10,
            "progressDeadlineSeconds": 5}));
        assert_eq!(
            fields(&e),
            ["spec.revisionHistoryLimit", "spec.progressDeadlineSeconds"]
        );

        for ok in [
            json!({"strategy": {"type": "Recreate"}}),
            json!({"strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}}),
            json!({"strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "0%", "maxUnavailable": "100%"}}}),
        ] {
            validate(&i, &deployment(ok.clone())).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn namespaces_start_held_by_the_kubernetes_finalizer() {
        let i = info("Namespace");
        let mut ns = obj(json!({"metadata": {"name": "team-a"}}));
        prepare_for_create(&i, &mut ns);
        assert_eq!(ns.as_map()["spec"], json!({"finalizers": ["kubernetes"]}));
        assert_eq!(ns.as_map()["status"], json!({"phase": "Active"}));
        let mut ns2 =
            obj(json!({"metadata": {"name": "b"}, "spec": {"finalizers": ["example.com/x"]}}));
        prepare_for_create(&i, &mut ns2);
        assert_eq!(
            ns2.as_map()["spec"]["finalizers"],
            json!(["example.com/x", "kubernetes"])
        );
        validate(&i, &ns2).unwrap();
        assert!(has_finalizers(&i, &ns));

        // A plain update keeps spec.finalizers; only `finalize` changes them, and nothing else.
        let cleared = obj(json!({"metadata": {"name": "team-a", "labels": {"a": "b"}},
            "spec": {"finalizers": []}}));
        let out = prepare_for_update(&i, cleared.clone(), &ns, Subresource::Main).unwrap();
        assert_eq!(out.as_map()["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(out.label("a"), Some("b"));
        let out = prepare_for_update(&i, cleared, &ns, Subresource::Finalize).unwrap();
        assert_eq!(out.as_map()["spec"]["finalizers"], json!([]));
        assert_eq!(out.label("a"), None);
        assert!(!has_finalizers(&i, &out));

        let bad = obj(json!({"metadata": {"name": "c"}, "spec": {"finalizers": ["mine", 3]}}));
        assert_eq!(
            fields(&validate(&i, &bad).unwrap_err()),
            ["spec.finalizers[0]", "spec.finalizers[1]"]
        );
        let t = Target::default();
        assert_eq!(
            Subresource::parse(&i, "finalize", &t).unwrap(),
            Subresource::Finalize
        );
        assert!(Subresource::parse(&info("Pod"), "finalize", &t).is_err());
    }

    #[test]
    fn namespace_deletion_follows_kubernetes() {
        let i = info("Namespace");
        let e = check_delete(&i, &obj(json!({"metadata": {"name": "default"}}))).unwrap_err();
        assert_eq!(e.reason, Reason::Forbidden);
        assert_eq!(
            e.message,
            "namespaces \"default\" is forbidden: this namespace may not be deleted"
        );
        let mut ns = obj(
            json!({"metadata": {"name": "a"}, "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"}}),
        );
        check_delete(&i, &ns).unwrap();
        prepare_for_deletion(&i, &mut ns);
        assert_eq!(ns.as_map()["status"]["phase"], "Terminating");
        ns.set_meta_str("deletionTimestamp", "2026-01-01T00:00:00Z");
        let e = check_delete(&i, &ns).unwrap_err();
        assert_eq!(e.reason, Reason::Conflict);
        assert!(e.message.starts_with(
            "Operation cannot be fulfilled on namespaces \"a\": The system is ensuring all content is removed"
        ));
        check_delete(&info("ConfigMap"), &ns).unwrap();

        let e = namespace_terminating(target(&info("ConfigMap"), "x"), "a");
        assert_eq!(e.reason, Reason::Forbidden);
        assert_eq!(
            e.message,
            "configmaps \"x\" is forbidden: unable to create new content in namespace a because it is being terminated"
        );
        assert_eq!(e.causes[0].reason, "NamespaceTerminating");
        assert_eq!(e.causes[0].field, "metadata.namespace");
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
