//! The ClusterRole aggregation controller, as Kubernetes' clusterrole-aggregation-controller:
//! a ClusterRole with an `aggregationRule` gets as its `rules` every rule of the ClusterRoles
//! its `clusterRoleSelectors` select. That is how `admin`, `edit` and `view` are built, and how
//! a CRD's author extends them (a ClusterRole labelled
//! `rbac.authorization.k8s.io/aggregate-to-edit: "true"` joins `edit`, and through it `admin`).
//!
//! Every ClusterRole is cached (a selector may pick any of them, whatever the shard); each
//! aggregated role is reconciled in the shard of its name, from a second, sharded cache whose
//! relist on gaining a shard brings that shard's roles back. Any change to any ClusterRole
//! makes every aggregated role look again: they are few, and chains (`view` into `edit` into
//! `admin`) settle in as many rounds as they are long.

use std::sync::Arc;

use keel_api::Metadata;
use keel_client::{ApiError, Client, GroupVersionResource, PatchType, Reason};
use keel_runtime::{
    Action, Controller, HandlerFns, ObjectKey, ShardBy, Store, WatchOptions, WorkQueue,
    enqueue_handler,
};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tracing::info;

use super::{Context, SetupError, Start};
use crate::objects::{label_selector, selects};

/// The controller's name (`--controllers`).
pub const NAME: &str = "clusterroleaggregation";

fn clusterroles() -> GroupVersionResource {
    GroupVersionResource::new("rbac.authorization.k8s.io", "v1", "clusterroles")
}

fn is_aggregated(role: &Value) -> bool {
    role["aggregationRule"].is_object()
}

/// The rules `role`'s aggregation rule selects among `all`: for each selector in order, the
/// selected roles (never `role` itself) by name, each of their rules unless an equal rule is
/// already there. `Err`: a selector that cannot be read (validation refuses it).
pub fn aggregated_rules(role: &Value, all: &[Arc<Value>]) -> Result<Vec<Value>, String> {
    let mut sorted: Vec<&Arc<Value>> = all.iter().collect();
    sorted.sort_by(|a, b| a.name().cmp(b.name()));
    let mut rules: Vec<Value> = Vec::new();
    let selectors = role["aggregationRule"]["clusterRoleSelectors"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, sel) in selectors.iter().enumerate() {
        let sel = label_selector(sel)
            .map_err(|e| format!("aggregationRule.clusterRoleSelectors[{i}]: {e}"))?;
        for other in &sorted {
            if other.name() == role.name() || sel.as_ref().is_some_and(|s| !selects(s, other)) {
                continue;
            }
            for rule in other["rules"].as_array().into_iter().flatten() {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    Ok(rules)
}

struct Aggregation {
    client: Client,
    roles: Store,
}

/// Sets up the controller: one cache of every ClusterRole, and on any change of one every
/// aggregated role queued; and the cache of this replica's shards, whose roles are queued
/// as they come.
pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    let informer = ctx
        .factory
        .informer_with(&clusterroles(), WatchOptions::default());
    let own = ctx.factory.informer_with(
        &clusterroles(),
        ctx.options(WatchOptions::default(), ShardBy::Name),
    );
    let queue = WorkQueue::default_controller_queue();
    own.add_handler(enqueue_handler(queue.clone()));
    let store = informer.store();
    let all_aggregated = {
        let (queue, store) = (queue.clone(), store.clone());
        move || {
            for role in store.list() {
                if is_aggregated(&role)
                    && let Ok(key) = ObjectKey::from_object(&role)
                {
                    queue.add(key);
                }
            }
        }
    };
    let (on_add, on_update, on_delete) = (
        all_aggregated.clone(),
        all_aggregated.clone(),
        all_aggregated,
    );
    informer.add_handler(
        HandlerFns::new()
            .added(move |_| on_add())
            .updated(move |_, _| on_update())
            .deleted(move |_| on_delete()),
    );
    let this = Arc::new(Aggregation {
        client: ctx.client.clone(),
        roles: store,
    });
    let controller = Controller::new(NAME, queue).workers(1).metrics(registry);
    Ok(super::start(
        ctx.gate.reading(&[&informer, &own]),
        NAME,
        controller,
        this,
        super::by_name(ctx),
        |this, key| async move { this.reconcile(key).await },
    ))
}

impl Aggregation {
    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(role) = self.roles.get(&key) else {
            return Ok(Action::await_change());
        };
        if !is_aggregated(&role) {
            return Ok(Action::await_change());
        }
        let rules = aggregated_rules(&role, &self.roles.list()).map_err(|e| {
            ApiError::bad_request(
                keel_api::Target::new("rbac.authorization.k8s.io", "clusterroles", &key.name),
                e,
            )
        })?;
        let current = role["rules"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if current == rules.as_slice() {
            return Ok(Action::await_change());
        }
        let patch = json!({
            "metadata": {"resourceVersion": role["metadata"]["resourceVersion"]},
            "rules": rules,
        });
        match self
            .client
            .patch(&clusterroles(), "", &key.name, PatchType::Merge, &patch)
            .await
        {
            Ok(_) => {
                info!(clusterrole = %key.name, rules = rules.len(), "aggregated rules written");
                Ok(Action::await_change())
            }
            // Gone: nothing to aggregate into. Changed since it was read: the newer
            // version's event queues it again, and this runs on what that holds.
            Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => {
                Ok(Action::await_change())
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str, labels: Value, rules: Value) -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": name, "labels": labels}, "rules": rules}))
    }

    fn aggregated(name: &str, label: &str) -> Value {
        json!({"metadata": {"name": name},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]}})
    }

    #[test]
    fn selected_roles_rules_join_in_name_order_without_repeats() {
        let get = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]});
        let list = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]});
        let all = vec![
            role(
                "b",
                json!({"to-view": "true"}),
                json!([list.clone(), get.clone()]),
            ),
            role("a", json!({"to-view": "true"}), json!([get.clone()])),
            role("c", json!({"other": "true"}), json!([{"verbs": ["*"]}])),
        ];
        let rules = aggregated_rules(&aggregated("view", "to-view"), &all).expect("rules");
        assert_eq!(rules, vec![get, list]);
    }

    #[test]
    fn a_role_never_selects_itself_and_an_empty_selector_selects_every_other() {
        let get = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]});
        let mut me = aggregated("me", "x");
        me["aggregationRule"]["clusterRoleSelectors"] = json!([{}]);
        me["rules"] = json!([{"verbs": ["*"]}]);
        let all = vec![
            Arc::new(me.clone()),
            role("a", json!({}), json!([get.clone()])),
        ];
        assert_eq!(aggregated_rules(&me, &all).expect("rules"), vec![get]);
        let mut bad = aggregated("bad", "x");
        bad["aggregationRule"]["clusterRoleSelectors"] =
            json!([{"matchExpressions": [{"key": "a", "operator": "Near"}]}]);
        assert!(aggregated_rules(&bad, &all).is_err());
    }
}
