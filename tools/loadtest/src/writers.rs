//! `patch` and `replace`: writers that each own one field of one ConfigMap and write an
//! increasing counter into it, by PATCH (server-side apply included) or by read-modify-write
//! Update.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use keel_client::{ApplyParams, Client, GroupVersionResource, PatchType, Reason, gvr};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::report::{self, Counters, Summary};
use crate::rest::RestClient;
use crate::verify::{self, WriterRecord};
use crate::{Common, scrape};

/// How a writer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Patch(PatchType),
    Replace,
}

fn configmaps() -> GroupVersionResource {
    gvr("", "v1", "configmaps")
}

pub fn object_name(i: usize) -> String {
    format!("load-{i}")
}

/// What the writers write through: keel's gRPC client, or Kubernetes' REST dialect
/// (`--protocol rest`, PATCH only).
#[derive(Clone)]
pub enum Caller {
    Grpc(Client),
    Rest(Arc<RestClient>),
}

/// Creates the namespace (if missing) and fresh, empty objects.
pub async fn prepare(
    client: &Client,
    ns: &str,
    objects: usize,
) -> Result<(), keel_client::ApiError> {
    let nsobj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    match client
        .create(&gvr("", "v1", "namespaces"), "", &nsobj)
        .await
    {
        Ok(_) => {}
        Err(e) if e.reason == Reason::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    for i in 0..objects {
        let name = object_name(i);
        match client
            .delete(&configmaps(), ns, &name, &Default::default())
            .await
        {
            Ok(_) => {}
            Err(e) if e.reason == Reason::NotFound => {}
            Err(e) => return Err(e),
        }
        let o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}});
        client.create(&configmaps(), ns, &o).await?;
    }
    Ok(())
}

struct WriterResult {
    record: WriterRecord,
    latency: hdrhistogram::Histogram<u64>,
    attempts: u64,
    first_error: Option<String>,
}

fn value(n: u64, pad: &str) -> String {
    if pad.is_empty() {
        n.to_string()
    } else {
        format!("{n}:{pad}")
    }
}

/// One writer: where it writes, and as which field manager when it applies.
struct Writer {
    ns: String,
    object: String,
    field: String,
    /// `writer-<i>`: each applier is its own manager, owning only its field.
    apply: ApplyParams,
}

async fn write_once(
    caller: &Caller,
    w: &Writer,
    val: &str,
    mode: Mode,
    counters: &Counters,
) -> Result<(), keel_client::ApiError> {
    let (ns, object, field) = (w.ns.as_str(), w.object.as_str(), w.field.as_str());
    let c = match caller {
        Caller::Grpc(c) => c,
        Caller::Rest(rest) => {
            let Mode::Patch(kind) = mode else {
                return Err(keel_client::ApiError::bad_request(
                    Default::default(),
                    "--protocol rest writes by PATCH only",
                ));
            };
            let body = patch_body(kind, object, field, val);
            return rest
                .patch_configmap(ns, object, kind, &body, &w.apply.field_manager)
                .await;
        }
    };
    match mode {
        // The answer is not read: what was written is checked at the end, from the object.
        Mode::Patch(kind) => {
            let body = patch_body(kind, object, field, val);
            c.patch_unread(&configmaps(), ns, object, kind, &body, &w.apply)
                .await
        }
        Mode::Replace => loop {
            let mut o: Value = c.get(&configmaps(), ns, object).await?;
            o["data"][field] = json!(val);
            match c.update(&configmaps(), ns, &o).await {
                Ok(_) => return Ok(()),
                Err(e) if e.reason == Reason::Conflict => {
                    counters.conflicts.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        },
    }
}

/// A writer's PATCH: its own field set to its value. An apply's is the writer's whole
/// configuration of the object: its identity and that one field.
fn patch_body(kind: PatchType, object: &str, field: &str, val: &str) -> Value {
    match kind {
        PatchType::Json => json!([{"op": "add", "path": format!("/data/{field}"), "value": val}]),
        PatchType::Apply => json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": object},
            "data": {field: val},
        }),
        _ => json!({"data": {field: val}}),
    }
}

/// Runs the writers for the duration, then checks every acknowledged write is in place.
/// `clients` prepare the objects and read them back; `callers` write (round-robin).
pub async fn run(
    common: &Common,
    clients: &[Client],
    callers: &[Caller],
    mode: Mode,
    writers: usize,
    objects: usize,
    payload: usize,
) -> Result<Summary, keel_client::ApiError> {
    let ns = common.namespace.clone();
    prepare(&clients[0], &ns, objects).await?;
    let before = scrape::scrape(&common.metrics_url);
    let label = match mode {
        Mode::Patch(_) => "patch",
        Mode::Replace => "replace",
    };
    let counters = Arc::new(Counters::new(common, label));
    let progress = report::progress(counters.clone(), common.duration, label);
    let start = Instant::now();
    let stop = start + common.duration;
    let pad = "x".repeat(payload);
    let mut tasks = Vec::new();
    for w in 0..writers {
        let c = callers[w % callers.len()].clone();
        let (ns, pad, counters) = (ns.clone(), pad.clone(), counters.clone());
        tasks.push(tokio::spawn(async move {
            let writer = Writer {
                ns,
                object: object_name(w % objects),
                field: format!("w{w}"),
                apply: ApplyParams::new(format!("writer-{w}")),
            };
            let mut r = WriterResult {
                record: WriterRecord {
                    object: writer.object.clone(),
                    field: writer.field.clone(),
                    last_acked: 0,
                    last_attempted: 0,
                },
                latency: report::histogram(),
                attempts: 0,
                first_error: None,
            };
            let mut n = 0;
            while Instant::now() < stop {
                n += 1;
                r.record.last_attempted = n;
                r.attempts += 1;
                let (t, sent) = (Instant::now(), SystemTime::now());
                match write_once(&c, &writer, &value(n, &pad), mode, &counters).await {
                    Ok(()) => {
                        report::record(&mut r.latency, t.elapsed());
                        r.record.last_acked = n;
                        counters.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        counters.api_error(w, sent, &e);
                        r.first_error.get_or_insert_with(|| e.to_string());
                        // Back off a little so a failing server is not hammered.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            r
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        if let Ok(r) = t.await {
            results.push(r);
        }
    }
    let elapsed = start.elapsed();
    progress.abort();
    report::clear_progress();
    let after = scrape::scrape(&common.metrics_url);

    // Read back every object and check every writer's last acknowledged value is there.
    let mut observed = HashMap::new();
    for i in 0..objects {
        let name = object_name(i);
        let o = clients[0].get(&configmaps(), &ns, &name).await?;
        if let Some(data) = o["data"].as_object() {
            for (k, v) in data {
                if let Some(n) = v.as_str().and_then(verify::parse_counter) {
                    observed.insert((name.clone(), k.clone()), n);
                }
            }
        }
    }
    let records: Vec<WriterRecord> = results.iter().map(|r| r.record.clone()).collect();
    let lost = verify::lost_updates(&records, &observed);
    let mut latency = report::histogram();
    for r in &results {
        let _ = latency.add(&r.latency);
    }
    let conflicts = counters.conflicts.load(Ordering::Relaxed);
    let attempts: u64 = results.iter().map(|r| r.attempts).sum::<u64>() + conflicts;
    let server = match (before, after) {
        (Some(b), Some(a)) => Some(a - b),
        _ => None,
    };
    Ok(Summary {
        writers,
        objects,
        patch_type: match mode {
            Mode::Patch(k) => format!("{k:?}").to_lowercase(),
            Mode::Replace => String::new(),
        },
        servers: common.connect.server.len(),
        protocol: match callers.first() {
            Some(Caller::Rest(_)) => "rest".into(),
            _ => "grpc".into(),
        },
        tls: common.connect.tls(),
        server_retries: server.map(|s| s.patch_retries),
        mean_batch: server
            .filter(|s| s.batch_count > 0.0)
            .map(|s| s.batch_sum / s.batch_count),
        lost_updates: lost.len(),
        lost,
        first_error: results.iter().find_map(|r| r.first_error.clone()),
        ..Summary::measured(label, &counters, elapsed, attempts, &latency)
    })
}
