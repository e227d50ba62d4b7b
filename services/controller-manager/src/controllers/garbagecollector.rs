//! The garbage collector: removes objects whose owners are gone, and carries out the
//! `foregroundDeletion` and `orphan` finalizers the API server records on a Delete, as
//! Kubernetes' garbage collector does.
//!
//! - **Background**: a dependent (an object with `ownerReferences`) whose every owner is gone
//!   is deleted, in the background, with its uid as precondition; one with an owner still
//!   there only loses its references to the dead ones. "Gone" is the API server's answer to a
//!   GET (an object of that name with another uid is a different object: the owner is gone
//!   too), never the cache's, which may lag; a uid once found gone is remembered, since uids
//!   are never reused. Before it writes, the collector reads the dependent itself again and
//!   judges it as it is now.
//! - **Foreground**: an owner being deleted with `foregroundDeletion` has its dependents
//!   deleted with Foreground propagation themselves (so grandchildren go first); once no
//!   dependent with `blockOwnerDeletion: true` is left, the finalizer is removed, and with it
//!   the owner.
//! - **Orphan**: an owner being deleted with `orphan` has every dependent's reference to it
//!   removed, then the finalizer.
//!
//! Every built-in resource is watched through the shared informers twice when there are
//! several shards: as dependents (each object in the shard of its controlling owner, indexed by
//! the uids its `ownerReferences` name, so an owner finds its dependents of every kind) and as
//! owners (each in the shard of its own name). An owner and the dependents it controls are so
//! in one shard, held by one replica. A reference that is not the controller's may cross
//! shards: such a dependent is still judged on its owners' live state whenever it changes, but
//! an owner's deletion reaches it only if it shares the owner's shard (DESIGN.md).
//! One queue carries two kinds of work, keyed by object: an object as a *dependent* (are its
//! owners there?) and as an *owner* (the finalizers of its deletion). Each step is idempotent
//! and its writes carry the uid of the object they change; an error retries the item with the
//! queue's per-item backoff.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use keel_api::Metadata;
use keel_client::{
    ApiError, Client, DeleteParams, GroupVersionResource, PatchType, PropagationPolicy, Reason,
};
use keel_runtime::{Action, Controller, HandlerFns, ObjectKey, ShardBy, Store, WorkQueue};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::time::Instant;
use tracing::{debug, info};

use super::{Context, SetupError, Start};

/// The finalizer of a Foreground delete: dependents go first.
pub const FOREGROUND: &str = "foregroundDeletion";
/// The finalizer of an Orphan delete: dependents stay, without their reference to the owner.
pub const ORPHAN: &str = "orphan";
/// The index of each cache by the uids its objects' `ownerReferences` name.
pub const BY_OWNER_UID: &str = "owner-uid";
/// Owner uids remembered as gone before the memory is emptied (bounded memory).
const ABSENT_OWNERS: usize = 10_000;
/// An owner reference of a kind the API server does not know makes the collector ask
/// discovery again, at most this often.
const REDISCOVERY: Duration = Duration::from_secs(30);

/// The uids an object's `ownerReferences` name, for [`BY_OWNER_UID`].
pub fn owner_uids(obj: &Value) -> Vec<String> {
    obj.owner_references()
        .iter()
        .filter_map(|r| r["uid"].as_str())
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether the collector has work on this object as an owner: it is being deleted with one
/// of the propagation finalizers.
fn deleting_with_propagation(obj: &Value) -> bool {
    obj.is_deleting() && (obj.has_finalizer(FOREGROUND) || obj.has_finalizer(ORPHAN))
}

/// The group of an `apiVersion`: `apps` of `apps/v1`, "" of `v1`.
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

/// A strategic merge patch removing `dependent`'s references to these owner uids; the
/// dependent's uid makes a replaced object a `Conflict` instead of a target.
pub fn remove_refs_patch(dependent: &Value, owner_uids: &[&str]) -> Value {
    let refs: Vec<Value> = owner_uids
        .iter()
        .map(|u| json!({"$patch": "delete", "uid": u}))
        .collect();
    json!({"metadata": {"ownerReferences": refs, "uid": dependent.uid()}})
}

/// A strategic merge patch removing one finalizer of `obj`, pinned to its uid.
pub fn remove_finalizer_patch(obj: &Value, finalizer: &str) -> Value {
    json!({"metadata": {
        "$deleteFromPrimitiveList/finalizers": [finalizer],
        "uid": obj.uid(),
    }})
}

/// What the API server says of one owner a dependent names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// There, and not waiting for its dependents.
    Alive,
    /// Not there (or another object under its name).
    Gone,
    /// Being deleted in the foreground: waiting for its dependents to go.
    WaitingForDependents,
}

/// What to do with a dependent, given the state of each of its owners (by uid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every owner is alive.
    Keep,
    /// Some owner is alive: drop the references to these (gone, or waiting for dependents).
    RemoveRefs(Vec<String>),
    /// No owner is alive: delete the dependent with this propagation.
    Delete(PropagationPolicy),
}

/// Kubernetes' `attemptToDeleteItem` decision. A dependent with a living owner stays (and
/// loses its references to the others, so a foreground owner need not wait for it); one whose
/// owners are gone or waiting for it is deleted, in the foreground when an owner waits (so its
/// own dependents go first), else as its own finalizers ask.
pub fn verdict(dependent: &Value, owners: &[(String, OwnerState)]) -> Verdict {
    let alive = owners.iter().any(|(_, s)| *s == OwnerState::Alive);
    let not_alive: Vec<String> = owners
        .iter()
        .filter(|(_, s)| *s != OwnerState::Alive)
        .map(|(u, _)| u.clone())
        .collect();
    if owners.is_empty() || not_alive.is_empty() {
        return Verdict::Keep;
    }
    if alive {
        return Verdict::RemoveRefs(not_alive);
    }
    let waiting = owners
        .iter()
        .any(|(_, s)| *s == OwnerState::WaitingForDependents);
    let policy = if waiting || dependent.has_finalizer(FOREGROUND) {
        PropagationPolicy::Foreground
    } else if dependent.has_finalizer(ORPHAN) {
        PropagationPolicy::Orphan
    } else {
        PropagationPolicy::Background
    };
    Verdict::Delete(policy)
}

/// Whether `dependent`'s reference to the owner with this uid blocks the owner's foreground
/// deletion.
fn blocks(dependent: &Value, owner_uid: &str) -> bool {
    dependent.owner_references().iter().any(|r| {
        r["uid"].as_str() == Some(owner_uid) && r["blockOwnerDeletion"].as_bool() == Some(true)
    })
}

/// Which side of an object an item is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Role {
    /// Are its owners still there?
    Dependent,
    /// The propagation finalizers of its deletion.
    Owner,
}

/// A unit of work: one object, in one role.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Item {
    role: Role,
    resource: GroupVersionResource,
    key: ObjectKey,
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let role = match self.role {
            Role::Dependent => "dependent",
            Role::Owner => "owner",
        };
        write!(f, "{role} {} {}", self.resource, self.key)
    }
}

/// A resource as an owner reference names it: by group and kind.
#[derive(Debug, Clone)]
struct KindInfo {
    gvr: GroupVersionResource,
    namespaced: bool,
}

/// Owner kinds → resources: the built-in ones from the start, others from discovery when an
/// owner reference names one.
struct Kinds {
    known: RwLock<HashMap<(String, String), KindInfo>>,
    /// When discovery was last asked, so an unknown kind does not ask on every reconcile.
    discovered: Mutex<Option<Instant>>,
}

impl Kinds {
    fn builtin() -> Kinds {
        let known = keel_api::builtin_resources()
            .into_iter()
            .map(|r| {
                (
                    (r.gvr.group.clone(), r.kind.clone()),
                    KindInfo {
                        gvr: r.gvr,
                        namespaced: r.namespaced,
                    },
                )
            })
            .collect();
        Kinds {
            known: RwLock::new(known),
            discovered: Mutex::new(None),
        }
    }

    /// From what is known already (handlers must not wait on the network).
    fn lookup(&self, api_version: &str, kind: &str) -> Option<KindInfo> {
        let known = self.known.read().unwrap_or_else(PoisonError::into_inner);
        known
            .get(&(group_of(api_version).to_string(), kind.to_string()))
            .cloned()
    }

    /// As [`Kinds::lookup`], asking discovery again for a kind not known yet.
    async fn resolve(
        &self,
        client: &Client,
        api_version: &str,
        kind: &str,
    ) -> Result<Option<KindInfo>, ApiError> {
        if let Some(k) = self.lookup(api_version, kind) {
            return Ok(Some(k));
        }
        {
            let mut last = self
                .discovered
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if last.is_some_and(|t| t.elapsed() < REDISCOVERY) {
                return Ok(None);
            }
            *last = Some(Instant::now());
        }
        let resources = client.discovery().await?;
        {
            let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
            for r in resources {
                known.insert(
                    (r.group.clone(), r.kind.clone()),
                    KindInfo {
                        gvr: GroupVersionResource::new(&r.group, &r.version, &r.resource),
                        namespaced: r.namespaced,
                    },
                );
            }
        }
        Ok(self.lookup(api_version, kind))
    }
}

struct GarbageCollector {
    client: Client,
    queue: WorkQueue<Item>,
    /// Every watched resource's cache of objects as dependents: each in the shard of its
    /// controlling owner, indexed by the owners' uids. Fixed at setup.
    dependents: HashMap<GroupVersionResource, Store>,
    /// Every watched resource's cache of objects as owners: each in the shard of its own name.
    /// The same caches as `dependents` when there is one shard.
    owners: HashMap<GroupVersionResource, Store>,
    kinds: Kinds,
    /// Owner uids the API server said are gone; uids are never reused, so this never lies.
    absent: Mutex<HashSet<String>>,
}

pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    let queue: WorkQueue<Item> = WorkQueue::default_controller_queue();
    let mut informers = Vec::new();
    let (mut dependents, mut owners) = (HashMap::new(), HashMap::new());
    let mut seen = HashSet::new();
    for r in keel_api::builtin_resources() {
        // A resource served at several versions is watched at one.
        if !seen.insert((r.gvr.group.clone(), r.gvr.resource.clone())) {
            continue;
        }
        // Uninitialized objects have owners too.
        let base = crate::objects::including_uninitialized();
        let as_dependents = ctx
            .factory
            .informer_with(&r.gvr, ctx.options(base.clone(), ShardBy::Owner));
        match as_dependents.add_index(BY_OWNER_UID, owner_uids) {
            // Another controller sharing the informer added it: this module is the only
            // definition of the index, so it is the same function.
            Ok(()) | Err(keel_runtime::StoreError::IndexExists(_)) => {}
            Err(e) => return Err(SetupError::failed("garbagecollector", e)),
        }
        let as_owners = ctx
            .factory
            .informer_with(&r.gvr, ctx.options(base, ShardBy::Name));
        dependents.insert(r.gvr.clone(), as_dependents.store());
        owners.insert(r.gvr.clone(), as_owners.store());
        informers.push((r.gvr, as_dependents, as_owners));
    }
    let this = Arc::new(GarbageCollector {
        client: ctx.client.clone(),
        queue: queue.clone(),
        dependents,
        owners,
        kinds: Kinds::builtin(),
        absent: Mutex::new(HashSet::new()),
    });
    let mut read = Vec::new();
    for (gvr, as_dependents, as_owners) in informers {
        as_dependents.add_handler(dependent_handler(this.clone(), gvr.clone()));
        as_owners.add_handler(owner_handler(this.clone(), gvr));
        read.push(as_dependents);
        read.push(as_owners);
    }
    let gate = ctx.gate.reading(&read.iter().collect::<Vec<_>>());
    let controller = Controller::new("garbagecollector", queue)
        .workers(ctx.config.workers)
        .metrics(registry);
    let shards = ctx.shards.clone();
    Ok(super::start(
        gate,
        "garbagecollector",
        controller,
        this,
        // A dependent is looked at in its controlling owner's shard, with that owner (and the
        // dependents of an owner, in the owner's shard).
        move |this, item| match item.role {
            Role::Dependent => this
                .store(item)
                .and_then(|s| s.get(&item.key))
                .map(|d| shards.shard_of_object(&d, ShardBy::Owner)),
            Role::Owner => Some(shards.shard_for(&item.key.namespace, &item.key.name)),
        },
        |this, item| async move { this.reconcile(item).await },
    ))
}

/// The events of one resource's cache of dependents, turned into work:
/// - an object with owners is looked at as a dependent when it appears or its owners change;
/// - a dependent that goes or changes its references wakes its owners that wait for it.
fn dependent_handler(gc: Arc<GarbageCollector>, gvr: GroupVersionResource) -> HandlerFns {
    let (gc1, gc2, gc3) = (gc.clone(), gc.clone(), gc);
    let (r1, r2) = (gvr.clone(), gvr);
    HandlerFns::new()
        .added(move |obj| {
            if !obj.owner_references().is_empty() {
                gc1.enqueue(Role::Dependent, &r1, obj);
            }
        })
        .updated(move |old, new| {
            if old.owner_references() != new.owner_references() {
                gc2.enqueue(Role::Dependent, &r2, new);
                gc2.wake_waiting_owners(old);
                gc2.wake_waiting_owners(new);
            }
        })
        .deleted(move |obj| gc3.wake_waiting_owners(obj))
}

/// The events of one resource's cache of owners, turned into work:
/// - an object being deleted with a propagation finalizer is looked at as an owner;
/// - a deleted object's dependents look at their owners again.
fn owner_handler(gc: Arc<GarbageCollector>, gvr: GroupVersionResource) -> HandlerFns {
    let (gc1, gc2, gc3) = (gc.clone(), gc.clone(), gc);
    let (r1, r2) = (gvr.clone(), gvr);
    HandlerFns::new()
        .added(move |obj| {
            if deleting_with_propagation(obj) {
                gc1.enqueue(Role::Owner, &r1, obj);
            }
        })
        .updated(move |_, new| {
            if deleting_with_propagation(new) {
                gc2.enqueue(Role::Owner, &r2, new);
            }
        })
        .deleted(move |obj| gc3.enqueue_dependents(obj.uid()))
}

impl GarbageCollector {
    /// The cache an item's object is read from: dependents by owner, owners by name.
    fn store(&self, item: &Item) -> Option<&Store> {
        match item.role {
            Role::Dependent => self.dependents.get(&item.resource),
            Role::Owner => self.owners.get(&item.resource),
        }
    }

    fn absent(&self) -> MutexGuard<'_, HashSet<String>> {
        self.absent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn enqueue(&self, role: Role, resource: &GroupVersionResource, obj: &Value) {
        if let Ok(key) = ObjectKey::from_object(obj) {
            self.queue.add(Item {
                role,
                resource: resource.clone(),
                key,
            });
        }
    }

    /// Every cached object whose `ownerReferences` name this uid, with its resource.
    fn dependents(&self, owner_uid: &str) -> Vec<(GroupVersionResource, Arc<Value>)> {
        if owner_uid.is_empty() {
            return Vec::new();
        }
        self.dependents
            .iter()
            .flat_map(|(gvr, store)| {
                store
                    .by_index(BY_OWNER_UID, owner_uid)
                    .into_iter()
                    .map(|d| (gvr.clone(), d))
            })
            .collect()
    }

    fn enqueue_dependents(&self, owner_uid: &str) {
        for (gvr, d) in self.dependents(owner_uid) {
            self.enqueue(Role::Dependent, &gvr, &d);
        }
    }

    /// The cached owner a reference of `dependent` names, with its resource, if that is the
    /// object the reference means (same uid).
    fn cached_owner(
        &self,
        dependent: &Value,
        r: &Value,
    ) -> Option<(GroupVersionResource, Arc<Value>)> {
        let kind = self.kinds.lookup(
            r["apiVersion"].as_str().unwrap_or(""),
            r["kind"].as_str().unwrap_or(""),
        )?;
        let ns = if kind.namespaced {
            dependent.namespace()
        } else {
            ""
        };
        let owner = self
            .owners
            .get(&kind.gvr)?
            .get(&ObjectKey::new(ns, r["name"].as_str().unwrap_or("")))?;
        (owner.uid() == r["uid"].as_str().unwrap_or("")).then_some((kind.gvr, owner))
    }

    /// Owners of `dependent` that are being deleted with a propagation finalizer look again:
    /// a dependent of theirs went or changed.
    fn wake_waiting_owners(&self, dependent: &Value) {
        for r in dependent.owner_references() {
            if let Some((gvr, owner)) = self.cached_owner(dependent, r)
                && deleting_with_propagation(&owner)
            {
                self.enqueue(Role::Owner, &gvr, &owner);
            }
        }
    }

    async fn reconcile(&self, item: Item) -> Result<Action, ApiError> {
        let Some(obj) = self.store(&item).and_then(|s| s.get(&item.key)) else {
            return Ok(Action::await_change());
        };
        match item.role {
            Role::Dependent => self.attempt_to_delete(&item.resource, &obj).await?,
            Role::Owner => self.process_deleting_owner(&item.resource, &obj).await?,
        }
        Ok(Action::await_change())
    }

    /// A dependent: deleted when no owner is alive, relieved of its dead owners' references
    /// when one is.
    async fn attempt_to_delete(
        &self,
        gvr: &GroupVersionResource,
        cached: &Value,
    ) -> Result<(), ApiError> {
        if cached.is_deleting() || self.judge(cached).await? == Verdict::Keep {
            // Owners alive; or its deletion is under way, and its own finalizers are the
            // owner side's work.
            return Ok(());
        }
        // About to write: judge the dependent as it is now, not as the cache last saw it (its
        // references may have changed, e.g. orphaned a moment ago).
        let (ns, name) = (cached.namespace(), cached.name());
        let obj = match self.client.get(gvr, ns, name).await {
            Ok(o) if o.uid() == cached.uid() => o,
            // Replaced: the new object has its own add event.
            Ok(_) => return Ok(()),
            // Gone: nothing to collect.
            Err(e) if e.reason == Reason::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        if obj.is_deleting() {
            return Ok(());
        }
        match self.judge(&obj).await? {
            Verdict::Keep => {}
            Verdict::RemoveRefs(uids) => {
                let uids: Vec<&str> = uids.iter().map(String::as_str).collect();
                debug!(resource = %gvr, namespace = ns, name, owners = ?uids, "removing references to owners that are gone");
                self.patch(gvr, &obj, remove_refs_patch(&obj, &uids))
                    .await?;
            }
            Verdict::Delete(propagation) => {
                info!(resource = %gvr, namespace = ns, name, ?propagation, "deleting: its owners are gone");
                let params = DeleteParams {
                    uid: obj.uid().to_string(),
                    propagation,
                    ..Default::default()
                };
                match self.client.delete(gvr, ns, name, &params).await {
                    // Gone already, or replaced by another object: nothing of this one is left.
                    Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => {}
                    Err(e) => return Err(e),
                    Ok(_) => {}
                }
            }
        }
        Ok(())
    }

    /// The verdict on a dependent from the state of each of its owners.
    async fn judge(&self, obj: &Value) -> Result<Verdict, ApiError> {
        let mut owners = Vec::new();
        for r in obj.owner_references() {
            let uid = r["uid"].as_str().unwrap_or("").to_string();
            owners.push((uid, self.owner_state(obj, r).await?));
        }
        Ok(verdict(obj, &owners))
    }

    /// Whether the owner a reference names is there, asking the API server unless the cache
    /// shows it (a cache that shows an owner which is gone only delays a deletion; one that
    /// lacks an owner which exists must not cause one).
    async fn owner_state(&self, dependent: &Value, r: &Value) -> Result<OwnerState, ApiError> {
        let uid = r["uid"].as_str().unwrap_or("");
        let name = r["name"].as_str().unwrap_or("");
        if uid.is_empty() || name.is_empty() {
            // Not a reference anyone can check; never a reason to delete.
            return Ok(OwnerState::Alive);
        }
        if self.absent().contains(uid) {
            return Ok(OwnerState::Gone);
        }
        let (api_version, kind) = (
            r["apiVersion"].as_str().unwrap_or(""),
            r["kind"].as_str().unwrap_or(""),
        );
        let Some(k) = self.kinds.resolve(&self.client, api_version, kind).await? else {
            info!(
                dependent = dependent.name(),
                api_version, kind, "owner of a kind the API server does not serve: left alone"
            );
            return Ok(OwnerState::Alive);
        };
        let ns = if k.namespaced {
            let ns = dependent.namespace();
            if ns.is_empty() {
                // A cluster-scoped object cannot be owned by a namespaced one.
                return Ok(OwnerState::Alive);
            }
            ns
        } else {
            ""
        };
        let state_of = |owner: &Value| {
            if owner.is_deleting() && owner.has_finalizer(FOREGROUND) {
                OwnerState::WaitingForDependents
            } else {
                OwnerState::Alive
            }
        };
        if let Some(owner) = self
            .owners
            .get(&k.gvr)
            .and_then(|s| s.get(&ObjectKey::new(ns, name)))
            && owner.uid() == uid
        {
            return Ok(state_of(&owner));
        }
        match self.client.get(&k.gvr, ns, name).await {
            Ok(owner) if owner.uid() == uid => Ok(state_of(&owner)),
            Ok(_) => Ok(self.gone(uid)),
            // Uids are never reused: a missing owner is gone for good.
            Err(e) if e.reason == Reason::NotFound => Ok(self.gone(uid)),
            Err(e) => Err(e),
        }
    }

    fn gone(&self, uid: &str) -> OwnerState {
        let mut absent = self.absent();
        if absent.len() >= ABSENT_OWNERS {
            absent.clear();
        }
        absent.insert(uid.to_string());
        OwnerState::Gone
    }

    /// An owner being deleted: orphans its dependents, or deletes them and waits for those
    /// that block it, then removes the finalizer.
    async fn process_deleting_owner(
        &self,
        gvr: &GroupVersionResource,
        owner: &Value,
    ) -> Result<(), ApiError> {
        if !owner.is_deleting() {
            return Ok(());
        }
        let owner_uid = owner.uid();
        let dependents = self.dependents(owner_uid);
        if owner.has_finalizer(ORPHAN) {
            for (dgvr, d) in &dependents {
                self.patch(dgvr, d, remove_refs_patch(d, &[owner_uid]))
                    .await?;
            }
            debug!(resource = %gvr, owner = owner.name(), n = dependents.len(), "dependents orphaned");
            // A foreground finalizer too, if any, is for the next look (the update wakes it).
            return self
                .patch(gvr, owner, remove_finalizer_patch(owner, ORPHAN))
                .await;
        }
        if owner.has_finalizer(FOREGROUND) {
            let mut blocking = 0;
            for (dgvr, d) in &dependents {
                if !d.is_deleting() {
                    self.enqueue(Role::Dependent, dgvr, d);
                }
                if blocks(d, owner_uid) {
                    blocking += 1;
                }
            }
            if blocking > 0 {
                debug!(resource = %gvr, owner = owner.name(), blocking, "waiting for dependents");
                return Ok(());
            }
            return self
                .patch(gvr, owner, remove_finalizer_patch(owner, FOREGROUND))
                .await;
        }
        Ok(())
    }

    /// A strategic merge patch of `obj` (pinned to its uid by the patch itself); an object gone
    /// or replaced meanwhile needs nothing more.
    async fn patch(
        &self,
        gvr: &GroupVersionResource,
        obj: &Value,
        patch: Value,
    ) -> Result<(), ApiError> {
        match self
            .client
            .patch(
                gvr,
                obj.namespace(),
                obj.name(),
                PatchType::Strategic,
                &patch,
            )
            .await
        {
            Ok(_) => Ok(()),
            // Gone or replaced meanwhile, as the doc comment says.
            Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(refs: Value, finalizers: Value) -> Value {
        json!({"metadata": {"name": "d", "uid": "d-uid", "ownerReferences": refs, "finalizers": finalizers}})
    }

    fn states(s: &[(&str, OwnerState)]) -> Vec<(String, OwnerState)> {
        s.iter().map(|(u, st)| (u.to_string(), *st)).collect()
    }

    #[test]
    fn owner_uids_index_every_reference() {
        let d = owned(
            json!([{"uid": "a", "controller": true}, {"uid": "b"}, {"name": "no-uid"}]),
            json!([]),
        );
        assert_eq!(owner_uids(&d), ["a", "b"]);
        assert!(owner_uids(&json!({"metadata": {}})).is_empty());
    }

    #[test]
    fn a_dependent_goes_only_when_no_owner_is_alive() {
        use OwnerState::*;
        let d = owned(json!([]), json!([]));
        assert_eq!(verdict(&d, &[]), Verdict::Keep);
        assert_eq!(verdict(&d, &states(&[("a", Alive)])), Verdict::Keep);
        assert_eq!(
            verdict(&d, &states(&[("a", Gone), ("b", Gone)])),
            Verdict::Delete(PropagationPolicy::Background)
        );
        // Some owner alive: only the references to the others go.
        assert_eq!(
            verdict(
                &d,
                &states(&[("a", Gone), ("b", Alive), ("c", WaitingForDependents)])
            ),
            Verdict::RemoveRefs(vec!["a".into(), "c".into()])
        );
        // An owner waiting for its dependents: deleted in the foreground, so its own
        // dependents go first.
        assert_eq!(
            verdict(&d, &states(&[("a", WaitingForDependents), ("b", Gone)])),
            Verdict::Delete(PropagationPolicy::Foreground)
        );
        // Otherwise the dependent's own finalizers choose.
        let orphaning = owned(json!([]), json!(["orphan"]));
        assert_eq!(
            verdict(&orphaning, &states(&[("a", Gone)])),
            Verdict::Delete(PropagationPolicy::Orphan)
        );
    }

    #[test]
    fn patches_are_pinned_to_the_uid_of_what_they_change() {
        let d = owned(json!([{"uid": "a"}]), json!([]));
        assert_eq!(
            remove_refs_patch(&d, &["a", "b"]),
            json!({"metadata": {"ownerReferences": [
                {"$patch": "delete", "uid": "a"}, {"$patch": "delete", "uid": "b"}],
                "uid": "d-uid"}})
        );
        assert_eq!(
            remove_finalizer_patch(&d, FOREGROUND),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["foregroundDeletion"], "uid": "d-uid"}})
        );
        // The patches do what they say under keel's strategic merge.
        let schema = keel_patch::BuiltinSchema::for_kind("v1", "ConfigMap").unwrap();
        let live = json!({"metadata": {"uid": "d-uid", "finalizers": ["x/y", "foregroundDeletion"],
            "ownerReferences": [{"uid": "a", "name": "o"}, {"uid": "c", "name": "p"}]}});
        let out =
            keel_patch::apply_strategic_merge_patch(&live, &remove_refs_patch(&d, &["a"]), &schema)
                .unwrap();
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([{"uid": "c", "name": "p"}])
        );
        let out = keel_patch::apply_strategic_merge_patch(
            &live,
            &remove_finalizer_patch(&d, FOREGROUND),
            &schema,
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["x/y"]));
    }

    #[test]
    fn blocking_needs_block_owner_deletion_on_the_reference_to_that_owner() {
        let d = owned(
            json!([{"uid": "a", "blockOwnerDeletion": true}, {"uid": "b"}]),
            json!([]),
        );
        assert!(blocks(&d, "a"));
        assert!(!blocks(&d, "b"));
        assert!(!blocks(&d, "c"));
    }

    #[test]
    fn owner_kinds_resolve_by_group_and_kind() {
        let k = Kinds::builtin();
        let rs = k.lookup("apps/v1", "ReplicaSet").unwrap();
        assert_eq!(
            rs.gvr,
            GroupVersionResource::new("apps", "v1", "replicasets")
        );
        assert!(rs.namespaced);
        assert!(!k.lookup("v1", "Namespace").unwrap().namespaced);
        assert!(k.lookup("v1", "ReplicaSet").is_none());
        assert!(k.lookup("samplecrd.k8s.io/v1", "Network").is_none());
        assert_eq!(group_of("coordination.k8s.io/v1"), "coordination.k8s.io");
        assert_eq!(group_of("v1"), "");
    }

    #[test]
    fn items_name_their_role_resource_and_object() {
        let item = Item {
            role: Role::Owner,
            resource: GroupVersionResource::new("apps", "v1", "replicasets"),
            key: ObjectKey::new("ns", "web"),
        };
        assert_eq!(item.to_string(), "owner replicasets.apps ns/web");
    }
}
