//! Limits and audit (issue 16): past the in-flight and watch limits requests get
//! TooManyRequests with a retry-after hint while reads from the cache go on; a user over its
//! request rate is throttled while another user's requests keep going (their latency is
//! measured and printed); keel-client waits as the hint says; every request is an audit line.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use keel_client::{Client, ClientConfig, PatchType, Reason, WatchParams, gvr};
use keel_tests::{ApiServer, Etcd, Frozen, eventually, http_get};
use keel_wire::proto::{PatchRequest, ResourceRef};
use serde_json::json;
use tokio::time::Instant;

const TOKENS: &str = "\
admin-token,admin,1,system:masters
flood-token,flood,2,dev
calm-token,calm,3,dev
";

fn configmap(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

async fn client(api: &ApiServer, token: Option<&str>, timeout: Duration) -> Client {
    let mut config = ClientConfig::new([api.endpoint()]).timeout(timeout);
    config.token = token.map(str::to_string);
    Client::connect(&config).await.unwrap()
}

#[tokio::test]
async fn past_the_in_flight_and_watch_limits_requests_are_told_to_retry() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(
        &etcd,
        &[
            "--max-mutating-requests-inflight",
            "2",
            "--max-watches",
            "2",
        ],
    )
    .await;
    let c = client(&api, None, Duration::from_secs(20)).await;
    let short = client(&api, None, Duration::from_millis(500)).await;
    let cms = gvr("", "v1", "configmaps");
    c.create(&cms, "default", &configmap("hot")).await.unwrap();

    // Two watches open; a third is refused until one closes.
    let params = WatchParams {
        namespace: "default".into(),
        ..Default::default()
    };
    let first = c.watch_raw(&cms, &params).await.unwrap();
    let _second = c.watch_raw(&cms, &params).await.unwrap();
    let e = short.watch_raw(&cms, &params).await.err().unwrap();
    assert_eq!(e.reason, Reason::TooManyRequests, "{e}");
    assert_eq!(e.message, "too many watches open, please try again later");
    assert_eq!(e.retry_after_seconds, Some(1));
    drop(first);
    // keel-client waits as told and opens it once there is room.
    let _third = c.watch_raw(&cms, &params).await.unwrap();

    // Two PATCHes hang in flight on a frozen etcd; a third is refused at once.
    eventually(Duration::from_secs(5), "the cache to hold hot", || {
        let (c, cms) = (c.clone(), cms.clone());
        async move { c.get_at(&cms, "default", "hot", "0").await.ok() }
    })
    .await;
    let frozen = Frozen::new(etcd.pid());
    let hanging: Vec<_> = (0..2)
        .map(|i| {
            let (c, cms) = (c.clone(), cms.clone());
            tokio::spawn(async move {
                let p = json!({"data": {"k": i.to_string()}});
                c.patch(&cms, "default", "hot", PatchType::Merge, &p).await
            })
        })
        .collect();
    // Both in flight (else a third could take a place before them).
    eventually(Duration::from_secs(5), "two PATCHes in flight", || async {
        let (_, metrics) = http_get(api.http, "/metrics").unwrap();
        metrics
            .contains("keel_apiserver_current_inflight_requests{request_kind=\"mutating\"} 2\n")
            .then_some(())
    })
    .await;
    let refused = eventually(Duration::from_secs(5), "a third PATCH refused", || {
        let (short, cms) = (short.clone(), cms.clone());
        async move {
            let p = json!({"data": {"k": "third"}});
            match short
                .patch(&cms, "default", "hot", PatchType::Merge, &p)
                .await
            {
                Err(e) if e.reason == Reason::TooManyRequests => Some(e),
                _ => None,
            }
        }
    })
    .await;
    assert_eq!(
        refused.message,
        "Too many requests, please try again later."
    );
    assert_eq!(refused.retry_after_seconds, Some(1));
    assert_eq!(
        keel_wire::code(refused.reason),
        tonic::Code::ResourceExhausted
    );
    // Reads have a limit of their own: the cache still answers.
    let hot = short.get_at(&cms, "default", "hot", "0").await.unwrap();
    assert_eq!(hot["metadata"]["name"], "hot");
    drop(frozen);
    for h in hanging {
        h.await.unwrap().unwrap();
    }
}

/// Percentiles of latencies, in ms: (p50, p99).
fn p50_p99(mut l: Vec<Duration>) -> (f64, f64) {
    l.sort();
    let at = |q: f64| l[((l.len() - 1) as f64 * q) as usize].as_secs_f64() * 1000.0;
    (at(0.5), at(0.99))
}

/// `calm`'s PATCH latencies: `n` sequential writes, 50 ms apart (20/s, under its rate of
/// 50/s; with a deadline too short to wait out a retry-after, so a TooManyRequests fails).
async fn calm_writes(calm: &Client, n: usize) -> Vec<Duration> {
    let cms = gvr("", "v1", "configmaps");
    let mut out = Vec::new();
    for i in 0..n {
        let t = Instant::now();
        let p = json!({"data": {"n": i.to_string()}});
        calm.patch(&cms, "default", "calm", PatchType::Merge, &p)
            .await
            .unwrap();
        out.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    out
}

#[tokio::test]
async fn a_flooding_user_is_throttled_while_another_keeps_going() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(
        &etcd,
        &[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--authorization-mode",
            "AlwaysAllow",
            "--user-qps",
            "50",
            "--user-burst",
            "50",
        ],
    )
    .await;
    let cms = gvr("", "v1", "configmaps");
    let admin = client(&api, Some("admin-token"), Duration::from_secs(10)).await;
    for name in ["calm", "flood"] {
        admin
            .create(&cms, "default", &configmap(name))
            .await
            .unwrap();
    }
    let calm = client(&api, Some("calm-token"), Duration::from_millis(900)).await;
    let before = calm_writes(&calm, 30).await;

    // 16 writers as "flood", with a deadline too short to wait out a retry-after: they see
    // the TooManyRequests themselves.
    let flood = client(&api, Some("flood-token"), Duration::from_millis(500)).await;
    let stop = Instant::now() + Duration::from_secs(3);
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let (flood, cms) = (flood.clone(), cms.clone());
            tokio::spawn(async move {
                let (mut ok, mut throttled) = (0u32, Vec::new());
                while Instant::now() < stop {
                    let p = json!({"data": {format!("w{w}"): ok.to_string()}});
                    match flood
                        .patch(&cms, "default", "flood", PatchType::Merge, &p)
                        .await
                    {
                        Ok(_) => ok += 1,
                        Err(e) if e.reason == Reason::TooManyRequests => throttled.push(e),
                        // An admitted write may miss the short deadline on a busy machine.
                        Err(e) if e.reason == Reason::Timeout => {}
                        Err(e) => panic!("flood: {e}"),
                    }
                }
                (ok, throttled)
            })
        })
        .collect();
    let during = calm_writes(&calm, 30).await;
    let (mut ok, mut throttled) = (0, Vec::new());
    for w in writers {
        let (o, t) = w.await.unwrap();
        ok += o;
        throttled.extend(t);
    }
    assert!(
        !throttled.is_empty(),
        "flood was never throttled ({ok} writes)"
    );
    let e = &throttled[0];
    assert_eq!(
        e.message,
        "the user \"flood\" is over its request rate (50 per second); please try again later"
    );
    assert_eq!(e.retry_after_seconds, Some(1));
    let ((b50, b99), (d50, d99)) = (p50_p99(before), p50_p99(during));
    println!(
        "calm's PATCH latency: p50 {b50:.2} ms, p99 {b99:.2} ms alone; p50 {d50:.2} ms, \
         p99 {d99:.2} ms while flood ({ok} writes accepted, {} refused) is throttled",
        throttled.len()
    );

    // A client that may wait does as the server says: no error, only slower.
    let patient = client(&api, Some("flood-token"), Duration::from_secs(30)).await;
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (patient, cms) = (patient.clone(), cms.clone());
            tokio::spawn(async move {
                for i in 0..50 {
                    let p = json!({"data": {format!("p{w}"): i.to_string()}});
                    patient
                        .patch(&cms, "default", "flood", PatchType::Merge, &p)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    // system:masters is exempt: 300 writes at once, none told to wait (the deadline is too
    // short to wait out a retry-after).
    let admin = client(&api, Some("admin-token"), Duration::from_millis(900)).await;
    for i in 0..300 {
        let p = json!({"data": {"admin": i.to_string()}});
        admin
            .patch(&cms, "default", "flood", PatchType::Merge, &p)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn every_request_is_an_audit_line() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let audit = dir.path().join("audit.log");
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(
        &etcd,
        &[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--audit-log-path",
            audit.to_str().unwrap(),
        ],
    )
    .await;
    let cms = gvr("", "v1", "configmaps");
    let admin = client(&api, Some("admin-token"), Duration::from_secs(10)).await;
    let calm = client(&api, Some("calm-token"), Duration::from_secs(10)).await;
    admin
        .create(&cms, "default", &configmap("audited"))
        .await
        .unwrap();
    let e = calm.get(&cms, "default", "audited").await.unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden);
    admin.get(&cms, "default", "missing").await.unwrap_err();
    // A PATCH whose client goes away while etcd is frozen: the server drops it, and says so.
    let frozen = Frozen::new(etcd.pid());
    {
        let mut req = tonic::Request::new(PatchRequest {
            resource: Some(ResourceRef {
                group: String::new(),
                version: "v1".into(),
                resource: "configmaps".into(),
            }),
            namespace: "default".into(),
            name: "audited".into(),
            subresource: String::new(),
            patch_type: keel_client::PatchType::Merge as i32,
            patch: br#"{"data":{"k":"abandoned"}}"#.to_vec(),
            ..Default::default()
        });
        req.metadata_mut()
            .insert("authorization", "Bearer admin-token".parse().unwrap());
        let mut raw = admin.raw();
        let gone = tokio::time::timeout(Duration::from_millis(300), raw.patch(req)).await;
        assert!(
            gone.is_err(),
            "the PATCH was answered with etcd frozen: {gone:?}"
        );
    }
    // Read while etcd is still frozen: the server learns the client went away while the
    // PATCH still waits on etcd (thawed first, etcd's answer could race the stream's reset).
    let lines = eventually(Duration::from_secs(5), "four audit lines", || {
        let audit = audit.clone();
        async move {
            let text = std::fs::read_to_string(&audit).unwrap_or_default();
            let lines: Vec<serde_json::Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .filter(|l: &serde_json::Value| l["resource"] == "configmaps")
                .collect();
            (lines.len() >= 4).then_some(lines)
        }
    })
    .await;
    drop(frozen);
    let fields = |l: &serde_json::Value| {
        (
            l["user"].as_str().unwrap().to_string(),
            l["verb"].as_str().unwrap().to_string(),
            l["namespace"].as_str().unwrap().to_string(),
            l["name"].as_str().unwrap().to_string(),
            l["code"].as_u64().unwrap(),
        )
    };
    let got: Vec<_> = lines.iter().map(fields).collect();
    let want = [
        ("admin", "create", "default", "audited", 201),
        ("calm", "get", "default", "audited", 403),
        ("admin", "get", "default", "missing", 404),
        ("admin", "patch", "default", "audited", 499),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|(u, v, ns, n, c)| {
            (
                u.to_string(),
                v.to_string(),
                ns.to_string(),
                n.to_string(),
                *c,
            )
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(lines[1]["groups"], json!(["dev", "system:authenticated"]));
    assert_eq!(lines[1]["reason"], "Forbidden");
    assert!(lines[0]["latencyMs"].as_f64().unwrap() > 0.0);
    assert!(lines[0]["time"].as_str().unwrap().ends_with('Z'));
}
