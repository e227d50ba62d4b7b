//! Discovery as kubectl and client-go read it: `/version`, `/api` (APIVersions), `/apis`
//! (APIGroupList), `/apis/{group}` (APIGroup) and a group version's APIResourceList; and the
//! aggregated form of `/api` and `/apis` (apidiscovery.k8s.io/v2 APIGroupDiscoveryList), which
//! kubectl asks for first and which saves it one request per group version.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use keel_api::ResourceInfo;
use serde_json::{Value, json};

use crate::request::{Handler, Subresource};

/// The verbs every resource serves.
const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// The verbs of a resource: all of them, or a review's `create`.
fn verbs(r: &ResourceInfo) -> &'static [&'static str] {
    if r.create_only { &["create"] } else { &VERBS }
}

/// The Kubernetes version keel speaks the API of (kubectl warns past one minor of skew).
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": concat!("v1.32.0-keel-", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

/// The machine's architecture as Go names it (what kubectl prints).
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// The served group versions: group → versions, each with its resources, in a stable order
/// (the core group first, as Kubernetes lists it).
fn groups(handler: &Handler) -> BTreeMap<String, BTreeMap<String, Vec<Arc<ResourceInfo>>>> {
    groups_of(&handler.resources())
}

/// `resources` by group, then by version.
fn groups_of(
    resources: &[Arc<ResourceInfo>],
) -> BTreeMap<String, BTreeMap<String, Vec<Arc<ResourceInfo>>>> {
    let mut out: BTreeMap<String, BTreeMap<String, Vec<Arc<ResourceInfo>>>> = BTreeMap::new();
    for r in resources {
        out.entry(r.gvr.group.clone())
            .or_default()
            .entry(r.gvr.version.clone())
            .or_default()
            .push(r.clone());
    }
    out
}

/// The preferred version of a group: the first in Kubernetes' version order.
fn preferred(versions: &[&String]) -> String {
    let mut v: Vec<&String> = versions.to_vec();
    v.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
    v.first().map(|s| s.to_string()).unwrap_or_default()
}

/// Kubernetes' version priority: GA above beta above alpha, higher numbers first.
fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    let level = |prefix: &str| {
        tail.strip_prefix(prefix)
            .and_then(|n| n.parse::<u32>().ok())
    };
    if tail.is_empty() {
        (3, major, 0)
    } else if let Some(n) = level("beta") {
        (2, major, n)
    } else if let Some(n) = level("alpha") {
        (1, major, n)
    } else {
        (0, 0, 0)
    }
}

/// `/api`: the core group's versions.
pub fn api_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [],
    })
}

fn group_json(name: &str, versions: &BTreeMap<String, Vec<Arc<ResourceInfo>>>) -> Value {
    let names: Vec<&String> = versions.keys().collect();
    let preferred = preferred(&names);
    let mut ordered = names.clone();
    ordered.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
    let gv = |v: &str| json!({"groupVersion": format!("{name}/{v}"), "version": v});
    json!({
        "name": name,
        "versions": ordered.iter().map(|v| gv(v)).collect::<Vec<_>>(),
        "preferredVersion": gv(&preferred),
    })
}

/// `/apis`: every group but the core one.
pub fn api_groups(handler: &Handler) -> Value {
    let groups: Vec<Value> = groups(handler)
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, versions)| group_json(g, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`.
pub fn api_group(handler: &Handler, group: &str) -> Option<Value> {
    let all = groups(handler);
    let versions = all.get(group).filter(|_| !group.is_empty())?;
    let mut g = group_json(group, versions);
    g["kind"] = "APIGroup".into();
    g["apiVersion"] = "v1".into();
    Some(g)
}

/// One resource and its subresources, as an APIResourceList lists them.
fn resource_entries(r: &ResourceInfo) -> Vec<Value> {
    let mut main = json!({
        "name": r.gvr.resource,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": verbs(r),
    });
    if !r.short_names.is_empty() {
        main["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        main["categories"] = json!(r.categories);
    }
    let mut out = vec![main];
    for sub in Subresource::served(r) {
        let (verbs, other_kind) = subresource_shape(sub);
        let mut entry = json!({
            "name": format!("{}/{sub}", r.gvr.resource),
            "singularName": "",
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs,
        });
        if let Some((group, version, kind)) = other_kind {
            entry["group"] = group.into();
            entry["version"] = version.into();
            entry["kind"] = kind.into();
        }
        out.push(entry);
    }
    out
}

/// A subresource's verbs, and the kind it takes and answers when not the resource's own: a
/// Scale of autoscaling/v1 whatever the workload's group (kubectl scale reads which kind to
/// send from here), an Eviction of policy/v1 (kubectl drain looks for it here).
fn subresource_shape(
    sub: &str,
) -> (
    &'static [&'static str],
    Option<(&'static str, &'static str, &'static str)>,
) {
    match sub {
        "finalize" => (&["update"], None),
        "scale" => (
            &["get", "patch", "update"],
            Some(("autoscaling", "v1", "Scale")),
        ),
        "eviction" => (&["create"], Some(("policy", "v1", "Eviction"))),
        "token" => (
            &["create"],
            Some(("authentication.k8s.io", "v1", "TokenRequest")),
        ),
        _ => (&["get", "patch", "update"], None),
    }
}

/// `/api/v1`, `/apis/{group}/{version}`.
pub fn resource_list(handler: &Handler, group: &str, version: &str) -> Option<Value> {
    let all = groups(handler);
    let resources = all.get(group)?.get(version)?;
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let entries: Vec<Value> = resources.iter().flat_map(|r| resource_entries(r)).collect();
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }))
}

/// The aggregated discovery of `resources` for `/api` (`core`: the core group) or `/apis`
/// (every other group): apidiscovery.k8s.io/v2's APIGroupDiscoveryList.
fn aggregated(resources: &[Arc<ResourceInfo>], core: bool, api_version: &str) -> Value {
    let items: Vec<Value> = groups_of(resources)
        .iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, versions)| {
            let mut names: Vec<&String> = versions.keys().collect();
            names.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
            let versions: Vec<Value> = names
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = versions[*v]
                        .iter()
                        .map(|r| aggregated_resource(r))
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": g}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": api_version,
        "metadata": {},
        "items": items,
    })
}

/// The aggregated discovery answers last built, each with the served resources it was built
/// from: kubectl asks for them on every command, and at 2,000 CRDs building one took about
/// 45 ms (an 800 KB document). An answer is built again when the served resources differ from
/// its own (another resource, or one served again from a changed CRD: a new `ResourceInfo`);
/// it holds those resources, so none of them can be freed and another take its address.
#[derive(Default)]
pub struct AggregatedCache(Mutex<Vec<Aggregated>>);

struct Aggregated {
    core: bool,
    api_version: &'static str,
    resources: Vec<Arc<ResourceInfo>>,
    body: Bytes,
}

impl AggregatedCache {
    /// [`aggregated`]'s answer as JSON, built only when the served resources changed.
    pub fn get(&self, handler: &Handler, core: bool, api_version: &'static str) -> Bytes {
        // Built from, and kept with, one reading of the served resources.
        let resources = handler.resources();
        let same = |built: &[Arc<ResourceInfo>]| {
            built.len() == resources.len()
                && built.iter().zip(&resources).all(|(a, b)| Arc::ptr_eq(a, b))
        };
        let kept = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|a| a.core == core && a.api_version == api_version && same(&a.resources))
            .map(|a| a.body.clone());
        if let Some(body) = kept {
            return body;
        }
        // Built without the lock: requests that find another answer kept do not wait for it.
        let body = Bytes::from(
            serde_json::to_vec(&aggregated(&resources, core, api_version)).unwrap_or_default(),
        );
        let mut answers = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // One answer per form asked for (`/api` or `/apis`, v2 or v2beta1): at most four.
        answers.retain(|a| !(a.core == core && a.api_version == api_version));
        answers.push(Aggregated {
            core,
            api_version,
            resources,
            body: body.clone(),
        });
        body
    }
}

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let scope = if r.namespaced {
        "Namespaced"
    } else {
        "Cluster"
    };
    let kind = json!({"group": r.gvr.group, "version": r.gvr.version, "kind": r.kind});
    let subresources: Vec<Value> = Subresource::served(r)
        .into_iter()
        .map(|sub| {
            let (verbs, other_kind) = subresource_shape(sub);
            let response = match other_kind {
                Some((group, version, kind)) => {
                    json!({"group": group, "version": version, "kind": kind})
                }
                None => kind.clone(),
            };
            json!({"subresource": sub, "responseKind": response, "verbs": verbs})
        })
        .collect();
    let mut v = json!({
        "resource": r.gvr.resource,
        "responseKind": kind,
        "scope": scope,
        "singularResource": r.singular,
        "verbs": verbs(r),
    });
    if !r.short_names.is_empty() {
        v["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        v["categories"] = json!(r.categories);
    }
    if !subresources.is_empty() {
        v["subresources"] = json!(subresources);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_as_kubernetes_orders_them() {
        let v1 = "v1".to_string();
        let v1beta1 = "v1beta1".to_string();
        let v2alpha1 = "v2alpha1".to_string();
        let v2 = "v2".to_string();
        assert_eq!(preferred(&[&v1beta1, &v1, &v2alpha1]), "v1");
        assert_eq!(preferred(&[&v1, &v2]), "v2");
        assert_eq!(preferred(&[&v2alpha1, &v1beta1]), "v1beta1");
    }
}
