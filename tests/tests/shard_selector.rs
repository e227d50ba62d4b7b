//! List and Watch narrowed to shards of a controller's keyspace (`keel_api::shard`), and Lists
//! at an exact revision: what a sharded controller-manager's informers rely on.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use keel_api::shard::shard_of;
use keel_client::{
    Client, EventType, ListParams, PatchType, Reason, ShardSelector, WatchParams, gvr,
};
use keel_tests::{ApiServer, Etcd};
use serde_json::{Value, json};

fn shards(count: u32, ids: &[u32], by_owner: bool) -> Option<ShardSelector> {
    Some(ShardSelector {
        count,
        ids: ids.to_vec(),
        by_owner,
    })
}

fn names(items: &[Value]) -> BTreeSet<String> {
    items
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

async fn create_cms(c: &Client, n: usize) -> Vec<String> {
    let cms = gvr("", "v1", "configmaps");
    let mut out = Vec::new();
    for i in 0..n {
        let name = format!("cm-{i}");
        let o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        c.create(&cms, "default", &o).await.unwrap();
        out.push(name);
    }
    out
}

#[tokio::test]
async fn a_list_of_some_shards_holds_exactly_their_objects_and_all_shards_hold_all() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let all = create_cms(&c, 40).await;
    let cms = gvr("", "v1", "configmaps");
    let mut union = BTreeSet::new();
    for ids in [[0, 1], [2, 3]] {
        let p = ListParams {
            shard: shards(4, &ids, false),
            ..Default::default()
        };
        let got = names(&c.list(&cms, "default", &p).await.unwrap().items);
        let want: BTreeSet<String> = all
            .iter()
            .filter(|n| ids.contains(&shard_of("default", n, 4)))
            .cloned()
            .collect();
        assert_eq!(got, want, "shards {ids:?}");
        assert!(!got.is_empty() && got.len() < all.len());
        union.extend(got);
    }
    assert_eq!(union, all.into_iter().collect());

    // The same from the watch cache (resourceVersion "0") and in pages.
    let from_cache = ListParams {
        shard: shards(4, &[0, 1], false),
        resource_version: "0".into(),
        ..Default::default()
    };
    let cached = names(&c.list(&cms, "default", &from_cache).await.unwrap().items);
    let from_etcd = ListParams {
        shard: shards(4, &[0, 1], false),
        ..Default::default()
    };
    assert_eq!(
        cached,
        names(&c.list(&cms, "default", &from_etcd).await.unwrap().items)
    );
    let p = ListParams {
        shard: shards(4, &[1], false),
        limit: 3,
        ..Default::default()
    };
    let first = c.list(&cms, "default", &p).await.unwrap();
    assert!(first.items.len() <= 3);
    assert!(first.items.iter().all(|o| shard_of(
        "default",
        o["metadata"]["name"].as_str().unwrap(),
        4
    ) == 1));
}

/// The next event of a watch (20 s at most).
async fn next(
    s: &mut (impl futures::Stream<Item = Result<keel_client::Event, keel_client::ApiError>> + Unpin),
) -> keel_client::Event {
    tokio::time::timeout(Duration::from_secs(20), s.next())
        .await
        .expect("an event")
        .expect("open")
        .expect("no error")
}

#[tokio::test]
async fn by_owner_an_object_follows_its_controller_and_a_watch_sees_it_move() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    // Two owner names in shards of 4 different from each other and from the dependent's own.
    let own = shard_of("default", "dependent", 4);
    let owners: Vec<String> = (0..40).map(|i| format!("rs-{i}")).collect();
    let a = owners
        .iter()
        .find(|o| shard_of("default", o, 4) != own)
        .unwrap()
        .clone();
    let b = owners
        .iter()
        .find(|o| ![own, shard_of("default", &a, 4)].contains(&shard_of("default", o, 4)))
        .unwrap()
        .clone();
    let (sa, sb) = (shard_of("default", &a, 4), shard_of("default", &b, 4));
    let owned = |owner: &str| {
        json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": owner, "uid": format!("uid-{owner}"), "controller": true}]}})
    };
    let o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dependent"}});
    let created = c.create(&cms, "default", &o).await.unwrap();
    c.patch(&cms, "default", "dependent", PatchType::Merge, &owned(&a))
        .await
        .unwrap();
    let in_shard = |s: u32| ListParams {
        shard: shards(4, &[s], true),
        ..Default::default()
    };
    let listed = c.list(&cms, "default", &in_shard(sa)).await.unwrap();
    assert_eq!(
        names(&listed.items),
        BTreeSet::from(["dependent".to_string()])
    );

    let watch = |s: u32| WatchParams {
        namespace: "default".into(),
        resource_version: created["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .into(),
        shard: shards(4, &[s], true),
        ..Default::default()
    };
    let mut wa = c.watch(&cms, &watch(sa)).await.unwrap();
    let mut wb = c.watch(&cms, &watch(sb)).await.unwrap();
    // Adopted by a: shard sa's watcher sees it arrive.
    let e = next(&mut wa).await;
    assert_eq!(e.kind, EventType::Added);
    // Its controller becomes b: it leaves sa's view and enters sb's.
    c.patch(&cms, "default", "dependent", PatchType::Merge, &owned(&b))
        .await
        .unwrap();
    let e = next(&mut wa).await;
    assert_eq!(e.kind, EventType::Deleted);
    let e = next(&mut wb).await;
    assert_eq!(e.kind, EventType::Added);
    assert_eq!(
        e.object["metadata"]["ownerReferences"][0]["name"],
        Value::String(b)
    );
}

#[tokio::test]
async fn an_exact_list_is_the_state_at_that_revision_and_bad_selectors_are_refused() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let o = |n: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}});
    let first = c.create(&cms, "default", &o("first")).await.unwrap();
    c.create(&cms, "default", &o("second")).await.unwrap();
    let at = |rv: &str, m: &str| ListParams {
        resource_version: rv.into(),
        resource_version_match: m.into(),
        ..Default::default()
    };
    let rv1 = first["metadata"]["resourceVersion"].as_str().unwrap();
    let then = c.list(&cms, "default", &at(rv1, "Exact")).await.unwrap();
    assert_eq!(names(&then.items), BTreeSet::from(["first".to_string()]));
    assert_eq!(then.resource_version, rv1);
    let now = c.list(&cms, "default", &at(rv1, "")).await.unwrap();
    assert_eq!(now.items.len(), 2, "not older than: the newest");

    for p in [
        at("0", "Exact"),
        at(rv1, "Sometimes"),
        ListParams {
            shard: shards(0, &[], false),
            ..Default::default()
        },
        ListParams {
            shard: shards(4, &[4], false),
            ..Default::default()
        },
    ] {
        let e = c.list(&cms, "default", &p).await.unwrap_err();
        assert_eq!(e.reason, Reason::BadRequest, "{p:?}: {e}");
    }
}

/// The field selectors Kubernetes serves beyond metadata, with its field labels (an Event's
/// `source`, a Job's `status.successful`) and its zero values (`spec.unschedulable=false` of a
/// Node that never set it), on List, on Watch and on a shard-filtered watch.
#[tokio::test]
async fn kubernetes_field_selectors_on_list_watch_and_shard_watches() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cases: Vec<(keel_client::GroupVersionResource, &str, Value, Value, &str)> = vec![
        (
            gvr("", "v1", "events"),
            "default",
            json!({"involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R",
                   "source": {"component": "kubelet"}}),
            json!({"involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R",
                   "source": {"component": "job-controller"}}),
            "source=kubelet",
        ),
        (
            gvr("", "v1", "secrets"),
            "default",
            json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}}),
            json!({"type": "Opaque"}),
            "type=kubernetes.io/tls",
        ),
        (
            gvr("", "v1", "nodes"),
            "",
            json!({"spec": {}}),
            json!({"spec": {"unschedulable": true}}),
            "spec.unschedulable=false",
        ),
        (
            gvr("batch", "v1", "jobs"),
            "default",
            json!({"spec": {"template": {"spec": {"restartPolicy": "Never",
                   "containers": [{"name": "c", "image": "i"}]}}}}),
            json!({"spec": {"template": {"spec": {"restartPolicy": "Never",
                   "containers": [{"name": "c", "image": "i"}]}}}}),
            "status.successful=0",
        ),
        (
            gvr("apps", "v1", "replicasets"),
            "default",
            json!({"spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}},
                   "template": {"metadata": {"labels": {"a": "b"}},
                                "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
            json!({"spec": {"replicas": 0, "selector": {"matchLabels": {"a": "b"}},
                   "template": {"metadata": {"labels": {"a": "b"}},
                                "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
            "status.replicas=0",
        ),
    ];
    for (g, ns, matching, other, selector) in cases {
        let kind = g.resource.clone();
        // A watch opened first sees the matching object arrive, and only it.
        let all = WatchParams {
            namespace: ns.into(),
            field_selector: selector.into(),
            ..WatchParams::default()
        };
        let sharded = WatchParams {
            shard: shards(1, &[0], false),
            ..all.clone()
        };
        let mut plain = c.watch(&g, &all).await.unwrap();
        let mut in_shard = c.watch(&g, &sharded).await.unwrap();
        let named = |mut body: Value, name: &str| {
            body["metadata"] = json!({"name": name});
            body
        };
        c.create(&g, ns, &named(matching, "yes")).await.unwrap();
        c.create(&g, ns, &named(other, "no")).await.unwrap();
        if kind == "jobs" || kind == "replicasets" {
            // The other one moves away from the zero value through its status.
            let field = if kind == "jobs" {
                "succeeded"
            } else {
                "replicas"
            };
            c.patch_subresource(
                &g,
                ns,
                "no",
                "status",
                PatchType::Merge,
                serde_json::to_vec(&json!({"status": {field: 2}})).unwrap(),
            )
            .await
            .unwrap();
        }
        let list = c
            .list(
                &g,
                ns,
                &ListParams {
                    field_selector: selector.into(),
                    ..ListParams::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(
            names(&list.items),
            BTreeSet::from(["yes".to_string()]),
            "{kind} {selector}"
        );
        // `no` of a Job or ReplicaSet matched until its status moved: it comes and goes.
        let moves = kind == "jobs" || kind == "replicasets";
        for stream in [&mut plain, &mut in_shard] {
            let mut seen = Vec::new();
            while seen.len() < if moves { 3 } else { 1 } {
                let ev = tokio::time::timeout(Duration::from_secs(10), stream.next())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
                seen.push((
                    ev.kind,
                    ev.object["metadata"]["name"].as_str().unwrap().to_string(),
                ));
            }
            let yes = (EventType::Added, "yes".to_string());
            if moves {
                let no = [
                    (EventType::Added, "no".to_string()),
                    (EventType::Deleted, "no".to_string()),
                ];
                assert!(
                    seen.contains(&yes) && no.iter().all(|e| seen.contains(e)),
                    "{kind}: {seen:?}"
                );
            } else {
                assert_eq!(seen, [yes], "{kind}");
            }
        }
        // A change that takes `yes` out of the selector is its DELETED.
        let (field_patch, sub) = match kind.as_str() {
            "events" => (json!({"source": {"component": "other"}}), ""),
            "secrets" => (json!({"metadata": {"labels": {"x": "y"}}}), ""),
            "nodes" => (json!({"spec": {"unschedulable": true}}), ""),
            "jobs" => (json!({"status": {"succeeded": 1}}), "status"),
            _ => (json!({"status": {"replicas": 1}}), "status"),
        };
        if kind == "secrets" {
            // A Secret's type cannot change: delete it instead.
            c.delete(&g, ns, "yes", &Default::default()).await.unwrap();
        } else {
            c.patch_subresource(
                &g,
                ns,
                "yes",
                sub,
                PatchType::Merge,
                serde_json::to_vec(&field_patch).unwrap(),
            )
            .await
            .unwrap();
        }
        for stream in [&mut plain, &mut in_shard] {
            let ev = tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            assert_eq!(ev.kind, EventType::Deleted, "{kind}");
            assert_eq!(ev.object["metadata"]["name"], "yes", "{kind}");
        }
    }
    // A label Kubernetes does not serve for the kind is refused, naming the supported ones.
    let err = c
        .list(
            &gvr("", "v1", "secrets"),
            "default",
            &ListParams {
                field_selector: "spec.unschedulable=true".into(),
                ..ListParams::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.reason, Reason::BadRequest);
    assert!(
        err.message
            .contains("field label not supported: spec.unschedulable"),
        "{}",
        err.message
    );
}
