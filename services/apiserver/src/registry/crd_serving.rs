//! Serving custom resources live. Every replica follows the CRDs in its watch cache: a new CRD's
//! resources are served within a sync period, a deleted CRD's objects are deleted (their own
//! finalizers honoured) and then its cleanup finalizer removed, after which its resources are no
//! longer served. Replicas do the cleanup side by side: each delete is idempotent and the
//! finalizer's removal is a compare-and-swap on the CRD's revision.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use keel_api::{ApiError, GroupVersionResource, Object, Reason};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::crd::{self, CLEANUP_FINALIZER};
use super::deletion::DeleteOptions;
use super::patch::PatchType;
use super::store::{ListOptions, Registry};
use super::strategy::Subresource;

/// How often each replica compares the CRDs in its cache with what it serves.
const SYNC_EVERY: Duration = Duration::from_millis(200);
/// The pause between two cleanup steps of one deleted CRD (each lists its objects from etcd).
const CLEANUP_PAUSE: Duration = Duration::from_secs(1);
/// How long a request's read of the CRDs may take before it answers from the watch's view.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one cleanup step (a list and its deletes) may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads of etcd's CRDs for requests ([`Registry::catch_up_custom_resources`]): one at a time,
/// numbered, so that requests waiting together share one.
#[derive(Default)]
pub struct CrdSync {
    lock: tokio::sync::Mutex<()>,
    /// Reads begun.
    started: AtomicU64,
    /// The number of the last read done.
    done: AtomicU64,
}

/// The CRD resource itself.
pub fn crd_gvr() -> GroupVersionResource {
    GroupVersionResource::new(crd::GROUP, "v1", crd::RESOURCE)
}

impl Registry {
    /// Follows the CRDs until the process ends.
    pub async fn serve_custom_resources(self: Arc<Self>) {
        let Ok(info) = self.lookup(Some(&crd_gvr())) else {
            return;
        };
        let mut tick = tokio::time::interval(SYNC_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Deleted CRDs being cleaned up; their tasks say when a step is done (at most one
        // message per entry of `cleaning`, so the channel stays as small as the set).
        let mut cleaning: BTreeSet<String> = BTreeSet::new();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        // The CRD cache's last change when the CRDs were last served, and whether any was then
        // being deleted: a tick with neither a change nor a cleanup to go on with reads nothing
        // (nor does one while the cache loads).
        let mut served: Option<i64> = None;
        let mut deleting = false;
        loop {
            tick.tick().await;
            while let Ok(name) = done_rx.try_recv() {
                cleaning.remove(&name);
            }
            let changed = self.store().cache_changed(&info);
            let moved = changed.is_some() && changed != served;
            if !moved && !deleting {
                continue;
            }
            let Some((crds, revision)) = self.store().cached_at(&info) else {
                continue;
            };
            if moved {
                let resources = crds.iter().flat_map(crd::resources).collect();
                let (added, removed) = self.resources_mut().set_custom(resources, revision);
                for gvr in &added {
                    tracing::info!(resource = %gvr, "serving a custom resource");
                }
                for gvr in &removed {
                    tracing::info!(resource = %gvr, "no longer serving a custom resource");
                }
                served = changed;
            }
            let to_clean: Vec<&Object> = crds
                .iter()
                .filter(|c| {
                    c.deletion_timestamp().is_some() && c.finalizers().contains(&CLEANUP_FINALIZER)
                })
                .collect();
            deleting = !to_clean.is_empty();
            for c in to_clean {
                // One cleanup task per CRD at a time, off this loop: a CRD with many objects
                // or objects held by finalizers must not hold up the serving of others.
                if !cleaning.insert(c.name().to_string()) {
                    continue;
                }
                let (this, crd, done) = (self.clone(), c.clone(), done_tx.clone());
                tokio::spawn(async move {
                    if let Err(e) = this.clean_up(&crd).await {
                        tracing::warn!(crd = crd.name(), error = %e, "cleaning up a deleted CRD");
                    }
                    tokio::time::sleep(CLEANUP_PAUSE).await;
                    let _ = done.send(crd.name().to_string());
                });
            }
        }
    }

    /// Serves the custom resources of the CRDs etcd has now, read fresh: what a request for a
    /// resource this replica does not serve yet (or serves as terminating) does before it
    /// answers, so that a CRD said to be Established, or a deletion said to be done, holds on
    /// every replica at once rather than when its watch catches up. One read at a time, of at
    /// most [`CATCH_UP_TIMEOUT`]; a request that waited for a read begun after it came takes
    /// that read's outcome (a failed read too: with etcd unreachable, requests queued behind
    /// one another do not each wait in turn).
    pub async fn catch_up_custom_resources(&self, deadline: Instant) -> Result<(), ApiError> {
        let ticket = self.crd_sync().started.load(Ordering::Acquire);
        let _one = self.crd_sync().lock.lock().await;
        if self.crd_sync().done.load(Ordering::Acquire) > ticket {
            return Ok(());
        }
        let n = self.crd_sync().started.fetch_add(1, Ordering::AcqRel) + 1;
        let read = self.read_custom_resources(deadline).await;
        self.crd_sync().done.store(n, Ordering::Release);
        read
    }

    async fn read_custom_resources(&self, deadline: Instant) -> Result<(), ApiError> {
        let deadline = deadline.min(Instant::now() + CATCH_UP_TIMEOUT);
        let info = self.lookup(Some(&crd_gvr()))?;
        let list = self.list(&info, ListOptions::default(), deadline).await?;
        let crds: Vec<Object> = list
            .items
            .iter()
            .filter_map(|b| Object::from_slice(b).ok())
            .collect();
        let resources = crds.iter().flat_map(crd::resources).collect();
        let (added, removed) = self.resources_mut().set_custom(resources, list.revision);
        for gvr in &added {
            tracing::info!(resource = %gvr, "serving a custom resource (read from etcd for a request)");
        }
        for gvr in &removed {
            tracing::info!(resource = %gvr, "no longer serving a custom resource (read from etcd for a request)");
        }
        Ok(())
    }

    /// The resource a request names; one this replica does not serve yet is looked for in
    /// etcd's CRDs first ([`Registry::catch_up_custom_resources`]).
    pub async fn lookup_fresh(
        &self,
        gvr: Option<&GroupVersionResource>,
        deadline: Instant,
    ) -> Result<Arc<keel_api::ResourceInfo>, ApiError> {
        match self.lookup(gvr) {
            Err(e) if e.reason == Reason::NotFound && gvr.is_some() => {
                self.catch_up_custom_resources(deadline).await?;
                self.lookup(gvr)
            }
            found => found,
        }
    }

    /// One step of a deleted CRD's cleanup: deletes its objects; once none is left, removes
    /// the cleanup finalizer.
    async fn clean_up(&self, crd: &Object) -> Result<(), ApiError> {
        let deadline = Instant::now() + CLEANUP_TIMEOUT;
        let resources = crd::resources(crd);
        // Objects are stored once, whatever the version: list them at the storage version.
        let Some(custom) = resources
            .iter()
            .find(|r| r.info.gvr.version == r.storage_version)
            .or(resources.first())
        else {
            return self.remove_cleanup_finalizer(crd, deadline).await;
        };
        let Ok(info) = self.lookup(Some(&custom.info.gvr)) else {
            // Not served here yet (the next sync serves it).
            return Ok(());
        };
        let list = self.list(&info, ListOptions::default(), deadline).await?;
        if list.items.is_empty() {
            return self.remove_cleanup_finalizer(crd, deadline).await;
        }
        for item in &list.items {
            let Ok(obj) = serde_json::from_slice::<Value>(item) else {
                continue;
            };
            let ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
            let name = obj["metadata"]["name"].as_str().unwrap_or("");
            if obj["metadata"]["deletionTimestamp"].is_string() {
                continue;
            }
            match self
                .delete(&info, ns, name, DeleteOptions::default(), deadline)
                .await
            {
                Ok(_) => {}
                Err(e) if e.reason == Reason::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn remove_cleanup_finalizer(
        &self,
        crd: &Object,
        deadline: Instant,
    ) -> Result<(), ApiError> {
        let Ok(info) = self.lookup(Some(&crd_gvr())) else {
            return Ok(());
        };
        let rest: Vec<&str> = crd
            .finalizers()
            .into_iter()
            .filter(|f| *f != CLEANUP_FINALIZER)
            .collect();
        let body =
            json!({"metadata": {"finalizers": rest, "resourceVersion": crd.resource_version()}});
        match self
            .patch(
                &info,
                "",
                crd.name(),
                Subresource::Main,
                PatchType::Merge,
                &serde_json::to_vec(&body).unwrap_or_default(),
                None,
                false,
                deadline,
            )
            .await
        {
            Ok(_) => {
                tracing::info!(crd = crd.name(), "objects deleted; the CRD goes");
                Ok(())
            }
            // Another replica was first, or the CRD changed: the next sync looks again.
            Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
