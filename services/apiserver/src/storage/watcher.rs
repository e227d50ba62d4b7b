//! One client's watch: replays what it asked for, then follows the live feed, filtering by
//! namespace and selectors and turning selector transitions into `ADDED`/`DELETED`.
//!
//! A watch served from the cache is a stream the transport polls directly: no task and no
//! channel per watcher, so a delivery costs one broadcast receive. The transport polls only
//! while the client can take more (HTTP/2 flow control). A watcher that falls behind the
//! cache's small broadcast buffer catches up from the cache's window of recent events; one
//! that falls behind the window too is closed with `Expired` instead of buffering without
//! bound.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use keel_api::{ApiError, ResourceInfo};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Interval;

use super::cached::CachedObject;
use super::filter::Filter;
use super::watch_cache::{Broadcast, CacheEvent, EventType, Registration, WatchCache};
use crate::etcd::{self, EventKind, KeyValue, WatchEnd};
use crate::metrics::Metrics;

/// What a watcher is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEventKind {
    Added,
    Modified,
    Deleted,
    /// No object: every event up to the bookmark's `resourceVersion` has been sent.
    Bookmark,
}

impl WatchEventKind {
    /// The name Kubernetes gives it (`ADDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEventKind::Added => "ADDED",
            WatchEventKind::Modified => "MODIFIED",
            WatchEventKind::Deleted => "DELETED",
            WatchEventKind::Bookmark => "BOOKMARK",
        }
    }
}

/// One event for one watcher: the object's JSON is a shared buffer (every watcher of a cache
/// event sends the same bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    pub kind: WatchEventKind,
    pub object: Bytes,
}

/// A watch: events in revision order; an error ends it.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, ApiError>> + Send>>;

/// The buffer of a watch served straight from etcd (between its task and the client).
const ETCD_WATCH_BUFFER: usize = 128;

/// What a watcher needs besides its feed.
pub struct WatchParams {
    pub info: Arc<ResourceInfo>,
    pub filter: Filter,
    /// How often to send a bookmark (`None`: the client did not ask for them).
    pub bookmarks: Option<Duration>,
    /// After the initial state, a bookmark annotated `k8s.io/initial-events-end` (a streaming
    /// list's end, as Kubernetes' WatchList marks it).
    pub initial_events_end: bool,
    pub metrics: Metrics,
    /// Set when the server shuts down: every watch ends, and clients resume elsewhere.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

fn event(kind: WatchEventKind, object: Bytes) -> WatchEvent {
    WatchEvent { kind, object }
}

/// The client event for a cache event under this filter, if any.
fn to_client(ev: &CacheEvent, f: &Filter) -> Option<WatchEvent> {
    let now = ev.kind != EventType::Deleted && f.matches(&*ev.obj);
    let before = ev.prev.as_deref().is_some_and(|p| f.matches(p));
    match (ev.kind, now, before) {
        (EventType::Deleted, _, true) => Some(event(WatchEventKind::Deleted, ev.bytes())),
        (EventType::Deleted, _, false) => None,
        (_, true, true) => Some(event(WatchEventKind::Modified, ev.bytes())),
        (_, true, false) => Some(event(WatchEventKind::Added, ev.bytes())),
        (_, false, true) => {
            // Stopped matching: the previous state, at this event's revision.
            let last = ev.prev.as_deref()?.at_revision(ev.rv);
            Some(event(WatchEventKind::Deleted, last.json().clone()))
        }
        (_, false, false) => None,
    }
}

/// The annotation of the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

fn bookmark(info: &ResourceInfo, rv: i64) -> WatchEvent {
    bookmark_with(info, rv, None)
}

fn bookmark_with(info: &ResourceInfo, rv: i64, annotation: Option<&str>) -> WatchEvent {
    let mut obj = serde_json::json!({
        "apiVersion": info.api_version(),
        "kind": info.kind,
        "metadata": {"resourceVersion": rv.to_string()},
    });
    if let Some(a) = annotation {
        obj["metadata"]["annotations"] = serde_json::json!({ a: "true" });
    }
    event(
        WatchEventKind::Bookmark,
        Bytes::from(serde_json::to_vec(&obj).unwrap_or_default()),
    )
}

/// Resolves once the server starts shutting down (the guard `wait_for` returns is dropped
/// here, so callers may await after it).
async fn shutting_down(rx: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|d| *d).await;
}

/// Ticks when there is an interval, never otherwise.
async fn tick(t: &mut Option<Interval>) {
    match t {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Where a watcher stands: what it has considered, what it has bookmarked.
struct Progress {
    /// Every event up to here has been considered (sent or filtered out).
    seen: i64,
    bookmarked: i64,
}

impl Progress {
    /// The client event for `ev`, once and in order.
    fn consider(&mut self, ev: &CacheEvent, filter: &Filter) -> Option<WatchEvent> {
        if ev.rv <= self.seen {
            return None;
        }
        self.seen = ev.rv;
        to_client(ev, filter)
    }

    fn bookmark(&mut self, info: &ResourceInfo) -> Option<WatchEvent> {
        (self.seen > self.bookmarked).then(|| {
            self.bookmarked = self.seen;
            bookmark(info, self.seen)
        })
    }
}

/// A watch served from the cache.
struct CacheWatch {
    params: WatchParams,
    cache: Arc<WatchCache>,
    rx: broadcast::Receiver<Broadcast>,
    /// The initial state or the backlog, converted up front.
    pending: VecDeque<WatchEvent>,
    progress: Progress,
    bookmarks: Option<Interval>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    done: bool,
}

impl CacheWatch {
    async fn next(&mut self) -> Option<Result<WatchEvent, ApiError>> {
        if self.done {
            return None;
        }
        if let Some(e) = self.pending.pop_front() {
            return Some(Ok(e));
        }
        loop {
            tokio::select! {
                msg = self.rx.recv() => match msg {
                    Ok(Broadcast::Event(ev)) => {
                        if let Some(e) = self.progress.consider(&ev, &self.params.filter) {
                            return Some(Ok(e));
                        }
                    }
                    Ok(Broadcast::Progress(rv)) => self.progress.seen = self.progress.seen.max(rv),
                    Err(broadcast::error::RecvError::Lagged(n)) => match self.cache.register(Some(self.progress.seen)) {
                        // The window still holds what the broadcast dropped: catch up from it.
                        Ok(reg) => {
                            self.rx = reg.rx;
                            for ev in &reg.backlog {
                                if let Some(e) = self.progress.consider(ev, &self.params.filter) {
                                    self.pending.push_back(e);
                                }
                            }
                            if let Some(e) = self.pending.pop_front() {
                                return Some(Ok(e));
                            }
                        }
                        Err(_) => {
                            self.done = true;
                            return Some(Err(ApiError::expired(format!(
                                "the watcher fell {n} events behind, past the watch cache's window, and was closed; resume from the last resourceVersion or relist"
                            ))));
                        }
                    },
                    Err(broadcast::error::RecvError::Closed) => {
                        self.done = true;
                        return Some(Err(ApiError::expired("the watch cache was reloaded; relist and watch again")));
                    }
                },
                _ = tick(&mut self.bookmarks) => {
                    if let Some(b) = self.progress.bookmark(&self.params.info) {
                        return Some(Ok(b));
                    }
                }
                _ = shutting_down(&mut self.shutdown) => {
                    self.done = true;
                    return Some(Err(ApiError::unavailable("the API server is shutting down; watch again")));
                }
            }
        }
    }
}

fn bookmark_interval(every: Option<Duration>) -> Option<Interval> {
    every.map(|d| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + d, d);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    })
}

/// Serves a watcher from the cache: the initial state or backlog (`reg`, registered with
/// `cache`), then the live feed.
pub fn serve_from_cache(
    cache: Arc<WatchCache>,
    reg: Registration,
    params: WatchParams,
) -> WatchStream {
    let mut progress = Progress {
        seen: reg.after,
        bookmarked: reg.after,
    };
    let mut pending = VecDeque::new();
    for obj in &reg.initial {
        if params.filter.matches(&**obj) {
            pending.push_back(event(WatchEventKind::Added, obj.json().clone()));
        }
    }
    if params.initial_events_end {
        // Every event up to the initial state's revision is in it.
        pending.push_back(bookmark_with(
            &params.info,
            reg.after,
            Some(INITIAL_EVENTS_END),
        ));
        progress.bookmarked = reg.after;
    }
    for ev in &reg.backlog {
        if let Some(e) = progress.consider(ev, &params.filter) {
            pending.push_back(e);
        }
    }
    let watch = CacheWatch {
        cache,
        rx: reg.rx,
        pending,
        progress,
        bookmarks: bookmark_interval(params.bookmarks),
        shutdown: params.shutdown.clone(),
        params,
        done: false,
    };
    Box::pin(futures::stream::unfold(watch, |mut w| async move {
        let item = w.next().await?;
        if item.is_ok() {
            w.params
                .metrics
                .watch_event_sent(&w.params.info.gvr.resource);
        }
        Some((item, w))
    }))
}

/// Serves a watcher whose revision is older than the cache holds straight from etcd, which
/// keeps history until compaction (then: `Expired`). Rare (a client resuming after this
/// replica restarted), so a task and a channel are fine here. `prefix` is the watched keys'.
pub fn serve_from_etcd(
    kv: Arc<dyn KeyValue>,
    prefix: String,
    from: i64,
    params: WatchParams,
) -> WatchStream {
    let (out, rx) = mpsc::channel::<Result<WatchEvent, ApiError>>(ETCD_WATCH_BUFFER);
    tokio::spawn(async move {
        let mut shutdown = params.shutdown.clone();
        let info = params.info.clone();
        let mut progress = Progress {
            seen: from,
            bookmarked: from,
        };
        let mut watch = match kv.watch(&prefix, from + 1, true).await {
            Ok(w) => w,
            Err(e) => {
                let _ = out
                    .send(Err(ApiError::unavailable(format!("etcd watch: {e}"))))
                    .await;
                return;
            }
        };
        let mut bookmarks = bookmark_interval(params.bookmarks);
        loop {
            tokio::select! {
                msg = watch.next() => {
                    let resp = match msg {
                        Ok(r) => r,
                        Err(WatchEnd::Canceled { compact_revision, .. }) => {
                            let e = ApiError::expired(format!(
                                "too old resource version: {from} (etcd compacted to {compact_revision})"
                            ));
                            let _ = out.send(Err(e)).await;
                            return;
                        }
                        Err(WatchEnd::Failed(why)) => {
                            // Its member went away: resume on another one after the last
                            // revision seen.
                            match kv.watch(&prefix, progress.seen + 1, true).await {
                                Ok(w) => {
                                    watch = w;
                                    continue;
                                }
                                Err(e) => {
                                    let e = ApiError::unavailable(format!(
                                        "the etcd watch ended ({why}) and could not resume ({e}); \
                                         watch again from the last resourceVersion"
                                    ));
                                    let _ = out.send(Err(e)).await;
                                    return;
                                }
                            }
                        }
                    };
                    if let Some(rv) = resp.progress() {
                        progress.seen = progress.seen.max(rv);
                        continue;
                    }
                    for ev in resp.events() {
                        let Some(ce) = convert(&info, &ev) else { continue };
                        if let Some(e) = progress.consider(&ce, &params.filter) {
                            if out.send(Ok(e)).await.is_err() {
                                return;
                            }
                            params.metrics.watch_event_sent(&info.gvr.resource);
                        }
                    }
                }
                _ = tick(&mut bookmarks) => {
                    if let Some(b) = progress.bookmark(&info)
                        && out.send(Ok(b)).await.is_err()
                    {
                        return;
                    }
                }
                _ = out.closed() => return,
                _ = shutting_down(&mut shutdown) => {
                    let _ = out.send(Err(ApiError::unavailable("the API server is shutting down; watch again"))).await;
                    return;
                }
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// An etcd event (with its previous value) as a cache event.
fn convert(info: &ResourceInfo, ev: &etcd::Event<'_>) -> Option<CacheEvent> {
    let rv = ev.mod_revision;
    let prev = ev
        .prev
        .and_then(|(value, revision)| CachedObject::from_storage(info, value, revision).ok())
        .map(Arc::new);
    match ev.kind {
        EventKind::Put => {
            let obj = CachedObject::from_storage(info, ev.value, rv).ok()?;
            let kind = if ev.create_revision == rv {
                EventType::Added
            } else {
                EventType::Modified
            };
            Some(CacheEvent::new(kind, rv, Arc::new(obj), prev))
        }
        EventKind::Delete => {
            let last = prev.as_deref()?.at_revision(rv);
            Some(CacheEvent::new(
                EventType::Deleted,
                rv,
                Arc::new(last),
                prev,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use futures::StreamExt;
    use keel_api::Reason;
    use keel_api::selector::LabelSelector;
    use serde_json::{Value, json};
    use tokio::time::Instant;

    use super::*;
    use crate::storage::watch_cache::WatchCache;

    const PREFIX: &str = "/registry/core/configmaps/";

    struct Setup {
        cache: Arc<WatchCache>,
        shutdown: tokio::sync::watch::Sender<bool>,
    }

    /// A loaded cache of ConfigMaps at revision 100 holding `objects`.
    fn setup(capacity: usize, objects: &[(&str, &str)]) -> Setup {
        let info = Arc::new(
            keel_api::builtin_resources()
                .into_iter()
                .find(|r| r.kind == "ConfigMap")
                .unwrap(),
        );
        let cache = WatchCache::new(info.clone(), PREFIX.into(), capacity, Default::default());
        let store: BTreeMap<Box<str>, Arc<CachedObject>> = objects
            .iter()
            .map(|(name, app)| {
                let obj = CachedObject::from_storage(&info, &value(name, app), 100).unwrap();
                (key(name).into(), Arc::new(obj))
            })
            .collect();
        cache.load(store, 100);
        Setup {
            cache,
            shutdown: tokio::sync::watch::channel(false).0,
        }
    }

    impl Setup {
        fn watch(
            &self,
            from: Option<i64>,
            filter: Filter,
            bookmarks: Option<Duration>,
        ) -> WatchStream {
            let params = WatchParams {
                info: self.cache.info.clone(),
                filter,
                bookmarks,
                initial_events_end: false,
                metrics: Metrics::new(),
                shutdown: self.shutdown.subscribe(),
            };
            serve_from_cache(
                self.cache.clone(),
                self.cache.register(from).unwrap(),
                params,
            )
        }

        fn put(&self, name: &str, app: &str, rv: i64) {
            let (k, v) = (key(name), value(name, app));
            self.cache.apply([etcd::Event {
                kind: EventKind::Put,
                key: k.as_bytes(),
                value: &v,
                mod_revision: rv,
                create_revision: rv,
                prev: None,
            }]);
        }

        fn delete(&self, name: &str, rv: i64) {
            let k = key(name);
            self.cache.apply([etcd::Event {
                kind: EventKind::Delete,
                key: k.as_bytes(),
                value: b"",
                mod_revision: rv,
                create_revision: 0,
                prev: None,
            }]);
        }
    }

    fn key(name: &str) -> String {
        format!("{PREFIX}default/{name}")
    }

    fn value(name: &str, app: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({"metadata": {"name": name, "namespace": "default",
            "labels": {"app": app}}}))
        .unwrap()
    }

    fn app(app: &str) -> Filter {
        Filter {
            labels: LabelSelector::parse(&format!("app={app}")).unwrap(),
            ..Filter::default()
        }
    }

    /// The next event as (type, name, resourceVersion).
    async fn next(w: &mut WatchStream) -> (WatchEventKind, String, String) {
        let ev = w.next().await.expect("the watch ended").expect("an event");
        let obj: Value = serde_json::from_slice(&ev.object).unwrap();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let rv = obj["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        (ev.kind, name, rv)
    }

    fn ev(kind: WatchEventKind, name: &str, rv: i64) -> (WatchEventKind, String, String) {
        (kind, name.to_string(), rv.to_string())
    }

    use WatchEventKind::{Added, Bookmark, Deleted, Modified};

    #[tokio::test(start_paused = true)]
    async fn a_watch_without_version_starts_with_the_current_objects() {
        let s = setup(16, &[("a", "web"), ("b", "web")]);
        let mut w = s.watch(None, Filter::default(), None);
        assert_eq!(next(&mut w).await, ev(Added, "a", 100));
        assert_eq!(next(&mut w).await, ev(Added, "b", 100));
        s.put("c", "web", 101);
        s.put("a", "web", 102);
        assert_eq!(next(&mut w).await, ev(Added, "c", 101));
        assert_eq!(next(&mut w).await, ev(Modified, "a", 102));
    }

    #[tokio::test(start_paused = true)]
    async fn selector_transitions_become_added_and_deleted() {
        let s = setup(16, &[]);
        let mut w = s.watch(Some(100), app("web"), None);
        s.put("a", "web", 101);
        s.put("other", "db", 102);
        s.put("a", "db", 103);
        s.put("a", "web", 104);
        s.delete("a", 105);
        assert_eq!(next(&mut w).await, ev(Added, "a", 101));
        // Stopped matching: the previous state, at the revision it stopped.
        assert_eq!(next(&mut w).await, ev(Deleted, "a", 103));
        assert_eq!(next(&mut w).await, ev(Added, "a", 104));
        assert_eq!(next(&mut w).await, ev(Deleted, "a", 105));
    }

    #[tokio::test(start_paused = true)]
    async fn a_resumed_watch_replays_the_window_after_its_version() {
        let s = setup(16, &[]);
        s.put("a", "web", 101);
        s.put("b", "web", 102);
        let mut w = s.watch(Some(101), Filter::default(), None);
        s.put("c", "web", 103);
        assert_eq!(next(&mut w).await, ev(Added, "b", 102));
        assert_eq!(next(&mut w).await, ev(Added, "c", 103));
    }

    /// The broadcast holds 256 events; the window, 1,000: a watcher 400 behind misses none.
    #[tokio::test(start_paused = true)]
    async fn a_watcher_behind_the_live_feed_catches_up_from_the_window() {
        let s = setup(1000, &[]);
        let mut w = s.watch(Some(100), Filter::default(), None);
        for rv in 101..=500 {
            s.put(&format!("o{rv}"), "web", rv);
        }
        for rv in 101..=500 {
            assert_eq!(next(&mut w).await, ev(Added, &format!("o{rv}"), rv));
        }
        s.put("last", "web", 501);
        assert_eq!(next(&mut w).await, ev(Added, "last", 501));
    }

    #[tokio::test(start_paused = true)]
    async fn a_watcher_a_window_behind_is_closed_with_expired() {
        let s = setup(16, &[]);
        let mut w = s.watch(Some(100), Filter::default(), None);
        // The client reads nothing while 40 events go by a broadcast 16 deep.
        for rv in 101..=140 {
            s.put("a", "web", rv);
        }
        let e = w.next().await.unwrap().unwrap_err();
        assert_eq!(e.reason, Reason::Expired);
        assert!(e.message.starts_with("the watcher fell"), "{}", e.message);
        assert!(w.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn bookmarks_come_each_interval_when_the_stream_has_advanced() {
        let s = setup(16, &[]);
        let start = Instant::now();
        let every = Duration::from_secs(10);
        let mut w = s.watch(Some(100), Filter::default(), Some(every));
        // etcd says the resource is complete up to 105, with nothing to send.
        s.cache.progress(105);
        assert!(
            tokio::time::timeout(Duration::from_secs(9), w.next())
                .await
                .is_err()
        );
        assert_eq!(next(&mut w).await, ev(Bookmark, "", 105));
        assert_eq!(start.elapsed(), every);
        // Nothing new: no bookmark at the next tick.
        assert!(
            tokio::time::timeout(Duration::from_secs(15), w.next())
                .await
                .is_err()
        );
        s.put("a", "web", 106);
        assert_eq!(next(&mut w).await, ev(Added, "a", 106));
        assert_eq!(next(&mut w).await, ev(Bookmark, "", 106));
        assert_eq!(start.elapsed(), 3 * every);
    }

    #[tokio::test(start_paused = true)]
    async fn no_bookmarks_unless_asked() {
        let s = setup(16, &[]);
        let mut w = s.watch(Some(100), Filter::default(), None);
        s.cache.progress(105);
        assert!(
            tokio::time::timeout(Duration::from_secs(600), w.next())
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn watches_end_when_the_server_shuts_down() {
        let s = setup(16, &[]);
        let mut w = s.watch(Some(100), Filter::default(), None);
        s.shutdown.send_replace(true);
        let e = w.next().await.unwrap().unwrap_err();
        assert_eq!(e.reason, Reason::ServiceUnavailable);
        assert!(w.next().await.is_none());
    }
}
