//! Shard leases: each replica of a controller holds some shards of the keyspace, each through a
//! `coordination.k8s.io/v1` Lease, and balances them with its peers.
//!
//! - Leases: shard `i`'s is `<name>-shard-<i>` in `<namespace>` (by default
//!   `keel-system/keel-controller-manager-shard-<i>`), its holder a replica's identity. Each
//!   replica also keeps a membership Lease, `<name>-member-<identity>`: a replica that holds no
//!   shard yet would otherwise be invisible to its peers, who would never make room for it.
//! - Rounds: every retry period (jittered), one List of the leases, then at once every write the
//!   replica needs: renewals, acquisitions (a create, or an update of a free or expired lease
//!   whose `resourceVersion` is the compare-and-swap), releases. A single lease follows leader
//!   election's rules ([`crate::lease::LeaseTiming`]): expiry is judged on this replica's clock,
//!   from when it saw the record change.
//! - Validity: a replica acts on a shard only while it holds the lease and its last successful
//!   renewal started less than the renew deadline ago ([`ShardHandle::begin`]). The renew
//!   deadline is shorter than the lease duration, so it stops before anyone else may start.
//! - Balance: the live replicas are the holders of unexpired leases, and this one; each aims
//!   at its fair share ([`balance::fair_share`]), takes free or expired shards while below it,
//!   and hands a lasting surplus over gracefully: no new work on the shard, in-flight work
//!   drained (up to the drain timeout), then the lease released.
//! - Shutdown: no new work on any shard, in-flight work drained, every lease released at once.
//!
//! Holding a shard lease is not fencing: a paused replica may still write after its lease
//! lapsed. Writes that matter carry `resourceVersion` preconditions.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::Future;
use keel_api::shard::MAX_SHARDS;
use keel_api::{ApiError, Reason, Target};
use keel_client::{Client, DeleteParams, ListParams};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio::time::{Instant, sleep_until, timeout_at};

use crate::backoff::random_fraction;
use crate::lease::{LeaseRecord, Observed, Verdict, micro_time};
use crate::lease::{LeaseTiming, LeaseTimingError, leases};

mod balance;
mod handle;
#[cfg(test)]
mod tests;

use handle::Shared;
pub use handle::{ShardGuard, ShardHandle};

/// A round starts every `retry_period · (1 + ROUND_JITTER·rand)`: spread, so that replicas do
/// not write in step, and at most `1.2 · retry_period`, which the validation keeps below the
/// renew deadline (a renewal always has a round within it).
const ROUND_JITTER: f64 = 0.2;

/// A replica wakes when a peer's lease expires, plus up to this much of a retry period: spread,
/// so that the survivors of a crash do not all reach at once.
const EXPIRY_JITTER: f64 = 0.25;

/// After losing a race for a free shard, a replica looks again within
/// `retry_period · RACE_RETRY · (1 + rand)`.
const RACE_RETRY: f64 = 0.1;

/// Where the shard leases live, how many there are, and their timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLeaseConfig {
    /// The namespace of the leases.
    pub namespace: String,
    /// The leases' common name: shard `i`'s Lease is `<name>-shard-<i>`, a replica's
    /// membership Lease `<name>-member-<identity>`.
    pub name: String,
    /// How many shards the keyspace is split into (1 to [`MAX_SHARDS`]).
    pub count: u32,
    /// Lease duration, renew deadline and retry period of every lease, with leader election's
    /// constraints: `lease_duration > renew_deadline > 1.2 · retry_period`.
    pub timing: LeaseTiming,
    /// How long a handover or a shutdown waits for a shard's in-flight work before it releases
    /// the lease anyway.
    pub drain_timeout: Duration,
}

impl Default for ShardLeaseConfig {
    /// `keel-system/keel-controller-manager-shard-<i>`, 32 shards, lease 10 s, renew deadline
    /// 7 s, retry 2 s, drain timeout 5 s.
    fn default() -> Self {
        ShardLeaseConfig {
            namespace: "keel-system".into(),
            name: "keel-controller-manager".into(),
            count: 32,
            timing: LeaseTiming {
                lease_duration: Duration::from_secs(10),
                renew_deadline: Duration::from_secs(7),
                retry_period: Duration::from_secs(2),
            },
            drain_timeout: Duration::from_secs(5),
        }
    }
}

/// Why shard leases cannot be managed as configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardLeaseError {
    /// The timing breaks one of leader election's constraints.
    #[error(transparent)]
    Timing(#[from] LeaseTimingError),
    #[error("the shard count must be from 1 to {MAX_SHARDS}, not {0}")]
    Count(u32),
    /// The namespace or name cannot name Leases.
    #[error("the shard leases cannot be named {0:?}: {1}")]
    Name(String, String),
    /// The identity names the replica's membership Lease, so it must fit in a Lease name
    /// (a lowercase RFC 1123 subdomain, as host names are).
    #[error("the identity {0:?} cannot name a membership Lease ({1:?}): {2}")]
    Identity(String, String, String),
}

impl ShardLeaseConfig {
    pub fn validate(&self) -> Result<(), ShardLeaseError> {
        self.timing.validate()?;
        if self.count == 0 || self.count > MAX_SHARDS {
            return Err(ShardLeaseError::Count(self.count));
        }
        let longest = Names::new(self).shard(self.count - 1);
        for (what, errs) in [
            (
                &self.namespace,
                keel_api::validation::dns1123_label(&self.namespace),
            ),
            (&longest, keel_api::validation::dns1123_subdomain(&longest)),
        ] {
            if !errs.is_empty() {
                return Err(ShardLeaseError::Name(what.clone(), errs.join("; ")));
            }
        }
        Ok(())
    }
}

/// The names of the leases, and which lease a name is.
#[derive(Debug, Clone)]
struct Names {
    shard_prefix: String,
    member_prefix: String,
    count: u32,
}

impl Names {
    fn new(config: &ShardLeaseConfig) -> Names {
        Names {
            shard_prefix: format!("{}-shard-", config.name),
            member_prefix: format!("{}-member-", config.name),
            count: config.count,
        }
    }

    fn shard(&self, i: u32) -> String {
        format!("{}{i}", self.shard_prefix)
    }

    fn member(&self, identity: &str) -> String {
        format!("{}{identity}", self.member_prefix)
    }

    /// The shard a lease name is for: only the canonical spelling, and below the count
    /// (leases of a former, larger count are left alone).
    fn parse_shard(&self, name: &str) -> Option<u32> {
        let digits = name.strip_prefix(&self.shard_prefix)?;
        let i: u32 = digits.parse().ok()?;
        (i < self.count && i.to_string() == digits).then_some(i)
    }

    fn is_member(&self, name: &str) -> bool {
        name.starts_with(&self.member_prefix)
    }
}

/// Shard lease metrics, registered by [`ShardLeaseManager::register_metrics`].
#[derive(Debug, Clone, Default)]
struct ShardMetrics {
    /// Shards held within their renew deadline now.
    held: Gauge,
    /// Shard leases taken (created, or taken over free or expired).
    acquisitions: Counter,
    /// Shard leases released after draining, for a peer to take (balancing and shutdown).
    handovers: Counter,
}

/// Reads and writes the leases; a seam so that rounds are tested on the paused clock without a
/// server.
pub(crate) trait LeaseStore: Send + Sync + 'static {
    /// Every Lease of the namespace whose name starts with the common name.
    fn list(&self) -> impl Future<Output = Result<Vec<Value>, ApiError>> + Send;
    fn get(&self, name: &str) -> impl Future<Output = Result<Value, ApiError>> + Send;
    fn create(&self, lease: &Value) -> impl Future<Output = Result<Value, ApiError>> + Send;
    /// Replaces a Lease; its `metadata.resourceVersion` is a precondition.
    fn update(&self, lease: &Value) -> impl Future<Output = Result<Value, ApiError>> + Send;
    /// Deletes a Lease; a non-empty `resource_version` is a precondition.
    fn delete(
        &self,
        name: &str,
        resource_version: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;
}

struct ApiLeaseStore {
    client: Client,
    namespace: String,
    prefix: String,
}

impl LeaseStore for ApiLeaseStore {
    async fn list(&self) -> Result<Vec<Value>, ApiError> {
        let all = self
            .client
            .list_all(&leases(), &self.namespace, &ListParams::default())
            .await?;
        Ok(all
            .items
            .into_iter()
            .filter(|l| {
                l["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&self.prefix))
            })
            .collect())
    }

    async fn get(&self, name: &str) -> Result<Value, ApiError> {
        self.client.get(&leases(), &self.namespace, name).await
    }

    async fn create(&self, lease: &Value) -> Result<Value, ApiError> {
        self.client.create(&leases(), &self.namespace, lease).await
    }

    async fn update(&self, lease: &Value) -> Result<Value, ApiError> {
        self.client.update(&leases(), &self.namespace, lease).await
    }

    async fn delete(&self, name: &str, resource_version: &str) -> Result<(), ApiError> {
        let p = DeleteParams {
            resource_version: resource_version.to_string(),
            ..DeleteParams::default()
        };
        self.client
            .delete(&leases(), &self.namespace, name, &p)
            .await
            .map(|_| ())
    }
}

/// A replica's shard leases. [`ShardLeaseManager::handle`] tells controllers which shards they
/// may work on; [`ShardLeaseManager::run`] acquires, renews, balances and releases the leases
/// until shutdown.
pub struct ShardLeaseManager {
    inner: Manager<ApiLeaseStore>,
}

impl ShardLeaseManager {
    /// The shard leases of the replica `identity` (unique among replicas; it names the
    /// replica's membership Lease, so it must fit in a Lease name).
    pub fn new(
        client: Client,
        identity: impl Into<String>,
        config: ShardLeaseConfig,
    ) -> Result<ShardLeaseManager, ShardLeaseError> {
        let store = ApiLeaseStore {
            client,
            namespace: config.namespace.clone(),
            prefix: format!("{}-", config.name),
        };
        Ok(ShardLeaseManager {
            inner: Manager::new(store, identity.into(), config)?,
        })
    }

    pub fn handle(&self) -> ShardHandle {
        self.inner.handle()
    }

    /// Registers `keel_shard_leases_held`, `keel_shard_lease_acquisitions` and
    /// `keel_shard_lease_handovers` into `registry` (once per registry).
    pub fn register_metrics(&self, registry: &mut Registry) {
        let m = &self.inner.metrics;
        registry.register(
            "keel_shard_leases_held",
            "Shards this replica holds within their renew deadline",
            m.held.clone(),
        );
        registry.register(
            "keel_shard_lease_acquisitions",
            "Shard leases taken (created, or taken over free or expired)",
            m.acquisitions.clone(),
        );
        registry.register(
            "keel_shard_lease_handovers",
            "Shard leases released after draining, for another replica to take",
            m.handovers.clone(),
        );
    }

    /// Runs rounds until `shutdown` completes; then stops new work on every shard, waits for
    /// work in flight (up to the drain timeout) and releases every lease at once. If its task
    /// is aborted instead, the handle reports nothing held and the leases lapse.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        self.inner.run(shutdown).await
    }
}

/// One write of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Renew(u32),
    Acquire(u32),
    /// Hand the shard over: it drained (or timed out), and was given up locally first.
    Release(u32),
    /// Create or renew this replica's membership lease.
    Member,
    /// Delete a peer's expired membership lease.
    Forget(String),
}

enum Request {
    Create(Value),
    Update(Value),
    Delete {
        name: String,
        resource_version: String,
    },
}

/// What a round saw in the leases.
#[derive(Debug, Default)]
struct View {
    /// Shards whose lease names this replica (lapsed locally or not).
    mine: BTreeSet<u32>,
    /// Shards with no lease, a released one, or an expired one.
    free: Vec<u32>,
    /// Every live replica and how many shards it holds, this one included.
    held: BTreeMap<String, u32>,
    /// When the first lease held by a peer expires (unless renewed).
    next_expiry: Option<Instant>,
    /// Peers' membership leases that expired (or were released).
    dead_members: Vec<String>,
}

pub(crate) struct Manager<S> {
    store: S,
    config: ShardLeaseConfig,
    names: Names,
    identity: String,
    /// This replica's membership lease.
    member: String,
    shared: Arc<Shared>,
    metrics: ShardMetrics,
    /// Every shard and membership lease as last read, by name.
    observed: BTreeMap<String, Observed>,
    /// Shards being handed over, and since when they drain.
    draining: BTreeMap<u32, Instant>,
    /// Rounds in a row above the fair share (see [`balance::SETTLE_ROUNDS`]).
    surplus_rounds: u32,
    /// Whether the membership lease was written: peers count this replica only from then on,
    /// so it takes no shard before (replicas starting together would each grab them all).
    announced: bool,
    /// Shutting down: renew only, take and release nothing until everything is released at once.
    stopping: bool,
}

/// A manager dropped (its task aborted) holds nothing: handles must not keep reporting shards
/// nobody renews.
impl<S> Drop for Manager<S> {
    fn drop(&mut self) {
        self.shared.clear();
    }
}

impl<S: LeaseStore> Manager<S> {
    pub(crate) fn new(
        store: S,
        identity: String,
        config: ShardLeaseConfig,
    ) -> Result<Self, ShardLeaseError> {
        config.validate()?;
        let names = Names::new(&config);
        let member = names.member(&identity);
        let errs = keel_api::validation::dns1123_subdomain(&member);
        if identity.is_empty() || !errs.is_empty() {
            return Err(ShardLeaseError::Identity(identity, member, errs.join("; ")));
        }
        let metrics = ShardMetrics::default();
        let shared = Arc::new(Shared::new(
            config.count,
            identity.clone(),
            metrics.held.clone(),
        ));
        Ok(Manager {
            store,
            config,
            names,
            identity,
            member,
            shared,
            metrics,
            observed: BTreeMap::new(),
            draining: BTreeMap::new(),
            surplus_rounds: 0,
            announced: false,
            stopping: false,
        })
    }

    pub(crate) fn handle(&self) -> ShardHandle {
        ShardHandle::new(Arc::clone(&self.shared))
    }

    pub(crate) async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = pin!(shutdown);
        let shared = Arc::clone(&self.shared);
        let mut lapses = pin!(follow_lapses(&shared, self.config.timing.retry_period));
        loop {
            // Lapses take effect on time even while a round waits on a slow server.
            let next = tokio::select! {
                _ = &mut shutdown => break,
                never = &mut lapses => match never {},
                next = self.round() => next,
            };
            tokio::select! {
                _ = &mut shutdown => break,
                never = &mut lapses => match never {},
                _ = sleep_until(next) => {}
            }
        }
        self.shut_down().await;
    }

    /// One round: a List of the leases, the balancing decision, and every write at once.
    /// Returns when the next round is due.
    async fn round(&mut self) -> Instant {
        let timing = self.config.timing;
        let started = Instant::now();
        let period = timing
            .retry_period
            .mul_f64(1.0 + ROUND_JITTER * random_fraction());
        let next = started + period;
        let deadline = started + timing.renew_deadline;
        let leases = match timeout_at(deadline, self.store.list()).await {
            Ok(Ok(leases)) => leases,
            Ok(Err(e)) => {
                tracing::warn!(identity = %self.identity, error = %e, "cannot list the shard leases");
                return next;
            }
            Err(_) => {
                tracing::warn!(identity = %self.identity, "listing the shard leases timed out");
                return next;
            }
        };
        // Observed when the List answered, not when it was sent: a peer's renewal seen in it
        // may have landed just before the answer, and its lease runs from then.
        let now = Instant::now();
        self.observe_all(leases, now);
        let view = self.view(now);
        let ops = self.decide(&view, now);
        let raced = self.write(ops, deadline).await;
        self.shared.publish(Instant::now());
        // A peer took a shard this replica reached for: look again soon (spread, so the two
        // do not meet again), rather than a round later.
        let next = if raced {
            let soon = timing
                .retry_period
                .mul_f64(RACE_RETRY * (1.0 + random_fraction()));
            next.min(Instant::now() + soon)
        } else {
            next
        };
        // A peer's lease that runs out changes the balance (its shards are free, one replica
        // fewer): look again then. A healthy peer's lease never runs out before the next
        // round, so this costs nothing while all is well.
        match view.next_expiry {
            Some(expiry) => {
                let spread = timing
                    .retry_period
                    .mul_f64(EXPIRY_JITTER * random_fraction());
                next.min(expiry + spread)
            }
            None => next,
        }
    }

    fn observe_all(&mut self, leases: Vec<Value>, now: Instant) {
        let mut observed = BTreeMap::new();
        for lease in leases {
            let Some(name) = lease["metadata"]["name"].as_str().map(str::to_string) else {
                continue;
            };
            if self.names.parse_shard(&name).is_none() && !self.names.is_member(&name) {
                continue;
            }
            let o = Observed::new(lease, now, self.observed.get(&name));
            observed.insert(name, o);
        }
        self.observed = observed;
    }

    fn observe(&mut self, name: String, lease: Value, now: Instant) {
        let o = Observed::new(lease, now, self.observed.get(&name));
        self.observed.insert(name, o);
    }

    fn view(&self, now: Instant) -> View {
        let default = self.config.timing.lease_duration;
        let me = self.identity.as_str();
        let mut view = View::default();
        view.held.insert(me.to_string(), 0);
        let mut expiry = |o: &Observed| {
            let e = o.expires(default);
            view.next_expiry = Some(view.next_expiry.map_or(e, |n: Instant| n.min(e)));
        };
        for i in 0..self.config.count {
            let Some(o) = self.observed.get(&self.names.shard(i)) else {
                view.free.push(i);
                continue;
            };
            match o.verdict(now, me, default) {
                Verdict::Renew => {
                    view.mine.insert(i);
                    *view.held.entry(me.to_string()).or_default() += 1;
                }
                Verdict::Acquire => view.free.push(i),
                Verdict::HeldByOther => {
                    expiry(o);
                    *view.held.entry(o.record.holder.clone()).or_default() += 1;
                }
            }
        }
        for (name, o) in &self.observed {
            if !self.names.is_member(name) || *name == self.member {
                continue;
            }
            match o.verdict(now, me, default) {
                Verdict::HeldByOther => {
                    expiry(o);
                    view.held.entry(o.record.holder.clone()).or_default();
                }
                Verdict::Acquire => view.dead_members.push(name.clone()),
                // Another name with this identity: a former configuration; not ours to touch.
                Verdict::Renew => {}
            }
        }
        view
    }

    /// Decides the round's writes, and marks shards draining or not.
    fn decide(&mut self, view: &View, now: Instant) -> Vec<Op> {
        let mut ops = Vec::new();
        if !self.stopping {
            self.forget_lost(view);
            let target = balance::fair_share(self.config.count, &self.identity, &view.held);
            self.surplus_rounds = if view.mine.len() > target as usize {
                self.surplus_rounds.saturating_add(1)
            } else {
                0
            };
            let free: &[u32] = if self.announced { &view.free } else { &[] };
            let draining: BTreeSet<u32> = self.draining.keys().copied().collect();
            let plan = balance::plan(
                target,
                &view.mine,
                &draining,
                free,
                self.surplus_rounds >= balance::SETTLE_ROUNDS,
                (random_fraction() * 1e9) as usize,
            );
            if !plan.keep.is_empty() {
                tracing::info!(identity = %self.identity, shards = ?plan.keep, target, "keeping shards after all");
            }
            for s in &plan.keep {
                self.draining.remove(s);
                self.shared.set_draining(*s, false);
            }
            if !plan.drain.is_empty() {
                tracing::info!(identity = %self.identity, shards = ?plan.drain, held = view.mine.len(), target, "handing shards over: draining");
            }
            for s in &plan.drain {
                self.draining.insert(*s, now);
                self.shared.set_draining(*s, true);
            }
            // New work stops at once on draining shards (informers keep them until given up).
            self.shared.publish(now);
            ops.extend(plan.acquire.iter().map(|s| Op::Acquire(*s)));
        }
        for s in &view.mine {
            match self.draining.get(s) {
                Some(since) if !self.stopping => {
                    let late = now >= *since + self.config.drain_timeout;
                    let in_flight = self.shared.in_flight(*s);
                    if self.shared.give_up(*s, late).is_ok() {
                        if in_flight > 0 {
                            tracing::warn!(identity = %self.identity, shard = s, in_flight, "work still in flight after the drain timeout; releasing anyway");
                        }
                        ops.push(Op::Release(*s));
                    } else {
                        ops.push(Op::Renew(*s));
                    }
                }
                _ => ops.push(Op::Renew(*s)),
            }
        }
        ops.push(Op::Member);
        ops.extend(view.dead_members.iter().cloned().map(Op::Forget));
        ops
    }

    /// Shards whose lease no longer names this replica are not ours, whatever we believed.
    fn forget_lost(&mut self, view: &View) {
        for s in 0..self.config.count {
            if view.mine.contains(&s) {
                continue;
            }
            if self.shared.is_valid(s) {
                tracing::warn!(identity = %self.identity, shard = s, "lost a shard lease before its renew deadline");
            }
            self.shared.invalidate(s);
            self.shared.set_draining(s, false);
            self.draining.remove(&s);
        }
    }

    /// The request of an op, from the lease as last read.
    fn request(&self, op: &Op, wall: &str) -> Option<Request> {
        let secs = self.config.timing.lease_seconds();
        let claim = |name: &str| {
            Some(match self.observed.get(name) {
                Some(o) => {
                    let mut lease = o.lease.clone();
                    o.record
                        .claimed(&self.identity, secs, wall.to_string())
                        .write_to(&mut lease);
                    Request::Update(lease)
                }
                None => Request::Create(
                    LeaseRecord::created(&self.identity, secs, wall.to_string())
                        .to_lease(&self.config.namespace, name),
                ),
            })
        };
        match op {
            Op::Renew(s) | Op::Acquire(s) => claim(&self.names.shard(*s)),
            Op::Member => claim(&self.member),
            Op::Release(s) => {
                let o = self.observed.get(&self.names.shard(*s))?;
                let mut lease = o.lease.clone();
                o.record.released(wall.to_string()).write_to(&mut lease);
                Some(Request::Update(lease))
            }
            Op::Forget(name) => {
                let o = self.observed.get(name)?;
                Some(Request::Delete {
                    name: name.clone(),
                    resource_version: o.lease["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                })
            }
        }
    }

    /// Sends every op at once, each bounded by `deadline`, and takes in the answers. True if
    /// an acquisition lost a race to a peer.
    async fn write(&mut self, ops: Vec<Op>, deadline: Instant) -> bool {
        let wall = micro_time(SystemTime::now());
        let requests: Vec<(Op, Request)> = ops
            .into_iter()
            .filter_map(|op| self.request(&op, &wall).map(|r| (op, r)))
            .collect();
        let store = &self.store;
        // One start for the whole batch, taken before any write is sent: every renewal of a
        // round then lapses at the same instant (one wake-up, not one per shard, which a busy
        // runtime would stretch out), and no earlier than the lease that write renewed.
        let started = Instant::now();
        let answers = futures::future::join_all(requests.into_iter().map(|(op, r)| async move {
            let call = async {
                match r {
                    Request::Create(lease) => store.create(&lease).await.map(Some),
                    Request::Update(lease) => store.update(&lease).await.map(Some),
                    Request::Delete {
                        name,
                        resource_version,
                    } => store.delete(&name, &resource_version).await.map(|()| None),
                }
            };
            let answer = timeout_at(deadline, call).await.unwrap_or_else(|_| {
                Err(ApiError::timeout(
                    Target::new("coordination.k8s.io", "leases", ""),
                    "the shard lease write did not finish within the renew deadline",
                ))
            });
            (op, started, answer)
        }))
        .await;
        self.take_in(answers)
    }

    fn take_in(&mut self, answers: Vec<(Op, Instant, Result<Option<Value>, ApiError>)>) -> bool {
        let mut raced = false;
        let now = Instant::now();
        let renew_deadline = self.config.timing.renew_deadline;
        let (mut acquired, mut released, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        let mut first_error = None;
        for (op, started, answer) in answers {
            match (op, answer) {
                (Op::Renew(s), Ok(Some(lease))) => {
                    self.observe(self.names.shard(s), lease, now);
                    self.shared.set_valid(s, started + renew_deadline);
                }
                (Op::Acquire(s), Ok(Some(lease))) => {
                    self.observe(self.names.shard(s), lease, now);
                    self.shared.set_valid(s, started + renew_deadline);
                    self.metrics.acquisitions.inc();
                    acquired.push(s);
                }
                (Op::Release(s), Ok(Some(lease))) => {
                    self.observe(self.names.shard(s), lease, now);
                    self.draining.remove(&s);
                    self.shared.set_draining(s, false);
                    self.metrics.handovers.inc();
                    released.push(s);
                }
                (Op::Member, Ok(Some(lease))) => {
                    self.observe(self.member.clone(), lease, now);
                    self.announced = true;
                }
                (Op::Forget(name), Ok(_)) => {
                    self.observed.remove(&name);
                }
                (_, Ok(_)) => {}
                // Lost a race to a peer's write: the next List tells who won.
                (op, Err(e))
                    if matches!(
                        e.reason,
                        Reason::Conflict | Reason::AlreadyExists | Reason::NotFound
                    ) =>
                {
                    raced |= matches!(op, Op::Acquire(_));
                }
                (op, Err(e)) => {
                    failed.push(op);
                    first_error.get_or_insert(e);
                }
            }
        }
        if !acquired.is_empty() {
            tracing::info!(identity = %self.identity, shards = ?acquired, "acquired shard leases");
        }
        if !released.is_empty() {
            tracing::info!(identity = %self.identity, shards = ?released, "handed shards over: released");
        }
        if let Some(e) = first_error {
            tracing::warn!(identity = %self.identity, ops = ?failed, error = %e, "shard lease writes failed");
        }
        raced
    }
}

impl<S: LeaseStore> Manager<S> {
    /// Stops new work on every shard, waits for work in flight (renewing meanwhile, so that no
    /// lease lapses under running work), then releases every lease at once.
    async fn shut_down(&mut self) {
        self.stopping = true;
        self.shared.drain_all();
        self.shared.publish(Instant::now());
        let shared = Arc::clone(&self.shared);
        let drained = {
            let idle = shared.wait_idle(Instant::now() + self.config.drain_timeout);
            tokio::select! {
                idle = idle => idle,
                never = self.renew_forever() => match never {},
            }
        };
        if !drained {
            tracing::warn!(identity = %self.identity, "work still in flight after the drain timeout; releasing every shard anyway");
        }
        self.release_all().await;
    }

    async fn renew_forever(&mut self) -> Infallible {
        loop {
            let next = self.round().await;
            sleep_until(next).await;
        }
    }

    /// Releases every lease naming this replica, from a fresh read (a write cut short by the
    /// shutdown may have landed unseen), or else from the last one; deletes the membership
    /// lease, so that peers count one replica less at once.
    async fn release_all(&mut self) {
        self.shared.clear();
        let deadline = Instant::now() + self.config.timing.renew_deadline;
        if let Ok(Ok(leases)) = timeout_at(deadline, self.store.list()).await {
            self.observe_all(leases, Instant::now());
        }
        let mine: Vec<(u32, Value)> = (0..self.config.count)
            .filter_map(|s| {
                let o = self.observed.get(&self.names.shard(s))?;
                (o.record.holder == self.identity).then(|| (s, o.lease.clone()))
            })
            .collect();
        let (store, identity) = (&self.store, self.identity.as_str());
        let releases =
            futures::future::join_all(mine.into_iter().map(|(s, lease)| async move {
                (s, release(store, lease, identity, deadline).await)
            }));
        let forget = timeout_at(deadline, store.delete(&self.member, ""));
        let (results, _) = futures::join!(releases, forget);
        let mut released = Vec::new();
        for (s, r) in results {
            match r {
                Ok(true) => released.push(s),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(identity = %self.identity, shard = s, error = %e, "cannot release the shard lease; it lapses")
                }
            }
        }
        self.metrics.handovers.inc_by(released.len() as u64);
        tracing::info!(identity = %self.identity, shards = ?released, "shut down: released shard leases");
        self.draining.clear();
        self.observed.clear();
    }
}

/// Clears `holderIdentity` of `lease` if it names `identity`; a stale copy (Conflict) is read
/// again and released from that. True if it was released by this call.
async fn release<S: LeaseStore>(
    store: &S,
    mut lease: Value,
    identity: &str,
    deadline: Instant,
) -> Result<bool, ApiError> {
    let timed_out = || {
        ApiError::timeout(
            Target::new("coordination.k8s.io", "leases", ""),
            "releasing the shard lease did not finish within the renew deadline",
        )
    };
    for _attempt in 0..3 {
        let record = LeaseRecord::from_lease(&lease);
        if record.holder != identity {
            return Ok(false);
        }
        record
            .released(micro_time(SystemTime::now()))
            .write_to(&mut lease);
        match timeout_at(deadline, store.update(&lease)).await {
            Ok(Ok(_)) => return Ok(true),
            Ok(Err(e)) if e.reason == Reason::Conflict => {
                let name = lease["metadata"]["name"].as_str().unwrap_or("").to_string();
                match timeout_at(deadline, store.get(&name)).await {
                    Ok(Ok(fresh)) => lease = fresh,
                    Ok(Err(e)) if e.reason == Reason::NotFound => return Ok(false),
                    Ok(Err(e)) => return Err(e),
                    Err(_) => return Err(timed_out()),
                }
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(timed_out()),
        }
    }
    Err(ApiError::conflict(
        Target::new("coordination.k8s.io", "leases", ""),
        "the shard lease kept changing while it was released",
    ))
}

/// Publishes the active shards whenever a held one lapses (is not renewed within its renew
/// deadline), and at least every `retry`. Never returns.
async fn follow_lapses(shared: &Shared, retry: Duration) -> Infallible {
    loop {
        let now = Instant::now();
        let wake = shared
            .next_lapse(now)
            .map_or(now + retry, |lapse| lapse.min(now + retry));
        sleep_until(wake).await;
        let lapsed = shared.publish(Instant::now());
        if !lapsed.is_empty() {
            tracing::warn!(shards = ?lapsed, "shard leases lapsed: not renewed within the renew deadline");
        }
    }
}
