//! The controller-manager scaled out (real binaries, real API server and etcd): replicas split
//! the shard leases fairly, hand shards over to a newcomer, take over a killed or stopped
//! replica's shards in time, converge hundreds of Deployments together, never reconcile one key
//! or work on one shard from two replicas at once (checked from each replica's
//! `--reconcile-log`), and each caches only its own shards' objects.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use keel_api::shard::shard_of;
use keel_client::{Client, GroupVersionResource, ListParams, PatchType, gvr};
use keel_tests::{ApiServer, ControllerManager, Etcd, eventually, shard_lease_holders};
use serde_json::{Value, json};
use tokio::time::Instant;

const SHARDS: u32 = 32;
/// The harness's shard-lease timings: lease 4 s, retry 500 ms.
const LEASE: Duration = Duration::from_secs(4);
const RETRY: Duration = Duration::from_millis(500);

/// One cluster at a time: these tests time take-overs, and two cores do not run two clusters
/// of several controller-managers without stretching them.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn deployments() -> GroupVersionResource {
    gvr("apps", "v1", "deployments")
}

fn pods() -> GroupVersionResource {
    gvr("", "v1", "pods")
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.7.9"}]}
            }
        }
    })
}

/// A replica started with its own reconcile log.
async fn replica(api: &ApiServer, logs: &Path) -> ControllerManager {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let log = logs.join(format!("reconciles-{n}.jsonl"));
    ControllerManager::start(&[api], &["--reconcile-log", log.to_str().unwrap()]).await
}

/// How many shards each of `replicas` holds (sorted), once every shard is held by one of them.
async fn split(c: &Client, replicas: &[&ControllerManager]) -> Option<Vec<usize>> {
    let holders = shard_lease_holders(c).await;
    if holders.len() != SHARDS as usize {
        return None;
    }
    let mut counts: HashMap<&str, usize> = replicas.iter().map(|r| (r.id.as_str(), 0)).collect();
    for holder in holders.values() {
        *counts.get_mut(holder.as_str())? += 1;
    }
    let mut counts: Vec<usize> = counts.into_values().collect();
    counts.sort();
    Some(counts)
}

/// etcd, an API server and three controller-managers that have split the shards.
struct Cluster {
    logs: tempfile::TempDir,
    _etcd: Etcd,
    api: ApiServer,
    c: Client,
    cms: Vec<ControllerManager>,
}

async fn three_replicas() -> Cluster {
    let logs = tempfile::tempdir().unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let mut cms = Vec::new();
    for _ in 0..3 {
        cms.push(replica(&api, logs.path()).await);
    }
    let all: Vec<&ControllerManager> = cms.iter().collect();
    wait_split(&c, &all, &[10, 11, 11], Duration::from_secs(30)).await;
    Cluster {
        logs,
        _etcd: etcd,
        api,
        c,
        cms,
    }
}

/// Waits until every shard is held by one of `replicas`, `fair` apart (sorted counts).
async fn wait_split(c: &Client, replicas: &[&ControllerManager], fair: &[usize], within: Duration) {
    eventually(within, &format!("shards split {fair:?}"), || async {
        (split(c, replicas).await.as_deref() == Some(fair)).then_some(())
    })
    .await;
}

async fn create_all(c: &Client, names: &[String], replicas: i64) {
    let results: Vec<_> = futures::stream::iter(names.iter())
        .map(|n| {
            let c = c.clone();
            async move {
                c.create(&deployments(), "default", &deployment(n, replicas))
                    .await
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for r in results {
        r.unwrap();
    }
}

/// Waits until each named Deployment has `replicas` available Pods of its current generation.
async fn converged(c: &Client, names: &[String], replicas: i64, within: Duration) {
    eventually(
        within,
        &format!("{} Deployments at {replicas} available", names.len()),
        || async {
            let list = c
                .list_all(&deployments(), "default", &ListParams::default())
                .await
                .ok()?;
            let by_name: HashMap<&str, &Value> = list
                .items
                .iter()
                .filter_map(|d| Some((d["metadata"]["name"].as_str()?, d)))
                .collect();
            names
                .iter()
                .all(|n| {
                    by_name.get(n.as_str()).is_some_and(|d| {
                        d["status"]["observedGeneration"] == d["metadata"]["generation"]
                            && d["status"]["availableReplicas"] == json!(replicas)
                            && d["status"]["updatedReplicas"] == json!(replicas)
                    })
                })
                .then_some(())
        },
    )
    .await;
}

/// One line of a `--reconcile-log`.
#[derive(Debug, Clone)]
struct Reconcile {
    controller: String,
    key: String,
    shard: u64,
    replica: String,
    start: u128,
    end: u128,
}

fn read_logs(dir: &Path) -> Vec<Reconcile> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path: PathBuf = entry.unwrap().path();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            // A replica killed mid-write leaves at most a cut last line.
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let time = |f: &str| v[f].as_str().unwrap().parse::<u128>().unwrap();
            out.push(Reconcile {
                controller: v["controller"].as_str().unwrap().to_string(),
                key: v["key"].as_str().unwrap().to_string(),
                shard: v["shard"].as_u64().unwrap(),
                replica: v["replica"].as_str().unwrap().to_string(),
                start: time("start"),
                end: time("end"),
            });
        }
    }
    out
}

/// Pairs of reconciles in one group (by `group`) by two replicas at overlapping times.
fn overlaps(
    log: &[Reconcile],
    group: impl Fn(&Reconcile) -> String,
) -> Vec<(&Reconcile, &Reconcile)> {
    let mut groups: HashMap<String, Vec<&Reconcile>> = HashMap::new();
    for r in log {
        groups.entry(group(r)).or_default().push(r);
    }
    let mut found = Vec::new();
    for mut rs in groups.into_values() {
        rs.sort_by_key(|r| r.start);
        // The latest-ending reconcile so far of each replica: sorted by start, an interval
        // overlaps an earlier one exactly when it starts before that one's end.
        let mut latest: HashMap<&str, &Reconcile> = HashMap::new();
        for r in rs {
            for (replica, other) in &latest {
                if *replica != r.replica && other.end > r.start {
                    found.push((*other, r));
                }
            }
            let slot = latest.entry(r.replica.as_str()).or_insert(r);
            if r.end > slot.end {
                *slot = r;
            }
        }
    }
    found
}

fn assert_never_at_once(log: &[Reconcile]) {
    assert!(!log.is_empty(), "the replicas logged their reconciles");
    let by_key = overlaps(log, |r| format!("{} {}", r.controller, r.key));
    assert!(
        by_key.is_empty(),
        "one key reconciled by two replicas at once: {:?}",
        &by_key[..by_key.len().min(5)]
    );
    let by_shard = overlaps(log, |r| r.shard.to_string());
    assert!(
        by_shard.is_empty(),
        "one shard worked on by two replicas at once: {:?}",
        &by_shard[..by_shard.len().min(5)]
    );
}

/// A value of `keel_informer_objects` from a replica's /metrics.
fn cached(cm: &ControllerManager, resource: &str, shard_by: &str) -> Option<usize> {
    let prefix = format!("keel_informer_objects{{resource=\"{resource}\",shard_by=\"{shard_by}\",");
    cm.metrics()
        .lines()
        .find(|l| l.starts_with(&prefix))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

#[test]
fn the_overlap_check_finds_overlaps() {
    let r = |replica: &str, start: u128, end: u128| Reconcile {
        controller: "deployment".into(),
        key: "default/a".into(),
        shard: 3,
        replica: replica.into(),
        start,
        end,
    };
    // One replica may run a key again right after itself; two replicas may follow each other.
    assert!(
        overlaps(&[r("a", 0, 10), r("a", 10, 20), r("b", 20, 30)], |r| r
            .key
            .clone())
        .is_empty()
    );
    // A long reconcile of one replica overlapping another's later one is found, even with a
    // short one of its own in between.
    let log = [r("a", 0, 100), r("a", 10, 20), r("b", 50, 60)];
    assert_eq!(overlaps(&log, |r| r.key.clone()).len(), 1);
}

#[tokio::test]
async fn replicas_split_the_shards_hand_them_over_and_take_over_the_dead() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Cluster {
        logs,
        _etcd,
        api,
        c,
        mut cms,
    } = three_replicas().await;

    let names: Vec<String> = (0..30).map(|i| format!("web-{i}")).collect();
    create_all(&c, &names, 1).await;
    converged(&c, &names, 1, Duration::from_secs(60)).await;

    // A fourth joins while every Deployment scales: shards move under load.
    cms.push(replica(&api, logs.path()).await);
    for n in &names {
        c.patch(
            &deployments(),
            "default",
            n,
            PatchType::Merge,
            &json!({"spec": {"replicas": 2}}),
        )
        .await
        .unwrap();
    }
    let all: Vec<&ControllerManager> = cms.iter().collect();
    wait_split(&c, &all, &[8, 8, 8, 8], Duration::from_secs(30)).await;
    converged(&c, &names, 2, Duration::from_secs(60)).await;

    // kill -9: the dead replica's leases run out, then the others take its shards.
    let mut dead = cms.remove(0);
    dead.kill9();
    let killed = Instant::now();
    let live: Vec<&ControllerManager> = cms.iter().collect();
    // Within a lease duration and a retry period, plus a second of slack for a busy machine.
    wait_split(
        &c,
        &live,
        &[10, 11, 11],
        LEASE + RETRY + Duration::from_secs(1),
    )
    .await;
    eprintln!("kill -9: shards taken over in {:?}", killed.elapsed());

    // SIGTERM: the replica releases its leases at once, the others take them within 2 s.
    let mut stopped = cms.remove(0);
    let terminated = Instant::now();
    assert!(stopped.terminate().success(), "a clean exit on SIGTERM");
    let live: Vec<&ControllerManager> = cms.iter().collect();
    wait_split(&c, &live, &[16, 16], Duration::from_secs(2)).await;
    eprintln!("SIGTERM: shards taken over in {:?}", terminated.elapsed());

    // Deployments created after both go converge on the survivors.
    let later: Vec<String> = (0..10).map(|i| format!("later-{i}")).collect();
    create_all(&c, &later, 2).await;
    converged(&c, &later, 2, Duration::from_secs(60)).await;

    assert_never_at_once(&read_logs(logs.path()));
}

#[tokio::test]
async fn three_hundred_deployments_converge_across_three_replicas_each_caching_its_shards() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Cluster {
        logs,
        _etcd,
        api: _api,
        c,
        cms,
    } = three_replicas().await;

    let names: Vec<String> = (0..300).map(|i| format!("app-{i}")).collect();
    create_all(&c, &names, 1).await;
    converged(&c, &names, 1, Duration::from_secs(240)).await;

    // Every replica acted, and none on a key or shard another was working on.
    let log = read_logs(logs.path());
    for cm in &cms {
        assert!(
            log.iter()
                .any(|r| r.replica == cm.id && r.controller == "deployment"),
            "{} reconciled Deployments",
            cm.id
        );
    }
    assert_never_at_once(&log);

    // Each replica caches exactly the Deployments and Pods of the shards it holds: Deployments
    // by their own name, Pods by their ReplicaSet's.
    let holders = shard_lease_holders(&c).await;
    let pod_list = c
        .list_all(&pods(), "default", &ListParams::default())
        .await
        .unwrap();
    assert_eq!(pod_list.items.len(), 300);
    for cm in &cms {
        let mine = |ns: &str, name: &str| holders[&shard_of(ns, name, SHARDS)] == cm.id;
        let deployments_here = names.iter().filter(|n| mine("default", n)).count();
        let pods_here = pod_list
            .items
            .iter()
            .filter(|p| {
                let owner = p["metadata"]["ownerReferences"][0]["name"]
                    .as_str()
                    .unwrap();
                mine("default", owner)
            })
            .count();
        assert!(deployments_here > 0 && deployments_here < 300);
        eventually(
            Duration::from_secs(10),
            &format!("{} to cache only its shards", cm.id),
            || async {
                (cached(cm, "deployments.apps", "name") == Some(deployments_here)
                    && cached(cm, "pods", "owner") == Some(pods_here))
                .then_some(())
            },
        )
        .await;
    }
}

/// `--shards 1` is leader election: one replica acts; when it dies the other takes the lease
/// and picks up what changed meanwhile (its informer lists again on gaining the shard).
#[tokio::test]
async fn with_one_shard_a_standby_takes_over_and_catches_up() {
    let _one = ONE_AT_A_TIME.lock().await;
    let logs = tempfile::tempdir().unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let mut cms = Vec::new();
    for log in ["first.jsonl", "second.jsonl"] {
        let log = logs.path().join(log);
        cms.push(
            ControllerManager::start(
                &[&api],
                &["--shards", "1", "--reconcile-log", log.to_str().unwrap()],
            )
            .await,
        );
    }
    let names = vec!["solo".to_string()];
    create_all(&c, &names, 2).await;
    converged(&c, &names, 2, Duration::from_secs(60)).await;
    let holder = shard_lease_holders(&c).await[&0].clone();
    let log = read_logs(logs.path());
    assert!(
        !log.is_empty() && log.iter().all(|r| r.replica == holder),
        "only the holder of the one shard reconciles"
    );
    let at = cms.iter().position(|cm| cm.id == holder).unwrap();
    let mut dead = cms.remove(at);
    let standby = cms.remove(0);
    dead.kill9();
    // A change while nobody holds the shard: the standby must see it once it takes over.
    c.patch(
        &deployments(),
        "default",
        "solo",
        PatchType::Merge,
        &json!({"spec": {"replicas": 3}}),
    )
    .await
    .unwrap();
    converged(&c, &names, 3, Duration::from_secs(60)).await;
    assert_eq!(shard_lease_holders(&c).await[&0], standby.id);
    assert_never_at_once(&read_logs(logs.path()));
}
