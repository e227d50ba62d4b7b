//! Kubernetes' REST dialect over plain HTTP/1.1, spoken by hand: what a client that gets
//! things wrong receives (a `Status` with the right code, and a server that goes on serving
//! everyone else), and many writers patching one object over HTTP without losing a write.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use keel_tests::{ApiServer, Etcd};
use serde_json::{Value, json};

/// Replaces the CRD `widgets.ex.com` with `crd`, at the version of `current` (the CRD as the
/// server last answered it).
fn replace_widgets_crd(addr: SocketAddr, mut crd: Value, current: &Value) {
    crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
    let (code, v) = call(
        addr,
        "PUT",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.ex.com",
        "application/json",
        &serde_json::to_vec(&crd).unwrap(),
    );
    assert_eq!(code, 200, "{v}");
}

/// One request on its own connection: the status code and the JSON body.
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, Value) {
    call_accepting(addr, method, path, content_type, None, body)
}

/// [`call`], with an `Accept` header when one is given.
fn call_accepting(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    accept: Option<&str>,
    body: &[u8],
) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\n{accept}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    // The server may answer (413) before the body is all sent, and close.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (
        code,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

fn status(v: &Value) -> (&str, &str) {
    (
        v["kind"].as_str().unwrap_or(""),
        v["reason"].as_str().unwrap_or(""),
    )
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";

/// A bad request and its answer: method, path, content type, body, code, reason.
type Case<'a> = (&'a str, &'a str, &'a str, Vec<u8>, u16, &'a str);

#[tokio::test]
async fn each_kind_of_bad_request_gets_a_status_with_its_code_and_the_server_goes_on() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let addr = api.grpc;
    let json = "application/json";
    let cm = serde_json::to_vec(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ok"}}),
    )
    .unwrap();

    // A slow client that never finishes its body holds only its own connection.
    let mut slow = TcpStream::connect(addr).unwrap();
    write!(
        slow,
        "POST {CMS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"apiVersion\""
    )
    .unwrap();

    let ok = format!("{CMS}/ok");
    let forced_merge = format!("{ok}?force=true");
    let long_manager = format!("{ok}?fieldManager={}", "m".repeat(129));
    let applied = format!("{ok}?fieldManager=me");
    let cases: Vec<Case> = vec![
        ("POST", CMS, json, b"{not json".to_vec(), 400, "BadRequest"),
        (
            "POST",
            CMS,
            "text/plain",
            cm.clone(),
            415,
            "UnsupportedMediaType",
        ),
        // Kubernetes' protobuf: JSON under its name, a garbled envelope, a kind keel has
        // no protobuf form of (a runtime.Unknown naming v1 Widget).
        (
            "POST",
            CMS,
            "application/vnd.kubernetes.protobuf",
            cm.clone(),
            400,
            "BadRequest",
        ),
        (
            "POST",
            CMS,
            "application/vnd.kubernetes.protobuf",
            b"k8s\x00\x0a\xff\xff".to_vec(),
            400,
            "BadRequest",
        ),
        (
            "POST",
            CMS,
            "application/vnd.kubernetes.protobuf",
            b"k8s\x00\x0a\x0c\x0a\x02v1\x12\x06Widget".to_vec(),
            415,
            "UnsupportedMediaType",
        ),
        (
            "POST",
            CMS,
            json,
            vec![b' '; 4 * 1024 * 1024],
            413,
            "RequestEntityTooLarge",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?limit=ten",
            json,
            vec![],
            400,
            "BadRequest",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?watch=maybe",
            json,
            vec![],
            400,
            "BadRequest",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20(b",
            json,
            vec![],
            400,
            "BadRequest",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps/x/y/z",
            json,
            vec![],
            404,
            "NotFound",
        ),
        (
            "GET",
            "/api/v1/nosuchresources",
            json,
            vec![],
            404,
            "NotFound",
        ),
        ("GET", "/nothing/here", json, vec![], 404, "NotFound"),
        ("PUT", CMS, json, cm.clone(), 405, "MethodNotAllowed"),
        // An apply names its manager; only an apply may force; no CBOR (off in 1.32).
        (
            "PATCH",
            &ok,
            "application/apply-patch+yaml",
            b"{}".to_vec(),
            422,
            "Invalid",
        ),
        (
            "PATCH",
            &forced_merge,
            "application/merge-patch+json",
            b"{}".to_vec(),
            422,
            "Invalid",
        ),
        (
            "PATCH",
            &long_manager,
            "application/merge-patch+json",
            b"{}".to_vec(),
            422,
            "Invalid",
        ),
        (
            "PATCH",
            &applied,
            "application/apply-patch+yaml",
            b"data: [".to_vec(),
            400,
            "BadRequest",
        ),
        (
            "PATCH",
            &ok,
            "application/apply-patch+cbor",
            b"{}".to_vec(),
            415,
            "UnsupportedMediaType",
        ),
        (
            "PATCH",
            &ok,
            "text/plain",
            b"{}".to_vec(),
            415,
            "UnsupportedMediaType",
        ),
        (
            "DELETE",
            &ok,
            json,
            b"{\"propagationPolicy\": \"Sideways\"}".to_vec(),
            400,
            "BadRequest",
        ),
    ];
    for (method, path, ct, body, code, reason) in cases {
        let (got, v) = call(addr, method, path, ct, &body);
        assert_eq!(
            (got, status(&v)),
            (code, ("Status", reason)),
            "{method} {path} ({ct}): {v}"
        );
        assert_eq!(v["code"], code, "{v}");
    }
    let (code, v) = call(addr, "POST", CMS, json, &cm);
    assert_eq!(code, 201, "{v}");
    let (code, v) = call(addr, "POST", CMS, json, &cm);
    assert_eq!((code, status(&v)), (409, ("Status", "AlreadyExists")));
    let (code, v) = call(addr, "GET", &ok, json, &[]);
    assert_eq!((code, v["metadata"]["name"].as_str()), (200, Some("ok")));
    drop(slow);
}

/// Server-side apply as kube-rs and controller-runtime send it: JSON under
/// `application/apply-patch+yaml`, `fieldManager`, `force=true` only when forcing. The
/// object is created (201), a second manager's change is a 409 whose causes name the owner
/// and the field, and a forced apply takes it.
#[tokio::test]
async fn an_apply_over_http_creates_conflicts_in_kubernetes_words_and_forces() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let addr = api.grpc;
    let url = |q: &str| format!("{CMS}/applied?{q}");
    let apply = "application/apply-patch+yaml";
    let config = |v: &str| {
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "applied"}, "data": {"owner": v}}))
        .unwrap()
    };
    let (code, v) = call(
        addr,
        "PATCH",
        &url("fieldManager=first"),
        apply,
        &config("first"),
    );
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["metadata"]["managedFields"][0]["manager"], "first");
    assert_eq!(
        v["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:data": {"f:owner": {}}})
    );
    let (code, _) = call(
        addr,
        "PATCH",
        &url("fieldManager=first"),
        apply,
        &config("first"),
    );
    assert_eq!(code, 200);

    let (code, v) = call(
        addr,
        "PATCH",
        &url("fieldManager=second"),
        apply,
        &config("second"),
    );
    assert_eq!((code, status(&v)), (409, ("Status", "Conflict")), "{v}");
    assert_eq!(
        v["message"],
        r#"Apply failed with 1 conflict: conflict with "first": .data.owner"#
    );
    assert_eq!(
        v["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"first\"",
                "field": ".data.owner"}])
    );
    // YAML is an apply's own format.
    let yaml =
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  owner: second\n";
    let (code, v) = call(
        addr,
        "PATCH",
        &url("fieldManager=second&force=true"),
        apply,
        yaml,
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["data"]["owner"], "second");
    let managers: Vec<&str> = v["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert_eq!(managers, ["second"], "first owned nothing else");
}

/// kopf adds its finalizer with a JSON patch that tests the resourceVersion it read: when a
/// status write landed in between, the `test` fails as any failed `test` does, 422 Invalid
/// (kopf retries on it), never a 409 precondition; nothing is written.
#[tokio::test]
async fn a_json_patch_whose_resource_version_test_fails_is_invalid_not_a_conflict() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let addr = api.grpc;
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let web = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
    let (code, created) = call(
        addr,
        "POST",
        deployments,
        "application/json",
        &serde_json::to_vec(&web).unwrap(),
    );
    assert_eq!(code, 201, "{created}");
    let read = created["metadata"]["resourceVersion"].as_str().unwrap();
    // A controller writes the status between kopf's read and its patch.
    let (code, status_written) = call(
        addr,
        "PATCH",
        &format!("{deployments}/web/status"),
        "application/merge-patch+json",
        br#"{"status": {"observedGeneration": 1}}"#,
    );
    assert_eq!(code, 200, "{status_written}");
    let now = status_written["metadata"]["resourceVersion"]
        .as_str()
        .unwrap();
    assert_ne!(now, read);
    let finalizer = |rv: &str| {
        serde_json::to_vec(&json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/finalizers", "value": ["kopf.zalando.org/KopfFinalizerMarker"]}]))
        .unwrap()
    };
    let (code, v) = call(
        addr,
        "PATCH",
        &format!("{deployments}/web"),
        "application/json-patch+json",
        &finalizer(read),
    );
    assert_eq!(code, 422, "{v}");
    assert_eq!(status(&v), ("Status", "Invalid"), "{v}");
    let (_, unchanged) = call(addr, "GET", &format!("{deployments}/web"), "", b"");
    assert_eq!(unchanged["metadata"]["resourceVersion"], now);
    assert!(unchanged["metadata"].get("finalizers").is_none());
    // kopf reads again and patches with what it read: the finalizer is added.
    let (code, v) = call(
        addr,
        "PATCH",
        &format!("{deployments}/web"),
        "application/json-patch+json",
        &finalizer(now),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["metadata"]["finalizers"],
        json!(["kopf.zalando.org/KopfFinalizerMarker"])
    );
}

#[tokio::test]
async fn sixty_four_writers_patching_one_object_over_http_lose_nothing() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let addr = api.grpc;
    let cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hot"}, "data": {}});
    let (code, _) = call(
        addr,
        "POST",
        CMS,
        "application/json",
        &serde_json::to_vec(&cm).unwrap(),
    );
    assert_eq!(code, 201);
    const WRITERS: usize = 64;
    const EACH: usize = 10;
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            std::thread::spawn(move || {
                for i in 0..EACH {
                    let patch =
                        json!([{"op": "add", "path": format!("/data/w{w}-{i}"), "value": "x"}]);
                    let (code, v) = call(
                        addr,
                        "PATCH",
                        &format!("{CMS}/hot"),
                        "application/json-patch+json",
                        &serde_json::to_vec(&patch).unwrap(),
                    );
                    assert_eq!(code, 200, "{v}");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let (_, v) = call(addr, "GET", &format!("{CMS}/hot"), "application/json", &[]);
    let data = v["data"].as_object().unwrap();
    assert_eq!(
        data.len(),
        WRITERS * EACH,
        "every acknowledged patch is in the object"
    );
}

/// A List answer streams out a chunk at a time: one many chunks long arrives whole and valid,
/// and the watch cache (`resourceVersion=0`) and etcd give the same objects, each with its
/// `resourceVersion` (the cache writes it into the stored JSON in place).
#[tokio::test]
async fn a_list_of_many_chunks_arrives_whole_from_the_cache_and_from_etcd() {
    use futures::StreamExt;

    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let client = api.client().await;
    let cms = keel_client::gvr("", "v1", "configmaps");
    const N: usize = 300;
    let big = "x".repeat(1000);
    let created = futures::stream::iter(0..N)
        .map(|i| {
            let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i:03}"), "labels": {"i": i.to_string()}},
                "data": {"big": big}});
            let (client, cms) = (&client, &cms);
            async move { client.create(cms, "default", &obj).await }
        })
        .buffer_unordered(16)
        .filter(|r| std::future::ready(r.is_ok()))
        .count()
        .await;
    assert_eq!(created, N);

    let items = |path: &str| {
        let (code, v) = call(api.grpc, "GET", path, "application/json", &[]);
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["kind"], "ConfigMapList");
        let mut items: Vec<Value> = v["items"].as_array().expect("items").clone();
        items.sort_by_key(|i| i["metadata"]["name"].as_str().unwrap_or("").to_string());
        items
    };
    // Any version will do at resourceVersion 0: the cache may lag the writes for a moment.
    let from_cache = keel_tests::eventually(
        Duration::from_secs(5),
        "the watch cache holds every object",
        || async {
            let items = items(&format!("{CMS}?resourceVersion=0"));
            (items.len() == N).then_some(items)
        },
    )
    .await;
    let from_etcd = items(CMS);
    assert!(serde_json::to_vec(&from_cache).unwrap().len() > 4 * 64 * 1024);
    assert_eq!(from_cache, from_etcd);
    for (i, item) in from_cache.iter().enumerate() {
        assert_eq!(item["metadata"]["name"], format!("cm-{i:03}"));
        assert_eq!(item["metadata"]["labels"]["i"], i.to_string());
        let rv = item["metadata"]["resourceVersion"].as_str().unwrap_or("");
        assert!(rv.parse::<i64>().is_ok_and(|rv| rv > 0), "{item}");
    }
}

/// Every request is an audit line, a refusal too: a body the server cannot take (415), a
/// method the path does not have (405), a subresource there is not (404).
#[tokio::test]
async fn refusals_are_audit_lines_too() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.log");
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--audit-log-path", audit.to_str().unwrap()]).await;
    let addr = api.grpc;
    let json = "application/json";
    let cases = [
        ("POST", CMS.to_string(), "text/plain", 415),
        ("POST", format!("{CMS}/x"), json, 405),
        ("GET", format!("{CMS}/x/bogus"), json, 404),
    ];
    for (method, path, ct, code) in &cases {
        let (got, v) = call(addr, method, path, ct, b"{}");
        assert_eq!(got, *code, "{method} {path}: {v}");
    }
    let lines: Vec<Value> =
        keel_tests::eventually(Duration::from_secs(5), "three audit lines", || {
            let text = std::fs::read_to_string(&audit).unwrap_or_default();
            async move {
                let lines: Vec<Value> = text
                    .lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect();
                (lines.len() >= 3).then_some(lines)
            }
        })
        .await;
    let seen: Vec<(&str, &str, &str, &str, u64)> = lines
        .iter()
        .map(|l| {
            (
                l["verb"].as_str().unwrap_or(""),
                l["namespace"].as_str().unwrap_or(""),
                l["name"].as_str().unwrap_or(""),
                l["subresource"].as_str().unwrap_or(""),
                l["code"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("create", "default", "", "", 415),
            ("create", "default", "x", "", 405),
            ("get", "default", "x", "bogus", 404),
        ]
    );
}

/// `/openapi/v3` and `/openapi/v2` carry Kubernetes' list and map types (its
/// `x-kubernetes-*` extensions), where clients read them: kubectl, and tools that merge as
/// server-side apply does (Argo CD's server-side diff).
#[tokio::test]
async fn openapi_documents_carry_kubernetes_list_and_map_types() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let get = |path: &str| {
        let (code, body) = call(api.grpc, "GET", path, "application/json", b"");
        assert_eq!(code, 200, "{path}: {body}");
        body
    };
    let root = get("/openapi/v3");
    let v3 = |gv: &str| {
        let url = root["paths"][gv]["serverRelativeURL"].as_str().unwrap();
        get(url)["components"]["schemas"].clone()
    };

    let core = v3("api/v1");
    let spread = &core["io.k8s.api.core.v1.PodSpec"]["properties"]["topologySpreadConstraints"];
    assert_eq!(spread["x-kubernetes-list-type"], "map");
    assert_eq!(
        spread["x-kubernetes-list-map-keys"],
        json!(["topologyKey", "whenUnsatisfiable"])
    );
    assert_eq!(spread["x-kubernetes-patch-merge-key"], "topologyKey");
    assert_eq!(spread["x-kubernetes-patch-strategy"], "merge");
    let ports = &core["io.k8s.api.core.v1.Container"]["properties"]["ports"];
    assert_eq!(
        ports["x-kubernetes-list-map-keys"],
        json!(["containerPort", "protocol"])
    );
    assert_eq!(
        core["io.k8s.api.core.v1.ContainerPort"]["properties"]["protocol"]["default"],
        "TCP"
    );
    assert_eq!(
        core["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["finalizers"]["x-kubernetes-list-type"],
        "set"
    );
    assert_eq!(
        core["io.k8s.api.core.v1.PersistentVolumeSpec"]["properties"]["claimRef"]["x-kubernetes-map-type"],
        "granular"
    );
    let policy = v3("apis/policy/v1");
    assert_eq!(
        policy["io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"]["x-kubernetes-map-type"],
        "atomic"
    );
    assert_eq!(
        policy["io.k8s.api.policy.v1.PodDisruptionBudgetSpec"]["properties"]["selector"]["x-kubernetes-patch-strategy"],
        "replace"
    );
    assert_eq!(
        policy["io.k8s.api.policy.v1.PodDisruptionBudget"]["x-kubernetes-group-version-kind"],
        json!([{"group": "policy", "kind": "PodDisruptionBudget", "version": "v1"}])
    );

    // v2: the same extensions beside `$ref`s, and no v3 `default`s, as Kubernetes' v2 has it.
    let v2 = get("/openapi/v2");
    let defs = &v2["definitions"];
    let ports = &defs["io.k8s.api.core.v1.Container"]["properties"]["ports"];
    assert_eq!(
        ports["items"],
        json!({"$ref": "#/definitions/io.k8s.api.core.v1.ContainerPort"})
    );
    assert_eq!(ports["x-kubernetes-list-type"], "map");
    assert_eq!(ports["x-kubernetes-patch-merge-key"], "containerPort");
    let claim = &defs["io.k8s.api.core.v1.PersistentVolumeSpec"]["properties"]["claimRef"];
    assert_eq!(
        claim["$ref"],
        "#/definitions/io.k8s.api.core.v1.ObjectReference"
    );
    assert_eq!(claim["x-kubernetes-map-type"], "granular");
    assert_eq!(
        defs["io.k8s.api.core.v1.ContainerPort"]["properties"]["protocol"].get("default"),
        None
    );
    assert_eq!(
        defs["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]["strategy"]["x-kubernetes-patch-strategy"],
        "retainKeys"
    );
}

/// `/openapi/v3` names each group version's document with a hash that clients cache it by
/// (kubectl does): a CRD's change of schema changes its group version's hash, and only that
/// one, so a client sees the new schema and keeps what it cached of the rest.
#[tokio::test]
async fn openapi_v3_hashes_change_with_a_crds_schema_and_only_its_own() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let addr = api.grpc;
    let crd = |field: &str| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.ex.com"},
            "spec": {"group": "ex.com", "names": {"kind": "Widget", "plural": "widgets"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {field: {"type": "string"}}}}}}}]}})
    };
    let url = |gv: &str| {
        let (code, root) = call(addr, "GET", "/openapi/v3", "application/json", b"");
        assert_eq!(code, 200, "{root}");
        root["paths"][gv]["serverRelativeURL"]
            .as_str()
            .map(str::to_string)
    };
    let spec_fields = |url: &str| {
        let (code, doc) = call(addr, "GET", url, "application/json", b"");
        assert_eq!(code, 200, "{doc}");
        let spec = &doc["components"]["schemas"]["com.ex.v1.Widget"]["properties"]["spec"];
        spec["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect::<Vec<_>>())
    };
    let (code, v) = call(
        addr,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        &serde_json::to_vec(&crd("size")).unwrap(),
    );
    assert_eq!(code, 201, "{v}");
    let first = keel_tests::eventually(Duration::from_secs(10), "the CRD in /openapi/v3", || {
        std::future::ready(url("apis/ex.com/v1"))
    })
    .await;
    assert_eq!(spec_fields(&first), Some(vec!["size".to_string()]));
    let core = url("api/v1");

    replace_widgets_crd(addr, crd("color"), &v);
    let second = keel_tests::eventually(Duration::from_secs(10), "a new hash", || {
        std::future::ready(url("apis/ex.com/v1").filter(|u| *u != first))
    })
    .await;
    assert_eq!(spec_fields(&second), Some(vec!["color".to_string()]));
    assert_eq!(url("api/v1"), core);
}

/// kubectl reads aggregated discovery on every command, and the server keeps the answer it
/// built until the served resources change (at 2,000 CRDs it is 800 KB): a CRD created after
/// an answer is in the next one, a changed CRD's resource as it now is, a deleted one gone.
#[tokio::test]
async fn aggregated_discovery_follows_crds_created_changed_and_deleted() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let addr = api.grpc;
    const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    // The `widgets` resource of group ex.com in the aggregated `/apis`, if it is there.
    let widgets = || {
        let (code, list) = call_accepting(
            addr,
            "GET",
            "/apis",
            "application/json",
            Some(AGGREGATED),
            b"",
        );
        assert_eq!(code, 200, "{list}");
        assert_eq!(list["kind"], "APIGroupDiscoveryList", "{list}");
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|g| g["metadata"]["name"] == "ex.com")
            .flat_map(|g| {
                g["versions"][0]["resources"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .find(|r| r["resource"] == "widgets")
    };
    let crd = |short_names: Value| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.ex.com"},
            "spec": {"group": "ex.com", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets", "shortNames": short_names},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}})
    };
    // Asked for twice before the CRD: the second answer is the one kept.
    assert!(widgets().is_none());
    assert!(widgets().is_none());
    let (code, v) = call(
        addr,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        &serde_json::to_vec(&crd(json!(["wd"]))).unwrap(),
    );
    assert_eq!(code, 201, "{v}");
    let served = keel_tests::eventually(Duration::from_secs(10), "widgets in discovery", || {
        std::future::ready(widgets())
    })
    .await;
    assert_eq!(served["shortNames"], json!(["wd"]), "{served}");

    replace_widgets_crd(addr, crd(json!(["wdg"])), &v);
    keel_tests::eventually(Duration::from_secs(10), "the new short name", || {
        std::future::ready(widgets().filter(|r| r["shortNames"] == json!(["wdg"])))
    })
    .await;

    let (code, v) = call(
        addr,
        "DELETE",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.ex.com",
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "{v}");
    keel_tests::eventually(
        Duration::from_secs(30),
        "widgets gone from discovery",
        || std::future::ready(widgets().is_none().then_some(())),
    )
    .await;
}

/// What kube-rs's `crd_derive_schema` example does over HTTP, up to its CEL rules (issue 44),
/// with the CRD its derive generates and the requests it sends, as captured on the wire when
/// the example ran unchanged against keel: defaults at every kind of field, `null`s kept
/// where nullable and defaulted or dropped where not, a missing required field refused in
/// Kubernetes' words, and a set list merged by server-side apply.
#[tokio::test]
async fn kube_rs_crd_derive_schema_example_up_to_its_cel_rules() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let addr = api.grpc;
    let json = "application/json";
    let cel = |rule: &str| json!([{"rule": rule}]);
    let fields = json!({
        "associatedDefault": {"default": true, "type": "boolean"},
        "celValidated": {"default": "legal", "nullable": true, "type": "string",
            "x-kubernetes-validations": [
                {"messageExpression": "'string cannot be illegal'",
                 "reason": "FieldValueForbidden", "rule": "self != 'illegal'"},
                {"reason": "FieldValueInvalid", "rule": "self != 'not legal'"}]},
        "defaultListable": {"default": [], "description": "Default listable field",
            "items": {"format": "uint32", "minimum": 0.0, "type": "integer"},
            "type": "array"},
        "fooSubSpec": {"nullable": true, "type": "object", "required": ["field"],
            "x-kubernetes-validations": [{"message": "is immutable", "rule": "self == oldSelf"}],
            "properties": {
                "field": {"description": "Heterogenous CEL rule set", "type": "string",
                    "x-kubernetes-validations": [
                        {"rule": "self != 'not legal'"}, {"rule": "self != 'not that'"},
                        {"message": "some pretty good reason", "rule": "self != 'also not that'"}]},
                "other": {"nullable": true, "type": "string"}}},
        "immutable": {"description": "Immutable field that uses optionalOldSelf",
            "nullable": true, "type": "string",
            "x-kubernetes-validations": [{"message": "Immutable after creation",
                "optionalOldSelf": true,
                "rule": "oldSelf.optMap(o, o == self).orValue(true)"}]},
        "nonNullable": {"type": "string"},
        "nonNullableWithDefault": {"default": "default_value", "type": "string"},
        "nullable": {"nullable": true, "type": "string"},
        "nullableSkipped": {"nullable": true, "type": "string"},
        "nullableSkippedWithDefault": {"default": "default_nullable", "nullable": true, "type": "string"},
        "nullableWithDefault": {"default": "default_nullable", "nullable": true, "type": "string"},
        "setListable": {"default": [], "type": "array", "x-kubernetes-list-type": "set",
            "items": {"format": "u32", "minimum": 0.0, "type": "integer"}}});
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "foos.clux.dev"},
        "spec": {"group": "clux.dev", "names": {"kind": "Foo", "plural": "foos", "singular": "foo"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "description": "Auto-generated derived type for FooSpec via `CustomResource`",
                "title": "Foo", "type": "object", "required": ["spec"],
                "x-kubernetes-validations": cel("self.metadata.name != 'forbidden'"),
                "properties": {"spec": {"type": "object", "required": ["nonNullable"],
                    "x-kubernetes-validations": cel("self.nonNullable == oldSelf.nonNullable"),
                    "properties": fields}}}}}]}});
    let (code, v) = call(
        addr,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        json,
        &serde_json::to_vec(&crd).unwrap(),
    );
    assert_eq!(code, 201, "{v}");
    let foos = "/apis/clux.dev/v1/namespaces/default/foos";
    let bar = json!({"apiVersion": "clux.dev/v1", "kind": "Foo", "metadata": {"name": "bar"},
        "spec": {"nonNullable": "", "nonNullableWithDefault": "", "nullable": null,
            "nullableWithDefault": null, "defaultListable": [], "setListable": [],
            "celValidated": null, "immutable": null, "fooSubSpec": null, "associatedDefault": false}});
    let created = keel_tests::eventually(Duration::from_secs(5), "foos served", || async {
        let (code, v) = call(addr, "POST", foos, json, &serde_json::to_vec(&bar).unwrap());
        (code == 201).then_some(v)
    })
    .await;
    // What the example prints for bar: nullable fields keep their null, a skipped one with a
    // default gets it, everything it set stays.
    let bar_spec = json!({"associatedDefault": false, "celValidated": null, "defaultListable": [],
        "fooSubSpec": null, "immutable": null, "nonNullable": "", "nonNullableWithDefault": "",
        "nullable": null, "nullableSkippedWithDefault": "default_nullable",
        "nullableWithDefault": null, "setListable": []});
    assert_eq!(created["spec"], bar_spec);
    let (code, read) = call(addr, "GET", &format!("{foos}/bar"), json, b"");
    assert_eq!((code, &read["spec"]), (200, &bar_spec));

    let baz = json!({"apiVersion": "clux.dev/v1", "kind": "Foo", "metadata": {"name": "baz"},
        "spec": {"defaultListable": [2], "nonNullable": "a required field", "setListable": [2]}});
    let (code, created) = call(addr, "POST", foos, json, &serde_json::to_vec(&baz).unwrap());
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        created["spec"],
        json!({"associatedDefault": true, "celValidated": "legal", "defaultListable": [2],
            "nonNullable": "a required field", "nonNullableWithDefault": "default_value",
            "nullableSkippedWithDefault": "default_nullable",
            "nullableWithDefault": "default_nullable", "setListable": [2]})
    );

    let qux = json!({"apiVersion": "clux.dev/v1", "kind": "Foo", "metadata": {"name": "qux"},
        "spec": {}});
    let (code, refused) = call(addr, "POST", foos, json, &serde_json::to_vec(&qux).unwrap());
    assert_eq!(code, 422, "{refused}");
    // Kubernetes' words: a required field missing blocks the CRD's rules, and says so.
    assert_eq!(
        refused["message"],
        "Foo.clux.dev \"qux\" is invalid: [spec.nonNullable: Required value, <nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
    );

    // Server-side apply: the atomic list is replaced, the set gains the applied item.
    let apply = json!({"apiVersion": "clux.dev/v1", "kind": "Foo",
        "spec": {"defaultListable": [3], "setListable": [3]}});
    let (code, applied) = call(
        addr,
        "PATCH",
        &format!("{foos}/baz?&force=true&fieldManager=crd_derive_schema_example"),
        "application/apply-patch+yaml",
        &serde_json::to_vec(&apply).unwrap(),
    );
    assert_eq!(code, 200, "{applied}");
    assert_eq!(applied["spec"]["defaultListable"], json!([3]));
    assert_eq!(applied["spec"]["setListable"], json!([2, 3]));
}

/// What kube-rs's `crd_api` example does over HTTP, with its CRD and requests as captured when
/// it ran unchanged against keel: create, get, replace and delete (answered with a Status),
/// the status subresource replaced, merge-patched and read, the scale subresource read and
/// merge-patched, a list, a refusal in Kubernetes' words, and a delete of the collection.
#[tokio::test]
async fn kube_rs_crd_api_example() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let addr = api.grpc;
    let (json, merge) = ("application/json", "application/merge-patch+json");
    let body = |v: Value| serde_json::to_vec(&v).unwrap();
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "foos.clux.dev"},
        "spec": {"group": "clux.dev", "names": {"kind": "Foo", "plural": "foos", "singular": "foo"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "additionalPrinterColumns": [{"jsonPath": ".spec.metadata.team", "name": "Team", "type": "string"}],
                "subresources": {"scale": {"specReplicasPath": ".spec.replicas",
                                           "statusReplicasPath": ".status.replicas"},
                                 "status": {}},
                "schema": {"openAPIV3Schema": {
                    "description": "Auto-generated derived type for FooSpec via `CustomResource`",
                    "title": "Foo", "type": "object", "required": ["spec"],
                    "properties": {
                        "spec": {"type": "object", "required": ["info", "name", "replicas"],
                            "properties": {"info": {"type": "string"},
                                           "name": {"minLength": 3, "type": "string"},
                                           "replicas": {"format": "int32", "type": "integer"}}},
                        "status": {"nullable": true, "type": "object", "required": ["is_bad", "replicas"],
                            "properties": {"is_bad": {"type": "boolean"},
                                           "replicas": {"format": "int32", "type": "integer"}}}}}}}]}});
    let (code, v) = call(
        addr,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        json,
        &body(crd),
    );
    assert_eq!(code, 201, "{v}");
    let foos = "/apis/clux.dev/v1/namespaces/default/foos";
    let foo = |name: &str, info: &str, replicas: i64| {
        json!({"apiVersion": "clux.dev/v1", "kind": "Foo", "metadata": {"name": name},
               "spec": {"name": name, "info": info, "replicas": replicas}})
    };
    let created = keel_tests::eventually(Duration::from_secs(5), "foos served", || async {
        let (code, v) = call(addr, "POST", foos, json, &body(foo("baz", "old baz", 1)));
        (code == 201).then_some(v)
    })
    .await;
    let (code, got) = call(addr, "GET", &format!("{foos}/baz"), json, b"");
    assert_eq!((code, &got["spec"]["info"]), (200, &json!("old baz")));
    let mut replacement = foo("baz", "new baz", 1);
    replacement["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    let (code, replaced) = call(
        addr,
        "PUT",
        &format!("{foos}/baz"),
        json,
        &body(replacement),
    );
    assert_eq!((code, &replaced["spec"]["info"]), (200, &json!("new baz")));
    let (code, deleted) = call(addr, "DELETE", &format!("{foos}/baz"), json, b"{}");
    assert_eq!(code, 200, "{deleted}");
    assert_eq!(
        (
            &deleted["kind"],
            &deleted["status"],
            &deleted["details"]["name"]
        ),
        (&json!("Status"), &json!("Success"), &json!("baz"))
    );

    let (code, qux) = call(
        addr,
        "POST",
        foos,
        json,
        &body(foo("qux", "unpatched qux", 0)),
    );
    assert_eq!(code, 201, "{qux}");
    let mut with_status = qux.clone();
    with_status["status"] = json!({"is_bad": true, "replicas": 0});
    let (code, v) = call(
        addr,
        "PUT",
        &format!("{foos}/qux/status"),
        json,
        &body(with_status),
    );
    assert_eq!(
        (code, &v["status"]),
        (200, &json!({"is_bad": true, "replicas": 0}))
    );
    let (code, v) = call(
        addr,
        "PATCH",
        &format!("{foos}/qux/status"),
        merge,
        &body(json!({"status": {"is_bad": false, "replicas": 1}})),
    );
    assert_eq!(
        (code, &v["status"]),
        (200, &json!({"is_bad": false, "replicas": 1}))
    );
    let (code, v) = call(addr, "GET", &format!("{foos}/qux/status"), json, b"");
    assert_eq!((code, &v["status"]["replicas"]), (200, &json!(1)));
    let (code, scale) = call(addr, "GET", &format!("{foos}/qux/scale"), json, b"");
    assert_eq!(code, 200, "{scale}");
    assert_eq!(
        (&scale["kind"], &scale["spec"], &scale["status"]["replicas"]),
        (&json!("Scale"), &json!({"replicas": 0}), &json!(1))
    );
    let (code, scale) = call(
        addr,
        "PATCH",
        &format!("{foos}/qux/scale"),
        merge,
        &body(json!({"spec": {"replicas": 2}})),
    );
    assert_eq!((code, &scale["spec"]["replicas"]), (200, &json!(2)));
    let (code, v) = call(
        addr,
        "PATCH",
        &format!("{foos}/qux"),
        merge,
        &body(json!({"spec": {"info": "patched qux"}})),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["spec"],
        json!({"info": "patched qux", "name": "qux", "replicas": 2})
    );
    let (code, list) = call(addr, "GET", foos, json, b"");
    assert_eq!(
        (code, list["items"].as_array().map(Vec::len)),
        (200, Some(1))
    );
    let (code, _) = call(addr, "DELETE", &format!("{foos}/qux"), json, b"{}");
    assert_eq!(code, 200);

    let (code, refused) = call(
        addr,
        "POST",
        foos,
        json,
        &body(foo("x", "failing validation obj", 1)),
    );
    assert_eq!(code, 422, "{refused}");
    assert_eq!(
        refused["message"],
        "Foo.clux.dev \"x\" is invalid: spec.name: Invalid value: \"x\": spec.name in body should be at least 3 chars long"
    );
    let (code, v) = call(addr, "DELETE", foos, json, b"");
    assert_eq!((code, &v["kind"]), (200, &json!("FooList")));
}
