//! The tables of `get`: the columns kubectl shows for each kind and their cells, as keelctl
//! prints them and as the API server answers `as=Table` (Kubernetes' server-side printing).

use std::time::SystemTime;

use serde_json::Value;

use crate::{age, cells};

/// The kinds with columns of their own; everything else shows NAME and AGE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    Pod,
    Deployment,
    ReplicaSet,
    ConfigMap,
    Namespace,
    Lease,
    Secret,
    ServiceAccount,
    Service,
    Endpoints,
    PersistentVolumeClaim,
    PersistentVolume,
    ResourceQuota,
    LimitRange,
    Node,
    StatefulSet,
    DaemonSet,
    ControllerRevision,
    Job,
    CronJob,
    Ingress,
    IngressClass,
    NetworkPolicy,
    EndpointSlice,
    HorizontalPodAutoscaler,
    PodDisruptionBudget,
    PriorityClass,
    StorageClass,
    WebhookConfiguration,
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
    Other,
}

impl Layout {
    fn of(group: &str, kind: &str) -> Layout {
        match (group, kind) {
            ("", "Pod") => Layout::Pod,
            ("apps", "Deployment") => Layout::Deployment,
            ("apps", "ReplicaSet") => Layout::ReplicaSet,
            ("", "ConfigMap") => Layout::ConfigMap,
            ("", "Namespace") => Layout::Namespace,
            ("coordination.k8s.io", "Lease") => Layout::Lease,
            ("", "Secret") => Layout::Secret,
            ("", "ServiceAccount") => Layout::ServiceAccount,
            ("", "Service") => Layout::Service,
            ("", "Endpoints") => Layout::Endpoints,
            ("", "PersistentVolumeClaim") => Layout::PersistentVolumeClaim,
            ("", "PersistentVolume") => Layout::PersistentVolume,
            ("", "ResourceQuota") => Layout::ResourceQuota,
            ("", "LimitRange") => Layout::LimitRange,
            ("", "Node") => Layout::Node,
            ("apps", "StatefulSet") => Layout::StatefulSet,
            ("apps", "DaemonSet") => Layout::DaemonSet,
            ("apps", "ControllerRevision") => Layout::ControllerRevision,
            ("batch", "Job") => Layout::Job,
            ("batch", "CronJob") => Layout::CronJob,
            ("networking.k8s.io", "Ingress") => Layout::Ingress,
            ("networking.k8s.io", "IngressClass") => Layout::IngressClass,
            ("networking.k8s.io", "NetworkPolicy") => Layout::NetworkPolicy,
            ("discovery.k8s.io", "EndpointSlice") => Layout::EndpointSlice,
            ("autoscaling", "HorizontalPodAutoscaler") => Layout::HorizontalPodAutoscaler,
            ("policy", "PodDisruptionBudget") => Layout::PodDisruptionBudget,
            ("scheduling.k8s.io", "PriorityClass") => Layout::PriorityClass,
            ("storage.k8s.io", "StorageClass") => Layout::StorageClass,
            (
                "admissionregistration.k8s.io",
                "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration",
            ) => Layout::WebhookConfiguration,
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
                Layout::ValidatingAdmissionPolicy
            }
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
                Layout::ValidatingAdmissionPolicyBinding
            }
            _ => Layout::Other,
        }
    }

    /// kubectl 1.32's columns after NAME (`pkg/printers/internalversion/printers.go`).
    fn columns(self) -> &'static [&'static str] {
        match self {
            Layout::Pod => &["READY", "STATUS", "RESTARTS", "AGE"],
            Layout::Deployment => &["READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
            Layout::ReplicaSet => &["DESIRED", "CURRENT", "READY", "AGE"],
            Layout::ConfigMap => &["DATA", "AGE"],
            Layout::Namespace => &["STATUS", "AGE"],
            Layout::Lease => &["HOLDER", "AGE"],
            Layout::Secret => &["TYPE", "DATA", "AGE"],
            Layout::ServiceAccount => &["SECRETS", "AGE"],
            Layout::Service => &["TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"],
            Layout::Endpoints => &["ENDPOINTS", "AGE"],
            Layout::PersistentVolumeClaim => &[
                "STATUS",
                "VOLUME",
                "CAPACITY",
                "ACCESS MODES",
                "STORAGECLASS",
                "VOLUMEATTRIBUTESCLASS",
                "AGE",
            ],
            Layout::PersistentVolume => &[
                "CAPACITY",
                "ACCESS MODES",
                "RECLAIM POLICY",
                "STATUS",
                "CLAIM",
                "STORAGECLASS",
                "VOLUMEATTRIBUTESCLASS",
                "REASON",
                "AGE",
            ],
            Layout::ResourceQuota => &["AGE", "REQUEST", "LIMIT"],
            Layout::LimitRange => &["CREATED AT"],
            Layout::Node => &["STATUS", "ROLES", "AGE", "VERSION"],
            Layout::StatefulSet => &["READY", "AGE"],
            Layout::DaemonSet => &[
                "DESIRED",
                "CURRENT",
                "READY",
                "UP-TO-DATE",
                "AVAILABLE",
                "NODE SELECTOR",
                "AGE",
            ],
            Layout::ControllerRevision => &["CONTROLLER", "REVISION", "AGE"],
            Layout::Job => &["STATUS", "COMPLETIONS", "DURATION", "AGE"],
            Layout::CronJob => &[
                "SCHEDULE",
                "TIMEZONE",
                "SUSPEND",
                "ACTIVE",
                "LAST SCHEDULE",
                "AGE",
            ],
            Layout::Ingress => &["CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"],
            Layout::IngressClass => &["CONTROLLER", "PARAMETERS", "AGE"],
            Layout::NetworkPolicy => &["POD-SELECTOR", "AGE"],
            Layout::EndpointSlice => &["ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"],
            Layout::HorizontalPodAutoscaler => &[
                "REFERENCE",
                "TARGETS",
                "MINPODS",
                "MAXPODS",
                "REPLICAS",
                "AGE",
            ],
            Layout::PodDisruptionBudget => &[
                "MIN AVAILABLE",
                "MAX UNAVAILABLE",
                "ALLOWED DISRUPTIONS",
                "AGE",
            ],
            Layout::PriorityClass => &["VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"],
            Layout::StorageClass => &[
                "PROVISIONER",
                "RECLAIMPOLICY",
                "VOLUMEBINDINGMODE",
                "ALLOWVOLUMEEXPANSION",
                "AGE",
            ],
            Layout::WebhookConfiguration => &["WEBHOOKS", "AGE"],
            Layout::ValidatingAdmissionPolicy => &["VALIDATIONS", "PARAMKIND", "AGE"],
            Layout::ValidatingAdmissionPolicyBinding => &["POLICYNAME", "PARAMREF", "AGE"],
            Layout::Other => &["AGE"],
        }
    }

    /// The columns `-o wide` adds.
    fn wide_columns(self) -> &'static [&'static str] {
        match self {
            Layout::Pod => &["IP", "NODE", "NOMINATED NODE", "READINESS GATES"],
            Layout::Deployment
            | Layout::ReplicaSet
            | Layout::DaemonSet
            | Layout::Job
            | Layout::CronJob => &["CONTAINERS", "IMAGES", "SELECTOR"],
            Layout::StatefulSet => &["CONTAINERS", "IMAGES"],
            Layout::Service => &["SELECTOR"],
            Layout::PersistentVolumeClaim | Layout::PersistentVolume => &["VOLUMEMODE"],
            Layout::Node => &[
                "INTERNAL-IP",
                "EXTERNAL-IP",
                "OS-IMAGE",
                "KERNEL-VERSION",
                "CONTAINER-RUNTIME",
            ],
            _ => &[],
        }
    }
}

/// The columns of one resource's table.
pub struct Columns {
    layout: Layout,
    /// A custom resource's `additionalPrinterColumns` (priority 0, or all with `-o wide`):
    /// they replace AGE, as in kubectl.
    custom: Vec<PrinterColumn>,
    wide: bool,
    /// `-A`: a NAMESPACE column first.
    namespace: bool,
    /// When several resource types share one `get`, names carry their kind
    /// (`deployment.apps/nginx`), as kubectl does.
    kind_prefix: Option<String>,
}

impl Columns {
    /// The columns of `kind` in `group` (`printer_columns`: a custom resource's), all of them
    /// with `wide`; `namespace`: a NAMESPACE column first; `kind_prefix`: names as
    /// `deployment.apps/nginx`.
    pub fn new(
        group: &str,
        kind: &str,
        printer_columns: &[PrinterColumn],
        wide: bool,
        namespace: bool,
        kind_prefix: Option<String>,
    ) -> Self {
        Columns {
            layout: Layout::of(group, kind),
            custom: printer_columns
                .iter()
                .filter(|c| wide || c.priority == 0)
                .cloned()
                .collect(),
            wide,
            namespace,
            kind_prefix,
        }
    }

    /// Every column of a kind as a Kubernetes `Table` defines them: name, type and priority
    /// (1: shown only with `-o wide`); the cells of [`Columns::row`] with `wide` follow them.
    pub fn definitions(
        group: &str,
        kind: &str,
        printer_columns: &[PrinterColumn],
    ) -> Vec<(String, String, i32)> {
        let narrow = Columns::new(group, kind, printer_columns, false, false, None).header();
        let wide = Columns::new(group, kind, printer_columns, true, false, None);
        wide.header()
            .into_iter()
            .map(|name| {
                let custom = wide
                    .custom
                    .iter()
                    .find(|c| c.name.to_ascii_uppercase() == name);
                let kind = custom.map_or("string", |c| match c.r#type.as_str() {
                    "integer" | "number" | "boolean" => c.r#type.as_str(),
                    _ => "string",
                });
                let priority = i32::from(!narrow.contains(&name));
                (name, kind.to_string(), priority)
            })
            .collect()
    }

    pub fn header(&self) -> Vec<String> {
        let mut h: Vec<&str> = Vec::new();
        if self.namespace {
            h.push("NAMESPACE");
        }
        h.push("NAME");
        if !self.custom.is_empty() {
            let mut h: Vec<String> = h.into_iter().map(String::from).collect();
            h.extend(self.custom.iter().map(|c| c.name.to_ascii_uppercase()));
            return h;
        }
        h.extend_from_slice(self.layout.columns());
        if self.wide {
            h.extend_from_slice(self.layout.wide_columns());
        }
        h.into_iter().map(String::from).collect()
    }

    pub fn row(&self, o: &Value, now: SystemTime) -> Vec<String> {
        let meta = &o["metadata"];
        let mut row = Vec::new();
        if self.namespace {
            row.push(text(&meta["namespace"]));
        }
        let name = text(&meta["name"]);
        row.push(match &self.kind_prefix {
            Some(kind) => format!("{kind}/{name}"),
            None => name,
        });
        if !self.custom.is_empty() {
            row.extend(self.custom.iter().map(|c| column(o, c, now)));
            return row;
        }
        row.extend(cells::cells(self.layout, o, now));
        if self.wide {
            row.extend(cells::wide_cells(self.layout, o));
        }
        row
    }
}

/// A custom resource's column (an entry of its CRD's `additionalPrinterColumns`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date` (shown as an age).
    pub r#type: String,
    /// Where the cell's value is, e.g. `.spec.cidr`.
    pub json_path: String,
    /// 0: always shown; more: only with `-o wide`.
    pub priority: i32,
    pub description: String,
}

/// A printer column from its JSON (a CRD's `additionalPrinterColumns` entry).
pub fn printer_column(c: &Value) -> PrinterColumn {
    let text = |field: &str| c[field].as_str().unwrap_or("").to_string();
    PrinterColumn {
        name: text("name"),
        r#type: text("type"),
        json_path: text("jsonPath"),
        priority: c["priority"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .unwrap_or(0),
        description: text("description"),
    }
}

/// One printer column's cell: the value at its JSON path (`.spec.cidr`, `.spec.ports[0].port`),
/// a date as an age; empty when the path finds nothing, as kubectl shows it.
fn column(o: &Value, c: &PrinterColumn, now: SystemTime) -> String {
    let value = json_path(o, &c.json_path);
    match (c.r#type.as_str(), value) {
        (_, None) => String::new(),
        ("date", Some(v)) => age::since(v.as_str(), now),
        (_, Some(v)) => text(v),
    }
}

/// The value at a simple JSON path: fields after dots, list indexes in brackets.
pub(crate) fn json_path<'a>(o: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut cur = o;
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        let (field, indexes) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !field.is_empty() {
            cur = cur.get(field)?;
        }
        for index in indexes.split('[').filter(|i| !i.is_empty()) {
            let n: usize = index.trim_end_matches(']').parse().ok()?;
            cur = cur.get(n)?;
        }
    }
    (!cur.is_null()).then_some(cur)
}

pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn custom_resources_show_their_printer_columns() {
        let column = |name: &str, t: &str, path: &str, priority: i32| PrinterColumn {
            name: name.into(),
            r#type: t.into(),
            json_path: path.into(),
            priority,
            description: String::new(),
        };
        let printer_columns = vec![
            column("CIDR", "string", ".spec.cidr", 0),
            column("First-Route", "string", ".spec.routes[0].via", 0),
            column("Phase", "string", ".status.phase", 1),
            column("Age", "date", ".metadata.creationTimestamp", 0),
        ];
        let net = serde_json::json!({
            "metadata": {"name": "example-network", "creationTimestamp": "2026-11-23T10:00:00Z"},
            "spec": {"cidr": "192.168.0.0/16", "routes": [{"via": "192.168.0.1"}]},
            "status": {"phase": "Ready"}
        });
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_795_435_200);
        let network = |wide| {
            Columns::new(
                "samplecrd.k8s.io",
                "Network",
                &printer_columns,
                wide,
                false,
                None,
            )
        };
        let c = network(false);
        assert_eq!(c.header(), ["NAME", "CIDR", "FIRST-ROUTE", "AGE"]);
        let row = c.row(&net, now);
        assert_eq!(
            row[..3],
            ["example-network", "192.168.0.0/16", "192.168.0.1"]
        );
        let wide = network(true);
        assert_eq!(
            wide.header(),
            ["NAME", "CIDR", "FIRST-ROUTE", "PHASE", "AGE"]
        );
        assert_eq!(wide.row(&net, now)[3], "Ready");
        // A path that finds nothing is an empty cell.
        assert_eq!(json_path(&net, ".spec.missing[2]"), None);
    }

    #[test]
    fn deployments_show_replicas_and_wide_columns() {
        let d = json!({
            "metadata": {"name": "nginx", "namespace": "default"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "nginx"}},
                     "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.7.9"}]}}},
            "status": {"readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1},
        });
        let cols = Columns::new("apps", "Deployment", &[], true, true, None);
        assert_eq!(
            cols.header(),
            [
                "NAMESPACE",
                "NAME",
                "READY",
                "UP-TO-DATE",
                "AVAILABLE",
                "AGE",
                "CONTAINERS",
                "IMAGES",
                "SELECTOR"
            ]
        );
        let row = cols.row(&d, SystemTime::now());
        assert_eq!(
            row,
            [
                "default",
                "nginx",
                "1/2",
                "2",
                "1",
                "<unknown>",
                "nginx",
                "nginx:1.7.9",
                "app=nginx"
            ]
        );
    }

    #[test]
    fn table_definitions_mark_the_wide_columns() {
        let d = Columns::definitions("apps", "Deployment", &[]);
        let names: Vec<&str> = d.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "NAME",
                "READY",
                "UP-TO-DATE",
                "AVAILABLE",
                "AGE",
                "CONTAINERS",
                "IMAGES",
                "SELECTOR"
            ]
        );
        let wide: Vec<i32> = d.iter().map(|(_, _, p)| *p).collect();
        assert_eq!(wide, [0, 0, 0, 0, 0, 1, 1, 1]);
    }

    #[test]
    fn pods_show_readiness_status_and_restarts() {
        let p = json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 1, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
            ]},
        });
        let cols = Columns::new("", "Pod", &[], false, false, Some("pod".into()));
        assert_eq!(
            cols.header(),
            ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
        );
        assert_eq!(
            cols.row(&p, SystemTime::now()),
            ["pod/p", "1/2", "CrashLoopBackOff", "3", "<unknown>"]
        );
    }

    #[test]
    fn selectors_print_in_set_syntax() {
        let s = json!({"matchLabels": {"b": "2", "a": "1"},
                       "matchExpressions": [{"key": "c", "operator": "In", "values": ["x", "y"]},
                                            {"key": "d", "operator": "DoesNotExist"}]});
        assert_eq!(crate::cells::selector(&s), "a=1,b=2,c in (x,y),!d");
    }
}
