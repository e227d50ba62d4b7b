//! Initializers' timeouts, enforced by the API servers. Each replica's watch caches keep an
//! index of the objects still being initialized; the replica sleeps until the first of their
//! deadlines (their head initializer's timeout, counted from the object's creation), or until
//! an object starts waiting or the configurations change. An object out of time gets that
//! initializer's failure policy: `Ignore` drops the name, `Fail` deletes the object. The write is a compare-and-swap on the revision
//! the object was seen at, so whichever replica acts first acts alone (the others' writes are
//! conflicts) and only it records the Event.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use keel_api::{ApiError, GroupVersionResource, Metadata, Object, Reason, ResourceInfo};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::registry::Registry;
use crate::registry::deletion::{self, DeleteOptions};
use crate::registry::initializers::{
    self, CONFIG_GROUP, CONFIG_RESOURCE, CONFIG_VERSION, FailurePolicy, Initializer, Initializers,
};
use crate::registry::strategy;
use crate::storage::{Draft, Mutation, UpdateOptions, target};

/// How long the loop sleeps when nothing waits (it wakes sooner when something starts to).
const IDLE: Duration = Duration::from_secs(3600);
/// When an object whose timeout was enforced is looked at again, if it still waits.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long one enforcement (a write and its Event) may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Enforces initializers' timeouts ([`InitializerTimeouts::run`]).
pub struct InitializerTimeouts {
    pub(super) registry: Arc<Registry>,
}

impl InitializerTimeouts {
    /// Enforces initializers' timeouts until the process ends.
    pub async fn run(self) {
        let mut new_waiting = self.registry.store().new_waiting();
        let mut configs = self
            .registry
            .lookup(Some(&config_gvr()))
            .ok()
            .map(|info| self.registry.store().cache_changes(&info));
        loop {
            // Marked seen before the caches are read: what changes after wakes the loop.
            new_waiting.borrow_and_update();
            if let Some(c) = &mut configs {
                c.borrow_and_update();
            }
            let now = SystemTime::now();
            let next = self.time_out_due(now).await;
            let sleep = next.map_or(IDLE, |t| t.duration_since(now).unwrap_or_default());
            let configs_changed = async {
                match &mut configs {
                    Some(c) => c.changed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = new_waiting.changed() => {}
                _ = configs_changed => {}
            }
        }
    }

    /// Applies the failure policy of every object whose head initializer is out of time at
    /// `now`; returns the first deadline still to come.
    async fn time_out_due(&self, now: SystemTime) -> Option<SystemTime> {
        let configs = match self.registry.lookup(Some(&config_gvr())) {
            Ok(info) => self
                .registry
                .store()
                .cached(&info, keel_api::Selectable::is_initialized),
            Err(_) => Vec::new(),
        };
        let configs: Vec<Value> = configs
            .iter()
            .map(|c| Value::Object(c.as_map().clone()))
            .collect();
        let initializers = Initializers::from_configs(&configs);
        let mut next: Option<SystemTime> = None;
        // Each stored object once: a version serving another's objects converted (a v1beta1
        // CRD) waits in that version's cache, and reading it here would load a second cache
        // holding every object again.
        for info in self.registry.stored_resources() {
            for obj in self.registry.store().waiting(&info) {
                // Objects being deleted are left to their deletion.
                if obj.deletion_timestamp().is_some() {
                    continue;
                }
                let Some(head) = obj.pending_initializers().first().map(|h| h.to_string()) else {
                    continue;
                };
                let init = initializers.get(&head);
                let Some(deadline) = deadline(&obj, init.timeout) else {
                    continue;
                };
                let due = if deadline <= now {
                    // Looked at again after a pause if it is still waiting then (the write
                    // failed: etcd unreachable, say).
                    self.time_out(&info, &obj, &init).await;
                    now + RETRY_AFTER
                } else {
                    deadline
                };
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        next
    }

    /// Applies `init`'s failure policy to `obj` as this replica saw it; records an Event if
    /// this replica's write is the one that landed.
    async fn time_out(&self, info: &Arc<ResourceInfo>, obj: &Object, init: &Initializer) {
        let Ok(rv) = obj.resource_version().parse::<i64>() else {
            return;
        };
        let deadline = Instant::now() + WRITE_TIMEOUT;
        let key = self.registry.store().key(info, obj.namespace(), obj.name());
        let opts = UpdateOptions {
            expected_revision: Some(rv),
            read_etcd: true,
            ..UpdateOptions::default()
        };
        let mutation = match init.failure_policy {
            FailurePolicy::Ignore => drop_head(info, init.name.clone()),
            FailurePolicy::Fail => deletion::deletion(
                info,
                self.registry.kind(info),
                DeleteOptions {
                    resource_version: rv.to_string(),
                    ..DeleteOptions::default()
                },
                Some(rv),
            ),
        };
        // Through the registry's commit: a Service removed here releases what it held.
        match self.registry.commit(&key, opts, mutation, deadline).await {
            Ok(_) => {
                tracing::info!(
                    resource = %info.gvr, namespace = obj.namespace(), name = obj.name(),
                    initializer = %init.name, policy = init.failure_policy.as_str(),
                    "initializer timed out"
                );
                self.record_timeout(info, obj, init, rv, deadline).await;
            }
            // Another replica acted first, or the initializer finished meanwhile.
            Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => {}
            Err(e) => {
                tracing::warn!(resource = %info.gvr, name = obj.name(), error = %e, "cannot enforce an initializer's timeout; will retry");
            }
        }
    }

    /// A Warning Event on the object, named after the revision the timeout applied to (so it
    /// is recorded once even if this write were repeated).
    async fn record_timeout(
        &self,
        info: &Arc<ResourceInfo>,
        obj: &Object,
        init: &Initializer,
        rv: i64,
        deadline: Instant,
    ) {
        let Ok(events) = self
            .registry
            .lookup(Some(&GroupVersionResource::new("", "v1", "events")))
        else {
            return;
        };
        let namespace = if info.namespaced {
            obj.namespace()
        } else {
            "default"
        };
        let outcome = match init.failure_policy {
            FailurePolicy::Ignore => "its name was dropped and the object goes on without it",
            FailurePolicy::Fail => "the object was deleted",
        };
        let message = format!(
            "initializer {} did not finish within {}s (failurePolicy {}): {outcome}",
            init.name,
            init.timeout.as_secs(),
            init.failure_policy.as_str()
        );
        let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("{}.{rv:x}", obj.name()), "namespace": namespace},
            "involvedObject": {
                "apiVersion": info.api_version(),
                "kind": info.kind,
                "name": obj.name(),
                "namespace": obj.namespace(),
                "uid": obj.uid(),
                "resourceVersion": obj.resource_version(),
            },
            "reason": "InitializerTimeout",
            "message": message,
            "type": "Warning",
            "source": {"component": "keel-apiserver"},
            "reportingComponent": "keel-apiserver",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        let Ok(mut event) = Object::from_value(event) else {
            return;
        };
        strategy::prepare_for_create(&events, &*self.registry.kind(&events), &mut event);
        let key = self.registry.store().key(&events, namespace, event.name());
        match self.registry.store().create(&key, event, deadline).await {
            Ok(_) => {}
            Err(e) if e.reason == Reason::AlreadyExists => {}
            Err(e) => tracing::warn!(error = %e, "cannot record the initializer timeout Event"),
        }
    }
}

/// When `obj`, created at its `creationTimestamp`, will have waited `timeout`.
fn deadline(obj: &Object, timeout: Duration) -> Option<SystemTime> {
    let created = obj
        .metadata()
        .and_then(|m| m.get("creationTimestamp"))
        .and_then(Value::as_str)
        .and_then(|t| humantime::parse_rfc3339(t).ok());
    created.map(|c| c + timeout)
}

/// The InitializerConfiguration resource.
fn config_gvr() -> GroupVersionResource {
    GroupVersionResource::new(CONFIG_GROUP, CONFIG_VERSION, CONFIG_RESOURCE)
}

/// The mutation that drops `name` from the head of `pending` (`Conflict` if it is no longer
/// the head: the initializer finished, or the object changed).
fn drop_head(info: &Arc<ResourceInfo>, name: String) -> Mutation {
    let info = info.clone();
    Box::new(move |draft: &Draft| {
        let current = &draft.object;
        let pending = current.pending_initializers();
        if pending.first() != Some(&name.as_str()) {
            return Err(ApiError::conflict(
                target(&info, current.name()),
                format!("initializer {name} is no longer the one pending"),
            ));
        }
        let rest: Vec<String> = pending[1..].iter().map(|s| s.to_string()).collect();
        let mut next = current.clone();
        initializers::set_pending(&mut next, &rest);
        Ok(draft.put(next))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::testing::Fixture;

    /// The sweep reads each stored object once: the caches of versions serving another's
    /// objects converted (v1beta1 CRDs, whose objects are the v1 CRDs) stay unloaded.
    #[tokio::test]
    async fn the_sweep_loads_no_cache_of_a_converted_version() {
        let f = Fixture::new().await;
        let sweep = InitializerTimeouts {
            registry: f.registry.clone(),
        };
        sweep.time_out_due(SystemTime::now()).await;
        let started = f.storage.store.cached_resources();
        let converted: Vec<_> = f
            .registry
            .resources()
            .into_iter()
            .filter(|r| keel_api::conversion::is_converted_view(r))
            .collect();
        assert!(!converted.is_empty());
        for info in converted {
            assert!(!started.contains(&info.gvr), "{:?} loaded", info.gvr);
        }
        // What the sweep must read is loaded: every stored version that can wait.
        assert!(
            started
                .iter()
                .any(|gvr| gvr.resource == "customresourcedefinitions")
        );
    }

    #[test]
    fn time_counts_from_creation() {
        let obj = Object::from_value(
            json!({"metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"}}),
        )
        .unwrap();
        let created = humantime::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
        let t = Duration::from_secs(30);
        assert_eq!(deadline(&obj, t), Some(created + Duration::from_secs(30)));
    }
}
