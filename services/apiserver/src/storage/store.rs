//! The store: storage's handle on etcd for every resource, with the key layout, the watch
//! caches and this replica's recent writes. Its verbs live beside it, one concept per file
//! (`read`, `list`, `create`, `update`, `watch`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use keel_api::{GroupVersionResource, Object, ResourceInfo};
use tokio::time::Instant;

use super::cached::CachedObject;
use super::keys::{Keys, ObjectKey};
use super::recent::{RECENT_WRITES, RecentWrites};
use super::update::WriteRules;
use super::watch_cache::WatchCache;
use crate::etcd::KeyValue;
use crate::metrics::Metrics;

/// Tunables of the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Key prefix in etcd, e.g. `/registry`.
    pub prefix: String,
    /// Events each watch cache keeps for resuming watchers.
    pub watch_cache_size: usize,
    /// How often watchers that asked for bookmarks get one.
    pub bookmark_interval: Duration,
    /// How long a core Event lives after its last write (`--event-ttl`).
    pub event_ttl: Duration,
}

pub struct Store {
    /// etcd in the product; an in-memory store with its semantics in unit tests.
    pub(super) kv: Arc<dyn KeyValue>,
    pub(super) keys: Keys,
    pub(super) config: StoreConfig,
    pub(super) metrics: Metrics,
    /// One cache per resource, started on first use; read on every request, written once per
    /// resource, hence a `RwLock`.
    caches: RwLock<HashMap<GroupVersionResource, Arc<WatchCache>>>,
    /// Lets a write that follows this replica's own write skip a stale cache read.
    pub(super) recent: RecentWrites,
    /// The registry's rules for writes: when a write removes the object instead, how a batch
    /// of mutations is applied.
    pub(super) rules: Arc<dyn WriteRules>,
    /// Set when the server shuts down: open watches end.
    pub(super) shutdown: tokio::sync::watch::Receiver<bool>,
    /// Bumped by any cache when an object starts waiting for initializers.
    new_waiting: Arc<tokio::sync::watch::Sender<u64>>,
    /// The leases Events are written with.
    event_leases: super::ttl::LeaseManager,
}

impl Store {
    /// The lease a write of this object takes: objects of kinds that expire (Events) take one
    /// of `--event-ttl`, the rest none.
    pub(super) async fn lease_for(
        &self,
        key: &super::keys::ObjectKey,
        deadline: tokio::time::Instant,
    ) -> Result<crate::etcd::LeaseId, keel_api::ApiError> {
        if self.rules.expires(&key.info) && !self.config.event_ttl.is_zero() {
            self.event_leases.lease(&*self.kv, deadline).await
        } else {
            Ok(crate::etcd::NO_LEASE)
        }
    }

    pub fn new(
        kv: Arc<dyn KeyValue>,
        config: StoreConfig,
        rules: Arc<dyn WriteRules>,
        metrics: Metrics,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Arc<Store> {
        let event_leases = super::ttl::LeaseManager::new(config.event_ttl);
        Arc::new(Store {
            event_leases,
            kv,
            keys: Keys::new(&config.prefix),
            config,
            metrics,
            caches: RwLock::new(HashMap::new()),
            recent: RecentWrites::new(RECENT_WRITES),
            rules,
            shutdown,
            new_waiting: Default::default(),
        })
    }

    /// Where an object of `info` named `namespace`/`name` lives.
    pub fn key(&self, info: &Arc<ResourceInfo>, namespace: &str, name: &str) -> ObjectKey {
        self.keys.object(info, namespace, name)
    }

    /// The resource's watch cache, started on first use.
    pub fn cache(&self, info: &Arc<ResourceInfo>) -> Arc<WatchCache> {
        if let Some(c) = self
            .caches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&info.gvr)
        {
            return c.clone();
        }
        let mut caches = self.caches.write().unwrap_or_else(|e| e.into_inner());
        caches
            .entry(info.gvr.clone())
            .or_insert_with(|| {
                let cache = WatchCache::new(
                    info.clone(),
                    self.keys.resource_prefix(info),
                    self.config.watch_cache_size,
                    self.new_waiting.clone(),
                );
                if info.namespaced {
                    cache.split_relists_at(self.keys.namespaces_prefix());
                }
                tokio::spawn(cache.clone().run(self.kv.clone()));
                cache
            })
            .clone()
    }

    /// The resources whose watch caches this replica has started.
    #[cfg(test)]
    pub(crate) fn cached_resources(&self) -> Vec<GroupVersionResource> {
        let caches = self.caches.read().unwrap_or_else(|e| e.into_inner());
        caches.keys().cloned().collect()
    }

    /// The objects of `info` in this replica's watch cache that `keep` selects, parsed; none
    /// while the cache loads. For background sweeps, where any recent version will do.
    pub fn cached(
        &self,
        info: &Arc<ResourceInfo>,
        keep: impl Fn(&CachedObject) -> bool,
    ) -> Vec<Object> {
        self.cached_at(info, keep)
            .map(|(objects, _)| objects)
            .unwrap_or_default()
    }

    /// [`Store::cached`], with the revision the cache holds them at; `None` while it loads.
    pub fn cached_at(
        &self,
        info: &Arc<ResourceInfo>,
        keep: impl Fn(&CachedObject) -> bool,
    ) -> Option<(Vec<Object>, i64)> {
        let (objects, revision) = self.cached_entries(info)?;
        let objects = objects
            .iter()
            .filter(|o| keep(o))
            .filter_map(|o| o.object().ok())
            .collect();
        Some((objects, revision))
    }

    /// The watch cache's own entries of `info`, unparsed, with the revision it holds them at;
    /// `None` while it loads.
    pub fn cached_entries(
        &self,
        info: &Arc<ResourceInfo>,
    ) -> Option<(Vec<Arc<CachedObject>>, i64)> {
        let cache = self.cache(info);
        if !cache.is_ready() {
            return None;
        }
        Some(cache.list(&self.keys.resource_prefix(info)))
    }

    /// The object `namespace/name` of `info` as this replica's watch cache holds it: `None`
    /// while the cache loads, `Some(None)` when there is none. For checks that must not wait
    /// (a bearer token's ServiceAccount, at authentication).
    pub fn cached_object(
        &self,
        info: &Arc<ResourceInfo>,
        namespace: &str,
        name: &str,
    ) -> Option<Option<Object>> {
        let cache = self.cache(info);
        if !cache.is_ready() {
            return None;
        }
        let key = self.keys.object(info, namespace, name);
        Some(cache.get(&key.key).and_then(|o| o.object().ok()))
    }

    /// A receiver of the revision of the last change to `info`'s objects in this replica's
    /// watch cache: a loop that follows them wakes when it moves.
    pub fn cache_changes(&self, info: &Arc<ResourceInfo>) -> tokio::sync::watch::Receiver<i64> {
        self.cache(info).subscribe_changes()
    }

    /// The objects of `info` in this replica's watch cache still being initialized, parsed.
    pub fn waiting(&self, info: &Arc<ResourceInfo>) -> Vec<Object> {
        let cache = self.cache(info);
        cache
            .waiting()
            .iter()
            .filter_map(|o| o.object().ok())
            .collect()
    }

    /// A receiver that moves whenever an object of any cache starts waiting for initializers.
    pub fn new_waiting(&self) -> tokio::sync::watch::Receiver<u64> {
        self.new_waiting.subscribe()
    }

    /// The revision of the last change to `info`'s objects in this replica's watch cache
    /// (`None` while it loads): a sweep that looks again only when it moved.
    pub fn cache_changed(&self, info: &Arc<ResourceInfo>) -> Option<i64> {
        let cache = self.cache(info);
        cache.is_ready().then(|| cache.changed())
    }

    /// Whether storage can serve: etcd answers and every started cache has loaded; else why not.
    pub async fn readiness(&self, deadline: Instant) -> Result<(), String> {
        if let Err(e) = self.kv.current_revision(deadline).await {
            return Err(format!("etcd: {}", e.message));
        }
        let loaded = self
            .caches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .all(|c| c.is_ready());
        if !loaded {
            return Err("watch caches are loading".into());
        }
        Ok(())
    }
}
