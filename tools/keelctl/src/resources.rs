//! Which resource a name means, from the server's Discovery, so that custom resources resolve
//! as soon as their CRD is served.

use keel_api::{GroupVersionResource, ResourceInfo};
use keel_client::Client;
use keel_print::PrinterColumn;
use keel_wire::proto::ApiResource;

use crate::error::Error;

/// A resource the server serves.
#[derive(Debug, Clone)]
pub struct Resource {
    pub gvr: GroupVersionResource,
    pub singular: String,
    pub kind: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    pub verbs: Vec<String>,
    /// A custom resource's `additionalPrinterColumns`.
    pub printer_columns: Vec<PrinterColumn>,
    /// The categories it is in (`all`).
    pub categories: Vec<String>,
}

impl Resource {
    fn from_discovery(r: ApiResource) -> Resource {
        Resource {
            gvr: GroupVersionResource::new(&r.group, &r.version, &r.resource),
            singular: r.singular,
            kind: r.kind,
            short_names: r.short_names,
            namespaced: r.namespaced,
            verbs: r.verbs,
            categories: r.categories,
            printer_columns: r
                .printer_columns
                .into_iter()
                .map(|c| PrinterColumn {
                    name: c.name,
                    r#type: c.r#type,
                    json_path: c.json_path,
                    priority: c.priority,
                    description: c.description,
                })
                .collect(),
        }
    }

    pub fn api_version(&self) -> String {
        self.gvr.api_version()
    }

    /// `deployments.apps`, `pods`: how kubectl names the resource in messages.
    pub fn qualified_name(&self) -> String {
        self.gvr.to_string()
    }

    /// `deployment.apps`, `configmap`: how kubectl names objects of this kind in its output
    /// (`deployment.apps/nginx created`, `configmap "x" deleted`).
    pub fn kind_name(&self) -> String {
        let kind = self.kind.to_ascii_lowercase();
        if self.gvr.group.is_empty() {
            kind
        } else {
            format!("{kind}.{}", self.gvr.group)
        }
    }

    /// `deployment.apps/nginx`.
    pub fn object_ref(&self, name: &str) -> String {
        format!("{}/{name}", self.kind_name())
    }

    /// Whether `name` (plural, singular, kind or short name, optionally `.group`) means this
    /// resource. The rules are keel-api's, so the server and keelctl agree on them.
    fn matches(&self, name: &str) -> bool {
        let info = ResourceInfo {
            converted_by_server: false,
            gvr: self.gvr.clone(),
            singular: self.singular.clone(),
            kind: self.kind.clone(),
            short_names: self.short_names.clone(),
            namespaced: self.namespaced,
            status_subresource: false,
            create_only: false,
            subresources: Vec::new(),
            categories: Vec::new(),
            selectable_fields: Vec::new(),
        };
        info.matches_name(name)
    }
}

/// The resources the server serves, in the order Discovery lists them.
pub struct Resources {
    all: Vec<Resource>,
}

impl Resources {
    /// Asks the server (one Discovery call).
    pub async fn discover(client: &Client) -> Result<Resources, Error> {
        let all = client
            .discovery()
            .await?
            .into_iter()
            .map(Resource::from_discovery)
            .collect();
        Ok(Resources { all })
    }

    #[cfg(test)]
    pub fn from_list(all: Vec<ApiResource>) -> Resources {
        Resources {
            all: all.into_iter().map(Resource::from_discovery).collect(),
        }
    }

    pub fn all(&self) -> &[Resource] {
        &self.all
    }

    /// The resource a user typed: `deploy`, `deployments.apps`, `Deployment`, `po`.
    pub fn resolve(&self, name: &str) -> Result<&Resource, Error> {
        // Kinds may be typed in any case, the other names are lower case: as kubectl, which
        // lowercases what it is given.
        let lower = name.to_ascii_lowercase();
        self.all
            .iter()
            .find(|r| r.matches(&lower))
            .ok_or_else(|| Error::UnknownResource(name.to_string()))
    }

    /// The resources a user typed: those of a category (`all`), as kubectl expands one before
    /// it looks for a resource of that name, or the one resource the name means.
    pub fn expand(&self, name: &str) -> Result<Vec<&Resource>, Error> {
        let lower = name.to_ascii_lowercase();
        let category: Vec<&Resource> = self
            .all
            .iter()
            .filter(|r| r.categories.contains(&lower))
            .collect();
        if category.is_empty() {
            Ok(vec![self.resolve(name)?])
        } else {
            Ok(category)
        }
    }

    /// The resource of an object read from a file, by its `apiVersion` and `kind`.
    pub fn for_kind(&self, api_version: &str, kind: &str) -> Option<&Resource> {
        self.all
            .iter()
            .find(|r| r.kind == kind && r.api_version() == api_version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served() -> Resources {
        let r =
            |group: &str, resource: &str, singular: &str, kind: &str, short: &[&str]| ApiResource {
                group: group.into(),
                version: "v1".into(),
                resource: resource.into(),
                singular: singular.into(),
                kind: kind.into(),
                short_names: short.iter().map(|s| s.to_string()).collect(),
                namespaced: true,
                verbs: vec![],
                subresources: vec![],
                printer_columns: vec![],
                categories: if ["pods", "deployments"].contains(&resource) {
                    vec!["all".into()]
                } else {
                    vec![]
                },
            };
        Resources::from_list(vec![
            r("", "pods", "pod", "Pod", &["po"]),
            r("", "configmaps", "configmap", "ConfigMap", &["cm"]),
            r(
                "apps",
                "deployments",
                "deployment",
                "Deployment",
                &["deploy"],
            ),
            r("samplecrd.k8s.io", "networks", "network", "Network", &[]),
        ])
    }

    #[test]
    fn every_name_a_kubectl_user_types_resolves() {
        let rs = served();
        for name in [
            "deployments",
            "deployment",
            "Deployment",
            "deploy",
            "deployments.apps",
            "DEPLOY",
        ] {
            assert_eq!(
                rs.resolve(name).map(|r| r.kind.as_str()).ok(),
                Some("Deployment"),
                "{name}"
            );
        }
        assert_eq!(rs.resolve("po").map(|r| r.kind.as_str()).ok(), Some("Pod"));
        assert_eq!(
            rs.resolve("networks").map(|r| r.kind_name()).ok(),
            Some("network.samplecrd.k8s.io".into())
        );
        assert!(matches!(rs.resolve("foos"), Err(Error::UnknownResource(n)) if n == "foos"));
        assert!(rs.resolve("deployments.batch").is_err());
    }

    #[test]
    fn a_category_expands_to_its_resources_before_a_name_resolves() {
        let rs = served();
        let kinds = |name: &str| -> Vec<String> {
            rs.expand(name)
                .map(|r| r.iter().map(|r| r.kind.clone()).collect())
                .unwrap_or_default()
        };
        assert_eq!(kinds("all"), ["Pod", "Deployment"]);
        assert_eq!(kinds("ALL"), ["Pod", "Deployment"]);
        assert_eq!(kinds("cm"), ["ConfigMap"]);
        assert!(rs.expand("everything").is_err());
    }

    #[test]
    fn objects_are_named_as_kubectl_names_them() {
        let rs = served();
        let d = rs
            .for_kind("apps/v1", "Deployment")
            .map(|r| r.object_ref("nginx"));
        assert_eq!(d.as_deref(), Some("deployment.apps/nginx"));
        let cm = rs.for_kind("v1", "ConfigMap").map(|r| r.object_ref("x"));
        assert_eq!(cm.as_deref(), Some("configmap/x"));
        assert!(rs.for_kind("apps/v2", "Deployment").is_none());
    }
}
