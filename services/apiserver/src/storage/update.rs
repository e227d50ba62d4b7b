//! The write loop every change of an existing object goes through (Update, Patch, Delete):
//! read the current state, apply the mutations, compare-and-swap, and on a lost race apply them
//! again to the state etcd returned, until the deadline (Kubernetes' `GuaranteedUpdate`).

use bytes::Bytes;
use keel_api::{ApiError, Object, ResourceInfo};
use tokio::time::Instant;

use super::Store;
use super::codec;
use super::keys::ObjectKey;
use super::read::Current;
use super::recent::Written;
use crate::etcd::Cas;

/// A change to apply to the current object: what to do with it, or why not. Applied again to
/// the fresh object each time the compare-and-swap loses, so it must be a pure function of it.
pub type Mutation = Box<dyn Fn(&Object) -> Result<Change, ApiError> + Send + Sync>;

/// What a mutation makes of the object.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Store this object (removed instead when the [`RemovalPolicy`] says it is finished).
    Put(Object),
    /// Remove the object now; this is its last state, as the caller is answered.
    Remove(Object),
}

impl Change {
    fn object(&self) -> &Object {
        match self {
            Change::Put(o) | Change::Remove(o) => o,
        }
    }
}

/// When a written object is removed instead of stored: a rule of the registry (finalizers are
/// its business), given to storage so that storage never calls up to it.
pub trait RemovalPolicy: Send + Sync {
    /// Whether `obj`, as a write would store it, is finished: marked for deletion and held by
    /// no finalizer.
    fn is_finished(&self, info: &ResourceInfo, obj: &Object) -> bool;
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
            let mut change = Change::Put(cur.obj.clone());
            for (m, err) in mutations.iter().zip(errors.iter_mut()) {
                match m(change.object()) {
                    Ok(c) => {
                        change = c;
                        *err = None;
                    }
                    Err(e) => *err = Some(e),
                }
            }
            let (mut obj, remove) = match change {
                Change::Put(obj) if obj == cur.obj => {
                    if cur.unverified {
                        // The cache may lag: only etcd can say that nothing changes.
                        allow_cache = false;
                        continue;
                    }
                    return (
                        Ok(Committed {
                            object: cur.obj,
                            removed: false,
                        }),
                        errors,
                    );
                }
                Change::Put(obj) => {
                    let finished = self.removal.is_finished(info, &obj);
                    (obj, finished)
                }
                Change::Remove(obj) => (obj, true),
            };
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
                self.kv.compare_and_delete(&key.key, cur.rv, deadline).await
            } else {
                let bytes = match codec::encode(&t, &obj) {
                    Ok(b) => b,
                    Err(e) => return (Err(e), errors),
                };
                stored = Some(Bytes::copy_from_slice(&bytes));
                self.kv
                    .compare_and_put(&key.key, cur.rv, bytes, deadline)
                    .await
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
