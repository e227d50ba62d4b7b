//! Many concurrent writers on one object: PATCH never loses an update; replace collides.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use keel_client::{Client, PatchType, Reason, gvr};
use keel_tests::{ApiServer, Etcd};
use serde_json::json;

const WRITERS: usize = 64;
const RUN_FOR: Duration = Duration::from_secs(10);

/// Each writer owns key `w<i>` of one ConfigMap and writes an increasing counter; the final
/// object must hold every writer's last acknowledged value.
async fn writers_never_lose_an_update(clients: Vec<Client>, kind: PatchType) {
    let cms = gvr("", "v1", "configmaps");
    let name = format!("hot-{kind:?}").to_lowercase();
    clients[0]
        .create(&cms, "default", &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}}))
        .await
        .unwrap();
    let name = Arc::new(name);
    let stop = Instant::now() + RUN_FOR;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let c = clients[w % clients.len()].clone();
        let (cms, name) = (cms.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            let key = format!("w{w}");
            let mut last_acked = None;
            let mut n = 0u64;
            while Instant::now() < stop {
                n += 1;
                let patch = match kind {
                    PatchType::Json => json!([{"op": "add", "path": format!("/data/{key}"), "value": n.to_string()}]),
                    _ => json!({"data": {&key: n.to_string()}}),
                };
                match c.patch(&cms, "default", &name, kind, &patch).await {
                    Ok(o) => {
                        // The answer already holds this write.
                        assert_eq!(o["data"][&key], n.to_string());
                        last_acked = Some(n);
                    }
                    Err(e) => panic!("writer {w}: PATCH {n} failed: {e}"),
                }
            }
            (key, last_acked)
        }));
    }
    let mut total = 0;
    let mut want = Vec::new();
    for t in tasks {
        let (key, last) = t.await.unwrap();
        let last = last.expect("every writer got at least one write through");
        total += last;
        want.push((key, last));
    }
    let fin = clients[0].get(&cms, "default", &name).await.unwrap();
    for (key, last) in want {
        assert_eq!(fin["data"][&key], last.to_string(), "{key} lost an update");
    }
    assert_eq!(fin["data"].as_object().unwrap().len(), WRITERS);
    eprintln!("{kind:?}: {total} PATCHes acknowledged in {RUN_FOR:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_patch_writers_on_one_object_lose_nothing() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    writers_never_lose_an_update(vec![api.client().await], PatchType::Merge).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_patch_writers_on_one_object_lose_nothing() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    writers_never_lose_an_update(vec![api.client().await], PatchType::Json).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_across_two_replicas_lose_nothing() {
    let etcd = Etcd::start().await;
    let a = ApiServer::start(&etcd).await;
    let b = ApiServer::start(&etcd).await;
    writers_never_lose_an_update(vec![a.client().await, b.client().await], PatchType::Merge).await;
    let retries: f64 = [a.metrics(), b.metrics()]
        .iter()
        .flat_map(|m| {
            m.lines()
                .filter(|l| l.starts_with("keel_apiserver_patch_retries_total"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        retries > 0.0,
        "two replicas writing one object must have met at the compare-and-swap"
    );
}

#[tokio::test]
async fn replace_with_a_stale_version_conflicts_and_never_overwrites() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let base = c
        .create(&cms, "default", &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r"}, "data": {"v": "0"}}))
        .await
        .unwrap();
    // Eight writers replace from the same read: exactly one wins.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (c, cms, mut o) = (c.clone(), cms.clone(), base.clone());
        o["data"]["v"] = json!((i + 1).to_string());
        tasks.push(tokio::spawn(
            async move { c.update(&cms, "default", &o).await },
        ));
    }
    let mut wins = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(o) => wins.push(o["data"]["v"].as_str().unwrap().to_string()),
            Err(e) => assert_eq!(e.reason, Reason::Conflict),
        }
    }
    assert_eq!(wins.len(), 1);
    assert_eq!(
        c.get(&cms, "default", "r").await.unwrap()["data"]["v"],
        wins[0]
    );
}
