//! `etcd`: the ceiling, straight to etcd with the same concurrency: plain puts to distinct keys;
//! the floor of keel's design (a compare-and-swap transaction per write on the writer's own key,
//! with no read, and one watcher on the prefix, as the API server writes and its watch cache
//! follows); and get-then-compare-and-swap on shared keys (what a read-modify-write costs).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use tokio::time::Instant;

use crate::Common;
use crate::causes;
use crate::report::{self, Counters, Summary};

/// Which ceiling to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Each writer puts to its own key.
    Put,
    /// Writers spread over `objects` keys: get, then put if the key's revision is unchanged.
    GetCas,
    /// Each writer compare-and-swaps its own key on the revision its last write returned (no
    /// read), while one watcher follows the prefix.
    Floor,
}

pub async fn run(
    common: &Common,
    endpoints: &[String],
    kind: Kind,
    writers: usize,
    objects: usize,
    payload: usize,
) -> Result<Summary, etcd_client::Error> {
    let client = Client::connect(endpoints, None).await?;
    let prefix = "/keel-loadtest/";
    let value = format!("{{\"data\":\"{}\"}}", "x".repeat(payload.max(16)));
    let label = match kind {
        Kind::Put => "etcd put",
        Kind::GetCas => "etcd get+CAS",
        Kind::Floor => "etcd CAS+watch",
    };
    // The floor's watcher: every event of the prefix, read and dropped, until the run ends.
    let watcher = if kind == Kind::Floor {
        let mut events = client
            .watch_client()
            .watch(
                format!("{prefix}floor/"),
                Some(etcd_client::WatchOptions::new().with_prefix()),
            )
            .await?;
        Some(tokio::spawn(async move {
            let mut n = 0u64;
            while let Ok(Some(r)) = events.message().await {
                n += r.events().len() as u64;
            }
            n
        }))
    } else {
        None
    };
    let counters = Arc::new(Counters::new(common, label));
    let progress = report::progress(counters.clone(), common.duration, label);
    let start = Instant::now();
    let stop = start + common.duration;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (mut kv, counters, value) = (client.kv_client(), counters.clone(), value.clone());
        let key = match kind {
            Kind::Put => format!("{prefix}put/{w}"),
            Kind::GetCas => format!("{prefix}cas/{}", w % objects.max(1)),
            Kind::Floor => format!("{prefix}floor/{w}"),
        };
        tasks.push(tokio::spawn(async move {
            let mut h = report::histogram();
            let mut attempts = 0u64;
            let mut first_error = None;
            // Floor: the revision of this writer's key after its last write (0: absent).
            let mut last = 0i64;
            while Instant::now() < stop {
                attempts += 1;
                let (t, sent) = (Instant::now(), SystemTime::now());
                let result = match kind {
                    Kind::Put => kv
                        .put(key.as_str(), value.as_str(), None)
                        .await
                        .map(|_| true),
                    Kind::GetCas => match kv.get(key.as_str(), None).await {
                        Ok(r) => {
                            let rev = r.kvs().first().map(|k| k.mod_revision()).unwrap_or(0);
                            let txn = Txn::new()
                                .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, rev)])
                                .and_then([TxnOp::put(key.as_str(), value.as_str(), None)]);
                            kv.txn(txn).await.map(|r| r.succeeded())
                        }
                        Err(e) => Err(e),
                    },
                    Kind::Floor => {
                        let txn = Txn::new()
                            .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, last)])
                            .and_then([TxnOp::put(key.as_str(), value.as_str(), None)]);
                        kv.txn(txn).await.map(|r| {
                            if r.succeeded() {
                                last = r.header().map_or(last, |h| h.revision());
                            }
                            r.succeeded()
                        })
                    }
                };
                match result {
                    Ok(true) => {
                        report::record(&mut h, t.elapsed());
                        counters.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => {
                        counters.conflicts.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        let message = e.to_string();
                        counters.error(w, sent, &causes::cause("etcd", &message), &message);
                        first_error.get_or_insert(message);
                    }
                }
            }
            (h, attempts, first_error)
        }));
    }
    let mut latency = report::histogram();
    let mut attempts = 0;
    let mut first_error = None;
    for t in tasks {
        if let Ok((h, a, e)) = t.await {
            let _ = latency.add(&h);
            attempts += a;
            first_error = first_error.or(e);
        }
    }
    let elapsed = start.elapsed();
    progress.abort();
    if let Some(w) = watcher {
        w.abort();
    }
    report::clear_progress();
    let mut kv = client.kv_client();
    let _ = kv
        .delete(
            prefix,
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await;
    let mode = match kind {
        Kind::Put => "etcd-put",
        Kind::GetCas => "etcd-cas",
        Kind::Floor => "etcd-floor",
    };
    Ok(Summary {
        writers,
        objects: if kind == Kind::GetCas {
            objects
        } else {
            writers
        },
        first_error,
        ..Summary::measured(mode, &counters, elapsed, attempts, &latency)
    })
}
