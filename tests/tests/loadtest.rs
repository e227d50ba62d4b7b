//! Short runs of the real `keel-loadtest` in every mode, against one API server and two: no
//! update lost, no event missed or repeated.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use keel_tests::{ApiServer, Etcd, bin};
use serde_json::Value;

/// Runs keel-loadtest with `--json`; returns its exit success and each result line.
fn loadtest(servers: &[&ApiServer], args: &[&str]) -> (bool, Vec<Value>) {
    let endpoints: Vec<String> = servers.iter().map(|s| s.endpoint()).collect();
    let metrics: Vec<String> = servers
        .iter()
        .map(|s| format!("http://{}/metrics", s.http))
        .collect();
    let out = Command::new(bin("keel-loadtest"))
        .args([
            "--server",
            &endpoints.join(","),
            "--metrics-url",
            &metrics.join(","),
            "--json",
            "--duration",
            "2s",
        ])
        .args(args)
        .output()
        .expect("run keel-loadtest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let results = stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!(
                    "not JSON: {l:?}: {e}; stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
        })
        .collect();
    (out.status.success(), results)
}

fn assert_clean(r: &Value) {
    assert!(r["ok"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["lost_updates"], 0, "{r}");
    assert_eq!(r["events_missed"], 0, "{r}");
    assert_eq!(r["events_duplicated"], 0, "{r}");
    assert_eq!(r["errors"], 0, "{r}");
}

#[tokio::test]
async fn patch_and_replace_lose_nothing_on_one_server_and_on_two() {
    let etcd = Etcd::start().await;
    let a = ApiServer::start(&etcd).await;
    let b = ApiServer::start(&etcd).await;
    for servers in [vec![&a], vec![&a, &b]] {
        for kind in ["merge", "json"] {
            let (ok, r) = loadtest(
                &servers,
                &[
                    "patch",
                    "--writers",
                    "16",
                    "--objects",
                    "2",
                    "--patch-type",
                    kind,
                ],
            );
            assert!(ok);
            assert_clean(&r[0]);
            assert_eq!(r[0]["servers"], servers.len());
        }
        let (ok, r) = loadtest(&servers, &["replace", "--writers", "4", "--objects", "1"]);
        assert!(ok);
        assert_clean(&r[0]);
        assert!(
            r[0]["conflicts"].as_u64().unwrap() > 0,
            "four replace writers on one object collide: {}",
            r[0]
        );
    }
    // Two servers writing one object meet at the compare-and-swap: retries show in /metrics.
    let (_, r) = loadtest(&[&a, &b], &["patch", "--writers", "16", "--objects", "1"]);
    assert!(r[0]["server_retries"].as_f64().unwrap() > 0.0, "{}", r[0]);
}

#[tokio::test]
async fn watchers_miss_nothing_on_one_server_and_on_two() {
    let etcd = Etcd::start().await;
    let a = ApiServer::start(&etcd).await;
    let b = ApiServer::start(&etcd).await;
    for servers in [vec![&a], vec![&a, &b]] {
        let (ok, r) = loadtest(
            &servers,
            &[
                "watch",
                "--watchers",
                "20",
                "--writers",
                "2",
                "--rate",
                "100",
            ],
        );
        assert!(ok);
        assert_clean(&r[0]);
        assert!(r[0]["events_expected"].as_u64().unwrap() > 50, "{}", r[0]);
    }
}

#[tokio::test]
async fn the_etcd_ceiling_is_measured_and_tabled() {
    let etcd = Etcd::start().await;
    let out = Command::new(bin("keel-loadtest"))
        .args([
            "--json",
            "--duration",
            "1s",
            "etcd",
            "--etcd-servers",
            &etcd.endpoint,
            "--writers",
            "4",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let modes: Vec<String> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["mode"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(modes, ["etcd-put", "etcd-floor", "etcd-cas"]);
    for l in stdout.lines() {
        let r: Value = serde_json::from_str(l).unwrap();
        assert!(r["ok"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["errors"], 0, "{r}");
        if r["mode"] == "etcd-floor" {
            // Each writer's own key, on the revision its last write returned: never stale.
            assert_eq!(r["conflicts"], 0, "{r}");
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.jsonl");
    std::fs::write(&file, &stdout).unwrap();
    let table = Command::new(bin("keel-loadtest"))
        .arg("table")
        .arg(&file)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.starts_with("| mode |"), "{table}");
    assert_eq!(table.lines().count(), 5, "{table}");
}

/// `fill` makes every object, of the size asked, over the namespaces asked; run again, it
/// leaves them and says they were there. `patch --protocol both` runs gRPC then REST writers
/// and `watch --protocol rest` REST watchers, each losing and missing nothing.
#[tokio::test]
async fn fill_makes_every_object_once_and_rest_runs_lose_nothing() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let fill = [
        "--namespace",
        "filled",
        "fill",
        "--objects",
        "300",
        "--object-bytes",
        "1000",
        "--namespaces",
        "3",
        "--writers",
        "8",
    ];
    let (ok, r) = loadtest(&[&api], &fill);
    assert!(ok, "{r:?}");
    assert_eq!(
        (r[0]["ok"].as_u64(), r[0]["existing"].as_u64()),
        (Some(300), Some(0))
    );
    let client = api.client().await;
    let mut total = 0;
    for k in 0..3 {
        let list = client
            .list(
                &keel_client::gvr("", "v1", "configmaps"),
                &format!("filled-{k}"),
                &Default::default(),
            )
            .await
            .unwrap();
        assert_eq!(list.items.len(), 100);
        for o in &list.items {
            let size = o.to_string().len();
            assert!(
                (1000..1400).contains(&size),
                "{size}: metadata added to a 1000-byte object"
            );
        }
        total += list.items.len();
    }
    assert_eq!(total, 300);
    let (ok, r) = loadtest(&[&api], &fill);
    assert!(ok, "{r:?}");
    assert_eq!(
        (r[0]["ok"].as_u64(), r[0]["existing"].as_u64()),
        (Some(0), Some(300))
    );

    let (ok, r) = loadtest(&[&api], &["patch", "--writers", "8", "--protocol", "both"]);
    assert!(ok);
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0]["protocol"].as_str(), r[1]["protocol"].as_str()),
        (Some("grpc"), Some("rest"))
    );
    r.iter().for_each(assert_clean);
    let (ok, r) = loadtest(
        &[&api],
        &[
            "watch",
            "--watchers",
            "8",
            "--writers",
            "2",
            "--rate",
            "50",
            "--protocol",
            "rest",
        ],
    );
    assert!(ok);
    assert_eq!(r[0]["protocol"], "rest");
    assert_clean(&r[0]);
}

/// `patch --patch-type apply`: each writer applies its own field as its own manager, over gRPC
/// and then REST, and loses nothing; each ends up owning exactly its field.
#[tokio::test]
async fn apply_writers_lose_nothing_and_each_owns_its_field() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let (ok, r) = loadtest(
        &[&api],
        &[
            "patch",
            "--writers",
            "8",
            "--objects",
            "2",
            "--patch-type",
            "apply",
            "--protocol",
            "both",
        ],
    );
    assert!(ok, "{r:?}");
    assert_eq!(r.len(), 2);
    for (result, protocol) in r.iter().zip(["grpc", "rest"]) {
        assert_clean(result);
        assert_eq!(
            (result["patch_type"].as_str(), result["protocol"].as_str()),
            (Some("apply"), Some(protocol))
        );
    }
    let cm = api
        .client()
        .await
        .get(
            &keel_client::gvr("", "v1", "configmaps"),
            "loadtest",
            "load-0",
        )
        .await
        .unwrap();
    // Entries of one second are in managers' order, of different seconds in time order.
    let mut appliers: Vec<(String, Value)> = cm["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["operation"] == "Apply")
        .map(|e| {
            (
                e["manager"].as_str().unwrap().to_string(),
                e["fieldsV1"].clone(),
            )
        })
        .collect();
    appliers.sort_by(|a, b| a.0.cmp(&b.0));
    let expected: Vec<(String, Value)> = [0, 2, 4, 6]
        .iter()
        .map(|w| {
            let fields = serde_json::json!({"f:data": {format!("f:w{w}"): {}}});
            (format!("writer-{w}"), fields)
        })
        .collect();
    assert_eq!(appliers, expected);
}
