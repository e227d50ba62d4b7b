//! The garbage collector and the namespace lifecycle, end to end: real etcd, the real
//! `keel-apiserver` and the real `keel-controller-manager` running the garbage collector,
//! the namespace, ReplicaSet and pod-lifecycle controllers.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use keel_client::{
    Client, DeleteParams, GroupVersionResource, ListParams, PatchType, PropagationPolicy, Reason,
    gvr,
};
use keel_tests::{ApiServer, ControllerManager, Etcd, eventually};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
const HOLD: &str = "example.com/hold";

fn pods() -> GroupVersionResource {
    gvr("", "v1", "pods")
}
fn configmaps() -> GroupVersionResource {
    gvr("", "v1", "configmaps")
}
fn replicasets() -> GroupVersionResource {
    gvr("apps", "v1", "replicasets")
}
fn namespaces() -> GroupVersionResource {
    gvr("", "v1", "namespaces")
}

/// etcd, an API server and a controller-manager running the controllers under test.
struct Cluster {
    _etcd: Etcd,
    _api: ApiServer,
    _cm: ControllerManager,
    c: Client,
}

async fn cluster(namespaces_to_create: &[&str]) -> Cluster {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let cm = ControllerManager::start(
        &[&api],
        &[
            "--controllers",
            "garbagecollector,namespace,replicaset,podlifecycle",
        ],
    )
    .await;
    let c = api.client().await;
    for ns in namespaces_to_create {
        c.create(
            &namespaces(),
            "",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await
        .unwrap();
    }
    Cluster {
        _etcd: etcd,
        _api: api,
        _cm: cm,
        c,
    }
}

fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"].as_str().unwrap().to_string()
}

fn owner_ref(owner: &Value, block: bool) -> Value {
    json!({
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": block,
    })
}

fn configmap(name: &str, owners: Value, finalizers: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "ownerReferences": owners, "finalizers": finalizers},
        "data": {"k": "v"}})
}

fn replicaset(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:1.7.9"}]}
            }
        }
    })
}

async fn pods_of(c: &Client, ns: &str, app: &str) -> Vec<Value> {
    let p = ListParams {
        label_selector: format!("app={app}"),
        ..Default::default()
    };
    c.list(&pods(), ns, &p).await.unwrap().items
}

/// Creates a ReplicaSet and waits for its `replicas` Pods, owned by it.
async fn replicaset_with_pods(c: &Client, ns: &str, name: &str, replicas: usize) -> Value {
    let rs = c
        .create(&replicasets(), ns, &replicaset(name, replicas as i64))
        .await
        .unwrap();
    let rs_uid = uid(&rs);
    eventually(WAIT, &format!("{replicas} pods of {name}"), || async {
        let pods = pods_of(c, ns, name).await;
        let owned = pods
            .iter()
            .filter(|p| p["metadata"]["ownerReferences"][0]["uid"] == rs_uid.as_str())
            .count();
        (owned == replicas).then_some(())
    })
    .await;
    rs
}

async fn gone(c: &Client, r: &GroupVersionResource, ns: &str, name: &str) -> bool {
    matches!(c.get(r, ns, name).await, Err(e) if e.reason == Reason::NotFound)
}

async fn wait_gone(c: &Client, r: &GroupVersionResource, ns: &str, name: &str) {
    eventually(WAIT, &format!("{r} {ns}/{name} to go"), || async {
        gone(c, r, ns, name).await.then_some(())
    })
    .await;
}

async fn release(c: &Client, r: &GroupVersionResource, ns: &str, name: &str) {
    c.patch(
        r,
        ns,
        name,
        PatchType::Merge,
        &json!({"metadata": {"finalizers": null}}),
    )
    .await
    .unwrap();
}

fn delete_with(p: PropagationPolicy) -> DeleteParams {
    DeleteParams {
        propagation: p,
        ..Default::default()
    }
}

#[tokio::test]
async fn background_deletion_removes_dependents_whose_owners_are_gone() {
    let k = cluster(&["bg"]).await;
    let c = &k.c;

    // A ReplicaSet's Pods go with it.
    replicaset_with_pods(c, "bg", "web", 2).await;
    let (_, deleted) = c
        .delete(&replicasets(), "bg", "web", &DeleteParams::default())
        .await
        .unwrap();
    assert!(deleted, "a background delete removes the owner at once");
    eventually(WAIT, "the pods of web to go", || async {
        pods_of(c, "bg", "web").await.is_empty().then_some(())
    })
    .await;

    // A ConfigMap owned by a deleted ConfigMap goes.
    let parent = c
        .create(
            &configmaps(),
            "bg",
            &configmap("parent", json!([]), json!([])),
        )
        .await
        .unwrap();
    c.create(
        &configmaps(),
        "bg",
        &configmap("child", json!([owner_ref(&parent, false)]), json!([])),
    )
    .await
    .unwrap();
    c.delete(&configmaps(), "bg", "parent", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(c, &configmaps(), "bg", "child").await;

    // An owner replaced by another object of the same name is gone: its dependent goes, the
    // new object's dependent stays.
    let first = c
        .create(
            &configmaps(),
            "bg",
            &configmap("owner", json!([]), json!([])),
        )
        .await
        .unwrap();
    c.delete(&configmaps(), "bg", "owner", &DeleteParams::default())
        .await
        .unwrap();
    let second = c
        .create(
            &configmaps(),
            "bg",
            &configmap("owner", json!([]), json!([])),
        )
        .await
        .unwrap();
    assert_ne!(uid(&first), uid(&second));
    c.create(
        &configmaps(),
        "bg",
        &configmap("of-second", json!([owner_ref(&second, false)]), json!([])),
    )
    .await
    .unwrap();
    c.create(
        &configmaps(),
        "bg",
        &configmap("of-first", json!([owner_ref(&first, false)]), json!([])),
    )
    .await
    .unwrap();
    wait_gone(c, &configmaps(), "bg", "of-first").await;

    // Owned by one living and one dead owner: only the dead owner's reference goes.
    let ghost = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ghost", "uid": "00000000-0000-0000-0000-000000000000"}});
    c.create(
        &configmaps(),
        "bg",
        &configmap(
            "two-owners",
            json!([owner_ref(&second, false), owner_ref(&ghost, true)]),
            json!([]),
        ),
    )
    .await
    .unwrap();
    eventually(WAIT, "the dangling reference to go", || async {
        let o = c.get(&configmaps(), "bg", "two-owners").await.unwrap();
        let refs = o["metadata"]["ownerReferences"].as_array().unwrap().clone();
        (refs.len() == 1).then_some(refs)
    })
    .await
    .iter()
    .for_each(|r| assert_eq!(r["uid"], second["metadata"]["uid"]));
    assert!(
        c.get(&configmaps(), "bg", "of-second").await.is_ok(),
        "a dependent of a living owner stays"
    );
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let k = cluster(&["fg"]).await;
    let c = &k.c;

    // A ReplicaSet deleted in the foreground stays, marked, while a Pod of it is still there.
    let rs = replicaset_with_pods(c, "fg", "web", 2).await;
    let held = pods_of(c, "fg", "web").await[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    c.patch(
        &pods(),
        "fg",
        &held,
        PatchType::Merge,
        &json!({"metadata": {"finalizers": [HOLD]}}),
    )
    .await
    .unwrap();
    let (marked, deleted) = c
        .delete(
            &replicasets(),
            "fg",
            "web",
            &delete_with(PropagationPolicy::Foreground),
        )
        .await
        .unwrap();
    assert!(!deleted);
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        marked["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    eventually(
        WAIT,
        "the unheld pod to go, the held one to be deleting",
        || async {
            let pods = pods_of(c, "fg", "web").await;
            (pods.len() == 1
                && pods[0]["metadata"]["name"] == held.as_str()
                && pods[0]["metadata"]["deletionTimestamp"].is_string()
                && pods[0]["metadata"]["finalizers"] == json!([HOLD]))
            .then_some(())
        },
    )
    .await;
    let still = c.get(&replicasets(), "fg", "web").await.unwrap();
    assert_eq!(still["metadata"]["uid"], rs["metadata"]["uid"]);
    assert!(still["metadata"]["deletionTimestamp"].is_string());
    release(c, &pods(), "fg", &held).await;
    wait_gone(c, &replicasets(), "fg", "web").await;
    assert!(pods_of(c, "fg", "web").await.is_empty());

    // The owner waits only for dependents with blockOwnerDeletion; both are deleted.
    let boss = c
        .create(
            &configmaps(),
            "fg",
            &configmap("boss", json!([]), json!([])),
        )
        .await
        .unwrap();
    for (name, block) in [("blocker", true), ("bystander", false)] {
        c.create(
            &configmaps(),
            "fg",
            &configmap(name, json!([owner_ref(&boss, block)]), json!([HOLD])),
        )
        .await
        .unwrap();
    }
    c.delete(
        &configmaps(),
        "fg",
        "boss",
        &delete_with(PropagationPolicy::Foreground),
    )
    .await
    .unwrap();
    eventually(WAIT, "both dependents to be deleting", || async {
        let mut n = 0;
        for name in ["blocker", "bystander"] {
            let o = c.get(&configmaps(), "fg", name).await.unwrap();
            n += usize::from(o["metadata"]["deletionTimestamp"].is_string());
        }
        (n == 2).then_some(())
    })
    .await;
    assert!(
        c.get(&configmaps(), "fg", "boss").await.is_ok(),
        "the owner waits for its blocking dependent"
    );
    release(c, &configmaps(), "fg", "blocker").await;
    wait_gone(c, &configmaps(), "fg", "boss").await;
    let bystander = c.get(&configmaps(), "fg", "bystander").await.unwrap();
    assert!(bystander["metadata"]["deletionTimestamp"].is_string());
    release(c, &configmaps(), "fg", "bystander").await;
    wait_gone(c, &configmaps(), "fg", "bystander").await;

    // Grandchildren go first: the child is deleted in the foreground too, so it waits for its
    // own blocking dependent, and the grandparent for it.
    let grandparent = c
        .create(
            &configmaps(),
            "fg",
            &configmap("grandparent", json!([]), json!([])),
        )
        .await
        .unwrap();
    let parent = c
        .create(
            &configmaps(),
            "fg",
            &configmap("parent", json!([owner_ref(&grandparent, true)]), json!([])),
        )
        .await
        .unwrap();
    c.create(
        &configmaps(),
        "fg",
        &configmap(
            "grandchild",
            json!([owner_ref(&parent, true)]),
            json!([HOLD]),
        ),
    )
    .await
    .unwrap();
    c.delete(
        &configmaps(),
        "fg",
        "grandparent",
        &delete_with(PropagationPolicy::Foreground),
    )
    .await
    .unwrap();
    eventually(WAIT, "the grandchild to be deleting", || async {
        let o = c.get(&configmaps(), "fg", "grandchild").await.unwrap();
        o["metadata"]["deletionTimestamp"].is_string().then_some(())
    })
    .await;
    let parent = c.get(&configmaps(), "fg", "parent").await.unwrap();
    assert_eq!(
        parent["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(c.get(&configmaps(), "fg", "grandparent").await.is_ok());
    release(c, &configmaps(), "fg", "grandchild").await;
    wait_gone(c, &configmaps(), "fg", "grandparent").await;
    assert!(gone(c, &configmaps(), "fg", "parent").await);
    assert!(gone(c, &configmaps(), "fg", "grandchild").await);
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_without_the_reference() {
    let k = cluster(&["orph"]).await;
    let c = &k.c;
    replicaset_with_pods(c, "orph", "web", 2).await;
    let (marked, deleted) = c
        .delete(
            &replicasets(),
            "orph",
            "web",
            &delete_with(PropagationPolicy::Orphan),
        )
        .await
        .unwrap();
    assert!(!deleted);
    assert_eq!(marked["metadata"]["finalizers"], json!(["orphan"]));
    wait_gone(c, &replicasets(), "orph", "web").await;
    let pods = pods_of(c, "orph", "web").await;
    assert_eq!(pods.len(), 2, "orphans survive their owner");
    for p in &pods {
        let refs = &p["metadata"]["ownerReferences"];
        assert!(
            refs.is_null() || refs.as_array().is_some_and(|a| a.is_empty()),
            "{refs}"
        );
        assert!(p["metadata"]["deletionTimestamp"].is_null());
    }
}

#[tokio::test]
async fn a_deleted_namespace_is_emptied_then_removed() {
    let k = cluster(&["doomed"]).await;
    let c = &k.c;
    let ns = c.get(&namespaces(), "", "doomed").await.unwrap();
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    for name in ["a", "b"] {
        c.create(
            &configmaps(),
            "doomed",
            &configmap(name, json!([]), json!([])),
        )
        .await
        .unwrap();
    }
    // One ConfigMap holds its deletion until released, so the namespace stays a while.
    c.create(
        &configmaps(),
        "doomed",
        &configmap("held", json!([]), json!([HOLD])),
    )
    .await
    .unwrap();
    replicaset_with_pods(c, "doomed", "web", 2).await;

    let (marked, deleted) = c
        .delete(&namespaces(), "", "doomed", &DeleteParams::default())
        .await
        .unwrap();
    assert!(!deleted);
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(marked["status"]["phase"], "Terminating");

    let e = c
        .create(
            &configmaps(),
            "doomed",
            &configmap("late", json!([]), json!([])),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden);
    assert_eq!(
        e.message,
        "configmaps \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
    );
    let e = c
        .delete(&namespaces(), "", "doomed", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Conflict, "{}", e.message);

    // Everything but the held ConfigMap goes; the namespace says what is left.
    eventually(WAIT, "all content but the held ConfigMap to go", || async {
        let cms = c
            .list(&configmaps(), "doomed", &ListParams::default())
            .await
            .unwrap()
            .items;
        let rss = c
            .list(&replicasets(), "doomed", &ListParams::default())
            .await
            .unwrap()
            .items;
        let pods = c
            .list(&pods(), "doomed", &ListParams::default())
            .await
            .unwrap()
            .items;
        (cms.len() == 1 && rss.is_empty() && pods.is_empty()).then_some(())
    })
    .await;
    let ns = eventually(WAIT, "the ContentRemaining condition", || async {
        let ns = c.get(&namespaces(), "", "doomed").await.unwrap();
        let remaining = ns["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "NamespaceContentRemaining")
            .cloned()?;
        (remaining["status"] == "True").then_some(ns)
    })
    .await;
    assert_eq!(ns["status"]["phase"], "Terminating");
    let finalizers = ns["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "NamespaceFinalizersRemaining")
        .unwrap();
    assert_eq!(
        finalizers["message"],
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    );

    release(c, &configmaps(), "doomed", "held").await;
    wait_gone(c, &namespaces(), "", "doomed").await;

    // The built-in namespaces cannot be deleted.
    let e = c
        .delete(&namespaces(), "", "default", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden);
    assert_eq!(
        e.message,
        "namespaces \"default\" is forbidden: this namespace may not be deleted"
    );
    assert!(c.get(&namespaces(), "", "default").await.is_ok());
}
