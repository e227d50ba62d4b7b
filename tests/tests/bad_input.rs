//! Bad input gets a typed error naming the object and field, and the server keeps serving.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use keel_client::{ApiError, Client, PatchType, Reason, gvr};
use keel_tests::{ApiServer, Etcd};
use keel_wire::proto::{CreateRequest, ResourceRef};
use serde_json::{Value, json};

fn cms_ref() -> Option<ResourceRef> {
    Some(ResourceRef {
        group: String::new(),
        version: "v1".into(),
        resource: "configmaps".into(),
    })
}

async fn create_raw(c: &Client, body: Vec<u8>) -> ApiError {
    let req = CreateRequest {
        resource: cms_ref(),
        namespace: "default".into(),
        object: body,
        ..Default::default()
    };
    let status = c.raw().create(req).await.expect_err("must be refused");
    keel_wire::error(&status)
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
}

async fn still_serving(c: &Client) {
    let name = format!("alive-{}", rand_suffix());
    c.create(&gvr("", "v1", "configmaps"), "default", &cm(&name))
        .await
        .expect("the server still serves");
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::test]
async fn malformed_bodies_are_bad_requests() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;

    let e = create_raw(&c, b"{\"metadata\": ".to_vec()).await;
    assert_eq!(
        (e.reason, keel_wire::code(e.reason)),
        (Reason::BadRequest, tonic::Code::InvalidArgument)
    );
    assert!(e.message.contains("ConfigMap"), "{}", e.message);

    let e = create_raw(&c, b"[1, 2, 3]".to_vec()).await;
    assert_eq!(e.reason, Reason::BadRequest);
    assert!(e.message.contains("not an object"), "{}", e.message);

    let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    let e = create_raw(&c, deep.into_bytes()).await;
    assert_eq!(e.reason, Reason::BadRequest);

    let e = create_raw(
        &c,
        br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"}}"#.to_vec(),
    )
    .await;
    assert_eq!(e.reason, Reason::BadRequest);
    assert!(e.message.contains("kind"), "{}", e.message);
    assert_eq!(e.target.name, "x");

    let e = create_raw(
        &c,
        br#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"x"}}"#.to_vec(),
    )
    .await;
    assert_eq!(e.reason, Reason::BadRequest);
    still_serving(&c).await;
}

#[tokio::test]
async fn invalid_names_are_invalid_with_their_field() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let long = "a".repeat(254);
    for bad in ["Upper", "a/b", "..", "a..b", "-a", long.as_str(), ""] {
        let e = c.create(&cms, "default", &cm(bad)).await.unwrap_err();
        assert_eq!(
            (e.reason, keel_wire::code(e.reason)),
            (Reason::Invalid, tonic::Code::InvalidArgument),
            "{bad:?}"
        );
        assert_eq!(e.causes[0].field, "metadata.name", "{bad:?}");
        assert_eq!(e.target.kind, "ConfigMap");
    }
    // By name, an invalid name is simply not there (as in Kubernetes), and never a key.
    let e = c.get(&cms, "default", "a/b").await.unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
    let e = c
        .delete(&cms, "default", "../x", &Default::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
    let e = c.get(&cms, "Bad_NS", "x").await.unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
    let e = c.get(&cms, "default", "").await.unwrap_err();
    assert_eq!(
        (e.reason, e.causes[0].field.as_str()),
        (Reason::Invalid, "metadata.name")
    );

    let mut o = cm("labels");
    o["metadata"]["labels"] = json!({"bad key": "v", "ok": "bad value!"});
    let e = c.create(&cms, "default", &o).await.unwrap_err();
    let fields: Vec<&str> = e.causes.iter().map(|c| c.field.as_str()).collect();
    // apimachinery names the labels, not the key, for a bad value.
    assert_eq!(fields, ["metadata.labels", "metadata.labels"]);

    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
    let e = c
        .create(&gvr("", "v1", "pods"), "default", &pod)
        .await
        .unwrap_err();
    assert_eq!(e.causes[0].field, "spec.containers[0].image");
    still_serving(&c).await;
}

#[tokio::test]
async fn unknown_resources_and_missing_namespaces_are_not_found() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let e = c
        .get(&gvr("", "v1", "widgets"), "default", "x")
        .await
        .unwrap_err();
    assert_eq!(
        (e.reason, keel_wire::code(e.reason)),
        (Reason::NotFound, tonic::Code::NotFound)
    );
    assert!(e.message.contains("widgets"), "{}", e.message);
    let e = c
        .create(&gvr("apps", "v2", "deployments"), "default", &json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
    let e = c
        .create(&gvr("", "v1", "configmaps"), "missing", &cm("x"))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
    assert_eq!(
        (e.target.kind.as_str(), e.target.name.as_str()),
        ("namespaces", "missing")
    );
    let e = c
        .list(
            &gvr("", "v1", "configmaps"),
            "",
            &keel_client::ListParams {
                label_selector: "a in (b".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);
    still_serving(&c).await;
}

#[tokio::test]
async fn oversized_objects_are_refused_and_nothing_is_stored() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    for size in [2, 5, 10, 20].map(|mib| mib * 1024 * 1024) {
        let mut o = cm("big");
        o["data"] = json!({"blob": "x".repeat(size)});
        let e = c.create(&cms, "default", &o).await.unwrap_err();
        assert_eq!(
            (e.reason, keel_wire::code(e.reason)),
            (
                Reason::RequestEntityTooLarge,
                tonic::Code::ResourceExhausted
            ),
            "{size}: {e:?}"
        );
        // Past the message limit too, the server's own typed error (its Status), not the
        // transport's: the client reads no message text.
        if size > 8 * 1024 * 1024 {
            assert!(
                e.message
                    .starts_with("Request entity too large: the request message is"),
                "{e:?}"
            );
        }
    }
    assert_eq!(
        c.get(&cms, "default", "big").await.unwrap_err().reason,
        Reason::NotFound
    );

    // Growing an object past the limit by patches is refused too.
    c.create(&cms, "default", &cm("grow")).await.unwrap();
    let chunk = "y".repeat(1024 * 1024);
    c.patch(
        &cms,
        "default",
        "grow",
        PatchType::Merge,
        &json!({"data": {"a": chunk}}),
    )
    .await
    .unwrap();
    let e = c
        .patch(
            &cms,
            "default",
            "grow",
            PatchType::Merge,
            &json!({"data": {"b": chunk}}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::RequestEntityTooLarge, "{e:?}");
    assert!(c.get(&cms, "default", "grow").await.unwrap()["data"]["b"].is_null());
    still_serving(&c).await;
}

#[tokio::test]
async fn a_list_too_large_for_one_answer_is_refused_typed_and_pages_work() {
    let etcd = Etcd::start().await;
    let mut api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    // Seven objects of 1.4 MB: 9.8 MB in one answer, over the 8 MiB a message may carry.
    for i in 0..7 {
        let mut o = cm(&format!("bulk-{i}"));
        o["data"] = json!({"blob": "x".repeat(1_400_000)});
        c.create(&cms, "default", &o).await.unwrap();
    }
    let e = c
        .list(&cms, "default", &keel_client::ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::RequestEntityTooLarge, "{e:?}");
    assert!(e.message.contains("list in pages"), "{e:?}");
    let page = c
        .list(
            &cms,
            "default",
            &keel_client::ListParams {
                limit: 3,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.items.len(), 3);
    // A restarted server's watch cache loads them all: etcd's answers come in parts small
    // enough to read.
    api.restart().await;
    let c = api.client().await;
    let mut w = c
        .watch(
            &cms,
            &keel_client::WatchParams {
                namespace: "default".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for _ in 0..7 {
        let ev = w.next().await.unwrap().unwrap();
        assert_eq!(ev.kind, keel_client::EventType::Added);
    }
    still_serving(&c).await;
}

#[tokio::test]
async fn bad_patches_are_refused_and_leave_the_object_alone() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let mut o = cm("p");
    o["data"] = json!({"a": "1"});
    let before = c.create(&cms, "default", &o).await.unwrap();

    let e = c
        .patch_subresource(
            &cms,
            "default",
            "p",
            "",
            PatchType::Merge,
            b"{not json".to_vec(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);
    assert_eq!(e.target.name, "p");
    let e = c
        .patch(&cms, "default", "p", PatchType::Json, &json!({"op": "add"}))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);
    let e = c
        .patch(
            &cms,
            "default",
            "p",
            PatchType::Json,
            &json!([{"op": "explode", "path": "/a"}]),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);
    let e = c
        .patch(
            &cms,
            "default",
            "p",
            PatchType::Json,
            &json!([{"op": "remove", "path": "/data/missing"}]),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);
    let p = json!([{"op": "replace", "path": "/data/a", "value": "2"}, {"op": "test", "path": "/data/a", "value": "1"}]);
    let e = c
        .patch(&cms, "default", "p", PatchType::Json, &p)
        .await
        .unwrap_err();
    assert_eq!(
        (e.reason, e.causes[0].field.as_str()),
        (Reason::Invalid, "patch")
    );
    let ops: Vec<Value> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/kind", "value": "ConfigMap"}))
        .collect();
    let e = c
        .patch(&cms, "default", "p", PatchType::Json, &Value::Array(ops))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::RequestEntityTooLarge);
    let e = c
        .patch(
            &cms,
            "default",
            "p",
            PatchType::Merge,
            &json!({"kind": "Pod"}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);
    let e = c
        .patch(
            &cms,
            "default",
            "p",
            PatchType::Merge,
            &json!({"metadata": {"name": "q"}}),
        )
        .await
        .unwrap_err();
    // Kubernetes' check of the patched object's name against the request's.
    assert_eq!(
        (e.reason, e.message.as_str()),
        (
            Reason::BadRequest,
            "the name of the object (q) does not match the name on the URL (p)"
        )
    );
    // A strategic patch deleting the whole object leaves `{}`, which fails that check.
    let e = c
        .patch(
            &cms,
            "default",
            "p",
            PatchType::Strategic,
            &json!({"$patch": "delete"}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (e.reason, e.message.as_str()),
        (
            Reason::BadRequest,
            "the name of the object () does not match the name on the URL (p)"
        )
    );
    let e = c
        .patch(
            &cms,
            "default",
            "p",
            PatchType::Merge,
            &json!({"data": {"n": 5}}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (e.reason, e.causes[0].field.as_str()),
        (Reason::Invalid, "data.n")
    );
    let e = c
        .patch(&cms, "default", "p", PatchType::Unspecified, &json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);

    // A patch that would nest the object too deep.
    let mut deep = json!("x");
    for _ in 0..120 {
        deep = json!({"d": deep});
    }
    let e = c
        .patch(
            &cms,
            "default",
            "p",
            PatchType::Json,
            &json!([{"op": "add", "path": "/spec", "value": deep}]),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest, "{e:?}");

    assert_eq!(
        c.get(&cms, "default", "p").await.unwrap(),
        before,
        "nothing changed"
    );
    still_serving(&c).await;
}

/// A Create may not choose the revision its object is stored at: refused with Kubernetes'
/// message (Kubernetes' storage answers it as a 500 of reason Unknown; keel as a BadRequest),
/// and nothing is stored. `"0"` means no version, as in Kubernetes.
#[tokio::test]
async fn a_create_that_sets_a_resource_version_is_refused() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");

    let mut o = cm("pinned");
    o["metadata"]["resourceVersion"] = json!("12");
    let e = c.create(&cms, "default", &o).await.unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);
    assert_eq!(
        e.message,
        "resourceVersion should not be set on objects to be created"
    );
    assert_eq!(e.target.name, "pinned");
    let e = c.get(&cms, "default", "pinned").await.unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);

    o["metadata"]["resourceVersion"] = json!("0");
    let created = c.create(&cms, "default", &o).await.unwrap();
    assert_ne!(created["metadata"]["resourceVersion"], "0");
    still_serving(&c).await;
}
