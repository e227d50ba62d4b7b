//! The controller runtime against a real etcd and the real API server: informers page, follow,
//! resume and relist; controllers never run one key twice at once.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use keel_client::{Client, DeleteParams, ListParams, PatchType, gvr};
use keel_runtime::{
    Action, Controller, EventHandler, InformerFactory, ObjectKey, Store, WatchOptions, WorkQueue,
    enqueue_handler,
};
use keel_tests::{ApiServer, Etcd, eventually};
use serde_json::{Value, json};

fn cms() -> keel_client::GroupVersionResource {
    gvr("", "v1", "configmaps")
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}})
}

fn name_of(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap().to_string()
}

fn rv_of(o: &Value) -> String {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A handler call: (kind, name, resourceVersion of the object handed over).
type Told = (&'static str, String, String);

/// Every handler call.
#[derive(Clone, Default)]
struct Recorder {
    events: Arc<Mutex<Vec<Told>>>,
}

impl Recorder {
    fn push(&self, kind: &'static str, o: &Value) {
        self.events
            .lock()
            .unwrap()
            .push((kind, name_of(o), rv_of(o)));
    }

    fn all(&self) -> Vec<Told> {
        self.events.lock().unwrap().clone()
    }

    fn of(&self, kind: &str) -> Vec<(String, String)> {
        self.all()
            .into_iter()
            .filter(|e| e.0 == kind)
            .map(|e| (e.1, e.2))
            .collect()
    }

    fn clear(&self) {
        self.events.lock().unwrap().clear();
    }

    /// Waits until a handler was told `kind` of `name` (at `rv`, if given).
    async fn wait_for(&self, kind: &'static str, name: &str, rv: Option<&str>) {
        eventually(
            Duration::from_secs(20),
            &format!("{kind} of {name} at {rv:?}"),
            || {
                let seen = self
                    .of(kind)
                    .iter()
                    .any(|(n, r)| n == name && rv.is_none_or(|rv| rv == r));
                async move { seen.then_some(()) }
            },
        )
        .await;
    }
}

impl EventHandler for Recorder {
    fn on_add(&self, obj: &Arc<Value>) {
        self.push("add", obj);
    }

    fn on_update(&self, old: &Arc<Value>, new: &Arc<Value>) {
        assert_eq!(name_of(old), name_of(new));
        self.push("update", new);
    }

    fn on_delete(&self, obj: &Arc<Value>) {
        self.push("delete", obj);
    }
}

async fn create_many(c: &Client, names: Vec<String>) {
    futures::stream::iter(names)
        .map(|n| {
            let c = c.clone();
            async move { c.create(&cms(), "default", &cm(&n)).await.unwrap() }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

async fn set_data(c: &Client, name: &str, i: usize) -> Value {
    c.patch(
        &cms(),
        "default",
        name,
        PatchType::Merge,
        &json!({"data": {"i": i.to_string()}}),
    )
    .await
    .unwrap()
}

/// name → resourceVersion of what the server holds.
async fn server_state(c: &Client) -> HashMap<String, String> {
    c.list_all(&cms(), "default", &ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| (name_of(o), rv_of(o)))
        .collect()
}

fn store_state(s: &Store) -> HashMap<String, String> {
    s.list().iter().map(|o| (name_of(o), rv_of(o))).collect()
}

/// A metric of the API server, summed over the label sets whose line starts with `prefix`.
fn metric(api: &ApiServer, prefix: &str) -> f64 {
    api.metrics()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn synced(factory: &InformerFactory) {
    tokio::time::timeout(Duration::from_secs(60), factory.wait_for_cache_sync())
        .await
        .expect("the informers synced");
}

#[tokio::test]
async fn an_informer_pages_through_a_large_list_then_sees_each_change_once() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let names: Vec<String> = (0..1203).map(|i| format!("cm-{i:04}")).collect();
    create_many(&c, names.clone()).await;

    let lists_before = metric(&api, "keel_apiserver_requests_total{verb=\"list\"");
    let factory = InformerFactory::new(c.clone());
    let options = WatchOptions::default().namespace("default");
    let informer = factory.informer_with(&cms(), options.clone());
    let rec = Recorder::default();
    informer.add_handler(rec.clone());
    factory.start();
    // Asked again after the start: the same informer, not a second watch.
    let again = factory.informer_with(&cms(), options);
    synced(&factory).await;

    assert_eq!(informer.store().len(), 1203);
    assert_eq!(again.store().len(), 1203, "one shared cache");
    let mut added: Vec<String> = rec.of("add").into_iter().map(|(n, _)| n).collect();
    added.sort();
    assert_eq!(added, names, "each listed object was added once");
    let lists = metric(&api, "keel_apiserver_requests_total{verb=\"list\"") - lists_before;
    assert_eq!(lists, 3.0, "1203 objects in pages of 500");

    // Each change is awaited before the next: changes of one key that arrive together are
    // merged by design, and this test counts them one by one.
    rec.clear();
    let created = c.create(&cms(), "default", &cm("new")).await.unwrap();
    rec.wait_for("add", "new", Some(&rv_of(&created))).await;
    let v1 = set_data(&c, "cm-0000", 1).await;
    rec.wait_for("update", "cm-0000", Some(&rv_of(&v1))).await;
    let v2 = set_data(&c, "cm-0000", 2).await;
    rec.wait_for("update", "cm-0000", Some(&rv_of(&v2))).await;
    // Changes nothing: no write, no event, no update.
    let same = set_data(&c, "cm-0000", 2).await;
    assert_eq!(rv_of(&same), rv_of(&v2));
    c.delete(&cms(), "default", "cm-0001", &DeleteParams::default())
        .await
        .unwrap();
    rec.wait_for("delete", "cm-0001", None).await;
    // A last change, so that everything before it has arrived once it has.
    let fence = set_data(&c, "cm-1202", 9).await;
    rec.wait_for("update", "cm-1202", Some(&rv_of(&fence)))
        .await;
    let events = rec.all();
    assert_eq!(
        events.len(),
        5,
        "each change once, nothing else: {events:?}"
    );
    let watches = metric(&api, "keel_apiserver_watches{");
    assert_eq!(
        watches, 1.0,
        "one watch however often the informer is asked for"
    );
    assert_eq!(store_state(&informer.store()), server_state(&c).await);
    factory.shut_down();
}

#[tokio::test]
async fn a_relist_after_expired_loses_nothing_and_deletes_what_vanished() {
    let etcd = Etcd::start().await;
    let mut api = ApiServer::start(&etcd).await;
    let writer = ApiServer::start(&etcd).await;
    let w = writer.client().await;
    create_many(&w, (0..10).map(|i| format!("r-{i}")).collect()).await;

    let factory = InformerFactory::new(api.client().await);
    let informer = factory.informer_with(&cms(), WatchOptions::default().namespace("default"));
    let rec = Recorder::default();
    informer.add_handler(rec.clone());
    factory.start();
    synced(&factory).await;
    let known = store_state(&informer.store());
    rec.clear();

    // While the informer's server is down: deletes, updates, creates; then the history the
    // informer would resume from is compacted away.
    api.kill9();
    for n in ["r-0", "r-1", "r-2"] {
        w.delete(&cms(), "default", n, &DeleteParams::default())
            .await
            .unwrap();
    }
    let r3 = set_data(&w, "r-3", 1).await;
    let r4 = set_data(&w, "r-4", 1).await;
    w.create(&cms(), "default", &cm("r-10")).await.unwrap();
    let last = w.create(&cms(), "default", &cm("r-11")).await.unwrap();
    let mut e = etcd.client().await;
    e.compact(rv_of(&last).parse::<i64>().unwrap(), None)
        .await
        .unwrap();
    api.restart().await;

    let want = server_state(&w).await;
    eventually(Duration::from_secs(60), "the informer to relist", || {
        let got = store_state(&informer.store());
        let done = got == want;
        async move { done.then_some(()) }
    })
    .await;
    let mut deleted = rec.of("delete");
    deleted.sort();
    let last_known = |n: &str| (n.to_string(), known[n].clone());
    assert_eq!(
        deleted,
        [last_known("r-0"), last_known("r-1"), last_known("r-2")],
        "deleted with their last known state: found missing by the relist, not told by a watch"
    );
    let mut updated = rec.of("update");
    updated.sort();
    assert_eq!(
        updated,
        [("r-3".into(), rv_of(&r3)), ("r-4".into(), rv_of(&r4))],
        "unchanged objects are not reported"
    );
    let mut added: Vec<String> = rec.of("add").into_iter().map(|(n, _)| n).collect();
    added.sort();
    assert_eq!(added, ["r-10", "r-11"]);
    factory.shut_down();
}

#[tokio::test]
async fn an_informer_resumes_after_its_server_is_killed_without_missing_or_repeating() {
    let etcd = Etcd::start().await;
    let mut api = ApiServer::start(&etcd).await;
    let writer = ApiServer::start(&etcd).await;
    let w = writer.client().await;
    create_many(&w, (0..5).map(|i| format!("k-{i}")).collect()).await;

    let factory = InformerFactory::new(api.client().await);
    let informer = factory.informer_with(&cms(), WatchOptions::default().namespace("default"));
    let rec = Recorder::default();
    informer.add_handler(rec.clone());
    factory.start();
    synced(&factory).await;
    let known = store_state(&informer.store());
    rec.clear();

    api.kill9();
    let added = w.create(&cms(), "default", &cm("k-new")).await.unwrap();
    let updated = set_data(&w, "k-0", 1).await;
    w.delete(&cms(), "default", "k-1", &DeleteParams::default())
        .await
        .unwrap();
    api.restart().await;
    let after = w.create(&cms(), "default", &cm("k-after")).await.unwrap();

    eventually(Duration::from_secs(60), "the informer to catch up", || {
        let seen = rec.of("add").contains(&("k-after".into(), rv_of(&after)));
        async move { seen.then_some(()) }
    })
    .await;
    let events = rec.all();
    assert_eq!(events.len(), 4, "each change once: {events:?}");
    assert_eq!(events[0], ("add", "k-new".into(), rv_of(&added)));
    assert_eq!(events[1], ("update", "k-0".into(), rv_of(&updated)));
    let (kind, name, rv) = &events[2];
    assert_eq!((*kind, name.as_str()), ("delete", "k-1"));
    assert!(
        rv.parse::<i64>().unwrap() > known["k-1"].parse::<i64>().unwrap(),
        "told by the resumed watch (at the deletion's revision), not by a relist"
    );
    assert_eq!(store_state(&informer.store()), server_state(&w).await);
    factory.shut_down();
}

#[tokio::test]
async fn a_controller_reconciles_each_change_and_never_one_key_twice_at_once() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let keys: Vec<String> = (0..6).map(|i| format!("ctl-{i}")).collect();
    for k in &keys {
        let mut o = cm(k);
        o["metadata"]["labels"] = json!({"app": "ctl"});
        c.create(&cms(), "default", &o).await.unwrap();
    }
    c.create(&cms(), "default", &cm("unlabelled"))
        .await
        .unwrap();

    let factory = InformerFactory::new(c.clone());
    let informer = factory.informer_with(
        &cms(),
        WatchOptions::default()
            .namespace("default")
            .labels("app=ctl"),
    );
    let queue: WorkQueue<ObjectKey> = WorkQueue::default_controller_queue();
    informer.add_handler(enqueue_handler(queue.clone()));
    factory.start();

    let store = informer.store();
    let in_flight: Arc<Mutex<HashSet<ObjectKey>>> = Arc::default();
    let overlaps = Arc::new(AtomicUsize::new(0));
    let reconciles = Arc::new(AtomicUsize::new(0));
    let last_seen: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let reconcile = {
        let (in_flight, overlaps, reconciles, last_seen) = (
            in_flight.clone(),
            overlaps.clone(),
            reconciles.clone(),
            last_seen.clone(),
        );
        move |key: ObjectKey| {
            let (store, in_flight, overlaps, reconciles, last_seen) = (
                store.clone(),
                in_flight.clone(),
                overlaps.clone(),
                reconciles.clone(),
                last_seen.clone(),
            );
            async move {
                if !in_flight.lock().unwrap().insert(key.clone()) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
                if let Some(o) = store.get(&key) {
                    let i = o["data"]["i"].as_str().unwrap_or("").to_string();
                    last_seen.lock().unwrap().insert(key.name.clone(), i);
                }
                reconciles.fetch_add(1, Ordering::SeqCst);
                in_flight.lock().unwrap().remove(&key);
                Ok::<_, String>(Action::await_change())
            }
        }
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(Controller::new("configmaps", queue).workers(4).run(
        reconcile,
        async move {
            let _ = stopped.await;
        },
    ));

    // Bursts of changes to every key while workers are busy with them.
    futures::future::join_all(keys.iter().map(|k| {
        let c = c.clone();
        async move {
            for i in 1..=20 {
                set_data(&c, k, i).await;
            }
        }
    }))
    .await;
    eventually(
        Duration::from_secs(30),
        "every key reconciled at its last state",
        || {
            let seen = last_seen.lock().unwrap().clone();
            let done = keys
                .iter()
                .all(|k| seen.get(k).map(String::as_str) == Some("20"));
            async move { done.then_some(()) }
        },
    )
    .await;
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), controller)
        .await
        .expect("the controller drained and stopped")
        .unwrap();
    factory.shut_down();

    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a key was reconciled twice at once"
    );
    assert!(!last_seen.lock().unwrap().contains_key("unlabelled"));
    let n = reconciles.load(Ordering::SeqCst);
    // 6 keys × (1 add + 20 changes) at most; deduplication makes it fewer.
    assert!((6..=6 * 21).contains(&n), "{n} reconciles");
}
