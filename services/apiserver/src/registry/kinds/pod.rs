//! `v1` Pod: a pod spec with named containers and images, `Pending` at birth, evictable, and
//! its spec fixed once it is initialized (but for images, the active deadline and added
//! tolerations, as Kubernetes' pod update validation has it).

use keel_api::validation::dns1123_label;
use keel_api::{FieldCause, Metadata, Object};
use serde_json::{Map, Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, items_mut, set_default};
use crate::registry::initializers;

pub struct Pod {
    merge: Option<MergeKeys>,
}

impl Pod {
    pub fn new() -> Self {
        Pod {
            merge: builtin_merge_keys("v1", "Pod"),
        }
    }
}

impl Kind for Pod {
    /// Kubernetes' Pod fields but `spec.hostNetwork` (a missing boolean would compare as
    /// `""`, not Go's `false`).
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ]
    }

    /// `eviction` is created only (`POST pods/NAME/eviction`, the request layer's `Evict`),
    /// never read or written as the others are.
    fn subresources(&self) -> &'static [&'static str] {
        &["eviction"]
    }

    fn initial_status(&self) -> Option<Value> {
        Some(json!({"phase": "Pending"}))
    }

    /// The ServiceAccount admission's part of a new Pod: it runs as `default` unless it
    /// names another.
    fn prepare_for_create(&self, obj: &mut Object) {
        if let Some(spec) = obj
            .as_map_mut()
            .get_mut("spec")
            .and_then(Value::as_object_mut)
        {
            // `serviceAccount` is the deprecated alias Kubernetes still reads when the name is
            // not given.
            let given = |f: &str| {
                spec.get(f)
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
            };
            let name = given("serviceAccountName")
                .or_else(|| given("serviceAccount"))
                .unwrap_or("default")
                .to_string();
            spec.insert("serviceAccountName".into(), json!(name));
            spec.insert("serviceAccount".into(), json!(name));
        }
    }

    fn defaults(&self, obj: &mut Object) {
        if let Some(spec) = obj
            .as_map_mut()
            .get_mut("spec")
            .and_then(Value::as_object_mut)
        {
            pod_spec_defaults(spec);
        }
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        pod_spec(obj.as_map().get("spec"), "spec", causes);
    }

    /// While a Pod is uninitialized its initializers may change anything (that is their
    /// point); once it is initialized, its spec is fixed.
    fn prepare_for_update(&self, new: &mut Object, old: &Object, causes: &mut Vec<FieldCause>) {
        if old.is_initialized() {
            causes.extend(initializers::check_pod_spec_update(old, new));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}

/// A pod spec at `path`: containers (and init containers) each with a DNS-1123 label name,
/// unique, and an image.
pub(super) fn pod_spec(spec: Option<&Value>, path: &str, causes: &mut Vec<FieldCause>) {
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

/// Kubernetes' v1 defaults of a pod spec (`SetDefaults_PodSpec`, `_Container`, `_Probe`,
/// `_HTTPGetAction`, `_ContainerPort`, the volume sources): what `get -o yaml` shows on a real
/// cluster for a spec that left them out.
pub(super) fn pod_spec_defaults(spec: &mut Map<String, Value>) {
    for (field, default) in [
        ("restartPolicy", json!("Always")),
        ("dnsPolicy", json!("ClusterFirst")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("securityContext", json!({})),
        ("schedulerName", json!("default-scheduler")),
        ("enableServiceLinks", json!(true)),
    ] {
        set_default(spec, field, default);
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        items_mut(spec, list).for_each(container_defaults);
    }
    items_mut(spec, "volumes").for_each(volume_defaults);
}

/// The defaults of the pod template at `path` below a workload (`spec.template`): its spec's.
pub(super) fn template_defaults(obj: &mut Object, path: &[&str]) {
    let mut at = Some(obj.as_map_mut());
    for field in path {
        at = at
            .and_then(|m| m.get_mut(*field))
            .and_then(Value::as_object_mut);
    }
    let Some(template) = at else {
        return;
    };
    if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
        pod_spec_defaults(spec);
    }
}

fn container_defaults(c: &mut Map<String, Value>) {
    let policy = c
        .get("image")
        .and_then(Value::as_str)
        .map(image_pull_policy);
    if let Some(policy) = policy {
        set_default(c, "imagePullPolicy", json!(policy));
    }
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    set_default(c, "resources", json!({}));
    for p in items_mut(c, "ports") {
        set_default(p, "protocol", json!("TCP"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(probe) = c.get_mut(probe).and_then(Value::as_object_mut) else {
            continue;
        };
        for (field, default) in [
            ("timeoutSeconds", 1),
            ("periodSeconds", 10),
            ("successThreshold", 1),
            ("failureThreshold", 3),
        ] {
            set_default(probe, field, json!(default));
        }
        if let Some(get) = probe.get_mut("httpGet").and_then(Value::as_object_mut) {
            set_default(get, "path", json!("/"));
            set_default(get, "scheme", json!("HTTP"));
        }
    }
    for env in c
        .get_mut("env")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(field_ref) = env
            .pointer_mut("/valueFrom/fieldRef")
            .and_then(Value::as_object_mut)
        {
            set_default(field_ref, "apiVersion", json!("v1"));
        }
    }
}

/// `Always` for an image with no tag or the `latest` tag, `IfNotPresent` for any other tag
/// or a digest (`SetDefaults_Container`).
fn image_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

/// A volume with no source is an `emptyDir`; secret, config map, downward API and projected
/// files are mode 0644 (420) unless said otherwise.
fn volume_defaults(v: &mut Map<String, Value>) {
    const SOURCES: &[&str] = &[
        "hostPath",
        "emptyDir",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "gitRepo",
        "secret",
        "nfs",
        "iscsi",
        "glusterfs",
        "persistentVolumeClaim",
        "rbd",
        "flexVolume",
        "cinder",
        "cephfs",
        "flocker",
        "downwardAPI",
        "fc",
        "azureFile",
        "configMap",
        "vsphereVolume",
        "quobyte",
        "azureDisk",
        "photonPersistentDisk",
        "projected",
        "portworxVolume",
        "scaleIO",
        "storageos",
        "csi",
        "ephemeral",
        "image",
    ];
    if !SOURCES
        .iter()
        .any(|s| v.get(*s).is_some_and(|x| !x.is_null()))
    {
        v.insert("emptyDir".into(), json!({}));
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = v.get_mut(source).and_then(Value::as_object_mut) {
            set_default(s, "defaultMode", json!(420));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_pod_runs_as_the_account_it_names_by_either_field_or_as_default() {
        for (spec, want) in [
            (json!({"serviceAccountName": "a"}), "a"),
            (json!({"serviceAccount": "b"}), "b"),
            (json!({}), "default"),
        ] {
            let mut pod =
                Object::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap();
            Pod::new().prepare_for_create(&mut pod);
            let spec = &pod.as_map()["spec"];
            assert_eq!(
                (&spec["serviceAccountName"], &spec["serviceAccount"]),
                (&json!(want), &json!(want))
            );
        }
    }

    #[test]
    fn a_pod_spec_gets_kubernetes_defaults_and_keeps_what_it_says() {
        let mut spec = json!({
            "restartPolicy": "Never",
            "containers": [
                {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}],
                 "readinessProbe": {"httpGet": {"port": "http"}}},
                {"name": "b", "image": "registry:5000/app:1.2", "imagePullPolicy": "Never"},
                {"name": "c", "image": "app@sha256:abc"},
                {"name": "d", "image": "app:latest"},
            ],
            "volumes": [{"name": "scratch"}, {"name": "s", "secret": {"secretName": "x"}}],
        });
        let Value::Object(spec) = &mut spec else {
            unreachable!()
        };
        pod_spec_defaults(spec);
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["schedulerName"], "default-scheduler");
        let c = &spec["containers"];
        let policies: Vec<&Value> = (0..4).map(|i| &c[i]["imagePullPolicy"]).collect();
        assert_eq!(policies, ["Always", "Never", "IfNotPresent", "Always"]);
        assert_eq!(c[0]["ports"][0]["protocol"], "TCP");
        assert_eq!(c[0]["terminationMessagePath"], "/dev/termination-log");
        let probe = &c[0]["readinessProbe"];
        assert_eq!(
            (
                &probe["periodSeconds"],
                &probe["httpGet"]["scheme"],
                &probe["httpGet"]["path"]
            ),
            (&json!(10), &json!("HTTP"), &json!("/"))
        );
        assert_eq!(spec["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(spec["volumes"][1]["secret"]["defaultMode"], 420);
        assert!(spec["volumes"][1].get("emptyDir").is_none());
    }
}
