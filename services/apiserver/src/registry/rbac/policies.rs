//! The RBAC policy in force on this replica, kept current from its watch caches of the four
//! RBAC kinds ([`Policies::follow`], woken by their changes). It is shared, as Kubernetes
//! shares its RBAC authorizer's rule resolver: the request layer's authorizer decides every
//! request with it, and the registry reads it where a verb needs it (the escalation check of a
//! role or binding, the access reviews).

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use keel_api::resource::RBAC_GROUP;
use keel_api::{ApiError, GroupVersionResource, ResourceInfo};
use tokio::sync::watch;
use tokio::time::Instant;

use super::Policy;
use crate::storage::Store;

/// How long a request waits for a just-started replica to read its policy.
const POLICY_WAIT: Duration = Duration::from_secs(5);

/// The policy in force, and whether it is whole.
pub struct Policies {
    policy: RwLock<Arc<Policy>>,
    /// Turns true once the policy holds the bootstrap roles and bindings: a condition of
    /// readiness, and what a request the unread policy would refuse waits for.
    ready: watch::Sender<bool>,
}

impl Default for Policies {
    fn default() -> Self {
        Policies {
            policy: RwLock::new(Arc::new(Policy::default())),
            ready: watch::Sender::new(false),
        }
    }
}

impl Policies {
    /// The policy in force.
    pub fn current(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether this replica has read its whole policy.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Puts `policy` in force; `complete`: bootstrapping has ended and it was built from the
    /// four caches all loaded.
    pub fn set(&self, policy: Policy, complete: bool) {
        let ready = complete && policy.has_bootstrap();
        *self.policy.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(policy);
        // After the policy is in place: whoever sees `true` reads the complete policy.
        if ready {
            self.ready.send_if_modified(|r| !std::mem::replace(r, true));
        }
    }

    /// Waits until this replica has read its whole policy: up to [`POLICY_WAIT`] and
    /// `deadline`, then a retryable `ServiceUnavailable`.
    pub async fn wait(&self, deadline: Instant) -> Result<(), ApiError> {
        let mut ready = self.ready.subscribe();
        let until = deadline.min(Instant::now() + POLICY_WAIT);
        match tokio::time::timeout_at(until, ready.wait_for(|r| *r)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(ApiError::unavailable(
                "this API server has not read its RBAC policy yet: try again",
            )
            .retry_after(1)),
        }
    }

    /// Keeps the policy current until the process ends: rebuilt whenever one of the four kinds
    /// changes in `store`'s caches (`infos`: roles, clusterroles, rolebindings,
    /// clusterrolebindings), or bootstrapping ends (`bootstrapped`).
    pub async fn follow(
        self: Arc<Self>,
        store: Arc<Store>,
        infos: [Arc<ResourceInfo>; 4],
        mut bootstrapped: watch::Receiver<bool>,
    ) {
        // Also rebuilt when bootstrapping ends or the last of the four caches has loaded, for
        // readiness (`set`).
        let mut seen: Option<(bool, Vec<Option<i64>>)> = None;
        let mut changes = infos.each_ref().map(|info| store.cache_changes(info));
        loop {
            // Marked seen before the caches are read: a change after the read wakes the loop.
            for rx in &mut changes {
                rx.borrow_and_update();
            }
            let is_bootstrapped = *bootstrapped.borrow_and_update();
            // A cache that is loading holds nothing yet: the policy is complete only once all
            // four have loaded.
            let changed: Vec<Option<i64>> =
                infos.iter().map(|info| store.cache_changed(info)).collect();
            let complete = is_bootstrapped && changed.iter().all(Option::is_some);
            let fingerprint = (complete, changed);
            if seen.as_ref() != Some(&fingerprint) {
                let [r, cr, b, cb] = infos.each_ref().map(|info| store.cached(info, |_| true));
                self.set(Policy::build(&r, &cr, &b, &cb), complete);
                seen = Some(fingerprint);
            }
            let [a, b, c, d] = &mut changes;
            let woken = tokio::select! {
                r = a.changed() => r,
                r = b.changed() => r,
                r = c.changed() => r,
                r = d.changed() => r,
                r = bootstrapped.changed() => r,
            };
            if woken.is_err() {
                // A cache or the registry is gone: the server is shutting down.
                return;
            }
        }
    }
}

/// The four RBAC resources the policy is built from, in the order [`Policies::follow`] takes.
pub fn policy_resources() -> [GroupVersionResource; 4] {
    [
        "roles",
        "clusterroles",
        "rolebindings",
        "clusterrolebindings",
    ]
    .map(|r| GroupVersionResource::new(RBAC_GROUP, "v1", r))
}
