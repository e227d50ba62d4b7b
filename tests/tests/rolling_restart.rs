//! A rolling restart of the API servers is invisible to keel-client: SIGTERM makes a server
//! unready, refuse new connections, send GOAWAY, end its watches and answer what is in flight;
//! the client sends what was never processed to the other replica and resumes its watches
//! there from their last resourceVersion.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use keel_client::{Client, ClientConfig, EventType, PatchType, WatchParams, gvr};
use keel_tests::{ApiServer, Etcd, Signal, eventually, http_get, signal};
use serde_json::{Value, json};

const NAMESPACE: &str = "rolling";
const CONFIGMAPS: usize = 4;
const WRITERS: usize = 16;
const WATCHERS: usize = 5;
/// Acknowledged writes to wait for between the steps of the restart: traffic flows again.
const PROGRESS: u64 = 200;

fn rv_of(o: &Value) -> i64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {o}"))
}

fn field(w: usize) -> String {
    format!("w{w}")
}

fn configmap_of(w: usize) -> String {
    format!("cm-{}", w % CONFIGMAPS)
}

/// What one writer did: the last value of its field the server acknowledged, the revision of
/// every acknowledged PATCH, and every error it was given.
#[derive(Default)]
struct Writes {
    last: Option<u64>,
    revisions: Vec<i64>,
    errors: Vec<String>,
}

/// PATCHes (merge) its own field of its ConfigMap with 0, 1, 2, ... until `stop`.
async fn writer(c: Client, w: usize, stop: Arc<AtomicBool>, acked: Arc<AtomicU64>) -> Writes {
    let cms = gvr("", "v1", "configmaps");
    let mut out = Writes::default();
    let mut i: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let patch = json!({"data": {field(w): i.to_string()}});
        match c
            .patch(&cms, NAMESPACE, &configmap_of(w), PatchType::Merge, &patch)
            .await
        {
            Ok(o) => {
                out.last = Some(i);
                out.revisions.push(rv_of(&o));
                acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => out.errors.push(format!("PATCH {i}: {e:?}")),
        }
        i += 1;
    }
    out
}

/// What one watcher received: (kind, revision) of every event, and every error.
#[derive(Default)]
struct Seen {
    events: Vec<(EventType, i64)>,
    errors: Vec<String>,
}

/// A resumable watch of the namespace's ConfigMaps from `from`, recording into `seen`.
async fn watcher(c: Client, from: i64, seen: Arc<Mutex<Seen>>) {
    let p = WatchParams {
        namespace: NAMESPACE.into(),
        resource_version: from.to_string(),
        allow_bookmarks: true,
        ..Default::default()
    };
    let mut events = c.watch_resumable(&gvr("", "v1", "configmaps"), &p);
    while let Some(item) = events.next().await {
        let mut seen = seen.lock().unwrap();
        match item {
            Ok(ev) => seen.events.push((ev.kind, rv_of(&ev.object))),
            // Expired is how a resumable watch asks for a relist: a failure here.
            Err(e) => seen.errors.push(format!("{e:?}")),
        }
    }
}

fn sum_metric(s: &ApiServer, prefix: &str) -> f64 {
    s.metrics()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until `PROGRESS` more writes are acknowledged.
async fn writes_go_on(acked: &AtomicU64, what: &str) {
    let from = acked.load(Ordering::Relaxed);
    eventually(Duration::from_secs(30), what, || async move {
        (acked.load(Ordering::Relaxed) >= from + PROGRESS).then_some(())
    })
    .await;
}

/// SIGTERM, wait for the exit; the server must have drained within its grace.
fn terminate_gracefully(s: &mut ApiServer, name: &str) {
    let status = tokio::task::block_in_place(|| s.terminate());
    assert!(status.success(), "{name} exited with {status}: {}", s.log());
    assert!(
        !s.log()
            .contains("requests still running after the shutdown grace"),
        "{name} did not drain within its grace: {}",
        s.log()
    );
}

/// Waits until the restarted server serves client traffic again.
async fn serves_again(s: &ApiServer, name: &str) {
    eventually(
        Duration::from_secs(30),
        &format!("{name} to serve PATCHes again"),
        || async move {
            (sum_metric(s, "keel_apiserver_requests_total{verb=\"patch\"") > 0.0).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_under_load_shows_no_client_errors_and_no_watch_relist() {
    let etcd = Etcd::start().await;
    let mut a = ApiServer::start(&etcd).await;
    let mut b = ApiServer::start(&etcd).await;
    let c = Client::connect(
        &ClientConfig::new([a.endpoint(), b.endpoint()]).timeout(Duration::from_secs(10)),
    )
    .await
    .unwrap();
    let cms = gvr("", "v1", "configmaps");
    c.create(
        &gvr("", "v1", "namespaces"),
        "",
        &json!({"metadata": {"name": NAMESPACE}}),
    )
    .await
    .unwrap();
    let mut from = 0;
    for i in 0..CONFIGMAPS {
        let o = c
            .create(
                &cms,
                NAMESPACE,
                &json!({"metadata": {"name": format!("cm-{i}")}, "data": {}}),
            )
            .await
            .unwrap();
        from = rv_of(&o);
    }

    let seen: Vec<Arc<Mutex<Seen>>> = (0..WATCHERS).map(|_| Arc::default()).collect();
    let watchers: Vec<_> = seen
        .iter()
        .map(|s| tokio::spawn(watcher(c.clone(), from, s.clone())))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(writer(c.clone(), w, stop.clone(), acked.clone())))
        .collect();

    writes_go_on(&acked, "writes before the restart").await;
    terminate_gracefully(&mut a, "server A");
    writes_go_on(&acked, "writes while server A is down").await;
    a.restart().await;
    serves_again(&a, "server A").await;
    writes_go_on(&acked, "writes after server A is back").await;
    terminate_gracefully(&mut b, "server B");
    writes_go_on(&acked, "writes while server B is down").await;
    b.restart().await;
    serves_again(&b, "server B").await;
    writes_go_on(&acked, "writes after server B is back").await;
    stop.store(true, Ordering::Relaxed);

    let mut acknowledged = BTreeSet::new();
    let mut last = Vec::new();
    for (w, h) in writers.into_iter().enumerate() {
        let writes = h.await.unwrap();
        assert!(
            writes.errors.is_empty(),
            "writer {w} was given errors: {:?}",
            writes.errors
        );
        acknowledged.extend(writes.revisions);
        last.push(writes.last);
    }
    // Every acknowledged PATCH is in the objects: each field holds its writer's last value.
    for (w, last) in last.iter().enumerate() {
        let o = c.get(&cms, NAMESPACE, &configmap_of(w)).await.unwrap();
        let want = last
            .expect("every writer had PATCHes acknowledged")
            .to_string();
        assert_eq!(o["data"][field(w)], json!(want), "writer {w}'s field");
    }

    // Each watcher saw exactly the acknowledged writes, each once, in order, and never had
    // to relist.
    let newest = *acknowledged.last().unwrap();
    for (i, s) in seen.iter().enumerate() {
        eventually(
            Duration::from_secs(30),
            &format!("watcher {i} to reach revision {newest}"),
            || async move {
                let s = s.lock().unwrap();
                s.events
                    .iter()
                    .any(|&(kind, rv)| kind != EventType::Bookmark && rv >= newest)
                    .then_some(())
            },
        )
        .await;
    }
    // Every watch lives on, on the replicas as they are now.
    eventually(
        Duration::from_secs(10),
        "every watch to be open on the restarted replicas",
        || async {
            let open = |s| sum_metric(s, "keel_apiserver_watches{resource=\"configmaps\"}");
            (open(&a) + open(&b) == WATCHERS as f64).then_some(())
        },
    )
    .await;
    for h in &watchers {
        h.abort();
    }
    for (i, s) in seen.iter().enumerate() {
        let s = s.lock().unwrap();
        assert!(
            s.errors.is_empty(),
            "watcher {i} was given errors: {:?}",
            s.errors
        );
        let changes: Vec<i64> = s
            .events
            .iter()
            .filter(|(kind, _)| *kind != EventType::Bookmark)
            .map(|&(kind, rv)| {
                assert_eq!(
                    kind,
                    EventType::Modified,
                    "watcher {i}: only PATCHes happened"
                );
                rv
            })
            .collect();
        assert!(
            changes.windows(2).all(|w| w[0] < w[1]),
            "watcher {i}: events repeated or out of order"
        );
        let got: BTreeSet<i64> = changes.into_iter().collect();
        let missed: Vec<_> = acknowledged.difference(&got).collect();
        let unknown: Vec<_> = got.difference(&acknowledged).collect();
        assert!(
            missed.is_empty() && unknown.is_empty(),
            "watcher {i}: missed {missed:?}, unacknowledged {unknown:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_turns_readyz_unready_first_and_serves_on_through_the_shutdown_delay() {
    let etcd = Etcd::start().await;
    let mut a = ApiServer::start_with(&etcd, &["--shutdown-delay", "5s"]).await;
    let cms = gvr("", "v1", "configmaps");
    let c = a.client().await;
    c.create(
        &cms,
        "default",
        &json!({"metadata": {"name": "still-served"}, "data": {}}),
    )
    .await
    .unwrap();

    signal(a.pid().unwrap(), Signal::TERM);
    let http = a.http;
    eventually(
        Duration::from_secs(2),
        "/readyz to answer 503",
        || async move { (http_get(http, "/readyz").ok()?.0 == 503).then_some(()) },
    )
    .await;
    // Unready, yet serving: requests on the open connection and on new ones.
    c.get(&cms, "default", "still-served").await.unwrap();
    let fresh = a.client().await;
    fresh.get(&cms, "default", "still-served").await.unwrap();

    // After the delay the process drains and exits by itself.
    eventually(
        Duration::from_secs(20),
        "the server to exit",
        || async move { http_get(http, "/healthz").is_err().then_some(()) },
    )
    .await;
    let status = tokio::task::block_in_place(|| a.terminate());
    assert!(status.success(), "exited with {status}: {}", a.log());
}
