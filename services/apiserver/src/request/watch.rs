//! Watch: a stream of the changes a namespace and selectors choose, counted (and holding its
//! place among the open watches) while it is open.

use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use futures::Stream;
use keel_api::ApiError;
use keel_api::shard::ShardSelector;

use super::handler::{Context, Verb};
use super::limits::{Class, Slot};
use super::names::{collection_scope, selected_name, shard_scope};
use crate::metrics::Metrics;
use crate::registry::WatchStream;
pub use crate::registry::{WatchEvent, WatchEventKind};

pub struct Watch {
    pub namespace: String,
    pub label_selector: String,
    pub field_selector: String,
    /// Events after this version (`""` or `"0"`: the current objects first, as `ADDED`).
    pub resource_version: String,
    pub allow_bookmarks: bool,
    /// Kubernetes' streaming list: the current objects, then a bookmark annotated
    /// `k8s.io/initial-events-end`, then the changes. Needs `allow_bookmarks`.
    pub send_initial_events: bool,
    /// Objects whose initializers are still pending are seen too; without it an object
    /// appears (`ADDED`) once initialized.
    pub include_uninitialized: bool,
    /// Only these shards (as the client sent it; checked here).
    pub shard: Option<ShardSelector>,
}

impl Verb for Watch {
    const NAME: &'static str = "watch";
    const CLASS: Class = Class::Watch;
    type Output = OpenWatch;

    async fn run(self, cx: Context<'_>) -> Result<OpenWatch, ApiError> {
        let mut filter = collection_scope(
            &cx.info,
            &self.namespace,
            &self.label_selector,
            &self.field_selector,
        )?;
        filter.include_uninitialized = self.include_uninitialized;
        filter.shard = shard_scope(&cx.info, self.shard)?;
        let namespace = filter.namespace.clone().unwrap_or_default();
        if self.send_initial_events && !self.allow_bookmarks {
            // As Kubernetes' validation: the end of the initial events is a bookmark.
            return Err(ApiError::invalid(
                keel_api::Target::new(&cx.info.gvr.group, "ListOptions.meta.k8s.io", ""),
                vec![keel_api::FieldCause::forbidden(
                    "allowWatchBookmarks",
                    "sendInitialEvents requires setting allowWatchBookmarks to true",
                )],
            ));
        }
        let inner = cx
            .authorize(Self::NAME, &namespace, &selected_name(&filter), "")
            .await?
            .watch(
                &cx.info,
                filter,
                &self.resource_version,
                self.allow_bookmarks,
                self.send_initial_events,
            )
            .await?;
        let resource = cx.info.gvr.resource.clone();
        cx.metrics.watch_opened(&resource);
        Ok(OpenWatch {
            inner,
            metrics: cx.metrics.clone(),
            resource,
            _slot: cx.watch_slot,
        })
    }
}

/// A client's open watch: its events in revision order, an error ending it. Counted among the
/// open watches until dropped (closed, or the client gone). A concrete type rather than another
/// boxed stream: every event of every watcher passes through it.
pub struct OpenWatch {
    inner: WatchStream,
    metrics: Metrics,
    resource: String,
    /// Its place among the open watches.
    _slot: Option<Slot>,
}

impl Stream for OpenWatch {
    type Item = Result<WatchEvent, ApiError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.metrics.watch_closed(&self.resource);
    }
}
