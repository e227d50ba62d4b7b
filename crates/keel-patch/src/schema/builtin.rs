//! The merge keys of the built-in kinds, as Kubernetes declares them in its Go types.

use serde_json::Value;

use super::{ListStrategy, MergeSchema, object_meta_list};

/// The merge rules of one built-in kind. Built with [`BuiltinSchema::for_kind`]; kinds it does
/// not know have no merge keys, and the API server refuses strategic patches for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinSchema {
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pod,
    ConfigMap,
    Namespace,
    Event,
    Deployment,
    ReplicaSet,
    Lease,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
    Service,
    ServiceAccount,
    Node,
    /// A built-in kind whose lists all replace but `status.conditions`.
    Other,
}

/// How one list field merges (or, for `retain_keys` maps, that the map is a union).
#[derive(Debug, Clone, Copy)]
struct Field {
    keys: &'static [&'static str],
    retain_keys: bool,
}

const fn keyed(keys: &'static [&'static str]) -> Field {
    Field {
        keys,
        retain_keys: false,
    }
}

const fn keyed_union(keys: &'static [&'static str]) -> Field {
    Field {
        keys,
        retain_keys: true,
    }
}

/// Lists of a pod spec, by field name wherever they occur below the spec (containers, init
/// and ephemeral containers share `env`, `ports`, `volumeMounts`). `tolerations`,
/// `readinessGates`, `envFrom` and the rest declare no strategy in Kubernetes: they replace.
const POD_SPEC_FIELDS: &[(&str, Field)] = &[
    ("containers", keyed(&["name"])),
    ("initContainers", keyed(&["name"])),
    ("ephemeralContainers", keyed(&["name"])),
    ("env", keyed(&["name"])),
    ("volumes", keyed_union(&["name"])),
    ("volumeMounts", keyed(&["mountPath"])),
    ("volumeDevices", keyed(&["devicePath"])),
    // Kubernetes merges on containerPort alone, which conflates 53/TCP and 53/UDP; its list
    // map keys (containerPort, protocol) are the better identity.
    ("ports", keyed(&["containerPort", "protocol"])),
    ("imagePullSecrets", keyed(&["name"])),
    ("hostAliases", keyed(&["ip"])),
    ("topologySpreadConstraints", keyed(&["topologyKey"])),
    ("schedulingGates", keyed(&["name"])),
    ("resourceClaims", keyed_union(&["name"])),
];

const CONDITIONS: Field = keyed(&["type"]);

/// A map (not a list) whose patches carry `$retainKeys`.
const UNION: Field = Field {
    keys: &[],
    retain_keys: true,
};

impl BuiltinSchema {
    /// The schema of a built-in kind keel serves. `None` for anything else (custom
    /// resources): no merge keys are known, so a strategic patch cannot be applied.
    pub fn for_kind(api_version: &str, kind: &str) -> Option<Self> {
        let kind = match (api_version, kind) {
            ("v1", "Pod") => Kind::Pod,
            ("v1", "ConfigMap") => Kind::ConfigMap,
            ("v1", "Namespace") => Kind::Namespace,
            ("v1", "Event") => Kind::Event,
            ("apps/v1", "Deployment") => Kind::Deployment,
            ("apps/v1", "ReplicaSet") => Kind::ReplicaSet,
            ("coordination.k8s.io/v1", "Lease") => Kind::Lease,
            ("apps/v1", "StatefulSet") => Kind::StatefulSet,
            ("apps/v1", "DaemonSet") => Kind::DaemonSet,
            ("batch/v1", "Job") => Kind::Job,
            ("batch/v1", "CronJob") => Kind::CronJob,
            ("v1", "Service") => Kind::Service,
            ("v1", "ServiceAccount") => Kind::ServiceAccount,
            ("v1", "Node") => Kind::Node,
            (
                "v1",
                "Secret"
                | "Endpoints"
                | "PersistentVolumeClaim"
                | "PersistentVolume"
                | "ResourceQuota"
                | "LimitRange",
            )
            | ("apps/v1", "ControllerRevision")
            | ("networking.k8s.io/v1", "Ingress" | "IngressClass" | "NetworkPolicy")
            | ("discovery.k8s.io/v1", "EndpointSlice")
            | ("autoscaling/v2" | "autoscaling/v1", "HorizontalPodAutoscaler")
            | ("policy/v1", "PodDisruptionBudget")
            | ("scheduling.k8s.io/v1", "PriorityClass")
            | ("storage.k8s.io/v1", "StorageClass")
            | (
                "rbac.authorization.k8s.io/v1",
                "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding",
            )
            | (
                "apiextensions.k8s.io/v1" | "apiextensions.k8s.io/v1beta1",
                "CustomResourceDefinition",
            )
            | ("admissionregistration.k8s.io/v1alpha1", "InitializerConfiguration") => Kind::Other,
            _ => return None,
        };
        Some(Self { kind })
    }

    /// Where the kind keeps a pod spec.
    fn pod_spec(&self) -> Option<&'static [&'static str]> {
        match self.kind {
            Kind::Pod => Some(&["spec"]),
            Kind::Deployment
            | Kind::ReplicaSet
            | Kind::StatefulSet
            | Kind::DaemonSet
            | Kind::Job => Some(&["spec", "template", "spec"]),
            Kind::CronJob => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
            _ => None,
        }
    }

    /// Where the kind keeps an `ObjectMeta`: its own, and its pod template's.
    fn object_metas(&self) -> &'static [&'static [&'static str]] {
        match self.kind {
            Kind::Deployment
            | Kind::ReplicaSet
            | Kind::StatefulSet
            | Kind::DaemonSet
            | Kind::Job => &[&["metadata"], &["spec", "template", "metadata"]],
            Kind::CronJob => &[
                &["metadata"],
                &["spec", "jobTemplate", "metadata"],
                &["spec", "jobTemplate", "spec", "template", "metadata"],
            ],
            _ => &[&["metadata"]],
        }
    }

    /// Fields of the kind outside any pod spec or object meta.
    fn own_field(&self, path: &[&str]) -> Option<Field> {
        match (self.kind, path) {
            (_, ["status", "conditions"]) => Some(CONDITIONS),
            (Kind::Pod, ["status", "podIPs" | "hostIPs"]) => Some(keyed(&["ip"])),
            (Kind::Deployment, ["spec", "strategy"]) => Some(UNION),
            // Kubernetes merges on port alone; its list map keys (port, protocol) are the
            // better identity, as for a container's ports.
            (Kind::Service, ["spec", "ports"]) => Some(keyed(&["port", "protocol"])),
            (Kind::ServiceAccount, ["secrets"]) => Some(keyed(&["name"])),
            (Kind::ServiceAccount, ["imagePullSecrets"]) => Some(keyed(&["name"])),
            (Kind::Node, ["status", "addresses"]) => Some(keyed(&["type"])),
            _ => None,
        }
    }

    fn field(&self, path: &[&str]) -> Option<Field> {
        if let Some(field) = self.own_field(path) {
            return Some(field);
        }
        let prefix = self.pod_spec()?;
        let rest = path.strip_prefix(prefix)?;
        let name = rest.last()?;
        POD_SPEC_FIELDS
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, field)| *field)
    }
}

/// Atomic structs and maps of a pod spec, by the field's own name wherever it is below the
/// spec (an env var's `secretKeyRef`, ...), and their paths from the spec.
const POD_SPEC_ATOMIC_FIELDS: &[&str] = &[
    "secretKeyRef",
    "configMapKeyRef",
    "fieldRef",
    "resourceFieldRef",
    "imagePullSecrets",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "labelSelector",
    "namespaceSelector",
];
const POD_SPEC_ATOMIC_PATHS: &[&[&str]] = &[&["nodeSelector"]];

impl MergeSchema for BuiltinSchema {
    /// docs/server-side-apply.md §5.4: `LabelSelector`s, `OwnerReference`s, object
    /// references, key selectors, a pod's `nodeSelector`, a Service's `selector`.
    fn map_atomic(&self, path: &[&str]) -> bool {
        for meta in self.object_metas() {
            if let Some(rest) = path.strip_prefix(*meta) {
                return rest == ["ownerReferences"];
            }
        }
        let workload_selector = matches!(
            self.kind,
            Kind::Deployment
                | Kind::ReplicaSet
                | Kind::StatefulSet
                | Kind::DaemonSet
                | Kind::Job
                | Kind::Service
        ) && path == ["spec", "selector"];
        if workload_selector {
            return true;
        }
        match self.pod_spec().and_then(|p| path.strip_prefix(p)) {
            Some(rest) => {
                POD_SPEC_ATOMIC_PATHS.contains(&rest)
                    || rest
                        .last()
                        .is_some_and(|name| POD_SPEC_ATOMIC_FIELDS.contains(name))
            }
            None => false,
        }
    }

    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        for meta in self.object_metas() {
            if let Some(rest) = path.strip_prefix(*meta) {
                return object_meta_list(rest).unwrap_or(ListStrategy::Replace);
            }
        }
        match self.field(path) {
            Some(field) if !field.keys.is_empty() => {
                ListStrategy::MergeByKeys(field.keys.iter().map(|k| (*k).to_owned()).collect())
            }
            _ => ListStrategy::Replace,
        }
    }

    fn retain_keys(&self, path: &[&str]) -> bool {
        self.field(path).is_some_and(|field| field.retain_keys)
    }

    fn merge_key_default(&self, path: &[&str], key: &str) -> Option<Value> {
        let in_pod_spec = self
            .pod_spec()
            .is_some_and(|prefix| path.starts_with(prefix));
        let service_ports = self.kind == Kind::Service && path == ["spec", "ports"];
        ((in_pod_spec || service_ports) && path.last() == Some(&"ports") && key == "protocol")
            .then(|| Value::String("TCP".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[&str]) -> ListStrategy {
        ListStrategy::MergeByKeys(k.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn only_the_built_in_kinds_have_a_schema() {
        for (api_version, kind) in [
            ("v1", "Pod"),
            ("v1", "ConfigMap"),
            ("v1", "Namespace"),
            ("v1", "Event"),
            ("apps/v1", "Deployment"),
            ("apps/v1", "ReplicaSet"),
            ("coordination.k8s.io/v1", "Lease"),
        ] {
            assert!(
                BuiltinSchema::for_kind(api_version, kind).is_some(),
                "{kind}"
            );
        }
        assert!(BuiltinSchema::for_kind("apps/v1", "Pod").is_none());
        assert!(BuiltinSchema::for_kind("v1", "Deployment").is_none());
        assert!(BuiltinSchema::for_kind("example.com/v1", "Widget").is_none());
    }

    #[test]
    fn manifest_kinds_merge_their_pod_templates_service_ports_and_conditions() {
        let cron = BuiltinSchema::for_kind("batch/v1", "CronJob").unwrap();
        let template = ["spec", "jobTemplate", "spec", "template"];
        assert_eq!(
            cron.list_strategy(&[&template[..], &["spec", "containers"]].concat()),
            keys(&["name"])
        );
        assert_eq!(
            cron.list_strategy(&[&template[..], &["metadata", "finalizers"]].concat()),
            ListStrategy::Set
        );
        for (api_version, kind) in [("apps/v1", "StatefulSet"), ("batch/v1", "Job")] {
            let schema = BuiltinSchema::for_kind(api_version, kind).unwrap();
            assert_eq!(
                schema.list_strategy(&["spec", "template", "spec", "volumes"]),
                keys(&["name"]),
                "{kind}"
            );
        }
        let svc = BuiltinSchema::for_kind("v1", "Service").unwrap();
        assert_eq!(
            svc.list_strategy(&["spec", "ports"]),
            keys(&["port", "protocol"])
        );
        assert_eq!(
            svc.merge_key_default(&["spec", "ports"], "protocol"),
            Some(Value::String("TCP".into()))
        );
        assert_eq!(
            svc.list_strategy(&["spec", "clusterIPs"]),
            ListStrategy::Replace
        );
        let secret = BuiltinSchema::for_kind("v1", "Secret").unwrap();
        assert_eq!(
            secret.list_strategy(&["status", "conditions"]),
            keys(&["type"])
        );
        assert!(BuiltinSchema::for_kind("batch/v1", "Secret").is_none());
    }

    #[test]
    fn pod_spec_lists_merge_by_their_declared_keys() {
        let pod = BuiltinSchema::for_kind("v1", "Pod").unwrap();
        let cases: &[(&[&str], ListStrategy)] = &[
            (&["spec", "containers"], keys(&["name"])),
            (&["spec", "initContainers"], keys(&["name"])),
            (&["spec", "ephemeralContainers"], keys(&["name"])),
            (&["spec", "containers", "env"], keys(&["name"])),
            (&["spec", "initContainers", "env"], keys(&["name"])),
            (&["spec", "volumes"], keys(&["name"])),
            (
                &["spec", "containers", "volumeMounts"],
                keys(&["mountPath"]),
            ),
            (
                &["spec", "containers", "volumeDevices"],
                keys(&["devicePath"]),
            ),
            (
                &["spec", "containers", "ports"],
                keys(&["containerPort", "protocol"]),
            ),
            (&["spec", "imagePullSecrets"], keys(&["name"])),
            (&["spec", "hostAliases"], keys(&["ip"])),
            (
                &["spec", "topologySpreadConstraints"],
                keys(&["topologyKey"]),
            ),
            (&["spec", "schedulingGates"], keys(&["name"])),
            (&["spec", "tolerations"], ListStrategy::Replace),
            (&["spec", "containers", "args"], ListStrategy::Replace),
            (&["spec", "containers", "envFrom"], ListStrategy::Replace),
            (&["status", "conditions"], keys(&["type"])),
            (&["status", "podIPs"], keys(&["ip"])),
            (&["metadata", "finalizers"], ListStrategy::Set),
            (&["metadata", "ownerReferences"], keys(&["uid"])),
            (&["metadata", "initializers", "pending"], keys(&["name"])),
            // A pod's own labels are not a pod spec, whatever their names.
            (&["metadata", "labels", "containers"], ListStrategy::Replace),
        ];
        for (path, want) in cases {
            assert_eq!(&pod.list_strategy(path), want, "{path:?}");
        }
        assert!(pod.retain_keys(&["spec", "volumes"]));
        assert!(!pod.retain_keys(&["spec", "containers"]));
        assert_eq!(
            pod.merge_key_default(&["spec", "containers", "ports"], "protocol"),
            Some(Value::String("TCP".into()))
        );
        assert_eq!(
            pod.merge_key_default(&["spec", "containers", "ports"], "containerPort"),
            None
        );
    }

    #[test]
    fn workloads_keep_their_pod_spec_and_metadata_in_the_template() {
        for kind in ["Deployment", "ReplicaSet"] {
            let schema = BuiltinSchema::for_kind("apps/v1", kind).unwrap();
            assert_eq!(
                schema.list_strategy(&["spec", "template", "spec", "containers"]),
                keys(&["name"])
            );
            assert_eq!(
                schema.list_strategy(&["spec", "template", "metadata", "finalizers"]),
                ListStrategy::Set
            );
            assert_eq!(
                schema.list_strategy(&["spec", "containers"]),
                ListStrategy::Replace
            );
            assert!(schema.retain_keys(&["spec", "template", "spec", "volumes"]));
            assert_eq!(
                schema.list_strategy(&["status", "conditions"]),
                keys(&["type"])
            );
        }
        let deployment = BuiltinSchema::for_kind("apps/v1", "Deployment").unwrap();
        assert!(deployment.retain_keys(&["spec", "strategy"]));
    }

    #[test]
    fn kinds_without_a_pod_spec_only_know_metadata() {
        for (api_version, kind) in [
            ("v1", "ConfigMap"),
            ("v1", "Event"),
            ("coordination.k8s.io/v1", "Lease"),
        ] {
            let schema = BuiltinSchema::for_kind(api_version, kind).unwrap();
            assert_eq!(
                schema.list_strategy(&["spec", "containers"]),
                ListStrategy::Replace
            );
            assert_eq!(
                schema.list_strategy(&["metadata", "finalizers"]),
                ListStrategy::Set
            );
            assert_eq!(
                schema.list_strategy(&["metadata", "ownerReferences"]),
                keys(&["uid"])
            );
        }
        let namespace = BuiltinSchema::for_kind("v1", "Namespace").unwrap();
        // NamespaceSpec.finalizers declares no strategy, unlike ObjectMeta.finalizers.
        assert_eq!(
            namespace.list_strategy(&["spec", "finalizers"]),
            ListStrategy::Replace
        );
        assert_eq!(
            namespace.list_strategy(&["status", "conditions"]),
            keys(&["type"])
        );
    }
}
