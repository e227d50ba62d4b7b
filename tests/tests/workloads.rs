//! The workload controllers end to end (Jobs and Pods that run to completion, StatefulSets):
//! real etcd, the real `keel-apiserver` and the real `keel-controller-manager`, whose pod
//! lifecycle ends Pods as their annotations say.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use keel_client::{Client, EventType, ListParams, Metadata, WatchParams, gvr};
use keel_tests::{ApiServer, ControllerManager, Etcd, eventually};
use serde_json::{Value, json};

fn jobs() -> keel_client::GroupVersionResource {
    gvr("batch", "v1", "jobs")
}
fn pods() -> keel_client::GroupVersionResource {
    gvr("", "v1", "pods")
}
fn events() -> keel_client::GroupVersionResource {
    gvr("", "v1", "events")
}

fn job(name: &str, spec: Value, annotations: Value) -> Value {
    let mut spec = spec;
    spec["template"] = json!({
        "metadata": {"annotations": annotations},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "pi", "image": "perl:5.34"}]}
    });
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec})
}

fn condition(obj: &Value, kind: &str) -> Option<Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind && c["status"] == "True")
        .cloned()
}

async fn wait_condition(c: &Client, name: &str, kind: &str) -> Value {
    eventually(
        Duration::from_secs(60),
        &format!("job {name} {kind}"),
        || async {
            let j = c.get(&jobs(), "default", name).await.ok()?;
            condition(&j, kind).map(|_| j)
        },
    )
    .await
}

/// Reasons of the Events about an object, in order of first appearance.
async fn event_reasons(c: &Client, uid: &str) -> Vec<(String, String, i64)> {
    let list = c
        .list(&events(), "default", &ListParams::default())
        .await
        .unwrap();
    let mut out: Vec<(String, String, i64)> = list
        .items
        .iter()
        .filter(|e| e["involvedObject"]["uid"] == uid)
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or("").to_string(),
                e["message"].as_str().unwrap_or("").to_string(),
                e["count"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    out.sort();
    out
}

/// Watches the Job's Pods and records the most that were running at once.
fn watch_most_active(c: Client, selector: String) -> Arc<Mutex<usize>> {
    let most = Arc::new(Mutex::new(0usize));
    let m = most.clone();
    tokio::spawn(async move {
        let mut running: HashSet<String> = HashSet::new();
        let params = WatchParams {
            namespace: "default".into(),
            label_selector: selector,
            ..WatchParams::default()
        };
        let mut stream = c.watch(&pods(), &params).await.unwrap();
        while let Some(Ok(ev)) = stream.next().await {
            let p = &ev.object;
            let active = ev.kind != EventType::Deleted
                && !p.is_deleting()
                && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
            if active {
                running.insert(p.uid().to_string());
            } else {
                running.remove(p.uid());
            }
            let mut most = m.lock().unwrap();
            *most = (*most).max(running.len());
        }
    });
    most
}

#[tokio::test]
async fn a_job_of_five_completions_two_at_a_time_completes() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(&[&api], &["--pod-run-time", "300ms"]).await;
    let c = api.client().await;

    let created = c
        .create(
            &jobs(),
            "default",
            &job("pi", json!({"completions": 5, "parallelism": 2}), json!({})),
        )
        .await
        .unwrap();
    let selector = format!("batch.kubernetes.io/controller-uid={}", created.uid());
    let most = watch_most_active(c.clone(), selector.clone());

    let done = wait_condition(&c, "pi", "Complete").await;
    assert_eq!(done["status"]["succeeded"], 5);
    assert_eq!(done["status"]["failed"].as_i64().unwrap_or(0), 0);
    assert_eq!(done["status"]["active"], 0);
    assert!(done["status"]["completionTime"].is_string());
    assert!(done["status"]["startTime"].is_string());
    assert_eq!(
        condition(&done, "Complete").unwrap()["reason"],
        "CompletionsReached"
    );
    assert!(condition(&done, "SuccessCriteriaMet").is_some());
    assert_eq!(done["status"]["uncountedTerminatedPods"], json!({}));
    assert!(
        *most.lock().unwrap() <= 2,
        "more than parallelism ran at once"
    );

    // Five Pods, each Succeeded, none holding the tracking finalizer any more.
    let list = c
        .list(
            &pods(),
            "default",
            &ListParams {
                label_selector: selector,
                ..ListParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(list.items.len(), 5);
    for p in &list.items {
        assert_eq!(p["status"]["phase"], "Succeeded", "{p}");
        assert!(p.name().starts_with("pi-"));
        assert!(p.finalizers().is_empty(), "{p}");
        assert_eq!(
            p["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
    }

    // Kubernetes' events: five creations and one completion.
    let reasons = eventually(Duration::from_secs(10), "the job's events", || async {
        let r = event_reasons(&c, created.uid()).await;
        let creates = r.iter().filter(|(r, _, _)| r == "SuccessfulCreate").count();
        (creates == 5 && r.iter().any(|(r, _, _)| r == "Completed")).then_some(r)
    })
    .await;
    assert!(
        reasons
            .iter()
            .any(|(r, m, _)| r == "Completed" && m == "Job completed")
    );
    assert!(
        reasons
            .iter()
            .any(|(r, m, _)| r == "SuccessfulCreate" && m.starts_with("Created pod: pi-"))
    );
}

#[tokio::test]
async fn failures_past_the_backoff_limit_fail_the_job() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(
        &[&api],
        &["--pod-run-time", "100ms", "--job-backoff-base", "200ms"],
    )
    .await;
    let c = api.client().await;
    let created = c
        .create(
            &jobs(),
            "default",
            &job(
                "fails",
                json!({"backoffLimit": 2}),
                json!({"keel.dev/exit-code": "3"}),
            ),
        )
        .await
        .unwrap();
    let failed = wait_condition(&c, "fails", "Failed").await;
    // backoffLimit 2: the third failure fails the Job.
    assert_eq!(failed["status"]["failed"], 3);
    assert_eq!(failed["status"]["succeeded"].as_i64().unwrap_or(0), 0);
    let cond = condition(&failed, "Failed").unwrap();
    assert_eq!(cond["reason"], "BackoffLimitExceeded");
    assert_eq!(
        cond["message"],
        "Job has reached the specified backoff limit"
    );
    assert!(condition(&failed, "FailureTarget").is_some());
    assert!(condition(&failed, "Complete").is_none());
    let list = c
        .list(&pods(), "default", &ListParams::default())
        .await
        .unwrap();
    let theirs: Vec<&Value> = list
        .items
        .iter()
        .filter(|p| p.controller_uid() == Some(created.uid()))
        .collect();
    assert_eq!(theirs.len(), 3);
    for p in theirs {
        assert_eq!(p["status"]["phase"], "Failed");
        assert_eq!(
            p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            3
        );
    }
    eventually(
        Duration::from_secs(10),
        "a BackoffLimitExceeded event",
        || async {
            event_reasons(&c, created.uid())
                .await
                .iter()
                .any(|(r, _, _)| r == "BackoffLimitExceeded")
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_job_past_its_deadline_fails_and_its_pods_are_deleted() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(&[&api], &[]).await;
    let c = api.client().await;
    let created = c
        .create(
            &jobs(),
            "default",
            &job(
                "slow",
                json!({"parallelism": 2, "completions": 4, "activeDeadlineSeconds": 2}),
                json!({"keel.dev/run-time": "1h"}),
            ),
        )
        .await
        .unwrap();
    let failed = wait_condition(&c, "slow", "Failed").await;
    assert_eq!(
        condition(&failed, "Failed").unwrap()["reason"],
        "DeadlineExceeded"
    );
    // The two running Pods were killed, and count as failed.
    assert_eq!(failed["status"]["failed"], 2);
    assert_eq!(failed["status"]["active"], 0);
    eventually(
        Duration::from_secs(10),
        "the job's pods deleted",
        || async {
            let list = c
                .list(&pods(), "default", &ListParams::default())
                .await
                .ok()?;
            (!list
                .items
                .iter()
                .any(|p| p.controller_uid() == Some(created.uid())))
            .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn bare_pods_run_to_completion_by_their_restart_policy() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(&[&api], &["--pod-run-time", "200ms"]).await;
    let c = api.client().await;
    let pod = |name: &str, policy: &str, annotations: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "annotations": annotations},
               "spec": {"restartPolicy": policy,
                        "containers": [{"name": "main", "image": "busybox"}]}})
    };
    for p in [
        pod("test-hook", "Never", json!({})),
        pod("crashes", "Never", json!({"keel.dev/exit-code": "1"})),
        pod("server", "Always", json!({})),
        pod(
            "restarts",
            "Always",
            json!({"keel.dev/run-time": "200ms", "keel.dev/exit-code": "1"}),
        ),
        pod(
            "retries",
            "OnFailure",
            json!({"keel.dev/run-time": "200ms", "keel.dev/exit-code": "2"}),
        ),
    ] {
        c.create(&pods(), "default", &p).await.unwrap();
    }
    let phase = |name: &'static str, want: &'static str| {
        let c = c.clone();
        async move {
            eventually(
                Duration::from_secs(20),
                &format!("{name} {want}"),
                || async {
                    let p = c.get(&pods(), "default", name).await.ok()?;
                    (p["status"]["phase"] == want).then_some(p)
                },
            )
            .await
        }
    };
    phase("test-hook", "Succeeded").await;
    let crashed = phase("crashes", "Failed").await;
    assert_eq!(
        crashed["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
        "Error"
    );
    for name in ["restarts", "retries"] {
        let p = eventually(
            Duration::from_secs(20),
            &format!("{name} restarted twice"),
            || async {
                let p = c.get(&pods(), "default", name).await.ok()?;
                (p["status"]["containerStatuses"][0]["restartCount"].as_i64()? >= 2).then_some(p)
            },
        )
        .await;
        assert_eq!(p["status"]["phase"], "Running", "{name}");
        assert!(
            p["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"]
                .as_i64()
                .is_some_and(|c| c > 0)
        );
    }
    // A server runs until deleted.
    let server = phase("server", "Running").await;
    assert_eq!(server["status"]["containerStatuses"][0]["restartCount"], 0);

    // A bad annotation is named in a Warning event on the Pod, and the default stands.
    c.create(
        &pods(),
        "default",
        &pod("typo", "Never", json!({"keel.dev/run-time": "soon"})),
    )
    .await
    .unwrap();
    let typo = phase("typo", "Succeeded").await;
    eventually(
        Duration::from_secs(10),
        "a warning about the annotation",
        || async {
            event_reasons(&c, typo.uid())
                .await
                .into_iter()
                .find(|(r, m, _)| r == "InvalidAnnotation" && m.contains("keel.dev/run-time"))
        },
    )
    .await;
}

fn statefulsets() -> keel_client::GroupVersionResource {
    gvr("apps", "v1", "statefulsets")
}

fn web(replicas: i64, image: &str, partition: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "serviceName": "nginx",
            "selector": {"matchLabels": {"app": "nginx"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": image}]}
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "www"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}
            }]
        }
    })
}

/// Every change to the set's Pods, in order: (event, name, ready) .
fn record_pod_events(c: Client) -> Arc<Mutex<Vec<(String, String, bool)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    tokio::spawn(async move {
        let params = WatchParams {
            namespace: "default".into(),
            label_selector: "app=nginx".into(),
            ..WatchParams::default()
        };
        let mut stream = c.watch(&pods(), &params).await.unwrap();
        while let Some(Ok(ev)) = stream.next().await {
            let p = &ev.object;
            let ready = p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let kind = format!("{:?}", ev.kind);
            s.lock().unwrap().push((kind, p.name().to_string(), ready));
        }
    });
    seen
}

async fn set_status(c: &Client, want: impl Fn(&Value) -> bool) -> Value {
    eventually(
        Duration::from_secs(60),
        "the statefulset's status",
        || async {
            let s = c.get(&statefulsets(), "default", "web").await.ok()?;
            let settled = s["status"]["observedGeneration"] == s["metadata"]["generation"];
            (settled && want(&s)).then_some(s)
        },
    )
    .await
}

async fn set_pods(c: &Client) -> Vec<Value> {
    let mut items = c
        .list(
            &pods(),
            "default",
            &ListParams {
                label_selector: "app=nginx".into(),
                ..ListParams::default()
            },
        )
        .await
        .unwrap()
        .items;
    items.sort_by_key(|p| p.name().to_string());
    items
}

#[tokio::test]
async fn a_statefulset_scales_up_and_down_in_order_and_rolls_with_a_partition() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(&[&api], &["--pod-start-delay", "300ms"]).await;
    let c = api.client().await;
    let seen = record_pod_events(c.clone());

    // 0 → 3: web-0, web-1, web-2, each created once the one before it is Ready.
    c.create(&statefulsets(), "default", &web(0, "nginx:1.7.9", 0))
        .await
        .unwrap();
    set_status(&c, |s| s["status"]["updateRevision"].is_string()).await;
    c.patch(
        &statefulsets(),
        "default",
        "web",
        keel_client::PatchType::Merge,
        &json!({"spec": {"replicas": 3}}),
    )
    .await
    .unwrap();
    let up = set_status(&c, |s| s["status"]["readyReplicas"] == 3).await;
    assert_eq!(up["status"]["replicas"], 3);
    assert_eq!(
        up["status"]["currentRevision"],
        up["status"]["updateRevision"]
    );
    {
        let seen = seen.lock().unwrap();
        let added: Vec<&str> = seen
            .iter()
            .filter(|(k, _, _)| k == "Added")
            .map(|(_, n, _)| n.as_str())
            .collect();
        assert_eq!(added, ["web-0", "web-1", "web-2"]);
        for (before, after) in [("web-0", "web-1"), ("web-1", "web-2")] {
            let ready_at = seen.iter().position(|(_, n, r)| n == before && *r).unwrap();
            let added_at = seen
                .iter()
                .position(|(k, n, _)| k == "Added" && n == after)
                .unwrap();
            assert!(
                ready_at < added_at,
                "{after} came before {before} was ready"
            );
        }
    }
    let pods = set_pods(&c).await;
    let revision = up["status"]["updateRevision"].as_str().unwrap().to_string();
    for (i, p) in pods.iter().enumerate() {
        assert_eq!(p.name(), format!("web-{i}"));
        assert_eq!(p["spec"]["hostname"], format!("web-{i}"));
        assert_eq!(p["spec"]["subdomain"], "nginx");
        assert_eq!(p.label("controller-revision-hash"), Some(revision.as_str()));
        assert_eq!(
            p.label("apps.kubernetes.io/pod-index"),
            Some(i.to_string().as_str())
        );
        let claim = format!("www-web-{i}");
        assert_eq!(
            p["spec"]["volumes"][0],
            json!({"name": "www", "persistentVolumeClaim": {"claimName": claim}})
        );
        let pvc = c
            .get(&gvr("", "v1", "persistentvolumeclaims"), "default", &claim)
            .await
            .unwrap();
        assert_eq!(pvc.label("app"), Some("nginx"));
    }
    let revisions = c
        .list(
            &gvr("apps", "v1", "controllerrevisions"),
            "default",
            &ListParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(revisions.items.len(), 1);
    assert_eq!(revisions.items[0].name(), revision);
    assert_eq!(revisions.items[0]["revision"], 1);

    // A new image with partition 1: web-2 then web-1 are replaced, web-0 keeps the old one.
    seen.lock().unwrap().clear();
    c.patch(
        &statefulsets(),
        "default",
        "web",
        keel_client::PatchType::Merge,
        &json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.9.1"}]}},
                         "updateStrategy": {"rollingUpdate": {"partition": 1}}}}),
    )
    .await
    .unwrap();
    let rolled = set_status(&c, |s| {
        s["status"]["updatedReplicas"] == 2 && s["status"]["readyReplicas"] == 3
    })
    .await;
    let update = rolled["status"]["updateRevision"].as_str().unwrap();
    assert_ne!(update, revision);
    assert_eq!(rolled["status"]["currentRevision"], revision.as_str());
    assert_eq!(rolled["status"]["currentReplicas"], 1);
    let images: Vec<String> = set_pods(&c)
        .await
        .iter()
        .map(|p| {
            p["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(images, ["nginx:1.7.9", "nginx:1.9.1", "nginx:1.9.1"]);
    {
        let seen = seen.lock().unwrap();
        let deleted: Vec<&str> = seen
            .iter()
            .filter(|(k, _, _)| k == "Deleted")
            .map(|(_, n, _)| n.as_str())
            .collect();
        assert_eq!(deleted, ["web-2", "web-1"]);
    }

    // Partition 0 finishes the rollout: the update revision becomes the current one.
    c.patch(
        &statefulsets(),
        "default",
        "web",
        keel_client::PatchType::Merge,
        &json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
    )
    .await
    .unwrap();
    let done = set_status(&c, |s| {
        s["status"]["currentRevision"] == s["status"]["updateRevision"]
    })
    .await;
    assert_eq!(done["status"]["updatedReplicas"], 3);

    // 3 → 1: web-2 goes, then web-1; the claims stay.
    seen.lock().unwrap().clear();
    c.patch(
        &statefulsets(),
        "default",
        "web",
        keel_client::PatchType::Merge,
        &json!({"spec": {"replicas": 1}}),
    )
    .await
    .unwrap();
    set_status(&c, |s| s["status"]["replicas"] == 1).await;
    let names: Vec<String> = set_pods(&c)
        .await
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    assert_eq!(names, ["web-0"]);
    {
        let seen = seen.lock().unwrap();
        let deleted: Vec<&str> = seen
            .iter()
            .filter(|(k, _, _)| k == "Deleted")
            .map(|(_, n, _)| n.as_str())
            .collect();
        assert_eq!(deleted, ["web-2", "web-1"]);
    }
    let claims = c
        .list(
            &gvr("", "v1", "persistentvolumeclaims"),
            "default",
            &ListParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(claims.items.len(), 3);
}

fn daemonsets() -> keel_client::GroupVersionResource {
    gvr("apps", "v1", "daemonsets")
}
fn nodes() -> keel_client::GroupVersionResource {
    gvr("", "v1", "nodes")
}

/// The DaemonSet's Pods as (node, phase), sorted.
async fn daemon_pods(c: &Client) -> Vec<(String, String)> {
    let list = c
        .list(
            &pods(),
            "default",
            &ListParams {
                label_selector: "app=agent".into(),
                ..ListParams::default()
            },
        )
        .await
        .unwrap();
    let mut out: Vec<(String, String)> = list
        .items
        .iter()
        .filter(|p| !p.is_deleting())
        .map(|p| {
            (
                p["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
                p["status"]["phase"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_daemonset_follows_nodes_added_and_removed() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let agent = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                         "containers": [{"name": "agent", "image": "fluentd"}]}
            }
        }
    });
    // No Node: satisfied with no Pod.
    c.create(&daemonsets(), "default", &agent).await.unwrap();
    let _empty = ControllerManager::start(&[&api], &[]).await;
    let ds = eventually(Duration::from_secs(30), "the set observed", || async {
        let d = c.get(&daemonsets(), "default", "agent").await.ok()?;
        (d["status"]["observedGeneration"] == 1).then_some(d)
    })
    .await;
    assert_eq!(ds["status"]["desiredNumberScheduled"], 0);
    assert!(daemon_pods(&c).await.is_empty());
    drop(_empty);

    // Two simulated Nodes: a Running Pod on each, and their heartbeats.
    let _cm = ControllerManager::start(&[&api], &["--simulated-nodes", "2"]).await;
    let want = |nodes: &[&str]| -> Vec<(String, String)> {
        nodes
            .iter()
            .map(|n| (n.to_string(), "Running".to_string()))
            .collect()
    };
    let placed = |nodes: Vec<(String, String)>| {
        let c = c.clone();
        async move {
            eventually(
                Duration::from_secs(30),
                &format!("daemon pods on {nodes:?}"),
                || async { (daemon_pods(&c).await == nodes).then_some(()) },
            )
            .await
        }
    };
    placed(want(&["keel-node-0", "keel-node-1"])).await;
    let node = c.get(&nodes(), "", "keel-node-0").await.unwrap();
    assert_eq!(node["status"]["conditions"][0]["type"], "Ready");
    // The heartbeat Lease is renewed on its own schedule, not before the Pods run: wait for it.
    let lease = eventually(Duration::from_secs(30), "keel-node-1's lease", || async {
        c.get(
            &gvr("coordination.k8s.io", "v1", "leases"),
            "kube-node-lease",
            "keel-node-1",
        )
        .await
        .ok()
    })
    .await;
    assert_eq!(lease["spec"]["holderIdentity"], "keel-node-1");

    // A Node added by hand gets one; a Windows Node and a tainted one do not.
    for (name, os, taints) in [
        ("extra", "linux", json!([])),
        ("win", "windows", json!([])),
        (
            "gpu",
            "linux",
            json!([{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
        ),
    ] {
        c.create(
            &nodes(),
            "",
            &json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {"kubernetes.io/os": os}},
                    "spec": {"taints": taints}}),
        )
        .await
        .unwrap();
    }
    placed(want(&["extra", "keel-node-0", "keel-node-1"])).await;
    let ds = eventually(Duration::from_secs(30), "the status counted", || async {
        let d = c.get(&daemonsets(), "default", "agent").await.ok()?;
        (d["status"]["numberReady"] == 3).then_some(d)
    })
    .await;
    assert_eq!(ds["status"]["desiredNumberScheduled"], 3);
    assert_eq!(ds["status"]["currentNumberScheduled"], 3);
    assert_eq!(ds["status"]["numberMisscheduled"], 0);
    assert_eq!(ds["status"]["updatedNumberScheduled"], 3);

    // Relabelled out of the selector, then removed: its Pod goes.
    c.patch(
        &nodes(),
        "",
        "extra",
        keel_client::PatchType::Merge,
        &json!({"metadata": {"labels": {"kubernetes.io/os": "plan9"}}}),
    )
    .await
    .unwrap();
    placed(want(&["keel-node-0", "keel-node-1"])).await;
    c.patch(
        &nodes(),
        "",
        "extra",
        keel_client::PatchType::Merge,
        &json!({"metadata": {"labels": {"kubernetes.io/os": "linux"}}}),
    )
    .await
    .unwrap();
    placed(want(&["extra", "keel-node-0", "keel-node-1"])).await;
    c.delete(&nodes(), "", "extra", &keel_client::DeleteParams::default())
        .await
        .unwrap();
    placed(want(&["keel-node-0", "keel-node-1"])).await;
}

fn cronjobs() -> keel_client::GroupVersionResource {
    gvr("batch", "v1", "cronjobs")
}

fn cronjob(name: &str, policy: &str, run_time: &str) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": "* * * * *",
            "concurrencyPolicy": policy,
            "successfulJobsHistoryLimit": 2,
            "jobTemplate": {"spec": {"template": {
                "metadata": {"annotations": {"keel.dev/run-time": run_time}},
                "spec": {"restartPolicy": "OnFailure",
                         "containers": [{"name": "hello", "image": "busybox"}]}
            }}}
        }
    })
}

/// The CronJob's Jobs: (name, finished).
async fn jobs_of(c: &Client, uid: &str) -> Vec<(String, bool)> {
    let list = c
        .list(&jobs(), "default", &ListParams::default())
        .await
        .unwrap();
    list.items
        .iter()
        .filter(|j| j.controller_uid() == Some(uid))
        .map(|j| {
            let done = condition(j, "Complete").is_some() || condition(j, "Failed").is_some();
            (j.name().to_string(), done)
        })
        .collect()
}

/// On a clock sixty times faster than real time (`--cronjob-time-scale 60`), a schedule of
/// every minute fires every second.
#[tokio::test]
async fn a_cronjob_fires_on_its_schedule_and_keeps_its_history_limits() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(
        &[&api],
        &["--cronjob-time-scale", "60", "--pod-start-delay", "50ms"],
    )
    .await;
    let c = api.client().await;
    let every = c
        .create(&cronjobs(), "default", &cronjob("every", "Allow", "100ms"))
        .await
        .unwrap();
    let forbid = c
        .create(&cronjobs(), "default", &cronjob("forbid", "Forbid", "1h"))
        .await
        .unwrap();

    // Five runs of `every`, each a Job named by its minute, and never more than two
    // finished ones kept.
    let creates = eventually(Duration::from_secs(60), "five scheduled jobs", || async {
        let n = event_reasons(&c, every.uid())
            .await
            .iter()
            .filter(|(r, m, _)| r == "SuccessfulCreate" && m.starts_with("Created job every-"))
            .count();
        (n >= 5).then_some(n)
    })
    .await;
    assert!(creates >= 5);
    let kept = eventually(
        Duration::from_secs(30),
        "history within the limits",
        || async {
            let jobs = jobs_of(&c, every.uid()).await;
            let finished = jobs.iter().filter(|(_, done)| *done).count();
            (finished == 2).then_some(jobs)
        },
    )
    .await;
    for (name, _) in &kept {
        let minute: u64 = name.strip_prefix("every-").unwrap().parse().unwrap();
        assert!(minute > 29_000_000, "{name}");
    }
    let cj = c.get(&cronjobs(), "default", "every").await.unwrap();
    assert!(cj["status"]["lastScheduleTime"].is_string(), "{cj}");
    assert!(cj["status"]["lastSuccessfulTime"].is_string(), "{cj}");
    let reasons = event_reasons(&c, every.uid()).await;
    assert!(
        reasons
            .iter()
            .any(|(r, m, _)| r == "SawCompletedJob" && m.contains(", status: Complete"))
    );
    assert!(
        reasons
            .iter()
            .any(|(r, m, _)| r == "SuccessfulDelete" && m.starts_with("Deleted job every-"))
    );

    // `Forbid`: the first Job still runs, so no second one starts.
    let forbid_jobs = jobs_of(&c, forbid.uid()).await;
    assert_eq!(forbid_jobs.len(), 1, "{forbid_jobs:?}");
    assert!(!forbid_jobs[0].1);
    let f = c.get(&cronjobs(), "default", "forbid").await.unwrap();
    assert_eq!(
        f["status"]["active"].as_array().map(Vec::len),
        Some(1),
        "{f}"
    );
    assert_eq!(f["status"]["active"][0]["name"], forbid_jobs[0].0.as_str());

    // Suspended: no more Jobs.
    c.patch(
        &cronjobs(),
        "default",
        "every",
        keel_client::PatchType::Merge,
        &json!({"spec": {"suspend": true}}),
    )
    .await
    .unwrap();
    let before = eventually(Duration::from_secs(10), "the suspension seen", || async {
        let cj = c.get(&cronjobs(), "default", "every").await.ok()?;
        (cj["status"].get("active").is_none()).then_some(cj["status"]["lastScheduleTime"].clone())
    })
    .await;
    // Three simulated minutes pass: the schedule does not fire.
    let mark = c
        .create(
            &pods(),
            "default",
            &json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "clock", "annotations": {"keel.dev/run-time": "3s"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "three seconds of real time",
        || async {
            let p = c.get(&pods(), "default", mark.name()).await.ok()?;
            (p["status"]["phase"] == "Succeeded").then_some(())
        },
    )
    .await;
    let after = c.get(&cronjobs(), "default", "every").await.unwrap();
    assert_eq!(after["status"]["lastScheduleTime"], before);
}

/// (ready IPs, not-ready IPs) of the Service's Endpoints, each sorted.
async fn endpoint_ips(c: &Client, name: &str) -> Option<(Vec<String>, Vec<String>)> {
    let ep = c
        .get(&gvr("", "v1", "endpoints"), "default", name)
        .await
        .ok()?;
    let ips = |f: &str| -> Vec<String> {
        let mut v: Vec<String> = ep["subsets"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s[f].as_array().cloned().unwrap_or_default())
            .filter_map(|a| a["ip"].as_str().map(str::to_string))
            .collect();
        v.sort();
        v
    };
    Some((ips("addresses"), ips("notReadyAddresses")))
}

#[tokio::test]
async fn endpoints_and_slices_follow_pods_readiness() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let _cm = ControllerManager::start(&[&api], &[]).await;
    let c = api.client().await;
    c.create(
        &gvr("", "v1", "services"),
        "default",
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"},
                         "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
    )
    .await
    .unwrap();
    let pod = |name: &str, annotations: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "labels": {"app": "web"}, "annotations": annotations},
               "spec": {"containers": [{"name": "web", "image": "nginx",
                        "ports": [{"name": "http", "containerPort": 8080}]}]}})
    };
    c.create(&pods(), "default", &pod("fast", json!({})))
        .await
        .unwrap();
    c.create(
        &pods(),
        "default",
        &pod("slow", json!({"keel.dev/ready-after": "2s"})),
    )
    .await
    .unwrap();
    let ip = |name: &'static str| {
        let c = c.clone();
        async move {
            eventually(
                Duration::from_secs(20),
                &format!("{name}'s address"),
                || async {
                    let p = c.get(&pods(), "default", name).await.ok()?;
                    p["status"]["podIP"].as_str().map(str::to_string)
                },
            )
            .await
        }
    };
    let (fast, slow) = (ip("fast").await, ip("slow").await);
    assert_ne!(fast, slow);
    assert!(fast.starts_with("10.244.") && slow.starts_with("10.244."));

    // While `slow` is not Ready it is a not-ready address; then both are ready.
    eventually(Duration::from_secs(20), "slow not ready yet", || async {
        (endpoint_ips(&c, "web").await? == (vec![fast.clone()], vec![slow.clone()])).then_some(())
    })
    .await;
    let mut both = vec![fast.clone(), slow.clone()];
    both.sort();
    eventually(Duration::from_secs(20), "both ready", || async {
        (endpoint_ips(&c, "web").await? == (both.clone(), vec![])).then_some(())
    })
    .await;
    let ep = c
        .get(&gvr("", "v1", "endpoints"), "default", "web")
        .await
        .unwrap();
    assert_eq!(
        ep["subsets"][0]["ports"],
        json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
    );
    let slices = c
        .list(
            &gvr("discovery.k8s.io", "v1", "endpointslices"),
            "default",
            &ListParams {
                label_selector: "kubernetes.io/service-name=web".into(),
                ..ListParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(slices.items.len(), 1);
    let slice = &slices.items[0];
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(
        slice.label("endpointslice.kubernetes.io/managed-by"),
        Some("endpointslice-controller.k8s.io")
    );
    let mut slice_ips: Vec<&str> = slice["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["conditions"]["ready"] == true)
        .map(|e| e["addresses"][0].as_str().unwrap())
        .collect();
    slice_ips.sort();
    assert_eq!(slice_ips, both);

    // A Pod deleted leaves; a Service deleted takes its Endpoints.
    c.delete(
        &pods(),
        "default",
        "fast",
        &keel_client::DeleteParams::default(),
    )
    .await
    .unwrap();
    eventually(
        Duration::from_secs(20),
        "fast gone from the endpoints",
        || async { (endpoint_ips(&c, "web").await? == (vec![slow.clone()], vec![])).then_some(()) },
    )
    .await;
    c.delete(
        &gvr("", "v1", "services"),
        "default",
        "web",
        &keel_client::DeleteParams::default(),
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(20), "the endpoints deleted", || async {
        endpoint_ips(&c, "web").await.is_none().then_some(())
    })
    .await;
}

/// `--event-ttl`: an Event lives that long after its last write, then etcd's lease removes it
/// (a watcher sees it deleted); other kinds never expire.
#[tokio::test]
async fn events_expire_after_the_ttl() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--event-ttl", "3s"]).await;
    let c = api.client().await;
    let event = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "pi.1", "namespace": "default"},
        "involvedObject": {"kind": "Job", "name": "pi", "namespace": "default"},
        "reason": "Completed", "message": "Job completed", "type": "Normal",
        "source": {"component": "job-controller"}});
    let created = c.create(&events(), "default", &event).await.unwrap();
    c.create(
        &gvr("", "v1", "configmaps"),
        "default",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "stays"}}),
    )
    .await
    .unwrap();
    let mut watch = c
        .watch(
            &events(),
            &WatchParams {
                namespace: "default".into(),
                resource_version: created.resource_version().to_string(),
                ..WatchParams::default()
            },
        )
        .await
        .unwrap();
    assert!(c.get(&events(), "default", "pi.1").await.is_ok());
    eventually(Duration::from_secs(30), "the event expired", || async {
        c.get(&events(), "default", "pi.1")
            .await
            .err()
            .filter(|e| e.reason == keel_client::Reason::NotFound)
    })
    .await;
    let ev = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(ev.kind, EventType::Deleted);
    assert_eq!(ev.object.name(), "pi.1");
    assert!(
        c.get(&gvr("", "v1", "configmaps"), "default", "stays")
            .await
            .is_ok()
    );
}

/// `events.k8s.io/v1` beside core `v1`: one set of Events, each readable, listable and
/// watchable in both forms, as Kubernetes converts them.
#[tokio::test]
async fn events_are_served_in_both_groups() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let new_events = gvr("events.k8s.io", "v1", "events");
    let mut watch = c
        .watch(
            &events(),
            &WatchParams {
                namespace: "default".into(),
                ..WatchParams::default()
            },
        )
        .await
        .unwrap();
    let written = c
        .create(
            &new_events,
            "default",
            &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "web.1"},
                "eventTime": "2026-11-29T00:00:00.000000Z",
                "regarding": {"kind": "Deployment", "name": "web", "namespace": "default"},
                "note": "Scaled up replica set web-1 from 0 to 2", "reason": "ScalingReplicaSet",
                "type": "Normal", "action": "Scale",
                "reportingController": "deployment-controller", "reportingInstance": "cm-1"}),
        )
        .await
        .unwrap();
    assert_eq!(written["apiVersion"], "events.k8s.io/v1");
    assert_eq!(written["note"], "Scaled up replica set web-1 from 0 to 2");
    // The same Event in core form.
    let core = c.get(&events(), "default", "web.1").await.unwrap();
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["involvedObject"]["name"], "web");
    assert_eq!(core["message"], "Scaled up replica set web-1 from 0 to 2");
    assert_eq!(core["reportingComponent"], "deployment-controller");
    assert_eq!(core["metadata"]["uid"], written["metadata"]["uid"]);
    let ev = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(ev.object["involvedObject"]["kind"], "Deployment");

    // A core Event, listed in the new form.
    c.create(
        &events(),
        "default",
        &json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "pi.1"},
                "involvedObject": {"kind": "Job", "name": "pi", "namespace": "default"},
                "message": "Job completed", "reason": "Completed", "type": "Normal",
                "source": {"component": "job-controller"}, "count": 3}),
    )
    .await
    .unwrap();
    let list = c
        .list(&new_events, "default", &ListParams::default())
        .await
        .unwrap();
    let pi = list.items.iter().find(|e| e.name() == "pi.1").unwrap();
    assert_eq!(pi["apiVersion"], "events.k8s.io/v1");
    assert_eq!(pi["regarding"]["name"], "pi");
    assert_eq!(pi["note"], "Job completed");
    assert_eq!(pi["deprecatedCount"], 3);
    assert_eq!(pi["deprecatedSource"]["component"], "job-controller");
    assert_eq!(list.items.len(), 2);
}
