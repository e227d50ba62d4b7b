//! The API server's own controllers: what runs beside the verbs, over the Registry, as
//! Kubernetes' API server runs its bootstrap controller and post-start hooks, and
//! apiextensions its CRD finalizer. Each is woken by a watch cache's change signal, not by
//! polling. (The RBAC policy follower is `rbac::Policies::follow`, which the request layer's
//! authorizer reads.)
//! - [`bootstrap`]: the built-in namespaces, the bootstrap RBAC policy and the `kubernetes`
//!   Service;
//! - [`crd_serving`]: serving the resources of the CRDs in the cache, and cleaning up the
//!   objects of a deleted one;
//! - [`initializer_timeouts`]: each initializer's failure policy, once its timeout passes;
//! - [`service_ranges`]: the repair of the Service cluster IP and node port ranges (a loop on
//!   a timer, as Kubernetes' repair: what it looks for, a leak, makes no change to wake on).

mod bootstrap;
mod crd_serving;
mod initializer_timeouts;
pub mod service_ranges;

use std::sync::Arc;
use std::time::Duration;

use bootstrap::Bootstrap;
use crd_serving::CrdServing;
use initializer_timeouts::InitializerTimeouts;
use service_ranges::ServiceRangeRepair;

use super::Registry;

/// Starts the controllers over `registry`; they run until the process ends.
/// `range_repair_interval`: time between repairs of the Service ranges.
pub fn spawn(registry: &Arc<Registry>, range_repair_interval: Duration) {
    tokio::spawn(ServiceRangeRepair::new(registry.clone(), range_repair_interval).run());
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
