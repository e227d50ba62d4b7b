//! The endpoints controller: each Service with a selector gets the addresses of the Pods it
//! selects, as an `Endpoints` object of its name (Kubernetes' `endpoint-controller`) and as
//! EndpointSlices it owns (`endpointslice-controller`), both written by this one controller.
//!
//! - A Pod counts once it has an address (`status.podIP`) and until it has ended. Ready Pods
//!   are `addresses`, the others `notReadyAddresses` (all of them `addresses` with
//!   `publishNotReadyAddresses`); a Pod being deleted leaves the Endpoints, and stays in the
//!   slices as `terminating`, `serving` while it is Ready, as Kubernetes 1.32 writes them.
//! - Ports: a `targetPort` given by name is looked up in each Pod's containers; Pods whose
//!   ports resolve differently go in different subsets and slices.
//! - Slices hold at most 100 endpoints (`--max-endpoints-per-slice`'s default); a Service with
//!   none keeps one empty slice, as Kubernetes' placeholder.
//! - A Service without a selector is left alone: its Endpoints are whoever wrote them (a
//!   webhook run outside the cluster, say). A Service deleted takes its Endpoints with it.

use std::collections::BTreeMap;
use std::sync::Arc;

use keel_api::Metadata;
use keel_client::{ApiError, Client, DeleteParams, Reason};
use keel_runtime::{
    Action, BY_NAMESPACE, Controller, HandlerFns, ObjectKey, ShardBy, Store, WatchOptions,
    WorkQueue, enqueue_handler,
};
use prometheus_client::registry::Registry;
use serde_json::{Map, Value, json};

use super::{Context, SetupError, Start};
use crate::objects;

pub const NAME: &str = "endpoints";
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
const MAX_PER_SLICE: usize = 100;

struct EndpointsController {
    client: Client,
    services: Store,
    pods: Store,
    endpoints: Store,
    slices: Store,
}

pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    let svc_informer = ctx.factory.informer_with(
        &objects::services(),
        ctx.options(WatchOptions::default(), ShardBy::Name),
    );
    // A Service selects Pods of any owner: every replica caches every Pod.
    let pod_informer = ctx
        .factory
        .informer_with(&objects::pods(), WatchOptions::default());
    let ep_informer = ctx.factory.informer_with(
        &objects::endpoints(),
        ctx.options(WatchOptions::default(), ShardBy::Name),
    );
    let slice_informer = ctx.factory.informer_with(
        &objects::endpointslices(),
        ctx.options(WatchOptions::default(), ShardBy::Owner),
    );
    let queue = WorkQueue::default_controller_queue();
    svc_informer.add_handler(enqueue_handler(queue.clone()));
    ep_informer.add_handler(enqueue_handler(queue.clone()));
    slice_informer.add_handler(super::statefulset::owner_handler(queue.clone(), "Service"));
    pod_informer.add_handler(pod_handler(queue.clone(), svc_informer.store()));
    let this = Arc::new(EndpointsController {
        client: ctx.client.clone(),
        services: svc_informer.store(),
        pods: pod_informer.store(),
        endpoints: ep_informer.store(),
        slices: slice_informer.store(),
    });
    let controller = Controller::new(NAME, queue)
        .workers(ctx.config.workers)
        .metrics(registry);
    Ok(super::start(
        ctx.gate
            .reading(&[&svc_informer, &pod_informer, &ep_informer, &slice_informer]),
        NAME,
        controller,
        this,
        super::by_name(ctx),
        |this, key| async move { this.reconcile(key).await },
    ))
}

/// A Pod wakes every Service of its namespace that selects it, before or after the change.
fn pod_handler(queue: WorkQueue<ObjectKey>, services: Store) -> HandlerFns {
    let wake = move |pods: &[&Value]| {
        let Some(ns) = pods.first().map(|p| p.namespace().to_string()) else {
            return;
        };
        for svc in services.by_index(BY_NAMESPACE, &ns) {
            let Some(sel) = service_selector(&svc) else {
                continue;
            };
            if pods.iter().any(|p| selects(sel, p))
                && let Ok(k) = ObjectKey::from_object(&svc)
            {
                queue.add(k);
            }
        }
    };
    let (w1, w2, w3) = (wake.clone(), wake.clone(), wake);
    HandlerFns::new()
        .added(move |p| w1(&[p]))
        .updated(move |o, n| w2(&[o, n]))
        .deleted(move |p| w3(&[p]))
}

/// A Service's `spec.selector` (a plain label map); `None` without one (or an empty one).
fn service_selector(svc: &Value) -> Option<&Map<String, Value>> {
    svc["spec"]["selector"]
        .as_object()
        .filter(|m| !m.is_empty())
}

fn selects(sel: &Map<String, Value>, pod: &Value) -> bool {
    sel.iter().all(|(k, v)| pod.label(k) == v.as_str())
}

/// One Pod's entry: its address, readiness, whether it is being deleted, and its ports.
#[derive(Debug, Clone)]
struct Member {
    ip: String,
    ready: bool,
    terminating: bool,
    node: Option<String>,
    target: Value,
    ports: Vec<Value>,
}

/// The Service's ports as they land on this Pod: a `targetPort` by name is looked up in its
/// containers (a port the Pod does not name is left out).
fn resolve_ports(svc: &Value, pod: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for p in svc["spec"]["ports"].as_array().into_iter().flatten() {
        let target = match &p["targetPort"] {
            Value::Number(n) => n.as_i64(),
            Value::String(name) => pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                .find(|cp| cp["name"].as_str() == Some(name.as_str()))
                .and_then(|cp| cp["containerPort"].as_i64())
                .or_else(|| name.parse().ok()),
            _ => p["port"].as_i64(),
        };
        let Some(port) = target else { continue };
        let mut entry = json!({"port": port, "protocol": p["protocol"].as_str().unwrap_or("TCP")});
        if let Some(name) = p["name"].as_str().filter(|n| !n.is_empty()) {
            entry["name"] = json!(name);
        }
        if let Some(app) = p["appProtocol"].as_str() {
            entry["appProtocol"] = json!(app);
        }
        out.push(entry);
    }
    out
}

fn members(svc: &Value, pods: &[Arc<Value>]) -> Vec<Member> {
    let Some(sel) = service_selector(svc) else {
        return Vec::new();
    };
    let mut out: Vec<Member> = pods
        .iter()
        .filter(|p| selects(sel, p))
        .filter(|p| {
            !matches!(
                p["status"]["phase"].as_str(),
                Some("Succeeded") | Some("Failed")
            )
        })
        .filter_map(|p| {
            let ip = p["status"]["podIP"].as_str().filter(|s| !s.is_empty())?;
            Some(Member {
                ip: ip.to_string(),
                ready: objects::pod_is_ready(p),
                terminating: p.is_deleting(),
                node: p["spec"]["nodeName"].as_str().map(str::to_string),
                target: json!({"kind": "Pod", "namespace": p.namespace(),
                               "name": p.name(), "uid": p.uid()}),
                ports: resolve_ports(svc, p),
            })
        })
        .collect();
    out.sort_by(|a, b| {
        a.ip.cmp(&b.ip)
            .then_with(|| a.target["name"].as_str().cmp(&b.target["name"].as_str()))
    });
    out
}

/// The Members grouped by their ports, in a stable order.
fn by_ports(members: &[Member]) -> BTreeMap<String, (Vec<Value>, Vec<&Member>)> {
    let mut groups: BTreeMap<String, (Vec<Value>, Vec<&Member>)> = BTreeMap::new();
    for m in members {
        let key = serde_json::to_string(&m.ports).unwrap_or_default();
        groups
            .entry(key)
            .or_insert_with(|| (m.ports.clone(), Vec::new()))
            .1
            .push(m);
    }
    groups
}

fn address(m: &Member) -> Value {
    let mut a = json!({"ip": m.ip, "targetRef": m.target});
    if let Some(n) = &m.node {
        a["nodeName"] = json!(n);
    }
    a
}

/// `subsets` of the Service's Endpoints.
fn subsets(svc: &Value, members: &[Member]) -> Vec<Value> {
    let publish = svc["spec"]["publishNotReadyAddresses"] == json!(true);
    let live: Vec<Member> = members.iter().filter(|m| !m.terminating).cloned().collect();
    let mut out = Vec::new();
    for (_, (ports, ms)) in by_ports(&live) {
        let (ready, not): (Vec<&&Member>, Vec<&&Member>) =
            ms.iter().partition(|m| m.ready || publish);
        let mut subset = Map::new();
        if !ready.is_empty() {
            subset.insert(
                "addresses".into(),
                Value::Array(ready.iter().map(|m| address(m)).collect()),
            );
        }
        if !not.is_empty() {
            subset.insert(
                "notReadyAddresses".into(),
                Value::Array(not.iter().map(|m| address(m)).collect()),
            );
        }
        if !ports.is_empty() {
            subset.insert("ports".into(), Value::Array(ports));
        }
        out.push(Value::Object(subset));
    }
    out
}

/// The slices' contents: (ports, endpoints), at most 100 endpoints each; one empty slice
/// when there is nothing.
fn slice_contents(svc: &Value, members: &[Member]) -> Vec<(Vec<Value>, Vec<Value>)> {
    let publish = svc["spec"]["publishNotReadyAddresses"] == json!(true);
    let mut out = Vec::new();
    for (_, (ports, ms)) in by_ports(members) {
        for chunk in ms.chunks(MAX_PER_SLICE) {
            let endpoints = chunk
                .iter()
                .map(|m| {
                    let mut e = json!({
                        "addresses": [m.ip],
                        "conditions": {
                            "ready": (m.ready || publish) && !m.terminating,
                            "serving": m.ready || publish,
                            "terminating": m.terminating,
                        },
                        "targetRef": m.target,
                    });
                    if let Some(n) = &m.node {
                        e["nodeName"] = json!(n);
                    }
                    e
                })
                .collect();
            // A slice's port always has a name, "" for an unnamed one (Kubernetes' controller
            // writes it so, and `kubectl describe service` reads it without looking).
            let named: Vec<Value> = ports
                .iter()
                .map(|p| {
                    let mut p = p.clone();
                    if p.get("name").is_none() {
                        p["name"] = json!("");
                    }
                    p
                })
                .collect();
            out.push((named, endpoints));
        }
    }
    if out.is_empty() {
        out.push((Vec::new(), Vec::new()));
    }
    out
}

impl EndpointsController {
    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(svc) = self.services.get(&key) else {
            // Endpoints have no owner: they go with their Service here. (Slices are owned.)
            if self.endpoints.get(&key).is_some() {
                match self
                    .client
                    .delete(
                        &objects::endpoints(),
                        &key.namespace,
                        &key.name,
                        &DeleteParams::default(),
                    )
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.reason == Reason::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(Action::await_change());
        };
        if service_selector(&svc).is_none()
            || svc["spec"]["type"] == "ExternalName"
            || svc.is_deleting()
        {
            return Ok(Action::await_change());
        }
        let pods = self.pods.by_index(BY_NAMESPACE, &key.namespace);
        let members = members(&svc, &pods);
        self.write_endpoints(&svc, &members).await?;
        self.write_slices(&svc, &members).await?;
        Ok(Action::await_change())
    }

    async fn write_endpoints(&self, svc: &Value, members: &[Member]) -> Result<(), ApiError> {
        let subsets = subsets(svc, members);
        let mut labels = svc["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        if svc["spec"]["clusterIP"] == "None" {
            labels.insert("service.kubernetes.io/headless".into(), json!(""));
        }
        let current = self
            .endpoints
            .get(&ObjectKey::new(svc.namespace(), svc.name()));
        let want_subsets = if subsets.is_empty() {
            Value::Null
        } else {
            Value::Array(subsets)
        };
        if let Some(cur) = &current {
            let same_subsets = cur.get("subsets").cloned().unwrap_or(Value::Null) == want_subsets
                || (want_subsets.is_null() && cur["subsets"] == json!([]));
            let same_labels = cur["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default()
                == labels;
            if same_subsets && same_labels {
                return Ok(());
            }
        }
        let mut obj = json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": svc.name(), "namespace": svc.namespace(), "labels": labels},
        });
        if !want_subsets.is_null() {
            obj["subsets"] = want_subsets;
        }
        let result = match &current {
            Some(cur) => {
                obj["metadata"]["resourceVersion"] = json!(cur.resource_version());
                self.client
                    .update(&objects::endpoints(), svc.namespace(), &obj)
                    .await
            }
            None => {
                self.client
                    .create(&objects::endpoints(), svc.namespace(), &obj)
                    .await
            }
        };
        match result {
            Ok(_) => Ok(()),
            // A newer version, or someone else's create: its event brings the key back.
            Err(e) if matches!(e.reason, Reason::Conflict | Reason::AlreadyExists) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn write_slices(&self, svc: &Value, members: &[Member]) -> Result<(), ApiError> {
        let mut existing: Vec<Arc<Value>> = self
            .slices
            .by_index(BY_NAMESPACE, svc.namespace())
            .into_iter()
            .filter(|s| s.controller_uid() == Some(svc.uid()))
            .filter(|s| s.label(MANAGED_BY_LABEL) == Some(MANAGED_BY))
            .collect();
        existing.sort_by(|a, b| {
            a.creation_timestamp()
                .cmp(&b.creation_timestamp())
                .then_with(|| a.name().cmp(b.name()))
        });
        let mut labels = svc["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        labels.insert(SERVICE_NAME_LABEL.into(), json!(svc.name()));
        labels.insert(MANAGED_BY_LABEL.into(), json!(MANAGED_BY));
        let wanted = slice_contents(svc, members);
        for (i, (ports, endpoints)) in wanted.iter().enumerate() {
            let ports_value = if ports.is_empty() {
                Value::Null
            } else {
                json!(ports)
            };
            match existing.get(i) {
                Some(cur) => {
                    let same = cur["endpoints"].as_array().cloned().unwrap_or_default()
                        == *endpoints
                        && cur.get("ports").cloned().unwrap_or(Value::Null) == ports_value
                        && cur["metadata"]["labels"].as_object() == Some(&labels);
                    if same {
                        continue;
                    }
                    let mut obj = (**cur).clone();
                    obj["metadata"]["labels"] = json!(labels);
                    obj["endpoints"] = json!(endpoints);
                    obj["ports"] = ports_value;
                    match self
                        .client
                        .update(&objects::endpointslices(), svc.namespace(), &obj)
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => {}
                        Err(e) => return Err(e),
                    }
                }
                None => {
                    let mut obj = json!({
                        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                        "metadata": {
                            "generateName": format!("{}-", svc.name()),
                            "namespace": svc.namespace(),
                            "labels": labels,
                            "ownerReferences": [objects::controller_reference(svc)],
                        },
                        "addressType": "IPv4",
                        "endpoints": endpoints,
                    });
                    if !ports_value.is_null() {
                        obj["ports"] = ports_value;
                    }
                    self.client
                        .create(&objects::endpointslices(), svc.namespace(), &obj)
                        .await?;
                }
            }
        }
        for extra in existing.iter().skip(wanted.len()) {
            let params = DeleteParams {
                uid: extra.uid().to_string(),
                ..DeleteParams::default()
            };
            match self
                .client
                .delete(
                    &objects::endpointslices(),
                    extra.namespace(),
                    extra.name(),
                    &params,
                )
                .await
            {
                Ok(_) => {}
                Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ports: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "ns"},
               "spec": {"selector": {"app": "web"}, "ports": ports}})
    }

    fn pod(name: &str, ip: Option<&str>, ready: bool, extra: Value) -> Arc<Value> {
        let mut p = json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                         "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        });
        if let (Some(m), Some(e)) = (p.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                m.insert(k.clone(), v.clone());
            }
        }
        Arc::new(p)
    }

    #[test]
    fn ready_pods_are_addresses_and_the_others_not_ready_addresses() {
        let s = svc(json!([{"name": "http", "port": 80, "targetPort": "http"}]));
        let pods = vec![
            pod("a", Some("10.244.0.2"), true, json!({})),
            pod("b", Some("10.244.0.1"), false, json!({})),
            pod("no-ip", None, true, json!({})),
            pod(
                "done",
                Some("10.244.0.9"),
                true,
                json!({"status": {"phase": "Succeeded", "podIP": "10.244.0.9"}}),
            ),
            pod(
                "other",
                Some("10.244.0.7"),
                true,
                json!({"metadata": {"name": "other", "labels": {"app": "db"}}}),
            ),
        ];
        let m = members(&s, &pods);
        let subsets = subsets(&s, &m);
        assert_eq!(subsets.len(), 1);
        assert_eq!(subsets[0]["addresses"][0]["ip"], "10.244.0.2");
        assert_eq!(subsets[0]["addresses"][0]["targetRef"]["name"], "a");
        assert_eq!(subsets[0]["notReadyAddresses"][0]["ip"], "10.244.0.1");
        assert_eq!(
            subsets[0]["ports"],
            json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
        );
    }

    #[test]
    fn terminating_pods_leave_the_endpoints_and_stay_in_slices_as_terminating() {
        let s = svc(json!([{"port": 80}]));
        let pods = vec![pod(
            "a",
            Some("10.244.0.2"),
            true,
            json!({"metadata": {"name": "a", "namespace": "ns", "uid": "u-a",
                   "labels": {"app": "web"}, "deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        )];
        let m = members(&s, &pods);
        assert!(subsets(&s, &m).is_empty());
        let slices = slice_contents(&s, &m);
        assert_eq!(
            slices[0].0,
            [json!({"name": "", "port": 80, "protocol": "TCP"})],
            "an unnamed port is named \"\" in a slice"
        );
        assert_eq!(
            slices[0].1[0]["conditions"],
            json!({"ready": false, "serving": true, "terminating": true})
        );
    }

    #[test]
    fn slices_hold_at_most_a_hundred_endpoints_and_one_when_empty() {
        let s = svc(json!([{"port": 80}]));
        let pods: Vec<Arc<Value>> = (0..250)
            .map(|i| {
                pod(
                    &format!("p{i}"),
                    Some(&format!("10.244.{}.{}", i / 200, i % 200 + 1)),
                    true,
                    json!({}),
                )
            })
            .collect();
        let slices = slice_contents(&s, &members(&s, &pods));
        assert_eq!(
            slices.iter().map(|s| s.1.len()).collect::<Vec<_>>(),
            [100, 100, 50]
        );
        assert_eq!(slice_contents(&s, &[]), [(Vec::new(), Vec::new())]);
    }

    #[test]
    fn pods_whose_ports_differ_go_in_different_subsets() {
        let s = svc(json!([{"port": 80, "targetPort": "http"}]));
        let other = pod(
            "b",
            Some("10.244.0.3"),
            true,
            json!({"spec": {"containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 9090}]}]}}),
        );
        let pods = vec![pod("a", Some("10.244.0.2"), true, json!({})), other];
        assert_eq!(subsets(&s, &members(&s, &pods)).len(), 2);
    }
}
