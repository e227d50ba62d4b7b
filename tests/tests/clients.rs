//! What Kubernetes clients rely on (issue 29), each a departure that broke a real client: a
//! custom object created without the status its schema requires, kube-runtime's finalizer
//! patch (`test` of null), a streaming list's end (WatchList), Go's regular expressions in CRD
//! schemas (the Prometheus Operator's), a CRD usable on every replica as soon as it says
//! Established, and eviction.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use keel_client::{Client, GroupVersionResource, ListParams, PatchType, Reason, gvr};
use keel_tests::{ApiServer, Etcd, eventually};
use serde_json::{Value, json};

fn crds() -> GroupVersionResource {
    gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions")
}

/// A CRD of `example.keel.dev/v1` `<kind>` (plural `<kind>s`, lower case) with this schema and
/// the status subresource.
fn crd(kind: &str, schema: Value) -> Value {
    let plural = format!("{}s", kind.to_lowercase());
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.keel.dev")},
        "spec": {"group": "example.keel.dev", "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase()},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": schema}}]}})
}

/// Creates `crd` and waits until `c` serves its resource.
async fn served(c: &Client, crd: &Value) -> GroupVersionResource {
    c.create(&crds(), "", crd).await.unwrap();
    let resource = gvr(
        "example.keel.dev",
        "v1",
        crd["spec"]["names"]["plural"].as_str().unwrap(),
    );
    eventually(Duration::from_secs(10), "the resource served", || async {
        c.list(&resource, "default", &ListParams::default())
            .await
            .ok()
    })
    .await;
    resource
}

#[tokio::test]
async fn a_custom_object_is_created_without_the_status_its_schema_requires() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
        "status": {"type": "object", "required": ["replicas", "is_bad"], "properties": {
            "replicas": {"type": "integer"}, "is_bad": {"type": "boolean"}}}}});
    let widgets = served(&c, &crd("Widget", schema)).await;
    let widget = |name: &str| {
        json!({"apiVersion": "example.keel.dev/v1", "kind": "Widget", "metadata": {"name": name},
            "spec": {"size": 3}})
    };
    let created = c.create(&widgets, "default", &widget("a")).await.unwrap();
    assert!(created.get("status").is_none(), "{created}");
    // A status sent with the create is dropped, as Kubernetes drops it.
    let mut with_status = widget("b");
    with_status["status"] = json!({"replicas": "many"});
    let created = c.create(&widgets, "default", &with_status).await.unwrap();
    assert!(created.get("status").is_none(), "{created}");
    // The status subresource is where the schema's required fields are asked for.
    let e = c
        .patch_subresource(
            &widgets,
            "default",
            "a",
            "status",
            PatchType::Merge,
            br#"{"status": {"replicas": 1}}"#.to_vec(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    assert_eq!(e.causes[0].field, "status.is_bad");
    let patched = c
        .patch_subresource(
            &widgets,
            "default",
            "a",
            "status",
            PatchType::Merge,
            br#"{"status": {"replicas": 1, "is_bad": false}}"#.to_vec(),
        )
        .await
        .unwrap();
    assert_eq!(patched["status"], json!({"replicas": 1, "is_bad": false}));
}

#[tokio::test]
async fn kube_runtimes_finalizer_patch_adds_the_first_finalizer_once() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned"}});
    c.create(&cms, "default", &cm).await.unwrap();
    // kube-runtime's finalizer(): "no finalizers yet" tested as null, then the first added.
    let first = json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["example.keel.dev/cleanup"]}
    ]);
    let patched = c
        .patch(&cms, "default", "owned", PatchType::Json, &first)
        .await
        .unwrap();
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["example.keel.dev/cleanup"])
    );
    // Now there are finalizers: the same patch's test fails, and nothing changes.
    let e = c
        .patch(&cms, "default", "owned", PatchType::Json, &first)
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    let now = c.get(&cms, "default", "owned").await.unwrap();
    assert_eq!(
        now["metadata"]["finalizers"],
        patched["metadata"]["finalizers"]
    );
}

/// A REST watch's lines, read until `timeoutSeconds` ends it.
fn watch_lines(api: &ApiServer, query: &str) -> (u16, Vec<Value>) {
    let addr = api.grpc;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET /api/v1/namespaces/default/configmaps?{query} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(s);
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let code = status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    // Chunk sizes and headers are not JSON; the events are one JSON object a line.
    let lines = reader
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .filter(|v| v.get("type").is_some() || v.get("kind") == Some(&json!("Status")))
        .collect();
    (code, lines)
}

#[tokio::test]
async fn a_streaming_list_ends_its_initial_events_with_the_annotated_bookmark() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let mut last = String::new();
    for name in ["a", "b", "c"] {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        last = c.create(&cms, "default", &cm).await.unwrap()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
    }
    // What kube-runtime and client-go send for a streaming list.
    let (code, events) = watch_lines(
        &api,
        "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=2",
    );
    assert_eq!(code, 200);
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds[..4],
        ["ADDED", "ADDED", "ADDED", "BOOKMARK"],
        "{events:?}"
    );
    let end = &events[3]["object"];
    assert_eq!(
        end["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let rv: i64 = end["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv >= last.parse::<i64>().unwrap(), "{rv} < {last}");
    // From a resourceVersion too: the initial events are the state not older than it.
    let (_, events) = watch_lines(
        &api,
        &format!(
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion={last}&timeoutSeconds=1"
        ),
    );
    let added = events.iter().take_while(|e| e["type"] == "ADDED").count();
    assert_eq!(added, 3, "{events:?}");
    assert_eq!(events[3]["type"], "BOOKMARK");
    // The end is a bookmark, so a streaming list needs them.
    let (code, _) = watch_lines(&api, "watch=1&sendInitialEvents=true&timeoutSeconds=1");
    assert_eq!(code, 422);
    // A plain watch has no such bookmark.
    let (_, events) = watch_lines(&api, "watch=1&allowWatchBookmarks=true&timeoutSeconds=1");
    assert!(
        events
            .iter()
            .all(|e| e["object"]["metadata"]["annotations"].is_null())
    );
}

/// The patterns of the Prometheus Operator's PrometheusRule (`spec.groups[]`) and
/// AlertmanagerConfig CRDs, which ship with kube-prometheus-stack: Go's syntax, inline flags.
#[tokio::test]
async fn crd_patterns_are_gos_regular_expressions() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let duration = "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$";
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "groups": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string", "minLength": 1},
            "interval": {"type": "string", "pattern": duration},
            "partial_response_strategy": {"type": "string", "pattern": "^(?i)(abort|warn)?$"}}}},
        "matchType": {"type": "string", "pattern": "^(?i)(=|!=|=~|!~)$"},
        "receiver": {"type": "string", "pattern": "^[\\w.-]+$"}}}}});
    let rules = served(&c, &crd("PromRule", schema)).await;
    let rule = |strategy: &str, receiver: &str| {
        json!({"apiVersion": "example.keel.dev/v1", "kind": "PromRule",
            "metadata": {"generateName": "r-", "name": format!("r-{}", strategy.len() + receiver.len())},
            "spec": {"groups": [{"name": "g", "interval": "1h30m", "partial_response_strategy": strategy}],
                "matchType": "=~", "receiver": receiver}})
    };
    c.create(&rules, "default", &rule("WARN", "team-a.pager"))
        .await
        .unwrap();
    let e = c
        .create(&rules, "default", &rule("stop", "team-b"))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    assert_eq!(
        e.causes[0].field,
        "spec.groups[0].partial_response_strategy"
    );
    assert!(
        e.causes[0]
            .message
            .contains("should match '^(?i)(abort|warn)?$'"),
        "{e}"
    );
    // Go's \w is ASCII: a receiver name with an accent does not match.
    let e = c
        .create(&rules, "default", &rule("abort", "équipe"))
        .await
        .unwrap_err();
    assert_eq!(e.causes[0].field, "spec.receiver");

    // What Go's regexp refuses, Kubernetes refuses in a CRD: a look-ahead.
    let bad = crd(
        "Bad",
        json!({"type": "object", "properties": {"spec": {"type": "string", "pattern": "(?=a)b"}}}),
    );
    let e = c.create(&crds(), "", &bad).await.unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    assert!(e.message.contains("pattern"), "{e}");
}

/// What a CRD's create answer says (Established), and its DELETED event, hold on every replica
/// at once: a custom object is created through the other replica right after, twenty times
/// over, the CRD deleted and made again under the same name in between.
#[tokio::test]
async fn established_means_served_on_every_replica_and_deleted_means_gone() {
    let etcd = Etcd::start().await;
    let a = ApiServer::start(&etcd).await;
    let b = ApiServer::start(&etcd).await;
    let (ca, cb) = (a.client().await, b.client().await);
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}});
    let definition = crd("Gadget", schema);
    let gadgets = gvr("example.keel.dev", "v1", "gadgets");
    let name = "gadgets.example.keel.dev";
    let params = keel_client::WatchParams {
        field_selector: format!("metadata.name={name}"),
        ..Default::default()
    };
    let mut crd_events = cb.watch_resumable(&crds(), &params);
    for round in 0..20 {
        let created = ca.create(&crds(), "", &definition).await.unwrap();
        let established = created["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        assert!(established, "round {round}: {created}");
        let gadget = json!({"apiVersion": "example.keel.dev/v1", "kind": "Gadget",
            "metadata": {"name": format!("g{round}")}, "spec": {"size": round}});
        cb.create(&gadgets, "default", &gadget)
            .await
            .unwrap_or_else(|e| panic!("round {round}: the other replica: {e}"));
        ca.delete(&crds(), "", name, &Default::default())
            .await
            .unwrap();
        // The deletion is done when the CRD's DELETED event comes (its objects go first).
        loop {
            let ev = tokio::time::timeout(
                Duration::from_secs(30),
                futures::StreamExt::next(&mut crd_events),
            )
            .await
            .expect("the CRD's events")
            .expect("a stream")
            .expect("an event");
            if ev.kind == keel_client::EventType::Deleted {
                break;
            }
        }
    }
}

/// One plain-text REST request: the status code and the body as JSON.
fn rest(api: &ApiServer, method: &str, path: &str, token: &str, body: &Value) -> (u16, Value) {
    use std::io::Read;
    let addr = api.grpc;
    let body = body.to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    let _ = s.read_to_string(&mut raw);
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (
        code,
        serde_json::from_str(rest.trim()).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn an_eviction_deletes_the_pod_for_who_may_create_evictions() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "admin-token,admin,1,system:masters\ndeleter-token,deleter,2,\n",
    )
    .unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", tokens.to_str().unwrap()]).await;
    let mut config = keel_client::ClientConfig::new([api.endpoint()]);
    config.token = Some("admin-token".into());
    let admin = Client::connect(&config).await.unwrap();
    let pods = gvr("", "v1", "pods");
    for name in ["web", "db"] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        admin.create(&pods, "default", &pod).await.unwrap();
    }
    let eviction = |name: &str| {
        json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": "default"},
            "deleteOptions": {"gracePeriodSeconds": 0}})
    };
    let path = |name: &str| format!("/api/v1/namespaces/default/pods/{name}/eviction");
    let (code, status) = rest(&api, "POST", &path("web"), "admin-token", &eviction("web"));
    assert_eq!(
        (code, &status["status"]),
        (201, &json!("Success")),
        "{status}"
    );
    eventually(Duration::from_secs(5), "web evicted", || async {
        match admin.get(&pods, "default", "web").await {
            Err(e) if e.reason == Reason::NotFound => Some(()),
            Ok(p) if p["metadata"]["deletionTimestamp"].is_string() => Some(()),
            _ => None,
        }
    })
    .await;
    // The Eviction names its Pod as the path does.
    let (code, status) = rest(&api, "POST", &path("db"), "admin-token", &eviction("web"));
    assert_eq!(code, 422, "{status}");
    // Only Pods are evicted.
    let (code, _) = rest(
        &api,
        "POST",
        "/api/v1/namespaces/default/configmaps/x/eviction",
        "admin-token",
        &eviction("x"),
    );
    assert_eq!(code, 404);
    // An eviction is `create` on pods/eviction: deleting Pods is not enough.
    let roles = gvr("rbac.authorization.k8s.io", "v1", "roles");
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "deleter", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]}]});
    admin.create(&roles, "default", &role).await.unwrap();
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "deleter", "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deleter"},
        "subjects": [{"kind": "User", "name": "deleter"}]});
    admin
        .create(
            &gvr("rbac.authorization.k8s.io", "v1", "rolebindings"),
            "default",
            &binding,
        )
        .await
        .unwrap();
    let (code, status) = eventually(Duration::from_secs(5), "the role in force", || async {
        let r = rest(
            &api,
            "GET",
            "/api/v1/namespaces/default/pods/db",
            "deleter-token",
            &Value::Null,
        );
        (r.0 == 200).then(|| rest(&api, "POST", &path("db"), "deleter-token", &eviction("db")))
    })
    .await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        "pods \"db\" is forbidden: User \"deleter\" cannot create resource \"pods/eviction\" in API group \"\" in the namespace \"default\""
    );
    // Discovery says where evictions go, as kubectl drain looks for it.
    let (_, list) = rest(&api, "GET", "/api/v1", "admin-token", &Value::Null);
    let entry = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods/eviction")
        .cloned()
        .expect("pods/eviction in discovery");
    assert_eq!(
        (
            entry["group"].clone(),
            entry["kind"].clone(),
            entry["verbs"].clone()
        ),
        (json!("policy"), json!("Eviction"), json!(["create"]))
    );
}
