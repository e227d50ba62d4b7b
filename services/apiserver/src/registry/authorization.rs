//! Authorization on this replica: its RBAC policy kept current from its watch caches of the
//! four RBAC kinds ([`Registry::follow_policy`], woken by their changes) and every request
//! checked against it ([`Registry::authorize`]). The policy and its rules are `rbac`'s; this is
//! their use.

use std::sync::Arc;

use keel_api::resource::RBAC_GROUP;
use keel_api::{ApiError, GroupVersionResource};
use tokio::time::Instant;

use super::rbac::{Attributes, Policy, forbidden};
use super::store::Registry;
use crate::auth::User;

/// The four RBAC resources.
fn gvr(resource: &str) -> GroupVersionResource {
    GroupVersionResource::new(RBAC_GROUP, "v1", resource)
}

impl Registry {
    /// Keeps this replica's policy current until the process ends: rebuilt whenever one of
    /// the four kinds changes in this replica's caches.
    pub async fn follow_policy(self: Arc<Self>) {
        let infos: Vec<_> = [
            "roles",
            "clusterroles",
            "rolebindings",
            "clusterrolebindings",
        ]
        .iter()
        .filter_map(|r| self.lookup(Some(&gvr(r))).ok())
        .collect();
        let [roles, cluster_roles, bindings, cluster_bindings] = infos.as_slice() else {
            return;
        };
        // Also rebuilt when bootstrapping ends or the last of the four caches has loaded, for
        // readiness (`set_policy`).
        let mut seen: Option<(bool, Vec<Option<i64>>)> = None;
        let kinds = [roles, cluster_roles, bindings, cluster_bindings];
        let mut changes = kinds.map(|info| self.store().cache_changes(info));
        let mut bootstrapped = self.bootstrapped();
        loop {
            // Marked seen before the caches are read: a change after the read wakes the loop.
            for rx in &mut changes {
                rx.borrow_and_update();
            }
            bootstrapped.borrow_and_update();
            // A cache that is loading holds nothing yet: the policy is complete only once all
            // four have loaded.
            let changed: Vec<Option<i64>> = kinds
                .iter()
                .map(|info| self.store().cache_changed(info))
                .collect();
            let complete = self.is_bootstrapped() && changed.iter().all(Option::is_some);
            let fingerprint = (complete, changed);
            if seen.as_ref() != Some(&fingerprint) {
                let [r, cr, b, cb] = kinds.map(|info| self.store().cached(info, |_| true));
                self.set_policy(Policy::build(&r, &cr, &b, &cb), complete);
                seen = Some(fingerprint);
            }
            let [a, b, c, d] = &mut changes;
            tokio::select! {
                _ = a.changed() => {}
                _ = b.changed() => {}
                _ = c.changed() => {}
                _ = d.changed() => {}
                _ = bootstrapped.changed() => {}
            }
        }
    }

    /// Whether `user` may do `a`: `Forbidden` in Kubernetes' words if not. `None`: the
    /// request came with no identity because authentication is off (a development server),
    /// or authorization is `AlwaysAllow`.
    ///
    /// RBAC only grants, so a policy read in part can only refuse too much. A replica that has
    /// not read its whole policy yet (just started) lets what it already allows through and
    /// makes the rest wait for the policy, up to [`POLICY_WAIT`] and `deadline`; past that the
    /// answer is `ServiceUnavailable`, which a client retries, never a wrong `Forbidden`.
    pub async fn authorize(
        &self,
        user: Option<&User>,
        a: &Attributes<'_>,
        deadline: Instant,
    ) -> Result<(), ApiError> {
        let Some(user) = user else { return Ok(()) };
        let read = *self.policy_ready().borrow();
        if self.policy().allows(user, a) {
            return Ok(());
        }
        if !read {
            self.wait_for_policy(deadline).await?;
            if self.policy().allows(user, a) {
                return Ok(());
            }
        }
        Err(forbidden(user, a))
    }
}
