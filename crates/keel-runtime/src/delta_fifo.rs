//! The delta FIFO: what the reflector saw, queued per key for the informer to apply.
//!
//! Keys leave in the order they first arrived; the deltas of one key stay together and are
//! compressed as they arrive, so a key never holds more than two deltas (a `Deleted` then the
//! object that replaced it). A full list ([`DeltaFifo::replace`]) is one entry: the informer
//! swaps it into the store whole.
//!
//! Bound: at most one entry per key after the newest pending list, at most one per key before
//! it, and at most one pending list (a newer list supersedes an older one still waiting). The
//! keys are those of the objects the watch reports, so the FIFO never holds more than about
//! twice the cache, however slowly its consumer runs; the reflector never waits on it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::Notify;

use crate::key::{KeyError, ObjectKey};

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaType {
    Added,
    Updated,
    /// The object's last known state: it was deleted, or is no longer selected.
    Deleted,
    /// Listed by a relist.
    Replaced,
    /// Re-delivered by a periodic resync; unchanged.
    Sync,
}

/// One change of one object.
#[derive(Debug, Clone)]
pub struct Delta {
    pub kind: DeltaType,
    pub object: Arc<Value>,
}

/// What [`DeltaFifo::pop`] hands out.
#[derive(Debug)]
pub enum Popped {
    /// The compressed deltas of one key, oldest first.
    Deltas { key: ObjectKey, deltas: Vec<Delta> },
    /// A full list: the store must hold exactly these objects afterwards; of a sharded
    /// reflector, also the shards the list covers.
    Replace(Vec<Arc<Value>>, Option<BTreeSet<u32>>),
}

/// A queue of deltas by key; cheap to clone (clones share the queue).
#[derive(Clone, Default)]
pub struct DeltaFifo {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the consumer; a stored permit covers a push between its check and its wait.
    ready: Notify,
}

#[derive(Default)]
struct State {
    /// Entries by arrival sequence number: popped from the front.
    entries: BTreeMap<u64, Entry>,
    /// Keys whose entry comes after the newest pending list, and that entry's number. Deltas
    /// for a key queued before a list must not be merged into: that entry is older than the
    /// list and would be overwritten by it.
    open: HashMap<ObjectKey, u64>,
    /// The pending list's number.
    pending_replace: Option<u64>,
    next: u64,
    closed: bool,
}

enum Entry {
    Key(ObjectKey, Vec<Delta>),
    Replace(Vec<Arc<Value>>, Option<BTreeSet<u32>>),
}

impl DeltaFifo {
    pub fn new() -> DeltaFifo {
        DeltaFifo::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a delta of the object's key; ignored once closed.
    pub fn push(&self, kind: DeltaType, object: Arc<Value>) -> Result<(), KeyError> {
        let key = ObjectKey::from_object(&object)?;
        let mut state = self.lock();
        if state.closed {
            return Ok(());
        }
        let delta = Delta { kind, object };
        match state.open.get(&key).copied() {
            Some(seq) => {
                if let Some(Entry::Key(_, deltas)) = state.entries.get_mut(&seq) {
                    compress(deltas, delta);
                }
            }
            None => {
                let seq = state.seq();
                state
                    .entries
                    .insert(seq, Entry::Key(key.clone(), vec![delta]));
                state.open.insert(key, seq);
            }
        }
        drop(state);
        self.shared.ready.notify_one();
        Ok(())
    }

    /// Queues a full list. Entries queued before it stay (they are older and are applied
    /// first), except those queued after a list that is still pending: that list and its
    /// followers are superseded by this one.
    pub fn replace(&self, objects: Vec<Arc<Value>>) {
        self.replace_covering(objects, None);
    }

    /// As [`DeltaFifo::replace`], for a list of exactly these shards.
    pub fn replace_shards(&self, objects: Vec<Arc<Value>>, shards: BTreeSet<u32>) {
        self.replace_covering(objects, Some(shards));
    }

    fn replace_covering(&self, objects: Vec<Arc<Value>>, shards: Option<BTreeSet<u32>>) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        if let Some(older) = state.pending_replace.take() {
            state.entries.split_off(&older);
        }
        state.open.clear();
        let seq = state.seq();
        state.entries.insert(seq, Entry::Replace(objects, shards));
        state.pending_replace = Some(seq);
        drop(state);
        self.shared.ready.notify_one();
    }

    /// Queues a `Sync` of each object whose key has nothing queued (a pending change will be
    /// delivered anyway, and is newer). Skipped entirely while a list is pending: it will
    /// deliver every object.
    pub fn resync(&self, objects: impl IntoIterator<Item = Arc<Value>>) {
        let mut state = self.lock();
        if state.closed || state.pending_replace.is_some() {
            return;
        }
        for object in objects {
            let Ok(key) = ObjectKey::from_object(&object) else {
                continue;
            };
            if state.open.contains_key(&key) {
                continue;
            }
            let seq = state.seq();
            let delta = Delta {
                kind: DeltaType::Sync,
                object,
            };
            state
                .entries
                .insert(seq, Entry::Key(key.clone(), vec![delta]));
            state.open.insert(key, seq);
        }
        drop(state);
        self.shared.ready.notify_one();
    }

    /// Takes the oldest entry, waiting for one; `None` once closed.
    pub async fn pop(&self) -> Option<Popped> {
        loop {
            let ready = self.shared.ready.notified();
            if let Some(popped) = self.try_pop() {
                return popped;
            }
            ready.await;
        }
    }

    /// The oldest entry if there is one (`Some(None)`: closed).
    fn try_pop(&self) -> Option<Option<Popped>> {
        let mut state = self.lock();
        if state.closed {
            return Some(None);
        }
        let (seq, entry) = state.entries.pop_first()?;
        Some(Some(match entry {
            Entry::Key(key, deltas) => {
                if state.open.get(&key) == Some(&seq) {
                    state.open.remove(&key);
                }
                Popped::Deltas { key, deltas }
            }
            Entry::Replace(objects, shards) => {
                if state.pending_replace == Some(seq) {
                    state.pending_replace = None;
                }
                Popped::Replace(objects, shards)
            }
        }))
    }

    /// Stops the queue: pushes are ignored and `pop` returns `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.shared.ready.notify_waiters();
        self.shared.ready.notify_one();
    }

    /// Entries queued (a list counts as one).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl State {
    fn seq(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

fn is_present(kind: DeltaType) -> bool {
    kind != DeltaType::Deleted
}

/// Appends `new` to the deltas of one key, keeping at most `[Deleted?, present?]`:
/// - a newer state replaces a pending one (the store and the handlers only need the newest;
///   an `Added` stays `Added`, and a `Sync` never hides a real change);
/// - a delete after a pending state replaces it, except when that state followed a delete
///   (the object was re-created and deleted again unseen): then only the first delete stays,
///   so the handlers see one delete of the object they knew;
/// - of two deletes the newer, which knows the last state, stays.
fn compress(deltas: &mut Vec<Delta>, new: Delta) {
    let Some(last) = deltas.last_mut() else {
        deltas.push(new);
        return;
    };
    match (is_present(last.kind), is_present(new.kind)) {
        (true, true) => {
            let kind = match (last.kind, new.kind) {
                (DeltaType::Added, _) => DeltaType::Added,
                (old, DeltaType::Sync) => old,
                (_, kind) => kind,
            };
            *last = Delta {
                kind,
                object: new.object,
            };
        }
        (true, false) => {
            deltas.pop();
            if deltas.is_empty() {
                deltas.push(new);
            }
        }
        (false, false) => *last = new,
        (false, true) => deltas.push(new),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn obj(name: &str, rv: u32) -> Arc<Value> {
        Arc::new(
            json!({"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv.to_string()}}),
        )
    }

    /// (kind, name, rv) of each delta.
    fn summary(p: Popped) -> Vec<(DeltaType, String, String)> {
        match p {
            Popped::Deltas { deltas, .. } => deltas
                .into_iter()
                .map(|d| {
                    let m = &d.object["metadata"];
                    (
                        d.kind,
                        m["name"].as_str().unwrap().to_string(),
                        m["resourceVersion"].as_str().unwrap().to_string(),
                    )
                })
                .collect(),
            Popped::Replace(objs, _) => objs
                .iter()
                .map(|o| {
                    let m = &o["metadata"];
                    (
                        DeltaType::Replaced,
                        m["name"].as_str().unwrap().to_string(),
                        m["resourceVersion"].as_str().unwrap().to_string(),
                    )
                })
                .collect(),
        }
    }

    fn s(kind: DeltaType, name: &str, rv: u32) -> (DeltaType, String, String) {
        (kind, name.to_string(), rv.to_string())
    }

    async fn pop(f: &DeltaFifo) -> Vec<(DeltaType, String, String)> {
        summary(f.pop().await.unwrap())
    }

    #[tokio::test]
    async fn keys_leave_in_order_of_first_arrival_with_their_deltas_merged() {
        use DeltaType::*;
        let f = DeltaFifo::new();
        f.push(Added, obj("a", 1)).unwrap();
        f.push(Added, obj("b", 2)).unwrap();
        f.push(Updated, obj("a", 3)).unwrap();
        f.push(Updated, obj("a", 4)).unwrap();
        assert_eq!(f.len(), 2);
        // `a` keeps its place and is still new to the store: one Added of the newest state.
        assert_eq!(pop(&f).await, [s(Added, "a", 4)]);
        assert_eq!(pop(&f).await, [s(Added, "b", 2)]);
        assert!(f.is_empty());
        // Popped keys queue afresh at the back.
        f.push(Updated, obj("b", 5)).unwrap();
        f.push(Updated, obj("a", 6)).unwrap();
        f.push(Updated, obj("b", 7)).unwrap();
        assert_eq!(pop(&f).await, [s(Updated, "b", 7)]);
        assert_eq!(pop(&f).await, [s(Updated, "a", 6)]);
    }

    #[tokio::test]
    async fn a_delete_after_a_change_keeps_only_the_delete_with_the_last_state() {
        use DeltaType::*;
        let f = DeltaFifo::new();
        f.push(Updated, obj("a", 1)).unwrap();
        f.push(Deleted, obj("a", 2)).unwrap();
        assert_eq!(pop(&f).await, [s(Deleted, "a", 2)]);
    }

    #[tokio::test]
    async fn a_recreated_object_keeps_its_delete_then_its_new_state() {
        use DeltaType::*;
        let f = DeltaFifo::new();
        f.push(Deleted, obj("a", 1)).unwrap();
        f.push(Added, obj("a", 2)).unwrap();
        f.push(Updated, obj("a", 3)).unwrap();
        assert_eq!(pop(&f).await, [s(Deleted, "a", 1), s(Added, "a", 3)]);

        // Re-created and deleted again before anyone looked: one delete, of the first object.
        f.push(Deleted, obj("b", 4)).unwrap();
        f.push(Added, obj("b", 5)).unwrap();
        f.push(Deleted, obj("b", 6)).unwrap();
        assert_eq!(pop(&f).await, [s(Deleted, "b", 4)]);

        f.push(Deleted, obj("c", 7)).unwrap();
        f.push(Deleted, obj("c", 8)).unwrap();
        assert_eq!(pop(&f).await, [s(Deleted, "c", 8)]);
    }

    #[tokio::test]
    async fn a_list_is_applied_after_older_deltas_and_before_newer_ones() {
        use DeltaType::*;
        let f = DeltaFifo::new();
        f.push(Updated, obj("a", 1)).unwrap();
        f.replace(vec![obj("a", 2), obj("b", 2)]);
        // Newer than the list: a new entry behind it, not merged into the older one.
        f.push(Updated, obj("a", 3)).unwrap();
        assert_eq!(pop(&f).await, [s(Updated, "a", 1)]);
        assert_eq!(pop(&f).await, [s(Replaced, "a", 2), s(Replaced, "b", 2)]);
        assert_eq!(pop(&f).await, [s(Updated, "a", 3)]);
        assert!(f.is_empty());
    }

    #[tokio::test]
    async fn a_newer_list_supersedes_a_pending_one_and_what_followed_it() {
        use DeltaType::*;
        let f = DeltaFifo::new();
        f.push(Added, obj("x", 1)).unwrap();
        f.replace(vec![obj("a", 2)]);
        f.push(Updated, obj("a", 3)).unwrap();
        f.replace(vec![obj("a", 4), obj("c", 4)]);
        assert_eq!(f.len(), 2);
        assert_eq!(pop(&f).await, [s(Added, "x", 1)]);
        assert_eq!(pop(&f).await, [s(Replaced, "a", 4), s(Replaced, "c", 4)]);
    }

    #[tokio::test]
    async fn resync_skips_keys_with_pending_changes_and_pending_lists() {
        use DeltaType::*;
        let f = DeltaFifo::new();
        f.push(Updated, obj("a", 5)).unwrap();
        f.resync([obj("a", 4), obj("b", 4)]);
        assert_eq!(pop(&f).await, [s(Updated, "a", 5)]);
        assert_eq!(pop(&f).await, [s(Sync, "b", 4)]);

        f.replace(vec![obj("a", 6)]);
        f.resync([obj("a", 5)]);
        assert_eq!(f.len(), 1);
    }

    #[tokio::test]
    async fn a_sync_never_hides_a_pending_change() {
        use DeltaType::*;
        let mut deltas = vec![Delta {
            kind: Updated,
            object: obj("a", 1),
        }];
        compress(
            &mut deltas,
            Delta {
                kind: Sync,
                object: obj("a", 1),
            },
        );
        assert_eq!(deltas.len(), 1);
        assert_eq!(deltas[0].kind, Updated);
    }

    #[tokio::test]
    async fn objects_without_names_are_refused() {
        let f = DeltaFifo::new();
        assert!(
            f.push(DeltaType::Added, Arc::new(json!({"metadata": {}})))
                .is_err()
        );
        assert!(f.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn pop_waits_for_a_push_and_close_ends_it() {
        let f = DeltaFifo::new();
        let consumer = tokio::spawn({
            let f = f.clone();
            async move {
                let mut got = Vec::new();
                while let Some(p) = f.pop().await {
                    got.extend(summary(p));
                }
                got
            }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        f.push(DeltaType::Added, obj("a", 1)).unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        f.close();
        f.push(DeltaType::Added, obj("b", 2)).unwrap();
        assert_eq!(
            consumer.await.unwrap(),
            [s(DeltaType::Added, "a", 1)],
            "nothing after close"
        );
    }
}
