//! A shared informer: one reflector, one store, any number of handlers.
//!
//! The informer's task pops the [`DeltaFifo`], applies each entry to the [`Store`], then tells
//! the handlers: a handler is only told of a change its controller can already read from the
//! store.

use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use keel_api::{GroupVersionResource, Metadata};
use keel_client::Client;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use crate::controller::panic_message;
use crate::delta_fifo::{DeltaFifo, DeltaType, Popped};
use crate::handler::EventHandler;
use crate::reflector::{ApiListerWatcher, Reflector, ShardFeed, WatchOptions};
use crate::store::{Store, StoreError};

/// A cache of one resource (with one set of [`WatchOptions`]) kept by a reflector, and the
/// handlers told of its changes. Cheap to clone; made by an
/// [`InformerFactory`](crate::InformerFactory), which shares one per resource and options.
#[derive(Clone)]
pub struct Informer {
    shared: Arc<Shared>,
}

struct Shared {
    gvr: GroupVersionResource,
    options: WatchOptions,
    store: Store,
    fifo: DeltaFifo,
    /// Held while a popped entry is applied and handed to the handlers, and while a handler
    /// is added: a new handler sees each object exactly once, in the adds it gets on arrival
    /// or in a later event, never both and never neither.
    handlers: Mutex<Vec<Arc<dyn EventHandler>>>,
    started: AtomicBool,
    /// Objects received: each delta of a watch, each object of a list.
    received: AtomicU64,
    /// Of a sharded informer: the shards its store holds in full (those of its last list,
    /// once applied and told to the handlers).
    loaded_shards: Mutex<Option<BTreeSet<u32>>>,
}

/// What the handlers are told.
#[derive(Debug, Clone)]
pub(crate) enum Notification {
    Add(Arc<Value>),
    Update(Arc<Value>, Arc<Value>),
    Delete(Arc<Value>),
}

/// What the handlers hear of a delta that replaced `old` (if the store had it) by `new`:
/// - nothing when `resourceVersion` did not change, unless it is a resync (`Sync`);
/// - a delete then an add when the uid changed (the object was deleted and re-created while
///   the watch looked away): controllers tell objects apart by uid.
pub(crate) fn notifications(
    kind: DeltaType,
    old: Option<Arc<Value>>,
    new: Arc<Value>,
) -> Vec<Notification> {
    let Some(old) = old else {
        return vec![Notification::Add(new)];
    };
    let rv = new.resource_version();
    if kind != DeltaType::Sync && !rv.is_empty() && rv == old.resource_version() {
        return Vec::new();
    }
    let (old_uid, new_uid) = (old.uid(), new.uid());
    if !old_uid.is_empty() && !new_uid.is_empty() && old_uid != new_uid {
        return vec![Notification::Delete(old), Notification::Add(new)];
    }
    vec![Notification::Update(old, new)]
}

impl Informer {
    pub(crate) fn new(gvr: GroupVersionResource, options: WatchOptions) -> Informer {
        Informer {
            shared: Arc::new(Shared {
                gvr,
                options,
                store: Store::new(),
                fifo: DeltaFifo::new(),
                handlers: Mutex::new(Vec::new()),
                started: AtomicBool::new(false),
                received: AtomicU64::new(0),
                loaded_shards: Mutex::new(None),
            }),
        }
    }

    /// The cache; clones share it.
    pub fn store(&self) -> Store {
        self.shared.store.clone()
    }

    pub fn gvr(&self) -> &GroupVersionResource {
        &self.shared.gvr
    }

    pub fn options(&self) -> &WatchOptions {
        &self.shared.options
    }

    /// Adds an index to the store (see [`Store::add_index`]).
    pub fn add_index<F>(&self, name: &str, f: F) -> Result<(), StoreError>
    where
        F: Fn(&Value) -> Vec<String> + Send + Sync + 'static,
    {
        self.shared.store.add_index(name, f)
    }

    /// Adds a handler. It is told of every object already cached at once (as adds), then of
    /// every change.
    pub fn add_handler(&self, handler: impl EventHandler) {
        let handler: Arc<dyn EventHandler> = Arc::new(handler);
        let mut handlers = self.handlers();
        let cached = self.shared.store.list();
        tell(
            std::slice::from_ref(&handler),
            cached.into_iter().map(Notification::Add).collect(),
        );
        handlers.push(handler);
    }

    /// Objects received from the API server so far: each watch event, each object listed.
    pub fn received(&self) -> u64 {
        self.shared.received.load(Ordering::Relaxed)
    }

    /// Whether the store holds every object of `shard` it should: a sharded informer's once a
    /// list covering the shard is applied; any other's once synced.
    pub fn has_synced_shard(&self, shard: u32) -> bool {
        let loaded = self
            .shared
            .loaded_shards
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &*loaded {
            Some(shards) => shards.contains(&shard),
            None => self.has_synced(),
        }
    }

    /// Whether the first full list is in the store (and its handlers were told of it).
    pub fn has_synced(&self) -> bool {
        self.shared.store.has_synced()
    }

    /// Waits until [`Informer::has_synced`].
    pub async fn wait_for_sync(&self) {
        self.shared.store.wait_for_sync().await
    }

    fn handlers(&self) -> MutexGuard<'_, Vec<Arc<dyn EventHandler>>> {
        // A handler that panicked poisons the lock; the list itself is intact.
        self.shared
            .handlers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn is_started(&self) -> bool {
        self.shared.started.load(Ordering::SeqCst)
    }

    /// Spawns the reflector and the task that applies its deltas, once; both end when `stop`
    /// turns true or its sender is dropped.
    pub(crate) fn start(
        &self,
        client: Client,
        resync: Option<Duration>,
        shards: Option<ShardFeed>,
        stop: watch::Receiver<bool>,
    ) {
        if self.shared.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let what = match self.shared.options.namespace.as_str() {
            "" => self.shared.gvr.to_string(),
            ns => format!("{} in {ns}", self.shared.gvr),
        };
        let lw = ApiListerWatcher {
            client,
            gvr: self.shared.gvr.clone(),
            options: self.shared.options.clone(),
        };
        let mut reflector = Reflector::new(lw, self.shared.fifo.clone(), what);
        if let (Some(feed), Some(by)) = (shards, self.shared.options.shard_by) {
            reflector = reflector.sharded(feed, by);
        }
        let fifo = self.shared.fifo.clone();
        let mut reflector_stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = reflector.run() => {}
                _ = reflector_stop.wait_for(|s| *s) => {}
            }
            fifo.close();
        });
        tokio::spawn(self.clone().process_until(resync, stop));
    }

    async fn process_until(self, resync: Option<Duration>, mut stop: watch::Receiver<bool>) {
        let mut resync = resync.filter(|p| !p.is_zero()).map(|period| {
            let mut t = tokio::time::interval_at(Instant::now() + period, period);
            t.set_missed_tick_behavior(MissedTickBehavior::Delay);
            t
        });
        loop {
            let tick = async {
                match resync.as_mut() {
                    Some(t) => {
                        t.tick().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                popped = self.shared.fifo.pop() => match popped {
                    Some(p) => self.process(p),
                    None => break,
                },
                _ = tick => self.shared.fifo.resync(self.shared.store.list()),
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        self.shared.fifo.close();
    }

    /// Applies one popped entry to the store, then tells the handlers.
    pub(crate) fn process(&self, popped: Popped) {
        let handlers = self.handlers();
        let store = &self.shared.store;
        let mut told = Vec::new();
        let received = match &popped {
            Popped::Deltas { deltas, .. } => {
                deltas.iter().filter(|d| d.kind != DeltaType::Sync).count()
            }
            Popped::Replace(objects, _) => objects.len(),
        };
        self.shared.received.fetch_add(
            u64::try_from(received).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        match popped {
            Popped::Deltas { key, deltas } => {
                for d in deltas {
                    if d.kind == DeltaType::Deleted {
                        if store.remove(&key).is_some() {
                            told.push(Notification::Delete(d.object));
                        }
                        continue;
                    }
                    match store.insert(d.object.clone()) {
                        Ok(old) => told.extend(notifications(d.kind, old, d.object)),
                        Err(e) => tracing::warn!(key = %key, error = %e, "delta skipped"),
                    }
                }
            }
            Popped::Replace(objects, shards) => {
                for change in store.replace(objects) {
                    match (change.old, change.new) {
                        (old, Some(new)) => {
                            told.extend(notifications(DeltaType::Replaced, old, new))
                        }
                        (Some(old), None) => told.push(Notification::Delete(old)),
                        (None, None) => {}
                    }
                }
                tell(&handlers, told);
                // After the handlers heard of the list: a controller that waited for the sync
                // finds every key of the list in its queue.
                store.set_synced();
                if let Some(shards) = shards {
                    *self
                        .shared
                        .loaded_shards
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Some(shards);
                }
                return;
            }
        }
        tell(&handlers, told);
    }
}

/// Tells every handler of every notification. A handler that panics is logged and skipped:
/// letting the panic end the informer's task would freeze its cache for every controller.
fn tell(handlers: &[Arc<dyn EventHandler>], told: Vec<Notification>) {
    for n in &told {
        for h in handlers {
            let call = AssertUnwindSafe(|| match n {
                Notification::Add(o) => h.on_add(o),
                Notification::Update(old, new) => h.on_update(old, new),
                Notification::Delete(o) => h.on_delete(o),
            });
            if let Err(panic) = std::panic::catch_unwind(call) {
                tracing::error!(panic = panic_message(&*panic), "an event handler panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::HandlerFns;
    use crate::delta_fifo::Delta;
    use crate::key::ObjectKey;
    use keel_client::gvr;
    use serde_json::json;

    fn obj(name: &str, uid: &str, rv: u32) -> Arc<Value> {
        Arc::new(json!({"metadata": {
            "namespace": "ns", "name": name, "uid": uid, "resourceVersion": rv.to_string()
        }}))
    }

    fn describe(n: &Notification) -> String {
        let d = |o: &Value| format!("{}@{}", o.uid(), o.resource_version());
        match n {
            Notification::Add(o) => format!("add {}", d(o)),
            Notification::Update(a, b) => format!("update {}->{}", d(a), d(b)),
            Notification::Delete(o) => format!("delete {}", d(o)),
        }
    }

    fn told(kind: DeltaType, old: Option<Arc<Value>>, new: Arc<Value>) -> Vec<String> {
        notifications(kind, old, new).iter().map(describe).collect()
    }

    #[test]
    fn an_unchanged_resource_version_is_dropped_except_on_resync() {
        let a = obj("a", "u1", 5);
        assert!(told(DeltaType::Updated, Some(a.clone()), a.clone()).is_empty());
        assert!(told(DeltaType::Replaced, Some(a.clone()), obj("a", "u1", 5)).is_empty());
        assert_eq!(
            told(DeltaType::Sync, Some(a.clone()), a.clone()),
            ["update u1@5->u1@5"]
        );
        assert_eq!(
            told(DeltaType::Updated, Some(a), obj("a", "u1", 6)),
            ["update u1@5->u1@6"]
        );
    }

    #[test]
    fn a_new_key_is_an_add_and_a_new_uid_a_delete_then_an_add() {
        assert_eq!(
            told(DeltaType::Updated, None, obj("a", "u1", 5)),
            ["add u1@5"]
        );
        assert_eq!(
            told(
                DeltaType::Replaced,
                Some(obj("a", "u1", 5)),
                obj("a", "u2", 9)
            ),
            ["delete u1@5", "add u2@9"]
        );
    }

    fn recording() -> (Informer, Arc<Mutex<Vec<String>>>) {
        let inf = Informer::new(gvr("", "v1", "pods"), WatchOptions::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let (a, u, d) = (log.clone(), log.clone(), log.clone());
        inf.add_handler(
            HandlerFns::new()
                .added(move |o| {
                    a.lock()
                        .unwrap()
                        .push(describe(&Notification::Add(o.clone())))
                })
                .updated(move |o, n| {
                    u.lock()
                        .unwrap()
                        .push(describe(&Notification::Update(o.clone(), n.clone())))
                })
                .deleted(move |o| {
                    d.lock()
                        .unwrap()
                        .push(describe(&Notification::Delete(o.clone())))
                }),
        );
        (inf, log)
    }

    fn deltas(name: &str, ds: Vec<(DeltaType, Arc<Value>)>) -> Popped {
        Popped::Deltas {
            key: ObjectKey::new("ns", name),
            deltas: ds
                .into_iter()
                .map(|(kind, object)| Delta { kind, object })
                .collect(),
        }
    }

    #[test]
    fn the_store_is_updated_before_handlers_hear_and_syncs_after_the_first_list() {
        let (inf, log) = recording();
        let store = inf.store();
        inf.add_handler(HandlerFns::new().added(move |o| {
            let key = ObjectKey::from_object(o).unwrap();
            assert!(
                store.get(&key).is_some(),
                "the handler can read what it is told"
            );
        }));
        inf.process(Popped::Replace(
            vec![obj("a", "u1", 1), obj("b", "u2", 1)],
            None,
        ));
        assert!(inf.has_synced());
        inf.process(deltas("a", vec![(DeltaType::Updated, obj("a", "u1", 2))]));
        inf.process(deltas("a", vec![(DeltaType::Updated, obj("a", "u1", 2))]));
        inf.process(deltas("b", vec![(DeltaType::Deleted, obj("b", "u2", 3))]));
        inf.process(deltas("c", vec![(DeltaType::Deleted, obj("c", "u3", 3))]));
        assert_eq!(
            *log.lock().unwrap(),
            ["add u1@1", "add u2@1", "update u1@1->u1@2", "delete u2@3"],
            "one update for one resourceVersion; no delete of an object never seen"
        );
        assert_eq!(inf.store().len(), 1);
    }

    #[test]
    fn a_relist_deletes_what_vanished_with_its_last_known_state() {
        let (inf, log) = recording();
        inf.process(Popped::Replace(
            vec![obj("a", "u1", 1), obj("b", "u2", 1)],
            None,
        ));
        inf.process(deltas("b", vec![(DeltaType::Updated, obj("b", "u2", 4))]));
        log.lock().unwrap().clear();
        inf.process(Popped::Replace(
            vec![obj("a", "u1", 1), obj("c", "u3", 7)],
            None,
        ));
        assert_eq!(*log.lock().unwrap(), ["add u3@7", "delete u2@4"]);
        let mut keys = inf.store().keys();
        keys.sort();
        assert_eq!(keys, [ObjectKey::new("ns", "a"), ObjectKey::new("ns", "c")]);
    }

    #[test]
    fn a_sharded_store_holds_a_shard_once_a_list_covering_it_is_applied() {
        let (inf, _) = recording();
        assert!(!inf.has_synced_shard(1), "nothing listed yet");
        inf.process(Popped::Replace(
            vec![obj("a", "u1", 1)],
            Some([1, 2].into()),
        ));
        assert!(inf.has_synced_shard(1) && inf.has_synced_shard(2));
        assert!(!inf.has_synced_shard(3), "a shard the list did not cover");
        // Shard 1 handed over, 3 gained.
        inf.process(Popped::Replace(Vec::new(), Some([2, 3].into())));
        assert!(!inf.has_synced_shard(1) && inf.has_synced_shard(3));
        // Deltas in between change nothing of it.
        inf.process(deltas("b", vec![(DeltaType::Added, obj("b", "u2", 4))]));
        assert!(inf.has_synced_shard(3));
    }

    #[test]
    fn a_late_handler_hears_of_every_cached_object_once() {
        let (inf, _) = recording();
        inf.process(Popped::Replace(
            vec![obj("a", "u1", 1), obj("b", "u2", 1)],
            None,
        ));
        let late = Arc::new(Mutex::new(Vec::new()));
        let l = late.clone();
        inf.add_handler(
            HandlerFns::new().added(move |o| l.lock().unwrap().push(o.name().to_string())),
        );
        let mut got = late.lock().unwrap().clone();
        got.sort();
        assert_eq!(got, ["a", "b"]);
    }

    #[test]
    fn a_panicking_handler_does_not_stop_the_others_or_the_informer() {
        let inf = Informer::new(gvr("", "v1", "pods"), WatchOptions::default());
        inf.add_handler(HandlerFns::new().added(|_| panic!("handler bug")));
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        inf.add_handler(
            HandlerFns::new().added(move |o| l.lock().unwrap().push(o.name().to_string())),
        );
        inf.process(Popped::Replace(vec![obj("a", "u1", 1)], None));
        inf.process(deltas("b", vec![(DeltaType::Added, obj("b", "u2", 2))]));
        assert_eq!(*log.lock().unwrap(), ["a", "b"]);
        assert!(inf.has_synced());
    }

    #[test]
    fn a_resync_delivers_unchanged_objects_as_updates() {
        let (inf, log) = recording();
        inf.process(Popped::Replace(vec![obj("a", "u1", 1)], None));
        log.lock().unwrap().clear();
        inf.process(deltas("a", vec![(DeltaType::Sync, obj("a", "u1", 1))]));
        assert_eq!(*log.lock().unwrap(), ["update u1@1->u1@1"]);
    }
}
