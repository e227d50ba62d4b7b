//! Hot-object PATCH coalescing: concurrent PATCHes of one key inside this replica queue up;
//! one task applies the queued patches in arrival order to one read of the object and commits
//! them with a single compare-and-swap. Correctness never depends on it (replicas still meet at
//! the compare-and-swap); it turns conflict storms on a hot object into batches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use keel_api::{ApiError, Object, ResourceInfo};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::store::{Mutation, Store};

pub(super) struct Pending {
    pub mutate: Mutation,
    pub deadline: Instant,
    pub reply: oneshot::Sender<Result<Object, ApiError>>,
}

/// The queues of PATCHes per storage key. A key has an entry exactly while a leader task
/// runs for it; the leader removes the entry when it finds the queue empty (under the lock,
/// so no PATCH is left behind).
pub struct Coalescer {
    queues: Mutex<HashMap<String, Vec<Pending>>>,
    /// The most PATCHes waiting on one object; past it callers get `TooManyRequests`.
    max_queued: usize,
}

impl Coalescer {
    pub fn new(max_queued: usize) -> Coalescer {
        Coalescer {
            queues: Mutex::default(),
            max_queued: max_queued.max(1),
        }
    }

    /// Queues a mutation of `key`; returns whether the caller must start the leader.
    pub(super) fn enqueue(&self, key: &str, p: Pending) -> Result<bool, Pending> {
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
    pub(super) fn take(&self, key: &str) -> Vec<Pending> {
        let mut q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        match q.get_mut(key) {
            Some(waiting) if !waiting.is_empty() => std::mem::take(waiting),
            _ => {
                q.remove(key);
                Vec::new()
            }
        }
    }
}

/// The leader of one key: commits batches until the queue is empty.
pub(super) async fn lead(store: Arc<Store>, info: Arc<ResourceInfo>, key: String) {
    loop {
        let batch = store.coalescer().take(&key);
        if batch.is_empty() {
            return;
        }
        store.commit_batch(&info, &key, batch).await;
    }
}
