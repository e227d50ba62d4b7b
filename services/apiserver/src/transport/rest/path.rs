//! Kubernetes' resource paths, parsed: `/api/v1/...` for the core group, `/apis/{group}/{version}/...`
//! for the others; under them a collection, an object, or an object's subresource, cluster-wide
//! or in `namespaces/{namespace}`.

use keel_api::GroupVersionResource;

/// What a path under `/api` or `/apis` addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiPath {
    /// `/apis/{group}`: a group's versions.
    Group(String),
    /// `/api/v1`, `/apis/{group}/{version}`: the resources of a group version.
    GroupVersion { group: String, version: String },
    /// A collection, an object or a subresource.
    Resource(ResourcePath),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    pub gvr: GroupVersionResource,
    /// `""`: cluster-scoped, or every namespace.
    pub namespace: String,
    /// `None`: the collection.
    pub name: Option<String>,
    /// `""`: the object itself.
    pub subresource: String,
}

/// Namespaces' own subresources: `/api/v1/namespaces/{name}/status` is the namespace `name`'s
/// status, not a collection named `status` in it (no resource has these names).
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// Parses `path` (without its query); `None` when it addresses nothing the API serves.
pub fn parse(path: &str) -> Option<ApiPath> {
    // Segments are percent-decoded (`system%3Anodes`); one that decodes to `/` stays a name.
    let decoded: Vec<String> = path
        .trim_end_matches('/')
        .split('/')
        .skip(1)
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .ok()
                .map(|s| s.into_owned())
        })
        .collect::<Option<_>>()?;
    if decoded.iter().any(|s| s.is_empty()) {
        return None;
    }
    let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group] => return Some(ApiPath::Group(group.to_string())),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let resource = |namespace: &str, resource: &str, name: Option<&str>, sub: &str| {
        Some(ApiPath::Resource(ResourcePath {
            gvr: GroupVersionResource::new(group, version, resource),
            namespace: namespace.to_string(),
            name: name.map(str::to_string),
            subresource: sub.to_string(),
        }))
    };
    match rest {
        [] => Some(ApiPath::GroupVersion {
            group: group.to_string(),
            version: version.to_string(),
        }),
        ["namespaces", ns, sub] if NAMESPACE_SUBRESOURCES.contains(sub) => {
            resource("", "namespaces", Some(ns), sub)
        }
        ["namespaces", ns, r] => resource(ns, r, None, ""),
        ["namespaces", ns, r, name] => resource(ns, r, Some(name), ""),
        ["namespaces", ns, r, name, sub] => resource(ns, r, Some(name), sub),
        [r] => resource("", r, None, ""),
        [r, name] => resource("", r, Some(name), ""),
        [r, name, sub] => resource("", r, Some(name), sub),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(g: &str, v: &str, r: &str, ns: &str, name: Option<&str>, sub: &str) -> ApiPath {
        ApiPath::Resource(ResourcePath {
            gvr: GroupVersionResource::new(g, v, r),
            namespace: ns.into(),
            name: name.map(Into::into),
            subresource: sub.into(),
        })
    }

    #[test]
    fn every_shape_of_resource_path_parses() {
        let cases = [
            ("/api/v1/pods", res("", "v1", "pods", "", None, "")),
            (
                "/api/v1/namespaces/a/configmaps",
                res("", "v1", "configmaps", "a", None, ""),
            ),
            (
                "/api/v1/namespaces/a/pods/p/status",
                res("", "v1", "pods", "a", Some("p"), "status"),
            ),
            (
                "/apis/apps/v1/namespaces/a/deployments/d",
                res("apps", "v1", "deployments", "a", Some("d"), ""),
            ),
            (
                "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin",
                res(
                    "rbac.authorization.k8s.io",
                    "v1",
                    "clusterroles",
                    "",
                    Some("admin"),
                    "",
                ),
            ),
            // A namespace is an object of `namespaces`, and its subresources are its own.
            (
                "/api/v1/namespaces/a",
                res("", "v1", "namespaces", "", Some("a"), ""),
            ),
            (
                "/api/v1/namespaces/a/finalize",
                res("", "v1", "namespaces", "", Some("a"), "finalize"),
            ),
            (
                "/api/v1/namespaces",
                res("", "v1", "namespaces", "", None, ""),
            ),
            (
                "/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Anodes",
                res(
                    "rbac.authorization.k8s.io",
                    "v1",
                    "clusterroles",
                    "",
                    Some("system:nodes"),
                    "",
                ),
            ),
        ];
        for (path, want) in cases {
            assert_eq!(parse(path), Some(want), "{path}");
        }
    }

    #[test]
    fn discovery_paths_and_nonsense() {
        assert_eq!(
            parse("/api/v1"),
            Some(ApiPath::GroupVersion {
                group: String::new(),
                version: "v1".into()
            })
        );
        assert_eq!(parse("/apis/apps"), Some(ApiPath::Group("apps".into())));
        assert_eq!(
            parse("/apis/apps/v1/"),
            Some(ApiPath::GroupVersion {
                group: "apps".into(),
                version: "v1".into()
            })
        );
        for bad in [
            "/",
            "/api",
            "/apis",
            "/foo/v1",
            "/api//pods",
            "/api/v1/namespaces/a/pods/p/status/extra",
            "/api/v1/pods/p/status/x",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
