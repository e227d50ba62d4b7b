//! A client of several API servers balances over them, fails over when one dies, and its
//! resumable watch continues on another replica from the last resourceVersion.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use keel_client::{Client, ClientConfig, EventType, Metadata, PatchType, WatchParams, gvr};
use keel_tests::{ApiServer, Etcd};
use serde_json::json;

async fn client_of(servers: &[&ApiServer]) -> Client {
    let endpoints: Vec<String> = servers.iter().map(|s| s.endpoint()).collect();
    Client::connect(&ClientConfig::new(endpoints).timeout(Duration::from_secs(10)))
        .await
        .unwrap()
}

fn requests_served(s: &ApiServer) -> f64 {
    s.metrics()
        .lines()
        .filter(|l| l.starts_with("keel_apiserver_requests_total{verb=\"get\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn requests_balance_over_replicas_and_fail_over_when_one_dies() {
    let etcd = Etcd::start().await;
    let mut a = ApiServer::start(&etcd).await;
    let b = ApiServer::start(&etcd).await;
    let c = client_of(&[&a, &b]).await;
    let cms = gvr("", "v1", "configmaps");
    c.create(
        &cms,
        "default",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "f"}}),
    )
    .await
    .unwrap();
    for _ in 0..20 {
        c.get(&cms, "default", "f").await.unwrap();
    }
    assert!(
        requests_served(&a) >= 5.0 && requests_served(&b) >= 5.0,
        "both replicas serve"
    );

    a.kill9();
    // Every request still succeeds: connections to the dead replica are refused and retried
    // on the live one.
    for i in 0..20 {
        let p = json!({"data": {"i": i.to_string()}});
        c.patch(&cms, "default", "f", PatchType::Merge, &p)
            .await
            .unwrap();
    }
    assert_eq!(
        c.get(&cms, "default", "f").await.unwrap()["data"]["i"],
        "19"
    );

    a.restart().await;
    let before = requests_served(&a);
    for _ in 0..20 {
        c.get(&cms, "default", "f").await.unwrap();
    }
    keel_tests::eventually(
        Duration::from_secs(10),
        "the restarted replica to serve again",
        || {
            let (c, cms, a) = (c.clone(), cms.clone(), &a);
            async move {
                c.get(&cms, "default", "f").await.ok()?;
                (requests_served(a) > before).then_some(())
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_resumable_watch_continues_on_another_replica_without_loss_or_repeat() {
    let etcd = Etcd::start().await;
    let mut a = ApiServer::start(&etcd).await;
    let b = ApiServer::start(&etcd).await;
    let writer = b.client().await;
    let cms = gvr("", "v1", "configmaps");
    let created = writer
        .create(
            &cms,
            "default",
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}}),
        )
        .await
        .unwrap();
    // The watcher's first endpoint is `a`: its stream starts there.
    let watcher = client_of(&[&a, &b]).await;
    let p = WatchParams {
        resource_version: created["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .into(),
        ..Default::default()
    };
    let mut events = watcher.watch_resumable(&cms, &p);
    let mut want = Vec::new();
    let mut write = async |i: usize| {
        let o = writer
            .patch(
                &cms,
                "default",
                "w",
                PatchType::Merge,
                &json!({"data": {"i": i.to_string()}}),
            )
            .await
            .unwrap();
        want.push(
            o["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    };
    for i in 0..30 {
        write(i).await;
    }
    let mut got = Vec::new();
    while got.len() < 30 {
        let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        got.push(ev.resource_version().to_string());
    }
    a.kill9();
    for i in 30..60 {
        write(i).await;
    }
    while got.len() < 60 {
        let ev = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("events after failover")
            .unwrap()
            .unwrap();
        assert_ne!(ev.kind, EventType::Bookmark);
        got.push(ev.resource_version().to_string());
    }
    assert_eq!(got, want, "every event once, in order, across the failover");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), events.next())
            .await
            .is_err()
    );
}
