//! `keel-initializer` end to end: the real binary against a real `keel-apiserver` and etcd.
//! The Pods here name the initializer in `metadata.initializers.pending` themselves; the API
//! server's admission side (filling `pending` from InitializerConfigurations, opt-in
//! annotations, timeouts) is tested in `admission.rs`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use keel_client::{Client, ListParams, gvr};
use keel_tests::{ApiServer, Etcd, KeelService, eventually};
use serde_json::{Value, json};

const NAME: &str = "envoy.initializer.kubernetes.io";

fn pods() -> keel_client::GroupVersionResource {
    gvr("", "v1", "pods")
}

fn pod(name: &str, pending: &[&str]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "myapp"},
            "initializers": {"pending": pending.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()}},
        "spec": {"containers": [{"name": "myapp-container", "image": "busybox",
            "command": ["sh", "-c", "echo Hello Kubernetes! && sleep 3600"]}]}
    })
}

fn container_names(p: &Value) -> Vec<String> {
    p["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

fn pending(p: &Value) -> Vec<String> {
    p["metadata"]["initializers"]["pending"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| x["name"].as_str().unwrap().to_string())
        .collect()
}

async fn initialized(c: &Client, name: &str) -> Value {
    eventually(
        Duration::from_secs(30),
        &format!("{name} initialized"),
        || async {
            let p = c.get(&pods(), "default", name).await.ok()?;
            pending(&p).is_empty().then_some(p)
        },
    )
    .await
}

#[tokio::test]
async fn the_seed_pod_gets_envoy_and_its_volume_and_keeps_its_own_container() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    let _init = KeelService::initializer(&[&api], &[]).await;
    let created = c
        .create(&pods(), "default", &pod("myapp-pod", &[NAME]))
        .await
        .unwrap();
    let p = initialized(&c, "myapp-pod").await;
    assert_eq!(container_names(&p), ["myapp-container", "envoy"]);
    assert_eq!(
        p["spec"]["containers"][0], created["spec"]["containers"][0],
        "the user's container is untouched"
    );
    assert_eq!(p["spec"]["volumes"][0]["name"], "envoy-conf");
    assert_eq!(p["metadata"]["uid"], created["metadata"]["uid"]);
}

#[tokio::test]
async fn only_the_head_of_pending_acts_and_others_are_left_alone() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    let _init = KeelService::initializer(&[&api], &[]).await;
    c.create(
        &pods(),
        "default",
        &pod("first-other", &["other.example.com", NAME]),
    )
    .await
    .unwrap();
    c.create(&pods(), "default", &pod("plain", &[]))
        .await
        .unwrap();
    // A Pod created after those two is initialized: the initializer has seen them all.
    c.create(&pods(), "default", &pod("marker", &[NAME]))
        .await
        .unwrap();
    initialized(&c, "marker").await;
    let p = c
        .get_uninitialized(&pods(), "default", "first-other")
        .await
        .unwrap();
    assert_eq!(pending(&p), ["other.example.com", NAME], "not its turn");
    assert_eq!(container_names(&p), ["myapp-container"]);
    let p = c.get(&pods(), "default", "plain").await.unwrap();
    assert_eq!(container_names(&p), ["myapp-container"]);

    // The other initializer finishes (removing its name): now it is this one's turn.
    c.patch(
        &pods(),
        "default",
        "first-other",
        keel_client::PatchType::Merge,
        &json!({"metadata": {"initializers": {"pending": [{"name": NAME}]}}}),
    )
    .await
    .unwrap();
    let p = initialized(&c, "first-other").await;
    assert_eq!(container_names(&p), ["myapp-container", "envoy"]);
}

#[tokio::test]
async fn two_replicas_never_inject_twice_and_a_rerun_writes_nothing() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    let _a = KeelService::initializer(&[&api], &[]).await;
    let mut b = KeelService::initializer(&[&api], &[]).await;
    for i in 0..30 {
        c.create(&pods(), "default", &pod(&format!("p{i}"), &[NAME]))
            .await
            .unwrap();
    }
    for i in 0..30 {
        let p = initialized(&c, &format!("p{i}")).await;
        assert_eq!(container_names(&p), ["myapp-container", "envoy"], "p{i}");
    }
    let before: Vec<(String, String)> = c
        .list(&pods(), "default", &ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    // A restarted replica sees every Pod again and writes none of them.
    b.restart().await;
    let marker = c
        .create(&pods(), "default", &pod("marker", &[NAME]))
        .await
        .unwrap();
    initialized(&c, "marker").await;
    let after = c
        .list(&pods(), "default", &ListParams::default())
        .await
        .unwrap()
        .items;
    for (name, rv) in before {
        let now = after
            .iter()
            .find(|p| p["metadata"]["name"] == name.as_str())
            .unwrap();
        assert_eq!(
            now["metadata"]["resourceVersion"],
            rv.as_str(),
            "{name} rewritten"
        );
    }
    assert!(marker["metadata"]["uid"].is_string());
}
