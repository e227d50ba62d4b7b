//! The bootstrap RBAC policy: what every keel cluster starts with. `cluster-admin` for
//! `system:masters`, a least-privilege role for each of keel's own components, and Kubernetes'
//! user-facing roles (`admin`, `edit`, `view` by aggregation, `system:basic-user`). Data only:
//! the registry's bootstrap creates what is missing (`registry/controllers/bootstrap.rs`).

use keel_api::resource::RBAC_GROUP;
use serde_json::{Value, json};

use super::MASTERS;

/// The users keel's components authenticate as (the CNs `keel-certs` gives them).
pub const CONTROLLER_MANAGER_USER: &str = "system:keel-controller-manager";
pub const INITIALIZER_USER: &str = "system:keel-initializer";
pub const LOADTEST_USER: &str = "keel-loadtest";
/// The ClusterRole every authenticated user is bound to.
const BASIC_USER: &str = "system:basic-user";

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn cluster_role(name: &str, rules: Vec<Value>) -> Value {
    json!({"apiVersion": format!("{RBAC_GROUP}/v1"), "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": rules})
}

/// The label that puts a ClusterRole's rules into the aggregated role `to` (`admin`, `edit`,
/// `view`).
fn aggregate_to(to: &str) -> String {
    format!("rbac.authorization.k8s.io/aggregate-to-{to}")
}

/// A ClusterRole carrying the label of the aggregated role `into` (if any).
fn labelled(mut role: Value, into: Option<&str>) -> Value {
    if let Some(to) = into {
        role["metadata"]["labels"][aggregate_to(to)] = "true".into();
    }
    role
}

/// A ClusterRole whose rules the aggregation controller (keel-controller-manager) fills in
/// from the ClusterRoles labelled `aggregate-to-<name>`, as Kubernetes builds `admin`, `edit`
/// and `view`.
fn aggregated_role(name: &str, into: Option<&str>) -> Value {
    let mut role = labelled(cluster_role(name, vec![]), into);
    role["aggregationRule"] =
        json!({"clusterRoleSelectors": [{"matchLabels": {aggregate_to(name): "true"}}]});
    role
}

/// The user-facing roles as Kubernetes 1.32 defines them: `admin` ⊇ `edit` ⊇ `view` by
/// aggregation, and the rules each adds (`system:aggregate-to-*`), for every kind a
/// Kubernetes manifest may hold, served by keel yet or not.
fn user_facing_roles() -> Vec<Value> {
    let read = ["get", "list", "watch"];
    let write = ["create", "delete", "deletecollection", "patch", "update"];
    let all = [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    let view = vec![
        rule(
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
            &read,
        ),
        rule(
            &[""],
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
            &read,
        ),
        rule(&[""], &["namespaces"], &read),
        rule(&["discovery.k8s.io"], &["endpointslices"], &read),
        rule(
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            &read,
        ),
        rule(
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
            &read,
        ),
        rule(
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
            &read,
        ),
        rule(
            &["extensions"],
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
            ],
            &read,
        ),
        rule(
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
            &read,
        ),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
            &read,
        ),
    ];
    let edit = vec![
        rule(
            &[""],
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
            &read,
        ),
        rule(&[""], &["serviceaccounts"], &["impersonate"]),
        rule(
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
            ],
            &write,
        ),
        rule(&[""], &["pods/eviction"], &["create"]),
        rule(
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            &write,
        ),
        rule(&[""], &["serviceaccounts/token"], &["create"]),
        rule(
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            &write,
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers"], &write),
        rule(&["batch"], &["cronjobs", "jobs"], &write),
        rule(
            &["extensions"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "ingresses",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
            ],
            &write,
        ),
        rule(&["policy"], &["poddisruptionbudgets"], &write),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
            &write,
        ),
        rule(&["coordination.k8s.io"], &["leases"], &all),
    ];
    let admin = vec![
        rule(
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews"],
            &["create"],
        ),
        rule(&[RBAC_GROUP], &["rolebindings", "roles"], &all),
    ];
    vec![
        aggregated_role("admin", None),
        aggregated_role("edit", Some("admin")),
        aggregated_role("view", Some("edit")),
        labelled(
            cluster_role("system:aggregate-to-admin", admin),
            Some("admin"),
        ),
        labelled(cluster_role("system:aggregate-to-edit", edit), Some("edit")),
        labelled(cluster_role("system:aggregate-to-view", view), Some("view")),
    ]
}

fn cluster_binding(name: &str, subject_kind: &str, subject: &str) -> Value {
    json!({"apiVersion": format!("{RBAC_GROUP}/v1"), "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": subject_kind, "name": subject}]})
}

/// The bootstrap ClusterRoles and their bindings.
pub fn policy_objects() -> Vec<(&'static str, Value)> {
    let read = ["get", "list", "watch"];
    let write = [
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    ];
    // The groups whose objects keel's controllers change (not RBAC, CRDs or admission
    // configuration: a component that may rewrite those may grant itself anything).
    let workload_groups = [
        "",
        "apps",
        "batch",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "samplecrd.k8s.io",
    ];
    let roles = [
        cluster_role(
            "cluster-admin",
            vec![
                rule(&["*"], &["*"], &["*"]),
                json!({"nonResourceURLs": ["*"], "verbs": ["*"]}),
            ],
        ),
        cluster_role(
            CONTROLLER_MANAGER_USER,
            vec![
                // Informers read every kind; the garbage collector and namespace deletion
                // delete dependents of any kind.
                rule(&["*"], &["*"], &["get", "list", "watch", "delete"]),
                // Owner references, finalizers, status, scale: objects of the workload groups.
                rule(&workload_groups, &["*"], &["update", "patch"]),
                rule(
                    &[""],
                    &[
                        "pods",
                        "events",
                        "configmaps",
                        "serviceaccounts",
                        "endpoints",
                        "persistentvolumeclaims",
                        "nodes",
                    ],
                    &["create"],
                ),
                rule(
                    &["apps"],
                    &["replicasets", "controllerrevisions"],
                    &["create"],
                ),
                rule(&["batch"], &["jobs"], &["create"]),
                rule(&["discovery.k8s.io"], &["endpointslices"], &["create"]),
                rule(&["events.k8s.io"], &["events"], &["create"]),
                rule(&["coordination.k8s.io"], &["leases"], &["create"]),
                // The aggregation controller writes the rules of `admin`, `edit`, `view` and
                // every aggregated ClusterRole, as Kubernetes' clusterrole-aggregation-controller
                // does (and holds `escalate` for it, as that controller's role does).
                rule(
                    &[RBAC_GROUP],
                    &["clusterroles"],
                    &["escalate", "update", "patch"],
                ),
            ],
        ),
        // What every authenticated user may do, as in Kubernetes: ask what it may do and who
        // it is (`kubectl auth can-i`, `kubectl auth whoami`).
        cluster_role(
            BASIC_USER,
            vec![
                rule(
                    &[keel_api::resource::AUTHORIZATION_GROUP],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                rule(
                    &[keel_api::resource::AUTHENTICATION_GROUP],
                    &["selfsubjectreviews"],
                    &["create"],
                ),
            ],
        ),
        cluster_role(
            INITIALIZER_USER,
            vec![
                rule(
                    &[""],
                    &["pods"],
                    &["get", "list", "watch", "patch", "update"],
                ),
                rule(&[""], &["configmaps"], &read),
                rule(
                    &["admissionregistration.k8s.io"],
                    &["initializerconfigurations"],
                    &read,
                ),
                // `--webhook --register-webhook`: its own MutatingWebhookConfiguration, as
                // istiod keeps its injector's.
                rule(
                    &["admissionregistration.k8s.io"],
                    &["mutatingwebhookconfigurations"],
                    &["get", "create", "update", "patch"],
                ),
            ],
        ),
        cluster_role(
            LOADTEST_USER,
            vec![
                rule(&[""], &["configmaps", "pods"], &write),
                rule(&[""], &["namespaces"], &["get", "list", "create"]),
            ],
        ),
    ];
    let bindings = [
        cluster_binding("cluster-admin", "Group", MASTERS),
        cluster_binding(BASIC_USER, "Group", crate::auth::AUTHENTICATED),
        cluster_binding(CONTROLLER_MANAGER_USER, "User", CONTROLLER_MANAGER_USER),
        cluster_binding(INITIALIZER_USER, "User", INITIALIZER_USER),
        cluster_binding(LOADTEST_USER, "User", LOADTEST_USER),
    ];
    roles
        .into_iter()
        .chain(user_facing_roles())
        .map(|r| ("clusterroles", r))
        .chain(bindings.into_iter().map(|b| ("clusterrolebindings", b)))
        .collect()
}
