//! Service cluster IPs and node ports, each held by one Service across every API server
//! replica, as Kubernetes allocates them (`ipallocator`, `portallocator`): a bitmap per range
//! in one storage key, changed only by compare-and-swap on the key's revision (`shared`),
//! values chosen at random in the upper part of the range first (`bitmap`, `range`), and a
//! repair that rebuilds the bitmaps from the Services (`repair`; run by
//! `controllers::service_ranges`).
//!
//! Which objects hold values, and where, is their kind's to say ([`Allocations`], reached
//! through `Kind::allocations`); the registry allocates on create and update, and releases on
//! update and removal.

mod bitmap;
mod range;
mod repair;
mod shared;

use std::sync::Arc;

use keel_api::{ApiError, FieldCause, Object, Reason, Target};
use tokio::time::Instant;

pub use bitmap::Bitmap;
pub use range::{IpRange, PortRange, Range, RangeError, Value};
pub use repair::{Leaks, REPAIRS_BEFORE_LEAK_CLEANUP, Repair, plan};
pub use shared::{AllocError, Op, RangeAllocator, Stored};

use crate::storage::Store;

/// The two ranges Services draw from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    ClusterIps,
    NodePorts,
}

impl Pool {
    pub const ALL: [Pool; 2] = [Pool::ClusterIps, Pool::NodePorts];

    /// The storage key's name under `ranges/`, as Kubernetes names it.
    fn key_name(self) -> &'static str {
        match self {
            Pool::ClusterIps => "serviceips",
            Pool::NodePorts => "servicenodeports",
        }
    }

    /// Kubernetes' resource of the range, for messages.
    pub fn resource(self) -> &'static str {
        match self {
            Pool::ClusterIps => "serviceipallocations",
            Pool::NodePorts => "servicenodeportallocations",
        }
    }

    /// The flag that sets the range.
    pub fn flag(self) -> &'static str {
        match self {
            Pool::ClusterIps => "--service-cluster-ip-range",
            Pool::NodePorts => "--service-node-port-range",
        }
    }
}

/// A value an object holds, or asks for, in one pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub pool: Pool,
    /// Where it is, as errors name it (`spec.clusterIPs`, `spec.ports[0].nodePort`).
    pub field: String,
    /// The kind's own index of the field (a Service: the port's).
    pub at: usize,
    /// The value as the object has it; `None` asks for any.
    pub value: Option<String>,
}

/// The rules of a kind whose objects hold values of the pools (Service).
pub trait Allocations: Send + Sync {
    /// What `obj` holds or asks for: none for an object that needs no value (a headless or
    /// ExternalName Service's cluster IP, a ClusterIP Service's node ports).
    fn claims(&self, obj: &Object) -> Vec<Claim>;

    /// Writes `value`, allocated for `claim` (one that asked for any), into `obj`.
    fn assign(&self, obj: &mut Object, claim: &Claim, value: &str);
}

/// The ranges this API server allocates from (`--service-cluster-ip-range`,
/// `--service-node-port-range`). Every replica must have the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceRanges {
    pub cluster_ips: IpRange,
    pub node_ports: PortRange,
}

impl ServiceRanges {
    pub fn parse(cluster_ips: &str, node_ports: &str) -> Result<ServiceRanges, RangeError> {
        Ok(ServiceRanges {
            cluster_ips: IpRange::parse(cluster_ips)?,
            node_ports: PortRange::parse(node_ports)?,
        })
    }
}

impl Default for ServiceRanges {
    /// Kubernetes' defaults: `10.96.0.0/12` and `30000-32767`.
    fn default() -> Self {
        ServiceRanges {
            cluster_ips: IpRange::parse("10.96.0.0/12").unwrap_or_else(|_| unreachable!()),
            node_ports: PortRange::parse("30000-32767").unwrap_or_else(|_| unreachable!()),
        }
    }
}

/// A value an object was given: to release if it never gets stored.
pub type Given = (Pool, Value);

/// The two shared ranges.
pub struct Allocators {
    cluster_ips: RangeAllocator,
    node_ports: RangeAllocator,
}

impl Allocators {
    pub fn new(store: Arc<Store>, ranges: ServiceRanges) -> Arc<Allocators> {
        let allocator =
            |pool: Pool, range| RangeAllocator::new(store.clone(), pool.key_name(), range);
        Arc::new(Allocators {
            cluster_ips: allocator(Pool::ClusterIps, Range::Ips(ranges.cluster_ips)),
            node_ports: allocator(Pool::NodePorts, Range::Ports(ranges.node_ports)),
        })
    }

    pub fn pool(&self, pool: Pool) -> &RangeAllocator {
        match pool {
            Pool::ClusterIps => &self.cluster_ips,
            Pool::NodePorts => &self.node_ports,
        }
    }

    /// Allocates what `claims` ask for, all or nothing: the value of each, in order (a value
    /// asked for by number, that one). `t` names the object in errors. With `dry_run`,
    /// nothing is written: the values are what would be given now.
    pub async fn allocate(
        &self,
        t: &Target,
        claims: &[&Claim],
        dry_run: bool,
        deadline: Instant,
    ) -> Result<Vec<Value>, ApiError> {
        let mut values = vec![0; claims.len()];
        let mut given: Vec<Given> = Vec::new();
        for pool in Pool::ALL {
            let of_pool: Vec<usize> = (0..claims.len())
                .filter(|&i| claims[i].pool == pool)
                .collect();
            if of_pool.is_empty() {
                continue;
            }
            let allocator = self.pool(pool);
            let mut wants = Vec::with_capacity(of_pool.len());
            for &i in &of_pool {
                let want = match &claims[i].value {
                    None => None,
                    Some(s) => match allocator.range().parse_value(s) {
                        Some(v) => Some(v),
                        None => {
                            if !dry_run {
                                self.release(&given, deadline).await;
                            }
                            let range = allocator.range();
                            return Err(invalid(
                                pool,
                                range,
                                t,
                                Some(claims[i]),
                                s,
                                Why::NotInRange,
                            ));
                        }
                    },
                };
                wants.push(want);
            }
            let taken = if dry_run {
                allocator.dry_run(Op::Take(wants), deadline).await
            } else {
                allocator.apply(Op::Take(wants), deadline).await
            };
            match taken {
                Ok(taken) => {
                    for (&i, v) in of_pool.iter().zip(taken) {
                        values[i] = v;
                        given.push((pool, v));
                    }
                }
                Err(e) => {
                    if !dry_run {
                        self.release(&given, deadline).await;
                    }
                    let claims: Vec<&Claim> = of_pool.iter().map(|&i| claims[i]).collect();
                    return Err(refusal(pool, allocator.range(), t, &claims, e));
                }
            }
        }
        Ok(values)
    }

    /// Gives `values` back. A failure is logged, not returned: the values stay marked, a leak
    /// the repair controller frees.
    pub async fn release(&self, values: &[Given], deadline: Instant) {
        for pool in Pool::ALL {
            let of_pool: Vec<Value> = values
                .iter()
                .filter(|(p, _)| *p == pool)
                .map(|(_, v)| *v)
                .collect();
            if of_pool.is_empty() {
                continue;
            }
            let allocator = self.pool(pool);
            if let Err(e) = allocator
                .apply(Op::Release(of_pool.clone()), deadline)
                .await
            {
                let shown: Vec<String> =
                    of_pool.iter().map(|v| allocator.range().show(*v)).collect();
                tracing::warn!(range = pool.resource(), values = ?shown, error = %e, "cannot release; the repair controller will");
            }
        }
    }
}

/// Why a value asked for by number cannot be had.
enum Why {
    Allocated,
    NotInRange,
}

/// Kubernetes' `Invalid` for a value asked for: `spec.clusterIPs: Invalid value:
/// []string{"10.96.0.5"}: failed to allocate IP 10.96.0.5: provided IP is already allocated`,
/// `spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated`.
fn invalid(
    pool: Pool,
    range: &Range,
    t: &Target,
    claim: Option<&Claim>,
    shown: &str,
    why: Why,
) -> ApiError {
    let why = match (pool, why) {
        (Pool::ClusterIps, Why::Allocated) => "provided IP is already allocated".to_string(),
        (Pool::NodePorts, Why::Allocated) => "provided port is already allocated".to_string(),
        (Pool::ClusterIps, Why::NotInRange) => format!(
            "the provided IP ({shown}) is not in the valid range. The range of valid IPs is {range}"
        ),
        (Pool::NodePorts, Why::NotInRange) => {
            format!("provided port is not in the valid range. The range of valid ports is {range}")
        }
    };
    let (value, why) = match pool {
        Pool::ClusterIps => (
            format!("[]string{{{:?}}}", keel_api::shorten_name(shown)),
            format!("failed to allocate IP {shown}: {why}"),
        ),
        Pool::NodePorts => (shown.to_string(), why),
    };
    ApiError::invalid(
        t.clone(),
        vec![FieldCause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {value}: {why}"),
            field: claim.map_or("spec", |c| c.field.as_str()).to_string(),
        }],
    )
}

/// The error of an allocation, worded as Kubernetes' service REST words it; `claims` are the
/// pool's claims of the allocation.
fn refusal(pool: Pool, range: &Range, t: &Target, claims: &[&Claim], e: AllocError) -> ApiError {
    let find = |v: Value| {
        claims
            .iter()
            .find(|c| c.value.as_deref().and_then(|s| range.parse_value(s)) == Some(v))
            .copied()
    };
    let internal = |why: String| {
        let noun = match pool {
            Pool::ClusterIps => "serviceIP",
            Pool::NodePorts => "nodePort",
        };
        let mut e = ApiError::internal(format!(
            "Internal error occurred: failed to allocate a {noun}: {why}"
        ));
        e.target = t.clone();
        e
    };
    match e {
        AllocError::Allocated(v) => {
            invalid(pool, range, t, find(v), &range.show(v), Why::Allocated)
        }
        AllocError::NotInRange(v) => {
            invalid(pool, range, t, find(v), &range.show(v), Why::NotInRange)
        }
        AllocError::Full => internal("range is full".into()),
        AllocError::Uninitialized => ApiError::new(
            Reason::ServiceUnavailable,
            t.clone(),
            format!(
                "cannot allocate resources of type {} at this time",
                pool.resource()
            ),
        )
        .retry_after(1),
        AllocError::Mismatch { stored, configured } => internal(format!(
            "the stored range {stored} is not this server's {} {configured}; every API server \
             must have the same",
            pool.flag()
        )),
        AllocError::Corrupt(why) => internal(why),
        AllocError::Storage(e) => e.with_target(t),
    }
}
