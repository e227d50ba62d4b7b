//! Watch streams.

use futures::{Stream, StreamExt};
use keel_api::proto::WatchRequest;
use keel_api::{ApiError, GroupVersionResource};
use serde_json::Value;

use crate::Client;

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

impl Event {
    /// The event's object's `metadata.resourceVersion`.
    pub fn resource_version(&self) -> &str {
        self.object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
    }

    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or("")
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
}

impl Client {
    /// Opens a watch. The stream ends with an error when the server closes it: `Expired` means
    /// the revision is gone (relist), anything else means watch again from the last revision.
    pub async fn watch(
        &self,
        g: &GroupVersionResource,
        p: &WatchParams,
    ) -> Result<impl Stream<Item = Result<Event, ApiError>> + Send + Unpin + use<>, ApiError> {
        let req = WatchRequest {
            resource: Some(keel_api::proto::ResourceRef {
                group: g.group.clone(),
                version: g.version.clone(),
                resource: g.resource.clone(),
            }),
            namespace: p.namespace.clone(),
            label_selector: p.label_selector.clone(),
            field_selector: p.field_selector.clone(),
            resource_version: p.resource_version.clone(),
            allow_bookmarks: p.allow_bookmarks,
        };
        let stream = self
            .objects()
            .watch(req)
            .await
            .map_err(|s| ApiError::from_status(&s))?
            .into_inner();
        Ok(stream.map(|item| {
            let ev = item.map_err(|s| ApiError::from_status(&s))?;
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
            let object = serde_json::from_slice(&ev.object).map_err(|e| {
                ApiError::internal(format!("the server sent an unreadable object: {e}"))
            })?;
            Ok(Event { kind, object })
        }))
    }
}
