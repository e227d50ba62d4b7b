//! The resources this server serves, by group, version and resource.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use keel_api::{ApiError, GroupVersionResource, ResourceInfo, Target, builtin_resources};

/// The served resources by group, version and resource. Read on every request, written only
/// when the set of resources changes (custom resources, later), hence a `RwLock`.
pub struct Resources {
    by_gvr: RwLock<HashMap<GroupVersionResource, Arc<ResourceInfo>>>,
}

impl Resources {
    pub fn builtin() -> Resources {
        let by_gvr = builtin_resources()
            .into_iter()
            .map(|r| (r.gvr.clone(), Arc::new(r)))
            .collect();
        Resources {
            by_gvr: RwLock::new(by_gvr),
        }
    }

    /// The resource a request names, or `NotFound` naming it.
    pub fn lookup(
        &self,
        gvr: Option<&GroupVersionResource>,
    ) -> Result<Arc<ResourceInfo>, ApiError> {
        let Some(gvr) = gvr else {
            return Err(ApiError::bad_request(
                Target::default(),
                "the request names no resource",
            ));
        };
        let found = match self.by_gvr.read() {
            Ok(m) => m.get(gvr).cloned(),
            Err(poisoned) => poisoned.into_inner().get(gvr).cloned(),
        };
        found.ok_or_else(|| {
            let mut e = ApiError::not_found(Target::new(&gvr.group, &gvr.resource, ""));
            e.message = format!(
                "the server could not find the requested resource {} in {}",
                gvr,
                gvr.api_version()
            );
            e
        })
    }

    /// Every served resource, sorted by group and name.
    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        let mut all: Vec<_> = match self.by_gvr.read() {
            Ok(m) => m.values().cloned().collect(),
            Err(poisoned) => poisoned.into_inner().values().cloned().collect(),
        };
        all.sort_by(|a, b| a.gvr.cmp(&b.gvr));
        all
    }
}
