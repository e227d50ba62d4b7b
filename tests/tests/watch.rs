//! Watch: ordered, complete, resumable; across replicas, restarts and compaction.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use keel_client::{
    Client, Event, EventType, ListParams, Metadata, PatchType, Reason, WatchParams, gvr,
};
use keel_tests::proxy::Proxy;
use keel_tests::{ApiServer, Etcd};
use serde_json::{Value, json};

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}})
}

fn rv_of(o: &Value) -> i64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Reads events until `n` non-bookmark events have arrived (panics after 20 s).
async fn take_events(
    s: &mut (impl futures::Stream<Item = Result<Event, keel_client::ApiError>> + Unpin),
    n: usize,
) -> Vec<Event> {
    let mut out = Vec::new();
    while out.len() < n {
        let ev = tokio::time::timeout(Duration::from_secs(20), s.next())
            .await
            .unwrap_or_else(|_| panic!("only {} of {n} events arrived", out.len()))
            .expect("stream ended")
            .expect("watch error");
        if ev.kind != EventType::Bookmark {
            out.push(ev);
        }
    }
    out
}

async fn write_n(c: &Client, name: &str, n: usize) -> Vec<i64> {
    let cms = gvr("", "v1", "configmaps");
    let mut rvs = Vec::new();
    for i in 0..n {
        let o = c
            .patch(
                &cms,
                "default",
                name,
                PatchType::Merge,
                &json!({"data": {"i": i.to_string()}}),
            )
            .await
            .unwrap();
        rvs.push(rv_of(&o));
    }
    rvs
}

#[tokio::test]
async fn watch_from_a_revision_yields_exactly_the_later_events_in_order() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let created = c.create(&cms, "default", &cm("w")).await.unwrap();
    let rvs = write_n(&c, "w", 1000).await;
    let from = rvs[499];
    let p = WatchParams {
        namespace: "default".into(),
        resource_version: from.to_string(),
        ..Default::default()
    };
    let mut s = c.watch(&cms, &p).await.unwrap();
    let evs = take_events(&mut s, 500).await;
    let got: Vec<i64> = evs
        .iter()
        .map(|e| e.resource_version().parse().unwrap())
        .collect();
    assert_eq!(got, rvs[500..].to_vec());
    assert!(evs.iter().all(|e| e.kind == EventType::Modified));
    assert_eq!(evs.last().unwrap().object["data"]["i"], "999");
    // Nothing more, nothing repeated.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), s.next())
            .await
            .is_err()
    );

    // From the creation: every one of the 1000 modifications.
    let p = WatchParams {
        resource_version: rv_of(&created).to_string(),
        ..Default::default()
    };
    let mut s = c.watch(&cms, &p).await.unwrap();
    let got: Vec<i64> = take_events(&mut s, 1000)
        .await
        .iter()
        .map(|e| e.resource_version().parse().unwrap())
        .collect();
    assert_eq!(got, rvs);
}

#[tokio::test]
async fn watch_without_a_revision_starts_with_the_current_state() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    for n in ["a", "b"] {
        c.create(&cms, "default", &cm(n)).await.unwrap();
    }
    let mut s = c
        .watch(
            &cms,
            &WatchParams {
                namespace: "default".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let evs = take_events(&mut s, 2).await;
    assert!(evs.iter().all(|e| e.kind == EventType::Added));
    assert_eq!(
        evs.iter().map(|e| e.name().to_string()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    c.delete(&cms, "default", "a", &Default::default())
        .await
        .unwrap();
    let evs = take_events(&mut s, 1).await;
    assert_eq!((evs[0].kind, evs[0].name()), (EventType::Deleted, "a"));
}

#[tokio::test]
async fn selector_transitions_become_added_and_deleted() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let o = c.create(&cms, "default", &cm("s")).await.unwrap();
    let p = WatchParams {
        label_selector: "app=web".into(),
        resource_version: rv_of(&o).to_string(),
        ..Default::default()
    };
    let mut s = c.watch(&cms, &p).await.unwrap();
    let label = |v: Value| json!({"metadata": {"labels": {"app": v}}});
    c.patch(&cms, "default", "s", PatchType::Merge, &label(json!("web")))
        .await
        .unwrap();
    c.patch(
        &cms,
        "default",
        "s",
        PatchType::Merge,
        &json!({"data": {"x": "1"}}),
    )
    .await
    .unwrap();
    c.patch(&cms, "default", "s", PatchType::Merge, &label(json!("db")))
        .await
        .unwrap();
    c.patch(
        &cms,
        "default",
        "s",
        PatchType::Merge,
        &json!({"data": {"x": "2"}}),
    )
    .await
    .unwrap();
    let evs = take_events(&mut s, 3).await;
    let kinds: Vec<EventType> = evs.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [EventType::Added, EventType::Modified, EventType::Deleted]
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), s.next())
            .await
            .is_err(),
        "no event for a non-matching object"
    );
}

#[tokio::test]
async fn bookmarks_come_on_request() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--watch-bookmark-interval", "200ms"]).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let o = c.create(&cms, "default", &cm("b")).await.unwrap();
    // Writes to another resource move the revision; a bookmark must report it.
    let other = c
        .create(
            &gvr("", "v1", "events"),
            "default",
            &json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}}),
        )
        .await
        .unwrap();
    let p = WatchParams {
        resource_version: rv_of(&o).to_string(),
        allow_bookmarks: true,
        ..Default::default()
    };
    let mut s = c.watch(&cms, &p).await.unwrap();
    let bm = loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .expect("a bookmark")
            .unwrap()
            .unwrap();
        if ev.kind == EventType::Bookmark
            && ev.resource_version().parse::<i64>().unwrap() >= rv_of(&other)
        {
            break ev;
        }
    };
    assert_eq!(bm.object["kind"], "ConfigMap");
    let p = WatchParams {
        resource_version: rv_of(&o).to_string(),
        ..Default::default()
    };
    let mut s = c.watch(&cms, &p).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(1), s.next())
            .await
            .is_err(),
        "no bookmark unless asked"
    );
}

#[tokio::test]
async fn a_write_through_one_replica_is_seen_by_a_watch_on_another() {
    let etcd = Etcd::start().await;
    let a = ApiServer::start(&etcd).await;
    let b = ApiServer::start(&etcd).await;
    let (ca, cb) = (a.client().await, b.client().await);
    let cms = gvr("", "v1", "configmaps");
    let list = cb
        .list(&cms, "default", &ListParams::default())
        .await
        .unwrap();
    let p = WatchParams {
        resource_version: list.resource_version.clone(),
        ..Default::default()
    };
    let mut s = cb.watch(&cms, &p).await.unwrap();
    let created = ca.create(&cms, "default", &cm("x")).await.unwrap();
    let evs = take_events(&mut s, 1).await;
    assert_eq!(evs[0].kind, EventType::Added);
    assert_eq!(evs[0].object, created);
}

#[tokio::test]
async fn a_client_resumes_after_kill_9_and_misses_nothing() {
    let etcd = Etcd::start().await;
    let mut api = ApiServer::start(&etcd).await;
    let writer_api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let w = writer_api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let created = w.create(&cms, "default", &cm("k")).await.unwrap();
    let p = WatchParams {
        resource_version: rv_of(&created).to_string(),
        ..Default::default()
    };
    let mut s = c.watch(&cms, &p).await.unwrap();
    let rvs = write_n(&w, "k", 100).await;
    let seen = take_events(&mut s, 100).await;
    let last: i64 = seen.last().unwrap().resource_version().parse().unwrap();

    api.kill9();
    // The stream breaks; writes go on through the other replica while this one is down.
    let more = write_n(&w, "k", 50).await;
    api.restart().await;
    let p = WatchParams {
        resource_version: last.to_string(),
        ..Default::default()
    };
    let mut s = api.client().await.watch(&cms, &p).await.unwrap();
    let after = write_n(&w, "k", 10).await;
    let got: Vec<i64> = take_events(&mut s, 60)
        .await
        .iter()
        .map(|e| e.resource_version().parse().unwrap())
        .collect();
    let want: Vec<i64> = more.into_iter().chain(after).collect();
    assert_eq!(got, want);
    assert_eq!(last, *rvs.last().unwrap());
}

/// The API server's own etcd watch breaks (a partition between it and etcd) while writes go on
/// through another replica: when it resumes, the watch cache catches up on every event it
/// missed, so its clients see each one, in order, once.
#[tokio::test]
async fn a_watch_cache_cut_off_from_etcd_catches_up_on_every_event() {
    let etcd = Etcd::start().await;
    let upstream = etcd.endpoint.trim_start_matches("http://").parse().unwrap();
    let proxy = Proxy::start(upstream);
    let api = ApiServer::start_at(&proxy.endpoint(), &[]).await;
    let writer_api = ApiServer::start(&etcd).await;
    let (c, w) = (api.client().await, writer_api.client().await);
    let cms = gvr("", "v1", "configmaps");
    let created = w.create(&cms, "default", &cm("p")).await.unwrap();
    let p = WatchParams {
        resource_version: rv_of(&created).to_string(),
        ..Default::default()
    };
    let mut s = c.watch(&cms, &p).await.unwrap();
    let before = write_n(&w, "p", 5).await;
    let seen = take_events(&mut s, 5).await;
    assert_eq!(
        seen.iter()
            .map(|e| e.resource_version().parse().unwrap())
            .collect::<Vec<i64>>(),
        before
    );

    proxy.cut();
    let during = write_n(&w, "p", 200).await;
    proxy.restore();
    let after = write_n(&w, "p", 5).await;
    let got: Vec<i64> = take_events(&mut s, 205)
        .await
        .iter()
        .map(|e| e.resource_version().parse().unwrap())
        .collect();
    let want: Vec<i64> = during.into_iter().chain(after).collect();
    assert_eq!(got, want);
}

#[tokio::test]
async fn compacted_revisions_are_expired() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--watch-cache-size", "20"]).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let created = c.create(&cms, "default", &cm("c")).await.unwrap();
    for n in 0..5 {
        c.create(&cms, "default", &cm(&format!("page-{n}")))
            .await
            .unwrap();
    }
    let first = c
        .list(
            &cms,
            "default",
            &ListParams {
                limit: 2,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let rvs = write_n(&c, "c", 50).await;
    let mut e = etcd.client().await;
    e.compact(*rvs.last().unwrap(), None).await.unwrap();

    // Older than the cache window and compacted in etcd: Expired.
    let p = WatchParams {
        resource_version: rv_of(&created).to_string(),
        ..Default::default()
    };
    let err = match c.watch(&cms, &p).await {
        Err(e) => e,
        Ok(mut s) => s
            .next()
            .await
            .expect("an error")
            .expect_err("an error, not an event"),
    };
    assert_eq!(err.reason, Reason::Expired, "{err:?}");

    // A continue token read at a compacted revision: Expired.
    let p = ListParams {
        limit: 2,
        continue_token: first.continue_token,
        ..Default::default()
    };
    let err = c.list(&cms, "default", &p).await.unwrap_err();
    assert_eq!(err.reason, Reason::Expired, "{err:?}");

    // Still within the cache window: served.
    let p = WatchParams {
        resource_version: rvs[40].to_string(),
        ..Default::default()
    };
    let mut s = c.watch(&cms, &p).await.unwrap();
    assert_eq!(take_events(&mut s, 9).await.len(), 9);
}

#[tokio::test]
async fn the_server_compacts_history_periodically() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(
        &etcd,
        &["--compaction-interval", "300ms", "--watch-cache-size", "16"],
    )
    .await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let created = c.create(&cms, "default", &cm("p")).await.unwrap();
    write_n(&c, "p", 40).await;
    let mut e = etcd.client().await;
    let old = rv_of(&created);
    keel_tests::eventually(
        Duration::from_secs(10),
        "etcd to compact past the create",
        || {
            let mut e = e.clone();
            async move {
                let r = e
                    .get("x", Some(etcd_client::GetOptions::new().with_revision(old)))
                    .await;
                r.is_err().then_some(())
            }
        },
    )
    .await;
    let _ = &mut e;
}

#[tokio::test]
async fn a_watcher_that_does_not_read_is_closed_not_buffered_without_bound() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--watch-cache-size", "16"]).await;
    let c = api.client().await;
    let cms = gvr("", "v1", "configmaps");
    let created = c.create(&cms, "default", &cm("slow")).await.unwrap();
    let p = WatchParams {
        resource_version: rv_of(&created).to_string(),
        ..Default::default()
    };
    let mut s = c.watch(&cms, &p).await.unwrap();
    // Big events fill the transport's windows quickly; the watcher then falls behind.
    let blob = "z".repeat(16 * 1024);
    // Writes on their own connection: the unread watch holds its HTTP/2 windows.
    let w = api.client().await;
    let writer = tokio::spawn(async move {
        let cms = gvr("", "v1", "configmaps");
        let mut rvs = Vec::new();
        for i in 0..400 {
            let p = json!({"data": {"blob": blob, "i": i.to_string()}});
            rvs.push(rv_of(
                &w.patch(&cms, "default", "slow", PatchType::Merge, &p)
                    .await
                    .unwrap(),
            ));
        }
        rvs
    });
    let rvs = writer.await.unwrap();
    // Now read: a gap-free prefix of the events, then Expired.
    let mut got = Vec::new();
    let err = loop {
        match tokio::time::timeout(Duration::from_secs(20), s.next())
            .await
            .expect("stream stalled")
        {
            Some(Ok(ev)) => got.push(ev.resource_version().parse::<i64>().unwrap()),
            Some(Err(e)) => break e,
            None => panic!("stream ended without an error after {} events", got.len()),
        }
    };
    assert_eq!(err.reason, Reason::Expired, "{err:?}");
    assert!(
        got.len() < rvs.len(),
        "the watcher was closed before the end"
    );
    assert_eq!(
        got,
        rvs[..got.len()].to_vec(),
        "what arrived is in order with no gap"
    );
}

#[tokio::test]
async fn a_kinds_own_fields_select_in_lists_and_watches() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let events = gvr("", "v1", "events");
    let event = |name: &str, about: &str, kind: &str| {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": about},
            "reason": "Pulled", "type": kind, "message": "m"})
    };
    let first = c
        .create(&events, "default", &event("a.1", "web-a", "Normal"))
        .await
        .unwrap();
    c.create(&events, "default", &event("b.1", "web-b", "Normal"))
        .await
        .unwrap();
    c.create(&events, "default", &event("a.2", "web-a", "Warning"))
        .await
        .unwrap();
    // What `kubectl describe pod web-a` asks for.
    let about_a = ListParams {
        field_selector: "involvedObject.name=web-a,involvedObject.namespace=default".into(),
        ..Default::default()
    };
    let list = c.list(&events, "default", &about_a).await.unwrap();
    let names: Vec<&str> = list
        .items
        .iter()
        .map(|e| e["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a.1", "a.2"]);
    let warnings = ListParams {
        field_selector: "type!=Normal".into(),
        ..Default::default()
    };
    assert_eq!(c.list(&events, "", &warnings).await.unwrap().items.len(), 1);

    // A watch from the first write: the cache's objects are selected by the same fields, and
    // an object that comes to match is ADDED.
    let p = WatchParams {
        field_selector: "involvedObject.name=web-b,type=Warning".into(),
        resource_version: rv_of(&first).to_string(),
        ..Default::default()
    };
    let mut s = c.watch(&events, &p).await.unwrap();
    c.patch(
        &events,
        "default",
        "b.1",
        PatchType::Merge,
        &json!({"type": "Warning"}),
    )
    .await
    .unwrap();
    let evs = take_events(&mut s, 1).await;
    assert_eq!(evs[0].kind, EventType::Added);
    assert_eq!(evs[0].object["metadata"]["name"], "b.1");

    // Another kind's field is refused, naming it.
    let e = c
        .list(
            &gvr("", "v1", "configmaps"),
            "default",
            &ListParams {
                field_selector: "involvedObject.name=web-a".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);
    assert!(
        e.message
            .contains("field label not supported: involvedObject.name"),
        "{}",
        e.message
    );
}
