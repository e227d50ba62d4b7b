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
    assert_eq!(modes, ["etcd-put", "etcd-cas"]);

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
    assert_eq!(table.lines().count(), 4, "{table}");
}
