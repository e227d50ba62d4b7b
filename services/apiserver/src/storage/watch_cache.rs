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

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use etcd_client::{EventType as EtcdEventType, WatchOptions};
use keel_api::{ApiError, Object, ResourceInfo};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::etcd::{Etcd, prefix_end};
use crate::registry::strategy::from_storage;

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
    /// The object after the change; for `Deleted`, its last state with `rv` as its version.
    pub obj: Arc<Object>,
    /// `obj` serialized, once for all watchers, on first use (a resource nobody watches never
    /// pays for it).
    bytes: OnceLock<Bytes>,
    /// The object before the change, when it existed: lets a watcher whose selector stopped
    /// matching send `DELETED`.
    pub prev: Option<Arc<Object>>,
}

impl CacheEvent {
    pub fn new(
        kind: EventType,
        rv: i64,
        obj: Arc<Object>,
        prev: Option<Arc<Object>>,
    ) -> CacheEvent {
        CacheEvent {
            kind,
            rv,
            obj,
            bytes: OnceLock::new(),
            prev,
        }
    }

    /// The object's JSON (a shared buffer: cloning it copies nothing).
    pub fn bytes(&self) -> Bytes {
        self.bytes
            .get_or_init(|| Bytes::from(self.obj.to_vec()))
            .clone()
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
    store: BTreeMap<String, Arc<Object>>,
    window: VecDeque<Arc<CacheEvent>>,
    /// The window holds every event with a revision above this one.
    oldest: i64,
    /// The newest revision the cache is complete up to.
    rv: i64,
    tx: broadcast::Sender<Broadcast>,
}

/// A watcher's start: the state to replay, then the live feed.
pub struct Registration {
    /// For a watch without a resourceVersion: the current objects, to send as `ADDED`.
    pub initial: Vec<Arc<Object>>,
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
}

/// Why a cache watch ended.
enum WatchEnd {
    /// etcd compacted past our revision: relist.
    Compacted,
    Failed(String),
}

impl WatchCache {
    /// A cache of `prefix` (ending in `/`) holding up to `capacity` recent events.
    pub fn new(info: Arc<ResourceInfo>, prefix: String, capacity: usize) -> Arc<WatchCache> {
        let (tx, _) = broadcast::channel(capacity.max(16));
        Arc::new(WatchCache {
            info,
            prefix,
            capacity: capacity.max(16),
            state: Mutex::new(State {
                store: BTreeMap::new(),
                window: VecDeque::new(),
                oldest: 0,
                rv: 0,
                tx,
            }),
            ready: watch::channel(false).0,
        })
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

    /// The cached object at `key`.
    pub fn get(&self, key: &str) -> Option<Arc<Object>> {
        self.lock().store.get(key).cloned()
    }

    /// The cached objects whose keys start with `prefix`, and the revision they are at.
    pub fn list(&self, prefix: &str) -> (Vec<Arc<Object>>, i64) {
        let st = self.lock();
        let items = st
            .store
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect();
        (items, st.rv)
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
    pub async fn run(self: Arc<Self>, etcd: Etcd) {
        let mut need_list = true;
        let mut backoff = Duration::from_millis(100);
        loop {
            if need_list {
                match self.relist(&etcd).await {
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
            match self.watch(&etcd, from).await {
                WatchEnd::Compacted => {
                    tracing::warn!(resource = %self.info.gvr, "watch cache fell behind a compaction; relisting");
                    need_list = true;
                }
                WatchEnd::Failed(e) => {
                    tracing::warn!(resource = %self.info.gvr, error = %e, "watch cache lost its etcd watch; resuming");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Loads every object at one revision and swaps the store in whole.
    async fn relist(&self, etcd: &Etcd) -> Result<(), ApiError> {
        const PAGE: i64 = 1000;
        let end = prefix_end(&self.prefix);
        let mut start = self.prefix.as_bytes().to_vec();
        let mut revision = 0;
        let mut store = BTreeMap::new();
        loop {
            let deadline = Instant::now() + Duration::from_secs(30);
            let page = etcd
                .range(&start, end.clone(), revision, PAGE, deadline)
                .await?;
            revision = page.revision;
            for kv in &page.kvs {
                match from_storage(&self.info, &kv.value, kv.mod_revision) {
                    Ok(o) => {
                        store.insert(kv.key.clone(), Arc::new(o));
                    }
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
                _ => break,
            }
        }
        let mut st = self.lock();
        let first = !self.is_ready();
        st.store = store;
        st.window.clear();
        st.oldest = revision;
        st.rv = revision;
        if !first {
            // Watchers of the old feed missed what happened between the lists.
            st.tx = broadcast::channel(self.capacity).0;
        }
        drop(st);
        self.ready.send_replace(true);
        tracing::info!(resource = %self.info.gvr, revision, "watch cache loaded");
        Ok(())
    }

    async fn watch(&self, etcd: &Etcd, from: i64) -> WatchEnd {
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from)
            .with_progress_notify();
        let mut client = etcd.client();
        let mut stream = match client.watch(self.prefix.clone(), Some(opts)).await {
            Ok(s) => s,
            Err(e) => return WatchEnd::Failed(e.to_string()),
        };
        // Quiet resources still advance: ask etcd where the stream stands every second.
        let mut progress = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                msg = stream.message() => {
                    let resp = match msg {
                        Ok(Some(r)) => r,
                        Ok(None) => return WatchEnd::Failed("etcd closed the watch".into()),
                        Err(e) => return WatchEnd::Failed(e.to_string()),
                    };
                    if resp.canceled() {
                        if resp.compact_revision() > 0 {
                            return WatchEnd::Compacted;
                        }
                        return WatchEnd::Failed(format!("watch canceled: {}", resp.cancel_reason()));
                    }
                    if resp.events().is_empty() {
                        if !resp.created()
                            && let Some(h) = resp.header()
                        {
                            self.progress(h.revision());
                        }
                        continue;
                    }
                    let mut st = self.lock();
                    for ev in resp.events() {
                        self.apply(&mut st, ev);
                    }
                }
                _ = progress.tick() => {
                    if let Err(e) = stream.request_progress().await {
                        return WatchEnd::Failed(e.to_string());
                    }
                }
            }
        }
    }

    fn progress(&self, rv: i64) {
        let mut st = self.lock();
        if rv > st.rv {
            st.rv = rv;
            let _ = st.tx.send(Broadcast::Progress(rv));
        }
    }

    fn apply(&self, st: &mut State, ev: &etcd_client::Event) {
        let Some(kv) = ev.kv() else { return };
        let rv = kv.mod_revision();
        if rv <= st.rv {
            return; // already seen (a resumed watch may repeat the boundary)
        }
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let (kind, obj, prev) = match ev.event_type() {
            EtcdEventType::Put => {
                let obj = match from_storage(&self.info, kv.value(), rv) {
                    Ok(o) => Arc::new(o),
                    Err(e) => {
                        tracing::error!(key = %key, error = %e, "skipping unreadable object");
                        return;
                    }
                };
                let prev = st.store.insert(key, obj.clone());
                let kind = if prev.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                (kind, obj, prev)
            }
            EtcdEventType::Delete => {
                let Some(prev) = st.store.remove(&key) else {
                    st.rv = rv;
                    return;
                };
                let mut last = (*prev).clone();
                last.set_resource_version(&rv.to_string());
                (EventType::Deleted, Arc::new(last), Some(prev))
            }
        };
        let event = Arc::new(CacheEvent::new(kind, rv, obj, prev));
        st.window.push_back(event.clone());
        while st.window.len() > self.capacity {
            if let Some(old) = st.window.pop_front() {
                st.oldest = old.rv;
            }
        }
        st.rv = rv;
        let _ = st.tx.send(Broadcast::Event(event));
    }
}
