//! The sidecar injection, as the seeds tell it: the `envoy-initializer` ConfigMap's
//! `data.config` holds the containers and volumes to add; the desired Pod is a copy of the
//! live one with them merged in by name and this initializer's name gone from
//! `metadata.initializers.pending`; the PATCH is the two-way strategic merge patch between the
//! two. Merging by name makes a second run a no-op, so several replicas are safe. The webhook
//! mode makes the same injection ([`injected_pod`]) and answers it as a JSON Patch. Pure: no
//! I/O.

use keel_client::Metadata;
use keel_patch::{BuiltinSchema, PatchError, create_two_way_merge_patch};
use serde_json::{Map, Value};

/// What goes into every Pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Sidecar {
    pub containers: Vec<Value>,
    pub volumes: Vec<Value>,
}

/// Why the ConfigMap's `data.config` cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The ConfigMap has no `data.config`.
    #[error("the ConfigMap has no data.config")]
    Missing,
    /// `data.config` is not YAML (or JSON) of a mapping.
    #[error("data.config is not valid YAML: {0}")]
    Yaml(String),
    /// A container or volume without a name cannot be merged by name.
    #[error("data.config: {0} must be a list of objects, each with a name")]
    Unnamed(&'static str),
}

impl Sidecar {
    /// Reads `data.config` of the ConfigMap.
    pub fn from_configmap(cm: &Value) -> Result<Sidecar, ConfigError> {
        let text = cm["data"]["config"].as_str().ok_or(ConfigError::Missing)?;
        Sidecar::from_config(text)
    }

    /// Parses the config YAML: `containers` and `volumes` lists, either may be absent.
    pub fn from_config(text: &str) -> Result<Sidecar, ConfigError> {
        let doc: Value =
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Yaml(e.to_string()))?;
        if !doc.is_object() {
            return Err(ConfigError::Yaml("expected a mapping".into()));
        }
        let list = |field: &'static str| -> Result<Vec<Value>, ConfigError> {
            match &doc[field] {
                Value::Null => Ok(Vec::new()),
                Value::Array(items) if items.iter().all(|i| i["name"].is_string()) => {
                    Ok(items.clone())
                }
                _ => Err(ConfigError::Unnamed(field)),
            }
        };
        Ok(Sidecar {
            containers: list("containers")?,
            volumes: list("volumes")?,
        })
    }
}

/// Adds each item whose name the list lacks; items already there are left as they are.
fn merge_by_name(list: &mut Vec<Value>, items: &[Value]) {
    for item in items {
        if !list.iter().any(|x| x["name"] == item["name"]) {
            list.push(item.clone());
        }
    }
}

/// The Pod with the sidecar: each container and volume of `sidecar` whose name the Pod lacks
/// is appended to `spec.containers` or `spec.volumes`; those it has are left as they are, so
/// injecting twice is injecting once. The one injection both modes make: the initializer's
/// [`desired_pod`] and the webhook's answer ([`crate::webhook::admission`]).
pub fn injected_pod(pod: &Value, sidecar: &Sidecar) -> Value {
    let mut injected = pod.clone();
    if let Some(spec) = injected.get_mut("spec").and_then(Value::as_object_mut) {
        for (field, items) in [
            ("containers", &sidecar.containers),
            ("volumes", &sidecar.volumes),
        ] {
            if items.is_empty() {
                continue;
            }
            let entry = spec
                .entry(field)
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(list) = entry {
                merge_by_name(list, items);
            }
        }
    }
    injected
}

/// The Pod as this initializer wants it: the sidecar injected ([`injected_pod`]), its own name
/// out of `pending`.
pub fn desired_pod(pod: &Value, sidecar: &Sidecar, initializer: &str) -> Value {
    let mut desired = injected_pod(pod, sidecar);
    if let Some(init) = desired["metadata"]
        .get_mut("initializers")
        .and_then(Value::as_object_mut)
    {
        if let Some(Value::Array(pending)) = init.get_mut("pending") {
            pending.retain(|p| p["name"].as_str() != Some(initializer));
        }
        if init
            .get("pending")
            .and_then(Value::as_array)
            .is_some_and(|p| p.is_empty())
        {
            init.remove("pending");
        }
    }
    desired
}

/// The strategic merge patch that injects the sidecar and removes this initializer from
/// `pending`, with the Pod's uid as a precondition (a Pod replaced meanwhile is not patched);
/// `None` when the Pod is already as desired.
pub fn injection_patch(
    pod: &Value,
    sidecar: &Sidecar,
    initializer: &str,
) -> Result<Option<Value>, PatchError> {
    let desired = desired_pod(pod, sidecar, initializer);
    let schema = BuiltinSchema::for_kind("v1", "Pod")
        .ok_or_else(|| PatchError::Malformed("no merge keys are known for v1 Pod".into()))?;
    let mut patch = create_two_way_merge_patch(pod, &desired, &schema)?;
    if patch.as_object().is_none_or(Map::is_empty) {
        return Ok(None);
    }
    if !pod.uid().is_empty() {
        patch["metadata"]["uid"] = Value::String(pod.uid().to_string());
    }
    Ok(Some(patch))
}

/// Whether `initializer` is the one to act: the head of `pending`.
pub fn is_next(pod: &Value, initializer: &str) -> bool {
    pod.pending_initializers().first() == Some(&initializer)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use keel_patch::apply_strategic_merge_patch;
    use serde_json::json;

    const NAME: &str = "envoy.initializer.kubernetes.io";

    use super::testing::CONFIG;

    fn myapp_pod(pending: &[&str]) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "myapp-pod", "uid": "u-1", "labels": {"app": "myapp"},
                "initializers": {"pending": pending.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()}},
            "spec": {"containers": [{"name": "myapp-container", "image": "busybox",
                "command": ["sh", "-c", "echo Hello Kubernetes! && sleep 3600"]}]}
        })
    }

    fn names(v: &Value) -> Vec<&str> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn the_seed_config_injects_envoy_and_its_volume_and_clears_pending() {
        let sidecar = Sidecar::from_config(CONFIG).unwrap();
        let pod = myapp_pod(&[NAME]);
        let patch = injection_patch(&pod, &sidecar, NAME).unwrap().unwrap();
        assert_eq!(patch["metadata"]["uid"], "u-1", "a precondition on the Pod");
        let schema = BuiltinSchema::for_kind("v1", "Pod").unwrap();
        let patched = apply_strategic_merge_patch(&pod, &patch, &schema).unwrap();
        assert_eq!(
            names(&patched["spec"]["containers"]),
            ["myapp-container", "envoy"]
        );
        assert_eq!(
            patched["spec"]["containers"][0],
            pod["spec"]["containers"][0]
        );
        assert_eq!(names(&patched["spec"]["volumes"]), ["envoy-conf"]);
        assert!(
            patched["metadata"]["initializers"]["pending"]
                .as_array()
                .is_none_or(|p| p.is_empty()),
            "{patched}"
        );
        // A second run on the injected Pod changes nothing.
        let mut done = patched.clone();
        done["metadata"]["initializers"] = json!({});
        assert_eq!(injection_patch(&done, &sidecar, NAME).unwrap(), None);
    }

    #[test]
    fn only_its_own_name_leaves_pending_and_only_the_head_acts() {
        let sidecar = Sidecar::from_config(CONFIG).unwrap();
        let pod = myapp_pod(&[NAME, "other.example.com"]);
        assert!(is_next(&pod, NAME));
        assert!(!is_next(&pod, "other.example.com"));
        let desired = desired_pod(&pod, &sidecar, NAME);
        assert_eq!(
            desired["metadata"]["initializers"]["pending"],
            json!([{"name": "other.example.com"}])
        );
    }

    #[test]
    fn an_existing_container_of_the_same_name_is_left_alone() {
        let sidecar = Sidecar::from_config(CONFIG).unwrap();
        let mut pod = myapp_pod(&[NAME]);
        pod["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "envoy", "image": "my/envoy:1"}));
        let desired = desired_pod(&pod, &sidecar, NAME);
        let envoy = &desired["spec"]["containers"][1];
        assert_eq!(envoy["image"], "my/envoy:1");
    }

    #[test]
    fn bad_configs_are_typed_errors() {
        assert_eq!(
            Sidecar::from_configmap(&json!({"data": {}})),
            Err(ConfigError::Missing)
        );
        assert!(matches!(
            Sidecar::from_config("containers: [unclosed"),
            Err(ConfigError::Yaml(_))
        ));
        assert_eq!(
            Sidecar::from_config("containers:\n  - image: x\n"),
            Err(ConfigError::Unnamed("containers"))
        );
        assert_eq!(
            Sidecar::from_config("volumes: 3\n"),
            Err(ConfigError::Unnamed("volumes"))
        );
        assert_eq!(
            Sidecar::from_config("{}\n").unwrap(),
            Sidecar {
                containers: vec![],
                volumes: vec![]
            }
        );
    }
}

/// What the crate's tests share: the seeds' `envoy-initializer` sidecar config.
#[cfg(test)]
pub(crate) mod testing {
    /// The seeds' `envoy-initializer` config (deploy/examples/envoy-initializer.yaml's).
    pub(crate) const CONFIG: &str = "\
containers:
  - name: envoy
    image: lyft/envoy:845747db88f102c0fd262ab234308e9e22f693a1
    command: [\"/usr/local/bin/envoy\"]
    args:
      - \"--concurrency 4\"
      - \"--config-path /etc/envoy/envoy.json\"
      - \"--mode serve\"
    ports:
      - containerPort: 80
        protocol: TCP
    volumeMounts:
      - name: envoy-conf
        mountPath: /etc/envoy
volumes:
  - name: envoy-conf
    configMap:
      name: envoy
";
}
