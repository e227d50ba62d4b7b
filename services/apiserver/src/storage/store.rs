//! The generic registry store: every verb of every resource, on etcd, with the semantics of
//! DESIGN.md ("Verbs and their semantics"). Kind-specific rules come from `registry::strategy`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use base64::Engine;
use keel_api::object::MAX_OBJECT_BYTES;
use keel_api::selector::{FieldSelector, LabelSelector};
use keel_api::{ApiError, GroupVersionResource, Object, ResourceInfo, Target};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::coalescer::{self, Coalescer, Pending};
use super::etcd::{Cas, Etcd, prefix_end};
use super::watch_cache::WatchCache;
use super::watcher::{self, Filter, WatchParams, WatchStream};
use crate::metrics::Metrics;
use crate::registry::strategy::{self, from_storage, target, to_storage};

/// A change to apply to the current object: returns the object to store, or why not.
pub type Mutation = Box<dyn Fn(&Object) -> Result<Object, ApiError> + Send + Sync>;

/// Tunables of the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Key prefix in etcd, e.g. `/registry`.
    pub prefix: String,
    /// Events each watch cache keeps for resuming watchers.
    pub watch_cache_size: usize,
    /// How often watchers that asked for bookmarks get one.
    pub bookmark_interval: Duration,
    /// PATCHes that may wait on one object before callers get `TooManyRequests`.
    pub max_queued_patches: usize,
}

/// How a delete treats dependents (recorded as finalizers for the garbage collector).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// The current state of a key, as a write starts from it.
struct Current {
    obj: Object,
    rv: i64,
    /// Read from the watch cache (or remembered from an earlier write): it may be stale, so a
    /// no-op result must be confirmed against etcd before it is answered.
    unverified: bool,
}

/// What a List returns.
pub struct ListResult {
    pub items: Vec<Vec<u8>>,
    pub revision: i64,
    pub continue_token: String,
    pub remaining: i64,
}

/// What a List asks for, parsed.
pub struct ListQuery {
    pub namespace: String,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: i64,
    pub continue_token: String,
    pub resource_version: String,
}

#[derive(Serialize, Deserialize)]
struct ContinueToken {
    rv: i64,
    start: String,
}

pub struct Store {
    etcd: Etcd,
    config: StoreConfig,
    metrics: Metrics,
    caches: RwLock<HashMap<GroupVersionResource, Arc<WatchCache>>>,
    coalescer: Coalescer,
    /// The last object this replica wrote at each key. A write that reads the watch cache right
    /// after its own previous write would otherwise start from the state before it (the cache
    /// learns of writes from etcd a moment later), lose the compare-and-swap and pay a second
    /// round trip. Only ever a hint: the newer of it and the cache is used, and the
    /// compare-and-swap still decides.
    recent: Mutex<HashMap<String, Arc<Object>>>,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

/// Keys remembered in `Store::recent` before it is emptied (bounded memory).
const RECENT_WRITES: usize = 10_000;

fn parse_rv(target: &Target, rv: &str) -> Result<i64, ApiError> {
    rv.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
        ApiError::bad_request(
            target.clone(),
            format!("invalid resourceVersion {rv:?}: must be a positive integer"),
        )
    })
}

impl Store {
    pub fn new(
        etcd: Etcd,
        config: StoreConfig,
        metrics: Metrics,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> Arc<Store> {
        Arc::new(Store {
            etcd,
            coalescer: Coalescer::new(config.max_queued_patches),
            recent: Mutex::new(HashMap::new()),
            config,
            metrics,
            caches: RwLock::new(HashMap::new()),
            shutdown,
        })
    }

    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    pub(super) fn coalescer(&self) -> &Coalescer {
        &self.coalescer
    }

    /// `/registry/<group or core>/<resource>/`
    pub fn resource_prefix(&self, info: &ResourceInfo) -> String {
        let group = if info.gvr.group.is_empty() {
            "core"
        } else {
            &info.gvr.group
        };
        format!("{}/{}/{}/", self.config.prefix, group, info.gvr.resource)
    }

    fn scope_prefix(&self, info: &ResourceInfo, namespace: &str) -> String {
        let p = self.resource_prefix(info);
        if info.namespaced && !namespace.is_empty() {
            format!("{p}{namespace}/")
        } else {
            p
        }
    }

    pub fn key(&self, info: &ResourceInfo, namespace: &str, name: &str) -> String {
        if info.namespaced {
            format!("{}{namespace}/{name}", self.resource_prefix(info))
        } else {
            format!("{}{name}", self.resource_prefix(info))
        }
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
                    self.resource_prefix(info),
                    self.config.watch_cache_size,
                );
                tokio::spawn(cache.clone().run(self.etcd.clone()));
                cache
            })
            .clone()
    }

    /// Whether every started cache has loaded.
    pub fn caches_ready(&self) -> bool {
        self.caches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .all(|c| c.is_ready())
    }

    async fn read(
        &self,
        info: &Arc<ResourceInfo>,
        key: &str,
        allow_cache: bool,
        deadline: Instant,
    ) -> Result<Option<Current>, ApiError> {
        if allow_cache {
            let cache = self.cache(info);
            let cached = if cache.is_ready() {
                cache.get(key)
            } else {
                None
            };
            let mine = self
                .recent
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(key)
                .cloned();
            let rv_of = |o: &Arc<Object>| o.resource_version().parse::<i64>().unwrap_or(0);
            let newest = match (cached, mine) {
                (Some(c), Some(m)) => Some(if rv_of(&m) > rv_of(&c) { m } else { c }),
                (c, m) => c.or(m),
            };
            if let Some(o) = newest {
                let rv = rv_of(&o);
                return Ok(Some(Current {
                    obj: (*o).clone(),
                    rv,
                    unverified: true,
                }));
            }
        }
        let Some(kv) = self.etcd.get(key, deadline).await? else {
            return Ok(None);
        };
        let obj = from_storage(info, &kv.value, kv.mod_revision)?;
        Ok(Some(Current {
            obj,
            rv: kv.mod_revision,
            unverified: false,
        }))
    }

    /// Records what this replica just wrote at `key` (None: it deleted it).
    fn remember(&self, key: &str, obj: Option<Object>) {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        match obj {
            Some(o) => {
                if recent.len() >= RECENT_WRITES && !recent.contains_key(key) {
                    recent.clear();
                }
                recent.insert(key.to_string(), Arc::new(o));
            }
            None => {
                recent.remove(key);
            }
        }
    }

    fn fresh(
        info: &ResourceInfo,
        stale: Option<super::etcd::Stored>,
    ) -> Result<Option<Current>, ApiError> {
        stale
            .map(|kv| {
                from_storage(info, &kv.value, kv.mod_revision).map(|obj| Current {
                    obj,
                    rv: kv.mod_revision,
                    unverified: false,
                })
            })
            .transpose()
    }

    // ----- Create -------------------------------------------------------------------------

    pub async fn create(
        &self,
        info: &Arc<ResourceInfo>,
        mut obj: Object,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        strategy::prepare_for_create(info, &mut obj);
        strategy::validate(info, &obj)?;
        let t = target(info, obj.name());
        if info.namespaced {
            self.require_namespace(&t, obj.namespace(), deadline)
                .await?;
        }
        let bytes = to_storage(&obj);
        if bytes.len() > MAX_OBJECT_BYTES {
            return Err(too_large(&t, bytes.len()));
        }
        let key = self.key(info, obj.namespace(), obj.name());
        match self
            .etcd
            .create(&key, bytes, deadline)
            .await
            .map_err(|e| e.with_target(&t))?
        {
            Cas::Done(rev) => {
                obj.set_resource_version(&rev.to_string());
                Ok(obj)
            }
            Cas::Stale(_) => Err(ApiError::already_exists(t)),
        }
    }

    /// A Create of `t` needs its namespace to exist and not be terminating. Read from etcd, not
    /// the cache, so that no create lands in a namespace whose deletion has been answered.
    async fn require_namespace(
        &self,
        t: &Target,
        ns: &str,
        deadline: Instant,
    ) -> Result<(), ApiError> {
        let key = format!("{}/core/namespaces/{ns}", self.config.prefix);
        let found = self.etcd.get(&key, deadline).await?;
        match found {
            None => Err(ApiError::not_found(Target::new("", "namespaces", ns))),
            Some(kv) => {
                let terminating =
                    Object::from_slice(&kv.value).is_ok_and(|o| o.deletion_timestamp().is_some());
                if terminating {
                    Err(strategy::namespace_terminating(t.clone(), ns))
                } else {
                    Ok(())
                }
            }
        }
    }

    // ----- Get and List ---------------------------------------------------------------------

    pub async fn get(
        &self,
        info: &Arc<ResourceInfo>,
        namespace: &str,
        name: &str,
        resource_version: &str,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let t = target(info, name);
        let key = self.key(info, namespace, name);
        if resource_version == "0" {
            let cache = self.cache(info);
            cache.wait_ready(deadline).await?;
            return cache
                .get(&key)
                .map(|o| (*o).clone())
                .ok_or_else(|| ApiError::not_found(t));
        }
        if !resource_version.is_empty() {
            parse_rv(&t, resource_version)?;
        }
        match self
            .read(info, &key, false, deadline)
            .await
            .map_err(|e| e.with_target(&t))?
        {
            Some(c) => Ok(c.obj),
            None => Err(ApiError::not_found(t)),
        }
    }

    pub async fn list(
        &self,
        info: &Arc<ResourceInfo>,
        q: &ListQuery,
        deadline: Instant,
    ) -> Result<ListResult, ApiError> {
        let t = target(info, "");
        let prefix = self.scope_prefix(info, &q.namespace);
        let filter = Filter {
            key_prefix: prefix.clone(),
            namespace: (!q.namespace.is_empty() && info.namespaced).then(|| q.namespace.clone()),
            labels: q.labels.clone(),
            fields: q.fields.clone(),
        };
        if q.resource_version == "0" && q.continue_token.is_empty() {
            // Served from the cache, like Kubernetes: any version is acceptable, `limit` is ignored.
            let cache = self.cache(info);
            cache.wait_ready(deadline).await?;
            let (objs, revision) = cache.list(&prefix);
            let items = objs
                .iter()
                .filter(|o| filter.matches(o))
                .map(|o| o.to_vec())
                .collect();
            return Ok(ListResult {
                items,
                revision,
                continue_token: String::new(),
                remaining: -1,
            });
        }
        if !q.resource_version.is_empty() && q.resource_version != "0" {
            parse_rv(&t, &q.resource_version)?;
        }
        let (mut start, mut revision) = if q.continue_token.is_empty() {
            (prefix.as_bytes().to_vec(), 0)
        } else {
            let tok = decode_continue(&q.continue_token, &prefix)
                .map_err(|m| ApiError::bad_request(t.clone(), m))?;
            (tok.start.into_bytes(), tok.rv)
        };
        let end = prefix_end(&prefix);
        let unfiltered = filter.labels.is_empty() && filter.fields.is_empty();
        let chunk = if q.limit > 0 { q.limit.min(1000) } else { 1000 };
        let mut items = Vec::new();
        let mut remaining = -1;
        let mut first = true;
        loop {
            let page = self.etcd.range(&start, end.clone(), revision, chunk, deadline).await.map_err(|e| {
                if e.reason == keel_api::Reason::Expired && !q.continue_token.is_empty() {
                    ApiError::expired("the provided continue parameter is too old to display a consistent list result; list again without it")
                } else {
                    e.with_target(&t)
                }
            })?;
            revision = page.revision;
            if first && unfiltered {
                remaining = page.count;
            }
            first = false;
            let n = page.kvs.len();
            for (i, kv) in page.kvs.iter().enumerate() {
                let obj = from_storage(info, &kv.value, kv.mod_revision)?;
                if filter.matches(&obj) {
                    items.push(obj.to_vec());
                }
                if q.limit > 0 && items.len() as i64 >= q.limit {
                    let more = i + 1 < n || page.more;
                    let mut next = kv.key.clone().into_bytes();
                    next.push(0);
                    let token = if more {
                        encode_continue(revision, &next)
                    } else {
                        String::new()
                    };
                    let remaining = if more && unfiltered {
                        remaining - items.len() as i64
                    } else if more {
                        -1
                    } else {
                        0
                    };
                    return Ok(ListResult {
                        items,
                        revision,
                        continue_token: token,
                        remaining,
                    });
                }
            }
            match (page.more, page.kvs.last()) {
                (true, Some(last)) => {
                    start = last.key.clone().into_bytes();
                    start.push(0);
                }
                _ => {
                    return Ok(ListResult {
                        items,
                        revision,
                        continue_token: String::new(),
                        remaining: 0,
                    });
                }
            }
        }
    }

    // ----- Update and Patch -----------------------------------------------------------------

    /// Applies `mutations` in order to the current object and commits the result in one
    /// compare-and-swap, re-applying them to the fresh object when another writer wins the
    /// race, until `deadline`. With a `precondition`, a changed object is a `Conflict` instead.
    /// Returns the committed object and, per mutation, its own error (it was skipped).
    async fn guaranteed_update(
        &self,
        info: &Arc<ResourceInfo>,
        key: &str,
        t: &Target,
        precondition: Option<i64>,
        mutations: &[&Mutation],
        deadline: Instant,
    ) -> (Result<Object, ApiError>, Vec<Option<ApiError>>) {
        let mut errors: Vec<Option<ApiError>> = vec![None; mutations.len()];
        let mut allow_cache = precondition.is_none();
        let mut current: Option<Current> = None;
        loop {
            let cur = match current.take() {
                Some(c) => c,
                None => match self.read(info, key, allow_cache, deadline).await {
                    Ok(Some(c)) => c,
                    Ok(None) => return (Err(ApiError::not_found(t.clone())), errors),
                    Err(e) => return (Err(e.with_target(t)), errors),
                },
            };
            if let Some(p) = precondition
                && p != cur.rv
            {
                return (Err(ApiError::stale(t.clone())), errors);
            }
            let mut obj = cur.obj.clone();
            for (m, err) in mutations.iter().zip(errors.iter_mut()) {
                match m(&obj) {
                    Ok(o) => {
                        obj = o;
                        *err = None;
                    }
                    Err(e) => *err = Some(e),
                }
            }
            if obj == cur.obj {
                if cur.unverified {
                    allow_cache = false;
                    continue;
                }
                return (Ok(cur.obj), errors);
            }
            let finished =
                obj.deletion_timestamp().is_some() && !strategy::has_finalizers(info, &obj);
            let result = if finished {
                self.etcd.compare_and_delete(key, cur.rv, deadline).await
            } else {
                let bytes = to_storage(&obj);
                if bytes.len() > MAX_OBJECT_BYTES {
                    return (Err(too_large(t, bytes.len())), errors);
                }
                self.etcd
                    .compare_and_put(key, cur.rv, bytes, deadline)
                    .await
            };
            match result {
                Ok(Cas::Done(rev)) => {
                    obj.set_resource_version(&rev.to_string());
                    self.remember(key, (!finished).then(|| obj.clone()));
                    return (Ok(obj), errors);
                }
                Ok(Cas::Stale(fresh)) => {
                    if precondition.is_some() {
                        return (Err(ApiError::stale(t.clone())), errors);
                    }
                    self.metrics.patch_retry(&info.gvr.resource);
                    if Instant::now() >= deadline {
                        return (
                            Err(ApiError::timeout(
                                t.clone(),
                                "the object kept changing until the request's deadline",
                            )),
                            errors,
                        );
                    }
                    match Self::fresh(info, fresh) {
                        Ok(Some(c)) => current = Some(c),
                        Ok(None) => return (Err(ApiError::not_found(t.clone())), errors),
                        Err(e) => return (Err(e), errors),
                    }
                }
                Err(e) => return (Err(e.with_target(t)), errors),
            }
        }
    }

    /// Replaces an object (or its status). A non-empty `metadata.resourceVersion` is a
    /// precondition.
    pub async fn update(
        &self,
        info: &Arc<ResourceInfo>,
        precondition: Option<i64>,
        namespace: &str,
        name: &str,
        mutation: Mutation,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let t = target(info, name);
        let key = self.key(info, namespace, name);
        let (res, mut errs) = self
            .guaranteed_update(info, &key, &t, precondition, &[&mutation], deadline)
            .await;
        match errs.pop().flatten() {
            Some(e) => Err(e),
            None => res,
        }
    }

    /// Patches an object. Without a precondition the patch joins this key's queue and is
    /// committed with the other queued patches in one compare-and-swap.
    pub async fn patch(
        self: &Arc<Self>,
        info: &Arc<ResourceInfo>,
        precondition: Option<i64>,
        namespace: &str,
        name: &str,
        mutation: Mutation,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        if precondition.is_some() {
            return self
                .update(info, precondition, namespace, name, mutation, deadline)
                .await;
        }
        let t = target(info, name);
        let key = self.key(info, namespace, name);
        let (reply, rx) = oneshot::channel();
        let pending = Pending {
            mutate: mutation,
            deadline,
            reply,
        };
        match self.coalescer.enqueue(&key, pending) {
            Ok(true) => {
                tokio::spawn(coalescer::lead(self.clone(), info.clone(), key));
            }
            Ok(false) => {}
            Err(_) => {
                let message = format!(
                    "too many PATCHes are waiting on {} {:?}; retry later",
                    t.kind, t.name
                );
                return Err(ApiError::too_many_requests(t, message));
            }
        }
        match tokio::time::timeout_at(deadline + Duration::from_secs(5), rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(ApiError::internal(
                "the PATCH batch ended without an answer",
            )),
            Err(_) => Err(ApiError::timeout(
                t,
                "the PATCH did not complete within its deadline",
            )),
        }
    }

    /// Commits one batch of queued patches of `key` and answers each caller.
    pub(super) async fn commit_batch(
        &self,
        info: &Arc<ResourceInfo>,
        key: &str,
        batch: Vec<Pending>,
    ) {
        let now = Instant::now();
        let (live, expired): (Vec<Pending>, Vec<Pending>) =
            batch.into_iter().partition(|p| p.deadline > now);
        for p in expired {
            let _ = p.reply.send(Err(ApiError::timeout(
                Target::default(),
                "the PATCH waited past its deadline",
            )));
        }
        if live.is_empty() {
            return;
        }
        self.metrics.patch_batch(&info.gvr.resource, live.len());
        let name = key.rsplit('/').next().unwrap_or("");
        let t = target(info, name);
        let deadline = live.iter().map(|p| p.deadline).max().unwrap_or(now);
        let mutations: Vec<&Mutation> = live.iter().map(|p| &p.mutate).collect();
        let (res, errors) = self
            .guaranteed_update(info, key, &t, None, &mutations, deadline)
            .await;
        for (p, err) in live.into_iter().zip(errors) {
            let answer = match err {
                Some(e) => Err(e),
                None => res.clone(),
            };
            let _ = p.reply.send(answer);
        }
    }

    // ----- Delete ---------------------------------------------------------------------------

    /// Deletes an object: with finalizers (or a propagation policy that adds one; for a
    /// Namespace also `spec.finalizers`) only marks it with `deletionTimestamp` (a namespace
    /// becomes `Terminating`); the object goes when the last finalizer does.
    #[allow(clippy::too_many_arguments)]
    pub async fn delete(
        &self,
        info: &Arc<ResourceInfo>,
        namespace: &str,
        name: &str,
        uid: &str,
        resource_version: &str,
        propagation: Propagation,
        deadline: Instant,
    ) -> Result<(Object, bool), ApiError> {
        let t = target(info, name);
        let precondition = if resource_version.is_empty() {
            None
        } else {
            Some(parse_rv(&t, resource_version)?)
        };
        let key = self.key(info, namespace, name);
        let mut current = None;
        loop {
            let cur = match current.take() {
                Some(c) => c,
                None => match self
                    .read(info, &key, false, deadline)
                    .await
                    .map_err(|e| e.with_target(&t))?
                {
                    Some(c) => c,
                    None => return Err(ApiError::not_found(t)),
                },
            };
            if !uid.is_empty() && cur.obj.uid() != uid {
                return Err(ApiError::conflict(
                    t,
                    format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        cur.obj.uid()
                    ),
                ));
            }
            if precondition.is_some_and(|p| p != cur.rv) {
                return Err(ApiError::conflict(
                    t,
                    format!(
                        "Precondition failed: ResourceVersion in precondition: {resource_version}, ResourceVersion in object meta: {}",
                        cur.rv
                    ),
                ));
            }
            strategy::check_delete(info, &cur.obj)?;
            let mut obj = cur.obj.clone();
            let extra = match propagation {
                Propagation::Foreground => Some("foregroundDeletion"),
                Propagation::Orphan => Some("orphan"),
                Propagation::Background => None,
            };
            if let Some(f) = extra
                && cur.obj.deletion_timestamp().is_none()
                && !obj.finalizers().contains(&f)
            {
                let meta = obj.metadata_mut();
                let list = meta
                    .entry("finalizers")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(a) = list {
                    a.push(Value::String(f.into()));
                }
            }
            let held = strategy::has_finalizers(info, &obj);
            let result = if !held {
                self.etcd.compare_and_delete(&key, cur.rv, deadline).await
            } else {
                if obj.deletion_timestamp().is_none() {
                    let now =
                        humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
                    let meta = obj.metadata_mut();
                    meta.insert("deletionTimestamp".into(), Value::String(now));
                    meta.insert("deletionGracePeriodSeconds".into(), Value::from(0));
                    strategy::prepare_for_deletion(info, &mut obj);
                }
                if obj == cur.obj {
                    return Ok((cur.obj, false));
                }
                self.etcd
                    .compare_and_put(&key, cur.rv, to_storage(&obj), deadline)
                    .await
            };
            match result.map_err(|e| e.with_target(&t))? {
                Cas::Done(rev) => {
                    obj.set_resource_version(&rev.to_string());
                    let deleted = !held;
                    self.remember(&key, (!deleted).then(|| obj.clone()));
                    return Ok((obj, deleted));
                }
                Cas::Stale(fresh) => match Self::fresh(info, fresh)? {
                    Some(c) => current = Some(c),
                    None => return Err(ApiError::not_found(t)),
                },
            }
        }
    }

    // ----- Watch ----------------------------------------------------------------------------

    /// Starts a watch; errors that prevent it from starting are returned, later ones end the
    /// stream.
    pub async fn watch(
        &self,
        info: &Arc<ResourceInfo>,
        mut filter: Filter,
        resource_version: &str,
        allow_bookmarks: bool,
    ) -> Result<WatchStream, ApiError> {
        let t = target(info, "");
        let from = match resource_version {
            "" | "0" => None,
            rv => Some(parse_rv(&t, rv)?),
        };
        filter.key_prefix = self.scope_prefix(info, filter.namespace.as_deref().unwrap_or(""));
        let cache = self.cache(info);
        cache
            .wait_ready(Instant::now() + Duration::from_secs(30))
            .await?;
        let params = WatchParams {
            info: info.clone(),
            filter,
            bookmarks: allow_bookmarks.then_some(self.config.bookmark_interval),
            metrics: self.metrics.clone(),
            shutdown: self.shutdown.clone(),
        };
        Ok(match cache.register(from) {
            Ok(reg) => watcher::serve_from_cache(reg, params),
            Err(_) => watcher::serve_from_etcd(self.etcd.clone(), from.unwrap_or(0), params),
        })
    }
}

fn too_large(t: &Target, size: usize) -> ApiError {
    ApiError::too_large(
        t.clone(),
        format!("the object is {size} bytes, more than the limit of {MAX_OBJECT_BYTES}"),
    )
}

fn encode_continue(rv: i64, start: &[u8]) -> String {
    let tok = ContinueToken {
        rv,
        start: String::from_utf8_lossy(start).into_owned(),
    };
    let json = serde_json::to_vec(&tok).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

fn decode_continue(token: &str, prefix: &str) -> Result<ContinueToken, String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| "the continue token is not valid (not base64)".to_string())?;
    let tok: ContinueToken = serde_json::from_slice(&bytes)
        .map_err(|_| "the continue token is not valid".to_string())?;
    if !tok.start.starts_with(prefix) || tok.rv <= 0 {
        return Err("the continue token belongs to another list".into());
    }
    Ok(tok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_stay_in_their_list() {
        let t = encode_continue(42, b"/registry/core/pods/a/b\0");
        let back = decode_continue(&t, "/registry/core/pods/").unwrap();
        assert_eq!(
            (back.rv, back.start.as_str()),
            (42, "/registry/core/pods/a/b\0")
        );
        assert!(decode_continue(&t, "/registry/core/configmaps/").is_err());
        assert!(decode_continue("!!", "/").is_err());
    }
}
