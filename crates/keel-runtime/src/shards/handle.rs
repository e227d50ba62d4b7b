//! Which shards a replica may work on now: the state the lease manager and the controllers
//! share, and the guards that count work in flight per shard.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use keel_api::shard::{ShardSelector, shard_of, shard_of_json};
use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::reflector::{ShardBy, ShardFeed};

/// One shard as this replica sees it.
#[derive(Debug, Clone, Copy, Default)]
struct ShardState {
    /// Until when this replica may act on the shard: the start of its last successful renewal
    /// plus the renew deadline. `None`: not held, or given up.
    valid_until: Option<Instant>,
    /// No new work: the shard is being handed over, or the replica is shutting down.
    draining: bool,
    /// Guards alive: work begun on the shard and not finished.
    in_flight: u32,
}

impl ShardState {
    fn valid_at(&self, now: Instant) -> bool {
        self.valid_until.is_some_and(|until| now < until)
    }
}

/// The state shared by the manager, its handles and their guards.
#[derive(Debug)]
pub(crate) struct Shared {
    count: u32,
    identity: String,
    /// One entry per shard. A std mutex: held for a few field reads, never across an await,
    /// and taken on every `begin`, so it must be cheap.
    shards: Mutex<Vec<ShardState>>,
    /// The shards open for new work; sent only when it changes.
    active: watch::Sender<BTreeSet<u32>>,
    /// The shards held, draining ones included: what informers cache. A shard being handed
    /// over stays cached until it is given up, so the reconciles still draining on it see all
    /// of it.
    cached: watch::Sender<BTreeSet<u32>>,
    /// Woken whenever a shard's in-flight work reaches zero.
    idle: Notify,
    /// Shards held within their renew deadline.
    held: Gauge,
}

impl Shared {
    pub fn new(count: u32, identity: String, held: Gauge) -> Shared {
        Shared {
            count,
            identity,
            shards: Mutex::new(vec![ShardState::default(); count as usize]),
            active: watch::channel(BTreeSet::new()).0,
            cached: watch::channel(BTreeSet::new()).0,
            idle: Notify::new(),
            held,
        }
    }

    /// A panic elsewhere while the lock was held left no half-done update (every critical
    /// section is a few assignments), so a poisoned lock is used as it is.
    fn lock(&self) -> MutexGuard<'_, Vec<ShardState>> {
        self.shards.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn with<T>(&self, shard: u32, f: impl FnOnce(&mut ShardState) -> T) -> Option<T> {
        self.lock().get_mut(shard as usize).map(f)
    }

    /// The lease of `shard` was renewed (or taken) by a write that started at
    /// `until - renew_deadline`.
    pub fn set_valid(&self, shard: u32, until: Instant) {
        self.with(shard, |s| s.valid_until = Some(until));
    }

    /// The lease is not ours (any more): lost to another holder, or released.
    pub fn invalidate(&self, shard: u32) {
        self.with(shard, |s| s.valid_until = None);
    }

    pub fn set_draining(&self, shard: u32, draining: bool) {
        self.with(shard, |s| s.draining = draining);
    }

    /// Stops new work on every shard (shutdown).
    pub fn drain_all(&self) {
        for s in self.lock().iter_mut() {
            s.draining = true;
        }
    }

    /// Gives `shard` up if no work is in flight on it, or anyway if `force`; else returns how
    /// much is. Checked and done under one lock: no guard can begin in between (the shard is
    /// draining).
    pub fn give_up(&self, shard: u32, force: bool) -> Result<(), u32> {
        self.with(shard, |s| {
            if s.in_flight == 0 || force {
                s.valid_until = None;
                Ok(())
            } else {
                Err(s.in_flight)
            }
        })
        .unwrap_or(Ok(()))
    }

    pub fn in_flight(&self, shard: u32) -> u32 {
        self.with(shard, |s| s.in_flight).unwrap_or(0)
    }

    /// Forgets every lease: nothing held, nothing draining (the manager stopped, or is gone).
    pub fn clear(&self) {
        for s in self.lock().iter_mut() {
            s.valid_until = None;
            s.draining = false;
        }
        self.publish(Instant::now());
    }

    /// Whether `shard` is held within its renew deadline now.
    pub fn is_valid(&self, shard: u32) -> bool {
        let now = Instant::now();
        self.with(shard, |s| s.valid_at(now)).unwrap_or(false)
    }

    /// Sends the shards open for new work at `now`, if they changed, and sets the gauge.
    /// Returns the shards that lapsed since the last send (open then, past their renew
    /// deadline now).
    pub fn publish(&self, now: Instant) -> BTreeSet<u32> {
        let (active, cached, held, lapsed) = {
            let shards = self.lock();
            let before = self.active.borrow();
            let lapsed: BTreeSet<u32> = before
                .iter()
                .copied()
                .filter(|i| {
                    shards
                        .get(*i as usize)
                        .and_then(|s| s.valid_until)
                        .is_some_and(|until| until <= now)
                })
                .collect();
            drop(before);
            let active: BTreeSet<u32> = (0..self.count)
                .zip(shards.iter())
                .filter(|(_, s)| s.valid_at(now) && !s.draining)
                .map(|(i, _)| i)
                .collect();
            let cached: BTreeSet<u32> = (0..self.count)
                .zip(shards.iter())
                .filter(|(_, s)| s.valid_at(now))
                .map(|(i, _)| i)
                .collect();
            let held = cached.len();
            (active, cached, held, lapsed)
        };
        self.held.set(i64::try_from(held).unwrap_or(i64::MAX));
        self.active.send_if_modified(|current| {
            let changed = *current != active;
            *current = active;
            changed
        });
        self.cached.send_if_modified(|current| {
            let changed = *current != cached;
            *current = cached;
            changed
        });
        lapsed
    }

    /// The next moment a held shard lapses unless renewed first.
    pub fn next_lapse(&self, now: Instant) -> Option<Instant> {
        self.lock()
            .iter()
            .filter_map(|s| s.valid_until)
            .filter(|until| *until > now)
            .min()
    }

    /// Waits until no work is in flight on any shard; false if `deadline` came first.
    pub async fn wait_idle(&self, deadline: Instant) -> bool {
        loop {
            let notified = self.idle.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check: a guard dropped in between still wakes us.
            notified.as_mut().enable();
            if self.lock().iter().all(|s| s.in_flight == 0) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }
}

/// What controllers ask of the shard leases: may this replica work on a shard now? Cheap to
/// clone; every clone sees the same leases.
///
/// A shard is *held* while its lease is this replica's and its last successful renewal
/// started less than the renew deadline ago; it is *active* while held and not draining. Work
/// begins only on active shards ([`ShardHandle::begin`]).
#[derive(Debug, Clone)]
pub struct ShardHandle {
    shared: Arc<Shared>,
}

impl ShardHandle {
    pub(crate) fn new(shared: Arc<Shared>) -> ShardHandle {
        ShardHandle { shared }
    }

    /// How many shards the keyspace is split into.
    pub fn count(&self) -> u32 {
        self.shared.count
    }

    /// This replica's identity: the holder it writes into the leases.
    pub fn identity(&self) -> &str {
        &self.shared.identity
    }

    /// The shard of the object `namespace`/`name` (for an owned object, pass its controlling
    /// owner's name): [`keel_api::shard::shard_of`], the function the API server filters by.
    pub fn shard_for(&self, namespace: &str, name: &str) -> u32 {
        shard_of(namespace, name, self.shared.count)
    }

    /// The shard of `obj`, by its own name or its controlling owner's: the rule a sharded
    /// informer caches by ([`ShardBy`]).
    pub fn shard_of_object(&self, obj: &Value, by: ShardBy) -> u32 {
        shard_of_json(obj, self.shared.count, by == ShardBy::Owner)
    }

    /// Begins work on `shard`: a guard if the shard is active (held within its renew deadline
    /// and not draining), else `None`. A handover waits for the guard to be dropped before it
    /// releases the lease, so drop it when the work is done.
    pub fn begin(&self, shard: u32) -> Option<ShardGuard> {
        let now = Instant::now();
        self.shared.with(shard, |s| {
            if s.draining || !s.valid_at(now) {
                return None;
            }
            s.in_flight += 1;
            Some(ShardGuard {
                shared: Arc::clone(&self.shared),
                shard,
            })
        })?
    }

    /// Whether this replica holds `shard` now (draining or not).
    pub fn is_held(&self, shard: u32) -> bool {
        self.shared.is_valid(shard)
    }

    /// The shards open for new work now.
    pub fn active(&self) -> BTreeSet<u32> {
        let now = Instant::now();
        let shards = self.shared.lock();
        (0..self.shared.count)
            .zip(shards.iter())
            .filter(|(_, s)| s.valid_at(now) && !s.draining)
            .map(|(i, _)| i)
            .collect()
    }

    /// A receiver of the active shards, sent whenever they change (a shard taken, handed over,
    /// lapsed): what an informer's shard selector follows.
    pub fn subscribe(&self) -> watch::Receiver<BTreeSet<u32>> {
        self.shared.active.subscribe()
    }

    /// The held shards (draining ones included, until given up) as a sharded informer
    /// factory follows them: `InformerFactory::new(client).with_shards(handle.feed())`.
    pub fn feed(&self) -> ShardFeed {
        ShardFeed {
            count: self.shared.count,
            held: self.shared.cached.subscribe(),
        }
    }

    /// A List/Watch shard selector for the active shards now.
    pub fn selector(&self, by_owner: bool) -> ShardSelector {
        ShardSelector {
            count: self.shared.count,
            ids: self.active().into_iter().collect(),
            by_owner,
        }
    }
}

/// Work in flight on one shard; dropping it ends the work. While any guard of a shard lives, a
/// handover of that shard waits (up to the drain timeout) before releasing the lease.
#[derive(Debug)]
pub struct ShardGuard {
    shared: Arc<Shared>,
    shard: u32,
}

impl ShardGuard {
    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// Whether the shard is still held within its renew deadline. Long work checks this
    /// between steps: a lease that lapsed may be someone else's soon.
    pub fn is_held(&self) -> bool {
        self.shared.is_valid(self.shard)
    }
}

impl Drop for ShardGuard {
    fn drop(&mut self) {
        let idle = self
            .shared
            .with(self.shard, |s| {
                s.in_flight = s.in_flight.saturating_sub(1);
                s.in_flight == 0
            })
            .unwrap_or(false);
        if idle {
            self.shared.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn handle(count: u32) -> (Arc<Shared>, ShardHandle) {
        let shared = Arc::new(Shared::new(count, "me".into(), Gauge::default()));
        (Arc::clone(&shared), ShardHandle::new(shared))
    }

    #[tokio::test(start_paused = true)]
    async fn work_begins_only_on_a_shard_held_within_its_deadline_and_not_draining() {
        let (shared, h) = handle(4);
        assert!(h.begin(1).is_none(), "not held");
        assert!(h.begin(9).is_none(), "no such shard");
        let until = Instant::now() + Duration::from_secs(7);
        shared.set_valid(1, until);
        let g = h.begin(1).unwrap();
        assert_eq!(g.shard(), 1);
        assert!(g.is_held());
        shared.set_draining(1, true);
        assert!(h.begin(1).is_none(), "draining");
        assert!(h.is_held(1), "still held while draining");
        shared.set_draining(1, false);
        tokio::time::advance(Duration::from_secs(7)).await;
        assert!(h.begin(1).is_none(), "lapsed at the renew deadline");
        assert!(!g.is_held());
        assert!(!h.is_held(1));
    }

    #[tokio::test(start_paused = true)]
    async fn guards_count_work_in_flight_and_a_shard_with_work_is_not_given_up() {
        let (shared, h) = handle(2);
        shared.set_valid(0, Instant::now() + Duration::from_secs(7));
        let a = h.begin(0).unwrap();
        let b = h.clone().begin(0).unwrap();
        assert_eq!(shared.in_flight(0), 2);
        shared.set_draining(0, true);
        assert_eq!(shared.give_up(0, false), Err(2));
        drop(a);
        assert_eq!(shared.give_up(0, false), Err(1));
        drop(b);
        assert_eq!(shared.give_up(0, false), Ok(()));
        assert!(!h.is_held(0));
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_idle_ends_when_the_last_guard_drops_or_at_the_deadline() {
        let (shared, h) = handle(2);
        shared.set_valid(0, Instant::now() + Duration::from_secs(60));
        let g = h.begin(0).unwrap();
        let start = Instant::now();
        let dropper = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            drop(g);
        });
        assert!(shared.wait_idle(start + Duration::from_secs(5)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        dropper.await.unwrap();

        let _stuck = h.begin(0).unwrap();
        let start = Instant::now();
        assert!(!shared.wait_idle(start + Duration::from_secs(5)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn subscribers_see_the_active_shards_when_they_change() {
        let (shared, h) = handle(4);
        let mut rx = h.subscribe();
        let until = Instant::now() + Duration::from_secs(7);
        shared.set_valid(2, until);
        shared.set_valid(3, until);
        shared.publish(Instant::now());
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), BTreeSet::from([2, 3]));
        shared.publish(Instant::now());
        assert!(!rx.has_changed().unwrap(), "no change, no send");
        shared.set_draining(3, true);
        shared.publish(Instant::now());
        assert_eq!(*rx.borrow_and_update(), BTreeSet::from([2]));
        assert_eq!(h.selector(true).ids, [2]);
        assert_eq!(shared.next_lapse(Instant::now()), Some(until));
        shared.publish(until);
        assert!(rx.borrow_and_update().is_empty(), "lapsed");
        shared.clear();
        assert!(h.active().is_empty());
    }

    #[test]
    fn shards_are_the_api_servers_hash() {
        let (_, h) = handle(32);
        assert_eq!(
            h.shard_for("default", "nginx"),
            shard_of("default", "nginx", 32)
        );
        assert_eq!(h.shard_for("default", "nginx"), 21);
        let pod = serde_json::json!({"metadata": {"namespace": "default", "name": "nginx-x1",
            "ownerReferences": [{"name": "nginx", "controller": true}]}});
        assert_eq!(h.shard_of_object(&pod, ShardBy::Owner), 21);
        assert_eq!(
            h.shard_of_object(&pod, ShardBy::Name),
            shard_of("default", "nginx-x1", 32)
        );
        assert_eq!(h.feed().count, 32);
    }
}
