//! The write loop every change of an existing object goes through (Update, Patch, Delete):
//! read the current state, apply the mutations, compare-and-swap, and on a lost race apply them
//! again to the state etcd returned, until the deadline (Kubernetes' `GuaranteedUpdate`).

use bytes::Bytes;
use keel_api::{ApiError, Object, ResourceInfo};
use tokio::time::Instant;

use super::Store;
use super::codec;
use super::draft::{Change, Draft};
use super::keys::ObjectKey;
use super::read::Current;
use super::recent::Written;
use crate::etcd::Cas;

/// A change to apply to the current object: what to do with it, or why not. Applied again to
/// the fresh object each time the compare-and-swap loses, so it must be a pure function of it.
pub type Mutation = Box<dyn Fn(&Draft) -> Result<Change, ApiError> + Send + Sync>;

/// The registry's rules for what storage writes, given to storage so that storage never calls
/// up to the registry.
pub trait WriteRules: Send + Sync {
    /// Whether `obj`, as a write would store it, is finished: marked for deletion and held by
    /// no finalizer (finalizers are the registry's business); it is removed instead of stored.
    fn is_finished(&self, info: &ResourceInfo, obj: &Object) -> bool;

    /// Whether objects of `info` expire some time after their last write (`--event-ttl`).
    fn expires(&self, _info: &ResourceInfo) -> bool {
        false
    }

    /// Applies a batch's `mutations` in order to `current` (as [`apply_in_order`]); a
    /// registry may judge the batch's result as a whole.
    fn apply_batch(
        &self,
        current: &Draft,
        mutations: &[&Mutation],
        errors: &mut [Option<ApiError>],
    ) -> Change {
        apply_in_order(current, mutations, errors)
    }
}

/// Applies `mutations` in order to `current`, each to what the one before made: one that
/// fails is skipped, its error put in its place in `errors`. None succeeding leaves `current`
/// as it is.
pub fn apply_in_order(
    current: &Draft,
    mutations: &[&Mutation],
    errors: &mut [Option<ApiError>],
) -> Change {
    let mut change: Option<Change> = None;
    for (m, err) in mutations.iter().zip(errors.iter_mut()) {
        match m(change.as_ref().map_or(current, Change::draft)) {
            Ok(c) => {
                change = Some(c);
                *err = None;
            }
            Err(e) => *err = Some(e),
        }
    }
    change.unwrap_or_else(|| Change::Put(current.clone()))
}

/// How a guaranteed update starts.
#[derive(Debug, Clone, Copy, Default)]
pub struct UpdateOptions {
    /// The `resourceVersion` the client's change was made from: if the object has moved on,
    /// `Conflict` at once, never retried.
    pub expected_revision: Option<i64>,
    /// Read the first state from etcd even without an expected revision (a Delete answers
    /// with the object as etcd has it).
    pub read_etcd: bool,
    /// Compute the change from etcd's current state and answer with it, writing nothing
    /// (Kubernetes' `dryRun=All`).
    pub dry_run: bool,
}

/// What a guaranteed update committed.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed {
    /// The object as stored, or as it was last when removed, at the commit's revision.
    pub object: Object,
    /// Whether the object was removed.
    pub removed: bool,
}

/// The outcome of one batch: the commit, and per mutation its own error (it was skipped).
pub type BatchOutcome = (Result<Committed, ApiError>, Vec<Option<ApiError>>);

impl Store {
    /// Applies `mutations` in order to the current object and commits the result in one
    /// compare-and-swap, re-applying them to the fresh object when another writer wins the
    /// race, until `deadline`. A mutation that fails is skipped and its error returned in its
    /// place; a result that changes nothing is no write.
    pub async fn guaranteed_update(
        &self,
        key: &ObjectKey,
        opts: UpdateOptions,
        mutations: &[&Mutation],
        deadline: Instant,
    ) -> BatchOutcome {
        let t = key.target();
        let info = &key.info;
        let mut errors: Vec<Option<ApiError>> = vec![None; mutations.len()];
        let mut allow_cache = opts.expected_revision.is_none() && !opts.read_etcd && !opts.dry_run;
        let mut current: Option<Current> = None;
        loop {
            let cur = match current.take() {
                Some(c) => c,
                None => match self.read_current(key, allow_cache, deadline).await {
                    Ok(Some(c)) => c,
                    Ok(None) => return (Err(ApiError::not_found(t)), errors),
                    Err(e) => return (Err(e.with_target(&t)), errors),
                },
            };
            if let Some(p) = opts.expected_revision
                && p != cur.rv
            {
                return (Err(ApiError::stale(t)), errors);
            }
            let Current {
                obj,
                rv: cur_rv,
                unverified,
            } = cur;
            let start = Draft::from_object(obj);
            let change = self.rules.apply_batch(&start, mutations, &mut errors);
            if unverified && errors.iter().any(Option::is_some) {
                // A mutation may fail only because the cache's copy is behind (a JSON patch's
                // `test` of a newer value): as Kubernetes' GuaranteedUpdate, try again on
                // etcd's state, and answer what that says.
                allow_cache = false;
                continue;
            }
            let (draft, remove) = match change {
                Change::Put(draft) if draft == start => {
                    if unverified {
                        // The cache may lag: only etcd can say that nothing changes.
                        allow_cache = false;
                        continue;
                    }
                    return (
                        Ok(Committed {
                            object: start.into_object(),
                            removed: false,
                        }),
                        errors,
                    );
                }
                Change::Put(draft) => {
                    let finished = self.rules.is_finished(info, &draft.object);
                    (draft, finished)
                }
                Change::Remove(draft) => (draft, true),
            };
            let mut obj = draft.into_object();
            if opts.dry_run {
                return (
                    Ok(Committed {
                        object: obj,
                        removed: remove,
                    }),
                    errors,
                );
            }
            let mut stored = None;
            let result = if remove {
                self.kv.compare_and_delete(&key.key, cur_rv, deadline).await
            } else {
                let bytes = match codec::encode(&t, &obj) {
                    Ok(b) => b,
                    Err(e) => return (Err(e), errors),
                };
                stored = Some(Bytes::copy_from_slice(&bytes));
                match self.lease_for(key, deadline).await {
                    Ok(lease) => {
                        self.kv
                            .compare_and_put(&key.key, cur_rv, bytes, lease, deadline)
                            .await
                    }
                    Err(e) => Err(e),
                }
            };
            match result {
                Ok(Cas::Done(rev)) => {
                    obj.set_resource_version(&rev.to_string());
                    self.recent
                        .remember(&key.key, stored.map(|bytes| Written { bytes, rv: rev }));
                    return (
                        Ok(Committed {
                            object: obj,
                            removed: remove,
                        }),
                        errors,
                    );
                }
                Ok(Cas::Stale(fresh)) => {
                    if opts.expected_revision.is_some() {
                        return (Err(ApiError::stale(t)), errors);
                    }
                    self.metrics.patch_retry(&info.gvr.resource);
                    if Instant::now() >= deadline {
                        return (
                            Err(ApiError::timeout(
                                t,
                                "the object kept changing until the request's deadline",
                            )),
                            errors,
                        );
                    }
                    match Current::fresh(info, fresh) {
                        Ok(Some(c)) => current = Some(c),
                        Ok(None) => return (Err(ApiError::not_found(t)), errors),
                        Err(e) => return (Err(e), errors),
                    }
                }
                Err(e) => return (Err(e.with_target(&t)), errors),
            }
        }
    }

    /// One mutation through [`Store::guaranteed_update`]: its own error, else the commit's.
    pub async fn update(
        &self,
        key: &ObjectKey,
        opts: UpdateOptions,
        mutation: Mutation,
        deadline: Instant,
    ) -> Result<Committed, ApiError> {
        let (res, mut errs) = self
            .guaranteed_update(key, opts, &[&mutation], deadline)
            .await;
        match errs.pop().flatten() {
            Some(e) => Err(e),
            None => res,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use keel_api::{Metadata, Reason, Target};
    use serde_json::{Value, json};

    use super::*;
    use crate::etcd::KeyValue;
    use crate::etcd::mem::MemEtcd;
    use crate::storage::testing::{Fixture, configmap, far};

    /// A mutation that sets `data[key]`, counting its calls.
    fn set(key: &'static str, value: &'static str, calls: &Arc<AtomicUsize>) -> Mutation {
        let calls = calls.clone();
        Box::new(move |d: &Draft| {
            let obj = &d.object;
            calls.fetch_add(1, Ordering::SeqCst);
            let mut obj = obj.clone();
            obj.as_map_mut()
                .entry("data")
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .unwrap()
                .insert(key.into(), Value::from(value));
            Ok(d.put(obj))
        })
    }

    fn data(obj: &Object) -> &Value {
        &obj.as_map()["data"]
    }

    /// Reads from etcd, so that each test knows what the write starts from (the watch cache
    /// has tests of its own).
    const FROM_ETCD: UpdateOptions = UpdateOptions {
        expected_revision: None,
        read_etcd: true,
        dry_run: false,
    };

    async fn stored(f: &Fixture, name: &str) -> Option<Object> {
        let kv = f.mem.get(&f.key(name).key, far()).await.unwrap()?;
        Some(codec::from_storage(&f.info, &kv.value, kv.mod_revision).unwrap())
    }

    #[tokio::test]
    async fn a_lost_race_applies_the_mutations_again_to_the_fresh_object() {
        let f = Fixture::new();
        let cm = f.create("app", json!({"a": "1"})).await;
        let calls = Arc::new(AtomicUsize::new(0));
        let mine = set("b", "2", &calls);
        // Another writer lands between the read and the compare-and-swap, once.
        let theirs = {
            let (f_mem, key) = (f.mem.clone(), f.key("app").key);
            let once = AtomicUsize::new(0);
            let winner = codec::to_storage(&configmap("app", json!({"a": "1", "c": "3"})));
            let m: Mutation = Box::new(move |d: &Draft| {
                if once.fetch_add(1, Ordering::SeqCst) == 0 {
                    f_mem.put(&key, winner.clone());
                }
                Ok(Change::Put(d.clone()))
            });
            m
        };
        let (res, errors) = f
            .store
            .guaranteed_update(&f.key("app"), FROM_ETCD, &[&theirs, &mine], far())
            .await;
        let committed = res.unwrap();
        assert_eq!(errors, [None, None]);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "applied again after the lost race"
        );
        assert_eq!(
            data(&committed.object),
            &json!({"a": "1", "b": "2", "c": "3"})
        );
        let rv: i64 = committed.object.resource_version().parse().unwrap();
        let original: i64 = cm.resource_version().parse().unwrap();
        assert_eq!(rv, original + 2, "the other write, then ours");
        assert_eq!(stored(&f, "app").await.unwrap(), committed.object);
    }

    #[tokio::test]
    async fn a_stale_expected_revision_is_a_conflict_at_once() {
        let f = Fixture::new();
        let cm = f.create("app", json!({"a": "1"})).await;
        let expected = cm.resource_version().parse().unwrap();
        f.overwrite(&configmap("app", json!({"a": "other"})));
        let before = f.mem.revision();
        let calls = Arc::new(AtomicUsize::new(0));
        let opts = UpdateOptions {
            expected_revision: Some(expected),
            ..Default::default()
        };
        let err = f
            .store
            .update(&f.key("app"), opts, set("b", "2", &calls), far())
            .await
            .unwrap_err();
        assert_eq!(err.reason, Reason::Conflict);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "not applied to a state it was not made from"
        );
        assert_eq!(f.mem.revision(), before);
    }

    #[tokio::test]
    async fn a_race_lost_with_an_expected_revision_is_a_conflict_not_a_retry() {
        let f = Fixture::new();
        let cm = f.create("app", json!({"a": "1"})).await;
        let expected = cm.resource_version().parse().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let (mem, key) = (f.mem.clone(), f.key("app").key);
        let winner = codec::to_storage(&configmap("app", json!({"a": "other"})));
        let counted = set("b", "2", &calls);
        let racing: Mutation = Box::new(move |d: &Draft| {
            mem.put(&key, winner.clone());
            counted(d)
        });
        let opts = UpdateOptions {
            expected_revision: Some(expected),
            ..Default::default()
        };
        let err = f
            .store
            .update(&f.key("app"), opts, racing, far())
            .await
            .unwrap_err();
        assert_eq!(err.reason, Reason::Conflict);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(
            data(&stored(&f, "app").await.unwrap()),
            &json!({"a": "other"})
        );
    }

    #[tokio::test]
    async fn a_failing_mutation_is_returned_and_nothing_is_written() {
        let f = Fixture::new();
        f.create("app", json!({"a": "1"})).await;
        let before = f.mem.revision();
        let refuse: Mutation =
            Box::new(|_| Err(ApiError::bad_request(Target::default(), "refused")));
        let err = f
            .store
            .update(&f.key("app"), FROM_ETCD, refuse, far())
            .await
            .unwrap_err();
        assert_eq!(
            (err.reason, err.message.as_str()),
            (Reason::BadRequest, "refused")
        );
        assert_eq!(f.mem.revision(), before);
    }

    #[tokio::test]
    async fn a_failing_mutation_of_a_batch_is_skipped_and_the_others_commit() {
        let f = Fixture::new();
        f.create("app", json!({"a": "1"})).await;
        let calls = Arc::new(AtomicUsize::new(0));
        let refuse: Mutation =
            Box::new(|_| Err(ApiError::bad_request(Target::default(), "refused")));
        let (b, c) = (set("b", "2", &calls), set("c", "3", &calls));
        let (res, errors) = f
            .store
            .guaranteed_update(&f.key("app"), FROM_ETCD, &[&b, &refuse, &c], far())
            .await;
        assert_eq!(
            data(&res.unwrap().object),
            &json!({"a": "1", "b": "2", "c": "3"})
        );
        let reasons: Vec<_> = errors
            .iter()
            .map(|e| e.as_ref().map(|e| e.reason))
            .collect();
        assert_eq!(reasons, [None, Some(Reason::BadRequest), None]);
    }

    #[tokio::test]
    async fn a_change_that_changes_nothing_is_no_write() {
        let f = Fixture::new();
        let cm = f.create("app", json!({"a": "1"})).await;
        let before = f.mem.revision();
        let calls = Arc::new(AtomicUsize::new(0));
        let committed = f
            .store
            .update(&f.key("app"), FROM_ETCD, set("a", "1", &calls), far())
            .await
            .unwrap();
        assert_eq!(f.mem.revision(), before);
        assert_eq!(committed.object, cm);
        assert!(!committed.removed);
    }

    #[tokio::test]
    async fn a_no_op_judged_on_a_lagging_watch_cache_is_checked_against_etcd() {
        let f = Fixture::new();
        let cm = f.create("app", json!({"a": "1"})).await;
        let rv: i64 = cm.resource_version().parse().unwrap();
        f.wait_for_cache(rv).await;
        // The cache has not seen this write yet: this test's task does not yield before the
        // update reads the cache (a current-thread runtime runs the cache's task only then).
        f.overwrite(&configmap("app", json!({"a": "2"})));
        let calls = Arc::new(AtomicUsize::new(0));
        let committed = f
            .store
            .update(
                &f.key("app"),
                UpdateOptions::default(),
                set("a", "1", &calls),
                far(),
            )
            .await
            .unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "on the cache's copy, then on etcd's"
        );
        assert_eq!(data(&committed.object), &json!({"a": "1"}));
        assert_eq!(committed.object.resource_version(), (rv + 2).to_string());
        assert_eq!(stored(&f, "app").await.unwrap(), committed.object);
    }

    #[tokio::test]
    async fn a_mutation_failing_on_a_lagging_watch_cache_is_tried_again_on_etcd() {
        let f = Fixture::new();
        let cm = f.create("app", json!({"a": "1"})).await;
        let rv: i64 = cm.resource_version().parse().unwrap();
        f.wait_for_cache(rv).await;
        // As above: the cache has not seen this write when the update reads it.
        f.overwrite(&configmap("app", json!({"a": "2"})));
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        // A JSON patch's `test` of what only the newer state holds.
        let test_a_is_2: Mutation = Box::new(move |d: &Draft| {
            let obj = &d.object;
            counted.fetch_add(1, Ordering::SeqCst);
            if obj.as_map()["data"]["a"] != "2" {
                return Err(ApiError::bad_request(Target::default(), "test failed"));
            }
            let mut obj = obj.clone();
            obj.as_map_mut()["data"]["b"] = json!("3");
            Ok(d.put(obj))
        });
        let committed = f
            .store
            .update(&f.key("app"), UpdateOptions::default(), test_a_is_2, far())
            .await
            .unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "on the cache's copy, then on etcd's"
        );
        assert_eq!(data(&committed.object), &json!({"a": "2", "b": "3"}));
        // On etcd's state a failure is the answer.
        let refuse: Mutation =
            Box::new(|_| Err(ApiError::bad_request(Target::default(), "refused")));
        let err = f
            .store
            .update(&f.key("app"), UpdateOptions::default(), refuse, far())
            .await
            .unwrap_err();
        assert_eq!(err.message, "refused");
    }

    #[tokio::test]
    async fn a_dry_run_answers_the_change_and_writes_nothing() {
        let f = Fixture::new();
        let cm = f.create("app", json!({"a": "1"})).await;
        let before = f.mem.revision();
        let calls = Arc::new(AtomicUsize::new(0));
        let opts = UpdateOptions {
            dry_run: true,
            ..Default::default()
        };
        let committed = f
            .store
            .update(&f.key("app"), opts, set("b", "2", &calls), far())
            .await
            .unwrap();
        assert_eq!(data(&committed.object), &json!({"a": "1", "b": "2"}));
        assert_eq!(f.mem.revision(), before);
        assert_eq!(stored(&f, "app").await.unwrap(), cm);
    }

    #[tokio::test]
    async fn an_object_left_finished_is_removed_instead_of_stored() {
        let f = Fixture::new();
        let mut cm = configmap("app", json!({"a": "1"}));
        cm.set_meta_str("deletionTimestamp", "2024-01-01T00:00:00Z");
        cm.metadata_mut()
            .insert("finalizers".into(), json!(["example.com/hold"]));
        f.store.create(&f.key("app"), cm, far()).await.unwrap();
        let release: Mutation = Box::new(|d: &Draft| {
            let obj = &d.object;
            let mut obj = obj.clone();
            obj.metadata_mut().remove("finalizers");
            Ok(d.put(obj))
        });
        let committed = f
            .store
            .update(&f.key("app"), FROM_ETCD, release, far())
            .await
            .unwrap();
        assert!(committed.removed);
        assert!(committed.object.finalizers().is_empty());
        assert!(stored(&f, "app").await.is_none());
    }

    #[tokio::test]
    async fn an_update_of_a_missing_object_is_not_found() {
        let f = Fixture::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let err = f
            .store
            .update(&f.key("app"), FROM_ETCD, set("a", "1", &calls), far())
            .await
            .unwrap_err();
        assert_eq!(err.reason, Reason::NotFound);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn endless_contention_ends_at_the_deadline_with_a_timeout() {
        let f = Fixture::on(MemEtcd::new().with_latency(Duration::from_millis(10)));
        f.create("app", json!({"n": "0"})).await;
        // Another writer wins every race: it writes whenever this one has read.
        let (mem, key) = (f.mem.clone(), f.key("app").key);
        let rounds = Arc::new(AtomicUsize::new(0));
        let counted = rounds.clone();
        let contended: Mutation = Box::new(move |d: &Draft| {
            let obj = &d.object;
            let n = counted.fetch_add(1, Ordering::SeqCst);
            mem.put(
                &key,
                codec::to_storage(&configmap("app", json!({"n": n.to_string()}))),
            );
            let mut mine = obj.clone();
            mine.as_map_mut()
                .insert("data".into(), json!({"n": "mine"}));
            Ok(d.put(mine))
        });
        let start = Instant::now();
        let deadline = start + Duration::from_secs(1);
        let err = f
            .store
            .update(&f.key("app"), FROM_ETCD, contended, deadline)
            .await
            .unwrap_err();
        assert_eq!(err.reason, Reason::Timeout);
        assert!(start.elapsed() >= Duration::from_secs(1));
        assert!(
            start.elapsed() < Duration::from_millis(1100),
            "{:?}",
            start.elapsed()
        );
        // About one round per two calls of 10 ms each.
        assert!(rounds.load(Ordering::SeqCst) >= 40, "{rounds:?}");
    }
}
