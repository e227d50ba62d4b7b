//! What a resource is: its group, version, kind, names and scope.

use std::fmt;

/// A resource as the API addresses it: `apps/v1 deployments`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupVersionResource {
    /// "" for the core group.
    pub group: String,
    pub version: String,
    /// Plural, lower case: `deployments`.
    pub resource: String,
}

impl GroupVersionResource {
    pub fn new(group: &str, version: &str, resource: &str) -> Self {
        GroupVersionResource {
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
        }
    }

    /// `apps/v1` or `v1`.
    pub fn api_version(&self) -> String {
        api_version(&self.group, &self.version)
    }
}

impl fmt::Display for GroupVersionResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// `group/version`, or just `version` for the core group.
pub fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// Everything the API knows about one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    pub gvr: GroupVersionResource,
    pub singular: String,
    pub kind: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    /// Whether `status` is a subresource: writes to the main resource then ignore `status`,
    /// and `generation` counts changes of everything but metadata and status.
    pub status_subresource: bool,
    /// A review (SelfSubjectAccessReview and the like): created and answered at once, never
    /// stored, so `create` is its only verb.
    pub create_only: bool,
    /// Subresources beyond `status` (`finalize`, `scale`, `eviction`), as the server's kind
    /// says; clients learn them from discovery.
    pub subresources: Vec<String>,
    /// The groups of resources it belongs to (`all`: what `kubectl get all` lists), as
    /// discovery says; a CRD's from its `spec.names.categories`.
    pub categories: Vec<String>,
    /// The fields a field selector may name besides `metadata.name` and `metadata.namespace`
    /// (Pod's `status.phase`, Event's `involvedObject.name`, ...), as the server's kind says:
    /// each a dotted path into the object.
    pub selectable_fields: Vec<String>,
    /// Its objects are converted between versions by the server, not here: reads leave them
    /// at the version they are stored at (a CRD whose conversion is a webhook's).
    pub converted_by_server: bool,
}

impl ResourceInfo {
    pub fn api_version(&self) -> String {
        self.gvr.api_version()
    }

    /// Whether objects of it have the subresource `name` besides `status`.
    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.iter().any(|s| s == name)
    }

    /// The name a user types for it: `deployments.apps`, `pods`.
    pub fn qualified_name(&self) -> String {
        self.gvr.to_string()
    }

    /// Whether `name` names this resource: plural, singular, kind or short name (any case for
    /// the kind), optionally qualified by group (`deployments.apps`).
    pub fn matches_name(&self, name: &str) -> bool {
        let (base, group) = match name.split_once('.') {
            Some((b, g)) => (b, Some(g)),
            None => (name, None),
        };
        if let Some(g) = group
            && g != self.gvr.group
        {
            return false;
        }
        base == self.gvr.resource
            || base == self.singular
            || base.eq_ignore_ascii_case(&self.kind)
            || self.short_names.iter().any(|s| s == base)
    }
}

/// The group of Role, ClusterRole, RoleBinding and ClusterRoleBinding.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

fn info(
    group: &str,
    resource: &str,
    singular: &str,
    kind: &str,
    short: &[&str],
    namespaced: bool,
    status: bool,
) -> ResourceInfo {
    ResourceInfo {
        converted_by_server: false,
        gvr: GroupVersionResource::new(group, "v1", resource),
        singular: singular.into(),
        kind: kind.into(),
        short_names: short.iter().map(|s| s.to_string()).collect(),
        namespaced,
        status_subresource: status,
        create_only: false,
        subresources: Vec::new(),
        categories: Vec::new(),
        selectable_fields: Vec::new(),
    }
}

fn crd(version: &str) -> ResourceInfo {
    ResourceInfo {
        gvr: GroupVersionResource::new(
            "apiextensions.k8s.io",
            version,
            "customresourcedefinitions",
        ),
        ..info(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "customresourcedefinition",
            "CustomResourceDefinition",
            &["crd", "crds"],
            false,
            true,
        )
    }
}

/// The group of SelfSubjectAccessReview, SelfSubjectRulesReview and SubjectAccessReview.
pub const AUTHORIZATION_GROUP: &str = "authorization.k8s.io";
/// The group of SelfSubjectReview.
pub const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";

/// The reviews, as Kubernetes serves them: a client creates one and reads the answer in its
/// `status`; nothing is stored. Apart from [`builtin_resources`], which are stored and
/// watched.
pub fn review_resources() -> Vec<ResourceInfo> {
    let review = |group: &str, resource: &str, kind: &str| ResourceInfo {
        create_only: true,
        ..info(
            group,
            resource,
            &kind.to_lowercase(),
            kind,
            &[],
            false,
            false,
        )
    };
    vec![
        review(
            AUTHORIZATION_GROUP,
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
        ),
        review(
            AUTHORIZATION_GROUP,
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
        ),
        review(
            AUTHORIZATION_GROUP,
            "subjectaccessreviews",
            "SubjectAccessReview",
        ),
        review(
            AUTHENTICATION_GROUP,
            "selfsubjectreviews",
            "SelfSubjectReview",
        ),
    ]
}

/// The built-in resources in category `all` (what `kubectl get all` lists), as Kubernetes 1.32
/// has them among those keel serves.
const CATEGORY_ALL: [(&str, &str); 9] = [
    ("", "pods"),
    ("", "services"),
    ("apps", "replicasets"),
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("autoscaling", "horizontalpodautoscalers"),
];

/// group, version, plural, kind, short names, namespaced, status subresource.
type ManifestKind = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    bool,
    bool,
);

/// The kinds that manifests use besides the workloads above, as Kubernetes 1.32 serves them:
/// group, version, plural, kind, short names, namespaced, status subresource. The singular is
/// the kind in lower case.
#[rustfmt::skip]
const MANIFEST_KINDS: &[ManifestKind] = &[
    ("", "v1", "secrets", "Secret", &[], true, false),
    ("", "v1", "serviceaccounts", "ServiceAccount", &["sa"], true, false),
    ("", "v1", "services", "Service", &["svc"], true, true),
    ("", "v1", "endpoints", "Endpoints", &["ep"], true, false),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", &["pvc"], true, true),
    ("", "v1", "persistentvolumes", "PersistentVolume", &["pv"], false, true),
    ("", "v1", "resourcequotas", "ResourceQuota", &["quota"], true, true),
    ("", "v1", "limitranges", "LimitRange", &["limits"], true, false),
    ("", "v1", "nodes", "Node", &["no"], false, true),
    ("apps", "v1", "statefulsets", "StatefulSet", &["sts"], true, true),
    ("apps", "v1", "daemonsets", "DaemonSet", &["ds"], true, true),
    ("apps", "v1", "controllerrevisions", "ControllerRevision", &[], true, false),
    ("batch", "v1", "jobs", "Job", &[], true, true),
    ("batch", "v1", "cronjobs", "CronJob", &["cj"], true, true),
    ("networking.k8s.io", "v1", "ingresses", "Ingress", &["ing"], true, true),
    ("networking.k8s.io", "v1", "ingressclasses", "IngressClass", &[], false, false),
    ("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", &["netpol"], true, false),
    ("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", &[], true, false),
    ("events.k8s.io", "v1", "events", "Event", &["ev"], true, false),
    ("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", &["hpa"], true, true),
    ("autoscaling", "v1", "horizontalpodautoscalers", "HorizontalPodAutoscaler", &["hpa"], true, true),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", &["pdb"], true, true),
    ("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", &["pc"], false, false),
    ("storage.k8s.io", "v1", "storageclasses", "StorageClass", &["sc"], false, false),
    // Dynamic admission as Kubernetes runs it today (keel-apiserver's `registry::webhooks`).
    (
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        &[],
        false,
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        &[],
        false,
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        &[],
        false,
        true,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        &[],
        false,
        false,
    ),
];

/// The built-in resources, under Kubernetes' own groups and versions.
pub fn builtin_resources() -> Vec<ResourceInfo> {
    let mut all = builtin_list();
    for r in &mut all {
        if CATEGORY_ALL.contains(&(r.gvr.group.as_str(), r.gvr.resource.as_str())) {
            r.categories = vec!["all".into()];
        }
    }
    all
}

fn builtin_list() -> Vec<ResourceInfo> {
    let manifest_kinds = MANIFEST_KINDS.iter().map(
        |&(group, version, resource, kind, short, namespaced, status)| ResourceInfo {
            gvr: GroupVersionResource::new(group, version, resource),
            ..info(
                group,
                resource,
                &kind.to_lowercase(),
                kind,
                short,
                namespaced,
                status,
            )
        },
    );
    let mut all = vec![
        info(
            "",
            "namespaces",
            "namespace",
            "Namespace",
            &["ns"],
            false,
            true,
        ),
        info("", "pods", "pod", "Pod", &["po"], true, true),
        info(
            "",
            "configmaps",
            "configmap",
            "ConfigMap",
            &["cm"],
            true,
            false,
        ),
        info("", "events", "event", "Event", &["ev"], true, false),
        info(
            "apps",
            "replicasets",
            "replicaset",
            "ReplicaSet",
            &["rs"],
            true,
            true,
        ),
        info(
            "apps",
            "deployments",
            "deployment",
            "Deployment",
            &["deploy"],
            true,
            true,
        ),
        info(
            "coordination.k8s.io",
            "leases",
            "lease",
            "Lease",
            &[],
            true,
            false,
        ),
        // Authorization (RBAC), as Kubernetes' rbac.authorization.k8s.io/v1.
        info(RBAC_GROUP, "roles", "role", "Role", &[], true, false),
        info(
            RBAC_GROUP,
            "rolebindings",
            "rolebinding",
            "RoleBinding",
            &[],
            true,
            false,
        ),
        info(
            RBAC_GROUP,
            "clusterroles",
            "clusterrole",
            "ClusterRole",
            &[],
            false,
            false,
        ),
        info(
            RBAC_GROUP,
            "clusterrolebindings",
            "clusterrolebinding",
            "ClusterRoleBinding",
            &[],
            false,
            false,
        ),
        // The definitions of custom resources, served live, and the same in the form the
        // seeds write (one `version`, schema under `validation`): stored as v1, converted both
        // ways (`conversion`).
        crd("v1"),
        crd("v1beta1"),
        // Dynamic admission as Kubernetes 1.7-1.13 served it (alpha, removed in 1.14).
        ResourceInfo {
            gvr: GroupVersionResource::new(
                "admissionregistration.k8s.io",
                "v1alpha1",
                "initializerconfigurations",
            ),
            ..info(
                "admissionregistration.k8s.io",
                "initializerconfigurations",
                "initializerconfiguration",
                "InitializerConfiguration",
                &[],
                false,
                false,
            )
        },
    ];
    all.extend(manifest_kinds);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_found_by_every_name() {
        let all = builtin_resources();
        let find = |n: &str| {
            all.iter()
                .find(|r| r.matches_name(n))
                .map(|r| r.kind.clone())
        };
        for n in [
            "deployments",
            "deployment",
            "Deployment",
            "deploy",
            "deployments.apps",
        ] {
            assert_eq!(find(n).as_deref(), Some("Deployment"), "{n}");
        }
        assert_eq!(find("po").as_deref(), Some("Pod"));
        assert_eq!(find("deployments.batch"), None);
    }
}
