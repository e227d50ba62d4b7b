//! `watch`: W watchers on one namespace while writers write at a fixed rate. Measures delivery
//! latency (write acknowledged → event at each watcher) and checks every watcher sees every
//! acknowledged write exactly once. A write whose writer saw an error may still have landed
//! (its answer was lost): its event is expected by no one, so it is neither missed when absent
//! nor extra when present; it is counted apart (`events_unacknowledged`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use keel_client::{Client, EventType, ListParams, PatchType, WatchParams, gvr};
use serde_json::json;
use tokio::time::Instant;

use crate::report::{self, Counters, Summary};
use crate::rest::RestClient;
use crate::{Common, writers};

struct WatcherLog {
    /// (resourceVersion, when it arrived) of every non-bookmark event, in arrival order.
    seen: Vec<(i64, Instant)>,
    reconnects: u64,
}

/// `clients` carry the watches; writers get connections of their own, so that their PATCHes
/// do not queue behind watch traffic on a shared connection.
/// `rest`: the watchers speak Kubernetes' REST dialect instead (`--protocol rest`), one
/// connection per gRPC client's worth of watchers.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    common: &Common,
    clients: &[Client],
    rest: Option<&[Arc<RestClient>]>,
    watchers: usize,
    writer_count: usize,
    objects: usize,
    rate: u64,
) -> Result<Summary, keel_client::ApiError> {
    let writer_clients = crate::clients(common, writer_count).await?;
    let ns = common.namespace.clone();
    let cms = gvr("", "v1", "configmaps");
    writers::prepare(&clients[0], &ns, objects).await?;
    let start_rv = clients[0]
        .list(
            &cms,
            &ns,
            &ListParams {
                limit: 1,
                ..Default::default()
            },
        )
        .await?
        .resource_version;

    // Watch streams that break or fail to open; each watcher resumes from its last event.
    let breaks = Arc::new(Counters::new(common, "watch-stream"));
    // Watchers first, all from the same revision.
    // The newest revision each watcher has seen: the run ends when all have seen the last write.
    let newest_seen: Arc<Vec<AtomicI64>> =
        Arc::new((0..watchers).map(|_| AtomicI64::new(0)).collect());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut watcher_tasks = Vec::new();
    for w in 0..watchers {
        let c = clients[w % clients.len()].clone();
        let rest = rest.map(|r| r[w % r.len()].clone());
        let (ns, start_rv, cms) = (ns.clone(), start_rv.clone(), cms.clone());
        let mut stop = stop_rx.clone();
        let (newest, breaks) = (newest_seen.clone(), breaks.clone());
        watcher_tasks.push(tokio::spawn(async move {
            let mut log = WatcherLog {
                seen: Vec::new(),
                reconnects: 0,
            };
            let mut from = start_rv;
            'outer: loop {
                let p = WatchParams {
                    namespace: ns.clone(),
                    resource_version: from.clone(),
                    ..Default::default()
                };
                let opened = SystemTime::now();
                // Each event as (is a bookmark, resourceVersion), whichever protocol.
                let opened_stream = match &rest {
                    None => c.watch_raw(&cms, &p).await.map(|s| {
                        s.map(|ev| {
                            ev.map(|ev| {
                                let rv = ev.resource_version().unwrap_or(0);
                                (ev.kind == EventType::Bookmark, rv)
                            })
                        })
                        .boxed()
                    }),
                    Some(r) => r.watch_configmaps(&ns, &from).await.map(|s| {
                        s.map(|ev| ev.map(|ev| (ev.kind == "BOOKMARK", ev.resource_version)))
                            .boxed()
                    }),
                };
                let mut s = match opened_stream {
                    Ok(s) => s,
                    Err(e) => {
                        breaks.api_error(w, opened, &e);
                        log.reconnects += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                loop {
                    tokio::select! {
                        ev = s.next() => match ev {
                            Some(Ok((false, rv))) => {
                                log.seen.push((rv, Instant::now()));
                                newest[w].fetch_max(rv, Ordering::Relaxed);
                                from = rv.to_string();
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => {
                                breaks.api_error(w, opened, &e);
                                log.reconnects += 1;
                                continue 'outer;
                            }
                            None => {
                                breaks.error(w, opened, STREAM_ENDED, STREAM_ENDED);
                                log.reconnects += 1;
                                continue 'outer;
                            }
                        },
                        _ = stop.wait_for(|s| *s) => break 'outer,
                    }
                }
            }
            log
        }));
    }

    // Writers at a fixed total rate.
    let counters = Arc::new(Counters::new(common, "watch"));
    let progress = report::progress(counters.clone(), common.duration, "watch writes");
    let start = Instant::now();
    let stop_at = start + common.duration;
    let per_writer = Duration::from_secs_f64(writer_count as f64 / rate.max(1) as f64);
    let mut writer_tasks = Vec::new();
    for w in 0..writer_count {
        let c = writer_clients[w % writer_clients.len()].clone();
        let (ns, cms, counters) = (ns.clone(), cms.clone(), counters.clone());
        writer_tasks.push(tokio::spawn(async move {
            let mut acks = Vec::new();
            let mut first_error = None;
            let mut tick = tokio::time::interval(per_writer);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut n = 0u64;
            while Instant::now() < stop_at {
                tick.tick().await;
                n += 1;
                let name = writers::object_name((w + n as usize) % objects.max(1));
                let p = json!({"data": {format!("w{w}"): n.to_string()}});
                let sent = SystemTime::now();
                match c.patch(&cms, &ns, &name, PatchType::Merge, &p).await {
                    Ok(o) => {
                        let rv: i64 = o["metadata"]["resourceVersion"]
                            .as_str()
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0);
                        acks.push((rv, Instant::now()));
                        counters.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        counters.api_error(w, sent, &e);
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            (acks, first_error)
        }));
    }
    let mut acked: HashMap<i64, Instant> = HashMap::new();
    let mut first_error = None;
    for t in writer_tasks {
        if let Ok((acks, e)) = t.await {
            acked.extend(acks);
            first_error = first_error.or(e);
        }
    }
    let elapsed = start.elapsed();
    progress.abort();
    report::clear_progress();

    // Let every watcher catch up with the last acknowledged write (bounded wait), then stop
    // them: what one has not seen by then counts as missed.
    let last = acked.keys().copied().max().unwrap_or(0);
    let drain_deadline = Instant::now() + Duration::from_secs(30);
    while newest_seen.iter().any(|n| n.load(Ordering::Relaxed) < last)
        && Instant::now() < drain_deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_tx.send(true);
    let mut latency = report::histogram();
    let acked_rvs: HashSet<i64> = acked.keys().copied().collect();
    let (mut missed, mut duplicated) = (0u64, 0u64);
    let mut unacknowledged = HashSet::new();
    for t in watcher_tasks {
        let Ok(log) = t.await else { continue };
        let mut got = HashSet::new();
        for (rv, at) in &log.seen {
            if got.insert(*rv)
                && let Some(ack) = acked.get(rv)
            {
                report::record(&mut latency, at.saturating_duration_since(*ack));
            }
        }
        let rvs: Vec<i64> = log.seen.iter().map(|(rv, _)| *rv).collect();
        let t = tally(&acked_rvs, &rvs);
        missed += t.missed;
        duplicated += t.duplicated;
        unacknowledged.extend(t.unacknowledged);
    }
    let attempts = counters.ok.load(Ordering::Relaxed) + counters.errors.load(Ordering::Relaxed);
    Ok(Summary {
        writers: writer_count,
        objects,
        watchers,
        servers: common.connect.server.len(),
        tls: common.connect.tls(),
        protocol: if rest.is_some() { "rest" } else { "grpc" }.into(),
        events_expected: acked.len() as u64,
        events_missed: missed,
        events_duplicated: duplicated,
        events_unacknowledged: unacknowledged.len() as u64,
        watch_breaks: breaks.errors.load(Ordering::Relaxed),
        watch_breaks_by_cause: breaks.causes(),
        first_error,
        ..Summary::measured("watch", &counters, elapsed, attempts, &latency)
    })
}

/// The cause of a watch stream the server ended without an error.
const STREAM_ENDED: &str = "stream ended by the server";

/// What one watcher's events prove, checked against the acknowledged writes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Acknowledged writes whose event never came.
    pub missed: u64,
    /// Events that came again (the same resourceVersion), acknowledged or not.
    pub duplicated: u64,
    /// The events of writes nobody saw acknowledged (sorted): their writer saw an error, yet
    /// they landed. Neither missed nor extra.
    pub unacknowledged: Vec<i64>,
}

/// Checks one watcher's events (resourceVersions, in arrival order) against `acked`, the
/// revisions of every acknowledged write.
pub fn tally(acked: &HashSet<i64>, seen: &[i64]) -> Tally {
    let mut got = HashSet::new();
    let mut t = Tally::default();
    for rv in seen {
        if !got.insert(*rv) {
            t.duplicated += 1;
        } else if !acked.contains(rv) {
            t.unacknowledged.push(*rv);
        }
    }
    t.missed = acked.iter().filter(|rv| !got.contains(rv)).count() as u64;
    t.unacknowledged.sort_unstable();
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acked(rvs: &[i64]) -> HashSet<i64> {
        rvs.iter().copied().collect()
    }

    #[test]
    fn every_acknowledged_event_once_is_clean() {
        assert_eq!(tally(&acked(&[3, 5, 9]), &[3, 5, 9]), Tally::default());
    }

    #[test]
    fn an_absent_acknowledged_event_is_missed() {
        let t = tally(&acked(&[3, 5, 9]), &[3, 9]);
        assert_eq!((t.missed, t.duplicated), (1, 0));
    }

    #[test]
    fn an_event_seen_twice_is_a_duplicate_even_if_unacknowledged() {
        let t = tally(&acked(&[3, 5]), &[3, 5, 5, 7, 7]);
        assert_eq!((t.missed, t.duplicated), (0, 2));
        assert_eq!(t.unacknowledged, [7]);
    }

    #[test]
    fn the_event_of_a_write_whose_answer_was_lost_is_neither_missed_nor_extra() {
        // 4 landed though its writer saw an error; 6 failed and never landed.
        let with = tally(&acked(&[3, 5]), &[3, 4, 5]);
        assert_eq!((with.missed, with.duplicated), (0, 0));
        assert_eq!(with.unacknowledged, [4]);
        let without = tally(&acked(&[3, 5]), &[3, 5]);
        assert_eq!(without, Tally::default());
    }
}
