//! The error reasons of a server under pressure: TooManyRequests when a hot object's PATCH
//! queue is full, Timeout when etcd does not answer within the request's deadline.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use keel_client::{ClientConfig, PatchType, Reason, gvr};
use keel_tests::{ApiServer, Etcd, Frozen};
use serde_json::json;

#[tokio::test]
async fn a_full_patch_queue_is_too_many_requests_and_a_silent_etcd_is_a_timeout() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--max-queued-patches", "1"]).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    c.create(
        &cms,
        "default",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "q"}}),
    )
    .await
    .unwrap();
    // The object is in the watch cache, so PATCHes queue and then wait on etcd's CAS.
    keel_tests::eventually(
        Duration::from_secs(5),
        "the cache to hold the object",
        || {
            let c = c.clone();
            let cms = cms.clone();
            async move { c.get_at(&cms, "default", "q", "0").await.ok() }
        },
    )
    .await;

    let short = keel_client::Client::connect(
        &ClientConfig::new([api.endpoint()]).timeout(Duration::from_millis(1500)),
    )
    .await
    .unwrap();
    let frozen = Frozen::new(etcd.pid());
    // One PATCH is in flight with the queue's leader, at most one more may wait: of three,
    // at least one is refused.
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (c, cms) = (short.clone(), cms.clone());
        tasks.push(tokio::spawn(async move {
            c.patch(
                &cms,
                "default",
                "q",
                PatchType::Merge,
                &json!({"data": {"k": i.to_string()}}),
            )
            .await
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut reasons = Vec::new();
    for t in tasks {
        reasons.push(t.await.unwrap().unwrap_err());
    }
    let too_many: Vec<_> = reasons
        .iter()
        .filter(|e| e.reason == Reason::TooManyRequests)
        .collect();
    assert!(!too_many.is_empty(), "{reasons:?}");
    assert_eq!(
        keel_wire::code(too_many[0].reason),
        tonic::Code::ResourceExhausted
    );
    assert_eq!(
        (
            too_many[0].target.kind.as_str(),
            too_many[0].target.name.as_str()
        ),
        ("configmaps", "q")
    );
    assert!(
        reasons
            .iter()
            .filter(|e| e.reason != Reason::TooManyRequests)
            .all(|e| e.reason == Reason::Timeout),
        "{reasons:?}"
    );

    // A plain read against the frozen etcd: Timeout (DEADLINE_EXCEEDED).
    let e = short.get(&cms, "default", "q").await.unwrap_err();
    assert_eq!(
        (e.reason, keel_wire::code(e.reason)),
        (Reason::Timeout, tonic::Code::DeadlineExceeded),
        "{e:?}"
    );
    drop(frozen);

    // Thawed: the server serves again.
    keel_tests::eventually(Duration::from_secs(20), "writes to work again", || {
        let (c, cms) = (c.clone(), cms.clone());
        async move {
            c.patch(
                &cms,
                "default",
                "q",
                PatchType::Merge,
                &json!({"data": {"k": "after"}}),
            )
            .await
            .ok()
        }
    })
    .await;
}
