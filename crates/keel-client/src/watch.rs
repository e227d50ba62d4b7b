//! Watch streams.

use futures::{Stream, StreamExt};
use keel_api::shard::ShardSelector;
use keel_api::{ApiError, GroupVersionResource, Metadata};
use keel_wire::proto::WatchRequest;
use serde_json::{Map, Value};

use crate::Client;
use crate::delivery::{Idempotency, delivery};

/// Buffer between a resumable watch's task and its reader.
const RESUMABLE_BUFFER: usize = 256;

/// The kind of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
    /// Carries only `metadata.resourceVersion`: every event up to it has been sent.
    Bookmark,
}

/// One watch event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub kind: EventType,
    pub object: Value,
}

/// An event reads as its object: `ev.name()`, `ev.resource_version()` (a bookmark's object
/// carries only the latter).
impl Metadata for Event {
    fn metadata(&self) -> Option<&Map<String, Value>> {
        self.object.metadata()
    }
}

/// What to watch.
#[derive(Debug, Clone, Default)]
pub struct WatchParams {
    /// "" watches every namespace.
    pub namespace: String,
    pub label_selector: String,
    pub field_selector: String,
    /// Events after this revision; "" or "0": the current state as `ADDED` events first.
    pub resource_version: String,
    pub allow_bookmarks: bool,
    /// Also objects whose initializers are still pending.
    pub include_uninitialized: bool,
    /// Only objects of these shards; an object moving out of them is `DELETED`.
    pub shard: Option<ShardSelector>,
}

/// A watch event whose object is left as the server's JSON bytes: for callers that only need
/// the kind and revision (parsing every object of a busy watch costs more than receiving it).
#[derive(Debug, Clone, PartialEq)]
pub struct RawEvent {
    pub kind: EventType,
    pub object: bytes::Bytes,
}

#[derive(serde::Deserialize)]
struct MetaOnly<'a> {
    #[serde(borrow)]
    metadata: RevisionOnly<'a>,
}

#[derive(serde::Deserialize)]
struct RevisionOnly<'a> {
    #[serde(rename = "resourceVersion", borrow, default)]
    resource_version: std::borrow::Cow<'a, str>,
}

impl RawEvent {
    /// `metadata.resourceVersion`, read without building the object.
    pub fn resource_version(&self) -> Option<i64> {
        let m: MetaOnly<'_> = serde_json::from_slice(&self.object).ok()?;
        m.metadata.resource_version.parse().ok()
    }

    /// The object, parsed.
    pub fn parse(self) -> Result<Event, ApiError> {
        let object = serde_json::from_slice(&self.object).map_err(|e| {
            ApiError::internal(format!("the server sent an unreadable object: {e}"))
        })?;
        Ok(Event {
            kind: self.kind,
            object,
        })
    }
}

impl Client {
    /// Opens a watch. The stream ends with an error when the server closes it: `Expired` means
    /// the revision is gone (relist), anything else means watch again from the last revision.
    pub async fn watch(
        &self,
        g: &GroupVersionResource,
        p: &WatchParams,
    ) -> Result<impl Stream<Item = Result<Event, ApiError>> + Send + Unpin + use<>, ApiError> {
        Ok(self
            .watch_raw(g, p)
            .await?
            .map(|ev| ev.and_then(RawEvent::parse)))
    }

    /// [`Client::watch`], with objects left unparsed.
    pub async fn watch_raw(
        &self,
        g: &GroupVersionResource,
        p: &WatchParams,
    ) -> Result<impl Stream<Item = Result<RawEvent, ApiError>> + Send + Unpin + use<>, ApiError>
    {
        let req = WatchRequest {
            resource: Some(keel_wire::proto::ResourceRef {
                group: g.group.clone(),
                version: g.version.clone(),
                resource: g.resource.clone(),
            }),
            namespace: p.namespace.clone(),
            label_selector: p.label_selector.clone(),
            field_selector: p.field_selector.clone(),
            resource_version: p.resource_version.clone(),
            allow_bookmarks: p.allow_bookmarks,
            // keel-client lists, then watches from the list's revision (its reflector does).
            send_initial_events: false,
            include_uninitialized: p.include_uninitialized,
            shard: p.shard.as_ref().map(crate::client::shard_selector),
        };
        let stream = self
            // The stream has no deadline: it lasts until either side ends it.
            .call(Idempotency::Read, |mut c, _| {
                let r = self.request(req.clone(), None);
                async move { c.watch(r).await }
            })
            .await?;
        Ok(stream.map(|item| {
            // A stream cut by a server that died is ServiceUnavailable, as for unary calls.
            let ev = item.map_err(|s| crate::client::api_error(&s, delivery(&s)))?;
            let kind = match ev.r#type.as_str() {
                "ADDED" => EventType::Added,
                "MODIFIED" => EventType::Modified,
                "DELETED" => EventType::Deleted,
                "BOOKMARK" => EventType::Bookmark,
                other => {
                    return Err(ApiError::internal(format!(
                        "unknown watch event type {other:?}"
                    )));
                }
            };
            Ok(RawEvent {
                kind,
                object: ev.object,
            })
        }))
    }
}

impl Client {
    /// A watch that survives the loss of its server: when the stream breaks for any reason
    /// but `Expired`, it is opened again (on the next endpoint that answers) from the last
    /// resourceVersion seen, with backoff, so the reader gets every event once and in order.
    /// `Expired` is passed on and ends the stream: the caller must relist. So is a refusal
    /// (`Forbidden`, `Unauthorized`, a bad request: [`ApiError::is_refusal`]), which another
    /// attempt would only meet again.
    pub fn watch_resumable(
        &self,
        g: &GroupVersionResource,
        p: &WatchParams,
    ) -> impl Stream<Item = Result<Event, ApiError>> + Send + Unpin + use<> {
        let (tx, rx) = tokio::sync::mpsc::channel(RESUMABLE_BUFFER);
        let (client, g, mut p) = (self.clone(), g.clone(), p.clone());
        tokio::spawn(async move {
            let mut backoff = std::time::Duration::from_millis(100);
            loop {
                let mut stream = match client.watch(&g, &p).await {
                    Ok(s) => s,
                    Err(e) if e.must_relist() || e.is_refusal() => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                    Err(_) => {
                        if tx.is_closed() {
                            return;
                        }
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
                        continue;
                    }
                };
                while let Some(item) = stream.next().await {
                    match item {
                        Ok(ev) => {
                            backoff = std::time::Duration::from_millis(100);
                            p.resource_version = ev.resource_version().to_string();
                            if tx.send(Ok(ev)).await.is_err() {
                                return;
                            }
                        }
                        Err(e) if e.must_relist() || e.is_refusal() => {
                            let _ = tx.send(Err(e)).await;
                            return;
                        }
                        Err(_) => break,
                    }
                }
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }
}
