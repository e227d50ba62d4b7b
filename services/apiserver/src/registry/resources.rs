//! The resources this server serves, by group, version and resource.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use keel_api::{ApiError, GroupVersionResource, ResourceInfo, Target};

use super::crd::CustomResource;
use super::kinds::{self, Kind, Served};

/// The served resources by group, version and resource: the built-in ones, and those of the
/// CustomResourceDefinitions this replica has seen. Read on every request, written only when
/// the set of CRDs changes, hence `RwLock`s.
pub struct Resources {
    by_gvr: RwLock<HashMap<GroupVersionResource, Served>>,
    /// The custom ones, with their rules (schema, merge keys, printer columns), and the etcd
    /// revision of the CRDs they were made from: an older view never replaces a newer one.
    custom: RwLock<(HashMap<GroupVersionResource, Arc<CustomResource>>, i64)>,
}

impl Resources {
    pub fn builtin() -> Resources {
        let by_gvr = kinds::builtin()
            .into_iter()
            .map(|s| (s.info.gvr.clone(), s))
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

    /// The custom resources served now, by the name of their CRD.
    pub fn custom_by_crd(&self) -> HashMap<String, Vec<Arc<CustomResource>>> {
        let mut by_crd: HashMap<String, Vec<Arc<CustomResource>>> = HashMap::new();
        for r in self
            .custom
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .values()
        {
            by_crd.entry(r.crd.clone()).or_default().push(r.clone());
        }
        by_crd
    }

    /// Serves exactly these custom resources from now on (those of the CRDs that exist at
    /// etcd revision `revision`), unless what is served comes from a newer revision; built-in
    /// resources are never replaced. Returns the resources added and removed.
    pub fn set_custom(
        &self,
        resources: Vec<Arc<CustomResource>>,
        revision: i64,
    ) -> (Vec<GroupVersionResource>, Vec<GroupVersionResource>) {
        let mut by_gvr = self.by_gvr.write().unwrap_or_else(|e| e.into_inner());
        let mut guard = self.custom.write().unwrap_or_else(|e| e.into_inner());
        let (custom, served_at) = &mut *guard;
        if revision < *served_at {
            return (Vec::new(), Vec::new());
        }
        *served_at = revision;
        let next: HashMap<GroupVersionResource, Arc<CustomResource>> = resources
            .into_iter()
            // A custom resource never shares a built-in one's group and resource, whatever
            // its version: they would share keys in etcd (CRD validation refuses such groups;
            // this keeps out any stored before it did).
            .filter(|r| !kinds::builtin_group(&r.info.gvr.group, Some(&r.info.gvr.resource)))
            .map(|r| (r.info.gvr.clone(), r))
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
            let kind: Arc<dyn Kind> = r.clone();
            by_gvr.insert(
                gvr.clone(),
                Served {
                    info: r.info.clone(),
                    kind,
                },
            );
        }
        *custom = next;
        (added, removed)
    }

    /// The rules of a served resource's kind; a resource no longer served (its CRD just went)
    /// gets those of a kind with no rules of its own.
    pub fn kind(&self, gvr: &GroupVersionResource) -> Arc<dyn Kind> {
        self.by_gvr
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(gvr)
            .map_or_else(kinds::unknown, |s| s.kind.clone())
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
        let found = self
            .by_gvr
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(gvr)
            .map(|s| s.info.clone());
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
        let mut all: Vec<_> = self
            .by_gvr
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|s| s.info.clone())
            .collect();
        all.sort_by(|a, b| a.gvr.cmp(&b.gvr));
        all
    }

    /// The resources whose watch caches load when the server starts: all that can be listed,
    /// but the versions serving another version's objects converted (a v1beta1 CRD, ...),
    /// whose caches load on their first List or Watch, so that each stored object is held
    /// once, not once per version (a large CRD is hundreds of kilobytes).
    pub fn cached_at_start(&self) -> Vec<Arc<ResourceInfo>> {
        self.all()
            .into_iter()
            .filter(|r| !r.create_only && !keel_api::conversion::is_converted_view(r))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use keel_api::Object;
    use serde_json::json;

    use super::*;

    /// A CRD stored before validation refused built-in groups (or written to etcd directly)
    /// is never served: its resource would share the built-in one's keys.
    #[test]
    fn a_custom_resource_sharing_a_built_in_group_and_resource_is_not_served() {
        let crd = |group: &str, plural: &str| {
            Object::from_value(json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{plural}.{group}")},
                "spec": {"group": group, "scope": "Cluster",
                         "names": {"kind": "Thing", "plural": plural},
                         "versions": [{"name": "v9", "served": true, "storage": true}]},
            }))
            .expect("an object")
        };
        let r = Resources::builtin();
        let mut served = crate::registry::crd::resources(&crd(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
        ));
        served.extend(crate::registry::crd::resources(&crd("ex.com", "things")));
        assert_eq!(served.len(), 2);
        let (added, _) = r.set_custom(served.into_iter().map(Arc::new).collect(), 1);
        let added: Vec<String> = added.iter().map(|g| g.to_string()).collect();
        assert_eq!(added.len(), 1, "{added:?}");
        assert!(added[0].contains("ex.com"), "{added:?}");
    }
}
