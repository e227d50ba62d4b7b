//! Simulated Nodes (`--simulated-nodes N`): keel runs no kubelet, so this registers `N` Ready
//! Nodes, `keel-node-0` … `keel-node-<N-1>`, and keeps their heartbeats, the Leases of
//! `kube-node-lease`, as a kubelet does every 10 s. DaemonSets run on them; the pod lifecycle
//! plays their kubelet. Each Node is kept by the replica holding the shard of its name; the
//! keys come back every heartbeat, so a shard's new holder takes its Nodes over.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use keel_api::Metadata;
use keel_client::{ApiError, Client, PatchType, Reason};
use keel_runtime::{Action, Controller, ObjectKey, Store, WatchOptions, WorkQueue};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use super::{Context, SetupError, Start};
use crate::objects;

pub const NAME: &str = "simulatednodes";
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// A kubelet's `nodeLeaseRenewInterval` (a quarter of the 40 s lease).
const HEARTBEAT: Duration = Duration::from_secs(10);
const LEASE_SECONDS: i64 = 40;

struct Nodes {
    client: Client,
    nodes: Store,
}

pub fn node_name(i: u32) -> String {
    format!("keel-node-{i}")
}

pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    let node_informer = ctx
        .factory
        .informer_with(&objects::nodes(), WatchOptions::default());
    let queue = WorkQueue::default_controller_queue();
    let this = Arc::new(Nodes {
        client: ctx.client.clone(),
        nodes: node_informer.store(),
    });
    let controller = Controller::new(NAME, queue.clone())
        .workers(2)
        .metrics(registry);
    let count = ctx.config.simulated_nodes;
    let inner = super::start(
        ctx.gate.reading(&[&node_informer]),
        NAME,
        controller,
        this,
        super::by_name(ctx),
        |this, key| async move { this.reconcile(key).await },
    );
    Ok(Box::new(move |shutdown| {
        async move {
            let ticker = (count > 0).then(|| {
                tokio::spawn(async move {
                    loop {
                        for i in 0..count {
                            queue.add(ObjectKey::new("", node_name(i)));
                        }
                        tokio::time::sleep(HEARTBEAT).await;
                    }
                })
            });
            inner(shutdown).await;
            if let Some(t) = ticker {
                t.abort();
            }
        }
        .boxed()
    }))
}

/// What a simulated Node looks like: Ready, with an internal address and a kubelet's
/// capacity.
fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.keel.dev/simulated": "true",
        }},
        "spec": {},
    })
}

fn node_status(name: &str, index: u32) -> Value {
    let now = objects::now_rfc3339();
    let capacity =
        json!({"cpu": "4", "memory": "16Gi", "pods": "110", "ephemeral-storage": "100Gi"});
    json!({
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        }],
        "addresses": [
            {"type": "InternalIP", "address": format!("10.0.{}.{}", index / 250, index % 250 + 2)},
            {"type": "Hostname", "address": name},
        ],
        "capacity": capacity,
        "allocatable": capacity,
        "nodeInfo": {
            "kubeletVersion": "v1.32.0-keel", "kubeProxyVersion": "v1.32.0-keel",
            "operatingSystem": "linux", "architecture": "amd64",
            "containerRuntimeVersion": "keel://simulated", "osImage": "keel simulated node",
            "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": "",
        },
    })
}

/// `metav1.MicroTime`: RFC 3339 with microseconds.
fn micro_time(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

impl Nodes {
    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let index = key
            .name
            .strip_prefix("keel-node-")
            .and_then(|i| i.parse::<u32>().ok())
            .unwrap_or(0);
        let node = match self.nodes.get(&key) {
            Some(n) => (*n).clone(),
            None => self.register(&key.name).await?,
        };
        if node["status"]["conditions"]
            .as_array()
            .is_none_or(Vec::is_empty)
        {
            self.client
                .patch_subresource(
                    &objects::nodes(),
                    "",
                    &key.name,
                    "status",
                    PatchType::Merge,
                    serde_json::to_vec(&json!({"status": node_status(&key.name, index)}))
                        .unwrap_or_default(),
                )
                .await?;
        }
        self.renew_lease(&node).await?;
        Ok(Action::await_change())
    }

    async fn register(&self, name: &str) -> Result<Value, ApiError> {
        match self.client.create(&objects::nodes(), "", &node(name)).await {
            Ok(n) => Ok(n),
            Err(e) if e.reason == Reason::AlreadyExists => {
                self.client.get(&objects::nodes(), "", name).await
            }
            Err(e) => Err(e),
        }
    }

    /// The Node's Lease in `kube-node-lease`, renewed now (created, with its namespace, the
    /// first time).
    async fn renew_lease(&self, node: &Value) -> Result<(), ApiError> {
        let now = micro_time(SystemTime::now());
        let spec = json!({
            "holderIdentity": node.name(),
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": now,
        });
        match self
            .client
            .patch(
                &objects::leases(),
                LEASE_NAMESPACE,
                node.name(),
                PatchType::Merge,
                &json!({"spec": spec}),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.reason == Reason::NotFound => {}
            Err(e) => return Err(e),
        }
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": LEASE_NAMESPACE}});
        match self
            .client
            .create(&objects::namespaces(), "", &namespace)
            .await
        {
            Ok(_) => {}
            Err(e) if e.reason == Reason::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let mut owner = json!({"apiVersion": "v1", "kind": "Node",
                               "name": node.name(), "uid": node.uid()});
        if node.uid().is_empty() {
            owner = Value::Null;
        }
        let mut lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": node.name(), "namespace": LEASE_NAMESPACE},
            "spec": spec,
        });
        if !owner.is_null() {
            lease["metadata"]["ownerReferences"] = json!([owner]);
        }
        match self
            .client
            .create(&objects::leases(), LEASE_NAMESPACE, &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.reason == Reason::AlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_nodes_are_ready_and_addressed() {
        let n = node(&node_name(3));
        assert_eq!(n["metadata"]["name"], "keel-node-3");
        assert_eq!(
            n["metadata"]["labels"]["kubernetes.io/hostname"],
            "keel-node-3"
        );
        let s = node_status("keel-node-3", 3);
        assert_eq!(s["conditions"][0]["type"], "Ready");
        assert_eq!(s["conditions"][0]["status"], "True");
        assert_eq!(s["addresses"][0]["address"], "10.0.0.5");
        assert!(micro_time(SystemTime::UNIX_EPOCH).ends_with(".000000Z"));
    }
}
