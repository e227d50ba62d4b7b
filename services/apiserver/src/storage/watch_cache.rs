//! The watch cache: one etcd watch per resource feeds a copy of the resource's objects and a
//! bounded window of recent events, from which any number of client watches are served.
//!
//! Invariants relied on by watchers:
//! - events leave in revision order, each once; `oldest` is the revision after which the window
//!   holds every event, so a watch from `rv >= oldest` misses nothing;
//! - registering a watcher (backlog copy + subscription) happens under the same lock as
//!   appending an event, so no event falls between the two;
//! - after a relist the broadcast channel is replaced: watchers of the old one end with
//!   `Expired` and relist, since events between the two lists were never seen.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use keel_api::{ApiError, ResourceInfo, Selectable};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::cached::CachedObject;
use crate::etcd::{self, EventKind, KeyValue, WatchEnd, prefix_end};

/// The objects a relist's first page asks for.
const FIRST_PAGE: i64 = 10_000;
/// About how many bytes of objects each later page of a relist asks for. etcd 3.4 walks every
/// key from a page's start to the range's end to answer it, so a relist costs about the square
/// of a resource's size over the page's: few large pages (halved by `Etcd::range` if an answer
/// is over the size it decodes), but not so large that a page's objects and their decoded
/// copies crowd the memory of a replica that is loading.
const PAGE_BYTES: usize = 32 << 20;

/// At most this many key ranges in a relist of a namespaced resource (consecutive namespaces
/// share one when there are more).
const RELIST_RANGES: usize = 64;
/// Key ranges a relist reads at once.
const RELIST_READS: usize = 2;

/// A relist's next page, in objects: about [`PAGE_BYTES`] at the size of the `objects` read so
/// far (`bytes` in all), between a thousand and a million.
fn page_limit(bytes: usize, objects: usize) -> i64 {
    let average = (bytes / objects.max(1)).max(1);
    i64::try_from(PAGE_BYTES / average)
        .unwrap_or(i64::MAX)
        .clamp(1_000, 1_000_000)
}

/// The live feed's buffer, in events. tokio's broadcast allocates its whole buffer up front,
/// for every resource (a CRD's too), watched or not; a watcher that falls further behind
/// catches up from the window (up to `capacity` events) instead.
const LIVE_BUFFER: usize = 256;

/// How long an event stays in the window when the window has room for more: Kubernetes' watch
/// cache keeps at least this much history (its `eventFreshDuration`). An older event leaves, and
/// a watch resumed from before it is served from etcd, which keeps history until compaction:
/// what leaves is only memory. Without it a quiet resource would hold the versions its last
/// writes replaced for as long as the process runs (a CRD twice over: as created, and as its
/// status update found it).
pub(super) const WINDOW_AGE: Duration = Duration::from_secs(75);
/// How often a cache whose resource is quiet looks for events past [`WINDOW_AGE`].
pub(super) const TRIM_EVERY: Duration = Duration::from_secs(15);

/// A page read from the cache looks at no more than this many objects per object asked for
/// (a selective filter may fill less than the page: the client reads on).
const PAGE_SCAN_FACTOR: usize = 10;

/// A page of a List from the cache ([`WatchCache::page_at`]).
pub struct CachedPage {
    pub items: Vec<Arc<CachedObject>>,
    /// The last key looked at, when keys are left after it.
    pub last: Option<String>,
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change of one object, shared by every watcher.
#[derive(Debug)]
pub struct CacheEvent {
    pub kind: EventType,
    pub rv: i64,
    /// The object after the change (the cache's own entry); for `Deleted`, its last state
    /// with `rv` as its version.
    pub obj: Arc<CachedObject>,
    /// The object before the change, when it existed: lets a watcher whose selector stopped
    /// matching send `DELETED`.
    pub prev: Option<Arc<CachedObject>>,
    /// When the cache took the event in: it leaves the window [`WINDOW_AGE`] later.
    at: Instant,
}

impl CacheEvent {
    pub fn new(
        kind: EventType,
        rv: i64,
        obj: Arc<CachedObject>,
        prev: Option<Arc<CachedObject>>,
    ) -> CacheEvent {
        CacheEvent {
            kind,
            rv,
            obj,
            prev,
            at: Instant::now(),
        }
    }

    /// The object's JSON (the cache's own buffer: cloning it copies nothing).
    pub fn bytes(&self) -> Bytes {
        self.obj.json().clone()
    }
}

/// What a cache broadcasts to its watchers, in revision order.
#[derive(Debug, Clone)]
pub enum Broadcast {
    Event(Arc<CacheEvent>),
    /// Every event up to this revision has been sent.
    Progress(i64),
}

struct State {
    /// By etcd key (`Box<str>`: the key's own bytes and a pointer, nothing spare).
    store: BTreeMap<Box<str>, Arc<CachedObject>>,
    window: VecDeque<Arc<CacheEvent>>,
    /// The window holds every event with a revision above this one.
    oldest: i64,
    /// The newest revision the cache is complete up to.
    rv: i64,
    /// The revision of the last change to the objects (or of the last load).
    changed: i64,
    /// The keys of the objects still being initialized: what the initializer timeouts look
    /// at, instead of every object.
    waiting: BTreeSet<Box<str>>,
    tx: broadcast::Sender<Broadcast>,
}

impl State {
    /// Lets the window's oldest events go while it holds more than `capacity`, or while they
    /// are older than [`WINDOW_AGE`] at `now`; `oldest` follows them.
    fn trim(&mut self, capacity: usize, now: Instant) {
        while let Some(first) = self.window.front() {
            if self.window.len() <= capacity && now.duration_since(first.at) < WINDOW_AGE {
                return;
            }
            self.oldest = first.rv;
            self.window.pop_front();
        }
    }
}

/// A watcher's start: the state to replay, then the live feed.
pub struct Registration {
    /// For a watch without a resourceVersion: the current objects, to send as `ADDED`.
    pub initial: Vec<Arc<CachedObject>>,
    /// Events after the requested revision that the window already holds.
    pub backlog: Vec<Arc<CacheEvent>>,
    /// Only events above this revision are to be sent.
    pub after: i64,
    pub rx: broadcast::Receiver<Broadcast>,
}

/// The cache of one resource.
pub struct WatchCache {
    pub info: Arc<ResourceInfo>,
    prefix: String,
    capacity: usize,
    state: Mutex<State>,
    ready: watch::Sender<bool>,
    /// The revision of the last change to the objects, for the loops that follow them (RBAC,
    /// CRDs): they wake when it moves instead of polling.
    changes: watch::Sender<i64>,
    /// Bumped when an object starts waiting for initializers, shared by every cache of the
    /// store: the initializer timeouts wake on it.
    new_waiting: Arc<watch::Sender<u64>>,
    /// For a namespaced resource, the namespaces' key prefix: a relist splits its keys at them.
    namespaces: OnceLock<String>,
}

/// Why the cache's etcd watch ended.
enum Interrupted {
    /// etcd compacted past the cache's revision: relist.
    Compacted,
    /// The watch broke: resume from the cache's revision.
    Failed(String),
}

impl WatchCache {
    /// A cache of `prefix` (ending in `/`) holding up to `capacity` recent events.
    pub fn new(
        info: Arc<ResourceInfo>,
        prefix: String,
        capacity: usize,
        new_waiting: Arc<watch::Sender<u64>>,
    ) -> Arc<WatchCache> {
        let (tx, _) = broadcast::channel(capacity.clamp(16, LIVE_BUFFER));
        Arc::new(WatchCache {
            info,
            prefix,
            capacity: capacity.max(16),
            state: Mutex::new(State {
                store: BTreeMap::new(),
                window: VecDeque::new(),
                oldest: 0,
                rv: 0,
                changed: 0,
                waiting: BTreeSet::new(),
                tx,
            }),
            ready: watch::channel(false).0,
            changes: watch::channel(0).0,
            new_waiting,
            namespaces: OnceLock::new(),
        })
    }

    /// Splits this (namespaced) resource's relists at the namespaces under `prefix`.
    pub fn split_relists_at(&self, namespaces_prefix: String) {
        let _ = self.namespaces.set(namespaces_prefix);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters more than stopping would; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the first list is loaded, or the deadline passes.
    pub async fn wait_ready(&self, deadline: Instant) -> Result<(), ApiError> {
        let mut rx = self.ready.subscribe();
        match tokio::time::timeout_at(deadline, rx.wait_for(|r| *r)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(ApiError::unavailable(format!(
                "the watch cache of {} is not ready (etcd unreachable?)",
                self.info.qualified_name()
            ))),
        }
    }

    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// The newest revision the cache is complete up to.
    pub fn revision(&self) -> i64 {
        self.lock().rv
    }

    /// The revision of the last change to the objects (or of the last load).
    pub fn changed(&self) -> i64 {
        self.lock().changed
    }

    /// A receiver of the revision of the last change to the objects (moved by every change
    /// and every load).
    pub fn subscribe_changes(&self) -> watch::Receiver<i64> {
        self.changes.subscribe()
    }

    /// The cached objects still being initialized.
    pub fn waiting(&self) -> Vec<Arc<CachedObject>> {
        let st = self.lock();
        st.waiting
            .iter()
            .filter_map(|k| st.store.get(k).cloned())
            .collect()
    }

    /// The cached object at `key`.
    pub fn get(&self, key: &str) -> Option<Arc<CachedObject>> {
        self.lock().store.get(key).cloned()
    }

    /// The cached objects whose keys start with `prefix`, and the revision they are at.
    pub fn list(&self, prefix: &str) -> (Vec<Arc<CachedObject>>, i64) {
        let st = self.lock();
        let items = st
            .store
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect();
        (items, st.rv)
    }

    /// A page of a List read at revision `rv`, from the cache, if it holds the objects as they
    /// were then (nothing changed since): up to `limit` objects of `[start, end)` that `keep`
    /// selects, looking at no more than [`PAGE_SCAN_FACTOR`] times `limit` objects, and the key of the last one
    /// looked at when others are left. `None` when the cache cannot answer (loading, or
    /// changed after `rv`).
    pub fn page_at(
        &self,
        rv: i64,
        start: &str,
        end: &str,
        limit: usize,
        keep: impl Fn(&CachedObject) -> bool,
    ) -> Option<CachedPage> {
        if !self.is_ready() {
            return None;
        }
        let st = self.lock();
        if st.changed > rv || st.rv < rv {
            return None;
        }
        let mut range = st
            .store
            .range::<str, _>((Bound::Included(start), Bound::Excluded(end)));
        let mut items = Vec::new();
        let mut last = None;
        for (key, obj) in range.by_ref().take(limit.max(1) * PAGE_SCAN_FACTOR) {
            last = Some(key);
            if keep(obj) {
                items.push(obj.clone());
                if items.len() >= limit {
                    break;
                }
            }
        }
        let more = range.next().is_some();
        Some(CachedPage {
            items,
            last: last.filter(|_| more).map(|k| k.to_string()),
        })
    }

    /// A key about `n` objects after `start`, below `end`: where a read of etcd from `start`
    /// may stop and still hold about `n` objects (`None`: fewer than `n` are left, or the cache
    /// is loading). etcd 3.4 walks the whole of a range's keys to answer any part of it, so a
    /// List that pages through a large resource reads bounded ranges instead.
    pub fn key_after(&self, start: &str, n: usize, end: &str) -> Option<String> {
        if !self.is_ready() {
            return None;
        }
        let st = self.lock();
        let (key, _) = st
            .store
            .range::<str, _>((Bound::Excluded(start), Bound::Excluded(end)))
            .nth(n)?;
        Some(key.to_string())
    }

    /// How many objects the cache holds (`None` while it loads).
    pub fn size(&self) -> Option<i64> {
        if !self.is_ready() {
            return None;
        }
        i64::try_from(self.lock().store.len()).ok()
    }

    /// How many cached objects have keys from `start` up to `end` (an estimate of what a List
    /// has left, for `remainingItemCount`; `None` while the cache loads).
    pub fn count_between(&self, start: &str, end: &str) -> Option<i64> {
        if !self.is_ready() {
            return None;
        }
        let st = self.lock();
        let n = st
            .store
            .range::<str, _>((Bound::Included(start), Bound::Excluded(end)))
            .count();
        i64::try_from(n).ok()
    }

    /// Registers a watcher from `from` (None: the current state first).
    /// `Err(oldest)` when `from` is older than the window holds.
    pub fn register(&self, from: Option<i64>) -> Result<Registration, i64> {
        let st = self.lock();
        let (initial, backlog, after) = match from {
            None => (st.store.values().cloned().collect(), Vec::new(), st.rv),
            Some(r) if r >= st.oldest => {
                let backlog = st.window.iter().filter(|e| e.rv > r).cloned().collect();
                (Vec::new(), backlog, r)
            }
            Some(_) => return Err(st.oldest),
        };
        Ok(Registration {
            initial,
            backlog,
            after,
            rx: st.tx.subscribe(),
        })
    }

    /// Keeps the cache in step with etcd until the process ends: list, watch, and on a
    /// compaction relist; on other failures resume watching with backoff.
    pub async fn run(self: Arc<Self>, kv: Arc<dyn KeyValue>) {
        let mut need_list = true;
        let mut backoff = Duration::from_millis(100);
        loop {
            if need_list {
                match self.relist(&*kv).await {
                    Ok(()) => {
                        need_list = false;
                        backoff = Duration::from_millis(100);
                    }
                    Err(e) => {
                        tracing::warn!(resource = %self.info.gvr, error = %e, "watch cache list failed");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                        continue;
                    }
                }
            }
            let from = self.revision() + 1;
            match self.follow(&*kv, from).await {
                Interrupted::Compacted => {
                    tracing::warn!(resource = %self.info.gvr, "watch cache fell behind a compaction; relisting");
                    need_list = true;
                }
                Interrupted::Failed(e) => {
                    tracing::warn!(resource = %self.info.gvr, error = %e, "watch cache lost its etcd watch; resuming");
                    if self.revision() >= from {
                        // The watch worked before it broke (a member went away): resume at once
                        // on another one, and back off only while watches fail to start.
                        backoff = Duration::from_millis(100);
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Loads every object at one revision and swaps the store in whole. A namespaced
    /// resource is read in key ranges split at its namespaces, [`RELIST_READS`] at a time:
    /// etcd reads the objects on every core, and each page's walk ends at its range's end.
    async fn relist(&self, kv: &dyn KeyValue) -> Result<(), ApiError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let revision = kv.current_revision(deadline).await?;
        let mut bounds = vec![self.prefix.as_bytes().to_vec()];
        if let Some(namespaces) = self.namespaces.get() {
            let names = kv
                .revisions(namespaces.as_bytes(), prefix_end(namespaces), deadline)
                .await?;
            let mut starts: Vec<Vec<u8>> = names
                .iter()
                .filter_map(|(key, _)| key.strip_prefix(namespaces.as_str()))
                .map(|ns| format!("{}{ns}/", self.prefix).into_bytes())
                .collect();
            starts.sort();
            let every = starts.len().div_ceil(RELIST_RANGES).max(1);
            bounds.extend(starts.into_iter().step_by(every));
        }
        bounds.push(prefix_end(&self.prefix));
        bounds.dedup();
        let reads: Vec<_> = bounds
            .windows(2)
            .map(|w| self.read_range(kv, w[0].clone(), w[1].clone(), revision))
            .collect();
        let parts: Vec<Vec<(Box<str>, Arc<CachedObject>)>> = futures::stream::iter(reads)
            .buffer_unordered(RELIST_READS)
            .try_collect()
            .await?;
        self.load(parts.into_iter().flatten().collect(), revision);
        Ok(())
    }

    /// The objects of `[start, end)` at `revision`, in pages of about [`PAGE_BYTES`].
    pub(super) async fn read_range(
        &self,
        kv: &dyn KeyValue,
        mut start: Vec<u8>,
        end: Vec<u8>,
        revision: i64,
    ) -> Result<Vec<(Box<str>, Arc<CachedObject>)>, ApiError> {
        let mut out = Vec::new();
        let mut limit = FIRST_PAGE;
        let (mut bytes, mut objects) = (0usize, 0usize);
        loop {
            let deadline = Instant::now() + Duration::from_secs(30);
            let page = kv
                .range(&start, end.clone(), revision, limit, deadline)
                .await?;
            // Pages of about PAGE_BYTES, by the objects' size so far.
            bytes += page.kvs.iter().map(|kv| kv.value.len()).sum::<usize>();
            objects += page.kvs.len();
            limit = page_limit(bytes, objects);
            for kv in &page.kvs {
                match CachedObject::from_storage(&self.info, &kv.value, kv.mod_revision) {
                    Ok(o) => out.push((kv.key.as_str().into(), Arc::new(o))),
                    Err(e) => {
                        tracing::error!(key = %kv.key, error = %e, "skipping unreadable object")
                    }
                }
            }
            match (page.more, page.kvs.last()) {
                (true, Some(last)) => {
                    start = last.key.as_bytes().to_vec();
                    start.push(0);
                }
                _ => return Ok(out),
            }
        }
    }

    /// Swaps in a whole new copy of the objects, complete at `revision` (a relist): the window
    /// restarts there, and watchers of the previous copy end.
    pub fn load(&self, objects: BTreeMap<Box<str>, Arc<CachedObject>>, revision: i64) {
        let mut st = self.lock();
        let first = !self.is_ready();
        st.waiting = objects
            .iter()
            .filter(|(_, o)| !o.is_initialized())
            .map(|(k, _)| k.clone())
            .collect();
        let waiting = !st.waiting.is_empty();
        st.store = objects;
        st.window.clear();
        st.oldest = revision;
        st.rv = revision;
        st.changed = revision;
        if !first {
            // Watchers of the old feed missed what happened between the lists.
            st.tx = broadcast::channel(self.capacity.clamp(16, LIVE_BUFFER)).0;
        }
        drop(st);
        self.ready.send_replace(true);
        self.changes.send_replace(revision);
        if waiting {
            self.new_waiting.send_modify(|n| *n += 1);
        }
        tracing::info!(resource = %self.info.gvr, revision, "watch cache loaded");
    }

    /// Follows etcd from revision `from` until the watch ends.
    async fn follow(&self, kv: &dyn KeyValue, from: i64) -> Interrupted {
        let mut watch = match kv.watch(&self.prefix, from, false).await {
            Ok(w) => w,
            Err(e) => return Interrupted::Failed(e),
        };
        // Quiet resources still advance, on etcd's own periodic progress notifications
        // (`--experimental-watch-progress-notify-interval`): they come in order with the
        // events. Requested ones (`RequestProgress`) do not before etcd 3.4.31 and 3.5.13: they
        // can overtake events still to be sent, which would then be dropped here as seen.
        let mut trims = tokio::time::interval(TRIM_EVERY);
        trims.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next = tokio::select! {
                next = watch.next() => next,
                _ = trims.tick() => {
                    self.lock().trim(self.capacity, Instant::now());
                    continue;
                }
            };
            match next {
                Ok(resp) => match resp.progress() {
                    Some(rv) => self.progress(rv),
                    None => self.apply(resp.events()),
                },
                Err(WatchEnd::Canceled {
                    compact_revision, ..
                }) if compact_revision > 0 => {
                    return Interrupted::Compacted;
                }
                Err(WatchEnd::Canceled { reason, .. }) => {
                    return Interrupted::Failed(format!("watch canceled: {reason}"));
                }
                Err(WatchEnd::Failed(e)) => return Interrupted::Failed(e),
            }
        }
    }

    /// Every event up to `rv` has been applied (an etcd progress notification).
    pub fn progress(&self, rv: i64) {
        let mut st = self.lock();
        if rv > st.rv {
            st.rv = rv;
            let _ = st.tx.send(Broadcast::Progress(rv));
        }
    }

    /// Applies etcd's events, in revision order, under one lock: the objects, the window and
    /// the broadcast move together.
    pub fn apply<'a>(&self, events: impl IntoIterator<Item = etcd::Event<'a>>) {
        let mut st = self.lock();
        let (changed, waiting) = (st.changed, st.waiting.len());
        for ev in events {
            self.apply_one(&mut st, &ev);
        }
        let (now_changed, now_waiting) = (st.changed, st.waiting.len());
        drop(st);
        if now_changed != changed {
            self.changes.send_replace(now_changed);
        }
        if now_waiting > waiting {
            self.new_waiting.send_modify(|n| *n += 1);
        }
    }

    fn apply_one(&self, st: &mut State, ev: &etcd::Event<'_>) {
        let rv = ev.mod_revision;
        if rv <= st.rv {
            return; // already seen (a resumed watch may repeat the boundary)
        }
        let key: Box<str> = String::from_utf8_lossy(ev.key).into();
        let (kind, obj, prev) = match ev.kind {
            EventKind::Put => {
                let obj = match CachedObject::from_storage(&self.info, ev.value, rv) {
                    Ok(o) => Arc::new(o),
                    Err(e) => {
                        tracing::error!(key = %key, error = %e, "skipping unreadable object");
                        return;
                    }
                };
                if obj.is_initialized() {
                    st.waiting.remove(&key);
                } else {
                    st.waiting.insert(key.clone());
                }
                let prev = st.store.insert(key, obj.clone());
                let kind = if prev.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                (kind, obj, prev)
            }
            EventKind::Delete => {
                st.waiting.remove(&key);
                let Some(prev) = st.store.remove(&key) else {
                    st.rv = rv;
                    return;
                };
                (
                    EventType::Deleted,
                    Arc::new(prev.at_revision(rv)),
                    Some(prev),
                )
            }
        };
        let event = Arc::new(CacheEvent::new(kind, rv, obj, prev));
        st.window.push_back(event.clone());
        st.trim(self.capacity, event.at);
        st.rv = rv;
        st.changed = rv;
        let _ = st.tx.send(Broadcast::Event(event));
    }
}

#[cfg(test)]
mod tests {
    use keel_api::Metadata;
    use serde_json::json;

    use super::*;

    #[test]
    fn relist_pages_hold_about_32_mib_of_objects() {
        // ConfigMaps of about 560 bytes (data and managedFields): 59,918 a page.
        assert_eq!(page_limit(560 * 10_000, 10_000), 59_918);
        // Large objects: fewer, never under a thousand; tiny ones: at most a million.
        assert_eq!(page_limit(100_000 * 10, 10), 1_000);
        assert_eq!(page_limit(10, 10), 1_000_000);
        assert_eq!(page_limit(0, 0), 1_000_000);
    }

    const PREFIX: &str = "/registry/core/configmaps/";

    fn cache(capacity: usize) -> Arc<WatchCache> {
        let info = keel_api::builtin_resources()
            .into_iter()
            .find(|r| r.kind == "ConfigMap")
            .unwrap();
        let cache = WatchCache::new(Arc::new(info), PREFIX.into(), capacity, Default::default());
        cache.load(BTreeMap::new(), 100);
        cache
    }

    fn key(name: &str) -> String {
        format!("{PREFIX}default/{name}")
    }

    fn value(name: &str, data: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({"metadata": {"name": name, "namespace": "default"},
            "data": {"v": data}}))
        .unwrap()
    }

    fn put<'a>(key: &'a str, value: &'a [u8], rv: i64) -> etcd::Event<'a> {
        etcd::Event {
            kind: EventKind::Put,
            key: key.as_bytes(),
            value,
            mod_revision: rv,
            create_revision: rv,
            prev: None,
        }
    }

    fn delete(key: &str, rv: i64) -> etcd::Event<'_> {
        etcd::Event {
            kind: EventKind::Delete,
            key: key.as_bytes(),
            value: b"",
            mod_revision: rv,
            create_revision: 0,
            prev: None,
        }
    }

    fn kinds(events: &[Arc<CacheEvent>]) -> Vec<(EventType, i64)> {
        events.iter().map(|e| (e.kind, e.rv)).collect()
    }

    #[test]
    fn events_apply_once_in_revision_order() {
        let c = cache(16);
        let (k, v1, v2) = (key("a"), value("a", "1"), value("a", "2"));
        c.apply([put(&k, &v1, 101), put(&k, &v2, 102)]);
        // A resumed etcd watch may repeat the boundary: seen revisions are ignored.
        c.apply([put(&k, &v1, 101)]);
        assert_eq!(c.revision(), 102);
        let a = c.get(&k).unwrap().object().unwrap();
        assert_eq!(a.resource_version(), "102");
        assert_eq!(a.as_map()["data"]["v"], "2");
        let reg = c.register(Some(100)).unwrap();
        assert_eq!(
            kinds(&reg.backlog),
            [(EventType::Added, 101), (EventType::Modified, 102)]
        );
    }

    #[test]
    fn objects_waiting_for_initializers_are_indexed_and_changes_are_signalled() {
        let new_waiting: Arc<watch::Sender<u64>> = Default::default();
        let info = keel_api::builtin_resources()
            .into_iter()
            .find(|r| r.kind == "ConfigMap")
            .unwrap();
        let c = WatchCache::new(Arc::new(info), PREFIX.into(), 16, new_waiting.clone());
        let mut waiting_rx = new_waiting.subscribe();
        let mut changes = c.subscribe_changes();
        c.load(BTreeMap::new(), 100);
        assert!(changes.has_changed().unwrap());
        assert_eq!(*changes.borrow_and_update(), 100);

        let k = key("a");
        let pending = serde_json::to_vec(&json!({"metadata": {"name": "a", "namespace": "default",
            "initializers": {"pending": [{"name": "envoy.initializer.kubernetes.io"}]}}}))
        .unwrap();
        let plain = value("b", "1");
        c.apply([put(&k, &pending, 101), put(&key("b"), &plain, 102)]);
        assert_eq!(*changes.borrow_and_update(), 102);
        assert!(waiting_rx.has_changed().unwrap());
        waiting_rx.borrow_and_update();
        let waiting: Vec<String> = c.waiting().iter().map(|o| o.name().to_string()).collect();
        assert_eq!(waiting, ["a"]);

        // Initialized: no longer waiting, and no new-waiting signal.
        let done = value("a", "2");
        c.apply([put(&k, &done, 103)]);
        assert!(c.waiting().is_empty());
        assert!(!waiting_rx.has_changed().unwrap());
        assert_eq!(*changes.borrow_and_update(), 103);

        // A repeated event changes nothing: no signal.
        c.apply([put(&k, &done, 103)]);
        assert!(!changes.has_changed().unwrap());

        // Deleted while waiting: gone from the index too.
        c.apply([put(&k, &pending, 104), delete(&k, 105)]);
        assert!(c.waiting().is_empty());
    }

    #[test]
    fn a_delete_carries_the_last_state_at_the_delete_revision() {
        let c = cache(16);
        let (k, v) = (key("a"), value("a", "1"));
        c.apply([put(&k, &v, 101), delete(&k, 102)]);
        assert!(c.get(&k).is_none());
        let reg = c.register(Some(101)).unwrap();
        let deleted = &reg.backlog[0];
        assert_eq!(deleted.kind, EventType::Deleted);
        let last = deleted.obj.object().unwrap();
        assert_eq!(last.resource_version(), "102");
        assert_eq!(last.as_map()["data"]["v"], "1");
        assert_eq!(deleted.bytes(), deleted.obj.json());
        // A delete of a key the cache never held only advances the revision.
        let other = key("never");
        c.apply([delete(&other, 103)]);
        assert_eq!(c.revision(), 103);
        assert_eq!(c.register(Some(102)).unwrap().backlog.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_older_than_the_window_age_leaves_when_the_next_one_comes() {
        let c = cache(16);
        let (k, v) = (key("a"), value("a", "1"));
        c.apply([put(&k, &v, 101), put(&k, &v, 102)]);
        tokio::time::advance(WINDOW_AGE - Duration::from_secs(1)).await;
        c.apply([put(&k, &v, 103)]);
        // Room in the window, and none too old yet: every resume is served from it.
        assert_eq!(c.register(Some(100)).unwrap().backlog.len(), 3);
        tokio::time::advance(Duration::from_secs(1)).await;
        c.apply([put(&k, &v, 104)]);
        // 101 and 102 are now 75 s old: they went, so the window is complete after 102.
        assert_eq!(c.register(Some(101)).err(), Some(102));
        assert_eq!(kinds(&c.register(Some(102)).unwrap().backlog).len(), 2);
    }

    #[test]
    fn the_window_keeps_the_newest_events_and_refuses_older_resumes() {
        let c = cache(16);
        let (k, v) = (key("a"), value("a", "1"));
        c.apply((101..=120).map(|rv| put(&k, &v, rv)));
        // 20 events through a window of 16: 101..=104 fell out, so it is complete after 104.
        assert_eq!(c.register(Some(103)).err(), Some(104));
        let reg = c.register(Some(104)).unwrap();
        assert_eq!(reg.backlog.len(), 16);
        assert_eq!(reg.backlog[0].rv, 105);
        assert_eq!(reg.after, 104);
        // From the current state: the objects, then events after the cache's revision.
        let now = c.register(None).unwrap();
        assert_eq!(now.initial.len(), 1);
        assert_eq!(now.after, 120);
    }

    #[test]
    fn progress_advances_a_quiet_cache_and_tells_watchers() {
        let c = cache(16);
        let mut reg = c.register(Some(100)).unwrap();
        c.progress(150);
        c.progress(140); // older news
        assert_eq!(c.revision(), 150);
        assert!(matches!(reg.rx.try_recv(), Ok(Broadcast::Progress(150))));
        assert!(reg.rx.try_recv().is_err());
    }

    #[test]
    fn a_relist_ends_the_watchers_of_the_previous_copy() {
        let c = cache(16);
        let mut reg = c.register(None).unwrap();
        let (k, v) = (key("a"), value("a", "1"));
        let obj = Arc::new(CachedObject::from_storage(&c.info, &v, 300).unwrap());
        c.load(BTreeMap::from([(k.as_str().into(), obj)]), 300);
        assert!(matches!(
            reg.rx.try_recv(),
            Err(broadcast::error::TryRecvError::Closed)
        ));
        assert_eq!(c.get(&k).unwrap().rv(), 300);
        assert_eq!(c.register(Some(299)).err(), Some(300));
    }

    /// A relist split at the namespaces still reads every object once, those of namespaces
    /// whose keys sort between others' (`a-b/` before `a/`) and of none that exists.
    #[tokio::test]
    async fn a_relist_split_at_namespaces_reads_every_object_once() {
        let mem = crate::etcd::mem::MemEtcd::new();
        for ns in ["a", "a-b", "b", "c"] {
            mem.put(&format!("/registry/core/namespaces/{ns}"), b"{}".to_vec());
        }
        let mut want = Vec::new();
        for ns in ["a", "a-b", "b", "c", "gone", "0"] {
            for i in 0..3 {
                let name = format!("cm{i}");
                let key = format!("{PREFIX}{ns}/{name}");
                let value = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns}}))
                .unwrap();
                mem.put(&key, value);
                want.push(key);
            }
        }
        want.sort();
        let info = keel_api::builtin_resources()
            .into_iter()
            .find(|r| r.kind == "ConfigMap")
            .unwrap();
        let c = WatchCache::new(Arc::new(info), PREFIX.into(), 16, Default::default());
        c.split_relists_at("/registry/core/namespaces/".into());
        c.relist(&mem).await.unwrap();
        let (objects, revision) = c.list(PREFIX);
        assert_eq!(revision, mem.revision());
        let keys: Vec<String> = objects
            .iter()
            .map(|o| format!("{PREFIX}{}/{}", o.namespace(), o.name()))
            .collect();
        assert_eq!(keys, want);
    }

    #[tokio::test(start_paused = true)]
    async fn readers_wait_for_the_first_list_until_their_deadline() {
        let info = keel_api::builtin_resources()
            .into_iter()
            .find(|r| r.kind == "ConfigMap")
            .unwrap();
        let c = WatchCache::new(Arc::new(info), PREFIX.into(), 16, Default::default());
        let start = Instant::now();
        let e = c
            .wait_ready(start + Duration::from_secs(2))
            .await
            .unwrap_err();
        assert_eq!(e.reason, keel_api::Reason::ServiceUnavailable);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        let waiter = {
            let c = c.clone();
            tokio::spawn(async move { c.wait_ready(Instant::now() + Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        c.load(BTreeMap::new(), 7);
        waiter.await.unwrap().unwrap();
        assert!(c.is_ready());
    }
}
