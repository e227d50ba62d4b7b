//! Watch: a stream of the changes a namespace and selectors choose, counted while it is open.

use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use futures::Stream;
use keel_api::ApiError;

use super::handler::{Context, Verb};
use super::names::collection_scope;
use crate::metrics::Metrics;
pub use crate::registry::{WatchEvent, WatchEventKind, WatchStream};

pub struct Watch {
    pub namespace: String,
    pub label_selector: String,
    pub field_selector: String,
    /// Events after this version (`""` or `"0"`: the current objects first, as `ADDED`).
    pub resource_version: String,
    pub allow_bookmarks: bool,
}

impl Verb for Watch {
    const NAME: &'static str = "watch";
    type Output = WatchStream;

    async fn run(self, cx: Context<'_>) -> Result<WatchStream, ApiError> {
        let filter = collection_scope(
            &cx.info,
            &self.namespace,
            &self.label_selector,
            &self.field_selector,
        )?;
        let inner = cx
            .registry
            .watch(
                &cx.info,
                filter,
                &self.resource_version,
                self.allow_bookmarks,
            )
            .await?;
        let resource = cx.info.gvr.resource.clone();
        cx.metrics.watch_opened(&resource);
        Ok(Box::pin(CountedWatch {
            inner,
            metrics: cx.metrics.clone(),
            resource,
        }))
    }
}

/// A client's watch stream; closing it (or the client going away) is counted.
struct CountedWatch {
    inner: WatchStream,
    metrics: Metrics,
    resource: String,
}

impl Stream for CountedWatch {
    type Item = Result<WatchEvent, ApiError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl Drop for CountedWatch {
    fn drop(&mut self) {
        self.metrics.watch_closed(&self.resource);
    }
}
