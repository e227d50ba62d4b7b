//! Initializers' admission side end to end: the real `keel-apiserver` fills
//! `metadata.initializers.pending` from InitializerConfigurations and opt-in annotations, hides
//! uninitialized objects from ordinary readers, guards `pending` and an initialized Pod's spec,
//! and enforces timeouts; the real `keel-initializer` and `keel-controller-manager` work against
//! it. Real etcd throughout, nothing mocked. `initializer.rs` tests `keel-initializer` alone.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use keel_client::{
    ApiError, Client, DeleteParams, Event, EventType, GroupVersionResource, ListParams, Metadata,
    PatchType, Reason, WatchParams, gvr,
};
use keel_tests::{ApiServer, ControllerManager, Etcd, KeelService, eventually};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const ENVOY: &str = "envoy.initializer.kubernetes.io";

/// How long an initializer, a controller or a timeout may take to do its part.
const PATIENCE: Duration = Duration::from_secs(20);

fn pods() -> GroupVersionResource {
    gvr("", "v1", "pods")
}

fn events() -> GroupVersionResource {
    gvr("", "v1", "events")
}

fn deployments() -> GroupVersionResource {
    gvr("apps", "v1", "deployments")
}

/// The seeds' `myapp-pod` (deploy/examples/myapp-pod.yaml) under `name`: it says nothing of
/// initializers.
fn myapp_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "myapp"}},
        "spec": {"containers": [{"name": "myapp-container", "image": "busybox",
            "command": ["sh", "-c", "echo Hello Kubernetes! && sleep 3600"]}]}
    })
}

/// An initializer of every Pod, with these extra fields (`timeoutSeconds`, `failurePolicy`).
fn for_pods(name: &str, extra: Value) -> Value {
    let mut i = json!({"name": name,
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]});
    for (k, v) in extra.as_object().into_iter().flatten() {
        i[k] = v.clone();
    }
    i
}

fn names_of(list: &Value) -> Vec<String> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|x| x["name"].as_str().unwrap().to_string())
        .collect()
}

fn container_names(p: &Value) -> Vec<String> {
    names_of(&p["spec"]["containers"])
}

fn volume_names(p: &Value) -> Vec<String> {
    names_of(&p["spec"]["volumes"])
}

fn pending(p: &Value) -> Vec<String> {
    names_of(&p["metadata"]["initializers"]["pending"])
}

/// `pending` as a merge patch writes it (the whole list).
fn pending_patch(names: &[&str]) -> Value {
    let list: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
    json!({"metadata": {"initializers": {"pending": list}}})
}

fn name(obj: &Value) -> String {
    obj["metadata"]["name"].as_str().unwrap_or("").to_string()
}

/// The fields an `Invalid` error names; panics on any other error.
fn invalid_fields(e: &ApiError) -> Vec<&str> {
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    e.causes.iter().map(|c| c.field.as_str()).collect()
}

/// Waits until an ordinary Get finds the Pod: its initializers are done.
async fn initialized(c: &Client, name: &str) -> Value {
    eventually(PATIENCE, &format!("{name} initialized"), || async {
        c.get(&pods(), "default", name).await.ok()
    })
    .await
}

/// Asserts that `cond` holds at each of `period / 100 ms` polls: how a test shows that
/// something does not happen (a Pod stays pending, no second Event comes).
async fn holds_for<F, Fut>(period: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let polls = (period.as_millis() / 100) as usize;
    for i in 0..polls {
        assert!(cond().await, "no longer {what} at poll {i} of {polls}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An ordinary watch of the Pods of `default` from now on.
async fn watch_pods(
    c: &Client,
) -> impl Stream<Item = Result<Event, ApiError>> + Send + Unpin + use<> {
    let list = c
        .list(&pods(), "default", &ListParams::default())
        .await
        .unwrap();
    let params = WatchParams {
        namespace: "default".into(),
        resource_version: list.resource_version,
        ..Default::default()
    };
    c.watch(&pods(), &params).await.unwrap()
}

/// The next event of `stream` that is not a bookmark.
async fn next_event(stream: &mut (impl Stream<Item = Result<Event, ApiError>> + Unpin)) -> Event {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let ev = stream.next().await.expect("the watch ended").unwrap();
            if ev.kind != EventType::Bookmark {
                return ev;
            }
        }
    })
    .await
    .expect("no watch event in time")
}

/// The `InitializerTimeout` Events of `default` about `name`.
async fn timeout_events(c: &Client, name: &str) -> Vec<Value> {
    c.list(&events(), "default", &ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e["reason"] == "InitializerTimeout" && e["involvedObject"]["name"] == name)
        .collect()
}

/// Waits for the one `InitializerTimeout` Event about `name`, checks it, then checks for a few
/// sweeps of both API servers that no second one is recorded.
async fn exactly_one_timeout_event(c: &Client, name: &str) {
    let events = eventually(
        PATIENCE,
        &format!("an InitializerTimeout Event for {name}"),
        || async {
            let events = timeout_events(c, name).await;
            (!events.is_empty()).then_some(events)
        },
    )
    .await;
    assert_eq!(events.len(), 1, "{events:#?}");
    let e = &events[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["involvedObject"]["kind"], "Pod");
    assert_eq!(e["metadata"]["namespace"], "default");
    let message = e["message"].as_str().unwrap();
    assert!(message.contains(ENVOY), "{message}");
    holds_for(
        Duration::from_secs(3),
        &format!("one InitializerTimeout Event for {name}"),
        || async { timeout_events(c, name).await.len() == 1 },
    )
    .await;
}

/// The seeds' walkthrough: the Pod says nothing of Envoy; the server makes it wait for the
/// Envoy initializer, hides it until then, and ordinary watchers meet it with Envoy in.
#[tokio::test]
async fn the_seed_pod_is_hidden_until_envoy_is_injected_and_then_added_to_watchers() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    let config = keel_tests::create_envoy_initializer_configuration(&c).await;
    assert_eq!(config["initializers"][0]["timeoutSeconds"], 30, "defaulted");
    assert_eq!(
        config["initializers"][0]["failurePolicy"], "Ignore",
        "defaulted"
    );
    let mut watch = watch_pods(&c).await;

    let created = c
        .create(&pods(), "default", &myapp_pod("myapp-pod"))
        .await
        .unwrap();
    assert_eq!(pending(&created), [ENVOY]);
    assert_eq!(container_names(&created), ["myapp-container"]);
    let hidden = c.get(&pods(), "default", "myapp-pod").await.unwrap_err();
    assert_eq!(hidden.reason, Reason::NotFound, "{hidden}");
    let listed = c
        .list(&pods(), "default", &ListParams::default())
        .await
        .unwrap();
    assert!(listed.items.is_empty(), "{:#?}", listed.items);
    let waiting = c
        .get_uninitialized(&pods(), "default", "myapp-pod")
        .await
        .unwrap();
    assert_eq!(pending(&waiting), [ENVOY]);
    let all = ListParams {
        include_uninitialized: true,
        ..Default::default()
    };
    let listed = c.list(&pods(), "default", &all).await.unwrap();
    assert_eq!(
        listed.items.iter().map(name).collect::<Vec<_>>(),
        ["myapp-pod"]
    );

    let _init = KeelService::initializer(&[&api], &[]).await;
    let ev = next_event(&mut watch).await;
    assert_eq!((ev.kind, ev.name()), (EventType::Added, "myapp-pod"));
    let p = ev.object;
    assert_eq!(container_names(&p), ["myapp-container", "envoy"]);
    assert_eq!(
        p["spec"]["containers"][0], created["spec"]["containers"][0],
        "the user's container is untouched"
    );
    assert_eq!(volume_names(&p), ["envoy-conf"]);
    assert!(pending(&p).is_empty(), "{p:#}");
    assert_eq!(p["metadata"]["uid"], created["metadata"]["uid"]);
}

#[tokio::test]
async fn without_any_configuration_only_a_pod_that_opts_in_by_annotation_waits_for_envoy() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    let _init = KeelService::initializer(&[&api], &[]).await;

    let created = c
        .create(&pods(), "default", &myapp_pod("plain"))
        .await
        .unwrap();
    assert!(pending(&created).is_empty(), "{created:#}");
    let p = c.get(&pods(), "default", "plain").await.unwrap();
    assert_eq!(container_names(&p), ["myapp-container"]);

    let mut opted = myapp_pod("opted");
    opted["metadata"]["annotations"] = json!({"initializer.kubernetes.io/envoy": "true"});
    let created = c.create(&pods(), "default", &opted).await.unwrap();
    assert_eq!(pending(&created), [ENVOY]);
    let p = initialized(&c, "opted").await;
    assert_eq!(container_names(&p), ["myapp-container", "envoy"]);
    assert_eq!(volume_names(&p), ["envoy-conf"]);

    // The initializer has seen both Pods by now, and left the plain one alone.
    let p = c.get(&pods(), "default", "plain").await.unwrap();
    assert_eq!(container_names(&p), ["myapp-container"]);
    assert!(pending(&p).is_empty());
}

const LABELER: &str = "labeler.initializer.example.com";

/// A second initializer, run by the test: for every Pod whose `pending` it heads it adds the
/// label `labeled-by: labeler` and removes its own name (a merge patch replaces `pending`
/// whole, so it sends the rest), once per Pod. It reports each Pod's name and the containers
/// the Pod had when its turn came. Watches from the revision `rv`.
fn labeler(c: &Client, rv: String) -> mpsc::UnboundedReceiver<(String, Vec<String>)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let c = c.clone();
    tokio::spawn(async move {
        let params = WatchParams {
            namespace: "default".into(),
            resource_version: rv,
            include_uninitialized: true,
            ..Default::default()
        };
        let mut stream = c.watch(&pods(), &params).await.unwrap();
        let mut done: HashSet<String> = HashSet::new();
        while let Some(ev) = stream.next().await {
            let ev = ev.unwrap();
            let p = &ev.object;
            let uid = p["metadata"]["uid"].as_str().unwrap_or("").to_string();
            let waiting = pending(p);
            if ev.kind == EventType::Deleted
                || waiting.first().map(String::as_str) != Some(LABELER)
                || !done.insert(uid)
            {
                continue;
            }
            let rest: Vec<&str> = waiting[1..].iter().map(String::as_str).collect();
            let mut patch = pending_patch(&rest);
            patch["metadata"]["labels"] = json!({"labeled-by": "labeler"});
            c.patch(&pods(), "default", &name(p), PatchType::Merge, &patch)
                .await
                .unwrap();
            if tx.send((name(p), container_names(p))).is_err() {
                return;
            }
        }
    });
    rx
}

/// Configurations merge in name order: `a-first` (Envoy) before `b-second` (the labeler),
/// though created the other way round. Each initializer gets its turn in that order, and both
/// its changes land.
#[tokio::test]
async fn two_initializers_act_one_after_the_other_in_the_order_of_their_configurations() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    keel_tests::create_initializer_configuration(
        &c,
        "b-second",
        json!([for_pods(LABELER, json!({}))]),
    )
    .await;
    keel_tests::create_initializer_configuration(
        &c,
        "a-first",
        json!([for_pods(ENVOY, json!({}))]),
    )
    .await;
    let _envoy = KeelService::initializer(&[&api], &[]).await;
    let all = ListParams {
        include_uninitialized: true,
        ..Default::default()
    };
    let rv = c
        .list(&pods(), "default", &all)
        .await
        .unwrap()
        .resource_version;
    let mut turns = labeler(&c, rv);
    let mut watch = watch_pods(&c).await;

    let created = c
        .create(&pods(), "default", &myapp_pod("myapp-pod"))
        .await
        .unwrap();
    assert_eq!(pending(&created), [ENVOY, LABELER]);
    let (pod, containers) = tokio::time::timeout(PATIENCE, turns.recv())
        .await
        .expect("the labeler's turn in time")
        .unwrap();
    assert_eq!(pod, "myapp-pod");
    assert_eq!(
        containers,
        ["myapp-container", "envoy"],
        "Envoy, first, was done when the labeler's turn came"
    );
    // An ordinary watcher saw nothing of the Pod between its initializers: only the end.
    let ev = next_event(&mut watch).await;
    assert_eq!((ev.kind, ev.name()), (EventType::Added, "myapp-pod"));
    let p = ev.object;
    assert_eq!(container_names(&p), ["myapp-container", "envoy"]);
    assert_eq!(p["metadata"]["labels"]["labeled-by"], "labeler");
    assert_eq!(p["metadata"]["labels"]["app"], "myapp");
    assert!(pending(&p).is_empty(), "{p:#}");
}

#[tokio::test]
async fn a_pod_created_while_the_initializer_is_down_waits_for_it() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    keel_tests::create_initializer_configuration(
        &c,
        "envoy-config",
        json!([for_pods(ENVOY, json!({"timeoutSeconds": 3600}))]),
    )
    .await;
    let mut init = KeelService::initializer(&[&api], &[]).await;
    c.create(&pods(), "default", &myapp_pod("before"))
        .await
        .unwrap();
    initialized(&c, "before").await;
    assert!(init.terminate().success());

    c.create(&pods(), "default", &myapp_pod("during"))
        .await
        .unwrap();
    holds_for(Duration::from_secs(2), "waiting for Envoy", || async {
        let hidden = c.get(&pods(), "default", "during").await.is_err();
        let p = c
            .get_uninitialized(&pods(), "default", "during")
            .await
            .unwrap();
        hidden && pending(&p) == [ENVOY] && container_names(&p) == ["myapp-container"]
    })
    .await;

    init.restart().await;
    let p = initialized(&c, "during").await;
    assert_eq!(container_names(&p), ["myapp-container", "envoy"]);
    assert!(pending(&p).is_empty());
}

/// Two API servers on one etcd: both sweep for timeouts, one acts.
async fn two_servers() -> (Etcd, ApiServer, ApiServer) {
    let etcd = Etcd::start().await;
    let a = ApiServer::start(&etcd).await;
    let b = ApiServer::start(&etcd).await;
    (etcd, a, b)
}

#[tokio::test]
async fn an_initializer_out_of_time_with_ignore_is_dropped_and_recorded_once_by_two_servers() {
    let (_etcd, a, b) = two_servers().await;
    let (ca, cb) = (a.client().await, b.client().await);
    keel_tests::create_initializer_configuration(
        &ca,
        "envoy-config",
        json!([for_pods(
            ENVOY,
            json!({"timeoutSeconds": 2, "failurePolicy": "Ignore"})
        )]),
    )
    .await;
    let mut watch = watch_pods(&cb).await;

    let created = ca
        .create(&pods(), "default", &myapp_pod("myapp-pod"))
        .await
        .unwrap();
    assert_eq!(pending(&created), [ENVOY]);
    let ev = next_event(&mut watch).await;
    assert_eq!((ev.kind, ev.name()), (EventType::Added, "myapp-pod"));
    assert_eq!(container_names(&ev.object), ["myapp-container"], "no Envoy");
    assert!(pending(&ev.object).is_empty(), "{:#}", ev.object);
    let p = cb.get(&pods(), "default", "myapp-pod").await.unwrap();
    assert_eq!(container_names(&p), ["myapp-container"]);
    assert_eq!(p["metadata"]["uid"], created["metadata"]["uid"]);
    exactly_one_timeout_event(&ca, "myapp-pod").await;
}

#[tokio::test]
async fn an_initializer_out_of_time_with_fail_deletes_the_pod_unseen_and_is_recorded_once_by_two_servers()
 {
    let (_etcd, a, b) = two_servers().await;
    let (ca, cb) = (a.client().await, b.client().await);
    keel_tests::create_initializer_configuration(
        &ca,
        "envoy-config",
        json!([for_pods(
            ENVOY,
            json!({"timeoutSeconds": 2, "failurePolicy": "Fail"})
        )]),
    )
    .await;
    let mut watch = watch_pods(&cb).await;

    let created = ca
        .create(&pods(), "default", &myapp_pod("myapp-pod"))
        .await
        .unwrap();
    assert_eq!(pending(&created), [ENVOY]);
    eventually(PATIENCE, "myapp-pod deleted", || async {
        match cb.get_uninitialized(&pods(), "default", "myapp-pod").await {
            Err(e) if e.reason == Reason::NotFound => Some(()),
            _ => None,
        }
    })
    .await;
    exactly_one_timeout_event(&ca, "myapp-pod").await;

    // Without the configuration a marker Pod is visible at once: its ADDED is the ordinary
    // watcher's first event, so nothing of the deleted Pod came before it.
    ca.delete(
        &keel_tests::initializer_configurations(),
        "",
        "envoy-config",
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    ca.create(&pods(), "default", &myapp_pod("marker"))
        .await
        .unwrap();
    let ev = next_event(&mut watch).await;
    assert_eq!((ev.kind, ev.name()), (EventType::Added, "marker"));
}

/// What a watcher of every Pod, initialized or not, has seen.
#[derive(Default)]
struct PodCount {
    /// The most Pods alive at once.
    max: usize,
    /// Pods alive now, and how many of them are initialized.
    now: usize,
    initialized: usize,
}

/// Counts the Pods of `default`, uninitialized ones too, after every event from now on.
async fn count_pods(c: &Client) -> Arc<Mutex<PodCount>> {
    let all = ListParams {
        include_uninitialized: true,
        ..Default::default()
    };
    let list = c.list(&pods(), "default", &all).await.unwrap();
    let mut live: HashMap<String, Value> = list.items.into_iter().map(|p| (name(&p), p)).collect();
    let params = WatchParams {
        namespace: "default".into(),
        resource_version: list.resource_version,
        include_uninitialized: true,
        ..Default::default()
    };
    let mut stream = c.watch_resumable(&pods(), &params);
    let count = Arc::new(Mutex::new(PodCount {
        max: live.len(),
        now: live.len(),
        initialized: 0,
    }));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Some(ev) = stream.next().await {
            let ev = ev.unwrap();
            match ev.kind {
                EventType::Added | EventType::Modified => {
                    live.insert(ev.name().to_string(), ev.object);
                }
                EventType::Deleted => {
                    live.remove(ev.name());
                }
                EventType::Bookmark => continue,
            }
            let mut s = seen.lock().unwrap();
            s.now = live.len();
            s.max = s.max.max(s.now);
            s.initialized = live.values().filter(|p| pending(p).is_empty()).count();
        }
    });
    count
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// How many reconciles `controller` of this controller-manager process has finished.
fn reconciles(cm: &ControllerManager, controller: &str) -> f64 {
    let series =
        format!("keel_controller_reconcile_duration_seconds_count{{controller=\"{controller}\"}}");
    cm.metrics()
        .lines()
        .filter(|l| l.starts_with(&series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The ReplicaSet controller counts Pods still being initialized: while they wait, it makes no
/// more, and once the initializer comes they become the Deployment's available Pods.
#[tokio::test]
async fn a_deployment_never_has_more_pods_than_replicas_while_they_wait_for_the_initializer() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    keel_tests::create_initializer_configuration(
        &c,
        "envoy-config",
        json!([for_pods(ENVOY, json!({"timeoutSeconds": 3600}))]),
    )
    .await;
    let mut cm = ControllerManager::start(&[&api], &[]).await;
    let count = count_pods(&c).await;

    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "myapp"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "myapp"}},
            "template": {"metadata": {"labels": {"app": "myapp"}}, "spec": myapp_pod("")["spec"]},
        }
    });
    c.create(&deployments(), "default", &deployment)
        .await
        .unwrap();
    let all = ListParams {
        include_uninitialized: true,
        ..Default::default()
    };
    eventually(PATIENCE, "3 Pods waiting for Envoy", || async {
        let items = c.list(&pods(), "default", &all).await.ok()?.items;
        (items.len() == 3 && items.iter().all(|p| pending(p) == [ENVOY])).then_some(())
    })
    .await;
    // A controller-manager that starts now knows only what it lists: it must count the Pods
    // still waiting. Once its ReplicaSet controller has reconciled, there are still 3.
    cm.terminate();
    cm.restart().await;
    eventually(
        PATIENCE,
        "the new controller-manager to reconcile the ReplicaSet",
        || async { (reconciles(&cm, "replicaset") > 0.0).then_some(()) },
    )
    .await;
    holds_for(
        Duration::from_secs(1),
        "3 Pods, all waiting and hidden",
        || async {
            let waiting = c.list(&pods(), "default", &all).await.unwrap().items;
            let visible = c
                .list(&pods(), "default", &ListParams::default())
                .await
                .unwrap()
                .items;
            waiting.len() == 3 && visible.is_empty()
        },
    )
    .await;

    let _init = KeelService::initializer(&[&api], &[]).await;
    eventually(PATIENCE, "3 available Pods with Envoy", || async {
        let d = c.get(&deployments(), "default", "myapp").await.ok()?;
        let available = d["status"]["availableReplicas"].as_u64() == Some(3);
        let items = c
            .list(&pods(), "default", &ListParams::default())
            .await
            .ok()?
            .items;
        let pods_ok = items.len() == 3
            && items
                .iter()
                .all(|p| ready(p) && container_names(p) == ["myapp-container", "envoy"]);
        (available && pods_ok).then_some(())
    })
    .await;
    eventually(
        PATIENCE,
        "the watcher to see 3 initialized Pods",
        || async {
            let s = count.lock().unwrap();
            (s.now == 3 && s.initialized == 3).then_some(())
        },
    )
    .await;
    let max = count.lock().unwrap().max;
    assert_eq!(max, 3, "never more Pods than replicas");
}

#[tokio::test]
async fn an_initialized_pods_spec_is_frozen_but_for_its_images() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    keel_tests::create_envoy_initializer_configuration(&c).await;
    let _init = KeelService::initializer(&[&api], &[]).await;
    c.create(&pods(), "default", &myapp_pod("myapp-pod"))
        .await
        .unwrap();
    let before = initialized(&c, "myapp-pod").await;

    let added = json!({"spec": {"containers": [{"name": "extra", "image": "busybox"}]}});
    let e = c
        .patch(
            &pods(),
            "default",
            "myapp-pod",
            PatchType::Strategic,
            &added,
        )
        .await
        .unwrap_err();
    assert_eq!(invalid_fields(&e), ["spec"], "{e}");
    let p = c.get(&pods(), "default", "myapp-pod").await.unwrap();
    assert_eq!(p["spec"], before["spec"], "nothing changed");

    let image =
        json!({"spec": {"containers": [{"name": "myapp-container", "image": "busybox:1.36"}]}});
    let p = c
        .patch(
            &pods(),
            "default",
            "myapp-pod",
            PatchType::Strategic,
            &image,
        )
        .await
        .unwrap();
    assert_eq!(container_names(&p), ["myapp-container", "envoy"]);
    assert_eq!(p["spec"]["containers"][0]["image"], "busybox:1.36");
    assert_eq!(p["spec"]["containers"][1], before["spec"]["containers"][1]);
}

/// `pending` may lose names, never gain or reorder them, and an initialized Pod stays so.
#[tokio::test]
async fn pending_initializers_may_only_be_removed() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_initializer_configuration(&c).await;
    const AUDIT: &str = "audit.initializer.kubernetes.io";
    let mut pod = myapp_pod("myapp-pod");
    pod["metadata"]["annotations"] = json!({"initializer.kubernetes.io/audit": "true"});
    let created = c.create(&pods(), "default", &pod).await.unwrap();
    assert_eq!(
        pending(&created),
        [ENVOY, AUDIT],
        "configured, then opted in"
    );

    let merge = |names: &'static [&'static str]| {
        let c = c.clone();
        async move {
            c.patch(
                &pods(),
                "default",
                "myapp-pod",
                PatchType::Merge,
                &pending_patch(names),
            )
            .await
        }
    };
    for refused in [
        &[ENVOY, AUDIT, "extra.initializer.example.com"][..],
        &[AUDIT, ENVOY][..],
    ] {
        let e = merge(refused).await.unwrap_err();
        assert_eq!(
            invalid_fields(&e),
            ["metadata.initializers.pending"],
            "{refused:?}: {e}"
        );
    }
    let p = c
        .get_uninitialized(&pods(), "default", "myapp-pod")
        .await
        .unwrap();
    assert_eq!(pending(&p), [ENVOY, AUDIT], "unchanged");

    let p = merge(&[AUDIT]).await.unwrap();
    assert_eq!(pending(&p), [AUDIT]);
    let p = merge(&[]).await.unwrap();
    assert!(pending(&p).is_empty(), "{p:#}");
    c.get(&pods(), "default", "myapp-pod").await.unwrap();
    let e = merge(&[AUDIT]).await.unwrap_err();
    assert_eq!(invalid_fields(&e), ["metadata.initializers.pending"], "{e}");
}

#[tokio::test]
async fn an_invalid_initializer_configuration_names_its_bad_fields() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "kind": "InitializerConfiguration",
        "metadata": {"name": "bad"},
        "initializers": [for_pods("envoy.initializer", json!({"failurePolicy": "Sometimes"}))],
    });
    let e = c
        .create(&keel_tests::initializer_configurations(), "", &config)
        .await
        .unwrap_err();
    assert_eq!(
        invalid_fields(&e),
        ["initializers[0].name", "initializers[0].failurePolicy"],
        "{e}"
    );
    let stored = c
        .list(
            &keel_tests::initializer_configurations(),
            "",
            &ListParams::default(),
        )
        .await
        .unwrap();
    assert!(stored.items.is_empty(), "{:#?}", stored.items);
    let p = c
        .create(&pods(), "default", &myapp_pod("myapp-pod"))
        .await
        .unwrap();
    assert!(pending(&p).is_empty(), "no initializer is in force: {p:#}");
}
