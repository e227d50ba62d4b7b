//! Shard lease managers on tokio's paused clock, sharing leases kept in memory.

#![allow(clippy::unwrap_used)]

use std::sync::Mutex;

use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::*;

/// Leases in memory with a resourceVersion counter, shared by managers; `down` makes every
/// call fail as if the server were unreachable.
#[derive(Clone, Default)]
struct MemLeases {
    inner: Arc<Mutex<Mem>>,
}

#[derive(Default)]
struct Mem {
    leases: BTreeMap<String, Value>,
    rv: u64,
    down: bool,
}

fn target(name: &str) -> Target {
    Target::new("coordination.k8s.io", "leases", name)
}

fn name_of(lease: &Value) -> String {
    lease["metadata"]["name"].as_str().unwrap().to_string()
}

impl MemLeases {
    fn set_down(&self, down: bool) {
        self.inner.lock().unwrap().down = down;
    }

    fn call<T>(&self, f: impl FnOnce(&mut Mem) -> Result<T, ApiError>) -> Result<T, ApiError> {
        let mut m = self.inner.lock().unwrap();
        if m.down {
            return Err(ApiError::unavailable("down"));
        }
        f(&mut m)
    }

    /// The holder of every shard lease ("" when released).
    fn holders(&self) -> BTreeMap<u32, String> {
        let m = self.inner.lock().unwrap();
        m.leases
            .iter()
            .filter_map(|(name, l)| {
                let i = name.strip_prefix("keel-controller-manager-shard-")?;
                let holder = l["spec"]["holderIdentity"].as_str().unwrap_or("");
                Some((i.parse().unwrap(), holder.to_string()))
            })
            .collect()
    }

    /// How many shard leases each holder has.
    fn counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for holder in self.holders().into_values() {
            *counts.entry(holder).or_default() += 1;
        }
        counts
    }

    fn names(&self) -> Vec<String> {
        self.inner.lock().unwrap().leases.keys().cloned().collect()
    }
}

impl Mem {
    fn write(&mut self, mut lease: Value) -> Value {
        self.rv += 1;
        lease["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.leases.insert(name_of(&lease), lease.clone());
        lease
    }
}

impl LeaseStore for MemLeases {
    fn list(&self) -> impl Future<Output = Result<Vec<Value>, ApiError>> + Send {
        let r = self.call(|m| Ok(m.leases.values().cloned().collect()));
        async move { r }
    }

    fn get(&self, name: &str) -> impl Future<Output = Result<Value, ApiError>> + Send {
        let r = self.call(|m| {
            m.leases
                .get(name)
                .cloned()
                .ok_or_else(|| ApiError::not_found(target(name)))
        });
        async move { r }
    }

    fn create(&self, lease: &Value) -> impl Future<Output = Result<Value, ApiError>> + Send {
        let r = self.call(|m| {
            let name = name_of(lease);
            if m.leases.contains_key(&name) {
                return Err(ApiError::already_exists(target(&name)));
            }
            Ok(m.write(lease.clone()))
        });
        async move { r }
    }

    fn update(&self, lease: &Value) -> impl Future<Output = Result<Value, ApiError>> + Send {
        let r = self.call(|m| {
            let name = name_of(lease);
            let current = m
                .leases
                .get(&name)
                .ok_or_else(|| ApiError::not_found(target(&name)))?;
            if current["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"] {
                return Err(ApiError::conflict(target(&name), "stale"));
            }
            Ok(m.write(lease.clone()))
        });
        async move { r }
    }

    fn delete(
        &self,
        name: &str,
        resource_version: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        let r = self.call(|m| {
            let current = m
                .leases
                .get(name)
                .ok_or_else(|| ApiError::not_found(target(name)))?;
            if !resource_version.is_empty()
                && current["metadata"]["resourceVersion"] != resource_version
            {
                return Err(ApiError::conflict(target(name), "stale"));
            }
            m.leases.remove(name);
            Ok(())
        });
        async move { r }
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A running manager: its handle, the sender that shuts it down, its task.
struct Replica {
    handle: ShardHandle,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Replica {
    fn start(store: &MemLeases, id: &str) -> Replica {
        let m = Manager::new(store.clone(), id.to_string(), ShardLeaseConfig::default()).unwrap();
        let handle = m.handle();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(m.run(async move {
            let _ = stopped.await;
        }));
        Replica {
            handle,
            stop: Some(stop),
            task,
        }
    }

    fn held(&self) -> BTreeSet<u32> {
        (0..32).filter(|s| self.handle.is_held(*s)).collect()
    }

    async fn shut_down(&mut self) {
        let _ = self.stop.take().unwrap().send(());
        (&mut self.task).await.unwrap();
    }
}

/// Polls `cond` every 100 ms of (paused) time; false if `within` passed first.
async fn until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(ms(100)).await;
    }
    cond()
}

fn sorted_counts(replicas: &[&Replica]) -> Vec<usize> {
    let mut v: Vec<usize> = replicas.iter().map(|r| r.held().len()).collect();
    v.sort_unstable();
    v
}

/// Every shard lease names one of `ids`, and each handle holds exactly its leases.
fn consistent(store: &MemLeases, replicas: &[(&str, &Replica)]) -> bool {
    let holders = store.holders();
    holders.len() == 32
        && replicas.iter().all(|(id, r)| {
            let leases: BTreeSet<u32> = holders
                .iter()
                .filter(|(_, h)| h == id)
                .map(|(s, _)| *s)
                .collect();
            leases == r.held()
        })
        && holders
            .values()
            .all(|h| replicas.iter().any(|(id, _)| id == h))
}

/// Panics if a shard is held by two handles at this instant. On the paused clock of a
/// current-thread runtime nothing runs while this samples: it is one moment.
fn assert_one_holder_each(replicas: &[&Replica]) {
    for s in 0..32 {
        let n = replicas.iter().filter(|r| r.handle.is_held(s)).count();
        assert!(n <= 1, "shard {s} held by {n} replicas at once");
    }
}

#[tokio::test(start_paused = true)]
async fn three_replicas_converge_to_10_11_11_with_one_holder_per_shard() {
    let store = MemLeases::default();
    let (a, b, c) = (
        Replica::start(&store, "a"),
        Replica::start(&store, "b"),
        Replica::start(&store, "c"),
    );
    let all = [&a, &b, &c];
    let ok = until(secs(60), || {
        assert_one_holder_each(&all);
        sorted_counts(&all) == [10, 11, 11]
            && consistent(&store, &[("a", &a), ("b", &b), ("c", &c)])
    })
    .await;
    assert!(ok, "{:?} {:?}", sorted_counts(&all), store.counts());
    // And it stays so.
    tokio::time::sleep(secs(30)).await;
    assert_eq!(sorted_counts(&all), [10, 11, 11]);
    assert!(consistent(&store, &[("a", &a), ("b", &b), ("c", &c)]));
    let members: Vec<String> = store
        .names()
        .into_iter()
        .filter(|n| n.contains("-member-"))
        .collect();
    assert_eq!(
        members,
        [
            "keel-controller-manager-member-a",
            "keel-controller-manager-member-b",
            "keel-controller-manager-member-c"
        ]
    );
}

/// Replicas a, b and c, once they hold 10, 11 and 11 shards.
async fn three(store: &MemLeases) -> (Replica, Replica, Replica) {
    let (a, b, c) = (
        Replica::start(store, "a"),
        Replica::start(store, "b"),
        Replica::start(store, "c"),
    );
    assert!(until(secs(60), || sorted_counts(&[&a, &b, &c]) == [10, 11, 11]).await);
    (a, b, c)
}

#[tokio::test(start_paused = true)]
async fn a_fourth_replica_gets_8_and_no_shard_is_ever_held_twice() {
    let store = MemLeases::default();
    let (a, b, c) = three(&store).await;
    let d = Replica::start(&store, "d");
    let all = [&a, &b, &c, &d];
    let joined = Instant::now();
    let mut converged = None;
    // Sample every 10 ms through the whole transition and well after it.
    while joined.elapsed() < secs(60) {
        assert_one_holder_each(&all);
        if converged.is_none() && sorted_counts(&all) == [8, 8, 8, 8] {
            converged = Some(joined.elapsed());
        }
        tokio::time::sleep(ms(10)).await;
    }
    let took = converged.expect("8 each");
    // Seen within a round, surplus settled over two more, drained, released, taken.
    assert!(took <= secs(15), "{took:?}");
    assert_eq!(sorted_counts(&all), [8, 8, 8, 8]);
    assert!(consistent(
        &store,
        &[("a", &a), ("b", &b), ("c", &c), ("d", &d)]
    ));
}

#[tokio::test(start_paused = true)]
async fn a_crashed_replicas_shards_are_taken_once_its_leases_expire() {
    let store = MemLeases::default();
    let (a, b, c) = three(&store).await;
    let lost = c.held();
    c.task.abort();
    let died = Instant::now();
    tokio::task::yield_now().await;
    assert!(c.held().is_empty(), "an aborted manager holds nothing");
    let mut taken = None;
    while died.elapsed() < secs(30) {
        assert_one_holder_each(&[&a, &b]);
        if taken.is_none()
            && lost
                .iter()
                .all(|s| a.handle.is_held(*s) || b.handle.is_held(*s))
        {
            taken = Some(died.elapsed());
        }
        tokio::time::sleep(ms(10)).await;
    }
    let took = taken.expect("the survivors took the shards");
    // Its last renewal was at most a (jittered) retry before it died, and the survivors saw
    // it at most a retry after: the lease ran out between 10 − 2.4 and 10 + 2.4 s after the
    // crash; they wake for it, spread by up to a quarter retry.
    assert!(took >= ms(7600), "{took:?}");
    assert!(took <= ms(12_900) + ms(100), "{took:?}");
    assert_eq!(sorted_counts(&[&a, &b]), [16, 16]);
    // Its membership lease is gone too.
    assert!(
        until(secs(10), || !store
            .names()
            .contains(&"keel-controller-manager-member-c".to_string()))
        .await
    );
}

#[tokio::test(start_paused = true)]
async fn a_replica_that_shuts_down_releases_everything_and_peers_take_it_within_a_round() {
    let store = MemLeases::default();
    let (a, b, mut c) = (
        Replica::start(&store, "a"),
        Replica::start(&store, "b"),
        Replica::start(&store, "c"),
    );
    assert!(until(secs(60), || sorted_counts(&[&a, &b, &c]) == [10, 11, 11]).await);
    let lost = c.held();
    c.shut_down().await;
    let released = Instant::now();
    let holders = store.holders();
    assert!(lost.iter().all(|s| holders[s].is_empty()), "{holders:?}");
    assert!(
        !store
            .names()
            .contains(&"keel-controller-manager-member-c".to_string())
    );
    assert!(
        until(secs(10), || lost
            .iter()
            .all(|s| a.handle.is_held(*s) || b.handle.is_held(*s)))
        .await
    );
    assert!(released.elapsed() <= ms(2500), "{:?}", released.elapsed());
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_server_lapses_every_shard_at_the_renew_deadline_and_they_come_back() {
    let store = MemLeases::default();
    let a = Replica::start(&store, "a");
    assert!(until(secs(30), || a.held().len() == 32).await);
    let mut active = a.handle.subscribe();
    active.borrow_and_update();
    store.set_down(true);
    let down = Instant::now();
    active.wait_for(|s| s.is_empty()).await.unwrap();
    let lapsed = down.elapsed();
    // The last renewal was at most a jittered retry (2.4 s) before the server went down.
    assert!(lapsed >= ms(4600) && lapsed <= secs(7), "{lapsed:?}");
    assert!(a.handle.begin(0).is_none());
    assert!(a.held().is_empty());
    store.set_down(false);
    assert!(
        until(secs(10), || a.held().len() == 32).await,
        "renewed again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_handover_waits_for_work_in_flight_on_the_shard() {
    let store = MemLeases::default();
    let a = Replica::start(&store, "a");
    assert!(until(secs(30), || a.held().len() == 32).await);
    // Handed over first: the highest-numbered shards.
    let work = a.handle.begin(31).unwrap();
    let b = Replica::start(&store, "b");
    assert!(until(secs(30), || a.held().len() == 17).await);
    assert!(a.handle.begin(31).is_none(), "draining: no new work");
    assert!(work.is_held());
    // Three seconds of work (under the 5 s drain timeout): the lease stays a's meanwhile.
    let started = Instant::now();
    while started.elapsed() < secs(3) {
        assert!(!b.handle.is_held(31));
        assert_eq!(store.holders()[&31], "a");
        tokio::time::sleep(ms(10)).await;
    }
    drop(work);
    assert!(until(secs(6), || b.handle.is_held(31)).await);
    assert_eq!(sorted_counts(&[&a, &b]), [16, 16]);
}

#[tokio::test(start_paused = true)]
async fn a_handover_releases_after_the_drain_timeout_whatever_is_in_flight() {
    let store = MemLeases::default();
    let a = Replica::start(&store, "a");
    assert!(until(secs(30), || a.held().len() == 32).await);
    let _stuck = a.handle.begin(31).unwrap();
    let b = Replica::start(&store, "b");
    assert!(until(secs(30), || a.held().len() == 17).await);
    let draining = Instant::now();
    assert!(until(secs(20), || b.handle.is_held(31)).await);
    let took = draining.elapsed();
    // Released at a's first round after the 5 s drain timeout, taken at b's next round; a
    // round comes every 2 to 2.4 s (the retry period, jittered): at most 5 + 2.4 + 2.4 s, and
    // the polls' 100 ms.
    assert!(took >= secs(4) && took <= secs(10), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_new_work_and_waits_for_work_in_flight_before_releasing() {
    let store = MemLeases::default();
    let mut a = Replica::start(&store, "a");
    assert!(until(secs(30), || a.held().len() == 32).await);
    let work = a.handle.begin(3).unwrap();
    let handle = a.handle.clone();
    let leases = store.clone();
    let stopped = Instant::now();
    let (_, ()) = tokio::join!(a.shut_down(), async move {
        tokio::time::sleep(ms(10)).await;
        assert!(handle.begin(4).is_none(), "no new work once shutting down");
        assert!(handle.active().is_empty());
        assert_eq!(leases.holders()[&3], "a", "not released while work runs");
        tokio::time::sleep(secs(3)).await;
        drop(work);
    });
    assert_eq!(stopped.elapsed(), secs(3) + ms(10));
    let holders = store.holders();
    assert!(holders.values().all(String::is_empty), "{holders:?}");
}

#[tokio::test(start_paused = true)]
async fn metrics_count_acquisitions_handovers_and_shards_held() {
    let store = MemLeases::default();
    let m = Manager::new(store.clone(), "a".into(), ShardLeaseConfig::default()).unwrap();
    let metrics = m.metrics.clone();
    let h = m.handle();
    let task = tokio::spawn(m.run(std::future::pending()));
    assert!(until(secs(30), || (0..32).all(|s| h.is_held(s))).await);
    assert_eq!(metrics.held.get(), 32);
    assert_eq!(metrics.acquisitions.get(), 32);
    let _b = Replica::start(&store, "b");
    assert!(until(secs(30), || metrics.handovers.get() == 16).await);
    assert!(until(secs(5), || metrics.held.get() == 16).await);
    task.abort();
}

#[test]
fn configs_are_validated() {
    assert_eq!(ShardLeaseConfig::default().validate(), Ok(()));
    let c = ShardLeaseConfig {
        count: 0,
        ..ShardLeaseConfig::default()
    };
    assert_eq!(c.validate(), Err(ShardLeaseError::Count(0)));
    let c = ShardLeaseConfig {
        count: MAX_SHARDS + 1,
        ..ShardLeaseConfig::default()
    };
    assert!(matches!(c.validate(), Err(ShardLeaseError::Count(_))));
    let mut c = ShardLeaseConfig::default();
    c.timing.renew_deadline = secs(10);
    assert!(matches!(
        c.validate(),
        Err(ShardLeaseError::Timing(
            LeaseTimingError::LeaseNotLongerThanRenewDeadline { .. }
        ))
    ));
    let c = ShardLeaseConfig {
        name: "Not_A_Name".into(),
        ..ShardLeaseConfig::default()
    };
    assert!(matches!(c.validate(), Err(ShardLeaseError::Name(..))));
    for bad in ["", "Host_1", "UPPER"] {
        assert!(matches!(
            Manager::new(
                MemLeases::default(),
                bad.into(),
                ShardLeaseConfig::default()
            ),
            Err(ShardLeaseError::Identity(..))
        ));
    }
}

#[test]
fn lease_names_are_parsed_only_in_their_canonical_spelling() {
    let n = Names::new(&ShardLeaseConfig::default());
    assert_eq!(n.shard(7), "keel-controller-manager-shard-7");
    assert_eq!(n.parse_shard("keel-controller-manager-shard-7"), Some(7));
    assert_eq!(n.parse_shard("keel-controller-manager-shard-31"), Some(31));
    assert_eq!(n.parse_shard("keel-controller-manager-shard-32"), None);
    assert_eq!(n.parse_shard("keel-controller-manager-shard-07"), None);
    assert_eq!(n.parse_shard("keel-controller-manager-shard-"), None);
    assert_eq!(n.parse_shard("keel-controller-manager"), None);
    assert!(n.is_member("keel-controller-manager-member-a"));
    assert!(!n.is_member("keel-controller-manager"));
}
