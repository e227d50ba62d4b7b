//! Reads at a `resourceVersion` the store has not reached, and requests that leave the
//! namespace out: what Kubernetes' clients expect of them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use keel_api::Reason;
use keel_client::{Client, GroupVersionResource, ListParams, PatchType, WatchParams};
use keel_tests::{ApiServer, Etcd, eventually};
use serde_json::json;

fn configmaps() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "configmaps")
}

async fn created(c: &Client, name: &str) -> i64 {
    let o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}});
    let o = c.create(&configmaps(), "default", &o).await.unwrap();
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Kubernetes' error, naming the version asked for and the store's (at least `written`).
fn assert_too_large(e: &keel_api::ApiError, asked: i64, written: i64) {
    assert_eq!(e.reason, Reason::Timeout, "{e:?}");
    let current: i64 = e
        .message
        .strip_prefix(&format!(
            "Timeout: Too large resource version: {asked}, current: "
        ))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{e:?}"));
    assert!((written..asked).contains(&current), "{e:?}");
    assert_eq!(e.causes[0].reason, "ResourceVersionTooLarge");
    assert_eq!(e.retry_after_seconds, Some(1));
}

#[tokio::test]
async fn get_list_and_watch_at_a_version_never_written_time_out_as_too_large() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let current = created(&c, "a").await;
    let asked = current + 1000;
    let rv = asked.to_string();

    // Each waits 3 s for the version: all at once.
    let get = async { c.get_at(&configmaps(), "default", "a", &rv).await.err() };
    let list = |exact: &'static str| {
        let p = ListParams {
            resource_version: rv.clone(),
            resource_version_match: exact.into(),
            ..Default::default()
        };
        let c = &c;
        async move { c.list(&configmaps(), "default", &p).await.err() }
    };
    let watch = async {
        let p = WatchParams {
            namespace: "default".into(),
            resource_version: rv.clone(),
            ..Default::default()
        };
        match c.watch(&configmaps(), &p).await {
            Err(e) => Some(e),
            Ok(mut w) => w.next().await.expect("an error ends the watch").err(),
        }
    };
    let (get, any, not_older, exact, watch) =
        tokio::join!(get, list(""), list("NotOlderThan"), list("Exact"), watch);
    for e in [get, any, not_older, exact, watch] {
        assert_too_large(&e.expect("refused"), asked, current);
    }
}

#[tokio::test]
async fn a_get_at_the_next_version_waits_for_the_write_that_makes_it() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let current = created(&c, "a").await;
    let next = (current + 1).to_string();
    let reader = {
        let c = c.clone();
        tokio::spawn(async move { c.get_at(&configmaps(), "default", "a", &next).await })
    };
    // The read is waiting on the server before the write that makes its version is sent:
    // answered at once, it would show the object before that write.
    eventually(
        Duration::from_secs(2),
        "the read waits on the server",
        || {
            let m = api.metrics();
            async move {
                m.contains(
                    "keel_apiserver_current_inflight_requests{request_kind=\"readOnly\"} 1\n",
                )
                .then_some(())
            }
        },
    )
    .await;
    c.patch(
        &configmaps(),
        "default",
        "a",
        PatchType::Merge,
        &json!({"data": {"a": "2"}}),
    )
    .await
    .unwrap();
    let o = reader.await.unwrap().unwrap();
    assert_eq!(o["data"]["a"], "2");
    assert_eq!(o["metadata"]["resourceVersion"], (current + 1).to_string());
}

#[tokio::test]
async fn every_verb_on_one_object_reads_an_empty_namespace_as_default() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "n"}});
    let made = c.create(&configmaps(), "", &o).await.unwrap();
    assert_eq!(made["metadata"]["namespace"], "default");
    let got = c.get(&configmaps(), "", "n").await.unwrap();
    assert_eq!(got["metadata"]["uid"], made["metadata"]["uid"]);
    let patched = c
        .patch(
            &configmaps(),
            "",
            "n",
            PatchType::Merge,
            &json!({"data": {"b": "1"}}),
        )
        .await
        .unwrap();
    assert_eq!(patched["metadata"]["namespace"], "default");
    c.delete(&configmaps(), "", "n", &Default::default())
        .await
        .unwrap();
    assert_eq!(
        c.get(&configmaps(), "default", "n")
            .await
            .unwrap_err()
            .reason,
        Reason::NotFound
    );
    // A List or Watch with no namespace is still every namespace.
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}});
    c.create(&GroupVersionResource::new("", "v1", "namespaces"), "", &ns)
        .await
        .unwrap();
    let o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "elsewhere"}});
    c.create(&configmaps(), "other", &o).await.unwrap();
    let all = c
        .list(&configmaps(), "", &ListParams::default())
        .await
        .unwrap();
    assert!(
        all.items
            .iter()
            .any(|i| i["metadata"]["namespace"] == "other")
    );
}
