//! The reflector: List, then Watch from the list's resourceVersion, feeding a [`DeltaFifo`].
//!
//! - The list is paged (500 objects a page); the server reads every page at the first
//!   page's revision, so the pages add up to one consistent snapshot, queued as one
//!   `Replace`: the store is swapped whole, never filled half-way.
//! - The watch asks for bookmarks, so that its resume point advances on quiet resources.
//! - A broken watch is opened again from the last resourceVersion seen: nothing is lost and
//!   nothing repeated. `Expired` (that revision is compacted), or a revision newer than the store has
//!   (etcd restored from a backup), means relist.
//! - Every retry waits on one [`Backoff`]: 800 ms doubling to 30 s, jittered, reset after
//!   two healthy minutes (client-go's defaults).
//! - Sharded (a controller-manager's share of the keyspace, [`ShardFeed`]): List and Watch ask
//!   for the shards held; when that set changes, the watch stops at its revision R, the shards
//!   gained are listed at exactly R, the shards lost are dropped, the result is queued as one
//!   `Replace`, and the watch resumes from R for the new set. Shards kept are never relisted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{Future, StreamExt};
use keel_api::shard::{ShardSelector, shard_of_json};
use keel_api::{ApiError, GroupVersionResource, Metadata};
use keel_client::{Client, Event, EventType, ListParams, ObjectList, WatchParams};
use serde_json::Value;
use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::delta_fifo::{DeltaFifo, DeltaType};

/// Objects per List page (client-go's pager default).
pub const PAGE_SIZE: i64 = 500;

/// Which objects of a resource an informer caches. Equal options share one informer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct WatchOptions {
    /// "" for every namespace.
    pub namespace: String,
    pub label_selector: String,
    pub field_selector: String,
    /// Also objects whose initializers are still pending: what every controller that creates
    /// or counts objects must see, or it over-creates.
    pub include_uninitialized: bool,
    /// Only the shards this replica holds, when the factory is sharded
    /// ([`InformerFactory::with_shards`](crate::InformerFactory::with_shards)); all objects
    /// otherwise.
    pub shard_by: Option<ShardBy>,
}

/// Which name puts an object in a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardBy {
    /// Its own.
    Name,
    /// Its controlling owner's, or its own without one (a Pod goes with its ReplicaSet).
    Owner,
}

/// The shards a replica holds, as they change: what a sharded informer caches.
#[derive(Debug, Clone)]
pub struct ShardFeed {
    pub count: u32,
    pub held: watch::Receiver<BTreeSet<u32>>,
}

impl WatchOptions {
    /// Caches only the shards held (by `by`), when the factory is sharded.
    pub fn sharded(mut self, by: ShardBy) -> Self {
        self.shard_by = Some(by);
        self
    }

    pub fn include_uninitialized(mut self) -> Self {
        self.include_uninitialized = true;
        self
    }

    pub fn namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = ns.into();
        self
    }

    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = selector.into();
        self
    }

    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = selector.into();
        self
    }
}

/// Why a reflector is retrying; logged, never returned: a reflector runs until stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReflectorError {
    /// A List failed (server unreachable, or a continue token compacted mid-list): the list
    /// starts over after the backoff.
    #[error("list failed: {0}")]
    List(ApiError),
    /// A watch could not be opened or broke: it is opened again from the last
    /// resourceVersion after the backoff.
    #[error("watch failed: {0}")]
    Watch(ApiError),
    /// The resourceVersion to watch from is compacted: the reflector relists.
    #[error("watch expired, relisting: {0}")]
    Expired(ApiError),
}

/// The two calls a reflector makes; a seam so that its logic is tested without a server.
pub(crate) trait ListerWatcher: Send + Sync + 'static {
    /// A page of the list; `scope` narrows it to shards and may pin its revision.
    fn list(
        &self,
        limit: i64,
        continue_token: &str,
        scope: &Scope,
    ) -> impl Future<Output = Result<ObjectList, ApiError>> + Send;

    fn watch(
        &self,
        resource_version: &str,
        shard: Option<&ShardSelector>,
    ) -> impl Future<Output = Result<BoxStream<'static, Result<Event, ApiError>>, ApiError>> + Send;
}

/// What a List is narrowed to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Scope {
    pub shard: Option<ShardSelector>,
    /// List at exactly this revision (shards gained while watching); else the newest.
    pub at: Option<String>,
}

/// Lists and watches one resource through the API server.
pub(crate) struct ApiListerWatcher {
    pub client: Client,
    pub gvr: GroupVersionResource,
    pub options: WatchOptions,
}

impl ListerWatcher for ApiListerWatcher {
    fn list(
        &self,
        limit: i64,
        continue_token: &str,
        scope: &Scope,
    ) -> impl Future<Output = Result<ObjectList, ApiError>> + Send {
        let (resource_version, resource_version_match) = match &scope.at {
            Some(rv) => (rv.clone(), "Exact".to_string()),
            // "": a consistent read from etcd, so a relist is never older than the watch it
            // replaces.
            None => (String::new(), String::new()),
        };
        let p = ListParams {
            label_selector: self.options.label_selector.clone(),
            field_selector: self.options.field_selector.clone(),
            limit,
            continue_token: continue_token.to_string(),
            resource_version,
            resource_version_match,
            include_uninitialized: self.options.include_uninitialized,
            shard: scope.shard.clone(),
        };
        async move {
            self.client
                .list(&self.gvr, &self.options.namespace, &p)
                .await
        }
    }

    fn watch(
        &self,
        resource_version: &str,
        shard: Option<&ShardSelector>,
    ) -> impl Future<Output = Result<BoxStream<'static, Result<Event, ApiError>>, ApiError>> + Send
    {
        let p = WatchParams {
            namespace: self.options.namespace.clone(),
            label_selector: self.options.label_selector.clone(),
            field_selector: self.options.field_selector.clone(),
            resource_version: resource_version.to_string(),
            allow_bookmarks: true,
            include_uninitialized: self.options.include_uninitialized,
            shard: shard.cloned(),
        };
        async move { Ok(self.client.watch(&self.gvr, &p).await?.boxed()) }
    }
}

/// A sharded reflector's view: which shards, by which name, and a copy of what it has queued
/// (so that a change of shards can be queued as one `Replace` without relisting the kept ones).
struct Sharding {
    feed: ShardFeed,
    by_owner: bool,
    /// The shards the current list and watch are for.
    ids: BTreeSet<u32>,
    /// Every object queued, by `namespace/name`.
    mirror: BTreeMap<String, Arc<Value>>,
}

impl Sharding {
    fn selector(&self, ids: &BTreeSet<u32>) -> ShardSelector {
        ShardSelector {
            count: self.feed.count,
            ids: ids.iter().copied().collect(),
            by_owner: self.by_owner,
        }
    }

    fn shard(&self, obj: &Value) -> u32 {
        shard_of_json(obj, self.feed.count, self.by_owner)
    }
}

fn mirror_key(obj: &Value) -> String {
    format!("{}/{}", obj.namespace(), obj.name())
}

/// Resolves when the held shards change; never without a feed (or once its sender is gone).
async fn shards_changed(sharding: &mut Option<Sharding>) {
    let Some(s) = sharding else {
        return std::future::pending().await;
    };
    if s.feed.held.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Why a watch stream ended.
enum Ended {
    Broke(ApiError),
    Closed,
    /// The held shards changed: watch again for the new set.
    Resharded,
}

/// Keeps a [`DeltaFifo`] in step with the server.
pub(crate) struct Reflector<L> {
    lw: L,
    fifo: DeltaFifo,
    backoff: Backoff,
    /// Names the resource in logs.
    what: String,
    sharding: Option<Sharding>,
}

impl<L: ListerWatcher> Reflector<L> {
    pub(crate) fn new(lw: L, fifo: DeltaFifo, what: String) -> Self {
        Reflector {
            lw,
            fifo,
            backoff: Backoff::default(),
            what,
            sharding: None,
        }
    }

    /// Caches only the shards `feed` says are held, by name or by controlling owner.
    pub(crate) fn sharded(mut self, feed: ShardFeed, by: ShardBy) -> Self {
        self.sharding = Some(Sharding {
            feed,
            by_owner: by == ShardBy::Owner,
            ids: BTreeSet::new(),
            mirror: BTreeMap::new(),
        });
        self
    }

    /// Lists and watches until dropped.
    pub(crate) async fn run(mut self) {
        loop {
            if let Some(s) = &mut self.sharding {
                s.ids = s.feed.held.borrow_and_update().clone();
            }
            let rv = match self.list().await {
                Ok(rv) => rv,
                Err(e) => {
                    tracing::warn!(resource = %self.what, error = %e, "reflector");
                    self.backoff.wait().await;
                    continue;
                }
            };
            let expired = self.watch(rv).await;
            tracing::info!(resource = %self.what, error = %expired, "reflector");
            self.backoff.wait().await;
        }
    }

    /// Lists every page of `scope` (all of it: `shard` unset and `at` unset).
    async fn list_pages(&self, scope: &Scope) -> Result<(Vec<Arc<Value>>, String), ApiError> {
        let mut items = Vec::new();
        let mut token = String::new();
        let mut resource_version = None;
        loop {
            let page = self.lw.list(PAGE_SIZE, &token, scope).await?;
            resource_version.get_or_insert(page.resource_version);
            items.extend(page.items.into_iter().map(Arc::new));
            if page.continue_token.is_empty() {
                break;
            }
            token = page.continue_token;
        }
        Ok((items, resource_version.unwrap_or_default()))
    }

    /// Lists every page and queues the list as one `Replace`; returns its resourceVersion.
    async fn list(&mut self) -> Result<String, ReflectorError> {
        let scope = Scope {
            shard: self.sharding.as_ref().map(|s| s.selector(&s.ids)),
            at: None,
        };
        let (items, rv) = self
            .list_pages(&scope)
            .await
            .map_err(ReflectorError::List)?;
        tracing::debug!(resource = %self.what, objects = items.len(), "listed");
        match &mut self.sharding {
            Some(s) => {
                s.mirror = items.iter().map(|o| (mirror_key(o), o.clone())).collect();
                self.fifo.replace_shards(items, s.ids.clone());
            }
            None => self.fifo.replace(items),
        }
        Ok(rv)
    }

    /// Moves to the shards now held: drops the ones lost, lists the ones gained at exactly
    /// `rv` (where the watch stopped), and queues the result as one `Replace`. An error (the
    /// revision compacted, say) is returned as `Expired`: the caller relists everything.
    async fn reshard(&mut self, rv: &str) -> Result<(), ReflectorError> {
        let Some(s) = &mut self.sharding else {
            return Ok(());
        };
        let now = s.feed.held.borrow_and_update().clone();
        let gained: BTreeSet<u32> = now.difference(&s.ids).copied().collect();
        let lost: BTreeSet<u32> = s.ids.difference(&now).copied().collect();
        if gained.is_empty() && lost.is_empty() {
            return Ok(());
        }
        let scope = Scope {
            shard: Some(s.selector(&gained)),
            at: Some(rv.to_string()),
        };
        let added = if gained.is_empty() {
            Vec::new()
        } else {
            self.list_pages(&scope)
                .await
                .map_err(ReflectorError::Expired)?
                .0
        };
        let Some(s) = &mut self.sharding else {
            return Ok(());
        };
        let before = s.mirror.len();
        let mirror = std::mem::take(&mut s.mirror);
        s.mirror = mirror
            .into_iter()
            .filter(|(_, o)| !lost.contains(&s.shard(o)))
            .collect();
        let dropped = before - s.mirror.len();
        for o in added {
            s.mirror.insert(mirror_key(&o), o);
        }
        s.ids = now.clone();
        tracing::info!(
            resource = %self.what, gained = ?gained, lost = ?lost, dropped,
            objects = s.mirror.len(), "shards changed"
        );
        self.fifo
            .replace_shards(s.mirror.values().cloned().collect(), now);
        Ok(())
    }

    /// Watches from `rv`, re-opening broken watches from the last revision seen, and following
    /// the held shards; returns only when the revision has expired.
    async fn watch(&mut self, mut rv: String) -> ReflectorError {
        loop {
            let shard = self.sharding.as_ref().map(|s| s.selector(&s.ids));
            let mut stream = match self.lw.watch(&rv, shard.as_ref()).await {
                Ok(s) => s,
                Err(e) if e.must_relist() => return ReflectorError::Expired(e),
                Err(e) => {
                    tracing::warn!(resource = %self.what, error = %ReflectorError::Watch(e), "reflector");
                    self.backoff.wait().await;
                    continue;
                }
            };
            let ended = loop {
                tokio::select! {
                    ev = stream.next() => match ev {
                        Some(Ok(ev)) => self.apply(ev, &mut rv),
                        Some(Err(e)) if e.must_relist() => {
                            return ReflectorError::Expired(e);
                        }
                        Some(Err(e)) => break Ended::Broke(e),
                        None => break Ended::Closed,
                    },
                    _ = shards_changed(&mut self.sharding) => {
                        if let Err(e) = self.reshard(&rv).await {
                            return e;
                        }
                        break Ended::Resharded;
                    }
                }
            };
            match ended {
                Ended::Broke(e) => {
                    tracing::warn!(resource = %self.what, error = %ReflectorError::Watch(e), "reflector");
                    self.backoff.wait().await;
                }
                Ended::Closed => {
                    tracing::debug!(resource = %self.what, "watch closed by the server");
                    self.backoff.wait().await;
                }
                // Watch again from the same revision, for the new set, at once.
                Ended::Resharded => {}
            }
        }
    }

    fn apply(&mut self, ev: Event, rv: &mut String) {
        let ev_rv = ev.resource_version();
        if !ev_rv.is_empty() {
            *rv = ev_rv.to_string();
        }
        let kind = match ev.kind {
            EventType::Added => DeltaType::Added,
            EventType::Modified => DeltaType::Updated,
            EventType::Deleted => DeltaType::Deleted,
            EventType::Bookmark => return,
        };
        let obj = Arc::new(ev.object);
        if let Some(s) = &mut self.sharding {
            let key = mirror_key(&obj);
            if kind == DeltaType::Deleted {
                s.mirror.remove(&key);
            } else {
                s.mirror.insert(key, obj.clone());
            }
        }
        if let Err(e) = self.fifo.push(kind, obj) {
            tracing::warn!(resource = %self.what, error = %e, "watch event skipped");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::delta_fifo::Popped;
    use serde_json::{Value, json};
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::time::Duration;
    use tokio::time::Instant;

    type Page = Result<ObjectList, ApiError>;
    type Watch = Result<Vec<Result<Event, ApiError>>, ApiError>;

    /// Answers from a script; once it runs out, calls never complete.
    #[derive(Default)]
    struct Scripted {
        pages: Mutex<VecDeque<Page>>,
        watches: Mutex<VecDeque<Watch>>,
        /// Every call: `list <token>` / `watch <rv>`, with the (paused) time it was made.
        calls: Arc<Mutex<Vec<(Duration, String)>>>,
        start: Option<Instant>,
    }

    impl Scripted {
        fn log(&self, call: String) {
            let at = self.start.map(|s| s.elapsed()).unwrap_or_default();
            self.calls.lock().unwrap().push((at, call));
        }
    }

    impl ListerWatcher for Scripted {
        fn list(
            &self,
            limit: i64,
            token: &str,
            scope: &Scope,
        ) -> impl Future<Output = Page> + Send {
            assert_eq!(limit, 500);
            self.log(match (&scope.shard, &scope.at) {
                (None, None) => format!("list {token}"),
                (shard, at) => format!(
                    "list {token} shards={:?} at={}",
                    shard.as_ref().map(|s| s.ids.clone()).unwrap_or_default(),
                    at.clone().unwrap_or_default()
                ),
            });
            let next = self.pages.lock().unwrap().pop_front();
            async move {
                match next {
                    Some(p) => p,
                    None => futures::future::pending().await,
                }
            }
        }

        fn watch(
            &self,
            rv: &str,
            shard: Option<&ShardSelector>,
        ) -> impl Future<Output = Result<BoxStream<'static, Result<Event, ApiError>>, ApiError>> + Send
        {
            self.log(match shard {
                None => format!("watch {rv}"),
                Some(s) => format!("watch {rv} shards={:?}", s.ids),
            });
            let next = self.watches.lock().unwrap().pop_front();
            async move {
                match next {
                    Some(Ok(events)) => Ok(futures::stream::iter(events).boxed()),
                    Some(Err(e)) => Err(e),
                    None => Ok(futures::stream::pending().boxed()),
                }
            }
        }
    }

    fn obj(name: &str, rv: u32) -> Value {
        json!({"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv.to_string()}})
    }

    fn page(names: &[&str], rv: u32, token: &str) -> Page {
        Ok(ObjectList {
            items: names.iter().map(|n| obj(n, rv)).collect(),
            resource_version: rv.to_string(),
            continue_token: token.to_string(),
            remaining_item_count: -1,
        })
    }

    fn ev(kind: EventType, name: &str, rv: u32) -> Result<Event, ApiError> {
        Ok(Event {
            kind,
            object: obj(name, rv),
        })
    }

    fn bookmark(rv: u32) -> Result<Event, ApiError> {
        Ok(Event {
            kind: EventType::Bookmark,
            object: json!({"metadata": {"resourceVersion": rv.to_string()}}),
        })
    }

    /// Runs the reflector over the script until the FIFO has `n` entries; returns them and
    /// the calls made.
    async fn run(
        pages: Vec<Page>,
        watches: Vec<Watch>,
        n: usize,
    ) -> (Vec<String>, Vec<(Duration, String)>) {
        let lw = Scripted {
            pages: Mutex::new(pages.into()),
            watches: Mutex::new(watches.into()),
            start: Some(Instant::now()),
            ..Scripted::default()
        };
        let calls = lw.calls.clone();
        let fifo = DeltaFifo::new();
        let mut r = Reflector::new(lw, fifo.clone(), "test".into());
        // Deterministic delays: 800 ms, 1.6 s, ...
        r.backoff = no_jitter_backoff();
        let task = tokio::spawn(r.run());
        let mut out = Vec::new();
        while out.len() < n {
            let popped = tokio::time::timeout(Duration::from_secs(3600), fifo.pop())
                .await
                .expect("the reflector queued too little")
                .unwrap();
            out.push(match popped {
                Popped::Replace(objs, _) => format!(
                    "replace {}",
                    objs.iter()
                        .map(|o| o["metadata"]["name"].as_str().unwrap())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                Popped::Deltas { key, deltas } => format!(
                    "{key} {}",
                    deltas
                        .iter()
                        .map(|d| format!(
                            "{:?}@{}",
                            d.kind,
                            d.object["metadata"]["resourceVersion"].as_str().unwrap()
                        ))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            });
        }
        // Let the reflector make its next call (if the script has one) before stopping it.
        tokio::time::sleep(Duration::from_secs(120)).await;
        task.abort();
        let calls = calls.lock().unwrap().clone();
        (out, calls)
    }

    fn no_jitter_backoff() -> Backoff {
        let mut b = Backoff::default();
        b.set_random_for_tests(|| 0.0);
        b
    }

    fn names(calls: &[(Duration, String)]) -> Vec<&str> {
        calls.iter().map(|(_, c)| c.as_str()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn pages_are_listed_with_continue_tokens_then_watched_from_the_list_revision() {
        let (out, calls) = run(
            vec![page(&["a", "b"], 10, "t1"), page(&["c"], 10, "")],
            vec![Ok(vec![
                ev(EventType::Added, "d", 11),
                ev(EventType::Modified, "a", 12),
                ev(EventType::Deleted, "b", 13),
            ])],
            4,
        )
        .await;
        assert_eq!(
            out,
            [
                "replace a,b,c",
                "ns/d Added@11",
                "ns/a Updated@12",
                "ns/b Deleted@13"
            ]
        );
        assert_eq!(names(&calls)[..3], ["list ", "list t1", "watch 10"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_broken_watch_resumes_from_the_last_revision_after_a_backoff() {
        let (out, calls) = run(
            vec![page(&["a"], 10, "")],
            vec![
                Ok(vec![
                    ev(EventType::Modified, "a", 11),
                    bookmark(15),
                    Err(ApiError::unavailable("connection reset")),
                ]),
                Err(ApiError::unavailable("refused")),
                Ok(vec![ev(EventType::Modified, "a", 16)]),
            ],
            3,
        )
        .await;
        assert_eq!(out, ["replace a", "ns/a Updated@11", "ns/a Updated@16"]);
        let ms = Duration::from_millis;
        assert_eq!(
            calls,
            [
                (ms(0), "list ".to_string()),
                (ms(0), "watch 10".to_string()),
                // The bookmark moved the resume point; 800 ms, then 1.6 s of backoff.
                (ms(800), "watch 15".to_string()),
                (ms(2400), "watch 15".to_string()),
                // The third stream ended (server closed it): resumed from its last event.
                (ms(5600), "watch 16".to_string()),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_watch_relists() {
        let (out, calls) = run(
            vec![page(&["a", "b"], 10, ""), page(&["b", "c"], 20, "")],
            vec![Ok(vec![
                ev(EventType::Modified, "a", 11),
                Err(ApiError::expired("too old")),
            ])],
            3,
        )
        .await;
        assert_eq!(out, ["replace a,b", "ns/a Updated@11", "replace b,c"]);
        assert_eq!(
            names(&calls),
            ["list ", "watch 10", "list ", "watch 20"],
            "the relist is read fresh and watched from its own revision"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_list_is_retried_from_the_first_page() {
        let (out, calls) = run(
            vec![
                page(&["a"], 10, "t1"),
                Err(ApiError::expired("continue token compacted")),
                page(&["a"], 12, "t2"),
                page(&["b"], 12, ""),
            ],
            vec![],
            1,
        )
        .await;
        assert_eq!(out, ["replace a,b"]);
        assert_eq!(
            names(&calls),
            ["list ", "list t1", "list ", "list t2", "watch 12"]
        );
        assert_eq!(calls[2].0, Duration::from_millis(800));
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_watch_open_relists() {
        let (out, calls) = run(
            vec![page(&["a"], 10, ""), page(&["b"], 30, "")],
            vec![Err(ApiError::expired("gone"))],
            2,
        )
        .await;
        assert_eq!(out, ["replace a", "replace b"]);
        assert_eq!(names(&calls), ["list ", "watch 10", "list ", "watch 30"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resource_version_the_store_never_reached_relists() {
        // etcd restored from an older backup: the revision the reflector holds is in the
        // future; resuming from it would wait and time out forever.
        let (out, calls) = run(
            vec![page(&["a"], 10, ""), page(&["b"], 7, "")],
            vec![
                Err(ApiError::too_large_resource_version(10, 6)),
                Ok(vec![ev(EventType::Added, "c", 8)]),
            ],
            3,
        )
        .await;
        assert_eq!(out, ["replace a", "replace b", "ns/c Added@8"]);
        assert_eq!(
            names(&calls)[..4],
            ["list ", "watch 10", "list ", "watch 7"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_of_shards_lists_only_the_gained_ones_at_the_watch_revision() {
        // With 4 shards: ns/a is in shard 2, ns/b in 3, ns/c in 0, ns/e in 2.
        let lw = Scripted {
            pages: Mutex::new(vec![page(&["a", "b"], 10, ""), page(&["c"], 11, "")].into()),
            watches: Mutex::new(vec![Ok(vec![ev(EventType::Added, "e", 11)])].into()),
            start: Some(Instant::now()),
            ..Scripted::default()
        };
        let calls = lw.calls.clone();
        let fifo = DeltaFifo::new();
        let (held, feed) = watch::channel(BTreeSet::from([2, 3]));
        let mut r = Reflector::new(lw, fifo.clone(), "test".into()).sharded(
            ShardFeed {
                count: 4,
                held: feed,
            },
            ShardBy::Name,
        );
        r.backoff = no_jitter_backoff();
        let task = tokio::spawn(r.run());
        let pop = || async {
            match tokio::time::timeout(Duration::from_secs(60), fifo.pop())
                .await
                .unwrap()
                .unwrap()
            {
                Popped::Replace(objs, _) => objs
                    .iter()
                    .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                Popped::Deltas { key, .. } => key.to_string(),
            }
        };
        assert_eq!(pop().await, "a,b");
        assert_eq!(pop().await, "ns/e");
        // Shard 2 (a, e) is handed over, shard 0 gained.
        tokio::time::sleep(Duration::from_secs(5)).await;
        held.send_replace(BTreeSet::from([0, 3]));
        assert_eq!(pop().await, "b,c");
        tokio::time::sleep(Duration::from_secs(5)).await;
        task.abort();
        let calls = calls.lock().unwrap().clone();
        assert_eq!(
            names(&calls),
            [
                "list  shards=[2, 3] at=",
                "watch 10 shards=[2, 3]",
                "watch 11 shards=[2, 3]",
                "list  shards=[0] at=11",
                "watch 11 shards=[0, 3]",
            ]
        );
    }
}
