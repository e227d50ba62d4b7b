//! One client's watch: replays what it asked for, then follows the live feed, filtering by
//! namespace and selectors and turning selector transitions into `ADDED`/`DELETED`.
//!
//! A watch served from the cache is a stream that tonic polls directly: no task and no channel
//! per watcher, so a delivery costs one broadcast receive. tonic polls only while the client's
//! HTTP/2 window has room, so a client that stops reading falls behind the cache's bounded
//! broadcast and is closed with `Expired` instead of buffering without bound.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use etcd_client::{EventType as EtcdEventType, WatchOptions};
use futures::Stream;
use keel_api::proto::WatchEvent;
use keel_api::selector::{FieldSelector, LabelSelector};
use keel_api::{ApiError, Object, ResourceInfo};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Interval;

use super::etcd::Etcd;
use super::watch_cache::{Broadcast, CacheEvent, EventType, Registration};
use crate::metrics::Metrics;
use crate::registry::strategy::from_storage;

/// A watch as the gRPC service returns it.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, tonic::Status>> + Send>>;

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

/// The buffer of a watch served straight from etcd (between its task and the client).
const ETCD_WATCH_BUFFER: usize = 128;

/// What a watcher needs besides its feed.
pub struct WatchParams {
    pub info: Arc<ResourceInfo>,
    pub filter: Filter,
    pub bookmarks: Option<Duration>,
    pub metrics: Metrics,
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

fn event(kind: &str, object: Bytes) -> WatchEvent {
    WatchEvent {
        r#type: kind.into(),
        object,
    }
}

/// The client event for a cache event under this filter, if any.
fn to_client(ev: &CacheEvent, f: &Filter) -> Option<WatchEvent> {
    let now = ev.kind != EventType::Deleted && f.matches(&ev.obj);
    let before = ev.prev.as_ref().is_some_and(|p| f.matches(p));
    match (ev.kind, now, before) {
        (EventType::Deleted, _, true) => Some(event("DELETED", ev.bytes())),
        (EventType::Deleted, _, false) => None,
        (_, true, true) => Some(event("MODIFIED", ev.bytes())),
        (_, true, false) => Some(event("ADDED", ev.bytes())),
        (_, false, true) => {
            // Stopped matching: the previous state, at this event's revision.
            let mut last = ev.prev.as_deref().cloned()?;
            last.set_resource_version(&ev.rv.to_string());
            Some(event("DELETED", Bytes::from(last.to_vec())))
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
    event(
        "BOOKMARK",
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
    rx: broadcast::Receiver<Broadcast>,
    /// The initial state or the backlog, converted up front.
    pending: VecDeque<WatchEvent>,
    progress: Progress,
    bookmarks: Option<Interval>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    done: bool,
}

impl CacheWatch {
    async fn next(&mut self) -> Option<Result<WatchEvent, tonic::Status>> {
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
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        self.done = true;
                        return Some(Err(ApiError::expired(format!(
                            "the watcher fell {n} events behind and was closed; resume from the last resourceVersion or relist"
                        ))
                        .into()));
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        self.done = true;
                        return Some(Err(ApiError::expired("the watch cache was reloaded; relist and watch again").into()));
                    }
                },
                _ = tick(&mut self.bookmarks) => {
                    if let Some(b) = self.progress.bookmark(&self.params.info) {
                        return Some(Ok(b));
                    }
                }
                _ = shutting_down(&mut self.shutdown) => {
                    self.done = true;
                    return Some(Err(ApiError::unavailable("the API server is shutting down; watch again").into()));
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

/// Serves a watcher from the cache: the initial state or backlog, then the live feed.
pub fn serve_from_cache(reg: Registration, params: WatchParams) -> WatchStream {
    let mut progress = Progress {
        seen: reg.after,
        bookmarked: reg.after,
    };
    let mut pending = VecDeque::new();
    for obj in &reg.initial {
        if params.filter.matches(obj) {
            pending.push_back(event("ADDED", Bytes::from(obj.to_vec())));
        }
    }
    for ev in &reg.backlog {
        if let Some(e) = progress.consider(ev, &params.filter) {
            pending.push_back(e);
        }
    }
    let watch = CacheWatch {
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
/// replica restarted), so a task and a channel are fine here.
pub fn serve_from_etcd(etcd: Etcd, from: i64, params: WatchParams) -> WatchStream {
    let (out, rx) = mpsc::channel::<Result<WatchEvent, tonic::Status>>(ETCD_WATCH_BUFFER);
    tokio::spawn(async move {
        let fail = |e: ApiError| Err::<WatchEvent, tonic::Status>(e.into());
        let mut shutdown = params.shutdown.clone();
        let prefix = params.filter.key_prefix.clone();
        let info = params.info.clone();
        let mut progress = Progress {
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
                let _ = out
                    .send(fail(ApiError::unavailable(format!("etcd watch: {e}"))))
                    .await;
                return;
            }
        };
        let mut every = tokio::time::interval(params.bookmarks.unwrap_or(Duration::from_secs(1)));
        every.tick().await;
        loop {
            tokio::select! {
                msg = stream.message() => {
                    let resp = match msg {
                        Ok(Some(r)) => r,
                        Ok(None) | Err(_) => {
                            let _ = out.send(fail(ApiError::unavailable("the etcd watch ended; watch again from the last resourceVersion"))).await;
                            return;
                        }
                    };
                    if resp.canceled() {
                        let e = ApiError::expired(format!(
                            "too old resource version: {from} (etcd compacted to {})",
                            resp.compact_revision()
                        ));
                        let _ = out.send(fail(e)).await;
                        return;
                    }
                    if resp.events().is_empty() && !resp.created() {
                        if let Some(h) = resp.header() {
                            progress.seen = progress.seen.max(h.revision());
                        }
                        continue;
                    }
                    for ev in resp.events() {
                        let Some(ce) = convert(&info, ev) else { continue };
                        if let Some(e) = progress.consider(&ce, &params.filter) {
                            if out.send(Ok(e)).await.is_err() {
                                return;
                            }
                            params.metrics.watch_event_sent(&info.gvr.resource);
                        }
                    }
                }
                _ = every.tick() => {
                    let _ = stream.request_progress().await;
                    if params.bookmarks.is_some()
                        && let Some(b) = progress.bookmark(&info)
                        && out.send(Ok(b)).await.is_err()
                    {
                        return;
                    }
                }
                _ = out.closed() => return,
                _ = shutting_down(&mut shutdown) => {
                    let _ = out.send(fail(ApiError::unavailable("the API server is shutting down; watch again"))).await;
                    return;
                }
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
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
