//! Strategic merge patches through the API server: lists of containers and volumes merge by
//! name, so a sidecar injection keeps the user's containers and concurrent writers of
//! different containers both land. The Pods are held by an initializer, as an initialized Pod's
//! containers can no longer change.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use keel_client::{PatchType, gvr};
use keel_patch::{BuiltinSchema, create_two_way_merge_patch};
use keel_tests::{ApiServer, Etcd};
use serde_json::{Value, json};

/// The seed's Pod, held uninitialized by an initializer nobody runs.
fn myapp_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "myapp-pod", "labels": {"app": "myapp"},
            "initializers": {"pending": [{"name": "held.initializer.example.com"}]}},
        "spec": {"containers": [{
            "name": "myapp-container", "image": "busybox",
            "command": ["sh", "-c", "echo Hello Kubernetes! && sleep 3600"]
        }]}
    })
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn the_envoy_sidecar_is_injected_by_a_two_way_patch_and_the_app_container_stays() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let pods = gvr("", "v1", "pods");
    let live = c.create(&pods, "default", &myapp_pod()).await.unwrap();

    // What the initializer does: a copy with the sidecar, and the patch between the two.
    let mut desired = live.clone();
    desired["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({
            "name": "envoy",
            "image": "lyft/envoy:845747b88f102c0fd262ab234308e9e22f693a1",
            "command": ["/usr/local/bin/envoy"],
            "volumeMounts": [{"name": "envoy-conf", "mountPath": "/etc/envoy"}]
        }));
    desired["spec"]["volumes"] = json!([{"name": "envoy-conf", "configMap": {"name": "envoy"}}]);
    let schema = BuiltinSchema::for_kind("v1", "Pod").unwrap();
    let patch = create_two_way_merge_patch(&live, &desired, &schema).unwrap();
    assert!(
        patch["spec"]["containers"].as_array().unwrap().len() < 2,
        "the patch names only the new container: {patch}"
    );

    let patched = c
        .patch(&pods, "default", "myapp-pod", PatchType::Strategic, &patch)
        .await
        .unwrap();
    assert_eq!(
        names(&patched["spec"]["containers"]),
        ["myapp-container", "envoy"]
    );
    assert_eq!(
        patched["spec"]["containers"][0],
        live["spec"]["containers"][0]
    );
    assert_eq!(names(&patched["spec"]["volumes"]), ["envoy-conf"]);

    // Merging by name makes a re-run harmless.
    let again = c
        .patch(&pods, "default", "myapp-pod", PatchType::Strategic, &patch)
        .await
        .unwrap();
    assert_eq!(again["spec"], patched["spec"]);
    assert_eq!(
        again["metadata"]["resourceVersion"], patched["metadata"]["resourceVersion"],
        "no write"
    );
}

#[tokio::test]
async fn changing_one_containers_image_leaves_the_others_alone() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let deploys = gvr("apps", "v1", "deployments");
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                     {"name": "nginx", "image": "nginx", "ports": [{"containerPort": 80}]},
                     {"name": "log", "image": "fluentd", "env": [{"name": "LEVEL", "value": "info"}]}]}}}});
    let d = c.create(&deploys, "default", &d).await.unwrap();
    let p = json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.7.9"}]}}}});
    let o = c
        .patch(&deploys, "default", "web", PatchType::Strategic, &p)
        .await
        .unwrap();
    let cs = &o["spec"]["template"]["spec"]["containers"];
    assert_eq!(names(cs), ["nginx", "log"]);
    assert_eq!(cs[0]["image"], "nginx:1.7.9");
    assert_eq!(
        cs[0]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}])
    );
    assert_eq!(cs[1], d["spec"]["template"]["spec"]["containers"][1]);
    assert_eq!(o["metadata"]["generation"], 2);

    // Directives: delete one container by name.
    let del = json!({"spec": {"template": {"spec": {"containers": [{"name": "log", "$patch": "delete"}]}}}});
    let o = c
        .patch(&deploys, "default", "web", PatchType::Strategic, &del)
        .await
        .unwrap();
    assert_eq!(
        names(&o["spec"]["template"]["spec"]["containers"]),
        ["nginx"]
    );
    assert_eq!(
        o["spec"]["template"]["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}])
    );

    // A merge patch of the same body replaces the whole list: the difference strategic makes.
    let o = c
        .patch(&deploys, "default", "web", PatchType::Merge, &p)
        .await
        .unwrap();
    let cs = &o["spec"]["template"]["spec"]["containers"];
    assert_eq!(names(cs), ["nginx"]);
    assert_eq!(
        cs[0]["ports"],
        Value::Null,
        "the ports went with the old list"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_of_different_containers_of_one_pod_both_land() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let pods = gvr("", "v1", "pods");
    let mut pod = myapp_pod();
    pod["spec"]["containers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "sidecar", "image": "busybox"}));
    c.create(&pods, "default", &pod).await.unwrap();
    let mut tasks = Vec::new();
    for (container, writer) in [("myapp-container", "a"), ("sidecar", "b")] {
        let (c, pods) = (c.clone(), pods.clone());
        tasks.push(tokio::spawn(async move {
            let mut last = 0;
            for n in 1..=100 {
                let p = json!({"spec": {"containers": [{"name": container, "env": [{"name": writer, "value": n.to_string()}]}]}});
                c.patch(&pods, "default", "myapp-pod", PatchType::Strategic, &p).await.unwrap();
                last = n;
            }
            last
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 100);
    }
    let o = c
        .get_uninitialized(&pods, "default", "myapp-pod")
        .await
        .unwrap();
    let cs = &o["spec"]["containers"];
    assert_eq!(names(cs), ["myapp-container", "sidecar"]);
    assert_eq!(cs[0]["env"], json!([{"name": "a", "value": "100"}]));
    assert_eq!(cs[1]["env"], json!([{"name": "b", "value": "100"}]));
    assert_eq!(
        cs[0]["image"], "busybox",
        "the rest of each container is untouched"
    );
}
