//! The indexer: a thread-safe cache of objects by key, with secondary indexes.
//!
//! Invariants relied on by readers:
//! - an index always agrees with the objects: both change under one write lock;
//! - a relist swaps every object and every index in one write lock, so a reader never sees
//!   the store half-filled ([`Store::replace`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use keel_api::Metadata;
use serde_json::Value;
use tokio::sync::watch;

use crate::key::{KeyError, ObjectKey};

/// The built-in index of objects by `metadata.namespace` ("" for cluster-scoped objects).
pub const BY_NAMESPACE: &str = "namespace";

/// The built-in index of objects by the `uid` of their controlling owner (the
/// `ownerReferences` entry with `controller: true`): a ReplicaSet finds its Pods with it.
pub const BY_CONTROLLER_UID: &str = "controller-uid";

/// Computes the values an object is indexed under (none: not in the index).
pub type IndexFn = Arc<dyn Fn(&Value) -> Vec<String> + Send + Sync>;

/// Why a store operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// An index of that name exists already: two controllers sharing an informer chose the
    /// same name for different functions. Pick another name.
    #[error("an index named {0:?} exists already")]
    IndexExists(String),
    /// The object cannot be keyed (no `metadata.name`).
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// What a write did to one key: the object before and after (`None`: absent).
#[derive(Debug, Clone)]
pub struct Change {
    pub key: ObjectKey,
    pub old: Option<Arc<Value>>,
    pub new: Option<Arc<Value>>,
}

/// The values of `obj`'s namespace, for [`BY_NAMESPACE`].
pub fn namespace_index(obj: &Value) -> Vec<String> {
    vec![obj.namespace().to_string()]
}

/// The uid of `obj`'s controlling owner, for [`BY_CONTROLLER_UID`].
pub fn controller_uid_index(obj: &Value) -> Vec<String> {
    obj.controller_uid()
        .map(|uid| vec![uid.to_string()])
        .unwrap_or_default()
}

/// A cache of objects keyed by [`ObjectKey`], with named indexes. Cheap to clone: clones
/// share the objects.
///
/// An informer is the store's only writer in a running program; the writing methods are
/// public so that tests can build a store without a server.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
}

struct Shared {
    /// A std lock, not an async one: no critical section awaits, and readers (controllers)
    /// must not need an async context to read the cache.
    state: RwLock<State>,
    /// Whether the first full list has been applied; a watch channel so that waiters wake.
    synced: watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    items: HashMap<ObjectKey, Entry>,
    /// Index functions, append-only, so that a position names an index for good.
    indexers: Vec<(String, IndexFn)>,
    /// `indices[i]`: value of `indexers[i]` → keys indexed under it. Empty sets are removed,
    /// so an index never outgrows the objects.
    indices: Vec<HashMap<String, HashSet<ObjectKey>>>,
}

/// An object and the values it is indexed under (`values[i]` for `indexers[i]`), kept so
/// that removing it from an index does not call the index function again.
struct Entry {
    object: Arc<Value>,
    values: Vec<Vec<String>>,
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("len", &self.len())
            .field("synced", &self.has_synced())
            .finish()
    }
}

impl Store {
    /// An empty store with the built-in indexes [`BY_NAMESPACE`] and [`BY_CONTROLLER_UID`].
    pub fn new() -> Store {
        let state = State {
            indexers: vec![
                (
                    BY_NAMESPACE.to_string(),
                    Arc::new(namespace_index) as IndexFn,
                ),
                (
                    BY_CONTROLLER_UID.to_string(),
                    Arc::new(controller_uid_index),
                ),
            ],
            indices: vec![HashMap::new(), HashMap::new()],
            ..State::default()
        };
        Store {
            shared: Arc::new(Shared {
                state: RwLock::new(state),
                synced: watch::channel(false).0,
            }),
        }
    }

    // A panic in an index function poisons the lock; the state is still usable (the panic
    // happened before anything was changed), so poisoning is ignored.
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.shared
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.shared
            .state
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, key: &ObjectKey) -> Option<Arc<Value>> {
        self.read().items.get(key).map(|e| e.object.clone())
    }

    /// Every object, in no particular order.
    pub fn list(&self) -> Vec<Arc<Value>> {
        self.read()
            .items
            .values()
            .map(|e| e.object.clone())
            .collect()
    }

    pub fn keys(&self) -> Vec<ObjectKey> {
        self.read().items.keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.read().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The objects indexed under `value` by the index `index`. An index that does not exist
    /// holds nothing (see [`Store::has_index`]).
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<Value>> {
        let state = self.read();
        state
            .index_keys(index, value)
            .filter_map(|k| state.items.get(k).map(|e| e.object.clone()))
            .collect()
    }

    /// The keys of the objects indexed under `value` by `index`.
    pub fn index_keys(&self, index: &str, value: &str) -> Vec<ObjectKey> {
        self.read().index_keys(index, value).cloned().collect()
    }

    pub fn has_index(&self, index: &str) -> bool {
        self.read().position(index).is_some()
    }

    /// Adds an index, computed at once over the objects already cached.
    pub fn add_index<F>(&self, name: &str, f: F) -> Result<(), StoreError>
    where
        F: Fn(&Value) -> Vec<String> + Send + Sync + 'static,
    {
        let mut state = self.write();
        if state.position(name).is_some() {
            return Err(StoreError::IndexExists(name.to_string()));
        }
        let f: IndexFn = Arc::new(f);
        let mut index: HashMap<String, HashSet<ObjectKey>> = HashMap::new();
        for (key, entry) in state.items.iter_mut() {
            let values = f(&entry.object);
            for v in &values {
                index.entry(v.clone()).or_default().insert(key.clone());
            }
            entry.values.push(values);
        }
        state.indexers.push((name.to_string(), f));
        state.indices.push(index);
        Ok(())
    }

    /// Whether the first full list has been applied (an informer's initial sync).
    pub fn has_synced(&self) -> bool {
        *self.shared.synced.borrow()
    }

    /// Waits until [`Store::has_synced`].
    pub async fn wait_for_sync(&self) {
        let mut rx = self.shared.synced.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let _ = rx.wait_for(|synced| *synced).await;
    }

    /// Marks the store synced (done by an informer once its first list is applied).
    pub fn set_synced(&self) {
        self.shared.synced.send_replace(true);
    }

    /// Adds or replaces an object; returns the object it replaced.
    pub fn insert(&self, obj: Arc<Value>) -> Result<Option<Arc<Value>>, StoreError> {
        let key = ObjectKey::from_object(&obj)?;
        let indexers = self.read().indexers.clone();
        let values: Vec<Vec<String>> = indexers.iter().map(|(_, f)| f(&obj)).collect();
        let mut state = self.write();
        let entry = state.complete(
            Entry {
                object: obj,
                values,
            },
            indexers.len(),
        );
        let old = state.remove(&key);
        state.add(key, entry);
        Ok(old)
    }

    /// Removes an object; returns it if it was there.
    pub fn remove(&self, key: &ObjectKey) -> Option<Arc<Value>> {
        self.write().remove(key)
    }

    /// Swaps in a full list: afterwards the store holds exactly `objects`. Returns what
    /// changed for every key, listed objects first (in list order), then the objects the list
    /// no longer has, with the last state this store knew (their `Delete`s). Objects without
    /// a name are skipped.
    pub fn replace(&self, objects: Vec<Arc<Value>>) -> Vec<Change> {
        let indexers = self.read().indexers.clone();
        // Index values are computed before the write lock is taken: readers wait only for the swap.
        let mut listed = Vec::with_capacity(objects.len());
        for obj in objects {
            let Ok(key) = ObjectKey::from_object(&obj) else {
                continue;
            };
            let values: Vec<Vec<String>> = indexers.iter().map(|(_, f)| f(&obj)).collect();
            listed.push((key, obj, values));
        }
        let mut old_items = {
            let mut state = self.write();
            let mut items = HashMap::with_capacity(listed.len());
            let mut indices = vec![HashMap::new(); state.indexers.len()];
            for (key, object, values) in &listed {
                let entry = state.complete(
                    Entry {
                        object: object.clone(),
                        values: values.clone(),
                    },
                    indexers.len(),
                );
                index_into(&mut indices, key, &entry.values);
                items.insert(key.clone(), entry);
            }
            state.indices = indices;
            std::mem::replace(&mut state.items, items)
        };
        let mut changes = Vec::with_capacity(listed.len());
        for (key, object, _) in listed {
            let old = old_items.remove(&key).map(|e| e.object);
            changes.push(Change {
                key,
                old,
                new: Some(object),
            });
        }
        let mut gone: Vec<_> = old_items.into_iter().collect();
        gone.sort_by(|a, b| a.0.cmp(&b.0));
        changes.extend(gone.into_iter().map(|(key, e)| Change {
            key,
            old: Some(e.object),
            new: None,
        }));
        changes
    }
}

fn index_into(
    indices: &mut [HashMap<String, HashSet<ObjectKey>>],
    key: &ObjectKey,
    values: &[Vec<String>],
) {
    for (index, values) in indices.iter_mut().zip(values) {
        for v in values {
            index.entry(v.clone()).or_default().insert(key.clone());
        }
    }
}

impl State {
    fn position(&self, index: &str) -> Option<usize> {
        self.indexers.iter().position(|(n, _)| n == index)
    }

    fn index_keys<'a>(
        &'a self,
        index: &str,
        value: &str,
    ) -> impl Iterator<Item = &'a ObjectKey> + 'a {
        self.position(index)
            .and_then(|i| self.indices.get(i))
            .and_then(|idx| idx.get(value))
            .into_iter()
            .flatten()
    }

    /// Computes the values of indexes added since `computed` indexers were known.
    fn complete(&self, mut entry: Entry, computed: usize) -> Entry {
        for (_, f) in self.indexers.iter().skip(computed) {
            entry.values.push(f(&entry.object));
        }
        entry
    }

    fn add(&mut self, key: ObjectKey, entry: Entry) {
        index_into(&mut self.indices, &key, &entry.values);
        self.items.insert(key, entry);
    }

    fn remove(&mut self, key: &ObjectKey) -> Option<Arc<Value>> {
        let entry = self.items.remove(key)?;
        for (index, values) in self.indices.iter_mut().zip(&entry.values) {
            for v in values {
                if let Some(keys) = index.get_mut(v) {
                    keys.remove(key);
                    if keys.is_empty() {
                        index.remove(v);
                    }
                }
            }
        }
        Some(entry.object)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn pod(ns: &str, name: &str, owner_uid: Option<&str>) -> Arc<Value> {
        let mut o = json!({"metadata": {"namespace": ns, "name": name, "labels": {"app": name}}});
        if let Some(uid) = owner_uid {
            o["metadata"]["ownerReferences"] = json!([
                {"kind": "ReplicaSet", "name": "other", "uid": "not-controller"},
                {"kind": "ReplicaSet", "name": "rs", "uid": uid, "controller": true}
            ]);
        }
        Arc::new(o)
    }

    fn names(mut objs: Vec<Arc<Value>>) -> Vec<String> {
        let mut out: Vec<String> = objs
            .drain(..)
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        out.sort();
        out
    }

    #[test]
    fn objects_are_found_by_key_and_by_namespace() {
        let s = Store::new();
        s.insert(pod("a", "p1", None)).unwrap();
        s.insert(pod("a", "p2", None)).unwrap();
        s.insert(pod("b", "p1", None)).unwrap();
        assert_eq!(s.len(), 3);
        assert!(s.get(&ObjectKey::new("b", "p1")).is_some());
        assert_eq!(names(s.by_index(BY_NAMESPACE, "a")), ["p1", "p2"]);
        assert_eq!(names(s.by_index(BY_NAMESPACE, "b")), ["p1"]);
        assert!(s.by_index(BY_NAMESPACE, "c").is_empty());
        assert!(s.by_index("no-such-index", "a").is_empty());
    }

    #[test]
    fn only_the_controller_owner_reference_is_indexed() {
        let s = Store::new();
        s.insert(pod("a", "p1", Some("u1"))).unwrap();
        s.insert(pod("a", "p2", None)).unwrap();
        assert_eq!(names(s.by_index(BY_CONTROLLER_UID, "u1")), ["p1"]);
        assert!(s.by_index(BY_CONTROLLER_UID, "not-controller").is_empty());
    }

    #[test]
    fn indexes_follow_updates_and_deletes() {
        let s = Store::new();
        s.insert(pod("a", "p1", Some("u1"))).unwrap();
        let old = s.insert(pod("a", "p1", Some("u2"))).unwrap();
        assert_eq!(old.unwrap()["metadata"]["ownerReferences"][1]["uid"], "u1");
        assert!(s.by_index(BY_CONTROLLER_UID, "u1").is_empty());
        assert_eq!(names(s.by_index(BY_CONTROLLER_UID, "u2")), ["p1"]);

        assert!(s.remove(&ObjectKey::new("a", "p1")).is_some());
        assert!(s.by_index(BY_CONTROLLER_UID, "u2").is_empty());
        assert!(s.by_index(BY_NAMESPACE, "a").is_empty());
        assert!(s.remove(&ObjectKey::new("a", "p1")).is_none());
        // Empty value sets are dropped: the index does not outgrow the objects.
        assert!(s.read().indices.iter().all(HashMap::is_empty));
    }

    #[test]
    fn custom_indexes_cover_objects_cached_before_and_after() {
        let s = Store::new();
        s.insert(pod("a", "p1", None)).unwrap();
        let by_app = |o: &Value| {
            o["metadata"]["labels"]["app"]
                .as_str()
                .map(|a| vec![a.to_string()])
                .unwrap_or_default()
        };
        s.add_index("app", by_app).unwrap();
        s.insert(pod("b", "p2", None)).unwrap();
        assert_eq!(names(s.by_index("app", "p1")), ["p1"]);
        assert_eq!(names(s.by_index("app", "p2")), ["p2"]);
        assert_eq!(
            s.add_index("app", by_app),
            Err(StoreError::IndexExists("app".into()))
        );
        assert_eq!(
            s.add_index(BY_NAMESPACE, by_app),
            Err(StoreError::IndexExists(BY_NAMESPACE.into()))
        );
    }

    #[test]
    fn replace_swaps_everything_and_reports_the_vanished_with_their_last_state() {
        let s = Store::new();
        s.insert(pod("a", "stays", Some("u1"))).unwrap();
        s.insert(pod("a", "goes", Some("u1"))).unwrap();
        let changes = s.replace(vec![pod("a", "stays", Some("u2")), pod("a", "new", None)]);
        assert_eq!(s.len(), 2);
        assert!(s.get(&ObjectKey::new("a", "goes")).is_none());
        assert!(s.by_index(BY_CONTROLLER_UID, "u1").is_empty());
        assert_eq!(names(s.by_index(BY_CONTROLLER_UID, "u2")), ["stays"]);
        assert_eq!(names(s.by_index(BY_NAMESPACE, "a")), ["new", "stays"]);

        let summary: Vec<(String, bool, bool)> = changes
            .iter()
            .map(|c| (c.key.to_string(), c.old.is_some(), c.new.is_some()))
            .collect();
        assert_eq!(
            summary,
            [
                ("a/stays".into(), true, true),
                ("a/new".into(), false, true),
                ("a/goes".into(), true, false),
            ]
        );
        let gone = changes[2].old.as_ref().unwrap();
        assert_eq!(gone["metadata"]["ownerReferences"][1]["uid"], "u1");
    }

    #[test]
    fn objects_without_names_are_refused() {
        let s = Store::new();
        assert!(matches!(
            s.insert(Arc::new(json!({"metadata": {}}))),
            Err(StoreError::Key(KeyError::NoName))
        ));
        assert!(s.replace(vec![Arc::new(json!({}))]).is_empty());
        assert!(s.is_empty());
    }

    #[tokio::test]
    async fn waiters_wake_when_the_store_is_synced() {
        let s = Store::new();
        assert!(!s.has_synced());
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.wait_for_sync().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        s.set_synced();
        waiter.await.unwrap();
        assert!(s.has_synced());
    }
}
