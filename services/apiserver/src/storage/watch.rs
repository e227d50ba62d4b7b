//! Starting a watch: from the watch cache when its window reaches back far enough, else
//! straight from etcd's history.

use std::sync::Arc;
use std::time::Duration;

use keel_api::{ApiError, ResourceInfo};
use tokio::time::Instant;

use super::Store;
use super::filter::Filter;
use super::watcher::{self, WatchParams, WatchStream};

/// How long a watch waits for its resource's cache to load (etcd unreachable at start-up).
const CACHE_READY_WAIT: Duration = Duration::from_secs(30);

impl Store {
    /// Starts a watch of the objects `filter` selects, after revision `from` (`None`: the
    /// current objects first, as `ADDED`, then, with `initial_events_end`, the bookmark that
    /// says so). Errors that prevent it from starting are returned; later ones end the stream.
    pub async fn watch(
        &self,
        info: &Arc<ResourceInfo>,
        filter: Filter,
        from: Option<i64>,
        allow_bookmarks: bool,
        initial_events_end: bool,
    ) -> Result<WatchStream, ApiError> {
        let prefix = self
            .keys
            .scope_prefix(info, filter.namespace.as_deref().unwrap_or(""));
        let cache = self.cache(info);
        cache.wait_ready(Instant::now() + CACHE_READY_WAIT).await?;
        let params = WatchParams {
            info: info.clone(),
            filter,
            bookmarks: allow_bookmarks.then_some(self.config.bookmark_interval),
            initial_events_end: initial_events_end && from.is_none(),
            metrics: self.metrics.clone(),
            shutdown: self.shutdown.clone(),
        };
        Ok(match cache.register(from) {
            Ok(reg) => watcher::serve_from_cache(reg, params),
            Err(_) => watcher::serve_from_etcd(self.kv.clone(), prefix, from.unwrap_or(0), params),
        })
    }
}
