//! The writes of existing objects that admission webhooks apply to. A webhook is called over
//! the network, so it cannot run inside a compare-and-swap's retry as a registry mutation does;
//! the write is made as Kubernetes' `GuaranteedUpdate` makes it with admission inside: read
//! the object, compute the change, send it through the mutating webhooks (the kind's rules
//! applied again to what they changed) and the validating ones, then commit on exactly the
//! state it was computed from. A writer that got in between makes it start over (a client's
//! precondition makes it a `Conflict`, as any). Such writes are never coalesced.

use std::sync::Arc;

use keel_api::{ApiError, Metadata, Object, Reason, ResourceInfo};
use tokio::time::Instant;

use super::{Registry, Write};
use crate::registry::admission;
use crate::registry::strategy::Subresource;
use crate::registry::webhooks::{Attributes, Operation, Requester, Snapshot};
use crate::storage::{Change, Committed, Draft, Mutation, ObjectKey, UpdateOptions, target};

/// How many times a write through webhooks starts over after losing a race, at most.
const ATTEMPTS: usize = 32;

impl Registry {
    /// An update (or patch) of `sub` by `w`, through the webhooks that apply to it.
    pub(super) async fn commit_update(
        &self,
        key: &ObjectKey,
        opts: UpdateOptions,
        mutation: Mutation,
        sub: Subresource,
        w: Write<'_>,
        deadline: Instant,
    ) -> Result<Committed, ApiError> {
        self.commit_admitted(
            key,
            opts,
            mutation,
            sub,
            Operation::Update,
            w.requester,
            w.manager,
            deadline,
        )
        .await
    }

    /// Commits `mutation` of the object at `key` (`op`: an update of its `sub`, or a delete)
    /// through the webhooks that apply to it; straight to storage when none does.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn commit_admitted(
        &self,
        key: &ObjectKey,
        opts: UpdateOptions,
        mutation: Mutation,
        sub: Subresource,
        op: Operation,
        requester: Requester<'_>,
        manager: &str,
        deadline: Instant,
    ) -> Result<Committed, ApiError> {
        let snapshot = self.webhook_snapshot(deadline).await?;
        // A conversion webhook's objects are changed at the request's version; a delete
        // needs no conversion unless an admission webhook is to see the object.
        let converts = key.info.converted_by_server && op == Operation::Update;
        if !converts && !snapshot.may_apply(op, &key.info, sub.name()) {
            return self.commit(key, opts, mutation, deadline).await;
        }
        let a = Attributes {
            operation: op,
            info: &key.info,
            subresource: sub.name(),
            namespace: &key.namespace,
            name: &key.name,
            dry_run: opts.dry_run,
            requester,
            manager,
        };
        self.commit_through_webhooks(key, opts, mutation, sub, &a, &snapshot, deadline)
            .await
    }

    /// An eviction of Pod `namespace/name`, `eviction` (a `policy/v1` Eviction), through the
    /// webhooks of `pods/eviction` creates, before the Pod is deleted (as Kubernetes, the
    /// Pod's own delete then goes through no webhook).
    pub async fn admit_eviction(
        &self,
        info: &Arc<ResourceInfo>,
        eviction: Object,
        requester: Requester<'_>,
        dry_run: bool,
        deadline: Instant,
    ) -> Result<(), ApiError> {
        let snapshot = self.webhook_snapshot(deadline).await?;
        if !snapshot.may_apply(Operation::Create, info, "eviction") {
            return Ok(());
        }
        let (namespace, name) = (
            eviction.namespace().to_string(),
            eviction.name().to_string(),
        );
        let a = Attributes {
            operation: Operation::Create,
            info,
            subresource: "eviction",
            namespace: &namespace,
            name: &name,
            dry_run,
            requester,
            manager: "",
        };
        let eviction = self
            .admit_by_webhooks(&snapshot, &a, eviction, None, deadline)
            .await?;
        self.validate_by_webhooks(&snapshot, &a, Some(&eviction), None, false, deadline)
            .await
    }

    /// Commits `mutation` of the object at `key` (an update of its `sub`, or a delete, as
    /// `a.operation` says) through the webhooks of `snapshot`.
    #[allow(clippy::too_many_arguments)]
    async fn commit_through_webhooks(
        &self,
        key: &ObjectKey,
        opts: UpdateOptions,
        mutation: Mutation,
        sub: Subresource,
        a: &Attributes<'_>,
        snapshot: &Snapshot,
        deadline: Instant,
    ) -> Result<Committed, ApiError> {
        let info = &key.info;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (current, revision) = self.read_current(key, &opts, deadline).await?;
            // An update is computed at the request's version: a conversion webhook's objects
            // are converted to it first (the kind's rules and patches are written for it).
            let current = if a.operation == Operation::Update && info.converted_by_server {
                Draft {
                    object: self
                        .at_request_version(info, current.object, deadline)
                        .await?,
                    entries: current.entries,
                }
            } else {
                current
            };
            let old = if a.operation == Operation::Delete && info.converted_by_server {
                let at_request = self
                    .at_request_version(info, current.object.clone(), deadline)
                    .await?;
                self.admission_view(info, sub, &at_request)?
            } else {
                self.admission_view(info, sub, &current.object)?
            };
            let mut change = mutation(&current)?;
            if a.operation == Operation::Delete {
                self.validate_by_webhooks(snapshot, a, None, Some(&old), true, deadline)
                    .await?;
            } else if let Change::Put(draft) = &mut change {
                if snapshot.has_mutating() {
                    let sent = self.admission_view(info, sub, &draft.object)?;
                    let mutated = self
                        .admit_by_webhooks(snapshot, a, sent.clone(), Some(&old), deadline)
                        .await?;
                    if mutated != sent {
                        draft.object =
                            self.readmit(info, sub, mutated, &current.object, &draft.object)?;
                    }
                }
                let new = self.admission_view(info, sub, &draft.object)?;
                self.validate_by_webhooks(snapshot, a, Some(&new), Some(&old), false, deadline)
                    .await?;
            }
            if a.operation == Operation::Update && info.converted_by_server {
                let storage = self.storage_version_of(info);
                let draft = match &mut change {
                    Change::Put(d) | Change::Remove(d) => d,
                };
                draft.object = self
                    .at_version(info, &storage, draft.object.clone(), deadline)
                    .await?;
            }
            let pinned = UpdateOptions {
                expected_revision: Some(revision),
                ..opts
            };
            let fixed: Mutation = Box::new(move |_: &Draft| Ok(change.clone()));
            match self.commit(key, pinned, fixed, deadline).await {
                Err(e)
                    if e.reason == Reason::Conflict
                        && opts.expected_revision.is_none()
                        && attempt < ATTEMPTS =>
                {
                    continue;
                }
                committed => return committed,
            }
        }
    }

    /// What admission is shown of `obj` (stored form) for a write of `sub`: the object at the
    /// request's version, or for `scale`, its Scale.
    fn admission_view(
        &self,
        info: &Arc<ResourceInfo>,
        sub: Subresource,
        obj: &Object,
    ) -> Result<Object, ApiError> {
        let mut served = keel_api::conversion::served(info, obj).into_owned();
        served.metadata_mut().remove("managedFields");
        if sub == Subresource::Scale {
            return self.scale_view(info, &served);
        }
        Ok(served)
    }

    /// `draft` (stored form) as the mutating webhooks left it (`mutated`, at the request's
    /// version, or a Scale): the kind's update rules applied to it again, as Kubernetes applies
    /// them after mutating admission.
    fn readmit(
        &self,
        info: &Arc<ResourceInfo>,
        sub: Subresource,
        mutated: Object,
        current: &Object,
        draft: &Object,
    ) -> Result<Object, ApiError> {
        let kind = self.resources.kind(&info.gvr);
        let current = keel_api::conversion::served(info, current);
        if sub == Subresource::Scale {
            let t = target(info, draft.name());
            let replicas = keel_api::scale::replicas(
                &serde_json::Value::Object(mutated.as_map().clone()),
                &t,
            )?;
            let mut obj = keel_api::conversion::served(info, draft).into_owned();
            if let Some(paths) = kind.scale() {
                keel_api::scale::set_replicas(&mut obj, &paths, replicas);
            }
            return admission::admit_update(info, &*kind, obj, &current, Subresource::Main);
        }
        admission::admit_update(info, &*kind, mutated, &current, sub)
    }
}
