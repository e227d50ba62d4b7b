//! The resources this server serves, by group, version and resource.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use keel_api::{ApiError, GroupVersionResource, ResourceInfo, Target, builtin_resources};

use super::crd::CustomResource;

/// The served resources by group, version and resource: the built-in ones, and those of the
/// CustomResourceDefinitions this replica has seen. Read on every request, written only when
/// the set of CRDs changes, hence `RwLock`s.
pub struct Resources {
    by_gvr: RwLock<HashMap<GroupVersionResource, Arc<ResourceInfo>>>,
    /// The custom ones, with their rules (schema, merge keys, printer columns), and the etcd
    /// revision of the CRDs they were made from: an older view never replaces a newer one.
    custom: RwLock<(HashMap<GroupVersionResource, Arc<CustomResource>>, i64)>,
}

impl Resources {
    pub fn builtin() -> Resources {
        let by_gvr = builtin_resources()
            .into_iter()
            .chain(keel_api::review_resources())
            .map(|r| (r.gvr.clone(), Arc::new(r)))
            .collect();
        Resources {
            by_gvr: RwLock::new(by_gvr),
            custom: RwLock::new((HashMap::new(), 0)),
        }
    }

    /// The rules of a custom resource; `None` for a built-in one.
    pub fn custom(&self, gvr: &GroupVersionResource) -> Option<Arc<CustomResource>> {
        self.custom
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .get(gvr)
            .cloned()
    }

    /// Serves exactly these custom resources from now on (those of the CRDs that exist at
    /// etcd revision `revision`), unless what is served comes from a newer revision; built-in
    /// resources are never replaced. Returns the resources added and removed.
    pub fn set_custom(
        &self,
        resources: Vec<CustomResource>,
        revision: i64,
    ) -> (Vec<GroupVersionResource>, Vec<GroupVersionResource>) {
        let builtin: Vec<GroupVersionResource> =
            builtin_resources().into_iter().map(|r| r.gvr).collect();
        let mut by_gvr = self.by_gvr.write().unwrap_or_else(|e| e.into_inner());
        let mut guard = self.custom.write().unwrap_or_else(|e| e.into_inner());
        let (custom, served_at) = &mut *guard;
        if revision < *served_at {
            return (Vec::new(), Vec::new());
        }
        *served_at = revision;
        let next: HashMap<GroupVersionResource, Arc<CustomResource>> = resources
            .into_iter()
            .filter(|r| !builtin.contains(&r.info.gvr))
            .map(|r| (r.info.gvr.clone(), Arc::new(r)))
            .collect();
        let removed: Vec<GroupVersionResource> = custom
            .keys()
            .filter(|g| !next.contains_key(*g))
            .cloned()
            .collect();
        let added: Vec<GroupVersionResource> = next
            .keys()
            .filter(|g| !custom.contains_key(*g))
            .cloned()
            .collect();
        for gvr in &removed {
            by_gvr.remove(gvr);
        }
        for (gvr, r) in &next {
            by_gvr.insert(gvr.clone(), r.info.clone());
        }
        *custom = next;
        (added, removed)
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
