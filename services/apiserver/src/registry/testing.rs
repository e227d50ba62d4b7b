//! A Registry on the in-memory etcd for the registry's unit tests, built as `server.rs` builds
//! it (every built-in resource served, each with its watch cache, the registry's finalizer
//! rules in storage), with the namespace `default` created. Not the whole bootstrap: the
//! tests need one namespace, not the RBAC policy.

use std::sync::Arc;
use std::time::Duration;

use keel_api::{ApiError, Metadata, Object, ResourceInfo};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::controllers::service_ranges::ServiceRangeRepair;
use super::{
    DeleteOptions, ListOptions, ListResult, PatchType, Policies, Registry, RegistryRules,
    Resources, ServiceRanges, Subresource, Write,
};
use crate::metrics::Metrics;
use crate::storage;
pub use crate::storage::testing::far;

/// PATCHes that may wait on one object (the server's default).
const MAX_QUEUED_PATCHES: usize = 10_000;

pub struct Fixture {
    pub registry: Arc<Registry>,
    /// The store and the in-memory etcd beneath the registry: its revision, another writer.
    pub storage: storage::testing::Fixture,
}

impl Fixture {
    pub async fn new() -> Fixture {
        Fixture::with_ranges(ServiceRanges::default()).await
    }

    /// A registry allocating Service cluster IPs and node ports from `ranges`.
    pub async fn with_ranges(ranges: ServiceRanges) -> Fixture {
        let resources = Arc::new(Resources::builtin());
        let storage =
            storage::testing::Fixture::with_rules(Arc::new(RegistryRules(resources.clone())));
        for info in resources.cached_at_start() {
            storage.store.cache(&info);
        }
        let registry = Registry::new(
            resources,
            storage.store.clone(),
            Arc::new(Policies::default()),
            MAX_QUEUED_PATCHES,
            ranges,
            Metrics::new(),
        );
        let f = Fixture { registry, storage };
        f.create(namespace("default")).await.unwrap();
        f.repair_ranges().await;
        f
    }

    /// Repairs the Service ranges once, as a replica does at start-up (which writes them).
    pub async fn repair_ranges(&self) {
        ServiceRangeRepair::new(self.registry.clone(), Duration::from_secs(180))
            .repair_once()
            .await
            .unwrap();
    }

    /// The served resource of the built-in kind `kind`.
    pub fn info(&self, kind: &str) -> Arc<ResourceInfo> {
        self.registry
            .resources()
            .into_iter()
            .find(|r| r.kind == kind)
            .unwrap_or_else(|| panic!("no served kind {kind}"))
    }

    /// etcd's revision now.
    pub fn revision(&self) -> i64 {
        self.storage.mem.revision()
    }

    /// Creates `obj` (its kind's resource, in its namespace).
    pub async fn create(&self, obj: Value) -> Result<Object, ApiError> {
        let obj = Object::from_value(obj).unwrap();
        let info = self.info(obj.kind());
        self.registry
            .create(&info, obj, Write::server(), far())
            .await
    }

    /// Reads the object `of` names (its kind, namespace and name) from etcd.
    pub async fn get(&self, of: &Object) -> Result<Object, ApiError> {
        let info = self.info(of.kind());
        self.registry
            .get(&info, of.namespace(), of.name(), "", false, far())
            .await
    }

    /// Replaces `obj` (or its subresource `sub`).
    pub async fn update(&self, obj: &Object, sub: Subresource) -> Result<Object, ApiError> {
        let info = self.info(obj.kind());
        self.registry
            .update(&info, obj.clone(), sub, Write::server(), far())
            .await
    }

    /// Patches the object `of` names (or its subresource `sub`) with `patch` of type `kind`.
    pub async fn patch(
        &self,
        of: &Object,
        sub: Subresource,
        kind: PatchType,
        patch: Value,
    ) -> Result<Object, ApiError> {
        let info = self.info(of.kind());
        let body = serde_json::to_vec(&patch).unwrap();
        self.registry
            .patch(
                &info,
                of.namespace(),
                of.name(),
                sub,
                kind,
                &body,
                Write::server(),
                far(),
            )
            .await
            .map(Arc::unwrap_or_clone)
    }

    /// Patches the object `of` names as `manager` (an apply: as the request layer does, it
    /// creates the object when it is missing).
    pub async fn patch_as(
        &self,
        manager: &str,
        of: &Object,
        sub: Subresource,
        kind: PatchType,
        patch: Value,
        force: bool,
    ) -> Result<Object, ApiError> {
        let info = self.info(of.kind());
        let body = serde_json::to_vec(&patch).unwrap();
        let w = Write {
            manager,
            force,
            ..Write::server()
        };
        let patched = self
            .registry
            .patch(&info, of.namespace(), of.name(), sub, kind, &body, w, far())
            .await;
        match patched {
            Err(e) if kind == PatchType::Apply && e.reason == keel_api::Reason::NotFound => {
                self.registry
                    .create_on_apply(&info, of.namespace(), of.name(), sub, &body, w, far())
                    .await
            }
            patched => patched.map(Arc::unwrap_or_clone),
        }
    }

    /// Applies `config` (an object of a built-in kind) as `manager`.
    pub async fn apply(&self, manager: &str, config: Value) -> Result<Object, ApiError> {
        let of = Object::from_value(config.clone()).unwrap();
        self.patch_as(
            manager,
            &of,
            Subresource::Main,
            PatchType::Apply,
            config,
            false,
        )
        .await
    }

    /// Deletes the object `of` names; the object as it was last, and whether it is gone.
    pub async fn delete(
        &self,
        of: &Object,
        opts: DeleteOptions,
    ) -> Result<(Object, bool), ApiError> {
        let info = self.info(of.kind());
        self.registry
            .delete(&info, of.namespace(), of.name(), opts, far())
            .await
    }

    /// Lists the objects of `kind`.
    pub async fn list(&self, kind: &str, opts: ListOptions) -> Result<ListResult, ApiError> {
        self.registry.list(&self.info(kind), opts, far()).await
    }

    /// Returns once the watch cache of `kind` has reached revision `rv`.
    pub async fn wait_for_cache(&self, kind: &str, rv: i64) {
        let cache = self.storage.store.cache(&self.info(kind));
        cache.wait_ready(far()).await.unwrap();
        let until = far();
        while cache.revision() < rv {
            assert!(
                Instant::now() < until,
                "the {kind} cache did not reach {rv}"
            );
            // A pause, not a yield: on the paused clock only an idle runtime moves time on.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// The names of a list's items, in order.
pub fn names(list: &ListResult) -> Vec<String> {
    list.items
        .iter()
        .map(|b| Object::from_slice(b).unwrap().name().to_string())
        .collect()
}

/// A resourceVersion as a number.
pub fn rv(obj: &Object) -> i64 {
    obj.resource_version().parse().unwrap()
}

/// A Namespace.
pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// A ConfigMap in `default`.
pub fn configmap(name: &str, data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": data,
    })
}

/// A Deployment in `default` of two containers, `app` and `sidecar`.
pub fn deployment(name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [
                    {"name": "app", "image": "app:1"},
                    {"name": "sidecar", "image": "proxy:1"},
                ]},
            },
        },
    })
}
