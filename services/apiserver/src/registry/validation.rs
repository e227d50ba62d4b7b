//! Validation of whole objects, per kind, with Kubernetes' field paths and messages: metadata,
//! pod specs, workloads, Deployment strategies, Namespace finalizers, ConfigMap keys. Pure
//! functions.

use keel_api::resource::RBAC_GROUP;
use keel_api::validation::{
    dns1123_label, dns1123_subdomain, label_key, label_value, name_rule, object_meta,
};
use keel_api::{ApiError, FieldCause, Object, ResourceInfo};
use serde_json::{Map, Value};

use super::deletion::NAMESPACE_FINALIZER;
use super::errors::kind_target;
use super::initializers;
use super::rbac;

/// Validates a whole object of this resource: metadata, then the kind's own rules.
pub fn validate(info: &ResourceInfo, obj: &Object) -> Result<(), ApiError> {
    let mut causes = object_meta(obj, info.namespaced, name_rule(info));
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
        "InitializerConfiguration" => initializers::validate_config(root, &mut causes),
        "Role" | "ClusterRole" if info.gvr.group == RBAC_GROUP => {
            rbac::validate_role(root, info.namespaced, &mut causes)
        }
        "RoleBinding" | "ClusterRoleBinding" if info.gvr.group == RBAC_GROUP => {
            rbac::validate_binding(root, info.namespaced, &mut causes)
        }
        "CustomResourceDefinition" if info.gvr.group == super::crd::GROUP => {
            causes.extend(super::crd::validate(obj))
        }
        _ => {}
    }
    initializers::validate_pending(obj, &mut causes);
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
            causes.push(FieldCause::not_supported(
                "spec.strategy.type",
                &value,
                &["Recreate", "RollingUpdate"],
            ));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
