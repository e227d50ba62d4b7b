//! The namespace controller: empties a namespace being deleted, then lets it go, as
//! Kubernetes' namespace controller does.
//!
//! The API server creates every namespace with `spec.finalizers: [kubernetes]`, so a Delete
//! only marks it (`deletionTimestamp`, phase `Terminating`) and refuses new content in it.
//! This controller then deletes every object of every namespaced resource in it (Background
//! propagation, each with its uid as precondition), found by discovery and listed through
//! the API rather than a cache, and looks again after [`RECHECK`] while anything is left
//! (objects held by finalizers). When a pass finds nothing, it removes `kubernetes` through
//! the namespace's `finalize` subresource, and the API server removes the namespace once no
//! finalizer is left. Meanwhile the namespace's `status.conditions` say what is left, with
//! Kubernetes' condition types, reasons and messages.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use keel_api::Metadata;
use keel_client::{
    ApiError, Client, DeleteParams, GroupVersionResource, ListParams, PatchType, Reason,
};
use keel_runtime::{
    Action, Controller, ObjectKey, ShardBy, Store, WatchOptions, WorkQueue, enqueue_handler,
};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tracing::{debug, info};

use super::{Context, SetupError, Start};

/// The finalizer of `spec.finalizers` this controller owns.
pub const FINALIZER: &str = "kubernetes";
/// How soon a namespace whose content is not all gone is looked at again.
pub const RECHECK: Duration = Duration::from_secs(1);

fn namespaces() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "namespaces")
}

fn spec_finalizers(ns: &Value) -> Vec<&str> {
    ns["spec"]["finalizers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// What one pass over a namespace's content found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pass {
    /// Objects listed, whatever became of them.
    pub listed: usize,
    /// Objects still there after the pass, by resource (`pods.`, `replicasets.apps`).
    pub remaining: BTreeMap<String, usize>,
    /// Finalizers holding the remaining objects, with how many objects each holds.
    pub finalizers: BTreeMap<String, usize>,
    /// Resources whose content could not be listed or deleted, with the error.
    pub failures: Vec<String>,
    /// Why discovery failed, if it did (nothing else was tried).
    pub discovery_failure: Option<String>,
}

impl Pass {
    /// Nothing left, nothing failed: the namespace may go.
    pub fn empty(&self) -> bool {
        self.remaining.is_empty() && self.failures.is_empty() && self.discovery_failure.is_none()
    }

    fn left(&mut self, gvr: &GroupVersionResource, obj: &Value) {
        *self
            .remaining
            .entry(format!("{}.{}", gvr.resource, gvr.group))
            .or_default() += 1;
        for f in obj.finalizers() {
            *self.finalizers.entry(f.to_string()).or_default() += 1;
        }
    }
}

/// Kubernetes' conditions of a terminating namespace for what a pass found (without
/// `lastTransitionTime`, which [`with_transition_times`] adds).
pub fn conditions(pass: &Pass) -> Vec<Value> {
    let cond = |kind: &str, on: bool, reason: &str, message: String| json!({"type": kind, "status": if on { "True" } else { "False" }, "reason": reason, "message": message});
    let mut out = Vec::new();
    out.push(match &pass.discovery_failure {
        Some(e) => cond(
            "NamespaceDeletionDiscoveryFailure",
            true,
            "DiscoveryFailed",
            format!("Discovery failed for some groups, 1 failing: {e}"),
        ),
        None => cond(
            "NamespaceDeletionDiscoveryFailure",
            false,
            "ResourcesDiscovered",
            "All resources successfully discovered".into(),
        ),
    });
    out.push(cond(
        "NamespaceDeletionGroupVersionParsingFailure",
        false,
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed".into(),
    ));
    out.push(if pass.failures.is_empty() {
        cond(
            "NamespaceDeletionContentFailure",
            false,
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".into(),
        )
    } else {
        cond(
            "NamespaceDeletionContentFailure",
            true,
            "ContentDeletionFailed",
            format!(
                "Failed to delete all resource types, {} remaining: {}",
                pass.failures.len(),
                pass.failures.join(", ")
            ),
        )
    });
    out.push(if pass.remaining.is_empty() {
        cond(
            "NamespaceContentRemaining",
            false,
            "ContentRemoved",
            "All content successfully removed".into(),
        )
    } else {
        let list: Vec<String> = pass
            .remaining
            .iter()
            .map(|(r, n)| format!("{r} has {n} resource instances"))
            .collect();
        cond(
            "NamespaceContentRemaining",
            true,
            "SomeResourcesRemain",
            format!("Some resources are remaining: {}", list.join(", ")),
        )
    });
    out.push(if pass.finalizers.is_empty() {
        cond(
            "NamespaceFinalizersRemaining",
            false,
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished".into(),
        )
    } else {
        let list: Vec<String> = pass
            .finalizers
            .iter()
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect();
        cond(
            "NamespaceFinalizersRemaining",
            true,
            "SomeFinalizersRemain",
            format!(
                "Some content in the namespace has finalizers remaining: {}",
                list.join(", ")
            ),
        )
    });
    out
}

/// `new` conditions with `lastTransitionTime`: kept from `old` for a condition whose status
/// did not change, `now` otherwise. `None` when nothing but times would change.
pub fn with_transition_times(old: &Value, mut new: Vec<Value>, now: &str) -> Option<Vec<Value>> {
    let old: Vec<&Value> = old
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let mut changed = old.len() != new.len();
    for c in &mut new {
        let before = old.iter().find(|o| o["type"] == c["type"]);
        let same = |f: &str| before.is_some_and(|o| o[f] == c[f]);
        if !(same("status") && same("reason") && same("message")) {
            changed = true;
        }
        let time = match before {
            Some(o) if o["status"] == c["status"] && o["lastTransitionTime"].is_string() => {
                o["lastTransitionTime"].clone()
            }
            _ => json!(now),
        };
        c["lastTransitionTime"] = time;
    }
    changed.then_some(new)
}

struct NamespaceController {
    client: Client,
    namespaces: Store,
}

pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    let informer = ctx.factory.informer_with(
        &namespaces(),
        ctx.options(WatchOptions::default(), ShardBy::Name),
    );
    let queue = WorkQueue::default_controller_queue();
    informer.add_handler(enqueue_handler(queue.clone()));
    let this = Arc::new(NamespaceController {
        client: ctx.client.clone(),
        namespaces: informer.store(),
    });
    let controller = Controller::new("namespace", queue)
        .workers(ctx.config.workers)
        .metrics(registry);
    Ok(super::start(
        ctx.gate.reading(&[&informer]),
        "namespace",
        controller,
        this,
        super::by_name(ctx),
        |this, key| async move { this.reconcile(key).await },
    ))
}

impl NamespaceController {
    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(cached) = self.namespaces.get(&key) else {
            return Ok(Action::await_change());
        };
        if !cached.is_deleting() || !spec_finalizers(&cached).contains(&FINALIZER) {
            return Ok(Action::await_change());
        }
        // The cache may not have seen an earlier finalize yet: decide on the namespace itself.
        let ns = match self.client.get(&namespaces(), "", &key.name).await {
            Ok(ns) => ns,
            Err(e) if e.reason == Reason::NotFound => return Ok(Action::await_change()),
            Err(e) => return Err(e),
        };
        if !ns.is_deleting() || !spec_finalizers(&ns).contains(&FINALIZER) {
            return Ok(Action::await_change());
        }
        // A pass that deleted everything it listed is followed at once by one that must list
        // nothing: only then is the namespace known empty.
        let mut pass = self.delete_content(&key.name).await;
        if pass.listed > 0 && pass.empty() {
            pass = self.delete_content(&key.name).await;
        }
        let ns = self.update_conditions(&ns, &pass).await?;
        if pass.listed == 0 && pass.empty() {
            self.finalize(&ns).await?;
            info!(namespace = %key.name, "namespace emptied and finalized");
            return Ok(Action::await_change());
        }
        debug!(namespace = %key.name, remaining = ?pass.remaining, failures = ?pass.failures, "content remains");
        if let Some(e) = &pass.discovery_failure {
            return Err(ApiError::unavailable(format!("discovery failed: {e}")));
        }
        Ok(Action::requeue(RECHECK))
    }

    /// Deletes every object of every namespaced resource in `ns` and counts what is left.
    async fn delete_content(&self, ns: &str) -> Pass {
        let mut pass = Pass::default();
        let resources = match self.client.discovery().await {
            Ok(r) => r,
            Err(e) => {
                pass.discovery_failure = Some(e.to_string());
                return pass;
            }
        };
        let deletable = resources.into_iter().filter(|r| {
            r.namespaced
                && ["list", "delete"]
                    .iter()
                    .all(|v| r.verbs.iter().any(|have| have == v))
        });
        for r in deletable {
            let gvr = GroupVersionResource::new(&r.group, &r.version, &r.resource);
            // Objects still being initialized are content too.
            let params = ListParams {
                include_uninitialized: true,
                ..ListParams::default()
            };
            let list = match self.client.list_all(&gvr, ns, &params).await {
                Ok(l) => l,
                Err(e) => {
                    pass.failures.push(format!("{gvr}: {e}"));
                    continue;
                }
            };
            for obj in list.items {
                pass.listed += 1;
                if obj.is_deleting() {
                    pass.left(&gvr, &obj);
                    continue;
                }
                let params = DeleteParams {
                    uid: obj.uid().to_string(),
                    ..Default::default()
                };
                match self.client.delete(&gvr, ns, obj.name(), &params).await {
                    Ok((_, true)) => {}
                    Ok((held, false)) => pass.left(&gvr, &held),
                    // Gone already: nothing of it is left.
                    Err(e) if e.reason == Reason::NotFound => {}
                    // Another object took the name: the next pass lists it.
                    Err(e) if e.reason == Reason::Conflict => pass.left(&gvr, &obj),
                    Err(e) => {
                        pass.failures.push(format!("{gvr} {:?}: {e}", obj.name()));
                        pass.left(&gvr, &obj);
                    }
                }
            }
        }
        pass
    }

    /// Writes the pass's conditions to the namespace's status when they change; returns the
    /// namespace as it now is.
    async fn update_conditions(&self, ns: &Value, pass: &Pass) -> Result<Value, ApiError> {
        let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        let Some(conditions) =
            with_transition_times(&ns["status"]["conditions"], conditions(pass), &now)
        else {
            return Ok(ns.clone());
        };
        let body = json!({"metadata": {"uid": ns.uid()}, "status": {"conditions": conditions}});
        self.client
            .patch_subresource(
                &namespaces(),
                "",
                ns.name(),
                "status",
                PatchType::Merge,
                serde_json::to_vec(&body).unwrap_or_default(),
            )
            .await
    }

    /// Removes this controller's finalizer through `finalize`, pinned to the namespace's
    /// resourceVersion so no other finalizer's change is lost.
    async fn finalize(&self, ns: &Value) -> Result<(), ApiError> {
        let rest: Vec<&str> = spec_finalizers(ns)
            .into_iter()
            .filter(|f| *f != FINALIZER)
            .collect();
        let body = json!({
            "metadata": {"resourceVersion": ns.resource_version()},
            "spec": {"finalizers": rest},
        });
        match self
            .client
            .patch_subresource(
                &namespaces(),
                "",
                ns.name(),
                "finalize",
                PatchType::Merge,
                serde_json::to_vec(&body).unwrap_or_default(),
            )
            .await
        {
            Ok(_) => Ok(()),
            // The namespace is gone: nothing left to finalize.
            Err(e) if e.reason == Reason::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types_and_status(conds: &[Value]) -> Vec<(String, String)> {
        conds
            .iter()
            .map(|c| {
                (
                    c["type"].as_str().unwrap_or("").to_string(),
                    c["status"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn conditions_say_what_is_left_as_kubernetes_says_it() {
        let mut pass = Pass::default();
        let pods = GroupVersionResource::new("", "v1", "pods");
        let rs = GroupVersionResource::new("apps", "v1", "replicasets");
        pass.left(
            &pods,
            &json!({"metadata": {"finalizers": ["foregroundDeletion"]}}),
        );
        pass.left(&pods, &json!({"metadata": {}}));
        pass.left(
            &rs,
            &json!({"metadata": {"finalizers": ["foregroundDeletion", "x.io/y"]}}),
        );
        assert!(!pass.empty());
        let c = conditions(&pass);
        assert_eq!(
            types_and_status(&c),
            [
                ("NamespaceDeletionDiscoveryFailure".into(), "False".into()),
                (
                    "NamespaceDeletionGroupVersionParsingFailure".into(),
                    "False".into()
                ),
                ("NamespaceDeletionContentFailure".into(), "False".into()),
                ("NamespaceContentRemaining".into(), "True".into()),
                ("NamespaceFinalizersRemaining".into(), "True".into()),
            ]
        );
        assert_eq!(
            c[3]["message"],
            "Some resources are remaining: pods. has 2 resource instances, replicasets.apps has 1 resource instances"
        );
        assert_eq!(
            c[4]["message"],
            "Some content in the namespace has finalizers remaining: foregroundDeletion in 2 resource instances, x.io/y in 1 resource instances"
        );
        let done = conditions(&Pass::default());
        assert_eq!(done[3]["reason"], "ContentRemoved");
        assert_eq!(done[4]["reason"], "ContentHasNoFinalizers");
        assert!(Pass::default().empty());
    }

    #[test]
    fn transition_times_move_only_with_the_status() {
        let mut pass = Pass::default();
        pass.left(
            &GroupVersionResource::new("", "v1", "pods"),
            &json!({"metadata": {}}),
        );
        let first = with_transition_times(&Value::Null, conditions(&pass), "t1").unwrap();
        assert!(first.iter().all(|c| c["lastTransitionTime"] == "t1"));
        // Same conditions: nothing to write.
        assert!(with_transition_times(&json!(first), conditions(&pass), "t2").is_none());
        // Content removed: only the conditions whose status flipped get the new time.
        let second =
            with_transition_times(&json!(first), conditions(&Pass::default()), "t3").unwrap();
        assert_eq!(second[3]["status"], "False");
        assert_eq!(second[3]["lastTransitionTime"], "t3");
        assert_eq!(second[0]["lastTransitionTime"], "t1");
    }
}
