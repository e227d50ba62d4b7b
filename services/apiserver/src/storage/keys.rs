//! Where objects live in etcd: `<prefix>/<group or "core">/<resource>/[<namespace>/]<name>`.

use std::sync::Arc;

use keel_api::{ResourceInfo, Target};

use super::codec::target;

/// The key layout under one prefix (e.g. `/registry`).
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

/// One object's place in storage: its resource, namespace and name, and the etcd key they make.
#[derive(Debug, Clone)]
pub struct ObjectKey {
    pub info: Arc<ResourceInfo>,
    pub namespace: String,
    pub name: String,
    pub key: String,
}

impl ObjectKey {
    /// Names the object in errors.
    pub fn target(&self) -> Target {
        target(&self.info, &self.name)
    }
}

impl Keys {
    /// `prefix` without its trailing `/`.
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }

    /// `<prefix>/<group or core>/<resource>/`: every object of the resource.
    pub fn resource_prefix(&self, info: &ResourceInfo) -> String {
        // A resource served in two groups has one storage (events.k8s.io's Events).
        let group = match keel_api::conversion::storage_group(info) {
            "" => "core",
            g => g,
        };
        format!("{}/{}/{}/", self.prefix, group, info.gvr.resource)
    }

    /// The prefix of the Namespaces' own keys.
    pub fn namespaces_prefix(&self) -> String {
        format!("{}/core/namespaces/", self.prefix)
    }

    /// The objects of one namespace, or of the whole resource when `namespace` is empty or the
    /// resource is cluster-scoped.
    pub fn scope_prefix(&self, info: &ResourceInfo, namespace: &str) -> String {
        let p = self.resource_prefix(info);
        if info.namespaced && !namespace.is_empty() {
            format!("{p}{namespace}/")
        } else {
            p
        }
    }

    /// The key of one object; the namespace of a cluster-scoped resource is ignored.
    pub fn object(&self, info: &Arc<ResourceInfo>, namespace: &str, name: &str) -> ObjectKey {
        let key = if info.namespaced {
            format!("{}{namespace}/{name}", self.resource_prefix(info))
        } else {
            format!("{}{name}", self.resource_prefix(info))
        };
        ObjectKey {
            info: info.clone(),
            namespace: if info.namespaced {
                namespace.to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
            key,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(kind: &str) -> Arc<ResourceInfo> {
        Arc::new(
            keel_api::builtin_resources()
                .into_iter()
                .find(|r| r.kind == kind)
                .unwrap(),
        )
    }

    #[test]
    fn keys_follow_the_design_layout() {
        let keys = Keys::new("/registry/");
        let deployments = info("Deployment");
        assert_eq!(
            keys.object(&deployments, "web", "d").key,
            "/registry/apps/deployments/web/d"
        );
        assert_eq!(
            keys.scope_prefix(&deployments, ""),
            "/registry/apps/deployments/"
        );
        assert_eq!(
            keys.scope_prefix(&deployments, "web"),
            "/registry/apps/deployments/web/"
        );
        let namespaces = info("Namespace");
        let ns = keys.object(&namespaces, "ignored", "team-a");
        assert_eq!(ns.key, "/registry/core/namespaces/team-a");
        assert_eq!(ns.namespace, "");
        assert_eq!(
            keys.scope_prefix(&namespaces, "x"),
            "/registry/core/namespaces/"
        );
    }
}
