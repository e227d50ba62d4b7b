//! The cells of each kind's row, as kubectl 1.32 prints them
//! (`pkg/printers/internalversion/printers.go`).

use std::time::SystemTime;

use keel_api::selector::label_selector;
use serde_json::Value;

use crate::age;
use crate::table::{Layout, text};

/// The cells after NAME (AGE included, where the kind has it).
pub(crate) fn cells(layout: Layout, o: &Value, now: SystemTime) -> Vec<String> {
    let meta = &o["metadata"];
    let age = || age::since(meta["creationTimestamp"].as_str(), now);
    let (spec, status) = (&o["spec"], &o["status"]);
    let count = |v: &Value| v.as_object().map_or(0, |m| m.len()) + v.as_array().map_or(0, Vec::len);
    match layout {
        Layout::Pod => {
            let (ready, total) = pod_ready(o);
            vec![
                format!("{ready}/{total}"),
                pod_status(o),
                pod_restarts(o).to_string(),
                age(),
            ]
        }
        Layout::Deployment => vec![
            format!(
                "{}/{}",
                int(&status["readyReplicas"]),
                int(&spec["replicas"])
            ),
            int(&status["updatedReplicas"]).to_string(),
            int(&status["availableReplicas"]).to_string(),
            age(),
        ],
        Layout::ReplicaSet => vec![
            int(&spec["replicas"]).to_string(),
            int(&status["replicas"]).to_string(),
            int(&status["readyReplicas"]).to_string(),
            age(),
        ],
        Layout::ConfigMap => vec![
            (count(&o["data"]) + count(&o["binaryData"])).to_string(),
            age(),
        ],
        Layout::Namespace => vec![text(&status["phase"]), age()],
        Layout::Lease => vec![or_none(&spec["holderIdentity"]), age()],
        Layout::Secret => vec![text(&o["type"]), count(&o["data"]).to_string(), age()],
        Layout::ServiceAccount => vec![count(&o["secrets"]).to_string(), age()],
        Layout::Service => vec![
            text(&spec["type"]),
            or_none(&spec["clusterIP"]),
            service_external_ip(o),
            service_ports(spec),
            age(),
        ],
        Layout::Endpoints => vec![endpoints(o), age()],
        Layout::PersistentVolumeClaim => {
            let phase = text(&status["phase"]);
            let bound = phase == "Bound";
            vec![
                phase,
                text(&spec["volumeName"]),
                if bound {
                    text(&status["capacity"]["storage"])
                } else {
                    String::new()
                },
                if bound {
                    access_modes(&status["accessModes"])
                } else {
                    String::new()
                },
                storage_class(o, &spec["storageClassName"]),
                or(&spec["volumeAttributesClassName"], "<unset>"),
                age(),
            ]
        }
        Layout::PersistentVolume => {
            let claim = match (
                spec["claimRef"]["namespace"].as_str(),
                spec["claimRef"]["name"].as_str(),
            ) {
                (Some(ns), Some(n)) => format!("{ns}/{n}"),
                _ => String::new(),
            };
            vec![
                text(&spec["capacity"]["storage"]),
                access_modes(&spec["accessModes"]),
                text(&spec["persistentVolumeReclaimPolicy"]),
                text(&status["phase"]),
                claim,
                storage_class(o, &spec["storageClassName"]),
                or(&spec["volumeAttributesClassName"], "<unset>"),
                text(&status["reason"]),
                age(),
            ]
        }
        Layout::ResourceQuota => {
            let (requests, limits) = quota(o);
            vec![age(), requests, limits]
        }
        Layout::LimitRange => vec![text(&meta["creationTimestamp"])],
        Layout::Node => vec![
            node_status(o),
            node_roles(o),
            age(),
            text(&status["nodeInfo"]["kubeletVersion"]),
        ],
        Layout::StatefulSet => vec![
            format!(
                "{}/{}",
                int(&status["readyReplicas"]),
                int(&spec["replicas"])
            ),
            age(),
        ],
        Layout::DaemonSet => vec![
            int(&status["desiredNumberScheduled"]).to_string(),
            int(&status["currentNumberScheduled"]).to_string(),
            int(&status["numberReady"]).to_string(),
            int(&status["updatedNumberScheduled"]).to_string(),
            int(&status["numberAvailable"]).to_string(),
            map_or_none(&spec["template"]["spec"]["nodeSelector"]),
            age(),
        ],
        Layout::ControllerRevision => {
            let controller = o["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["controller"] == true)
                .map_or("<none>".to_string(), |r| {
                    let group = text(&r["apiVersion"]);
                    let group = group.rsplit_once('/').map_or("", |(g, _)| g);
                    let kind = text(&r["kind"]).to_lowercase();
                    let kind = if group.is_empty() {
                        kind
                    } else {
                        format!("{kind}.{group}")
                    };
                    format!("{kind}/{}", text(&r["name"]))
                });
            vec![controller, int(&o["revision"]).to_string(), age()]
        }
        Layout::Job => vec![
            job_status(o),
            format!(
                "{}/{}",
                int(&status["succeeded"]),
                spec["completions"]
                    .as_i64()
                    .map_or("1".to_string(), |n| n.to_string())
            ),
            job_duration(o, now),
            age(),
        ],
        Layout::CronJob => vec![
            text(&spec["schedule"]),
            or_none(&spec["timeZone"]),
            spec["suspend"].as_bool().unwrap_or(false).to_string(),
            status["active"].as_array().map_or(0, Vec::len).to_string(),
            match status["lastScheduleTime"].as_str() {
                Some(t) => age::since(Some(t), now),
                None => "<none>".into(),
            },
            age(),
        ],
        Layout::Ingress => vec![
            or_none(&spec["ingressClassName"]),
            ingress_hosts(spec),
            load_balancer(status),
            if spec["tls"].as_array().is_some_and(|t| !t.is_empty()) {
                "80, 443".into()
            } else {
                "80".into()
            },
            age(),
        ],
        Layout::IngressClass => {
            let p = &spec["parameters"];
            let parameters = match (p["kind"].as_str(), p["name"].as_str()) {
                (Some(k), Some(n)) => match p["apiGroup"].as_str() {
                    Some(g) if !g.is_empty() => format!("{k}.{g}/{n}"),
                    _ => format!("{k}/{n}"),
                },
                _ => "<none>".into(),
            };
            vec![text(&spec["controller"]), parameters, age()]
        }
        Layout::NetworkPolicy => vec![selector(&spec["podSelector"]), age()],
        Layout::EndpointSlice => vec![
            text(&o["addressType"]),
            slice_ports(o),
            slice_endpoints(o),
            age(),
        ],
        Layout::HorizontalPodAutoscaler => vec![
            format!(
                "{}/{}",
                text(&spec["scaleTargetRef"]["kind"]),
                text(&spec["scaleTargetRef"]["name"])
            ),
            hpa_targets(o),
            spec["minReplicas"]
                .as_i64()
                .map_or("<unset>".into(), |n| n.to_string()),
            int(&spec["maxReplicas"]).to_string(),
            int(&status["currentReplicas"]).to_string(),
            age(),
        ],
        Layout::PodDisruptionBudget => vec![
            or(&spec["minAvailable"], "N/A"),
            or(&spec["maxUnavailable"], "N/A"),
            int(&status["disruptionsAllowed"]).to_string(),
            age(),
        ],
        Layout::PriorityClass => vec![
            int(&o["value"]).to_string(),
            o["globalDefault"].as_bool().unwrap_or(false).to_string(),
            age(),
            text(&o["preemptionPolicy"]),
        ],
        Layout::StorageClass => vec![
            text(&o["provisioner"]),
            text(&o["reclaimPolicy"]),
            text(&o["volumeBindingMode"]),
            o["allowVolumeExpansion"]
                .as_bool()
                .unwrap_or(false)
                .to_string(),
            age(),
        ],
        Layout::WebhookConfiguration => vec![count(&o["webhooks"]).to_string(), age()],
        Layout::ValidatingAdmissionPolicy => {
            let k = &spec["paramKind"];
            let param_kind = match (k["apiVersion"].as_str(), k["kind"].as_str()) {
                (Some(v), Some(kind)) => format!("{v}/{kind}"),
                _ => "<unset>".into(),
            };
            vec![count(&spec["validations"]).to_string(), param_kind, age()]
        }
        Layout::ValidatingAdmissionPolicyBinding => {
            let r = &spec["paramRef"];
            let param_ref = match (r["name"].as_str().filter(|n| !n.is_empty()), &r["selector"]) {
                (Some(name), _) => match r["namespace"].as_str().filter(|n| !n.is_empty()) {
                    Some(ns) => format!("{ns}/{name}"),
                    None => format!("*/{name}"),
                },
                (None, sel) if sel.is_object() => selector(sel),
                _ => "<unset>".into(),
            };
            vec![text(&spec["policyName"]), param_ref, age()]
        }
        Layout::Other => vec![age()],
    }
}

/// The cells `-o wide` adds.
pub(crate) fn wide_cells(layout: Layout, o: &Value) -> Vec<String> {
    let (spec, status) = (&o["spec"], &o["status"]);
    match layout {
        Layout::Pod => vec![
            or_none(&status["podIP"]),
            or_none(&spec["nodeName"]),
            or_none(&status["nominatedNodeName"]),
            readiness_gates(o),
        ],
        Layout::Deployment | Layout::ReplicaSet | Layout::DaemonSet | Layout::Job => {
            let mut c = containers(&spec["template"]["spec"]);
            c.push(selector(&spec["selector"]));
            c
        }
        Layout::CronJob => {
            let job = &spec["jobTemplate"]["spec"];
            let mut c = containers(&job["template"]["spec"]);
            c.push(selector(&job["selector"]));
            c
        }
        Layout::StatefulSet => containers(&spec["template"]["spec"]),
        Layout::Service => vec![map_or_none(&spec["selector"])],
        Layout::PersistentVolumeClaim | Layout::PersistentVolume => vec![text(&spec["volumeMode"])],
        Layout::Node => {
            let address = |t: &str| {
                status["addresses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|a| a["type"] == t)
                    .map_or("<none>".into(), |a| text(&a["address"]))
            };
            let info = &status["nodeInfo"];
            vec![
                address("InternalIP"),
                address("ExternalIP"),
                or(&info["osImage"], "<unknown>"),
                or(&info["kernelVersion"], "<unknown>"),
                or(&info["containerRuntimeVersion"], "<unknown>"),
            ]
        }
        _ => Vec::new(),
    }
}

/// CONTAINERS and IMAGES of a pod spec.
fn containers(pod_spec: &Value) -> Vec<String> {
    let list = pod_spec["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let join = |field: &str| {
        list.iter()
            .map(|c| text(&c[field]))
            .collect::<Vec<_>>()
            .join(",")
    };
    vec![join("name"), join("image")]
}

fn or_none(v: &Value) -> String {
    or(v, "<none>")
}

/// The value's text, or `placeholder` when it has none (`<unset>`, `<unknown>`, `N/A`).
fn or(v: &Value, placeholder: &str) -> String {
    match text(v) {
        s if s.is_empty() => placeholder.into(),
        s => s,
    }
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// A string map as `k=v,k2=v2` (sorted), or `<none>`.
fn map_or_none(v: &Value) -> String {
    let Some(m) = v.as_object().filter(|m| !m.is_empty()) else {
        return "<none>".into();
    };
    let mut pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", text(v))).collect();
    pairs.sort();
    pairs.join(",")
}

fn service_external_ip(svc: &Value) -> String {
    let spec = &svc["spec"];
    let external: Vec<String> = spec["externalIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    match spec["type"].as_str().unwrap_or("ClusterIP") {
        "ExternalName" => text(&spec["externalName"]),
        "LoadBalancer" => {
            let mut ips = external;
            ips.extend(lb_ingress(&svc["status"]));
            if ips.is_empty() {
                "<pending>".into()
            } else {
                ips.join(",")
            }
        }
        _ if !external.is_empty() => external.join(","),
        _ => "<none>".into(),
    }
}

fn lb_ingress(status: &Value) -> Vec<String> {
    status["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            let ip = text(&i["ip"]);
            if ip.is_empty() {
                text(&i["hostname"])
            } else {
                ip
            }
        })
        .filter(|s| !s.is_empty())
        .collect()
}

fn load_balancer(status: &Value) -> String {
    lb_ingress(status).join(",")
}

/// `80/TCP,443:30443/TCP`, or `<none>`.
fn service_ports(spec: &Value) -> String {
    let ports: Vec<String> = spec["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let protocol = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64().filter(|n| *n != 0) {
                Some(node) => format!("{}:{node}/{protocol}", int(&p["port"])),
                None => format!("{}/{protocol}", int(&p["port"])),
            }
        })
        .collect();
    if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    }
}

/// Up to three `ip:port` pairs and `+ N more...`, as kubectl's `formatEndpoints`.
fn endpoints(o: &Value) -> String {
    let mut all = Vec::new();
    for subset in o["subsets"].as_array().into_iter().flatten() {
        let ports: Vec<i64> = subset["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| int(&p["port"]))
            .collect();
        for a in subset["addresses"].as_array().into_iter().flatten() {
            let ip = text(&a["ip"]);
            if ports.is_empty() {
                all.push(ip.clone());
            }
            for p in &ports {
                all.push(format!("{ip}:{p}"));
            }
        }
    }
    shown(all)
}

fn shown(all: Vec<String>) -> String {
    match all.len() {
        0 => "<none>".into(),
        n if n > 3 => format!("{} + {} more...", all[..3].join(","), n - 3),
        _ => all.join(","),
    }
}

fn slice_ports(o: &Value) -> String {
    let ports: Vec<String> = o["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| int(&p["port"]).to_string())
        .collect();
    if ports.is_empty() {
        "<unset>".into()
    } else {
        ports.join(",")
    }
}

fn slice_endpoints(o: &Value) -> String {
    let all = o["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .map(|a| text(&a))
        .collect();
    shown(all)
}

/// RWO, ROX, RWX, RWOP.
fn access_modes(modes: &Value) -> String {
    modes
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| match m.as_str()? {
            "ReadWriteOnce" => Some("RWO"),
            "ReadOnlyMany" => Some("ROX"),
            "ReadWriteMany" => Some("RWX"),
            "ReadWriteOncePod" => Some("RWOP"),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn storage_class(o: &Value, name: &Value) -> String {
    let beta = &o["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"];
    match text(name) {
        s if s.is_empty() => or_none(beta),
        s => s,
    }
}

/// `pods: 1/10, services: 0/5` for requests, limits apart.
fn quota(o: &Value) -> (String, String) {
    let hard = o["status"]["hard"]
        .as_object()
        .or(o["spec"]["hard"].as_object());
    let used = &o["status"]["used"];
    let mut requests = Vec::new();
    let mut limits = Vec::new();
    let mut keys: Vec<&String> = hard.into_iter().flat_map(|h| h.keys()).collect();
    keys.sort();
    for k in keys {
        let h = hard.map_or(String::new(), |h| text(&h[k.as_str()]));
        let u = match text(&used[k.as_str()]) {
            s if s.is_empty() => "0".to_string(),
            s => s,
        };
        let cell = format!("{k}: {u}/{h}");
        if k.starts_with("limits.") {
            limits.push(cell);
        } else {
            requests.push(cell);
        }
    }
    (requests.join(", "), limits.join(", "))
}

fn node_status(o: &Value) -> String {
    let ready = o["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| match c["status"].as_str() {
            Some("True") => "Ready",
            Some("False") => "NotReady",
            _ => "Unknown",
        })
        .unwrap_or("Unknown");
    if o["spec"]["unschedulable"] == true {
        format!("{ready},SchedulingDisabled")
    } else {
        ready.into()
    }
}

fn node_roles(o: &Value) -> String {
    let mut roles: Vec<&str> = o["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort();
    if roles.is_empty() {
        "<none>".into()
    } else {
        roles.join(",")
    }
}

/// The Job's STATUS: its terminal condition, Suspended, or Running.
fn job_status(o: &Value) -> String {
    let conditions = o["status"]["conditions"].as_array();
    let has = |t: &str| {
        conditions
            .into_iter()
            .flatten()
            .any(|c| c["type"] == t && c["status"] == "True")
    };
    for t in [
        "Failed",
        "Complete",
        "Suspended",
        "FailureTarget",
        "SuccessCriteriaMet",
    ] {
        if has(t) {
            return t.into();
        }
    }
    if o["metadata"]["deletionTimestamp"].is_string() {
        return "Terminating".into();
    }
    "Running".into()
}

fn job_duration(o: &Value, now: SystemTime) -> String {
    let status = &o["status"];
    let time = |v: &Value| {
        v.as_str()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
    };
    let Some(start) = time(&status["startTime"]) else {
        return String::new();
    };
    let end = time(&status["completionTime"]).unwrap_or(now);
    let seconds = end.duration_since(start).unwrap_or_default().as_secs();
    age::human(i64::try_from(seconds).unwrap_or(i64::MAX))
}

fn ingress_hosts(spec: &Value) -> String {
    let hosts: Vec<String> = spec["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["host"].as_str().map(str::to_string))
        .collect();
    match hosts.len() {
        0 => "*".into(),
        n if n > 4 => format!("{} + {} more...", hosts[..4].join(","), n - 4),
        _ => hosts.join(","),
    }
}

/// `cpu: <unknown>/80%` for each metric the HPA has, as kubectl prints before any reading.
fn hpa_targets(o: &Value) -> String {
    let current = o["status"]["currentMetrics"].as_array();
    let metrics: Vec<String> = o["spec"]["metrics"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, m)| {
            let resource = &m["resource"];
            let target = &resource["target"];
            let now = current
                .and_then(|c| c.get(i))
                .map(|c| &c["resource"]["current"]);
            match target["averageUtilization"].as_i64() {
                Some(u) => {
                    let seen = now
                        .and_then(|c| c["averageUtilization"].as_i64())
                        .map_or("<unknown>".to_string(), |n| format!("{n}%"));
                    format!("{}: {seen}/{u}%", text(&resource["name"]))
                }
                None => {
                    let want = text(&target["averageValue"]);
                    let want = if want.is_empty() {
                        text(&target["value"])
                    } else {
                        want
                    };
                    format!("{}: <unknown>/{want}", text(&resource["name"]))
                }
            }
        })
        .collect();
    match o["spec"]["targetCPUUtilizationPercentage"].as_i64() {
        // autoscaling/v1's one target.
        Some(u) if metrics.is_empty() => {
            let seen = o["status"]["currentCPUUtilizationPercentage"]
                .as_i64()
                .map_or("<unknown>".to_string(), |n| format!("{n}%"));
            format!("cpu: {seen}/{u}%")
        }
        _ if metrics.is_empty() => "<none>".into(),
        _ => metrics.join(", "),
    }
}

fn pod_ready(pod: &Value) -> (usize, usize) {
    let total = pod["spec"]["containers"].as_array().map_or(0, Vec::len);
    let ready = pod["status"]["containerStatuses"]
        .as_array()
        .map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
    (ready, total)
}

fn pod_restarts(pod: &Value) -> i64 {
    pod["status"]["containerStatuses"]
        .as_array()
        .map_or(0, |s| s.iter().map(|c| int(&c["restartCount"])).sum())
}

/// kubectl's STATUS: the phase, or a more telling reason (a container waiting on
/// `ImagePullBackOff`, `Terminating` once deletion began).
fn pod_status(pod: &Value) -> String {
    let status = &pod["status"];
    let mut reason = text(&status["phase"]);
    if let Some(r) = status["reason"].as_str().filter(|r| !r.is_empty()) {
        reason = r.to_string();
    }
    for c in status["containerStatuses"].as_array().into_iter().flatten() {
        let state = &c["state"];
        let why = state["waiting"]["reason"]
            .as_str()
            .or_else(|| state["terminated"]["reason"].as_str());
        if let Some(why) = why.filter(|w| !w.is_empty()) {
            reason = why.to_string();
        }
    }
    if pod["metadata"]["deletionTimestamp"].is_string() {
        reason = "Terminating".into();
    }
    if reason.is_empty() {
        "Unknown".into()
    } else {
        reason
    }
}

fn readiness_gates(pod: &Value) -> String {
    let gates = pod["spec"]["readinessGates"].as_array().map_or(0, Vec::len);
    if gates == 0 {
        return "<none>".into();
    }
    let conditions = pod["status"]["conditions"].as_array();
    let true_gates = pod["spec"]["readinessGates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| {
            conditions
                .into_iter()
                .flatten()
                .any(|c| c["type"] == g["conditionType"] && c["status"].as_str() == Some("True"))
        })
        .count();
    format!("{true_gates}/{gates}")
}

/// A label selector as kubectl prints it: `app=nginx,tier in (a,b)`.
pub(crate) fn selector(sel: &Value) -> String {
    match label_selector(sel) {
        s if s.is_empty() => "<none>".into(),
        s => s,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::table::Columns;

    fn table(group: &str, kind: &str, o: serde_json::Value, wide: bool) -> Vec<(String, String)> {
        let c = Columns::new(group, kind, &[], wide, false, None);
        let now = std::time::SystemTime::now();
        c.header().into_iter().zip(c.row(&o, now)).collect()
    }

    fn cell(t: &[(String, String)], column: &str) -> String {
        t.iter()
            .find(|(h, _)| h == column)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    #[test]
    fn admission_configurations_show_their_webhooks_validations_and_params() {
        let g = "admissionregistration.k8s.io";
        let hooks = json!({"metadata": {"name": "w"}, "webhooks": [{"name": "a"}, {"name": "b"}]});
        assert_eq!(
            cell(
                &table(g, "ValidatingWebhookConfiguration", hooks, false),
                "WEBHOOKS"
            ),
            "2"
        );
        let policy = json!({"metadata": {"name": "p"}, "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "validations": [{"expression": "true"}]}});
        let t = table(g, "ValidatingAdmissionPolicy", policy, false);
        assert_eq!(
            (cell(&t, "VALIDATIONS"), cell(&t, "PARAMKIND")),
            ("1".to_string(), "v1/ConfigMap".to_string())
        );
        let unset = json!({"metadata": {"name": "p"}, "spec": {}});
        assert_eq!(
            cell(
                &table(g, "ValidatingAdmissionPolicy", unset, false),
                "PARAMKIND"
            ),
            "<unset>"
        );
        for (param_ref, want) in [
            (
                json!({"name": "limits", "namespace": "team-a"}),
                "team-a/limits",
            ),
            (json!({"name": "limits"}), "*/limits"),
            (
                json!({"selector": {"matchLabels": {"tier": "gold"}}}),
                "tier=gold",
            ),
            (serde_json::Value::Null, "<unset>"),
        ] {
            let b = json!({"metadata": {"name": "b"},
                "spec": {"policyName": "p", "paramRef": param_ref}});
            let t = table(g, "ValidatingAdmissionPolicyBinding", b, false);
            assert_eq!(cell(&t, "POLICYNAME"), "p");
            assert_eq!(cell(&t, "PARAMREF"), want);
        }
    }

    #[test]
    fn services_show_type_ip_ports_and_selector() {
        let svc = json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort",
            "clusterIP": "10.96.0.10", "selector": {"app": "web"},
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080},
                      {"port": 53, "protocol": "UDP"}]}});
        let t = table("", "Service", svc, true);
        let headers: Vec<&str> = t.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(
            headers,
            [
                "NAME",
                "TYPE",
                "CLUSTER-IP",
                "EXTERNAL-IP",
                "PORT(S)",
                "AGE",
                "SELECTOR"
            ]
        );
        assert_eq!(cell(&t, "CLUSTER-IP"), "10.96.0.10");
        assert_eq!(cell(&t, "EXTERNAL-IP"), "<none>");
        assert_eq!(cell(&t, "PORT(S)"), "80:30080/TCP,53/UDP");
        assert_eq!(cell(&t, "SELECTOR"), "app=web");
        let lb = json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer"}});
        assert_eq!(
            cell(&table("", "Service", lb, false), "EXTERNAL-IP"),
            "<pending>"
        );
    }

    #[test]
    fn secrets_jobs_and_quotas_show_kubectls_cells() {
        let secret =
            json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"a": "", "b": ""}});
        let t = table("", "Secret", secret, false);
        assert_eq!(
            (cell(&t, "TYPE"), cell(&t, "DATA")),
            ("Opaque".into(), "2".into())
        );
        let job = json!({"metadata": {"name": "j"}, "spec": {"completions": 3},
            "status": {"succeeded": 1, "startTime": "2026-01-01T00:00:00Z",
                       "completionTime": "2026-01-01T00:01:05Z",
                       "conditions": [{"type": "Complete", "status": "True"}]}});
        let t = table("batch", "Job", job, false);
        assert_eq!(cell(&t, "STATUS"), "Complete");
        assert_eq!(cell(&t, "COMPLETIONS"), "1/3");
        assert_eq!(cell(&t, "DURATION"), "65s");
        let quota = json!({"metadata": {"name": "q"}, "status": {
            "hard": {"pods": "10", "limits.cpu": "2"}, "used": {"pods": "1"}}});
        let t = table("", "ResourceQuota", quota, false);
        assert_eq!(cell(&t, "REQUEST"), "pods: 1/10");
        assert_eq!(cell(&t, "LIMIT"), "limits.cpu: 0/2");
        let headers: Vec<String> = t.into_iter().map(|(h, _)| h).collect();
        assert_eq!(headers, ["NAME", "AGE", "REQUEST", "LIMIT"]);
    }
}
