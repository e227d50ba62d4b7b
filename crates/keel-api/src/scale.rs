//! The `scale` subresource: a workload seen as an `autoscaling/v1` `Scale` (what `kubectl
//! scale` and autoscalers read and patch), for the kinds that have `spec.replicas` and a label
//! selector (which kinds have it is the server's kinds' to say).

use serde_json::{Value, json};

use crate::{ApiError, FieldCause, Object, Target};

/// A `LabelSelector` object in selector syntax (`app=web,tier in (a,b)`), as `Scale.status`
/// carries it.
fn selector(sel: &Value) -> String {
    crate::selector::label_selector(sel)
}

/// The `Scale` of a workload: its desired replicas, and those it has.
pub fn view(obj: &Object) -> Value {
    let o = obj.as_map();
    let meta = &o.get("metadata").cloned().unwrap_or(Value::Null);
    let spec = o.get("spec").cloned().unwrap_or(Value::Null);
    let status = o.get("status").cloned().unwrap_or(Value::Null);
    let mut metadata = serde_json::Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(field) {
            metadata.insert(field.into(), v.clone());
        }
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": spec["replicas"].as_i64().unwrap_or(0)},
        "status": {
            "replicas": status["replicas"].as_i64().unwrap_or(0),
            "selector": selector(&spec["selector"]),
        },
    })
}

/// The replicas a `Scale` asks for: `spec.replicas`, a non-negative integer (`Invalid`
/// naming the field otherwise).
pub fn replicas(scale: &Value, target: &Target) -> Result<i64, ApiError> {
    let r = &scale["spec"]["replicas"];
    match r.as_i64() {
        Some(n) if n >= 0 => Ok(n),
        _ => Err(ApiError::invalid(
            Target {
                kind: "Scale".into(),
                group: "autoscaling".into(),
                ..target.clone()
            },
            vec![FieldCause::invalid(
                "spec.replicas",
                &r.to_string(),
                "must be greater than or equal to 0",
            )],
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deployment_is_seen_as_its_scale_and_scaled_by_it() {
        let d = Object::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "u", "resourceVersion": "7", "labels": {"a": "b"}},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"replicas": 2},
        }))
        .unwrap();
        let s = view(&d);
        assert_eq!(s["spec"], json!({"replicas": 3}));
        assert_eq!(s["status"], json!({"replicas": 2, "selector": "app=web"}));
        assert_eq!(s["metadata"]["resourceVersion"], "7");
        assert!(s["metadata"].get("labels").is_none());
        let t = Target::new("apps", "deployments", "web");
        assert_eq!(replicas(&json!({"spec": {"replicas": 5}}), &t).unwrap(), 5);
        let e = replicas(&json!({"spec": {"replicas": -1}}), &t).unwrap_err();
        assert_eq!(e.causes[0].field, "spec.replicas");
        assert!(replicas(&json!({"spec": {}}), &t).is_err());
    }
}
