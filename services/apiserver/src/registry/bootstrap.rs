//! What always exists, created at start-up through the registry like any other object: the
//! built-in namespaces, and the bootstrap RBAC policy (`cluster-admin`, and a least-privilege
//! role for each of keel's own components, bound to the user its certificate names). Only
//! what is missing is created (an operator's edits stay), so replicas starting together agree.

use std::time::Duration;

use keel_api::resource::RBAC_GROUP;
use keel_api::{GroupVersionResource, Object, Reason};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::deletion::PROTECTED_NAMESPACES;
use super::rbac::MASTERS;
use super::store::Registry;

/// How long one attempt to create an object may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// The users keel's components authenticate as (the CNs `keel-certs` gives them).
pub const CONTROLLER_MANAGER_USER: &str = "system:keel-controller-manager";
pub const INITIALIZER_USER: &str = "system:keel-initializer";
pub const LOADTEST_USER: &str = "keel-loadtest";

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn cluster_role(name: &str, rules: Vec<Value>) -> Value {
    json!({"apiVersion": format!("{RBAC_GROUP}/v1"), "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
        "rules": rules})
}

fn cluster_binding(name: &str, subject_kind: &str, subject: &str) -> Value {
    json!({"apiVersion": format!("{RBAC_GROUP}/v1"), "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
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
        cluster_role("cluster-admin", vec![rule(&["*"], &["*"], &["*"])]),
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
        cluster_binding(CONTROLLER_MANAGER_USER, "User", CONTROLLER_MANAGER_USER),
        cluster_binding(INITIALIZER_USER, "User", INITIALIZER_USER),
        cluster_binding(LOADTEST_USER, "User", LOADTEST_USER),
    ];
    roles
        .into_iter()
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
                Err(e) if e.reason == Reason::AlreadyExists => return,
                Err(e) => {
                    tracing::warn!(resource = %gvr, name = obj.name(), error = %e, "cannot create a built-in object yet");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::validation::validate;

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
