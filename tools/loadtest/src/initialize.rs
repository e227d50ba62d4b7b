//! `initialize`: Pods created at a fixed rate while an initializer (keel-initializer, with an
//! InitializerConfiguration naming it for Pods) is running. Measures create sent → the Pod
//! visible and initialized, i.e. its `ADDED` event at an ordinary watcher, and checks every Pod
//! arrives, with the sidecar.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use keel_client::{Client, DeleteParams, EventType, ListParams, Reason, WatchParams, gvr};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::Common;
use crate::report::{self, Counters, Summary};

/// Creates in flight at most (bounded memory when the server falls behind the rate).
const MAX_IN_FLIGHT: usize = 256;
/// How long Pods created last may take to appear before they count as missed.
const DRAIN: Duration = Duration::from_secs(30);

/// The seeds' application Pod: one container, nothing of Envoy.
fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "keel-loadtest-initialize"}},
        "spec": {"containers": [{"name": "myapp-container", "image": "busybox",
            "command": ["sh", "-c", "echo Hello Kubernetes! && sleep 3600"]}]}
    })
}

fn has_sidecar(obj: &Value, sidecar: &str) -> bool {
    obj["spec"]["containers"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["name"] == sidecar))
}

pub async fn run(
    common: &Common,
    c: &Client,
    rate: u64,
    sidecar: &str,
) -> Result<Summary, keel_client::ApiError> {
    let ns = common.namespace.clone();
    let pods = gvr("", "v1", "pods");
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    match c.create(&gvr("", "v1", "namespaces"), "", &namespace).await {
        Err(e) if e.reason != Reason::AlreadyExists => return Err(e),
        _ => {}
    }
    let start_rv = c
        .list(
            &pods,
            &ns,
            &ListParams {
                limit: 1,
                ..Default::default()
            },
        )
        .await?
        .resource_version;

    // Sent creates (name → when), and when each Pod appeared to an ordinary watcher.
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen: Arc<Mutex<HashMap<String, (Instant, bool)>>> = Arc::default();
    let watcher = {
        let (c, ns, pods, seen, sidecar) = (
            c.clone(),
            ns.clone(),
            pods.clone(),
            seen.clone(),
            sidecar.to_string(),
        );
        let p = WatchParams {
            namespace: ns,
            resource_version: start_rv,
            ..Default::default()
        };
        let mut stream = c.watch(&pods, &p).await?;
        tokio::spawn(async move {
            while let Some(ev) = stream.next().await {
                let Ok(ev) = ev else { continue };
                if ev.kind != EventType::Added {
                    continue;
                }
                let name = ev.object["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let injected = has_sidecar(&ev.object, &sidecar);
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                seen.entry(name).or_insert((Instant::now(), injected));
            }
        })
    };

    let counters = Arc::new(Counters::new(common, "initialize"));
    let progress = report::progress(counters.clone(), common.duration, "pods created");
    let start = Instant::now();
    let stop_at = start + common.duration;
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let first_error: Arc<Mutex<Option<String>>> = Arc::default();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1) as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut creates = Vec::new();
    let mut n = 0u64;
    while Instant::now() < stop_at {
        tick.tick().await;
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        n += 1;
        let name = format!("init-{n}");
        let (c, ns, pods, sent, counters, first_error) = (
            c.clone(),
            ns.clone(),
            pods.clone(),
            sent.clone(),
            counters.clone(),
            first_error.clone(),
        );
        creates.push(tokio::spawn(async move {
            let _slot = slot;
            let sent_at = SystemTime::now();
            sent.lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(name.clone(), Instant::now());
            match c.create(&pods, &ns, &pod(&name)).await {
                Ok(_) => {
                    counters.ok.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    sent.lock().unwrap_or_else(|e| e.into_inner()).remove(&name);
                    counters.api_error(n as usize, sent_at, &e);
                    first_error
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_or_insert_with(|| e.to_string());
                }
            }
        }));
    }
    for t in creates {
        let _ = t.await;
    }
    let elapsed = start.elapsed();

    // Every created Pod should appear; wait a bounded time for the last ones.
    let created: HashMap<String, Instant> = sent.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let deadline = Instant::now() + DRAIN;
    loop {
        let all = {
            let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            created.keys().all(|k| seen.contains_key(k))
        };
        if all || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watcher.abort();
    progress.abort();
    report::clear_progress();

    let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut latency = report::histogram();
    let (mut missed, mut without_sidecar) = (0u64, 0u64);
    for (name, at) in &created {
        match seen.get(name) {
            Some((when, injected)) => {
                report::record(&mut latency, when.saturating_duration_since(*at));
                if !injected {
                    without_sidecar += 1;
                }
            }
            None => missed += 1,
        }
    }

    // Clean up, a bounded number of deletes at a time.
    let names: Vec<String> = created.keys().cloned().collect();
    let background = DeleteParams::default();
    for chunk in names.chunks(64) {
        let deletes = chunk
            .iter()
            .map(|name| c.delete(&pods, &common.namespace, name, &background));
        futures::future::join_all(deletes).await;
    }

    let attempts = counters.ok.load(Ordering::Relaxed) + counters.errors.load(Ordering::Relaxed);
    let first_error = first_error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    Ok(Summary {
        writers: 1,
        objects: created.len(),
        servers: common.connect.server.len(),
        tls: common.connect.tls(),
        events_expected: created.len() as u64,
        events_missed: missed,
        sidecars_missing: Some(without_sidecar),
        first_error,
        ..Summary::measured("initialize", &counters, elapsed, attempts, &latency)
    })
}
