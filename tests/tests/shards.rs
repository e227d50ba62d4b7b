//! Shard leases against a real etcd and the real API server: replicas (shard lease managers run
//! in-process, with short timings) split 32 shards fairly, hand shards over to a newcomer
//! without ever working on one shard at the same moment, and take over a crashed or stopped
//! replica's shards in time.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_client::Client;
use keel_runtime::{LeaseTiming, ShardHandle, ShardLeaseConfig, ShardLeaseManager};
use keel_tests::{ApiServer, Etcd, eventually, shard_lease_holders};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const SHARDS: u32 = 32;
const LEASE: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(400);

/// One cluster at a time: these tests measure take-over times, and two cores do not run four
/// etcds, four API servers and sixteen managers without stretching them.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn config() -> ShardLeaseConfig {
    ShardLeaseConfig {
        count: SHARDS,
        timing: LeaseTiming {
            lease_duration: LEASE,
            renew_deadline: Duration::from_millis(1400),
            retry_period: RETRY,
        },
        drain_timeout: Duration::from_secs(2),
        ..ShardLeaseConfig::default()
    }
}

/// A piece of guarded work: which replica, which shard, when it began and ended.
#[derive(Debug, Clone, Copy)]
struct Work {
    replica: usize,
    shard: u32,
    start: Instant,
    end: Instant,
}

type WorkLog = Arc<Mutex<Vec<Work>>>;

/// A shard lease manager running as a task, like one controller-manager replica.
struct Replica {
    id: String,
    handle: ShardHandle,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    workers: Vec<JoinHandle<()>>,
}

impl Replica {
    async fn start(api: &ApiServer, id: &str) -> Replica {
        let manager = ShardLeaseManager::new(api.client().await, id, config()).unwrap();
        let handle = manager.handle();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(manager.run(async move {
            let _ = stopped.await;
        }));
        Replica {
            id: id.to_string(),
            handle,
            stop: Some(stop),
            task,
            workers: Vec::new(),
        }
    }

    fn held(&self) -> BTreeSet<u32> {
        (0..SHARDS).filter(|s| self.handle.is_held(*s)).collect()
    }

    /// Works on every shard it may, all the time: per shard, 20 ms of work every 10 ms it is
    /// allowed to, each piece logged.
    fn work(&mut self, replica: usize, log: &WorkLog) {
        for shard in 0..SHARDS {
            let (handle, log) = (self.handle.clone(), Arc::clone(log));
            self.workers.push(tokio::spawn(async move {
                loop {
                    if let Some(guard) = handle.begin(shard) {
                        let start = Instant::now();
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let end = Instant::now();
                        drop(guard);
                        log.lock().unwrap().push(Work {
                            replica,
                            shard,
                            start,
                            end,
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }));
        }
    }

    /// Shuts down as on SIGTERM, and waits until it is done.
    async fn shut_down(&mut self) {
        let _ = self.stop.take().unwrap().send(());
        (&mut self.task).await.unwrap();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.task.abort();
        for w in &self.workers {
            w.abort();
        }
    }
}

/// How many shard leases each replica holds, if every shard has a lease naming one of
/// `replicas` and each replica's handle holds exactly the shards its leases name.
async fn split(c: &Client, replicas: &[&Replica]) -> Option<Vec<usize>> {
    let holders = shard_lease_holders(c).await;
    if holders.len() != SHARDS as usize {
        return None;
    }
    let mut counts = Vec::new();
    for r in replicas {
        let leases: BTreeSet<u32> = holders
            .iter()
            .filter(|(_, h)| **h == r.id)
            .map(|(s, _)| *s)
            .collect();
        if leases != r.held() {
            return None;
        }
        counts.push(leases.len());
    }
    if counts.iter().sum::<usize>() != SHARDS as usize {
        return None;
    }
    counts.sort_unstable();
    Some(counts)
}

/// Waits until the shard leases are split as `want` (sorted) between `replicas`.
async fn converge(c: &Client, replicas: &[&Replica], want: &[usize]) {
    eventually(
        Duration::from_secs(30),
        &format!("shards split {want:?}"),
        || async move { split(c, replicas).await.filter(|got| got == want) },
    )
    .await;
}

/// Panics if a shard is held by two replicas at this moment. The test runtime has one thread,
/// so no manager runs while this samples: it is one instant.
fn assert_one_holder_each(replicas: &[&Replica]) {
    for s in 0..SHARDS {
        let holders: Vec<&str> = replicas
            .iter()
            .filter(|r| r.handle.is_held(s))
            .map(|r| r.id.as_str())
            .collect();
        assert!(holders.len() <= 1, "shard {s} held by {holders:?} at once");
    }
}

/// Waits until every shard of `lost` is held by one of `survivors`, sampling every 5 ms that
/// none is held twice; returns how long it took from `since`.
async fn taken_over(lost: &BTreeSet<u32>, survivors: &[&Replica], since: Instant) -> Duration {
    let deadline = since + Duration::from_secs(20);
    loop {
        assert_one_holder_each(survivors);
        if lost
            .iter()
            .all(|s| survivors.iter().any(|r| r.handle.is_held(*s)))
        {
            return since.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "the shards of {lost:?} were not taken over"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn three_replicas(api: &ApiServer, c: &Client) -> [Replica; 3] {
    let rs = [
        Replica::start(api, "replica-a").await,
        Replica::start(api, "replica-b").await,
        Replica::start(api, "replica-c").await,
    ];
    converge(c, &[&rs[0], &rs[1], &rs[2]], &[10, 11, 11]).await;
    rs
}

#[tokio::test]
async fn three_replicas_hold_10_11_and_11_shards_each_shard_once() {
    let _one = ONE_AT_A_TIME.lock().await;
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let [a, b, r3] = three_replicas(&api, &c).await;
    let all = [&a, &b, &r3];
    // And it stays so, through several lease durations.
    let until = Instant::now() + 3 * LEASE;
    while Instant::now() < until {
        assert_one_holder_each(&all);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(split(&c, &all).await, Some(vec![10, 11, 11]));
    let holders = shard_lease_holders(&c).await;
    assert_eq!(
        holders.keys().copied().collect::<Vec<_>>(),
        (0..SHARDS).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_fourth_replica_brings_all_to_8_and_no_shard_is_worked_on_by_two_at_once() {
    let _one = ONE_AT_A_TIME.lock().await;
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let [mut a, mut b, mut r3] = three_replicas(&api, &c).await;
    let log: WorkLog = Arc::default();
    a.work(0, &log);
    b.work(1, &log);
    r3.work(2, &log);
    let before: BTreeMap<u32, usize> = (0..SHARDS)
        .map(|s| {
            (
                s,
                [&a, &b, &r3]
                    .iter()
                    .position(|r| r.handle.is_held(s))
                    .unwrap(),
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut d = Replica::start(&api, "replica-d").await;
    d.work(3, &log);
    let joined = Instant::now();
    let all = [&a, &b, &r3, &d];
    loop {
        assert_one_holder_each(&all);
        if all.iter().all(|r| r.held().len() == 8) && split(&c, &all).await == Some(vec![8; 4]) {
            break;
        }
        assert!(
            joined.elapsed() < Duration::from_secs(30),
            "not 8 each: {:?}",
            all.iter().map(|r| r.held().len()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Work on, sampling, through a few more lease durations.
    let until = Instant::now() + 2 * LEASE;
    while Instant::now() < until {
        assert_one_holder_each(&all);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for r in &all {
        for w in &r.workers {
            w.abort();
        }
    }
    assert_eq!(split(&c, &all).await, Some(vec![8; 4]));

    let log = log.lock().unwrap().clone();
    let mut by_shard: BTreeMap<u32, Vec<Work>> = BTreeMap::new();
    for w in &log {
        by_shard.entry(w.shard).or_default().push(*w);
    }
    for (shard, mut works) in by_shard {
        works.sort_by_key(|w| w.start);
        for pair in works.windows(2) {
            let (x, y) = (pair[0], pair[1]);
            assert!(
                x.replica == y.replica || x.end <= y.start,
                "shard {shard} worked on by replicas {} and {} at once: {x:?} {y:?}",
                x.replica,
                y.replica
            );
        }
    }
    // Not vacuous: the newcomer's shards were worked on before the move, by their former
    // holders, and after it, by the newcomer.
    let moved: Vec<u32> = d.held().into_iter().collect();
    assert_eq!(moved.len(), 8);
    for s in moved {
        let by = |replica: usize| log.iter().any(|w| w.shard == s && w.replica == replica);
        assert!(by(before[&s]), "shard {s}: no work by its first holder");
        assert!(by(3), "shard {s}: no work by the newcomer");
    }
}

#[tokio::test]
async fn a_crashed_replicas_shards_are_taken_within_a_lease_duration_and_a_retry() {
    let _one = ONE_AT_A_TIME.lock().await;
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let [a, b, r3] = three_replicas(&api, &c).await;
    let lost = r3.held();
    // A crash: no release, no goodbye.
    r3.task.abort();
    let crashed = Instant::now();
    let took = taken_over(&lost, &[&a, &b], crashed).await;
    // Its last renewal was at most a (jittered) retry before the crash, and nobody may take a
    // lease before it has gone unrenewed for a lease duration: not much less than one.
    assert!(took >= LEASE - RETRY.mul_f64(1.5), "taken after {took:?}");
    assert!(
        took <= LEASE + RETRY + Duration::from_millis(800),
        "taken after {took:?}"
    );
    assert!(
        r3.held().is_empty(),
        "a crashed manager's handle holds nothing"
    );
    converge(&c, &[&a, &b], &[16, 16]).await;
}

#[tokio::test]
async fn a_stopped_replica_releases_everything_and_its_shards_are_taken_within_2s() {
    let _one = ONE_AT_A_TIME.lock().await;
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let [a, b, mut r3] = three_replicas(&api, &c).await;
    let lost = r3.held();
    let stopped = Instant::now();
    r3.shut_down().await;
    let holders = shard_lease_holders(&c).await;
    assert!(
        lost.iter()
            .all(|s| holders[s].is_empty() || holders[s] == a.id || holders[s] == b.id),
        "released: {holders:?}"
    );
    let took = taken_over(&lost, &[&a, &b], stopped).await;
    assert!(took <= Duration::from_secs(2), "taken after {took:?}");
    converge(&c, &[&a, &b], &[16, 16]).await;
}

#[tokio::test]
async fn an_unreachable_api_server_lapses_every_shard_before_a_peer_may_take_it_and_they_come_back()
{
    let _one = ONE_AT_A_TIME.lock().await;
    let etcd = Etcd::start().await;
    let mut api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let a = Replica::start(&api, "replica-a").await;
    converge(&c, &[&a], &[32]).await;
    let mut active = a.handle.subscribe();
    active.borrow_and_update();
    api.kill9();
    let down = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), active.wait_for(|s| s.is_empty()))
        .await
        .expect("the shards lapsed")
        .unwrap();
    let lapsed = down.elapsed();
    // Renewed last before the server died, so lapsed a renew deadline (1.4 s) after at the
    // latest; what users rely on is that the work stops before a peer may take the shard,
    // which is a lease duration after its last renewal, so that is the bound asserted (the
    // rest is the margin a busy two-core machine needs to wake the timer).
    assert!(lapsed < LEASE, "lapsed after {lapsed:?}");
    assert!(a.held().is_empty() && a.handle.begin(0).is_none());
    api.restart().await;
    converge(&c, &[&a], &[32]).await;
    assert!(a.handle.begin(0).is_some());
}
