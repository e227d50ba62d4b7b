//! What always exists, created at start-up through the registry like any other object: the
//! built-in namespaces, and the bootstrap RBAC policy (`cluster-admin`, and a least-privilege
//! role for each of keel's own components, bound to the user its certificate names). Only
//! what is missing is created (an operator's edits stay), so replicas starting together agree.

use std::sync::Arc;
use std::time::Duration;

use keel_api::resource::RBAC_GROUP;
use keel_api::{GroupVersionResource, Object, Reason, ResourceInfo};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::deletion::PROTECTED_NAMESPACES;
use super::rbac::MASTERS;
use super::store::Registry;
use crate::storage::{Change, Mutation, UpdateOptions};

/// How long one attempt to create an object may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

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
    let workload_groups = ["", "apps", "coordination.k8s.io", "samplecrd.k8s.io"];
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
                rule(&[""], &["pods", "events", "configmaps"], &["create"]),
                rule(&["apps"], &["replicasets"], &["create"]),
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

impl Registry {
    /// Creates the built-in namespaces and the bootstrap policy, retrying with backoff until
    /// etcd takes them; readiness waits for it.
    pub async fn bootstrap(&self) {
        for name in PROTECTED_NAMESPACES {
            let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            self.create_if_missing(&GroupVersionResource::new("", "v1", "namespaces"), ns)
                .await;
        }
        for (resource, obj) in policy_objects() {
            self.create_if_missing(&GroupVersionResource::new(RBAC_GROUP, "v1", resource), obj)
                .await;
        }
        self.set_bootstrapped();
    }

    async fn create_if_missing(&self, gvr: &GroupVersionResource, obj: Value) {
        let Ok(info) = self.lookup(Some(gvr)) else {
            return;
        };
        let Ok(obj) = Object::from_value(obj) else {
            return;
        };
        let mut backoff = Duration::from_millis(100);
        loop {
            match self
                .create(
                    &info,
                    obj.clone(),
                    None,
                    false,
                    Instant::now() + ATTEMPT_TIMEOUT,
                )
                .await
            {
                Ok(_) => return,
                Err(e) if e.reason == Reason::AlreadyExists => {
                    if gvr.group == RBAC_GROUP {
                        self.reconcile_policy(&info, &obj).await;
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!(resource = %gvr, name = obj.name(), error = %e, "cannot create a built-in object yet");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

impl Registry {
    /// Adds to an existing bootstrap role or binding what this version's has and it lacks
    /// (rules, subjects, labels, annotations), as Kubernetes reconciles its bootstrap policy
    /// at start: nothing is taken away, and an object annotated `autoupdate: "false"` is left
    /// as its operator made it. A failure is logged: the object stays as it was.
    async fn reconcile_policy(&self, info: &Arc<ResourceInfo>, expected: &Object) {
        let want = expected.as_map().clone();
        let mutation: Mutation = Box::new(move |current: &Object| {
            Ok(Change::Put(with_bootstrap_policy(current, &want)))
        });
        let key = self.store().key(info, "", expected.name());
        let opts = UpdateOptions {
            read_etcd: true,
            ..UpdateOptions::default()
        };
        if let Err(e) = self
            .store()
            .update(&key, opts, mutation, Instant::now() + ATTEMPT_TIMEOUT)
            .await
        {
            tracing::warn!(name = expected.name(), error = %e, "cannot bring a bootstrap RBAC object up to date");
        }
    }
}

const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// `current` with what `want` (a bootstrap role or binding) has and it lacks. An aggregated
/// role's rules are its controller's, not added here.
fn with_bootstrap_policy(current: &Object, want: &Map<String, Value>) -> Object {
    let mut out = current.clone();
    let map = out.as_map_mut();
    let autoupdate = map
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(AUTOUPDATE))
        .and_then(Value::as_str);
    if autoupdate == Some("false") {
        return out;
    }
    let union = |have: Option<&mut Value>, add: Option<&Value>| -> Option<Value> {
        let add = add?.as_array()?;
        let mut list = have.and_then(|h| h.as_array().cloned()).unwrap_or_default();
        for item in add {
            if !list.contains(item) {
                list.push(item.clone());
            }
        }
        Some(Value::Array(list))
    };
    for field in ["labels", "annotations"] {
        if let Some(Value::Object(add)) = want.get("metadata").and_then(|m| m.get(field)) {
            let meta = map
                .entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(meta) = meta.as_object_mut() {
                let have = meta
                    .entry(field)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(have) = have.as_object_mut() {
                    for (k, v) in add {
                        have.entry(k).or_insert_with(|| v.clone());
                    }
                }
            }
        }
    }
    if want.contains_key("aggregationRule") {
        if !map.contains_key("aggregationRule") {
            map.insert("aggregationRule".into(), want["aggregationRule"].clone());
        }
    } else {
        for field in ["rules", "subjects"] {
            if let Some(list) = union(map.get_mut(field), want.get(field)) {
                map.insert(field.into(), list);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::validation::validate;

    #[test]
    fn an_older_bootstrap_role_gains_what_it_lacks_unless_its_operator_said_no() {
        let role = |v: Value| Object::from_value(v).expect("an object");
        let want = json!({"metadata": {"name": "r", "labels": {"a": "1"}},
            "rules": [{"verbs": ["get"]}, {"verbs": ["patch"]}]});
        let want = want.as_object().expect("a map");
        let old = role(
            json!({"metadata": {"name": "r", "labels": {"a": "0", "b": "2"}},
            "rules": [{"verbs": ["get"]}, {"verbs": ["delete"]}]}),
        );
        let new = with_bootstrap_policy(&old, want);
        assert_eq!(
            new.as_map()["rules"],
            json!([{"verbs": ["get"]}, {"verbs": ["delete"]}, {"verbs": ["patch"]}])
        );
        // An operator's label values stay.
        assert_eq!(
            new.as_map()["metadata"]["labels"],
            json!({"a": "0", "b": "2"})
        );
        let mut pinned = old.clone();
        pinned.as_map_mut()["metadata"]["annotations"] = json!({AUTOUPDATE: "false"});
        assert_eq!(with_bootstrap_policy(&pinned, want), pinned);
    }

    #[test]
    fn the_bootstrap_policy_is_valid() {
        let resources = keel_api::builtin_resources();
        for (resource, obj) in policy_objects() {
            let info = resources
                .iter()
                .find(|r| r.gvr.group == RBAC_GROUP && r.gvr.resource == resource)
                .expect("an RBAC resource");
            let obj = Object::from_value(obj).expect("an object");
            validate(info, &obj).unwrap_or_else(|e| panic!("{}: {e}", obj.name()));
        }
    }
}
