//! Serving custom resources live. Every replica follows the CRDs in its watch cache, woken by
//! its changes: a new CRD's resources are served as soon as the cache has it, a deleted CRD's objects are deleted (their own
//! finalizers honoured) and then its cleanup finalizer removed, after which its resources are no
//! longer served. Replicas do the cleanup side by side: each delete is idempotent and the
//! finalizer's removal is a compare-and-swap on the CRD's revision.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use keel_api::{ApiError, Metadata, Object, Reason};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::registry::crd::{self, CLEANUP_FINALIZER, Crd};
use crate::registry::deletion::DeleteOptions;
use crate::registry::patch::PatchType;
use crate::registry::strategy::Subresource;
use crate::registry::{ListOptions, Registry, Write};

/// The pause between two cleanup steps of one deleted CRD (each lists its objects from etcd).
const CLEANUP_PAUSE: Duration = Duration::from_secs(1);
/// How long one cleanup step (a list and its deletes) may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves the CRDs' resources and cleans up deleted ones ([`CrdServing::run`]).
pub struct CrdServing {
    pub(super) registry: Arc<Registry>,
}

impl CrdServing {
    /// Follows the CRDs until the process ends.
    pub async fn run(self: Arc<Self>) {
        let Ok(info) = self.registry.lookup(Some(&crd::crd_gvr())) else {
            return;
        };
        let mut changes = self.registry.store().cache_changes(&info);
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
            // Marked seen before the cache is read: a change after the read wakes the loop.
            changes.borrow_and_update();
            while let Ok(name) = done_rx.try_recv() {
                cleaning.remove(&name);
            }
            'step: {
                let changed = self.registry.store().cache_changed(&info);
                let moved = changed.is_some() && changed != served;
                if !moved && !deleting {
                    break 'step;
                }
                let Some((entries, revision)) = self.registry.store().cached_entries(&info) else {
                    break 'step;
                };
                let crds: Vec<Crd<'_>> = entries.iter().map(|e| Crd::Cached(e)).collect();
                // Serving again what is served already parses and compiles nothing.
                let to_clean = self.registry.serve_crds(&crds, revision, "the watch");
                served = changed;
                deleting = !to_clean.is_empty();
                for c in &to_clean {
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
            // Woken by a change of the CRDs, or by a cleanup step's end (the next one starts).
            tokio::select! {
                _ = changes.changed() => {}
                Some(name) = done_rx.recv() => {
                    cleaning.remove(&name);
                }
            }
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
        // A CRD of a built-in group and resource (stored before such CRDs were refused) was
        // never served: its objects are the built-in ones, which its deletion must not take.
        let gvr = &custom.info.gvr;
        if crate::registry::kinds::builtin_group(&gvr.group, Some(&gvr.resource)) {
            return self.remove_cleanup_finalizer(crd, deadline).await;
        }
        let Ok(info) = self.registry.lookup(Some(&custom.info.gvr)) else {
            // Not served here yet (the next sync serves it).
            return Ok(());
        };
        let list = self
            .registry
            .list(&info, ListOptions::default(), deadline)
            .await?;
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
                .registry
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
        let Ok(info) = self.registry.lookup(Some(&crd::crd_gvr())) else {
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
            .registry
            .patch(
                &info,
                "",
                crd.name(),
                Subresource::Main,
                PatchType::Merge,
                &serde_json::to_vec(&body).unwrap_or_default(),
                Write::server(),
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
