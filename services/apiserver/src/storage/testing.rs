//! A store on the in-memory etcd for storage's unit tests: ConfigMaps in `default`, the
//! registry's finalizer rule in brief, and direct access to the key-value store underneath
//! (another writer, the current revision). The registry's tests build theirs on it, with the
//! registry's own rule.

use std::sync::Arc;
use std::time::Duration;

use keel_api::{Metadata, Object, ResourceInfo};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::keys::ObjectKey;
use super::update::WriteRules;
use super::{Store, StoreConfig, to_storage};
use crate::etcd::mem::MemEtcd;
use crate::metrics::Metrics;

/// Removes an object marked for deletion once no finalizer holds it (the registry's rule).
struct Finalizers;

impl WriteRules for Finalizers {
    fn is_finished(&self, _: &ResourceInfo, obj: &Object) -> bool {
        obj.deletion_timestamp().is_some() && obj.finalizers().is_empty()
    }
}

pub struct Fixture {
    pub mem: Arc<MemEtcd>,
    pub store: Arc<Store>,
    pub info: Arc<ResourceInfo>,
    /// Kept so that watches do not see a shutdown.
    _shutdown: tokio::sync::watch::Sender<bool>,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::on(MemEtcd::new())
    }

    /// A store on an in-memory etcd whose every call takes `latency`: for the layers above,
    /// which do not name etcd, to interleave concurrent writers.
    pub fn with_latency(latency: Duration) -> Fixture {
        Fixture::on(MemEtcd::new().with_latency(latency))
    }

    pub fn on(mem: MemEtcd) -> Fixture {
        Fixture::build(mem, Arc::new(Finalizers))
    }

    /// A store on a new in-memory etcd whose writes follow `rules`.
    pub fn with_rules(rules: Arc<dyn WriteRules>) -> Fixture {
        Fixture::build(MemEtcd::new(), rules)
    }

    fn build(mem: MemEtcd, rules: Arc<dyn WriteRules>) -> Fixture {
        let mem = Arc::new(mem);
        let (shutdown, rx) = tokio::sync::watch::channel(false);
        let info = keel_api::builtin_resources()
            .into_iter()
            .find(|r| r.kind == "ConfigMap")
            .map(Arc::new)
            .unwrap();
        let store = Store::new(
            mem.clone(),
            StoreConfig {
                prefix: "/registry".into(),
                watch_cache_size: 100,
                bookmark_interval: Duration::from_secs(60),
                event_ttl: Duration::from_secs(3600),
            },
            rules,
            Metrics::new(),
            rx,
        );
        Fixture {
            mem,
            store,
            info,
            _shutdown: shutdown,
        }
    }

    pub fn key(&self, name: &str) -> ObjectKey {
        self.store.key(&self.info, "default", name)
    }

    /// Creates ConfigMap `name` holding `data` through the store; returns it as stored.
    pub async fn create(&self, name: &str, data: Value) -> Object {
        self.store
            .create(&self.key(name), configmap(name, data), far())
            .await
            .unwrap()
    }

    /// Returns once the ConfigMaps' watch cache has reached revision `rv`.
    pub async fn wait_for_cache(&self, rv: i64) {
        let cache = self.store.cache(&self.info);
        cache.wait_ready(far()).await.unwrap();
        let until = far();
        while cache.revision() < rv {
            assert!(Instant::now() < until, "the watch cache did not reach {rv}");
            // A pause, not a yield: on the paused clock only an idle runtime moves time on,
            // and the cache may be waiting out a backoff.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Another writer stores `obj` at its key now, whatever is there.
    pub fn overwrite(&self, obj: &Object) -> i64 {
        self.mem.put(&self.key(obj.name()).key, to_storage(obj))
    }

    /// Another writer stores `obj`, an object of `info`, at its key now.
    pub fn overwrite_as(&self, info: &Arc<ResourceInfo>, obj: &Object) -> i64 {
        let key = self.store.key(info, obj.namespace(), obj.name());
        self.mem.put(&key.key, to_storage(obj))
    }
}

/// A ConfigMap in `default`.
pub fn configmap(name: &str, data: Value) -> Object {
    Object::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": data,
    }))
    .unwrap()
}

/// A deadline no test reaches by accident.
pub fn far() -> Instant {
    Instant::now() + Duration::from_secs(30)
}
