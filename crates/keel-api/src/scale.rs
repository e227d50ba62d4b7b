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

/// Where an object keeps what its `Scale` shows: a workload's `spec.replicas`,
/// `status.replicas` and `spec.selector` (a `LabelSelector`), or the paths a CRD version's
/// `subresources.scale` names (`specReplicasPath`, ... : JSON paths such as `.spec.replicas`;
/// its selector is already in string form, as Kubernetes requires).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas: Vec<String>,
    pub status_replicas: Vec<String>,
    pub label_selector: Option<Vec<String>>,
    /// Whether the selector is a `LabelSelector` object (a workload's), not a string.
    pub selector_is_object: bool,
}

impl ScalePaths {
    /// Deployments', ReplicaSets' and StatefulSets'.
    pub fn workload() -> ScalePaths {
        let path = |p: &str| p.split('.').map(str::to_string).collect();
        ScalePaths {
            spec_replicas: path("spec.replicas"),
            status_replicas: path("status.replicas"),
            label_selector: Some(path("spec.selector")),
            selector_is_object: true,
        }
    }

    /// A CRD version's `subresources.scale`, if it is well-formed (CRD validation refuses
    /// what is not: a path must be `.`-separated field names).
    pub fn from_crd(scale: &Value) -> Option<ScalePaths> {
        let path = |field: &str| -> Option<Vec<String>> {
            let p = scale.get(field)?.as_str()?;
            let fields: Vec<String> = p
                .strip_prefix('.')?
                .split('.')
                .map(str::to_string)
                .collect();
            fields.iter().all(|f| !f.is_empty()).then_some(fields)
        };
        Some(ScalePaths {
            spec_replicas: path("specReplicasPath")?,
            status_replicas: path("statusReplicasPath")?,
            label_selector: path("labelSelectorPath"),
            selector_is_object: false,
        })
    }
}

/// The value at `path` in `v`, if any.
fn at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, f| v.get(f))
}

/// The `Scale` of a workload: its desired replicas, and those it has.
pub fn view(obj: &Object) -> Value {
    view_at(obj, &ScalePaths::workload())
}

/// The `Scale` of `obj`, whose replicas and selector are where `paths` say.
pub fn view_at(obj: &Object, paths: &ScalePaths) -> Value {
    let o = Value::Object(obj.as_map().clone());
    let meta = o.get("metadata").cloned().unwrap_or(Value::Null);
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
    let replicas = |p: &[String]| at(&o, p).and_then(Value::as_i64).unwrap_or(0);
    let mut status = json!({"replicas": replicas(&paths.status_replicas)});
    let selector = paths.label_selector.as_ref().and_then(|p| at(&o, p));
    let selector = match selector {
        Some(sel) if paths.selector_is_object => Some(self::selector(sel)),
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    if let Some(sel) = selector {
        status["selector"] = Value::String(sel);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": {"replicas": replicas(&paths.spec_replicas)},
        "status": status,
    })
}

/// Sets the desired replicas of `obj` where `paths` keep them, making the objects on the way.
pub fn set_replicas(obj: &mut Object, paths: &ScalePaths, replicas: i64) {
    let Some((last, parents)) = paths.spec_replicas.split_last() else {
        return;
    };
    let mut m = obj.as_map_mut();
    for f in parents {
        let next = m
            .entry(f.clone())
            .or_insert_with(|| Value::Object(Default::default()));
        if !next.is_object() {
            *next = Value::Object(Default::default());
        }
        let Value::Object(inner) = next else {
            return;
        };
        m = inner;
    }
    m.insert(last.clone(), replicas.into());
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
            vec![FieldCause::invalid_value(
                "spec.replicas",
                r,
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

    #[test]
    fn a_custom_object_is_seen_and_scaled_where_its_crd_says() {
        let paths = ScalePaths::from_crd(&json!({"specReplicasPath": ".spec.size",
            "statusReplicasPath": ".status.count", "labelSelectorPath": ".status.selector"}))
        .unwrap();
        let mut w = Object::from_value(json!({
            "apiVersion": "ex.com/v1", "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "default"},
            "spec": {"size": 2}, "status": {"count": 1, "selector": "app=w"},
        }))
        .unwrap();
        let s = view_at(&w, &paths);
        assert_eq!(s["spec"], json!({"replicas": 2}));
        assert_eq!(s["status"], json!({"replicas": 1, "selector": "app=w"}));
        set_replicas(&mut w, &paths, 5);
        assert_eq!(w.as_map()["spec"], json!({"size": 5}));
        // Missing fields are 0, and no selector path means no selector.
        let bare = ScalePaths::from_crd(&json!({"specReplicasPath": ".spec.r",
            "statusReplicasPath": ".status.r"}))
        .unwrap();
        let mut empty = Object::from_value(json!({"metadata": {"name": "e"}})).unwrap();
        assert_eq!(view_at(&empty, &bare)["status"], json!({"replicas": 0}));
        set_replicas(&mut empty, &bare, 3);
        assert_eq!(empty.as_map()["spec"], json!({"r": 3}));
        assert!(
            ScalePaths::from_crd(&json!({"specReplicasPath": "spec.r",
            "statusReplicasPath": ".status.r"}))
            .is_none()
        );
    }
}
