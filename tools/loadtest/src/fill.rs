//! `fill`: N ConfigMaps of about B bytes of JSON each, spread over K namespaces, created by W
//! concurrent writers, with a progress line; reports objects/s. What every scale measurement
//! starts from (issue 20). Objects that already exist are left as they are and counted apart,
//! so that a fill interrupted can be run again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use keel_client::{Client, Reason, gvr};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::Common;
use crate::report::{self, Counters, Summary};

/// The namespaces of a fill: the `--namespace` itself for one, else `<namespace>-0` ...
pub fn namespace(common: &Common, namespaces: usize, i: usize) -> String {
    if namespaces <= 1 {
        common.namespace.clone()
    } else {
        format!("{}-{}", common.namespace, i % namespaces)
    }
}

/// Object `i`: `fill-<i>`, its `data.v` padded so that the whole JSON is about `bytes` long.
fn object(i: usize, bytes: usize) -> Value {
    let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": format!("fill-{i}")}, "data": {"v": ""}});
    let bare = o.to_string().len();
    o["data"]["v"] = Value::String("x".repeat(bytes.saturating_sub(bare)));
    o
}

/// Creates the objects; the summary's `ok` counts those created, `existing` those that were
/// there already.
pub async fn run(
    common: &Common,
    clients: &[Client],
    objects: usize,
    object_bytes: usize,
    namespaces: usize,
    writers: usize,
) -> Result<Summary, keel_client::ApiError> {
    let namespaces = namespaces.max(1);
    for k in 0..namespaces {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": namespace(common, namespaces, k)}});
        match clients[0]
            .create(&gvr("", "v1", "namespaces"), "", &ns)
            .await
        {
            Ok(_) => {}
            Err(e) if e.reason == Reason::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    let counters = Arc::new(Counters::new(common, "fill"));
    let next = Arc::new(AtomicUsize::new(0));
    let existing = Arc::new(AtomicU64::new(0));
    let progress = progress(counters.clone(), existing.clone(), objects as u64);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers.max(1) {
        let c = clients[w % clients.len()].clone();
        let (common, counters, next, existing) = (
            common.clone(),
            counters.clone(),
            next.clone(),
            existing.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut latency = report::histogram();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= objects {
                    break;
                }
                let ns = namespace(&common, namespaces, i);
                let (t, sent) = (Instant::now(), SystemTime::now());
                match c
                    .create(&gvr("", "v1", "configmaps"), &ns, &object(i, object_bytes))
                    .await
                {
                    Ok(_) => {
                        report::record(&mut latency, t.elapsed());
                        counters.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) if e.reason == Reason::AlreadyExists => {
                        existing.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        counters.api_error(w, sent, &e);
                        // A failing server is not hammered; the object is not tried again.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            latency
        }));
    }
    let mut latency = report::histogram();
    for t in tasks {
        if let Ok(h) = t.await {
            let _ = latency.add(&h);
        }
    }
    let elapsed = start.elapsed();
    progress.abort();
    report::clear_progress();
    let attempts = objects as u64;
    Ok(Summary {
        existing: existing.load(Ordering::Relaxed),
        writers,
        objects,
        servers: common.connect.server.len(),
        tls: common.connect.tls(),
        protocol: "grpc".into(),
        ..Summary::measured("fill", &counters, elapsed, attempts, &latency)
    })
}

/// A progress line every second: objects done of the total, rate, errors.
fn progress(
    counters: Arc<Counters>,
    existing: Arc<AtomicU64>,
    total: u64,
) -> tokio::task::JoinHandle<()> {
    report::progress_with(move |elapsed| {
        let made = counters.ok.load(Ordering::Relaxed);
        let done = made + existing.load(Ordering::Relaxed);
        let errors = counters.errors.load(Ordering::Relaxed);
        format!(
            "[{:>4}s] fill: {done}/{total} objects ({:.0}%, {:.0} created/s), {errors} errors",
            elapsed.as_secs(),
            100.0 * (done + errors) as f64 / total.max(1) as f64,
            made as f64 / elapsed.as_secs_f64().max(0.001),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_about_the_size_asked() {
        for bytes in [230, 1000, 10_000] {
            let len = object(12345, bytes).to_string().len();
            assert!(len.abs_diff(bytes) <= 2, "{bytes}: {len}");
        }
        // Smaller than the bare object: the bare object.
        assert!(object(1, 10).to_string().len() < 100);
    }
}
