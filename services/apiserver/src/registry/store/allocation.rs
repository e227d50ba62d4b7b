//! The verbs of objects that hold values of the shared ranges (Services' cluster IPs and node
//! ports; `Kind::allocations`), as Kubernetes' service REST wraps its generic store: a create
//! allocates before its write and releases if the write fails; an update allocates what the
//! new state asks for that the old one does not hold, commits on exactly the state it was
//! computed from, then releases what is no longer held; a removal releases everything. Every
//! other kind's writes go straight to storage.
//!
//! A value is released only when no stored object can hold it: after a write known not to
//! have landed, or after one that replaced or removed the holder. When that cannot be known (a
//! write that timed out and whose object cannot be read back), the value stays marked: a leak,
//! which the repair controller frees, never a value handed out twice.

use std::sync::Arc;
use std::time::Duration;

use keel_api::{ApiError, Metadata, Object, Reason, ResourceInfo};
use tokio::time::Instant;

use super::{Registry, store_new};
use crate::registry::allocator::{Allocations, Allocators, Claim, Given};
use crate::registry::deletion::has_finalizers;
use crate::registry::errors::kind_target;
use crate::registry::kinds::Kind;
use crate::storage::{
    Change, Committed, Draft, Mutation, ObjectKey, ReadFrom, Store, UpdateOptions, target,
};

/// How long a release (or the read that decides it) may take past a request's deadline: it
/// follows a write whose outcome the client is waiting for.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

impl Registry {
    /// Creates an object that holds shared values: allocates them, writes the object with
    /// them, and releases them if the write fails. Run as a task of its own, so that a client
    /// that goes away cannot stop it between the allocation and the release.
    pub(super) async fn create_allocating(
        &self,
        info: &Arc<ResourceInfo>,
        kind: Arc<dyn Kind>,
        obj: Object,
        generate: Option<String>,
        dry_run: bool,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let store = self.store.clone();
        let allocators = self.allocators.clone();
        let info = info.clone();
        let task = async move {
            let Some(alloc) = kind.allocations() else {
                return Err(ApiError::internal("the kind holds no shared values"));
            };
            let mut obj = obj;
            let claims = alloc.claims(&obj);
            let needed = to_allocate(&claims, &[]);
            let t = kind_target(&info, obj.name());
            let values = allocators.allocate(&t, &needed, dry_run, deadline).await?;
            let given = assign(&allocators, alloc, &mut obj, &needed, &values);
            let created = store_new(
                &store,
                &info,
                &mut obj,
                generate.as_deref(),
                dry_run,
                deadline,
            )
            .await;
            if let Err(e) = &created
                && !dry_run
            {
                release_unless_stored(&store, &allocators, &info, &obj, &given, e).await;
            }
            created
        };
        if dry_run {
            return task.await;
        }
        tokio::spawn(task)
            .await
            .unwrap_or_else(|e| Err(ApiError::internal(format!("the create failed: {e}"))))
    }

    /// The object at `key` as etcd has it now, and its revision: the state a change is computed
    /// from and committed on. `Conflict` when the client's precondition names another.
    pub(super) async fn read_current(
        &self,
        key: &ObjectKey,
        opts: &UpdateOptions,
        deadline: Instant,
    ) -> Result<(Draft, i64), ApiError> {
        let current = Draft::from_object(self.store.get(key, ReadFrom::Etcd, deadline).await?);
        let revision = current
            .object
            .resource_version()
            .parse::<i64>()
            .map_err(|_| ApiError::internal("a stored object has no revision"))?;
        if opts.expected_revision.is_some_and(|p| p != revision) {
            return Err(ApiError::stale(target(&key.info, &key.name)));
        }
        Ok((current, revision))
    }

    /// Commits `mutation` of the object at `key` (an update, patch or delete), allocating
    /// and releasing what the kind's objects hold (see the module's doc); other kinds' go to
    /// storage's guaranteed update as they are.
    pub(in crate::registry) async fn commit(
        &self,
        key: &ObjectKey,
        opts: UpdateOptions,
        mutation: Mutation,
        deadline: Instant,
    ) -> Result<Committed, ApiError> {
        let kind = self.resources.kind(&key.info.gvr);
        let Some(alloc) = kind.allocations() else {
            return self.store.update(key, opts, mutation, deadline).await;
        };
        let info = &key.info;
        let t = kind_target(info, &key.name);
        let mutation: Arc<Mutation> = Arc::new(mutation);
        loop {
            // The state the change is computed from, and committed on: the values to allocate
            // are the ones this state lacks.
            let (current, revision) = self.read_current(key, &opts, deadline).await?;
            let (held_after, removed) = match mutation(&current)? {
                Change::Put(d)
                    if d.object.deletion_timestamp().is_some()
                        && !has_finalizers(&*kind, &d.object) =>
                {
                    (Vec::new(), true)
                }
                Change::Put(d) => (alloc.claims(&d.object), false),
                Change::Remove(_) => (Vec::new(), true),
            };
            let held_before = alloc.claims(&current.object);
            let needed = to_allocate(&held_after, &held_before);
            let values = if needed.is_empty() {
                Vec::new()
            } else {
                self.allocators
                    .allocate(&t, &needed, opts.dry_run, deadline)
                    .await?
            };
            let fills: Vec<(Claim, String)> = needed
                .iter()
                .zip(&values)
                .filter(|(c, _)| c.value.is_none())
                .map(|(c, v)| ((*c).clone(), self.allocators.pool(c.pool).range().show(*v)))
                .collect();
            let given: Vec<Given> = needed
                .iter()
                .zip(&values)
                .map(|(c, v)| (c.pool, *v))
                .collect();
            let filled = {
                let (inner, kind) = (mutation.clone(), kind.clone());
                Box::new(move |cur: &Draft| {
                    let mut change = inner(cur)?;
                    if let (Change::Put(d), Some(alloc)) = (&mut change, kind.allocations()) {
                        for (claim, value) in &fills {
                            alloc.assign(&mut d.object, claim, value);
                        }
                    }
                    Ok(change)
                }) as Mutation
            };
            let pinned = UpdateOptions {
                expected_revision: Some(revision),
                ..opts
            };
            let result = self.store.update(key, pinned, filled, deadline).await;
            if opts.dry_run {
                return result;
            }
            let release_by = deadline.max(Instant::now() + RELEASE_TIMEOUT);
            match result {
                Ok(committed) => {
                    let kept = if committed.removed || removed {
                        Vec::new()
                    } else {
                        alloc.claims(&committed.object)
                    };
                    let released = self.given(&released(&held_before, &kept));
                    self.allocators.release(&released, release_by).await;
                    return Ok(committed);
                }
                // The object moved since it was read: from its new state, unless the client
                // pinned the one it wrote against.
                Err(e) if e.reason == Reason::Conflict && opts.expected_revision.is_none() => {
                    self.allocators.release(&given, release_by).await;
                    if Instant::now() >= deadline {
                        return Err(ApiError::timeout(
                            t,
                            "the object kept changing until the request's deadline",
                        ));
                    }
                }
                Err(e) => {
                    if !given.is_empty() {
                        self.release_unless_held(key, alloc, &given, &e).await;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// The values of `claims` (ones outside their range, never allocated, left out).
    fn given(&self, claims: &[&Claim]) -> Vec<Given> {
        claims
            .iter()
            .filter_map(|c| {
                let range = self.allocators.pool(c.pool).range();
                let v = range.parse_value(c.value.as_deref()?)?;
                range.offset_of(v).map(|_| (c.pool, v))
            })
            .collect()
    }

    /// After a failed update that was given `given`: releases them unless the object as
    /// stored now holds them (a write that timed out may have landed).
    async fn release_unless_held(
        &self,
        key: &ObjectKey,
        alloc: &dyn Allocations,
        given: &[Given],
        e: &ApiError,
    ) {
        let release_by = Instant::now() + RELEASE_TIMEOUT;
        if !definitive(e) {
            match self.store.get(key, ReadFrom::Etcd, release_by).await {
                Ok(stored) => {
                    let holds = self.given(&alloc.claims(&stored).iter().collect::<Vec<_>>());
                    if given.iter().any(|g| holds.contains(g)) {
                        return;
                    }
                }
                Err(read) if read.reason == Reason::NotFound => {}
                Err(read) => {
                    tracing::warn!(key = %key.key, error = %read, "cannot tell whether a failed write landed; its allocations stay for the repair controller");
                    return;
                }
            }
        }
        self.allocators.release(given, release_by).await;
    }
}

/// The claims of `claims` to allocate, given what the object holds already (`held`): each
/// asking for any value, and each asking for one that neither `held` nor an earlier claim
/// has (a node port shared by a TCP and a UDP port is taken once).
fn to_allocate<'a>(claims: &'a [Claim], held: &[Claim]) -> Vec<&'a Claim> {
    let mut covered: Vec<_> = held
        .iter()
        .filter_map(|c| Some((c.pool, c.value.as_deref()?)))
        .collect();
    let mut out = Vec::new();
    for c in claims {
        match c.value.as_deref() {
            None => out.push(c),
            Some(v) if covered.contains(&(c.pool, v)) => {}
            Some(v) => {
                covered.push((c.pool, v));
                out.push(c);
            }
        }
    }
    out
}

/// The claims of `before` with a value that `after` no longer has.
fn released<'a>(before: &'a [Claim], after: &[Claim]) -> Vec<&'a Claim> {
    let mut out: Vec<&Claim> = Vec::new();
    for c in before {
        let Some(v) = c.value.as_deref() else {
            continue;
        };
        let kept = after
            .iter()
            .any(|a| a.pool == c.pool && a.value.as_deref() == Some(v));
        if !kept && !out.iter().any(|o| o.pool == c.pool && o.value == c.value) {
            out.push(c);
        }
    }
    out
}

/// Writes the values allocated for `needed` into `obj` (those asked for by number are there
/// already), and returns every value given.
fn assign(
    allocators: &Allocators,
    alloc: &dyn Allocations,
    obj: &mut Object,
    needed: &[&Claim],
    values: &[u32],
) -> Vec<Given> {
    for (claim, v) in needed.iter().zip(values) {
        if claim.value.is_none() {
            let shown = allocators.pool(claim.pool).range().show(*v);
            alloc.assign(obj, claim, &shown);
        }
    }
    needed
        .iter()
        .zip(values)
        .map(|(c, v)| (c.pool, *v))
        .collect()
}

/// Whether a failed write is known not to have landed: anything but a timeout, an unavailable
/// store or an internal error, whose write may have reached etcd.
fn definitive(e: &ApiError) -> bool {
    !matches!(
        e.reason,
        Reason::Timeout | Reason::ServiceUnavailable | Reason::InternalError
    )
}

/// After a create of `obj` that failed with `e`: releases `given` unless the object was stored
/// after all (the same uid at its key).
async fn release_unless_stored(
    store: &Store,
    allocators: &Allocators,
    info: &Arc<ResourceInfo>,
    obj: &Object,
    given: &[Given],
    e: &ApiError,
) {
    let release_by = Instant::now() + RELEASE_TIMEOUT;
    if !definitive(e) {
        let key = store.key(info, obj.namespace(), obj.name());
        match store.get(&key, ReadFrom::Etcd, release_by).await {
            Ok(stored) if stored.uid() == obj.uid() => return,
            Ok(_) => {}
            Err(read) if read.reason == Reason::NotFound => {}
            Err(read) => {
                tracing::warn!(key = %key.key, error = %read, "cannot tell whether a failed create landed; its allocations stay for the repair controller");
                return;
            }
        }
    }
    allocators.release(given, release_by).await;
}

#[cfg(test)]
mod tests;
