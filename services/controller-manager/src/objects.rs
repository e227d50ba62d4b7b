//! What the controllers read of objects beyond their metadata (which
//! [`keel_api::Metadata`] reads): resources, specs and selectors, the owner references a
//! controller writes, Pod readiness, times. Pure functions over JSON, unit-tested below.

use std::time::{Duration, SystemTime};

use keel_api::Metadata;
use keel_api::selector::LabelSelector;
use keel_runtime::{GroupVersionResource, ObjectKey, WatchOptions};
use serde_json::{Value, json};

pub fn pods() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "pods")
}
pub fn replicasets() -> GroupVersionResource {
    GroupVersionResource::new("apps", "v1", "replicasets")
}
pub fn deployments() -> GroupVersionResource {
    GroupVersionResource::new("apps", "v1", "deployments")
}
pub fn cronjobs() -> GroupVersionResource {
    GroupVersionResource::new("batch", "v1", "cronjobs")
}
pub fn jobs() -> GroupVersionResource {
    GroupVersionResource::new("batch", "v1", "jobs")
}
pub fn statefulsets() -> GroupVersionResource {
    GroupVersionResource::new("apps", "v1", "statefulsets")
}
pub fn daemonsets() -> GroupVersionResource {
    GroupVersionResource::new("apps", "v1", "daemonsets")
}
pub fn services() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "services")
}
pub fn endpoints() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "endpoints")
}
pub fn endpointslices() -> GroupVersionResource {
    GroupVersionResource::new("discovery.k8s.io", "v1", "endpointslices")
}
pub fn secrets() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "secrets")
}
pub fn serviceaccounts() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "serviceaccounts")
}
pub fn nodes() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "nodes")
}
pub fn leases() -> GroupVersionResource {
    GroupVersionResource::new("coordination.k8s.io", "v1", "leases")
}
pub fn controllerrevisions() -> GroupVersionResource {
    GroupVersionResource::new("apps", "v1", "controllerrevisions")
}
pub fn persistentvolumeclaims() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "persistentvolumeclaims")
}
pub fn namespaces() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "namespaces")
}

/// Watch options that also show objects whose initializers are still pending.
pub fn including_uninitialized() -> WatchOptions {
    WatchOptions::default().include_uninitialized()
}

/// The Pods informer the ReplicaSet and pod-lifecycle controllers share: uninitialized Pods
/// too (or a slow initializer would make the ReplicaSet controller over-create), each Pod in
/// the shard of its ReplicaSet.
pub fn pods_by_owner(ctx: &crate::controllers::Context) -> WatchOptions {
    ctx.options(including_uninitialized(), keel_runtime::ShardBy::Owner)
}

/// `spec.replicas`, 1 when absent (Kubernetes' default).
pub fn spec_replicas(obj: &Value) -> i64 {
    obj["spec"]["replicas"].as_i64().unwrap_or(1).max(0)
}
pub fn status_i64(obj: &Value, field: &str) -> i64 {
    obj["status"][field].as_i64().unwrap_or(0)
}

/// The key of an object's controlling owner, if it has one of this kind, with the owner's uid.
pub fn controller_of(obj: &Value, kind: &str) -> Option<(ObjectKey, String)> {
    let r = obj.controller_ref()?;
    if r["kind"].as_str() != Some(kind) {
        return None;
    }
    let owner = r["name"].as_str()?;
    Some((
        ObjectKey::new(obj.namespace(), owner),
        r["uid"].as_str().unwrap_or("").to_string(),
    ))
}

/// The objects of `store` in `owner`'s namespace that `owner` controls (by uid).
pub fn owned(store: &keel_runtime::Store, owner: &Value) -> Vec<std::sync::Arc<Value>> {
    store
        .by_index(keel_runtime::BY_NAMESPACE, owner.namespace())
        .into_iter()
        .filter(|o| o.controller_uid() == Some(owner.uid()))
        .collect()
}

/// The ownerReference a controller puts on what it creates or adopts.
pub fn controller_reference(owner: &Value) -> Value {
    json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner.name(),
        "uid": owner.uid(),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// A strategic merge patch adopting `obj` (by uid, so a replaced object is not adopted).
pub fn adopt_patch(owner: &Value, obj: &Value) -> Value {
    json!({"metadata": {"ownerReferences": [controller_reference(owner)], "uid": obj.uid()}})
}

/// A strategic merge patch releasing `obj` from the owner with this uid.
pub fn release_patch(owner_uid: &str, obj: &Value) -> Value {
    json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner_uid}], "uid": obj.uid()}})
}

/// `spec.selector` (matchLabels and matchExpressions) as a label selector. An empty or absent
/// selector is an error: it would select everything, and the API server refuses it anyway.
pub fn selector(obj: &Value) -> Result<LabelSelector, String> {
    label_selector(&obj["spec"]["selector"])
        .map_err(|e| format!("spec.selector: {e}"))?
        .ok_or_else(|| "spec.selector: empty".to_string())
}

/// A `LabelSelector` object (matchLabels and matchExpressions) in selector form; `None` when
/// it has no requirement (Kubernetes: it selects everything).
pub fn label_selector(sel: &Value) -> Result<Option<LabelSelector>, String> {
    let mut parts = Vec::new();
    if let Some(m) = sel["matchLabels"].as_object() {
        for (k, v) in m {
            parts.push(format!("{k}={}", v.as_str().unwrap_or("")));
        }
    }
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("");
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match e["operator"].as_str().unwrap_or("") {
            "In" => parts.push(format!("{key} in ({})", values.join(","))),
            "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
            "Exists" => parts.push(key.to_string()),
            "DoesNotExist" => parts.push(format!("!{key}")),
            op => return Err(format!("unknown operator {op:?}")),
        }
    }
    if parts.is_empty() {
        return Ok(None);
    }
    LabelSelector::parse(&parts.join(","))
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Whether the selector selects this object by its labels.
pub fn selects(sel: &LabelSelector, obj: &Value) -> bool {
    sel.matches(|k| obj.label(k).map(str::to_string))
}

/// A Pod that counts: not finished, not being deleted.
pub fn pod_is_active(pod: &Value) -> bool {
    !pod.is_deleting()
        && !matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded") | Some("Failed")
        )
}

fn pod_condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a Value> {
    pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"].as_str() == Some(kind))
}

pub fn pod_is_ready(pod: &Value) -> bool {
    pod_condition(pod, "Ready").is_some_and(|c| c["status"].as_str() == Some("True"))
}

/// Ready for at least `min_ready` (a Deployment's `minReadySeconds`) at `now`.
pub fn pod_is_available(pod: &Value, min_ready: Duration, now: SystemTime) -> bool {
    if !pod_is_ready(pod) {
        return false;
    }
    if min_ready.is_zero() {
        return true;
    }
    pod_condition(pod, "Ready")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(parse_time)
        .is_some_and(|since| since + min_ready <= now)
}

pub fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(s).ok()
}

/// RFC 3339 in seconds, as Kubernetes writes `metav1.Time`.
pub fn format_time(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

pub fn now_rfc3339() -> String {
    format_time(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_from_match_labels_and_expressions() {
        let d = json!({"spec": {"selector": {
        "matchLabels": {"app": "nginx"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["web", "api"]},
            {"key": "canary", "operator": "DoesNotExist"},
        ]}}});
        let s = selector(&d).unwrap();
        let pod = |l: Value| json!({"metadata": {"labels": l}});
        assert!(selects(&s, &pod(json!({"app": "nginx", "tier": "web"}))));
        assert!(!selects(&s, &pod(json!({"app": "nginx", "tier": "db"}))));
        assert!(!selects(
            &s,
            &pod(json!({"app": "nginx", "tier": "web", "canary": "1"}))
        ));
        assert!(!selects(&s, &pod(json!({"tier": "web"}))));
        assert!(selector(&json!({"spec": {"selector": {}}})).is_err());
        assert!(selector(&json!({"spec": {}})).is_err());
    }

    #[test]
    fn controller_of_needs_the_kind() {
        let pod = json!({"metadata": {"namespace": "ns", "ownerReferences": [
            {"kind": "ReplicaSet", "name": "web-1", "uid": "u1", "controller": true}]}});
        let (key, uid) = controller_of(&pod, "ReplicaSet").unwrap();
        assert_eq!((key.to_string(), uid.as_str()), ("ns/web-1".into(), "u1"));
        assert!(controller_of(&pod, "Deployment").is_none());
        let not_controller = json!({"metadata": {"ownerReferences": [
            {"kind": "ReplicaSet", "name": "web-1", "uid": "u1"}]}});
        assert!(controller_of(&not_controller, "ReplicaSet").is_none());
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let pod = json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        let t0 = parse_time("2026-01-01T00:00:00Z").unwrap();
        assert!(pod_is_available(&pod, Duration::ZERO, t0));
        assert!(!pod_is_available(&pod, Duration::from_secs(5), t0));
        assert!(pod_is_available(
            &pod,
            Duration::from_secs(5),
            t0 + Duration::from_secs(5)
        ));
        assert!(!pod_is_ready(&json!({"status": {"phase": "Pending"}})));
        assert!(!pod_is_active(
            &json!({"metadata": {"deletionTimestamp": "x"}})
        ));
        assert!(!pod_is_active(&json!({"status": {"phase": "Failed"}})));
        assert!(pod_is_active(&json!({"status": {"phase": "Pending"}})));
    }
}
