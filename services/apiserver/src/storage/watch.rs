//! Starting a watch: from the watch cache when its window reaches back far enough, else
//! straight from etcd's history.

use std::sync::Arc;
use std::time::Duration;

use keel_api::{ApiError, ResourceInfo};
use tokio::time::Instant;

use super::Store;
use super::filter::Filter;
use super::watch_cache::{Registration, WatchCache};
use super::watcher::{self, WatchParams, WatchStream};
use crate::etcd::prefix_end;

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
        let registered = match from {
            Some(_) => cache.register(from),
            None => {
                let deadline = Instant::now() + CACHE_READY_WAIT;
                Ok(self.register_now(&cache, &prefix, deadline).await?)
            }
        };
        Ok(match registered {
            Ok(reg) => watcher::serve_from_cache(cache.clone(), reg, params),
            Err(_) => watcher::serve_from_etcd(self.kv.clone(), prefix, from.unwrap_or(0), params),
        })
    }

    /// A watch without a revision starts with the objects as they are now: as new as etcd's
    /// current revision, so that a client sees the writes that finished before it asked
    /// (Kubernetes' consistent reads; a streaming list, `sendInitialEvents`, relies on it). The
    /// cache's objects when it has reached that revision; else those under `prefix` read from
    /// etcd at it (the cache of a resource written a moment ago may not have seen the write
    /// yet, and a quiet one's moves only on progress notifications), the cache's live feed
    /// following from there.
    async fn register_now(
        &self,
        cache: &Arc<WatchCache>,
        prefix: &str,
        deadline: Instant,
    ) -> Result<Registration, ApiError> {
        let now = self.kv.current_revision(deadline).await?;
        if cache.revision() >= now
            && let Ok(reg) = cache.register(None)
        {
            return Ok(reg);
        }
        let objects = cache
            .read_range(
                &*self.kv,
                prefix.as_bytes().to_vec(),
                prefix_end(prefix),
                now,
            )
            .await?;
        // The window holds every event after its oldest revision, which is at most the
        // cache's, below `now`: registering from `now` cannot be refused.
        let mut reg = cache.register(Some(now)).map_err(|oldest| {
            ApiError::internal(format!(
                "the watch cache's window starts after {oldest}, past etcd's revision {now}"
            ))
        })?;
        reg.initial = objects.into_iter().map(|(_, o)| o).collect();
        Ok(reg)
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use keel_api::{Metadata, Object, Reason};
    use serde_json::json;

    use super::*;
    use crate::etcd::KeyValue;
    use crate::etcd::mem::MemEtcd;
    use crate::storage::WatchEventKind;
    use crate::storage::testing::{Fixture, configmap, far};

    /// The next event's kind, name and `data.v`.
    async fn next(w: &mut WatchStream) -> Result<(WatchEventKind, String, String), ApiError> {
        let ev = tokio::time::timeout_at(far(), w.next())
            .await
            .expect("an event in time")
            .expect("the watch goes on")?;
        let o = Object::from_slice(&ev.object).unwrap();
        let v = o.as_map()["data"]["v"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        Ok((ev.kind, o.name().to_string(), v))
    }

    fn seen(kind: WatchEventKind, name: &str, v: &str) -> (WatchEventKind, String, String) {
        (kind, name.into(), v.into())
    }

    #[tokio::test]
    async fn a_watch_from_before_the_caches_window_is_served_from_etcds_history() {
        let f = Fixture::new();
        let a = f.create("a", json!({"v": "1"})).await;
        let from: i64 = a.resource_version().parse().unwrap();
        f.overwrite(&configmap("a", json!({"v": "2"})));
        f.create("b", json!({"v": "1"})).await;
        // The cache loads after these writes: its window starts after them.
        f.wait_for_cache(f.mem.revision()).await;
        let mut w = f
            .store
            .watch(&f.info, Default::default(), Some(from), false, false)
            .await
            .unwrap();
        assert_eq!(
            next(&mut w).await.unwrap(),
            seen(WatchEventKind::Modified, "a", "2")
        );
        assert_eq!(
            next(&mut w).await.unwrap(),
            seen(WatchEventKind::Added, "b", "1")
        );
        f.overwrite(&configmap("b", json!({"v": "2"})));
        assert_eq!(
            next(&mut w).await.unwrap(),
            seen(WatchEventKind::Modified, "b", "2")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_without_a_version_starts_with_every_write_before_it_though_the_cache_lags() {
        let f = Fixture::on(MemEtcd::new());
        let a = f.create("a", json!({"v": "1"})).await;
        f.wait_for_cache(a.resource_version().parse().unwrap())
            .await;
        // The cache's etcd watch breaks: until it resumes, writes do not reach the cache.
        f.mem.break_watches();
        let b = f.overwrite(&configmap("b", json!({"v": "1"})));
        assert!(f.store.cache(&f.info).revision() < b);
        // A streaming list: the initial objects, then the bookmark that ends them.
        let mut w = f
            .store
            .watch(&f.info, Default::default(), None, true, true)
            .await
            .unwrap();
        assert_eq!(
            next(&mut w).await.unwrap(),
            seen(WatchEventKind::Added, "a", "1")
        );
        assert_eq!(
            next(&mut w).await.unwrap(),
            seen(WatchEventKind::Added, "b", "1")
        );
        let end = tokio::time::timeout_at(far(), w.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(end.kind, WatchEventKind::Bookmark);
        // The cache resumes; b is not sent again, and later writes follow.
        f.overwrite(&configmap("c", json!({"v": "1"})));
        assert_eq!(
            next(&mut w).await.unwrap(),
            seen(WatchEventKind::Added, "c", "1")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_resources_events_leave_the_window_with_age_and_a_watch_from_before_them_reads_etcd()
     {
        use crate::storage::watch_cache::{TRIM_EVERY, WINDOW_AGE};
        let f = Fixture::on(MemEtcd::new());
        f.wait_for_cache(f.mem.revision()).await;
        let a = f.create("a", json!({"v": "1"})).await;
        let created: i64 = a.resource_version().parse().unwrap();
        let updated = f.overwrite(&configmap("a", json!({"v": "2"})));
        f.wait_for_cache(updated).await;
        let cache = f.store.cache(&f.info);
        // Both events are in the window, the first holding the version the second replaced.
        let reg = cache.register(Some(created - 1)).unwrap();
        assert_eq!(reg.backlog.len(), 2);
        let replaced = Arc::downgrade(&reg.backlog[0].obj);
        drop(reg);
        // Nothing else is written: the cache lets them go once they are older than the age.
        tokio::time::sleep(WINDOW_AGE + TRIM_EVERY).await;
        assert_eq!(cache.register(Some(created - 1)).err(), Some(updated));
        assert!(
            replaced.upgrade().is_none(),
            "the replaced version is still held"
        );
        assert!(cache.register(Some(updated)).is_ok());
        // A watch from before them still sees both, from etcd's history.
        let mut w = f
            .store
            .watch(&f.info, Default::default(), Some(created - 1), false, false)
            .await
            .unwrap();
        assert_eq!(
            next(&mut w).await.unwrap(),
            seen(WatchEventKind::Added, "a", "1")
        );
        assert_eq!(
            next(&mut w).await.unwrap(),
            seen(WatchEventKind::Modified, "a", "2")
        );
    }

    #[tokio::test]
    async fn a_watch_from_before_the_compaction_ends_expired() {
        let f = Fixture::new();
        let a = f.create("a", json!({"v": "1"})).await;
        let from: i64 = a.resource_version().parse().unwrap();
        f.overwrite(&configmap("a", json!({"v": "2"})));
        f.create("b", json!({"v": "1"})).await;
        f.mem.compact(f.mem.revision(), far()).await.unwrap();
        f.wait_for_cache(f.mem.revision()).await;
        let mut w = f
            .store
            .watch(&f.info, Default::default(), Some(from), false, false)
            .await
            .unwrap();
        let err = next(&mut w).await.unwrap_err();
        assert_eq!(err.reason, Reason::Expired);
        assert!(
            err.message.contains("too old resource version"),
            "{}",
            err.message
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cache_that_resumes_behind_a_compaction_relists_and_its_watchers_end() {
        let f = Fixture::on(MemEtcd::new());
        let a = f.create("a", json!({"v": "1"})).await;
        f.wait_for_cache(a.resource_version().parse().unwrap())
            .await;
        let mut w = f
            .store
            .watch(
                &f.info,
                Default::default(),
                Some(f.mem.revision()),
                false,
                false,
            )
            .await
            .unwrap();
        // The cache's etcd watch breaks; before it resumes, writes land and are compacted.
        f.mem.break_watches();
        f.overwrite(&configmap("a", json!({"v": "2"})));
        f.create("b", json!({"v": "1"})).await;
        f.mem.compact(f.mem.revision(), far()).await.unwrap();
        f.wait_for_cache(f.mem.revision()).await;
        let cache = f.store.cache(&f.info);
        let b = cache.get(&f.key("b").key).expect("b, from the relist");
        assert_eq!(b.rv(), f.mem.revision());
        // Its watcher missed what the relist skipped over: it must list again.
        assert_eq!(next(&mut w).await.unwrap_err().reason, Reason::Expired);
    }
}
