//! The API server's own controllers: what runs beside the verbs, over the Registry, as
//! Kubernetes' API server runs its bootstrap controller and post-start hooks, and
//! apiextensions its CRD finalizer. Each is woken by a watch cache's change signal, not by
//! polling. (The RBAC policy follower is `rbac::Policies::follow`, which the request layer's
//! authorizer reads.)
//! - [`bootstrap`]: the built-in namespaces and the bootstrap RBAC policy;
//! - [`crd_serving`]: serving the resources of the CRDs in the cache, and cleaning up the
//!   objects of a deleted one;
//! - [`initializer_timeouts`]: each initializer's failure policy, once its timeout passes.

mod bootstrap;
mod crd_serving;
mod initializer_timeouts;

use std::sync::Arc;

use bootstrap::Bootstrap;
use crd_serving::CrdServing;
use initializer_timeouts::InitializerTimeouts;

use super::Registry;

/// Starts the controllers over `registry`; they run until the process ends.
pub fn spawn(registry: &Arc<Registry>) {
    tokio::spawn(
        Bootstrap {
            registry: registry.clone(),
        }
        .run(),
    );
    tokio::spawn(
        Arc::new(CrdServing {
            registry: registry.clone(),
        })
        .run(),
    );
    tokio::spawn(
        InitializerTimeouts {
            registry: registry.clone(),
        }
        .run(),
    );
}
