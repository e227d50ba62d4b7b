//! One client's watch: replays what it asked for, then follows the live feed, filtering by
//! namespace and selectors and turning selector transitions into `ADDED`/`DELETED`.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType as EtcdEventType, WatchOptions};
use keel_api::proto::WatchEvent;
use keel_api::selector::{FieldSelector, LabelSelector};
use keel_api::{ApiError, Object, ResourceInfo};
use tokio::sync::{broadcast, mpsc};

use super::etcd::Etcd;
use super::watch_cache::{Broadcast, CacheEvent, EventType, Registration};
use crate::metrics::Metrics;
use crate::registry::strategy::from_storage;

/// Which objects a watcher wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Key prefix: the resource's, or one namespace's within it.
    pub key_prefix: String,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    pub fn matches(&self, obj: &Object) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|ns| obj.namespace() == ns)
            && self.labels.matches_object(obj)
            && self.fields.matches_object(obj)
    }
}

/// The per-watcher output buffer; a client that does not read blocks its watcher, which then
/// falls behind the cache's bounded feed and is closed.
pub const WATCHER_BUFFER: usize = 128;

/// What a watcher needs besides its feed.
pub struct WatchParams {
    pub info: Arc<ResourceInfo>,
    pub filter: Filter,
    pub bookmarks: Option<Duration>,
    pub metrics: Metrics,
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

type Out = mpsc::Sender<Result<WatchEvent, tonic::Status>>;

fn event(kind: &str, bytes: Vec<u8>) -> WatchEvent {
    WatchEvent {
        r#type: kind.into(),
        object: bytes,
    }
}

/// The client event for a cache event under this filter, if any.
fn to_client(ev: &CacheEvent, f: &Filter) -> Option<WatchEvent> {
    let now = ev.kind != EventType::Deleted && f.matches(&ev.obj);
    let before = ev.prev.as_ref().is_some_and(|p| f.matches(p));
    match (ev.kind, now, before) {
        (EventType::Deleted, _, true) => Some(event("DELETED", ev.bytes().to_vec())),
        (EventType::Deleted, _, false) => None,
        (_, true, true) => Some(event("MODIFIED", ev.bytes().to_vec())),
        (_, true, false) => Some(event("ADDED", ev.bytes().to_vec())),
        (_, false, true) => {
            // Stopped matching: the previous state, at this event's revision.
            let mut last = ev.prev.as_deref().cloned()?;
            last.set_resource_version(&ev.rv.to_string());
            Some(event("DELETED", last.to_vec()))
        }
        (_, false, false) => None,
    }
}

fn bookmark(info: &ResourceInfo, rv: i64) -> WatchEvent {
    let obj = serde_json::json!({
        "apiVersion": info.api_version(),
        "kind": info.kind,
        "metadata": {"resourceVersion": rv.to_string()},
    });
    event("BOOKMARK", serde_json::to_vec(&obj).unwrap_or_default())
}

struct Sender {
    out: Out,
    params: WatchParams,
    /// Every event up to here has been considered (sent or filtered out).
    seen: i64,
    bookmarked: i64,
}

impl Sender {
    /// Sends one event; false when the client is gone.
    async fn send(&mut self, ev: WatchEvent) -> bool {
        let ok = self.out.send(Ok(ev)).await.is_ok();
        if ok {
            self.params
                .metrics
                .watch_event_sent(&self.params.info.gvr.resource);
        }
        ok
    }

    async fn fail(&mut self, e: ApiError) {
        let _ = self.out.send(Err(e.into())).await;
    }

    async fn cache_event(&mut self, ev: &CacheEvent) -> bool {
        if ev.rv <= self.seen {
            return true;
        }
        self.seen = ev.rv;
        match to_client(ev, &self.params.filter) {
            Some(e) => self.send(e).await,
            None => true,
        }
    }

    async fn maybe_bookmark(&mut self) -> bool {
        if self.seen > self.bookmarked {
            self.bookmarked = self.seen;
            let b = bookmark(&self.params.info, self.seen);
            return self.send(b).await;
        }
        true
    }
}

/// Resolves once the server starts shutting down (the guard `wait_for` returns is dropped
/// here, so callers may await after it).
async fn shutting_down(rx: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|d| *d).await;
}

/// Serves a watcher from the cache: the initial state or backlog, then the live feed.
pub fn serve_from_cache(reg: Registration, params: WatchParams, out: Out) {
    tokio::spawn(async move {
        let mut shutdown = params.shutdown.clone();
        let bookmarks = params.bookmarks;
        let mut s = Sender {
            out,
            params,
            seen: reg.after,
            bookmarked: reg.after,
        };
        for obj in &reg.initial {
            if s.params.filter.matches(obj) && !s.send(event("ADDED", obj.to_vec())).await {
                return;
            }
        }
        for ev in &reg.backlog {
            if !s.cache_event(ev).await {
                return;
            }
        }
        let mut rx = reg.rx;
        let mut tick = tokio::time::interval(bookmarks.unwrap_or(Duration::from_secs(3600)));
        tick.tick().await;
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    Ok(Broadcast::Event(ev)) => {
                        if !s.cache_event(&ev).await {
                            return;
                        }
                    }
                    Ok(Broadcast::Progress(rv)) => s.seen = s.seen.max(rv),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        s.fail(ApiError::expired(format!(
                            "the watcher fell {n} events behind and was closed; resume from the last resourceVersion or relist"
                        )))
                        .await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        s.fail(ApiError::expired("the watch cache was reloaded; relist and watch again")).await;
                        return;
                    }
                },
                _ = tick.tick(), if bookmarks.is_some() => {
                    if !s.maybe_bookmark().await {
                        return;
                    }
                }
                _ = s.out.closed() => return,
                _ = shutting_down(&mut shutdown) => {
                    s.fail(ApiError::unavailable("the API server is shutting down; watch again")).await;
                    return;
                }
            }
        }
    });
}

/// Serves a watcher whose revision is older than the cache holds straight from etcd, which
/// keeps history until compaction (then: `Expired`).
pub fn serve_from_etcd(etcd: Etcd, from: i64, params: WatchParams, out: Out) {
    tokio::spawn(async move {
        let mut shutdown = params.shutdown.clone();
        let bookmarks = params.bookmarks;
        let prefix = params.filter.key_prefix.clone();
        let info = params.info.clone();
        let mut s = Sender {
            out,
            params,
            seen: from,
            bookmarked: from,
        };
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from + 1)
            .with_prev_key()
            .with_progress_notify();
        let mut client = etcd.client();
        let mut stream = match client.watch(prefix, Some(opts)).await {
            Ok(st) => st,
            Err(e) => {
                s.fail(ApiError::unavailable(format!("etcd watch: {e}")))
                    .await;
                return;
            }
        };
        let mut tick = tokio::time::interval(bookmarks.unwrap_or(Duration::from_secs(1)));
        tick.tick().await;
        loop {
            tokio::select! {
                msg = stream.message() => {
                    let resp = match msg {
                        Ok(Some(r)) => r,
                        Ok(None) | Err(_) => {
                            s.fail(ApiError::unavailable("the etcd watch ended; watch again from the last resourceVersion")).await;
                            return;
                        }
                    };
                    if resp.canceled() {
                        s.fail(ApiError::expired(format!(
                            "too old resource version: {from} (etcd compacted to {})",
                            resp.compact_revision()
                        )))
                        .await;
                        return;
                    }
                    if resp.events().is_empty() && !resp.created() {
                        if let Some(h) = resp.header() {
                            s.seen = s.seen.max(h.revision());
                        }
                        continue;
                    }
                    for ev in resp.events() {
                        let Some(ce) = convert(&info, ev) else { continue };
                        if !s.cache_event(&ce).await {
                            return;
                        }
                    }
                }
                _ = tick.tick() => {
                    let _ = stream.request_progress().await;
                    if bookmarks.is_some() && !s.maybe_bookmark().await {
                        return;
                    }
                }
                _ = s.out.closed() => return,
                _ = shutting_down(&mut shutdown) => {
                    s.fail(ApiError::unavailable("the API server is shutting down; watch again")).await;
                    return;
                }
            }
        }
    });
}

/// An etcd event (with its previous value) as a cache event.
fn convert(info: &ResourceInfo, ev: &etcd_client::Event) -> Option<CacheEvent> {
    let kv = ev.kv()?;
    let rv = kv.mod_revision();
    let prev = ev
        .prev_kv()
        .and_then(|p| from_storage(info, p.value(), p.mod_revision()).ok())
        .map(Arc::new);
    match ev.event_type() {
        EtcdEventType::Put => {
            let obj = from_storage(info, kv.value(), rv).ok()?;
            let kind = if kv.create_revision() == rv {
                EventType::Added
            } else {
                EventType::Modified
            };
            Some(CacheEvent::new(kind, rv, Arc::new(obj), prev))
        }
        EtcdEventType::Delete => {
            let mut last = prev.as_deref()?.clone();
            last.set_resource_version(&rv.to_string());
            Some(CacheEvent::new(
                EventType::Deleted,
                rv,
                Arc::new(last),
                prev,
            ))
        }
    }
}
