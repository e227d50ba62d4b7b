//! Hot-object PATCH coalescing, a layer over the store: concurrent mutations of one key inside
//! this replica queue up; one leader task takes everything queued, and the store applies the
//! batch in arrival order to one read of the object and commits it with a single
//! compare-and-swap. Correctness never depends on it (replicas still meet at the
//! compare-and-swap); it turns conflict storms on a hot object into batches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_api::{ApiError, Object};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Store;
use super::keys::ObjectKey;
use super::update::{BatchOutcome, Mutation, UpdateOptions};
use crate::metrics::Metrics;

/// How long past its own deadline a caller waits for its batch's answer: the batch runs until
/// the latest deadline in it, and answers in one go.
const ANSWER_GRACE: Duration = Duration::from_secs(5);

/// What commits a batch: the store's guaranteed update (a fake in tests, so that batching and
/// deadlines are tested on a paused clock without etcd).
pub trait Commit: Send + Sync + 'static {
    /// Applies `mutations` in order to the object at `key` and commits them in one
    /// compare-and-swap, retrying until `deadline`; per mutation, its own error.
    fn commit(
        &self,
        key: &ObjectKey,
        mutations: &[&Mutation],
        deadline: Instant,
    ) -> impl Future<Output = BatchOutcome> + Send;
}

impl Commit for Store {
    async fn commit(
        &self,
        key: &ObjectKey,
        mutations: &[&Mutation],
        deadline: Instant,
    ) -> BatchOutcome {
        self.guaranteed_update(key, UpdateOptions::default(), mutations, deadline)
            .await
    }
}

/// One queued mutation and where its answer goes.
struct Pending {
    mutate: Mutation,
    deadline: Instant,
    reply: oneshot::Sender<Result<Arc<Object>, ApiError>>,
}

/// The coalescer in front of a store.
pub struct Coalescer<C: Commit = Store> {
    store: Arc<C>,
    /// The queues by etcd key. A key has an entry exactly while a leader task runs for it; the
    /// leader removes the entry when it finds the queue empty (under the lock, so no mutation is
    /// left behind). A std `Mutex`: held for a map operation, never across an await.
    queues: Mutex<HashMap<String, Vec<Pending>>>,
    /// The most mutations waiting on one object; past it callers get `TooManyRequests`.
    max_queued: usize,
    metrics: Metrics,
}

impl<C: Commit> Coalescer<C> {
    pub fn new(store: Arc<C>, max_queued: usize, metrics: Metrics) -> Arc<Coalescer<C>> {
        Arc::new(Coalescer {
            store,
            queues: Mutex::default(),
            max_queued: max_queued.max(1),
            metrics,
        })
    }

    /// Queues `mutation` of the object at `key` and waits for the batch that commits it: the
    /// object as the batch committed it, one copy shared by every caller of the batch.
    pub async fn mutate(
        self: &Arc<Self>,
        key: ObjectKey,
        mutation: Mutation,
        deadline: Instant,
    ) -> Result<Arc<Object>, ApiError> {
        let t = key.target();
        let (reply, rx) = oneshot::channel();
        let pending = Pending {
            mutate: mutation,
            deadline,
            reply,
        };
        match self.enqueue(&key.key, pending) {
            Ok(true) => {
                tokio::spawn(self.clone().lead(key));
            }
            Ok(false) => {}
            Err(_) => {
                let message = format!(
                    "too many PATCHes are waiting on {} {:?}; retry later",
                    t.kind, t.name
                );
                return Err(ApiError::too_many_requests(t, message));
            }
        }
        match tokio::time::timeout_at(deadline + ANSWER_GRACE, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(ApiError::internal(
                "the PATCH batch ended without an answer",
            )),
            Err(_) => Err(ApiError::timeout(
                t,
                "the PATCH did not complete within its deadline",
            )),
        }
    }

    /// Queues a mutation of `key`; returns whether the caller must start the leader.
    fn enqueue(&self, key: &str, p: Pending) -> Result<bool, Pending> {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        match q.get_mut(key) {
            Some(waiting) if waiting.len() >= self.max_queued => Err(p),
            Some(waiting) => {
                waiting.push(p);
                Ok(false)
            }
            None => {
                q.insert(key.to_string(), vec![p]);
                Ok(true)
            }
        }
    }

    /// Takes everything queued for `key`; when nothing is, ends the key's leadership.
    fn take(&self, key: &str) -> Vec<Pending> {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        match q.get_mut(key) {
            Some(waiting) if !waiting.is_empty() => std::mem::take(waiting),
            _ => {
                q.remove(key);
                Vec::new()
            }
        }
    }

    /// The leader of one key: commits batches until the queue is empty.
    async fn lead(self: Arc<Self>, key: ObjectKey) {
        loop {
            let batch = self.take(&key.key);
            if batch.is_empty() {
                return;
            }
            self.commit_batch(&key, batch).await;
        }
    }

    /// Commits one batch and answers each caller: those whose deadline passed while they
    /// waited with `Timeout` (never applied), the others with their own error or the batch's
    /// object.
    async fn commit_batch(&self, key: &ObjectKey, batch: Vec<Pending>) {
        let now = Instant::now();
        let (live, expired): (Vec<Pending>, Vec<Pending>) =
            batch.into_iter().partition(|p| p.deadline > now);
        for p in expired {
            let _ = p.reply.send(Err(ApiError::timeout(
                key.target(),
                "the PATCH waited past its deadline",
            )));
        }
        if live.is_empty() {
            return;
        }
        self.metrics.patch_batch(&key.info.gvr.resource, live.len());
        let deadline = live.iter().map(|p| p.deadline).max().unwrap_or(now);
        let mutations: Vec<&Mutation> = live.iter().map(|p| &p.mutate).collect();
        let (res, errors) = self.store.commit(key, &mutations, deadline).await;
        let res = res.map(|c| Arc::new(c.object));
        for (p, err) in live.into_iter().zip(errors) {
            let answer = match err {
                Some(e) => Err(e),
                None => res.clone(),
            };
            let _ = p.reply.send(answer);
        }
    }

    /// Whether no leader runs (every queue has drained).
    #[cfg(test)]
    fn is_idle(&self) -> bool {
        self.queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// How many mutations wait on `key` (not counting a batch being committed).
    #[cfg(test)]
    fn waiting(&self, key: &str) -> usize {
        self.queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .map_or(0, Vec::len)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use keel_api::{Metadata, Reason, ResourceInfo};
    use serde_json::json;
    use tokio::task::JoinHandle;

    use super::*;
    use crate::storage::keys::Keys;
    use crate::storage::{Change, Committed, Draft};

    /// A store whose commit takes `latency` (an etcd round trip) and then applies the batch to
    /// one object as the store does: in order, a failing mutation skipped.
    struct FakeStore {
        latency: Duration,
        object: StdMutex<Object>,
        /// Each commit's batch size and deadline.
        batches: StdMutex<Vec<(usize, Instant)>>,
    }

    impl Commit for FakeStore {
        async fn commit(
            &self,
            _key: &ObjectKey,
            mutations: &[&Mutation],
            deadline: Instant,
        ) -> BatchOutcome {
            self.batches
                .lock()
                .unwrap()
                .push((mutations.len(), deadline));
            tokio::time::sleep(self.latency).await;
            let mut draft = Draft::from_object(self.object.lock().unwrap().clone());
            let mut errors = Vec::new();
            for m in mutations {
                match m(&draft) {
                    Ok(Change::Put(d) | Change::Remove(d)) => {
                        draft = d;
                        errors.push(None);
                    }
                    Err(e) => errors.push(Some(e)),
                }
            }
            let mut obj = draft.into_object();
            let rv = obj.resource_version().parse::<i64>().unwrap_or(0) + 1;
            obj.set_resource_version(&rv.to_string());
            *self.object.lock().unwrap() = obj.clone();
            let committed = Committed {
                object: obj,
                removed: false,
            };
            (Ok(committed), errors)
        }
    }

    impl FakeStore {
        fn batch_sizes(&self) -> Vec<usize> {
            self.batches.lock().unwrap().iter().map(|b| b.0).collect()
        }
    }

    fn setup(latency: Duration, max_queued: usize) -> (Arc<FakeStore>, Arc<Coalescer<FakeStore>>) {
        let object = Object::from_value(
            json!({"metadata": {"name": "hot", "namespace": "default", "resourceVersion": "1"}}),
        )
        .unwrap();
        let store = Arc::new(FakeStore {
            latency,
            object: StdMutex::new(object),
            batches: StdMutex::default(),
        });
        let coalescer = Coalescer::new(store.clone(), max_queued, Metrics::new());
        (store, coalescer)
    }

    fn key() -> ObjectKey {
        let info: Arc<ResourceInfo> = Arc::new(
            keel_api::builtin_resources()
                .into_iter()
                .find(|r| r.kind == "ConfigMap")
                .unwrap(),
        );
        Keys::new("/registry").object(&info, "default", "hot")
    }

    /// Sets `data.<k>` to `v`.
    fn set(k: &str, v: &str) -> Mutation {
        let (k, v) = (k.to_string(), v.to_string());
        Box::new(move |d: &Draft| {
            let o = &d.object;
            let mut o = o.clone();
            let data = o.as_map_mut().entry("data").or_insert(json!({}));
            data[k.as_str()] = json!(v);
            Ok(d.put(o))
        })
    }

    fn failing() -> Mutation {
        Box::new(|d: &Draft| {
            let o = &d.object;
            Err(ApiError::conflict(
                crate::storage::target(&key().info, o.name()),
                "this patch does not apply",
            ))
        })
    }

    fn spawn_mutate(
        c: &Arc<Coalescer<FakeStore>>,
        m: Mutation,
        deadline: Instant,
    ) -> JoinHandle<Result<Arc<Object>, ApiError>> {
        let c = c.clone();
        tokio::spawn(async move { c.mutate(key(), m, deadline).await })
    }

    /// Lets the other tasks run until `done` holds (the clock stays where it is).
    async fn until(mut done: impl FnMut() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the condition never held");
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    #[tokio::test(start_paused = true)]
    async fn patches_queued_behind_a_commit_are_committed_together() {
        let (store, c) = setup(Duration::from_millis(10), 100);
        let first = spawn_mutate(&c, set("k0", "v"), soon());
        until(|| store.batch_sizes().len() == 1).await;
        let queued: Vec<_> = (1..=5)
            .map(|i| spawn_mutate(&c, set(&format!("k{i}"), "v"), soon()))
            .collect();
        until(|| c.waiting(&key().key) == 5).await;

        let first = first.await.unwrap().unwrap();
        assert_eq!(first.resource_version(), "2");
        let mut answers = Vec::new();
        for q in queued {
            answers.push(q.await.unwrap().unwrap());
        }
        assert_eq!(store.batch_sizes(), [1, 5]);
        // Every caller of a batch gets the object at the batch's revision, with every patch.
        for a in &answers {
            assert_eq!(a, &answers[0]);
        }
        assert_eq!(answers[0].resource_version(), "3");
        assert_eq!(answers[0].as_map()["data"].as_object().unwrap().len(), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_patch_gets_its_own_error_and_the_others_commit() {
        let (store, c) = setup(Duration::from_millis(10), 100);
        let first = spawn_mutate(&c, set("k0", "v"), soon());
        until(|| store.batch_sizes().len() == 1).await;
        let a = spawn_mutate(&c, set("a", "1"), soon());
        let bad = spawn_mutate(&c, failing(), soon());
        let b = spawn_mutate(&c, set("b", "2"), soon());
        until(|| c.waiting(&key().key) == 3).await;
        first.await.unwrap().unwrap();

        let e = bad.await.unwrap().unwrap_err();
        assert_eq!(e.reason, Reason::Conflict);
        let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
        assert_eq!(a, b);
        assert_eq!(a.as_map()["data"], json!({"k0": "v", "a": "1", "b": "2"}));
        assert_eq!(store.batch_sizes(), [1, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_patch_that_waited_past_its_deadline_times_out_unapplied() {
        let (store, c) = setup(Duration::from_millis(100), 100);
        let first = spawn_mutate(&c, set("k0", "v"), soon());
        until(|| store.batch_sizes().len() == 1).await;
        let late = spawn_mutate(
            &c,
            set("late", "v"),
            Instant::now() + Duration::from_millis(50),
        );
        until(|| c.waiting(&key().key) == 1).await;
        first.await.unwrap().unwrap();

        let e = late.await.unwrap().unwrap_err();
        assert_eq!(e.reason, Reason::Timeout);
        assert_eq!(e.message, "the PATCH waited past its deadline");
        assert_eq!(store.batch_sizes(), [1]);
        assert!(
            store.object.lock().unwrap().as_map()["data"]
                .get("late")
                .is_none()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_runs_until_the_latest_deadline_in_it() {
        let (store, c) = setup(Duration::from_millis(10), 100);
        let start = Instant::now();
        let first = spawn_mutate(&c, set("k0", "v"), soon());
        until(|| store.batch_sizes().len() == 1).await;
        let a = spawn_mutate(&c, set("a", "1"), start + Duration::from_secs(1));
        let b = spawn_mutate(&c, set("b", "1"), start + Duration::from_secs(3));
        until(|| c.waiting(&key().key) == 2).await;
        for h in [first, a, b] {
            h.await.unwrap().unwrap();
        }
        let batches = store.batches.lock().unwrap().clone();
        assert_eq!(batches[1], (2, start + Duration::from_secs(3)));
    }

    #[tokio::test(start_paused = true)]
    async fn too_many_waiting_patches_are_refused() {
        let (store, c) = setup(Duration::from_millis(10), 2);
        let first = spawn_mutate(&c, set("k0", "v"), soon());
        until(|| store.batch_sizes().len() == 1).await;
        let waiting = [
            spawn_mutate(&c, set("a", "1"), soon()),
            spawn_mutate(&c, set("b", "1"), soon()),
        ];
        until(|| c.waiting(&key().key) == 2).await;

        let e = c.mutate(key(), set("c", "1"), soon()).await.unwrap_err();
        assert_eq!(e.reason, Reason::TooManyRequests);
        assert_eq!(
            e.message,
            "too many PATCHes are waiting on configmaps \"hot\"; retry later"
        );
        first.await.unwrap().unwrap();
        for w in waiting {
            w.await.unwrap().unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_stops_waiting_shortly_after_its_deadline() {
        // A commit that outlives every deadline (etcd hanging).
        let (_store, c) = setup(Duration::from_secs(3600), 100);
        let start = Instant::now();
        let e = c
            .mutate(key(), set("a", "1"), start + Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(e.reason, Reason::Timeout);
        assert_eq!(start.elapsed(), Duration::from_secs(1) + ANSWER_GRACE);
    }

    #[tokio::test(start_paused = true)]
    async fn leadership_ends_when_the_queue_drains() {
        let (store, c) = setup(Duration::from_millis(10), 100);
        c.mutate(key(), set("a", "1"), soon()).await.unwrap();
        until(|| c.is_idle()).await;
        // The next PATCH starts a new leader.
        c.mutate(key(), set("b", "1"), soon()).await.unwrap();
        assert_eq!(store.batch_sizes(), [1, 1]);
        until(|| c.is_idle()).await;
    }
}
