//! What Deployments and ReplicaSets share: `spec.replicas` (defaulted to 1, never negative),
//! a selector that selects the pod template's labels, a valid pod template, and the `scale`
//! subresource.

use keel_api::FieldCause;
use keel_api::validation::{label_key, label_value};
use serde_json::{Value, json};

use keel_api::Object;

/// The subresources of a workload.
pub(super) const SUBRESOURCES: &[&str] = &["scale"];

/// `spec.replicas` defaults to 1.
pub(super) fn default_replicas(obj: &mut Object) {
    if let Some(spec) = obj
        .as_map_mut()
        .get_mut("spec")
        .and_then(Value::as_object_mut)
    {
        spec.entry("replicas").or_insert(json!(1));
    }
}

/// The workload's `spec`: replicas, selector and template.
pub(super) fn workload_spec(spec: Option<&Value>, causes: &mut Vec<FieldCause>) {
    let Some(spec) = spec.and_then(Value::as_object) else {
        causes.push(FieldCause::required("spec"));
        return;
    };
    match spec.get("replicas") {
        None => {}
        Some(r) if r.as_i64().is_some_and(|n| n >= 0) => {}
        Some(r) => causes.push(FieldCause::invalid_value(
            "spec.replicas",
            r,
            "must be greater than or equal to 0",
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
    super::pod::pod_spec(template.get("spec"), "spec.template.spec", causes);
}

fn string_map_of(v: Option<&Value>) -> Option<Vec<(String, String)>> {
    v?.as_object().map(|m| {
        m.iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
            .collect()
    })
}

/// `spec.selector` is immutable (apps/v1 and batch/v1).
pub(super) fn selector_unchanged(new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
    let selector = |o: &Object| {
        o.as_map()
            .get("spec")
            .and_then(|s| s.get("selector"))
            .cloned()
    };
    if selector(new) != selector(old) {
        causes.push(FieldCause::invalid(
            "spec.selector",
            &selector(new).unwrap_or(Value::Null).to_string(),
            "field is immutable",
        ));
    }
}
