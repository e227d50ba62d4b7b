//! Every verb of the API against a real etcd and the real `keel-apiserver`, with the errors
//! DESIGN.md promises.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use keel_client::{DeleteParams, ListParams, PatchType, PropagationPolicy, Reason, gvr};
use keel_tests::{ApiServer, Etcd, eventually};
use serde_json::{Value, json};

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn rv(o: &Value) -> &str {
    o["metadata"]["resourceVersion"].as_str().unwrap_or("")
}

#[tokio::test]
async fn create_get_update_delete_round_trip() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");

    let created = c
        .create(&cms, "default", &cm("app", json!({"a": "1"})))
        .await
        .unwrap();
    assert_eq!(created["metadata"]["namespace"], "default");
    assert_eq!(created["metadata"]["generation"], 1);
    assert!(!created["metadata"]["uid"].as_str().unwrap().is_empty());
    assert!(
        created["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    assert!(rv(&created).parse::<i64>().unwrap() > 0);

    let got = c.get(&cms, "default", "app").await.unwrap();
    assert_eq!(got, created);

    let e = c
        .create(&cms, "default", &cm("app", json!({})))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::AlreadyExists);
    assert_eq!(e.target.name, "app");
    assert_eq!(
        e.target.kind, "configmaps",
        "named by resource, as Kubernetes does"
    );
    assert_eq!(e.message, "configmaps \"app\" already exists");

    // Update at the current version succeeds; the same stale version then conflicts.
    let mut next = got.clone();
    next["data"]["a"] = json!("2");
    let updated = c.update(&cms, "default", &next).await.unwrap();
    assert_eq!(updated["data"]["a"], "2");
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
    assert_ne!(rv(&updated), rv(&created));
    let e = c.update(&cms, "default", &next).await.unwrap_err();
    assert_eq!(e.reason, Reason::Conflict);
    assert!(
        e.message.contains("the object has been modified"),
        "{}",
        e.message
    );

    // An update without resourceVersion is unconditional for built-in kinds.
    let mut blind = cm("app", json!({"a": "3"}));
    blind["metadata"]["namespace"] = json!("default");
    assert_eq!(
        c.update(&cms, "default", &blind).await.unwrap()["data"]["a"],
        "3"
    );

    // A write that changes nothing is skipped: the resourceVersion stays.
    let same = c.get(&cms, "default", "app").await.unwrap();
    let again = c.update(&cms, "default", &same).await.unwrap();
    assert_eq!(rv(&again), rv(&same));
    let again = c
        .patch(
            &cms,
            "default",
            "app",
            PatchType::Merge,
            &json!({"data": {"a": "3"}}),
        )
        .await
        .unwrap();
    assert_eq!(rv(&again), rv(&same));

    let (gone, deleted) = c
        .delete(&cms, "default", "app", &DeleteParams::default())
        .await
        .unwrap();
    assert!(deleted);
    assert_eq!(gone["metadata"]["name"], "app");
    let e = c.get(&cms, "default", "app").await.unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
    assert_eq!(e.message, "configmaps \"app\" not found");
    let e = c
        .delete(&cms, "default", "app", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
}

#[tokio::test]
async fn builtin_namespaces_exist_and_missing_ones_are_not_found() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let ns = gvr("", "v1", "namespaces");
    for name in ["default", "keel-system"] {
        let n = c.get(&ns, "", name).await.unwrap();
        assert_eq!(n["status"]["phase"], "Active");
    }
    let e = c
        .create(&gvr("", "v1", "configmaps"), "nowhere", &cm("x", json!({})))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
    assert_eq!(e.target.kind, "namespaces");
    assert_eq!(e.target.name, "nowhere");

    c.create(
        &ns,
        "",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
    )
    .await
    .unwrap();
    c.create(&gvr("", "v1", "configmaps"), "team-a", &cm("x", json!({})))
        .await
        .unwrap();
    let e = c
        .delete(&ns, "", "default", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden);
}

#[tokio::test]
async fn several_replicas_starting_together_agree_on_namespaces() {
    let etcd = Etcd::start().await;
    let (a, b, c) = tokio::join!(
        ApiServer::start(&etcd),
        ApiServer::start(&etcd),
        ApiServer::start(&etcd)
    );
    let client = b.client().await;
    let list = client
        .list(&gvr("", "v1", "namespaces"), "", &ListParams::default())
        .await
        .unwrap();
    let names: Vec<&str> = list
        .items
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "keel-system"]);
    drop((a, c));
}

#[tokio::test]
async fn list_filters_by_labels_and_fields_and_pages_at_one_revision() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    for i in 0..10 {
        let mut o = cm(&format!("cm-{i}"), json!({}));
        o["metadata"]["labels"] =
            json!({"parity": if i % 2 == 0 { "even" } else { "odd" }, "n": i.to_string()});
        c.create(&cms, "default", &o).await.unwrap();
    }
    let names = |l: &keel_client::ObjectList| -> Vec<String> {
        l.items
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let sel = |s: &str| ListParams {
        label_selector: s.into(),
        ..Default::default()
    };
    assert_eq!(
        c.list(&cms, "default", &sel("parity=even"))
            .await
            .unwrap()
            .items
            .len(),
        5
    );
    assert_eq!(
        c.list(&cms, "default", &sel("parity==odd,n!=1"))
            .await
            .unwrap()
            .items
            .len(),
        4
    );
    assert_eq!(
        names(&c.list(&cms, "default", &sel("n in (3,4)")).await.unwrap()),
        ["cm-3", "cm-4"]
    );
    assert_eq!(
        c.list(&cms, "default", &sel("n notin (3,4)"))
            .await
            .unwrap()
            .items
            .len(),
        8
    );
    assert_eq!(
        c.list(&cms, "default", &sel("parity"))
            .await
            .unwrap()
            .items
            .len(),
        10
    );
    assert_eq!(
        c.list(&cms, "default", &sel("!parity"))
            .await
            .unwrap()
            .items
            .len(),
        0
    );
    let f = ListParams {
        field_selector: "metadata.name=cm-7".into(),
        ..Default::default()
    };
    assert_eq!(names(&c.list(&cms, "", &f).await.unwrap()), ["cm-7"]);
    let f = ListParams {
        field_selector: "metadata.namespace!=default".into(),
        ..Default::default()
    };
    assert!(c.list(&cms, "", &f).await.unwrap().items.is_empty());

    // Pages of 3, read at the first page's revision even while writes go on.
    let mut p = ListParams {
        limit: 3,
        ..Default::default()
    };
    let first = c.list(&cms, "default", &p).await.unwrap();
    assert_eq!(first.items.len(), 3);
    assert_eq!(first.remaining_item_count, 7);
    assert!(!first.continue_token.is_empty());
    c.create(&cms, "default", &cm("cm-99", json!({})))
        .await
        .unwrap();
    let mut all = names(&first);
    p.continue_token = first.continue_token.clone();
    loop {
        let page = c.list(&cms, "default", &p).await.unwrap();
        assert_eq!(page.resource_version, first.resource_version);
        all.extend(names(&page));
        if page.continue_token.is_empty() {
            break;
        }
        p.continue_token = page.continue_token;
    }
    let want: Vec<String> = (0..10).map(|i| format!("cm-{i}")).collect();
    assert_eq!(
        all, want,
        "the page read at the first revision does not see cm-99"
    );

    // A filtered page still fills up to the limit.
    let p = ListParams {
        limit: 2,
        label_selector: "parity=odd".into(),
        ..Default::default()
    };
    let page = c.list(&cms, "default", &p).await.unwrap();
    assert_eq!(names(&page), ["cm-1", "cm-3"]);

    // Served from the watch cache.
    let p = ListParams {
        resource_version: "0".into(),
        ..Default::default()
    };
    eventually(
        Duration::from_secs(5),
        "the cache to hold 11 objects",
        || {
            let (c, p, cms) = (c.clone(), p.clone(), cms.clone());
            async move { (c.list(&cms, "default", &p).await.ok()?.items.len() == 11).then_some(()) }
        },
    )
    .await;
}

#[tokio::test]
async fn status_is_a_subresource_and_generation_follows_spec() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let deploys = gvr("apps", "v1", "deployments");
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}},
        "status": {"replicas": 5}});
    let created = c.create(&deploys, "default", &d).await.unwrap();
    assert_eq!(
        created["status"],
        json!({}),
        "status is not settable on create"
    );
    assert_eq!(created["spec"]["replicas"], 1, "replicas defaults to 1");

    let p = json!({"spec": {"replicas": 3}, "status": {"replicas": 9}});
    let patched = c
        .patch(&deploys, "default", "web", PatchType::Merge, &p)
        .await
        .unwrap();
    assert_eq!(patched["spec"]["replicas"], 3);
    assert_eq!(patched["status"], json!({}));
    assert_eq!(patched["metadata"]["generation"], 2);

    let p = json!({"metadata": {"labels": {"x": "y"}}});
    let labelled = c
        .patch(&deploys, "default", "web", PatchType::Merge, &p)
        .await
        .unwrap();
    assert_eq!(
        labelled["metadata"]["generation"], 2,
        "metadata changes leave generation alone"
    );

    let mut s = labelled.clone();
    s["status"] = json!({"replicas": 3, "readyReplicas": 3});
    s["spec"]["replicas"] = json!(100);
    let st = c.update_status(&deploys, "default", &s).await.unwrap();
    assert_eq!(st["status"]["readyReplicas"], 3);
    assert_eq!(st["spec"]["replicas"], 3, "a status write ignores spec");
    assert_eq!(st["metadata"]["generation"], 2);

    let raw = keel_client::PatchType::Merge;
    let st = c
        .patch_subresource(
            &deploys,
            "default",
            "web",
            "status",
            raw,
            br#"{"status":{"readyReplicas":2}}"#.to_vec(),
        )
        .await
        .unwrap();
    assert_eq!(st["status"]["readyReplicas"], 2);

    let e = c
        .patch_subresource(
            &gvr("", "v1", "configmaps"),
            "default",
            "x",
            "status",
            raw,
            b"{}".to_vec(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
}

#[tokio::test]
async fn finalizers_hold_a_deleted_object_until_the_last_one_goes() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let mut o = cm("held", json!({}));
    o["metadata"]["finalizers"] = json!(["example.com/a", "example.com/b"]);
    let created = c.create(&cms, "default", &o).await.unwrap();

    // Preconditions: a wrong uid or resourceVersion is a Conflict and deletes nothing.
    let bad_uid = DeleteParams {
        uid: "nope".into(),
        ..Default::default()
    };
    assert_eq!(
        c.delete(&cms, "default", "held", &bad_uid)
            .await
            .unwrap_err()
            .reason,
        Reason::Conflict
    );
    let bad_rv = DeleteParams {
        resource_version: "1".into(),
        ..Default::default()
    };
    assert_eq!(
        c.delete(&cms, "default", "held", &bad_rv)
            .await
            .unwrap_err()
            .reason,
        Reason::Conflict
    );

    let good = DeleteParams {
        uid: created["metadata"]["uid"].as_str().unwrap().into(),
        ..Default::default()
    };
    let (marked, deleted) = c.delete(&cms, "default", "held", &good).await.unwrap();
    assert!(!deleted);
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert!(c.get(&cms, "default", "held").await.is_ok());

    // No finalizer may be added now; removing them one by one deletes at the last.
    let p =
        json!({"metadata": {"finalizers": ["example.com/a", "example.com/b", "example.com/c"]}});
    let e = c
        .patch(&cms, "default", "held", PatchType::Merge, &p)
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    let p = json!({"metadata": {"finalizers": ["example.com/b"]}});
    c.patch(&cms, "default", "held", PatchType::Merge, &p)
        .await
        .unwrap();
    assert!(c.get(&cms, "default", "held").await.is_ok());
    let p = json!({"metadata": {"finalizers": null}});
    c.patch(&cms, "default", "held", PatchType::Merge, &p)
        .await
        .unwrap();
    assert_eq!(
        c.get(&cms, "default", "held").await.unwrap_err().reason,
        Reason::NotFound
    );

    // Foreground and orphan propagation are recorded as finalizers for the garbage collector.
    c.create(&cms, "default", &cm("fg", json!({})))
        .await
        .unwrap();
    let fg = DeleteParams {
        propagation: PropagationPolicy::Foreground,
        ..Default::default()
    };
    let (o, deleted) = c.delete(&cms, "default", "fg", &fg).await.unwrap();
    assert!(!deleted);
    assert_eq!(o["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    c.create(&cms, "default", &cm("orphan", json!({})))
        .await
        .unwrap();
    let orphan = DeleteParams {
        propagation: PropagationPolicy::Orphan,
        ..Default::default()
    };
    let (o, _) = c.delete(&cms, "default", "orphan", &orphan).await.unwrap();
    assert_eq!(o["metadata"]["finalizers"], json!(["orphan"]));
}

#[tokio::test]
async fn json_patch_and_patch_preconditions() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let created = c
        .create(&cms, "default", &cm("p", json!({"a": "1"})))
        .await
        .unwrap();
    let p = json!([{"op": "add", "path": "/data/b", "value": "2"}, {"op": "remove", "path": "/data/a"}]);
    let o = c
        .patch(&cms, "default", "p", PatchType::Json, &p)
        .await
        .unwrap();
    assert_eq!(o["data"], json!({"b": "2"}));

    // A patch that names the resourceVersion it was made against is a precondition.
    let stale = json!({"metadata": {"resourceVersion": rv(&created)}, "data": {"c": "3"}});
    let e = c
        .patch(&cms, "default", "p", PatchType::Merge, &stale)
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Conflict);
    let fresh = json!({"metadata": {"resourceVersion": rv(&o)}, "data": {"c": "3"}});
    let o2 = c
        .patch(&cms, "default", "p", PatchType::Merge, &fresh)
        .await
        .unwrap();
    assert_eq!(o2["data"]["c"], "3");

    let e = c
        .patch(&cms, "default", "missing", PatchType::Merge, &json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
}

#[tokio::test]
async fn discovery_lists_the_builtin_resources() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let rs = c.discovery().await.unwrap();
    let find = |r: &str| {
        rs.iter()
            .find(|x| x.resource == r)
            .unwrap_or_else(|| panic!("{r} missing"))
    };
    let d = find("deployments");
    assert_eq!(
        (d.group.as_str(), d.version.as_str(), d.kind.as_str()),
        ("apps", "v1", "Deployment")
    );
    assert_eq!(d.short_names, ["deploy"]);
    assert!(d.namespaced);
    assert_eq!(d.subresources, ["status", "scale"]);
    assert!(d.verbs.iter().any(|v| v == "watch"));
    assert!(!find("namespaces").namespaced);
    for r in ["pods", "configmaps", "events", "replicasets", "leases"] {
        find(r);
    }
}

#[tokio::test]
async fn health_readiness_and_metrics_are_served() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    c.create(&gvr("", "v1", "configmaps"), "default", &cm("m", json!({})))
        .await
        .unwrap();
    let _ = c
        .get(&gvr("", "v1", "configmaps"), "default", "missing")
        .await;
    assert_eq!(keel_tests::http_get(api.http, "/healthz").unwrap().0, 200);
    assert_eq!(keel_tests::http_get(api.http, "/readyz").unwrap().0, 200);
    let m = api.metrics();
    assert!(
        m.contains(
            r#"keel_apiserver_requests_total{verb="create",resource="configmaps",code="OK"} 1"#
        ),
        "{m}"
    );
    assert!(
        m.contains(
            r#"keel_apiserver_requests_total{verb="get",resource="configmaps",code="NOT_FOUND"} 1"#
        ),
        "{m}"
    );
    assert!(m.contains("keel_apiserver_request_duration_seconds_bucket"));
    assert!(m.contains("keel_apiserver_etcd_requests_total"));

    // gRPC health
    let channel = tonic::transport::Endpoint::from_shared(api.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = tonic_health::pb::health_client::HealthClient::new(channel);
    let r = h
        .check(tonic_health::pb::HealthCheckRequest {
            service: "keel.v1.Objects".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        r.into_inner().status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

#[tokio::test]
async fn sigterm_shuts_down_cleanly_and_readyz_follows_etcd() {
    let etcd = Etcd::start().await;
    let mut api = ApiServer::start(&etcd).await;
    let status = api.terminate();
    assert!(status.success(), "exit status {status:?}");

    let etcd2 = Etcd::start().await;
    let api2 = ApiServer::start(&etcd2).await;
    drop(etcd2);
    eventually(
        Duration::from_secs(10),
        "/readyz to fail without etcd",
        || async { (keel_tests::http_get(api2.http, "/readyz").ok()?.0 == 503).then_some(()) },
    )
    .await;
    let c = api2.client().await;
    let e = c
        .get(&gvr("", "v1", "configmaps"), "default", "x")
        .await
        .unwrap_err();
    assert!(
        matches!(e.reason, Reason::ServiceUnavailable | Reason::Timeout),
        "{e:?}"
    );
}

/// Pages read from etcd in bounded parts (etcd 3.4 walks a range's every key to answer any
/// part of it, so each read stops where the watch cache says about two pages lie): whatever
/// the parts, every page is at the first page's revision, every object comes once, in key
/// order, objects deleted since the first page are still listed and new ones are not, and
/// `remainingItemCount` counts down.
#[tokio::test]
async fn pages_read_in_bounded_parts_list_each_object_once_at_one_revision() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "paged"}});
    c.create(&gvr("", "v1", "namespaces"), "", &ns)
        .await
        .unwrap();
    const N: usize = 60;
    for i in 0..N {
        let mut obj = cm(&format!("cm-{i:02}"), json!({}));
        obj["metadata"]["labels"] = json!({"seventh": (i % 7 == 0).to_string()});
        c.create(&cms, "paged", &obj).await.unwrap();
    }
    // The cache holds them all (it places the parts' ends).
    eventually(
        Duration::from_secs(5),
        "the cache has every object",
        || async {
            let all = ListParams {
                resource_version: "0".into(),
                ..Default::default()
            };
            let n = c.list(&cms, "paged", &all).await.ok()?.items.len();
            (n == N).then_some(())
        },
    )
    .await;

    let mut names = Vec::new();
    let mut p = ListParams {
        limit: 4,
        ..Default::default()
    };
    let mut revision = String::new();
    loop {
        let page = c.list(&cms, "paged", &p).await.unwrap();
        if names.is_empty() {
            revision = page.resource_version.clone();
            // Changes after the first page: not seen by the next ones.
            for i in [10, 30, 59] {
                c.delete(
                    &cms,
                    "paged",
                    &format!("cm-{i:02}"),
                    &DeleteParams::default(),
                )
                .await
                .unwrap();
            }
            c.create(&cms, "paged", &cm("cm-99", json!({})))
                .await
                .unwrap();
        }
        assert_eq!(page.resource_version, revision);
        names.extend(
            page.items
                .iter()
                .map(|o| o["metadata"]["name"].as_str().unwrap().to_string()),
        );
        if page.continue_token.is_empty() {
            assert_eq!(page.remaining_item_count, 0);
            break;
        }
        assert!(
            page.remaining_item_count > 0,
            "{}",
            page.remaining_item_count
        );
        p.continue_token = page.continue_token;
    }
    let want: Vec<String> = (0..N).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(names, want);

    // A selector matching one object in seven, two a page: pages cross several parts.
    let mut names = Vec::new();
    let mut p = ListParams {
        limit: 2,
        label_selector: "seventh=true".into(),
        ..Default::default()
    };
    loop {
        let page = c.list(&cms, "paged", &p).await.unwrap();
        names.extend(
            page.items
                .iter()
                .map(|o| o["metadata"]["name"].as_str().unwrap().to_string()),
        );
        if page.continue_token.is_empty() {
            break;
        }
        p.continue_token = page.continue_token;
    }
    let want: Vec<String> = (0..N)
        .filter(|i| i % 7 == 0)
        .map(|i| format!("cm-{i:02}"))
        .collect();
    assert_eq!(names, want);
}

/// Server-side apply over gRPC: `PATCH_TYPE_APPLY` with `field_manager` and `force`, the
/// conflict as ABORTED with Kubernetes' causes, and writes that name no manager recorded as
/// the program the client's user-agent names.
#[tokio::test]
async fn apply_over_grpc_names_its_manager_and_writes_record_the_user_agents() {
    use keel_wire::proto::{PatchRequest, PatchType as Wire, ResourceRef};
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let made = c
        .create(&cms, "default", &cm("applied", json!({"a": "1"})))
        .await
        .unwrap();
    // This test's program name, as keel-client sends it (`verbs-<hash>`).
    let program = std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap();
    assert_eq!(
        made["metadata"]["managedFields"][0]["manager"],
        program.as_str()
    );
    assert_eq!(made["metadata"]["managedFields"][0]["operation"], "Update");

    let apply = |manager: &str, value: &str, force: bool| PatchRequest {
        resource: Some(ResourceRef {
            group: String::new(),
            version: "v1".into(),
            resource: "configmaps".into(),
        }),
        namespace: "default".into(),
        name: "applied".into(),
        patch_type: Wire::Apply as i32,
        patch: serde_json::to_vec(&cm("applied", json!({"a": value}))).unwrap(),
        field_manager: manager.into(),
        force,
        ..Default::default()
    };
    let status = c
        .raw()
        .patch(apply("", "2", false))
        .await
        .expect_err("an apply names its manager");
    let e = keel_wire::error(&status);
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(
        e.message,
        r#"PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch"#
    );
    let status = c
        .raw()
        .patch(apply("grpc-applier", "2", false))
        .await
        .expect_err("a is the creator's");
    assert_eq!(status.code(), tonic::Code::Aborted);
    let e = keel_wire::error(&status);
    assert_eq!(e.reason, Reason::Conflict);
    assert_eq!(e.causes[0].reason, "FieldManagerConflict");
    assert_eq!(e.causes[0].field, ".data.a");
    let forced = c
        .raw()
        .patch(apply("grpc-applier", "2", true))
        .await
        .unwrap()
        .into_inner();
    let o: Value = serde_json::from_slice(&forced.object).unwrap();
    assert_eq!(o["data"]["a"], "2");
    assert_eq!(o["metadata"]["managedFields"][0]["manager"], "grpc-applier");
    assert_eq!(o["metadata"]["managedFields"][0]["operation"], "Apply");
}
