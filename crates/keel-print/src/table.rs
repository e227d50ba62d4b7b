//! The tables of `get`: the columns kubectl shows for each kind and their cells, as keelctl
//! prints them and as the API server answers `as=Table` (Kubernetes' server-side printing).

use std::time::SystemTime;

use serde_json::Value;

use keel_api::selector::label_selector;

use crate::age;

/// The kinds with columns of their own; everything else shows NAME and AGE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    Pod,
    Deployment,
    ReplicaSet,
    ConfigMap,
    Namespace,
    Lease,
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
            _ => Layout::Other,
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
        h.extend_from_slice(match self.layout {
            Layout::Pod => &["READY", "STATUS", "RESTARTS", "AGE"],
            Layout::Deployment => &["READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
            Layout::ReplicaSet => &["DESIRED", "CURRENT", "READY", "AGE"],
            Layout::ConfigMap => &["DATA", "AGE"],
            Layout::Namespace => &["STATUS", "AGE"],
            Layout::Lease => &["HOLDER", "AGE"],
            Layout::Other => &["AGE"],
        });
        if self.wide {
            h.extend_from_slice(match self.layout {
                Layout::Pod => &["IP", "NODE", "NOMINATED NODE", "READINESS GATES"],
                Layout::Deployment | Layout::ReplicaSet => &["CONTAINERS", "IMAGES", "SELECTOR"],
                _ => &[],
            });
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
        let age = age::since(meta["creationTimestamp"].as_str(), now);
        let (spec, status) = (&o["spec"], &o["status"]);
        match self.layout {
            Layout::Pod => {
                let (ready, total) = pod_ready(o);
                row.push(format!("{ready}/{total}"));
                row.push(pod_status(o));
                row.push(pod_restarts(o).to_string());
            }
            Layout::Deployment => {
                row.push(format!(
                    "{}/{}",
                    int(&status["readyReplicas"]),
                    int(&spec["replicas"])
                ));
                row.push(int(&status["updatedReplicas"]).to_string());
                row.push(int(&status["availableReplicas"]).to_string());
            }
            Layout::ReplicaSet => {
                row.push(int(&spec["replicas"]).to_string());
                row.push(int(&status["replicas"]).to_string());
                row.push(int(&status["readyReplicas"]).to_string());
            }
            Layout::ConfigMap => {
                let count = |v: &Value| v.as_object().map_or(0, |m| m.len());
                row.push((count(&o["data"]) + count(&o["binaryData"])).to_string());
            }
            Layout::Namespace => row.push(text(&status["phase"])),
            Layout::Lease => row.push(or_none(&spec["holderIdentity"])),
            Layout::Other => {}
        }
        row.push(age);
        if self.wide {
            match self.layout {
                Layout::Pod => {
                    row.push(or_none(&status["podIP"]));
                    row.push(or_none(&spec["nodeName"]));
                    row.push(or_none(&status["nominatedNodeName"]));
                    row.push(readiness_gates(o));
                }
                Layout::Deployment | Layout::ReplicaSet => {
                    let containers = spec["template"]["spec"]["containers"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    let join = |field: &str| {
                        containers
                            .iter()
                            .map(|c| text(&c[field]))
                            .collect::<Vec<_>>()
                            .join(",")
                    };
                    row.push(join("name"));
                    row.push(join("image"));
                    row.push(selector(&spec["selector"]));
                }
                _ => {}
            }
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
fn json_path<'a>(o: &'a Value, path: &str) -> Option<&'a Value> {
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

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn or_none(v: &Value) -> String {
    match text(v) {
        s if s.is_empty() => "<none>".into(),
        s => s,
    }
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
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
fn selector(sel: &Value) -> String {
    match label_selector(sel) {
        s if s.is_empty() => "<none>".into(),
        s => s,
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
        assert_eq!(selector(&s), "a=1,b=2,c in (x,y),!d");
    }
}
