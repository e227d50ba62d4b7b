//! The authorizer: whether a user may do what a request asks, decided before any verb touches
//! the registry (Kubernetes' `WithAuthorization` filter with its RBAC authorizer). Every verb
//! reaches the registry through [`Context::authorize`](super::Context::authorize), which asks
//! it, and so does every identity a request impersonates.

use std::sync::Arc;

use keel_api::ApiError;
use tokio::time::Instant;

use crate::auth::User;
use crate::registry::{Attributes, Policies, forbidden};

/// Decides requests with the RBAC policy this replica follows.
pub struct Authorizer {
    policies: Arc<Policies>,
}

impl Authorizer {
    pub fn new(policies: Arc<Policies>) -> Authorizer {
        Authorizer { policies }
    }

    /// Whether `user` may do `a`: `Forbidden` in Kubernetes' words if not. `None`: the
    /// request came with no identity because authentication is off (a development server),
    /// or authorization is `AlwaysAllow`.
    ///
    /// RBAC only grants, so a policy read in part can only refuse too much. A replica that has
    /// not read its whole policy yet (just started) lets what it already allows through and
    /// makes the rest wait for the policy, up to the policy's wait and `deadline`; past that
    /// the answer is `ServiceUnavailable`, which a client retries, never a wrong `Forbidden`.
    pub async fn authorize(
        &self,
        user: Option<&User>,
        a: &Attributes<'_>,
        deadline: Instant,
    ) -> Result<(), ApiError> {
        let Some(user) = user else { return Ok(()) };
        let read = self.policies.is_ready();
        if self.policies.current().allows(user, a) {
            return Ok(());
        }
        if !read {
            self.policies.wait(deadline).await?;
            if self.policies.current().allows(user, a) {
                return Ok(());
            }
        }
        Err(forbidden(user, a))
    }
}
