//! The seeds' Network controller (`samplecrd.k8s.io/v1` `Network`), against a real backing
//! system: a simulated IP address manager that allocates each Network's CIDR, refuses overlaps,
//! and keeps its allocations in the API server (the ConfigMap `keel-system/network-ipam`, one
//! key per allocated range), so they outlive any replica.
//!
//! - A Network gets the finalizer `samplecrd.k8s.io/ipam` first; then its CIDR is allocated
//!   (idempotently: an allocation is keyed by the Network's uid) and its status says `Ready`
//!   with the gateway (`spec.gateway`, or the range's first address). A CIDR overlapping
//!   another Network's gets `Failed` and an `Allocated: False` condition naming the other, and
//!   no allocation; it is looked at again every few seconds, so it is allocated once the other
//!   goes. A changed CIDR releases the old range and allocates the new one.
//! - A Network being deleted has its range released, then its finalizer removed.
//! - The allocator's writes are compare-and-swaps on the ConfigMap's `resourceVersion`, so
//!   replicas (shards) allocating at once never both take overlapping ranges.
//! - The CRD may come after the controller-manager: the controller waits until the API
//!   serves Networks, then starts its informer.
//! - Status is written as the CRD says: through the `status` subresource when it has one,
//!   else as an ordinary part of the Network (the seeds' v1beta1 CRD has none). The controller
//!   follows the CRD, so adding or removing the subresource switches it.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use keel_api::Metadata;
use keel_client::{ApiError, Client, GroupVersionResource, PatchType, Reason, gvr};
use keel_runtime::{
    Action, Controller, HandlerFns, ObjectKey, ShardBy, Store, WatchOptions, WorkQueue,
    enqueue_handler,
};
use prometheus_client::registry::Registry;
use serde_json::{Map, Value, json};
use tracing::info;

use super::{Context, SetupError, Start};

/// Held by each Network until its range is released.
pub const FINALIZER: &str = "samplecrd.k8s.io/ipam";
/// Where the allocations live.
pub const IPAM: (&str, &str) = ("keel-system", "network-ipam");
/// How often a Network refused for an overlap is looked at again.
const RETRY_OVERLAP: Duration = Duration::from_secs(2);
/// How often discovery is asked whether Networks are served yet.
const DISCOVERY_EVERY: Duration = Duration::from_secs(2);
/// Compare-and-swap attempts on the allocations before the reconcile is retried later.
const CAS_ATTEMPTS: usize = 10;

pub fn networks() -> GroupVersionResource {
    gvr("samplecrd.k8s.io", "v1", "networks")
}

/// The Networks' CRD.
const CRD: &str = "networks.samplecrd.k8s.io";

fn crds() -> GroupVersionResource {
    gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions")
}

/// Whether a CRD (as `apiextensions.k8s.io/v1` has it) gives `version` the status
/// subresource.
pub fn has_status_subresource(crd: &Value, version: &str) -> bool {
    crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == version)
        .is_some_and(|v| v["subresources"]["status"].is_object())
}

fn configmaps() -> GroupVersionResource {
    gvr("", "v1", "configmaps")
}

/// An IPv4 range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    base: u32,
    prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Option<Cidr> {
        let (addr, prefix) = s.split_once('/')?;
        let addr: Ipv4Addr = addr.parse().ok()?;
        let prefix: u8 = prefix.parse().ok().filter(|p| *p <= 32)?;
        Some(Cidr {
            base: u32::from(addr) & mask(prefix),
            prefix,
        })
    }

    fn last(&self) -> u32 {
        self.base | !mask(self.prefix)
    }

    pub fn overlaps(&self, other: &Cidr) -> bool {
        self.base <= other.last() && other.base <= self.last()
    }

    /// The range's first usable address: the default gateway.
    pub fn first_host(&self) -> Ipv4Addr {
        Ipv4Addr::from(if self.prefix >= 31 {
            self.base
        } else {
            self.base + 1
        })
    }

    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        let a = u32::from(addr);
        self.base <= a && a <= self.last()
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    }
}

/// One allocation, as the ConfigMap keeps it: key `10.0.0.0_16`, value this as JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Allocation {
    cidr: Cidr,
    network: String,
    uid: String,
}

fn key_of(c: &Cidr) -> String {
    c.to_string().replace('/', "_")
}

fn allocations(cm: &Value) -> Vec<Allocation> {
    cm["data"]
        .as_object()
        .map(|data| {
            data.iter()
                .filter_map(|(k, v)| {
                    let v: Value = serde_json::from_str(v.as_str()?).ok()?;
                    Some(Allocation {
                        cidr: Cidr::parse(&k.replace('_', "/"))?,
                        network: v["network"].as_str()?.to_string(),
                        uid: v["uid"].as_str()?.to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What the allocator answered.
#[derive(Debug, PartialEq, Eq)]
enum Allocated {
    Yes,
    /// Another Network holds an overlapping range.
    Overlaps {
        network: String,
        cidr: Cidr,
    },
}

/// The simulated IP address manager: its state is the ConfigMap, every change a
/// compare-and-swap on its revision.
struct Ipam {
    client: Client,
}

impl Ipam {
    async fn read(&self) -> Result<Value, ApiError> {
        match self.client.get(&configmaps(), IPAM.0, IPAM.1).await {
            Ok(cm) => Ok(cm),
            Err(e) if e.reason == Reason::NotFound => {
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": IPAM.1, "namespace": IPAM.0}, "data": {}});
                match self.client.create(&configmaps(), IPAM.0, &cm).await {
                    Ok(cm) => Ok(cm),
                    Err(e) if e.reason == Reason::AlreadyExists => {
                        self.client.get(&configmaps(), IPAM.0, IPAM.1).await
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Applies `change` to the allocations and writes them back, retrying on conflicts.
    async fn update<T>(
        &self,
        change: impl Fn(&mut Vec<Allocation>) -> (T, bool),
    ) -> Result<T, ApiError> {
        let mut last = None;
        for _ in 0..CAS_ATTEMPTS {
            let cm = self.read().await?;
            let mut list = allocations(&cm);
            let (answer, changed) = change(&mut list);
            if !changed {
                return Ok(answer);
            }
            let data: Map<String, Value> = list
                .iter()
                .map(|a| {
                    let v = json!({"network": a.network, "uid": a.uid}).to_string();
                    (key_of(&a.cidr), Value::String(v))
                })
                .collect();
            let mut next = cm.clone();
            next["data"] = Value::Object(data);
            match self.client.update(&configmaps(), IPAM.0, &next).await {
                Ok(_) => return Ok(answer),
                Err(e) if e.reason == Reason::Conflict => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| ApiError::internal("the allocations kept changing")))
    }

    async fn allocate(&self, network: &str, uid: &str, cidr: Cidr) -> Result<Allocated, ApiError> {
        self.update(|list| {
            if list.iter().any(|a| a.uid == uid && a.cidr == cidr) {
                return (Allocated::Yes, false);
            }
            if let Some(other) = list.iter().find(|a| a.uid != uid && a.cidr.overlaps(&cidr)) {
                let answer = Allocated::Overlaps {
                    network: other.network.clone(),
                    cidr: other.cidr,
                };
                return (answer, false);
            }
            // A changed CIDR: the old range goes with the new one's allocation.
            list.retain(|a| a.uid != uid);
            list.push(Allocation {
                cidr,
                network: network.to_string(),
                uid: uid.to_string(),
            });
            (Allocated::Yes, true)
        })
        .await
    }

    async fn release(&self, uid: &str) -> Result<(), ApiError> {
        self.update(|list| {
            let before = list.len();
            list.retain(|a| a.uid != uid);
            ((), list.len() != before)
        })
        .await
    }
}

struct NetworkController {
    client: Client,
    networks: Store,
    ipam: Ipam,
    /// Whether the CRD has the status subresource now (its informer's handler keeps it).
    status_subresource: Arc<AtomicBool>,
}

/// The Network controller starts once the API serves Networks (its CRD may come later).
pub fn setup(ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    let queue = WorkQueue::default_controller_queue();
    let controller = Controller::new("network", queue)
        .workers(ctx.config.workers)
        .metrics(registry);
    let client = ctx.client.clone();
    let factory = ctx.factory.clone();
    let options = ctx.options(WatchOptions::default(), ShardBy::Name);
    let gate = ctx.gate.clone();
    let shard_of = super::by_name(ctx);
    Ok(Box::new(move |shutdown| {
        async move {
            let served = tokio::select! {
                _ = wait_for_networks(&client) => true,
                _ = shutdown.clone().wait() => false,
            };
            if !served {
                return;
            }
            info!("Networks are served: starting the network controller");
            let informer = factory.informer_with(&networks(), options);
            informer.add_handler(enqueue_handler(controller.queue().clone()));
            let status_subresource = Arc::new(AtomicBool::new(false));
            let crd = factory.informer_with(
                &crds(),
                WatchOptions {
                    field_selector: format!("metadata.name={CRD}"),
                    ..WatchOptions::default()
                },
            );
            let follow = |flag: Arc<AtomicBool>| {
                move |crd: &Arc<Value>| {
                    let on = has_status_subresource(crd, &networks().version);
                    if flag.swap(on, Ordering::AcqRel) != on {
                        info!(status_subresource = on, "the Network CRD changed");
                    }
                }
            };
            let (on_add, on_update) = (
                follow(status_subresource.clone()),
                follow(status_subresource.clone()),
            );
            let off = status_subresource.clone();
            crd.add_handler(
                HandlerFns::new()
                    .added(on_add)
                    .updated(move |_, new| on_update(new))
                    .deleted(move |_| off.store(false, Ordering::Release)),
            );
            let gate = gate.reading(&[&informer, &crd]);
            let this = Arc::new(NetworkController {
                ipam: Ipam {
                    client: client.clone(),
                },
                client,
                networks: informer.store(),
                status_subresource,
            });
            let start = super::start(
                gate,
                "network",
                controller,
                this,
                shard_of,
                |this, key| async move { this.reconcile(key).await },
            );
            start(shutdown).await;
        }
        .boxed()
    }))
}

async fn wait_for_networks(client: &Client) {
    let want = networks();
    loop {
        if let Ok(resources) = client.discovery().await
            && resources.iter().any(|r| {
                r.group == want.group && r.version == want.version && r.resource == want.resource
            })
        {
            return;
        }
        tokio::time::sleep(DISCOVERY_EVERY).await;
    }
}

fn condition(status: &str, reason: &str, message: &str) -> Value {
    json!([{"type": "Allocated", "status": status, "reason": reason, "message": message}])
}

impl NetworkController {
    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(net) = self.networks.get(&key) else {
            return Ok(Action::await_change());
        };
        let finalizers = net.finalizers();
        let held = finalizers.contains(&FINALIZER);
        if net.is_deleting() {
            if held {
                self.ipam.release(net.uid()).await?;
                let rest: Vec<&str> = finalizers.into_iter().filter(|f| *f != FINALIZER).collect();
                self.patch_meta(&net, json!({"finalizers": rest})).await?;
                info!(network = %key, "range released");
            }
            return Ok(Action::await_change());
        }
        if !held {
            let mut with = finalizers.clone();
            with.push(FINALIZER);
            self.patch_meta(&net, json!({"finalizers": with})).await?;
            return Ok(Action::await_change());
        }
        let spec_cidr = net["spec"]["cidr"].as_str().unwrap_or("");
        let Some(cidr) = Cidr::parse(spec_cidr) else {
            // A range it held before the change is given back.
            self.ipam.release(net.uid()).await?;
            let status = json!({"phase": "Failed", "conditions": condition("False", "InvalidCIDR",
                &format!("spec.cidr {spec_cidr:?} is not an IPv4 range"))});
            self.write_status(&net, status).await?;
            return Ok(Action::await_change());
        };
        if let Some(g) = net["spec"]["gateway"].as_str().filter(|g| !g.is_empty())
            && !g.parse::<Ipv4Addr>().is_ok_and(|a| cidr.contains(a))
        {
            self.ipam.release(net.uid()).await?;
            let status = json!({"phase": "Failed", "conditions": condition("False", "InvalidGateway",
                &format!("spec.gateway {g:?} is not an address of {cidr}"))});
            self.write_status(&net, status).await?;
            return Ok(Action::await_change());
        }
        let whole = format!("{}/{}", net.namespace(), net.name());
        let status = match self.ipam.allocate(&whole, net.uid(), cidr).await? {
            Allocated::Yes => {
                let gateway = match net["spec"]["gateway"].as_str().filter(|g| !g.is_empty()) {
                    Some(g) => g.to_string(),
                    None => cidr.first_host().to_string(),
                };
                json!({"phase": "Ready", "cidr": cidr.to_string(), "gateway": gateway,
                    "observedGeneration": net.generation(),
                    "conditions": condition("True", "Allocated", &format!("{cidr} is allocated"))})
            }
            Allocated::Overlaps {
                network,
                cidr: theirs,
            } => {
                let message = format!("{cidr} overlaps {theirs}, allocated to {network}");
                let status = json!({"phase": "Failed",
                    "observedGeneration": net.generation(),
                    "conditions": condition("False", "Overlap", &message)});
                self.write_status(&net, status).await?;
                return Ok(Action::requeue(RETRY_OVERLAP));
            }
        };
        self.write_status(&net, status).await?;
        Ok(Action::await_change())
    }

    /// Writes `status` unless unchanged, with the Network's revision as precondition.
    async fn write_status(&self, net: &Value, mut status: Value) -> Result<(), ApiError> {
        // Keep each condition's transition time while its status stays.
        if let Some(new) = status["conditions"].as_array_mut() {
            for c in new.iter_mut() {
                let old = net["status"]["conditions"]
                    .as_array()
                    .and_then(|l| l.iter().find(|o| o["type"] == c["type"]));
                let time = match old {
                    Some(o) if o["status"] == c["status"] => o["lastTransitionTime"].clone(),
                    _ => json!(
                        humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
                    ),
                };
                c["lastTransitionTime"] = time;
            }
        }
        let subresource = self.status_subresource.load(Ordering::Acquire);
        super::write_status_to(&self.client, &networks(), net, status, subresource).await
    }

    /// A merge patch of metadata with the Network's revision as precondition: a stale cache's
    /// write is refused, and the newer object's event brings the key back.
    async fn patch_meta(&self, net: &Value, mut meta: Value) -> Result<(), ApiError> {
        meta["resourceVersion"] = net["metadata"]["resourceVersion"].clone();
        match self
            .client
            .patch(
                &networks(),
                net.namespace(),
                net.name(),
                PatchType::Merge,
                &json!({"metadata": meta}),
            )
            .await
        {
            Ok(_) => Ok(()),
            // Changed since the cache read it, or gone: the newer version's event brings the
            // key back (or its deletion ends the work).
            Err(e) if matches!(e.reason, Reason::Conflict | Reason::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Cidr {
        Cidr::parse(s).unwrap()
    }

    #[test]
    fn cidrs_parse_overlap_and_give_their_first_host() {
        assert_eq!(c("192.168.3.7/16").to_string(), "192.168.0.0/16");
        assert!(c("10.0.0.0/8").overlaps(&c("10.1.0.0/16")));
        assert!(c("10.1.0.0/16").overlaps(&c("10.0.0.0/8")));
        assert!(!c("10.1.0.0/16").overlaps(&c("10.2.0.0/16")));
        assert!(c("0.0.0.0/0").overlaps(&c("1.2.3.4/32")));
        assert_eq!(c("192.168.0.0/16").first_host().to_string(), "192.168.0.1");
        assert_eq!(c("1.2.3.4/32").first_host().to_string(), "1.2.3.4");
        assert!(c("192.168.0.0/16").contains("192.168.0.1".parse().unwrap()));
        for bad in ["", "10.0.0.0", "10.0.0.0/33", "300.0.0.0/8", "a/8"] {
            assert_eq!(Cidr::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn allocations_round_trip_through_the_configmap() {
        let cm = json!({"data": {
            "10.0.0.0_16": "{\"network\":\"default/a\",\"uid\":\"u1\"}",
            "junk": "x"
        }});
        assert_eq!(
            allocations(&cm),
            [Allocation {
                cidr: c("10.0.0.0/16"),
                network: "default/a".into(),
                uid: "u1".into()
            }]
        );
        assert_eq!(key_of(&c("10.0.0.0/16")), "10.0.0.0_16");
    }
}
