//! Deployments that roll, end to end: real etcd, the real `keel-apiserver` and the real
//! `keel-controller-manager`. A watcher of the Deployment's Pods checks the strategy's bounds
//! at every Pod event, so a moment over `maxSurge` or under `maxUnavailable` fails the test,
//! not only a wrong end state.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use keel_client::{
    Client, DeleteParams, EventType, ListParams, Metadata, PatchType, PropagationPolicy,
    WatchParams, gvr,
};
use keel_tests::{ApiServer, ControllerManager, Etcd, eventually};
use serde_json::{Value, json};

fn deployments() -> keel_client::GroupVersionResource {
    gvr("apps", "v1", "deployments")
}
fn replicasets() -> keel_client::GroupVersionResource {
    gvr("apps", "v1", "replicasets")
}
fn pods() -> keel_client::GroupVersionResource {
    gvr("", "v1", "pods")
}

/// The seeds' nginx Deployment with `replicas` and a strategy.
fn nginx(replicas: i64, image: &str, strategy: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx-deployment"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "nginx"}},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": image, "ports": [{"containerPort": 80}]}]}
            }
        }
    })
}

fn rolling(surge: Value, unavailable: Value) -> Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
}

async fn set_image(c: &Client, image: &str) {
    c.patch(
        &deployments(),
        "default",
        "nginx-deployment",
        PatchType::Strategic,
        &json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": image}]}}}}),
    )
    .await
    .unwrap();
}

fn image_of(pod: &Value) -> String {
    pod["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Waits until the Deployment has observed its generation and all `replicas` Pods run `image`,
/// available, with no other Pods left.
async fn rolled_out(c: &Client, replicas: usize, image: &str) {
    let what = format!("{replicas} available Pods of {image} and nothing else");
    eventually(Duration::from_secs(60), &what, || async {
        let d = c
            .get(&deployments(), "default", "nginx-deployment")
            .await
            .ok()?;
        let s = &d["status"];
        let observed = s["observedGeneration"] == d["metadata"]["generation"];
        let counts = [
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
        ]
        .iter()
        .all(|f| s[f].as_u64() == Some(replicas as u64));
        let pods = c
            .list(&pods(), "default", &ListParams::default())
            .await
            .ok()?;
        let all_new = pods.items.len() == replicas
            && pods.items.iter().all(|p| image_of(p) == image && ready(p));
        (observed && counts && all_new).then_some(())
    })
    .await;
}

/// What the bounds watcher saw.
#[derive(Default)]
struct Seen {
    events: usize,
    violations: Vec<String>,
    max_total: usize,
    min_ready: usize,
    both_images_at_once: bool,
}

/// Watches the Pods from now on and checks after every event: at most `max_total` Pods, at
/// least `min_ready` ready ones, and (with `exclusive`) never Pods of two images at once.
fn watch_bounds(
    c: &Client,
    max_total: usize,
    min_ready: usize,
    exclusive: bool,
) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen {
        min_ready: usize::MAX,
        ..Default::default()
    }));
    let (c, s) = (c.clone(), seen.clone());
    let task = tokio::spawn(async move {
        let list = c
            .list(&pods(), "default", &ListParams::default())
            .await
            .unwrap();
        let mut live: HashMap<String, Value> = list
            .items
            .into_iter()
            .map(|p| (p["metadata"]["name"].as_str().unwrap().to_string(), p))
            .collect();
        let params = WatchParams {
            namespace: "default".into(),
            resource_version: list.resource_version,
            ..Default::default()
        };
        let mut stream = c.watch_resumable(&pods(), &params);
        while let Some(ev) = stream.next().await {
            let ev = ev.unwrap();
            let name = ev.name().to_string();
            match ev.kind {
                EventType::Added | EventType::Modified => {
                    live.insert(name, ev.object);
                }
                EventType::Deleted => {
                    live.remove(&name);
                }
                EventType::Bookmark => continue,
            }
            let total = live.len();
            let ready = live.values().filter(|p| ready(p)).count();
            let images: std::collections::HashSet<String> = live.values().map(image_of).collect();
            let mut s = s.lock().unwrap();
            s.events += 1;
            s.max_total = s.max_total.max(total);
            s.min_ready = s.min_ready.min(ready);
            if images.len() > 1 {
                s.both_images_at_once = true;
            }
            if total > max_total || ready < min_ready || (exclusive && images.len() > 1) {
                let line = format!(
                    "after event {}: {total} pods, {ready} ready, images {images:?}",
                    s.events
                );
                s.violations.push(line);
            }
        }
    });
    (seen, task)
}

async fn stack() -> (Etcd, ApiServer, ControllerManager, Client) {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let cm = ControllerManager::start(&[&api], &[]).await;
    let c = api.client().await;
    (etcd, api, cm, c)
}

async fn replica_sets(c: &Client) -> Vec<Value> {
    c.list(&replicasets(), "default", &ListParams::default())
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn the_seed_deployment_runs_two_pods() {
    let (_etcd, _api, _cm, c) = stack().await;
    c.create(&deployments(), "default", &nginx(2, "nginx", json!(null)))
        .await
        .unwrap();
    rolled_out(&c, 2, "nginx").await;
    let rs = replica_sets(&c).await;
    assert_eq!(rs.len(), 1);
    let rs = &rs[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap();
    assert_eq!(rs["metadata"]["name"], format!("nginx-deployment-{hash}"));
    assert_eq!(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    assert_eq!(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment");
    let d = c
        .get(&deployments(), "default", "nginx-deployment")
        .await
        .unwrap();
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    let conditions = d["status"]["conditions"].as_array().unwrap();
    let reason = |t: &str| {
        conditions
            .iter()
            .find(|c| c["type"] == t)
            .map(|c| c["reason"].as_str().unwrap().to_string())
    };
    assert_eq!(
        reason("Available").as_deref(),
        Some("MinimumReplicasAvailable")
    );
    assert_eq!(
        reason("Progressing").as_deref(),
        Some("NewReplicaSetAvailable")
    );
    for p in c
        .list(&pods(), "default", &ListParams::default())
        .await
        .unwrap()
        .items
    {
        assert_eq!(p["status"]["phase"], "Running");
        assert_eq!(p["metadata"]["labels"]["pod-template-hash"], hash);
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["name"],
            rs["metadata"]["name"]
        );
    }
}

#[tokio::test]
async fn a_rolling_update_keeps_max_surge_and_max_unavailable_at_every_pod_event() {
    let (_etcd, _api, _cm, c) = stack().await;
    // 4 replicas, surge 1, unavailable 1: at most 5 Pods, at least 3 ready, at every moment.
    c.create(
        &deployments(),
        "default",
        &nginx(4, "nginx:1.7.9", rolling(json!(1), json!(1))),
    )
    .await
    .unwrap();
    rolled_out(&c, 4, "nginx:1.7.9").await;
    let (seen, watcher) = watch_bounds(&c, 5, 3, false);
    set_image(&c, "nginx:1.8").await;
    rolled_out(&c, 4, "nginx:1.8").await;
    // Back to the first template: the old ReplicaSet returns as revision 3.
    set_image(&c, "nginx:1.7.9").await;
    rolled_out(&c, 4, "nginx:1.7.9").await;
    watcher.abort();
    {
        let seen = seen.lock().unwrap();
        assert!(
            seen.violations.is_empty(),
            "bounds broken: {:?}",
            seen.violations
        );
        assert!(
            seen.both_images_at_once,
            "a rolling update overlaps old and new"
        );
        assert!(
            seen.max_total == 5,
            "surge was used: max {} pods",
            seen.max_total
        );
        assert!(
            seen.events > 16,
            "the watcher saw the rollouts ({} events)",
            seen.events
        );
    }

    let rs = replica_sets(&c).await;
    assert_eq!(rs.len(), 2, "one ReplicaSet per template");
    for r in &rs {
        let image = r["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap();
        let (replicas, revision) = (
            r["spec"]["replicas"].as_i64().unwrap(),
            r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                .as_str()
                .unwrap(),
        );
        match image {
            "nginx:1.7.9" => assert_eq!((replicas, revision), (4, "3")),
            _ => assert_eq!((replicas, revision), (0, "2")),
        }
    }
}

#[tokio::test]
async fn recreate_never_overlaps_old_and_new_pods() {
    let (_etcd, _api, _cm, c) = stack().await;
    c.create(
        &deployments(),
        "default",
        &nginx(3, "nginx:1.7.9", json!({"type": "Recreate"})),
    )
    .await
    .unwrap();
    rolled_out(&c, 3, "nginx:1.7.9").await;
    let (seen, watcher) = watch_bounds(&c, 3, 0, true);
    set_image(&c, "nginx:1.8").await;
    rolled_out(&c, 3, "nginx:1.8").await;
    watcher.abort();
    let seen = seen.lock().unwrap();
    assert!(
        seen.violations.is_empty(),
        "old and new overlapped: {:?}",
        seen.violations
    );
    assert_eq!(seen.min_ready, 0, "recreate takes every old Pod down first");
}

#[tokio::test]
async fn scaling_up_and_down_follows_replicas() {
    let (_etcd, _api, _cm, c) = stack().await;
    c.create(&deployments(), "default", &nginx(2, "nginx", json!(null)))
        .await
        .unwrap();
    rolled_out(&c, 2, "nginx").await;
    for n in [10, 1] {
        c.patch(
            &deployments(),
            "default",
            "nginx-deployment",
            PatchType::Merge,
            &json!({"spec": {"replicas": n}}),
        )
        .await
        .unwrap();
        rolled_out(&c, n as usize, "nginx").await;
    }
    assert_eq!(
        replica_sets(&c).await.len(),
        1,
        "scaling makes no new ReplicaSet"
    );
}

#[tokio::test]
async fn a_stuck_rollout_reports_progress_deadline_exceeded() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    // No pod-lifecycle controller: new Pods never become ready.
    let _cm = ControllerManager::start(&[&api], &["--controllers", "deployment,replicaset"]).await;
    let c = api.client().await;
    let mut d = nginx(1, "nginx", json!(null));
    d["spec"]["progressDeadlineSeconds"] = json!(2);
    c.create(&deployments(), "default", &d).await.unwrap();
    eventually(
        Duration::from_secs(30),
        "ProgressDeadlineExceeded",
        || async {
            let d = c
                .get(&deployments(), "default", "nginx-deployment")
                .await
                .ok()?;
            d["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| {
                    c["type"] == "Progressing"
                        && c["status"] == "False"
                        && c["reason"] == "ProgressDeadlineExceeded"
                })
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_killed_controller_manager_resumes_the_rollout_within_the_bounds() {
    let (_etcd, api, mut cm, c) = stack().await;
    c.create(
        &deployments(),
        "default",
        &nginx(6, "nginx:1.7.9", rolling(json!(2), json!(1))),
    )
    .await
    .unwrap();
    rolled_out(&c, 6, "nginx:1.7.9").await;
    let (seen, watcher) = watch_bounds(&c, 8, 5, false);
    set_image(&c, "nginx:1.8").await;
    // Mid-rollout: some new Pods exist, not all.
    eventually(Duration::from_secs(30), "the rollout to start", || async {
        let pods = c
            .list(&pods(), "default", &ListParams::default())
            .await
            .ok()?;
        pods.items
            .iter()
            .any(|p| image_of(p) == "nginx:1.8")
            .then_some(())
    })
    .await;
    cm.kill9();
    // Another replica (a new identity) takes over once the dead one's lease has expired.
    let _other = ControllerManager::start(&[&api], &[]).await;
    rolled_out(&c, 6, "nginx:1.8").await;
    watcher.abort();
    let seen = seen.lock().unwrap();
    assert!(
        seen.violations.is_empty(),
        "bounds broken: {:?}",
        seen.violations
    );
}

async fn count(c: &Client, g: &keel_client::GroupVersionResource, ns: &str) -> Option<usize> {
    Some(
        c.list(g, ns, &ListParams::default())
            .await
            .ok()?
            .items
            .len(),
    )
}

#[tokio::test]
async fn deleting_a_deployment_with_each_propagation_policy() {
    let (_etcd, _api, _cm, c) = stack().await;
    let delete = |policy: PropagationPolicy| {
        let c = c.clone();
        async move {
            let p = DeleteParams {
                propagation: policy,
                ..Default::default()
            };
            c.delete(&deployments(), "default", "nginx-deployment", &p)
                .await
                .unwrap();
        }
    };
    // Background: the Deployment goes at once, then its ReplicaSet and Pods.
    c.create(&deployments(), "default", &nginx(2, "nginx", json!(null)))
        .await
        .unwrap();
    rolled_out(&c, 2, "nginx").await;
    delete(PropagationPolicy::Background).await;
    assert!(
        c.get(&deployments(), "default", "nginx-deployment")
            .await
            .is_err()
    );
    eventually(
        Duration::from_secs(30),
        "background: ReplicaSet and Pods gone",
        || async {
            (count(&c, &replicasets(), "default").await? == 0
                && count(&c, &pods(), "default").await? == 0)
                .then_some(())
        },
    )
    .await;

    // Foreground: the Deployment stays (marked) until its ReplicaSet and Pods are gone.
    c.create(&deployments(), "default", &nginx(2, "nginx", json!(null)))
        .await
        .unwrap();
    rolled_out(&c, 2, "nginx").await;
    delete(PropagationPolicy::Foreground).await;
    let marked = c.get(&deployments(), "default", "nginx-deployment").await;
    if let Ok(d) = &marked {
        assert!(d["metadata"]["deletionTimestamp"].is_string(), "{d}");
    }
    eventually(
        Duration::from_secs(30),
        "foreground: everything gone",
        || async {
            let gone = c
                .get(&deployments(), "default", "nginx-deployment")
                .await
                .is_err();
            (gone
                && count(&c, &replicasets(), "default").await? == 0
                && count(&c, &pods(), "default").await? == 0)
                .then_some(())
        },
    )
    .await;

    // Orphan: the Deployment goes, its ReplicaSet and Pods stay, no longer owned.
    c.create(&deployments(), "default", &nginx(2, "nginx", json!(null)))
        .await
        .unwrap();
    rolled_out(&c, 2, "nginx").await;
    delete(PropagationPolicy::Orphan).await;
    eventually(
        Duration::from_secs(30),
        "orphan: the Deployment gone",
        || async {
            c.get(&deployments(), "default", "nginx-deployment")
                .await
                .is_err()
                .then_some(())
        },
    )
    .await;
    let rs = replica_sets(&c).await;
    assert_eq!(rs.len(), 1);
    assert!(
        rs[0]["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(|a| a.is_empty())
    );
    assert_eq!(
        count(&c, &pods(), "default").await,
        Some(2),
        "the Pods stay"
    );
}

#[tokio::test]
async fn deleting_a_namespace_deletes_the_deployment_in_it_and_everything_else() {
    let (_etcd, _api, _cm, c) = stack().await;
    let namespaces = gvr("", "v1", "namespaces");
    c.create(&namespaces, "", &json!({"metadata": {"name": "shop"}}))
        .await
        .unwrap();
    c.create(&deployments(), "shop", &nginx(3, "nginx", json!(null)))
        .await
        .unwrap();
    c.create(
        &gvr("", "v1", "configmaps"),
        "shop",
        &json!({"metadata": {"name": "settings"}}),
    )
    .await
    .unwrap();
    eventually(
        Duration::from_secs(30),
        "3 Pods running in shop",
        || async {
            let pods = c.list(&pods(), "shop", &ListParams::default()).await.ok()?;
            (pods.items.len() == 3 && pods.items.iter().all(ready)).then_some(())
        },
    )
    .await;
    c.delete(&namespaces, "", "shop", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        Duration::from_secs(60),
        "the namespace and all in it gone",
        || async {
            let ns_gone = c.get(&namespaces, "", "shop").await.is_err();
            let left = count(&c, &deployments(), "shop").await?
                + count(&c, &replicasets(), "shop").await?
                + count(&c, &pods(), "shop").await?
                + count(&c, &gvr("", "v1", "configmaps"), "shop").await?;
            (ns_gone && left == 0).then_some(())
        },
    )
    .await;
}
