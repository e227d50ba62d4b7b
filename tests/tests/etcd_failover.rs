//! One etcd member killed, paused or cut off while writers and watchers run through the API
//! server: no client sees an error, no acknowledged write is lost, every watcher sees every
//! event once (issue 15).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use keel_client::{Client, ClientConfig, EventType, Metadata, PatchType, WatchParams, gvr};
use keel_tests::proxy::Proxy;
use keel_tests::{ApiServer, EtcdCluster, eventually};
use serde_json::json;
use tokio::sync::Mutex;

const WRITERS: usize = 16;
const OBJECTS: usize = 4;

/// Writers PATCHing their own field of shared ConfigMaps, and what they were told.
struct Load {
    stop: Arc<AtomicBool>,
    acks: Arc<AtomicU64>,
    /// Every acknowledged write's resourceVersion.
    acked: Arc<Mutex<BTreeSet<u64>>>,
    errors: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<u64>>,
}

fn rv(o: &serde_json::Value) -> u64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn start_writers(c: &Client) -> Load {
    let load = Load {
        stop: Arc::new(AtomicBool::new(false)),
        acks: Arc::new(AtomicU64::new(0)),
        acked: Arc::default(),
        errors: Arc::default(),
        tasks: Vec::new(),
    };
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (c, stop, acks) = (c.clone(), load.stop.clone(), load.acks.clone());
        let (acked, errors) = (load.acked.clone(), load.errors.clone());
        tasks.push(tokio::spawn(async move {
            let cms = gvr("", "v1", "configmaps");
            let name = format!("obj-{}", w % OBJECTS);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let p = json!({"data": {format!("w{w}"): (n + 1).to_string()}});
                match c.patch(&cms, "default", &name, PatchType::Merge, &p).await {
                    Ok(o) => {
                        n += 1;
                        acks.fetch_add(1, Ordering::Relaxed);
                        acked.lock().await.insert(rv(&o));
                    }
                    Err(e) => errors.lock().await.push(format!("writer {w}: {e}")),
                }
            }
            n
        }));
    }
    Load { tasks, ..load }
}

/// A resumable watch of the namespace collecting every resourceVersion it is sent.
fn start_watcher(c: &Client, from: u64) -> (Arc<Mutex<Vec<u64>>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let (c, s) = (c.clone(), seen.clone());
    let task = tokio::spawn(async move {
        let p = WatchParams {
            namespace: "default".into(),
            resource_version: from.to_string(),
            ..Default::default()
        };
        let mut events = c.watch_resumable(&gvr("", "v1", "configmaps"), &p);
        while let Some(ev) = events.next().await {
            let ev = ev.expect("the watch goes on without an error");
            if ev.kind != EventType::Bookmark {
                s.lock().await.push(ev.resource_version().parse().unwrap());
            }
        }
    });
    (seen, task)
}

/// Waits until writers have had `n` more writes acknowledged.
async fn writes_go_on(load: &Load, n: u64, what: &str) {
    let target = load.acks.load(Ordering::Relaxed) + n;
    let acks = load.acks.clone();
    eventually(Duration::from_secs(30), what, || {
        let acks = acks.clone();
        async move { (acks.load(Ordering::Relaxed) >= target).then_some(()) }
    })
    .await;
}

fn etcd_retries(s: &ApiServer) -> f64 {
    s.metrics()
        .lines()
        .filter(|l| l.starts_with("keel_apiserver_etcd_retries_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn one_etcd_member_killed_paused_or_cut_off_is_invisible_to_clients() {
    let mut cluster = EtcdCluster::start().await;
    // The API server reaches member 2 through a proxy that can cut the link.
    let proxy = Proxy::start(
        cluster.endpoints[2]
            .trim_start_matches("http://")
            .parse()
            .unwrap(),
    );
    let servers = format!(
        "{},{},{}",
        cluster.endpoints[0],
        cluster.endpoints[1],
        proxy.endpoint()
    );
    let api = ApiServer::start_at(&servers, &[]).await;
    let c = Client::connect(&ClientConfig::new([api.endpoint()]).timeout(Duration::from_secs(30)))
        .await
        .unwrap();
    let cms = gvr("", "v1", "configmaps");
    let mut start_rv = 0;
    for o in 0..OBJECTS {
        let created = c
            .create(
                &cms,
                "default",
                &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("obj-{o}")}}),
            )
            .await
            .unwrap();
        start_rv = start_rv.max(rv(&created));
    }
    let mut watchers: Vec<_> = (0..3).map(|_| start_watcher(&c, start_rv)).collect();
    let load = start_writers(&c);
    writes_go_on(&load, 200, "writes before any fault").await;
    // A watcher too far behind for the watch cache is served from etcd's history, on one
    // member at a time: a plain watch, so any error would reach it.
    let behind = ApiServer::start_at(&servers, &["--watch-cache-size", "10"]).await;
    let from_etcd: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut plain = behind
        .client()
        .await
        .watch(
            &cms,
            &WatchParams {
                namespace: "default".into(),
                resource_version: start_rv.to_string(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let seen = from_etcd.clone();
    tokio::spawn(async move {
        while let Some(ev) = plain.next().await {
            let ev = ev.expect("the watch from etcd's history goes on without an error");
            seen.lock()
                .await
                .push(ev.resource_version().parse().unwrap());
        }
    });

    // Every member in turn, so one of them is the leader when it goes.
    for i in 0..3 {
        cluster.kill(i);
        writes_go_on(&load, 300, &format!("writes while member {i} is dead")).await;
        cluster.restart(i);
        cluster.wait_healthy(i).await;
        writes_go_on(&load, 100, &format!("writes after member {i} is back")).await;
    }
    for i in 0..3 {
        cluster.pause(i);
        writes_go_on(&load, 300, &format!("writes while member {i} is paused")).await;
        cluster.resume(i);
        cluster.wait_healthy(i).await;
        writes_go_on(&load, 100, &format!("writes after member {i} resumed")).await;
    }
    proxy.cut();
    writes_go_on(&load, 300, "writes while member 2 is cut off").await;
    proxy.restore();
    writes_go_on(&load, 300, "writes after member 2 is reachable again").await;

    load.stop.store(true, Ordering::Relaxed);
    let mut written: BTreeMap<String, u64> = BTreeMap::new();
    for (w, t) in load.tasks.into_iter().enumerate() {
        written.insert(format!("w{w}"), t.await.unwrap());
    }
    let errors = load.errors.lock().await.clone();
    assert!(
        errors.is_empty(),
        "{} client-visible errors, e.g. {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    // No acknowledged write lost: each writer's field holds its last acknowledged value.
    for o in 0..OBJECTS {
        let obj = c.get(&cms, "default", &format!("obj-{o}")).await.unwrap();
        for (field, n) in &written {
            let w: usize = field[1..].parse().unwrap();
            if w % OBJECTS == o && *n > 0 {
                assert_eq!(obj["data"][field], n.to_string(), "obj-{o} {field}");
            }
        }
    }
    // Every watcher saw every acknowledged write, each once, in order.
    watchers.push((from_etcd, tokio::spawn(async {})));
    let acked = load.acked.lock().await.clone();
    let last = *acked.last().unwrap();
    for (k, (seen, _)) in watchers.iter().enumerate() {
        let seen = seen.clone();
        eventually(Duration::from_secs(20), "the watchers to catch up", || {
            let seen = seen.clone();
            async move { (seen.lock().await.last() >= Some(&last)).then_some(()) }
        })
        .await;
        let got = seen.lock().await.clone();
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "watcher {k}: events repeated or out of order"
        );
        let got: BTreeSet<u64> = got.into_iter().collect();
        let missed: Vec<_> = acked.difference(&got).take(5).collect();
        assert!(missed.is_empty(), "watcher {k} missed {missed:?}");
    }
    // The faults did hit traffic: calls were moved to other members.
    assert!(etcd_retries(&api) > 0.0, "no etcd call was ever retried");
    let log = api.log();
    println!(
        "etcd calls retried: {}, writes whose answer was lost settled from history: {}",
        etcd_retries(&api),
        log.matches("settled a write").count(),
    );
    // And every member is back in rotation.
    eventually(
        Duration::from_secs(10),
        "every member back in rotation",
        || async {
            let up = api
                .metrics()
                .lines()
                .filter(|l| l.starts_with("keel_apiserver_etcd_member_up{") && l.ends_with(" 1"))
                .count();
            (up == 3).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn etcd_out_of_space_fails_writes_clearly_and_recovers_without_a_restart() {
    // 4 MiB of backend: a few dozen revisions of a 200 KB object fill it.
    let etcd = keel_tests::Etcd::start_with(&["--quota-backend-bytes", "4194304"]).await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    c.create(
        &cms,
        "default",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}}),
    )
    .await
    .unwrap();
    let mut full = None;
    for i in 0..200 {
        let p = json!({"data": {"blob": format!("{i}{}", "x".repeat(200_000))}});
        if let Err(e) = c.patch(&cms, "default", "big", PatchType::Merge, &p).await {
            full = Some(e);
            break;
        }
    }
    let e = full.expect("etcd ran out of space");
    assert_eq!(e.reason, keel_api::Reason::InsufficientStorage, "{e}");
    assert!(e.message.contains("out of space"), "{}", e.message);
    assert!(e.message.contains("NOSPACE"), "{}", e.message);
    // Reads, lists and watches go on.
    let before = c.get(&cms, "default", "big").await.unwrap();
    c.list(&cms, "default", &Default::default()).await.unwrap();
    let mut watch = c
        .watch(
            &cms,
            &WatchParams {
                namespace: "default".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.kind, EventType::Added);
    let err = c
        .create(
            &cms,
            "default",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.reason, keel_api::Reason::InsufficientStorage);

    // The operator's fix: compact, defragment, disarm. keel is not restarted.
    let mut admin = etcd.client().await;
    let head = admin
        .get("x", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    admin
        .compact(
            head,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await
        .unwrap();
    admin.defragment().await.unwrap();
    // As `etcdctl alarm disarm`: each raised alarm, with the member that raised it.
    let raised = admin
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None,
        )
        .await
        .unwrap();
    assert!(!raised.alarms().is_empty(), "the NOSPACE alarm is raised");
    for a in raised.alarms() {
        let mut opts = etcd_client::AlarmOptions::new();
        opts.with_member(a.member_id());
        admin
            .alarm(
                etcd_client::AlarmAction::Deactivate,
                etcd_client::AlarmType::Nospace,
                Some(opts),
            )
            .await
            .unwrap();
    }
    let after = c
        .patch(
            &cms,
            "default",
            "big",
            PatchType::Merge,
            &json!({"data": {"blob": "small"}}),
        )
        .await
        .unwrap();
    assert!(rv(&after) > rv(&before));
    // The watch opened while etcd was full delivers the write.
    let ev = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(ev.kind, EventType::Modified);
    assert_eq!(ev.resource_version(), rv(&after).to_string());
}
