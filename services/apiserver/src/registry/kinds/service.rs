//! `v1` Service: its type, ports and policies defaulted and validated as Kubernetes'
//! `SetDefaults_Service` and `ValidateService` have them, and its cluster IP fixed once set.
//! The cluster IP and node ports themselves are allocated by the registry's allocators, from
//! the claims this module reads off a Service ([`Allocations`]).

use std::collections::{HashMap, HashSet};

use keel_api::{FieldCause, Object};
use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, items_mut, set_default, spec_mut};
use crate::registry::allocator::{Allocations, Claim, Pool};

pub const TYPES: &[&str] = &["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];

pub struct Service {
    merge: Option<MergeKeys>,
}

impl Service {
    pub fn new() -> Self {
        Service {
            merge: builtin_merge_keys("v1", "Service"),
        }
    }
}

impl Kind for Service {
    fn initial_status(&self) -> Option<Value> {
        Some(json!({"loadBalancer": {}}))
    }

    fn defaults(&self, obj: &mut Object) {
        let Some(spec) = spec_mut(obj) else {
            return;
        };
        set_default(spec, "type", json!("ClusterIP"));
        set_default(spec, "sessionAffinity", json!("None"));
        let kind = spec
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_string();
        if kind != "ExternalName" {
            set_default(spec, "internalTrafficPolicy", json!("Cluster"));
            // The only family keel serves (Kubernetes sets these as it allocates; a headless
            // Service gets them too).
            set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
            if spec
                .get("ipFamilies")
                .is_none_or(|f| f.is_null() || *f == json!([]))
            {
                spec.insert("ipFamilies".into(), json!(["IPv4"]));
            }
        }
        if kind == "NodePort" || kind == "LoadBalancer" {
            set_default(spec, "externalTrafficPolicy", json!("Cluster"));
        }
        if kind == "LoadBalancer" {
            set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
        }
        for p in items_mut(spec, "ports") {
            set_default(p, "protocol", json!("TCP"));
            let port = p.get("port").cloned().unwrap_or(Value::Null);
            let target = p.entry("targetPort").or_insert(Value::Null);
            if target.is_null() || *target == json!(0) || *target == json!("") {
                *target = port;
            }
        }
        if let Some(Value::String(ip)) = spec.get("clusterIP").cloned()
            && !ip.is_empty()
            && spec.get("clusterIPs").is_none_or(Value::is_null)
        {
            spec.insert("clusterIPs".into(), json!([ip]));
        }
        if spec
            .get("clusterIP")
            .is_none_or(|ip| ip.is_null() || *ip == json!(""))
            && let Some(first) = spec
                .get("clusterIPs")
                .and_then(|ips| ips.get(0))
                .filter(|ip| ip.as_str().is_some_and(|ip| !ip.is_empty()))
                .cloned()
        {
            spec.insert("clusterIP".into(), first);
        }
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        let Some(spec) = obj.as_map().get("spec").and_then(Value::as_object) else {
            causes.push(FieldCause::required("spec"));
            return;
        };
        let kind = spec
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP");
        if !TYPES.contains(&kind) {
            causes.push(FieldCause::not_supported("spec.type", kind, TYPES));
        }
        if let Some(n) = spec.get("healthCheckNodePort").and_then(Value::as_i64)
            && n != 0
            && !needs_health_check(spec)
        {
            causes.push(FieldCause::invalid_value(
                "spec.healthCheckNodePort",
                &Value::from(n),
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            ));
        }
        let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
        if kind == "ExternalName" {
            match spec.get("externalName").and_then(Value::as_str) {
                Some(n) if !n.is_empty() => {}
                _ => causes.push(FieldCause::required("spec.externalName")),
            }
        }
        if headless && (kind == "NodePort" || kind == "LoadBalancer") {
            causes.push(FieldCause::invalid(
                "spec.clusterIPs[0]",
                "None",
                format!("may not be set to 'None' for {kind} services"),
            ));
        }
        validate_cluster_ips(spec, kind, causes);
        let ports = spec.get("ports").and_then(Value::as_array);
        if ports.is_none_or(|p| p.is_empty()) && kind != "ExternalName" && !headless {
            causes.push(FieldCause::required("spec.ports"));
        }
        let many = ports.is_some_and(|p| p.len() > 1);
        let mut names: HashSet<&str> = HashSet::new();
        let mut seen: HashSet<(i64, &str)> = HashSet::new();
        let mut node_ports: HashSet<(i64, &str)> = HashSet::new();
        for (i, p) in ports.into_iter().flatten().enumerate() {
            let path = format!("spec.ports[{i}]");
            let Some(p) = p.as_object() else {
                causes.push(FieldCause::type_error(path, "a service port"));
                continue;
            };
            match p.get("name").and_then(Value::as_str).unwrap_or("") {
                "" if many => causes.push(FieldCause::required(format!("{path}.name"))),
                "" => {}
                n if !names.insert(n) => {
                    causes.push(FieldCause::duplicate(format!("{path}.name"), n))
                }
                _ => {}
            }
            let port = p.get("port").and_then(Value::as_i64);
            match port {
                Some(n) if (1..=65535).contains(&n) => {}
                Some(n) => causes.push(FieldCause::invalid_value(
                    format!("{path}.port"),
                    &Value::from(n),
                    "must be between 1 and 65535, inclusive",
                )),
                None => causes.push(FieldCause::required(format!("{path}.port"))),
            }
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            if !PROTOCOLS.contains(&protocol) {
                causes.push(FieldCause::not_supported(
                    format!("{path}.protocol"),
                    protocol,
                    PROTOCOLS,
                ));
            }
            if let Some(n) = port
                && !seen.insert((n, protocol))
            {
                causes.push(FieldCause::duplicate(
                    path.clone(),
                    &format!("{{{n}, {protocol}}}"),
                ));
            }
            if let Some(n) = p
                .get("nodePort")
                .and_then(Value::as_i64)
                .filter(|n| *n != 0)
                && !node_ports.insert((n, protocol))
            {
                causes.push(FieldCause::duplicate(
                    format!("{path}.nodePort"),
                    &n.to_string(),
                ));
            }
            if p.get("nodePort")
                .is_some_and(|n| n != &json!(0) && !n.is_null())
                && kind != "NodePort"
                && kind != "LoadBalancer"
            {
                causes.push(FieldCause::forbidden(
                    format!("{path}.nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }

    /// An update that leaves out the allocated cluster IP, IP families or node ports keeps
    /// the stored ones (Kubernetes' `patchAllocatedValues`), so that a manifest without them
    /// can be replaced.
    fn prepare_for_update(&self, new: &mut Object, old: &Object, _causes: &mut Vec<FieldCause>) {
        let Some(old_spec) = old.as_map().get("spec").and_then(Value::as_object) else {
            return;
        };
        let Some(spec) = spec_mut(new) else {
            return;
        };
        drop_type_dependent_fields(spec, old_spec);
        let kind = spec
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP");
        if kind == "ExternalName" {
            return;
        }
        let node_ports = kind == "NodePort" || kind == "LoadBalancer";
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            let unset = spec
                .get(field)
                .is_none_or(|v| v.is_null() || *v == json!(""));
            if unset && let Some(v) = old_spec.get(field) {
                spec.insert(field.into(), v.clone());
            }
        }
        if needs_health_check(spec)
            && spec
                .get("healthCheckNodePort")
                .is_none_or(|v| v.is_null() || *v == json!(0))
            && let Some(n) = old_spec.get("healthCheckNodePort").filter(|n| !n.is_null())
        {
            spec.insert("healthCheckNodePort".into(), n.clone());
        }
        if !node_ports {
            return;
        }
        // As Kubernetes: a port without a node port gets the one the stored port of the
        // same name had, unless another port of the update already uses it (a port whose
        // number changed keeps its node port).
        let node_port = |p: &Value| {
            p.get("nodePort")
                .and_then(Value::as_i64)
                .filter(|n| *n != 0)
        };
        let name = |p: &Value| {
            p.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let old_node_ports: HashMap<String, i64> = old_spec
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| Some((name(p), node_port(p)?)))
            .collect();
        let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) else {
            return;
        };
        let mut used: HashSet<i64> = ports.iter().filter_map(node_port).collect();
        for p in ports.iter_mut() {
            if node_port(p).is_some() {
                continue;
            }
            if let Some(&n) = old_node_ports.get(&name(p))
                && used.insert(n)
                && let Some(p) = p.as_object_mut()
            {
                p.insert("nodePort".into(), json!(n));
            }
        }
    }

    /// A cluster IP, once set, stays (unless the Service becomes an ExternalName, which has
    /// none), as Kubernetes' `ValidateServiceUpdate` has it.
    fn validate_update(&self, new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
        let ip = |o: &Object| {
            o.as_map()
                .get("spec")
                .and_then(|s| s.get("clusterIP"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let new_type = new
            .as_map()
            .get("spec")
            .and_then(|s| s.get("type"))
            .and_then(Value::as_str);
        let (was, is) = (ip(old), ip(new));
        // Left out, it is kept (`prepare_for_update`).
        if !was.is_empty() && !is.is_empty() && was != is && new_type != Some("ExternalName") {
            causes.push(FieldCause::invalid(
                "spec.clusterIPs[0]",
                &is,
                "may not change once set",
            ));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }

    fn allocations(&self) -> Option<&dyn Allocations> {
        Some(self)
    }
}

/// A Service's cluster IP and node ports: a cluster IP unless it is headless (`None`) or an
/// ExternalName; a node port per port for NodePort and LoadBalancer (a LoadBalancer with
/// `allocateLoadBalancerNodePorts: false` only those it names).
impl Allocations for Service {
    fn claims(&self, obj: &Object) -> Vec<Claim> {
        let Some(spec) = obj.as_map().get("spec").and_then(Value::as_object) else {
            return Vec::new();
        };
        let kind = spec
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP");
        if !TYPES.contains(&kind) || kind == "ExternalName" {
            return Vec::new();
        }
        let mut claims = Vec::new();
        let ip = spec
            .get("clusterIP")
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty());
        if ip != Some("None") {
            claims.push(Claim {
                pool: Pool::ClusterIps,
                field: "spec.clusterIPs".into(),
                at: 0,
                value: ip.map(str::to_string),
            });
        }
        if kind != "NodePort" && kind != "LoadBalancer" {
            return claims;
        }
        let any =
            kind == "NodePort" || spec.get("allocateLoadBalancerNodePorts") != Some(&json!(false));
        for (i, p) in spec
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let value = p
                .get("nodePort")
                .and_then(Value::as_i64)
                .filter(|n| *n != 0)
                .map(|n| n.to_string());
            if value.is_some() || any {
                claims.push(Claim {
                    pool: Pool::NodePorts,
                    field: format!("spec.ports[{i}].nodePort"),
                    at: i,
                    value,
                });
            }
        }
        if needs_health_check(spec) {
            claims.push(Claim {
                pool: Pool::NodePorts,
                field: HEALTH_CHECK.into(),
                at: usize::MAX,
                value: spec
                    .get("healthCheckNodePort")
                    .and_then(Value::as_i64)
                    .filter(|n| *n != 0)
                    .map(|n| n.to_string()),
            });
        }
        claims
    }

    fn assign(&self, obj: &mut Object, claim: &Claim, value: &str) {
        let Some(spec) = spec_mut(obj) else {
            return;
        };
        match claim.pool {
            Pool::ClusterIps => {
                spec.insert("clusterIP".into(), json!(value));
                spec.insert("clusterIPs".into(), json!([value]));
            }
            Pool::NodePorts if claim.field == HEALTH_CHECK => {
                if let Ok(n) = value.parse::<i64>() {
                    spec.insert("healthCheckNodePort".into(), json!(n));
                }
            }
            Pool::NodePorts => {
                if let (Some(port), Ok(n)) = (
                    spec.get_mut("ports")
                        .and_then(|p| p.get_mut(claim.at))
                        .and_then(Value::as_object_mut),
                    value.parse::<i64>(),
                ) {
                    port.insert("nodePort".into(), json!(n));
                }
            }
        }
    }
}

/// Where a LoadBalancer Service that keeps traffic on its nodes (`externalTrafficPolicy:
/// Local`) has the node port its load balancer checks nodes' health on.
const HEALTH_CHECK: &str = "spec.healthCheckNodePort";

/// Whether a Service has a health check node port (Kubernetes' `needsHCHealthCheck`).
fn needs_health_check(spec: &serde_json::Map<String, Value>) -> bool {
    spec.get("type").and_then(Value::as_str) == Some("LoadBalancer")
        && spec.get("externalTrafficPolicy").and_then(Value::as_str) == Some("Local")
}

/// `spec.clusterIP` and `clusterIPs`: an IP, or `None` (headless), one family (IPv4: keel
/// serves no other), the same in both; none for an ExternalName.
fn validate_cluster_ips(
    spec: &serde_json::Map<String, Value>,
    kind: &str,
    causes: &mut Vec<FieldCause>,
) {
    let ip = spec.get("clusterIP").and_then(Value::as_str).unwrap_or("");
    if kind == "ExternalName" {
        if !ip.is_empty() {
            causes.push(FieldCause::forbidden(
                "spec.clusterIPs",
                "may not be set for ExternalName services",
            ));
        }
        return;
    }
    if !ip.is_empty() && ip != "None" && ip.parse::<std::net::IpAddr>().is_err() {
        causes.push(FieldCause::invalid(
            "spec.clusterIPs[0]",
            ip,
            "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
        ));
    }
    let ips = spec.get("clusterIPs").and_then(Value::as_array);
    if let Some(first) = ips.and_then(|ips| ips.first()).and_then(Value::as_str)
        && first != ip
    {
        causes.push(FieldCause::invalid(
            "spec.clusterIPs[0]",
            first,
            "must be the same as spec.clusterIP",
        ));
    }
    if ips.is_some_and(|ips| ips.len() > 1) {
        causes.push(FieldCause::invalid(
            "spec.clusterIPs",
            &Value::from(ips.cloned().unwrap_or_default()).to_string(),
            "this cluster is not configured for dual-stack services",
        ));
    }
    if spec.get("ipFamilyPolicy").and_then(Value::as_str) == Some("RequireDualStack") {
        causes.push(FieldCause::invalid(
            "spec.ipFamilyPolicy",
            "RequireDualStack",
            "this cluster is not configured for dual-stack services",
        ));
    }
    for (i, family) in spec
        .get("ipFamilies")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if family.as_str() != Some("IPv4") {
            causes.push(FieldCause::invalid(
                format!("spec.ipFamilies[{i}]"),
                &family
                    .as_str()
                    .map_or_else(|| family.to_string(), str::to_string),
                "not configured on this cluster (keel serves IPv4 only)",
            ));
        }
    }
}

/// On a change of type, what the old type had and the new one does not take, left as it was
/// by the client (Kubernetes' `dropTypeDependentFields`): the cluster IP and its families when
/// it becomes an ExternalName, the node ports when it stops being a NodePort or LoadBalancer.
/// The registry then releases them.
fn drop_type_dependent_fields(
    spec: &mut serde_json::Map<String, Value>,
    old: &serde_json::Map<String, Value>,
) {
    let type_of = |s: &serde_json::Map<String, Value>| {
        s.get("type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_string()
    };
    let (was, is) = (type_of(old), type_of(spec));
    let same = |field: &str, s: &serde_json::Map<String, Value>| s.get(field) == old.get(field);
    if was != "ExternalName" && is == "ExternalName" {
        if same("clusterIP", spec) && same("clusterIPs", spec) {
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
        for field in ["ipFamilies", "ipFamilyPolicy"] {
            if same(field, spec) {
                spec.remove(field);
            }
        }
    }
    let node_ports = |t: &str| t == "NodePort" || t == "LoadBalancer";
    let ports = |s: &serde_json::Map<String, Value>| -> Vec<Value> {
        s.get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| p.get("nodePort").cloned().unwrap_or(Value::Null))
            .collect()
    };
    if !needs_health_check(spec)
        && spec.get("healthCheckNodePort") == old.get("healthCheckNodePort")
    {
        spec.remove("healthCheckNodePort");
    }
    if node_ports(&was) && !node_ports(&is) && ports(spec) == ports(old) {
        for p in items_mut(spec, "ports") {
            p.remove("nodePort");
        }
    }
}
