//! Versions of one resource over one stored form: objects are stored at one version and
//! converted when read at another. Custom resources (conversion `None`) change only
//! `apiVersion`; the CRD resource itself is stored at `apiextensions.k8s.io/v1` and also served
//! at `v1beta1`, the form the seeds use (one `version`, schema under `validation`); a
//! HorizontalPodAutoscaler is stored at `autoscaling/v2` and also served at `v1`, whose one CPU
//! target is v2's CPU utilization metric, the rest kept in annotations as Kubernetes keeps
//! them. An `events.k8s.io/v1` Event is a core `v1` Event, stored with them and converted field
//! by field as Kubernetes converts it (`regarding` is `involvedObject`, `note` is `message`, the
//! older fields `deprecated*`).

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use crate::{Object, ResourceInfo};

const CRD_GROUP: &str = "apiextensions.k8s.io";
const CRD_RESOURCE: &str = "customresourcedefinitions";

fn is_crd_v1beta1(info: &ResourceInfo) -> bool {
    info.gvr.group == CRD_GROUP
        && info.gvr.resource == CRD_RESOURCE
        && info.gvr.version == "v1beta1"
}

const HPA_RESOURCE: &str = "horizontalpodautoscalers";
/// Where a v1 HorizontalPodAutoscaler keeps what v1 has no field for (Kubernetes' names).
const HPA_METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
const HPA_BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
const HPA_CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
const HPA_CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";

fn is_hpa_v1(info: &ResourceInfo) -> bool {
    info.gvr.group == "autoscaling" && info.gvr.resource == HPA_RESOURCE && info.gvr.version == "v1"
}

/// The group served beside the core one over the same stored Events.
pub const EVENTS_GROUP: &str = "events.k8s.io";

fn is_events_v1(info: &ResourceInfo) -> bool {
    info.gvr.group == EVENTS_GROUP && info.gvr.resource == "events"
}

/// Core Event field ↔ events.k8s.io/v1 Event field (Kubernetes' `Convert_v1_Event_To_core_Event`).
const EVENT_FIELDS: [(&str, &str); 9] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    // The same names in both.
    ("related", "related"),
    ("series", "series"),
];

fn rename_fields(obj: &mut Map<String, Value>, to_events_v1: bool) {
    for (core, events) in EVENT_FIELDS {
        let (from, to) = if to_events_v1 {
            (core, events)
        } else {
            (events, core)
        };
        if from != to
            && let Some(v) = obj.remove(from)
        {
            obj.insert(to.into(), v);
        }
    }
    if to_events_v1 {
        // events.k8s.io leaves a zero count out.
        if obj.get("deprecatedCount") == Some(&json!(0)) {
            obj.remove("deprecatedCount");
        }
    }
}

/// The group whose storage `info`'s objects live in: their own, but the core group's for
/// `events.k8s.io` Events.
pub fn storage_group(info: &ResourceInfo) -> &str {
    if is_events_v1(info) {
        ""
    } else {
        &info.gvr.group
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Whether `obj` already has the `apiVersion` `info` serves (checked without allocating: this
/// runs for every object read).
fn is_served(info: &ResourceInfo, obj: &Object) -> bool {
    match obj.api_version().rsplit_once('/') {
        Some((group, version)) => group == info.gvr.group && version == info.gvr.version,
        None => info.gvr.group.is_empty() && obj.api_version() == info.gvr.version,
    }
}

/// A stored object as `info`'s version serves it. An object of another group is left alone.
pub fn to_served(info: &ResourceInfo, obj: &mut Object) {
    if info.converted_by_server {
        return;
    }
    if is_events_v1(info) {
        if obj.api_version() == "v1" {
            obj.as_map_mut()
                .insert("apiVersion".into(), Value::String(info.api_version()));
            rename_fields(obj.as_map_mut(), true);
        }
        return;
    }
    if is_served(info, obj) || group_of(obj.api_version()) != info.gvr.group {
        return;
    }
    obj.as_map_mut()
        .insert("apiVersion".into(), Value::String(info.api_version()));
    if is_crd_v1beta1(info)
        && let Some(spec) = obj
            .as_map_mut()
            .get_mut("spec")
            .and_then(Value::as_object_mut)
    {
        crd_v1_to_v1beta1(spec);
    }
    if is_hpa_v1(info) {
        hpa_v2_to_v1(obj.as_map_mut());
    }
}

/// `obj` as `info`'s version serves it, copied only when it is not already (a mutation may be
/// handed the previous one's result, which is in the stored form).
pub fn served<'a>(info: &ResourceInfo, obj: &'a Object) -> Cow<'a, Object> {
    if is_served(info, obj) {
        Cow::Borrowed(obj)
    } else {
        let mut owned = obj.clone();
        to_served(info, &mut owned);
        Cow::Owned(owned)
    }
}

/// Whether `info` serves objects stored in another version's form (a v1beta1 CRD, a v1
/// HorizontalPodAutoscaler, an `events.k8s.io` Event): a view of another resource's objects.
pub fn is_converted_view(info: &ResourceInfo) -> bool {
    is_crd_v1beta1(info) || is_hpa_v1(info) || is_events_v1(info)
}

/// `obj` in its stored form, copied only when it is in `info`'s served form and that differs
/// (a patch's current object is read in the version the request names).
pub fn stored<'a>(info: &ResourceInfo, obj: &'a Object) -> Cow<'a, Object> {
    if is_converted_view(info) && is_served(info, obj) {
        let mut owned = obj.clone();
        to_stored(info, &mut owned);
        Cow::Owned(owned)
    } else {
        Cow::Borrowed(obj)
    }
}

/// An object sent at `info`'s version, in the form it is stored in: for a v1beta1 CRD, the v1
/// form (apiVersion included). Other resources' objects are unchanged here (a custom
/// resource's storage version is the registry's to apply).
pub fn to_stored(info: &ResourceInfo, obj: &mut Object) {
    if is_events_v1(info) {
        if group_of(obj.api_version()) == EVENTS_GROUP {
            obj.as_map_mut().insert("apiVersion".into(), json!("v1"));
            rename_fields(obj.as_map_mut(), false);
        }
        return;
    }
    if is_hpa_v1(info) {
        obj.as_map_mut()
            .insert("apiVersion".into(), json!("autoscaling/v2"));
        hpa_v1_to_v2(obj.as_map_mut());
        return;
    }
    if !is_crd_v1beta1(info) {
        return;
    }
    obj.as_map_mut()
        .insert("apiVersion".into(), json!(format!("{CRD_GROUP}/v1")));
    if let Some(spec) = obj
        .as_map_mut()
        .get_mut("spec")
        .and_then(Value::as_object_mut)
    {
        crd_v1beta1_to_v1(spec);
    }
}

/// The schema a v1beta1 version without one gets: anything goes, as v1beta1 allowed.
fn open_schema() -> Value {
    json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}})
}

fn rename(columns: &Value, from: &str, to: &str) -> Value {
    match columns.as_array() {
        Some(list) => Value::Array(
            list.iter()
                .map(|c| {
                    let mut c = c.clone();
                    if let Some(m) = c.as_object_mut()
                        && let Some(v) = m.remove(from)
                    {
                        m.insert(to.into(), v);
                    }
                    c
                })
                .collect(),
        ),
        None => columns.clone(),
    }
}

/// v1beta1's spec to v1's: one `version` becomes `versions`; `validation`, `subresources`
/// and `additionalPrinterColumns` (with `JSONPath`) move into each version.
fn crd_v1beta1_to_v1(spec: &mut Map<String, Value>) {
    let version = spec.remove("version");
    let validation = spec.remove("validation");
    let subresources = spec.remove("subresources");
    let columns = spec.remove("additionalPrinterColumns");
    spec.remove("preserveUnknownFields");
    let versions = spec
        .entry("versions")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(list) = versions.as_array_mut() {
        if list.is_empty()
            && let Some(name) = version.as_ref().and_then(Value::as_str)
        {
            list.push(json!({"name": name, "served": true, "storage": true}));
        }
        for v in list.iter_mut().filter_map(Value::as_object_mut) {
            if !v.contains_key("schema") {
                let schema = validation
                    .as_ref()
                    .filter(|s| s["openAPIV3Schema"].is_object())
                    .cloned()
                    .unwrap_or_else(open_schema);
                v.insert("schema".into(), schema);
            }
            if let Some(s) = &subresources
                && !v.contains_key("subresources")
            {
                v.insert("subresources".into(), s.clone());
            }
            if let Some(c) = &columns
                && !v.contains_key("additionalPrinterColumns")
            {
                v.insert(
                    "additionalPrinterColumns".into(),
                    rename(c, "JSONPath", "jsonPath"),
                );
            }
            if let Some(c) = v.get("additionalPrinterColumns").cloned() {
                v.insert(
                    "additionalPrinterColumns".into(),
                    rename(&c, "JSONPath", "jsonPath"),
                );
            }
        }
    }
}

/// v1's spec to v1beta1's: `version` is the first version; a schema, subresources or printer
/// columns that every version shares move up to the top.
fn crd_v1_to_v1beta1(spec: &mut Map<String, Value>) {
    let Some(versions) = spec.get("versions").and_then(Value::as_array).cloned() else {
        return;
    };
    if let Some(first) = versions.first().and_then(|v| v.get("name")).cloned() {
        spec.insert("version".into(), first);
    }
    let mut versions = versions;
    for (field, top) in [
        ("schema", "validation"),
        ("subresources", "subresources"),
        ("additionalPrinterColumns", "additionalPrinterColumns"),
    ] {
        let first = versions.first().and_then(|v| v.get(field)).cloned();
        let shared = first.is_some() && versions.iter().all(|v| v.get(field) == first.as_ref());
        if let (true, Some(value)) = (shared, first) {
            let value = if field == "additionalPrinterColumns" {
                rename(&value, "jsonPath", "JSONPath")
            } else {
                value
            };
            spec.insert(top.into(), value);
            for v in versions.iter_mut().filter_map(Value::as_object_mut) {
                v.remove(field);
            }
        }
    }
    spec.insert("versions".into(), Value::Array(versions));
}

/// Whether a v2 metric is the one v1 can say: the pods' average CPU utilization.
fn is_cpu_utilization(metric: &Value) -> bool {
    metric["type"] == "Resource"
        && metric["resource"]["name"] == "cpu"
        && metric["resource"]["target"]["type"] == "Utilization"
}

/// The annotations of `obj`, made if absent.
fn annotations(obj: &mut Map<String, Value>) -> Option<&mut Map<String, Value>> {
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    let a = meta
        .as_object_mut()?
        .entry("annotations")
        .or_insert_with(|| json!({}));
    if a.is_null() {
        *a = json!({});
    }
    a.as_object_mut()
}

/// Moves `value` into annotation `key` as JSON text, when there is something to keep.
fn keep_in_annotation(obj: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    let Some(value) = value.filter(|v| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()))
    else {
        return;
    };
    if let Some(a) = annotations(obj) {
        a.insert(key.into(), Value::String(value.to_string()));
    }
}

/// Takes annotation `key` back out as the JSON it holds.
fn take_annotation(obj: &mut Map<String, Value>, key: &str) -> Option<Value> {
    let meta = obj.get_mut("metadata")?.as_object_mut()?;
    let a = meta.get_mut("annotations")?.as_object_mut()?;
    let text = a.remove(key)?;
    if a.is_empty() {
        meta.remove("annotations");
    }
    serde_json::from_str(text.as_str()?).ok()
}

/// autoscaling/v2 → v1: the CPU utilization metric becomes `targetCPUUtilizationPercentage`
/// (and its reading `currentCPUUtilizationPercentage`); other metrics, the behavior and the
/// conditions go into annotations, so that a v1 client's update keeps them.
fn hpa_v2_to_v1(obj: &mut Map<String, Value>) {
    let mut kept = Vec::new();
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let metrics = spec.remove("metrics").and_then(|m| m.as_array().cloned());
        let behavior = spec.remove("behavior");
        let (cpu, other): (Vec<Value>, Vec<Value>) = metrics
            .unwrap_or_default()
            .into_iter()
            .partition(is_cpu_utilization);
        if let Some(u) = cpu
            .first()
            .map(|m| m["resource"]["target"]["averageUtilization"].clone())
            && !u.is_null()
        {
            spec.insert("targetCPUUtilizationPercentage".into(), u);
        }
        kept.push((HPA_METRICS, Some(Value::Array(other))));
        kept.push((HPA_BEHAVIOR, behavior));
    }
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
        let current = status
            .remove("currentMetrics")
            .and_then(|m| m.as_array().cloned());
        let conditions = status.remove("conditions");
        let (cpu, other): (Vec<Value>, Vec<Value>) = current
            .unwrap_or_default()
            .into_iter()
            .partition(|m| m["type"] == "Resource" && m["resource"]["name"] == "cpu");
        if let Some(u) = cpu
            .first()
            .map(|m| m["resource"]["current"]["averageUtilization"].clone())
            && !u.is_null()
        {
            status.insert("currentCPUUtilizationPercentage".into(), u);
        }
        kept.push((HPA_CURRENT_METRICS, Some(Value::Array(other))));
        kept.push((HPA_CONDITIONS, conditions));
    }
    for (key, value) in kept {
        keep_in_annotation(obj, key, value);
    }
}

/// autoscaling/v1 → v2: the inverse of [`hpa_v2_to_v1`].
fn hpa_v1_to_v2(obj: &mut Map<String, Value>) {
    let mut metrics = match take_annotation(obj, HPA_METRICS) {
        Some(Value::Array(m)) => m,
        _ => Vec::new(),
    };
    let behavior = take_annotation(obj, HPA_BEHAVIOR);
    let mut current = match take_annotation(obj, HPA_CURRENT_METRICS) {
        Some(Value::Array(m)) => m,
        _ => Vec::new(),
    };
    let conditions = take_annotation(obj, HPA_CONDITIONS);
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        if let Some(u) = spec
            .remove("targetCPUUtilizationPercentage")
            .filter(|u| !u.is_null())
        {
            metrics.insert(
                0,
                json!({"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": u}}}),
            );
        }
        if !metrics.is_empty() {
            spec.insert("metrics".into(), Value::Array(metrics));
        }
        if let Some(b) = behavior {
            spec.insert("behavior".into(), b);
        }
    }
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
        if let Some(u) = status
            .remove("currentCPUUtilizationPercentage")
            .filter(|u| !u.is_null())
        {
            current.insert(
                0,
                json!({"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageUtilization": u}}}),
            );
        }
        if !current.is_empty() {
            status.insert("currentMetrics".into(), Value::Array(current));
        }
        if let Some(c) = conditions {
            status.insert("conditions".into(), c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GroupVersionResource, builtin_resources};

    fn hpa_info(version: &str) -> ResourceInfo {
        builtin_resources()
            .into_iter()
            .find(|r| r.gvr.resource == HPA_RESOURCE && r.gvr.version == version)
            .unwrap()
    }

    #[test]
    fn a_v1_autoscaler_is_stored_as_v2_and_a_v2_one_read_as_v1_keeps_its_other_metrics() {
        let mut v1 = Object::from_value(json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
                     "maxReplicas": 5, "targetCPUUtilizationPercentage": 70},
        }))
        .unwrap();
        to_stored(&hpa_info("v1"), &mut v1);
        let stored = v1.into_value();
        assert_eq!(stored["apiVersion"], "autoscaling/v2");
        assert_eq!(
            stored["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 70}}}])
        );
        assert!(
            stored["spec"]
                .get("targetCPUUtilizationPercentage")
                .is_none()
        );

        let memory = json!({"type": "Resource", "resource": {"name": "memory",
            "target": {"type": "AverageValue", "averageValue": "1Gi"}}});
        let v2 = json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"maxReplicas": 5, "metrics": [stored["spec"]["metrics"][0], memory]},
            "status": {"currentReplicas": 2, "currentMetrics": [{"type": "Resource",
                "resource": {"name": "cpu", "current": {"averageUtilization": 40}}}]},
        });
        let mut read = Object::from_value(v2.clone()).unwrap();
        to_served(&hpa_info("v1"), &mut read);
        let seen = read.clone().into_value();
        assert_eq!(seen["apiVersion"], "autoscaling/v1");
        assert_eq!(seen["spec"]["targetCPUUtilizationPercentage"], 70);
        assert_eq!(seen["status"]["currentCPUUtilizationPercentage"], 40);
        assert!(seen["spec"].get("metrics").is_none());
        assert!(seen["metadata"]["annotations"][HPA_METRICS].is_string());
        // Back to v2 unchanged: a v1 client's update loses nothing.
        to_stored(&hpa_info("v1"), &mut read);
        assert_eq!(read.into_value(), v2);
    }

    fn crd_info(version: &str) -> ResourceInfo {
        let mut info = builtin_resources()
            .into_iter()
            .find(|r| r.gvr.resource == CRD_RESOURCE)
            .unwrap();
        info.gvr = GroupVersionResource::new(CRD_GROUP, version, CRD_RESOURCE);
        info
    }

    fn seeds_crd() -> Object {
        Object::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1beta1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "networks.samplecrd.k8s.io"},
            "spec": {
                "group": "samplecrd.k8s.io", "version": "v1",
                "names": {"kind": "Network", "plural": "networks"},
                "scope": "Namespaced"
            }
        }))
        .unwrap()
    }

    #[test]
    fn the_seeds_v1beta1_crd_is_stored_as_v1_and_read_back_as_v1beta1() {
        let v1beta1 = crd_info("v1beta1");
        let mut obj = seeds_crd();
        to_stored(&v1beta1, &mut obj);
        let stored = obj.clone().into_value();
        assert_eq!(stored["apiVersion"], "apiextensions.k8s.io/v1");
        assert!(stored["spec"].get("version").is_none());
        assert_eq!(
            stored["spec"]["versions"],
            json!([{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}])
        );
        to_served(&v1beta1, &mut obj);
        let back = obj.into_value();
        assert_eq!(back["apiVersion"], "apiextensions.k8s.io/v1beta1");
        assert_eq!(back["spec"]["version"], "v1");
        assert_eq!(
            back["spec"]["validation"]["openAPIV3Schema"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(
            back["spec"]["versions"],
            json!([{"name": "v1", "served": true, "storage": true}])
        );
    }

    #[test]
    fn v1beta1_validation_subresources_and_columns_move_into_each_version() {
        let mut obj = seeds_crd();
        let spec = obj.as_map_mut().get_mut("spec").unwrap();
        spec["versions"] = json!([
            {"name": "v1", "served": true, "storage": true},
            {"name": "v2", "served": true, "storage": false}
        ]);
        spec["validation"] = json!({"openAPIV3Schema": {"type": "object"}});
        spec["subresources"] = json!({"status": {}});
        spec["additionalPrinterColumns"] =
            json!([{"name": "CIDR", "type": "string", "JSONPath": ".spec.cidr"}]);
        to_stored(&crd_info("v1beta1"), &mut obj);
        let v = obj.clone().into_value();
        for i in 0..2 {
            let version = &v["spec"]["versions"][i];
            assert_eq!(version["schema"]["openAPIV3Schema"]["type"], "object");
            assert_eq!(version["subresources"], json!({"status": {}}));
            assert_eq!(
                version["additionalPrinterColumns"][0]["jsonPath"],
                ".spec.cidr"
            );
        }
        to_served(&crd_info("v1beta1"), &mut obj);
        let v = obj.into_value();
        assert_eq!(
            v["spec"]["additionalPrinterColumns"][0]["JSONPath"],
            ".spec.cidr"
        );
        assert_eq!(v["spec"]["subresources"], json!({"status": {}}));
        assert!(v["spec"]["versions"][1].get("schema").is_none());
    }

    #[test]
    fn custom_objects_change_only_their_api_version() {
        let mut info = crd_info("v1");
        info.gvr = GroupVersionResource::new("samplecrd.k8s.io", "v2", "networks");
        let mut obj = Object::from_value(json!({
            "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
            "metadata": {"name": "n"}, "spec": {"version": "x"}
        }))
        .unwrap();
        to_served(&info, &mut obj);
        let v = obj.into_value();
        assert_eq!(v["apiVersion"], "samplecrd.k8s.io/v2");
        assert_eq!(v["spec"]["version"], "x");
        // A v1 CRD read at v1 is unchanged.
        let mut crd = seeds_crd();
        to_stored(&crd_info("v1beta1"), &mut crd);
        let before = crd.clone();
        to_served(&crd_info("v1"), &mut crd);
        assert_eq!(crd, before);
    }

    #[test]
    fn an_events_k8s_io_event_is_a_core_event_renamed() {
        let info = crate::builtin_resources()
            .into_iter()
            .find(|r| r.gvr.group == EVENTS_GROUP && r.gvr.resource == "events")
            .unwrap();
        let core = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "pi.1", "namespace": "default"},
            "involvedObject": {"kind": "Job", "name": "pi"}, "message": "Job completed",
            "reason": "Completed", "type": "Normal", "reportingComponent": "job-controller",
            "source": {"component": "job-controller"}, "count": 2,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z"});
        let mut obj = Object::from_value(core.clone()).unwrap();
        to_served(&info, &mut obj);
        let v = obj.as_map();
        assert_eq!(v["apiVersion"], "events.k8s.io/v1");
        assert_eq!(v["regarding"]["name"], "pi");
        assert_eq!(v["note"], "Job completed");
        assert_eq!(v["reportingController"], "job-controller");
        assert_eq!(v["deprecatedSource"]["component"], "job-controller");
        assert_eq!(v["deprecatedCount"], 2);
        assert!(v.get("involvedObject").is_none() && v.get("message").is_none());
        to_stored(&info, &mut obj);
        assert_eq!(obj.into_value(), core);
    }
}
