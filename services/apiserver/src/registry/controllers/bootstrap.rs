//! What always exists, created at start-up through the registry like any other object: the
//! built-in namespaces, the bootstrap RBAC policy (`cluster-admin`, and a least-privilege
//! role for each of keel's own components, bound to the user its certificate names), and the
//! `kubernetes` Service once the Service ranges are repaired. Only
//! what is missing is created (an operator's edits stay), so replicas starting together agree.

use std::sync::Arc;
use std::time::Duration;

use keel_api::resource::RBAC_GROUP;
use keel_api::{GroupVersionResource, Metadata, Object, Reason, ResourceInfo};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::registry::allocator::Pool;
use crate::registry::kinds::PROTECTED_NAMESPACES;
use crate::registry::rbac::defaults::policy_objects;
use crate::registry::{Registry, Write};
use crate::storage::{Draft, Mutation, UpdateOptions};

/// How long one attempt to create an object may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// Creates what always exists ([`Bootstrap::run`]).
pub struct Bootstrap {
    pub(super) registry: Arc<Registry>,
}

impl Bootstrap {
    /// Creates the built-in namespaces and the bootstrap policy, retrying with backoff until
    /// etcd takes them; readiness waits for it.
    pub async fn run(self) {
        for name in PROTECTED_NAMESPACES {
            let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            self.create_if_missing(&GroupVersionResource::new("", "v1", "namespaces"), ns)
                .await;
        }
        for (resource, obj) in policy_objects() {
            self.create_if_missing(&GroupVersionResource::new(RBAC_GROUP, "v1", resource), obj)
                .await;
        }
        // Its address is allocated: once the ranges are repaired.
        let mut repaired = self.registry.ranges_repaired_changes();
        if repaired.wait_for(|r| *r).await.is_ok() {
            let services = GroupVersionResource::new("", "v1", "services");
            self.create_if_missing(&services, self.kubernetes_service())
                .await;
        }
        self.registry.set_bootstrapped();
    }

    /// The `kubernetes` Service in `default`, at the first address of the cluster IP range
    /// (`10.96.0.1`), as Kubernetes' bootstrap controller makes it; without the Endpoints
    /// Kubernetes keeps for it (keel runs no Pods that would call it).
    fn kubernetes_service(&self) -> Value {
        let range = self.registry.allocators().pool(Pool::ClusterIps).range();
        let ip = range.show(range.value_at(0));
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "kubernetes",
                "namespace": "default",
                "labels": {"component": "apiserver", "provider": "kubernetes"},
            },
            "spec": {
                "type": "ClusterIP",
                "clusterIP": ip,
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
                "sessionAffinity": "None",
            },
        })
    }

    async fn create_if_missing(&self, gvr: &GroupVersionResource, obj: Value) {
        let Ok(info) = self.registry.lookup(Some(gvr)) else {
            return;
        };
        let Ok(obj) = Object::from_value(obj) else {
            return;
        };
        let mut backoff = Duration::from_millis(100);
        loop {
            match self
                .registry
                .create(
                    &info,
                    obj.clone(),
                    Write::server(),
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
                // Asked again, it is refused again (the `kubernetes` Service's address
                // taken by another Service, say).
                Err(e) if e.reason == Reason::Invalid => {
                    tracing::warn!(resource = %gvr, name = obj.name(), error = %e, "cannot create a built-in object");
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

impl Bootstrap {
    /// Adds to an existing bootstrap role or binding what this version's has and it lacks
    /// (rules, subjects, labels, annotations), as Kubernetes reconciles its bootstrap policy
    /// at start: nothing is taken away, and an object annotated `autoupdate: "false"` is left
    /// as its operator made it. A failure is logged: the object stays as it was.
    async fn reconcile_policy(&self, info: &Arc<ResourceInfo>, expected: &Object) {
        let want = expected.as_map().clone();
        let mutation: Mutation = Box::new(move |current: &Draft| {
            Ok(current.put(with_bootstrap_policy(&current.object, &want)))
        });
        let key = self.registry.store().key(info, "", expected.name());
        let opts = UpdateOptions {
            read_etcd: true,
            ..UpdateOptions::default()
        };
        if let Err(e) = self
            .registry
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
    use crate::registry::kinds;
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
        let resources = kinds::builtin();
        for (resource, obj) in policy_objects() {
            let served = resources
                .iter()
                .find(|r| r.info.gvr.group == RBAC_GROUP && r.info.gvr.resource == resource)
                .expect("an RBAC resource");
            let obj = Object::from_value(obj).expect("an object");
            validate(&served.info, &*served.kind, &obj)
                .unwrap_or_else(|e| panic!("{}: {e}", obj.name()));
        }
    }
}
