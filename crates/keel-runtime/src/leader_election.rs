//! Leader election on a `coordination.k8s.io/v1` `Lease`, as client-go's `leaderelection`
//! does it.
//!
//! - Acquire: read the Lease; create it if missing (a lost race is `AlreadyExists`), or take
//!   it when it is free or its holder has not renewed it for a lease duration, with an
//!   update whose `resourceVersion` is the compare-and-swap. Retried every retry period
//!   (jittered, so that candidates do not collide in step).
//! - Renew: every retry period. A leader that could not renew within the renew deadline of
//!   its last renewal gives leadership up: since the renew deadline is shorter than the
//!   lease duration, it stops before anyone else may start.
//! - Release on shutdown: `holderIdentity` cleared, so a successor need not wait out the lease.
//!
//! Holding the lease is not fencing: a paused process may still write after it lost the
//! lease. Writes that matter carry `resourceVersion` preconditions.

use std::pin::pin;
use std::time::{Duration, SystemTime};

use futures::Future;
use keel_api::{ApiError, Reason};
use keel_client::{Client, gvr};
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::backoff::random_fraction;
use crate::lease::{LeaseRecord, Observed, Verdict, micro_time, verdict};

/// client-go's jitter of acquire retries: a retry waits `retry_period · (1 + 1.2·rand)`.
const ACQUIRE_JITTER: f64 = 1.2;

/// Which Lease, and who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseLock {
    pub namespace: String,
    pub name: String,
    /// Unique per candidate (e.g. the host name and a random suffix).
    pub identity: String,
}

/// Timing of an election; `lease_duration > renew_deadline > 1.2 · retry_period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// How long others wait, after they last saw the lease renewed, before taking it.
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it gives leadership up.
    pub renew_deadline: Duration,
    /// How often a leader renews and a candidate tries to acquire.
    pub retry_period: Duration,
}

impl Default for LeaderElectionConfig {
    /// client-go's: 15 s, 10 s, 2 s.
    fn default() -> Self {
        LeaderElectionConfig {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Why an election cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaderElectionError {
    /// A leader must give up before others may take over: the lease must outlast the renew
    /// deadline.
    #[error("the lease duration ({lease:?}) must be longer than the renew deadline ({renew:?})")]
    LeaseNotLongerThanRenewDeadline { lease: Duration, renew: Duration },
    /// A leader needs more than one (jittered) retry within its renew deadline.
    #[error(
        "the renew deadline ({renew:?}) must be longer than 1.2 × the retry period ({retry:?})"
    )]
    RenewDeadlineTooShort { renew: Duration, retry: Duration },
    #[error("the retry period must be positive")]
    ZeroRetryPeriod,
    #[error("the lease lock needs a namespace, a name and an identity")]
    IncompleteLock,
}

impl LeaderElectionConfig {
    pub fn validate(&self) -> Result<(), LeaderElectionError> {
        if self.retry_period.is_zero() {
            return Err(LeaderElectionError::ZeroRetryPeriod);
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(LeaderElectionError::LeaseNotLongerThanRenewDeadline {
                lease: self.lease_duration,
                renew: self.renew_deadline,
            });
        }
        if self.renew_deadline <= self.retry_period.mul_f64(ACQUIRE_JITTER) {
            return Err(LeaderElectionError::RenewDeadlineTooShort {
                renew: self.renew_deadline,
                retry: self.retry_period,
            });
        }
        Ok(())
    }

    /// The lease duration written into the Lease, in whole seconds, rounded up: others must
    /// never wait less than this candidate's deadline allows for.
    pub(crate) fn lease_seconds(&self) -> i64 {
        let d = self.lease_duration;
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
    }
}

/// Whether this candidate leads; cheap to clone.
#[derive(Debug, Clone)]
pub struct LeaderHandle {
    rx: watch::Receiver<bool>,
}

impl LeaderHandle {
    /// Whether this candidate holds the lease now (false again as soon as it gives up).
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// Waits until this candidate leads; false if the election ended first.
    pub async fn wait_for_leadership(&self) -> bool {
        let mut rx = self.rx.clone();
        rx.wait_for(|leader| *leader).await.is_ok()
    }

    /// Waits until this candidate no longer leads (or the election ended).
    pub async fn wait_for_loss(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|leader| !*leader).await;
    }

    /// A receiver of every change of leadership.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }
}

/// Reads and writes the Lease; a seam so that the election's timing is tested without a
/// server.
pub(crate) trait LeaseApi: Send + Sync + 'static {
    fn get(&self) -> impl Future<Output = Result<Value, ApiError>> + Send;
    fn create(&self, lease: &Value) -> impl Future<Output = Result<Value, ApiError>> + Send;
    /// Replaces the Lease; its `metadata.resourceVersion` is a precondition.
    fn update(&self, lease: &Value) -> impl Future<Output = Result<Value, ApiError>> + Send;
}

struct ApiLeases {
    client: Client,
    namespace: String,
    name: String,
}

pub(crate) fn leases() -> keel_api::GroupVersionResource {
    gvr("coordination.k8s.io", "v1", "leases")
}

impl LeaseApi for ApiLeases {
    async fn get(&self) -> Result<Value, ApiError> {
        self.client
            .get(&leases(), &self.namespace, &self.name)
            .await
    }

    async fn create(&self, lease: &Value) -> Result<Value, ApiError> {
        self.client.create(&leases(), &self.namespace, lease).await
    }

    async fn update(&self, lease: &Value) -> Result<Value, ApiError> {
        self.client.update(&leases(), &self.namespace, lease).await
    }
}

/// A candidate for leadership. [`LeaderElection::handle`] tells whether it leads;
/// [`LeaderElection::run`] campaigns, leads, and campaigns again after losing, until shutdown.
pub struct LeaderElection {
    elector: Elector<ApiLeases>,
}

impl LeaderElection {
    pub fn new(
        client: Client,
        lock: LeaseLock,
        config: LeaderElectionConfig,
    ) -> Result<LeaderElection, LeaderElectionError> {
        let api = ApiLeases {
            client,
            namespace: lock.namespace.clone(),
            name: lock.name.clone(),
        };
        Ok(LeaderElection {
            elector: Elector::new(api, lock, config)?,
        })
    }

    pub fn handle(&self) -> LeaderHandle {
        self.elector.handle()
    }

    pub fn is_leader(&self) -> bool {
        self.handle().is_leader()
    }

    /// Campaigns and leads until `shutdown` completes; then, if leading, stops leading (the
    /// handle turns false first) and releases the lease. After losing the lease it
    /// campaigns again: watch the handle to stop work while not leading.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        self.elector.run(shutdown).await
    }
}

/// A candidate whose `run` was dropped (its task aborted) leads no more: handles must not keep
/// the last `true` they saw.
impl<L> Drop for Elector<L> {
    fn drop(&mut self) {
        self.leader.send_replace(false);
    }
}

/// What one attempt at the lease came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// We hold it, renewed now.
    Held,
    /// Someone else holds it.
    HeldByOther,
    /// Lost a race (a concurrent write): read again.
    Raced,
}

pub(crate) struct Elector<L> {
    api: L,
    lock: LeaseLock,
    config: LeaderElectionConfig,
    leader: watch::Sender<bool>,
    observed: Option<Observed>,
}

impl<L: LeaseApi> Elector<L> {
    pub(crate) fn new(
        api: L,
        lock: LeaseLock,
        config: LeaderElectionConfig,
    ) -> Result<Self, LeaderElectionError> {
        config.validate()?;
        if lock.namespace.is_empty() || lock.name.is_empty() || lock.identity.is_empty() {
            return Err(LeaderElectionError::IncompleteLock);
        }
        Ok(Elector {
            api,
            lock,
            config,
            leader: watch::channel(false).0,
            observed: None,
        })
    }

    pub(crate) fn handle(&self) -> LeaderHandle {
        LeaderHandle {
            rx: self.leader.subscribe(),
        }
    }

    pub(crate) async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                renewed_at = self.acquire() => {
                    self.leader.send_replace(true);
                    tracing::info!(lease = %self.lock.name, identity = %self.lock.identity, "became leader");
                    let lost = tokio::select! {
                        _ = &mut shutdown => false,
                        _ = self.lead(renewed_at) => true,
                    };
                    self.leader.send_replace(false);
                    if !lost {
                        self.release().await;
                        return;
                    }
                    tracing::warn!(lease = %self.lock.name, identity = %self.lock.identity, "lost leadership");
                }
            }
        }
    }

    /// Tries until the lease is ours; returns when the successful attempt started.
    async fn acquire(&mut self) -> Instant {
        loop {
            let started = Instant::now();
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Held) => return started,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(lease = %self.lock.name, error = %e, "cannot acquire the lease")
                }
            }
            let wait = self
                .config
                .retry_period
                .mul_f64(1.0 + ACQUIRE_JITTER * random_fraction());
            tokio::time::sleep(wait).await;
        }
    }

    /// Renews every retry period; returns when leadership is lost: another holder, or no
    /// renewal within the renew deadline of the last one.
    async fn lead(&mut self, mut renewed_at: Instant) {
        loop {
            tokio::time::sleep_until(renewed_at + self.config.retry_period).await;
            let deadline = renewed_at + self.config.renew_deadline;
            loop {
                let started = Instant::now();
                if started >= deadline {
                    return;
                }
                match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                    Ok(Ok(Attempt::Held)) => {
                        renewed_at = started;
                        break;
                    }
                    Ok(Ok(Attempt::HeldByOther)) => return,
                    Ok(Ok(Attempt::Raced)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(lease = %self.lock.name, error = %e, "cannot renew the lease")
                    }
                    Err(_) => return,
                }
                let retry = (Instant::now() + self.config.retry_period).min(deadline);
                tokio::time::sleep_until(retry).await;
            }
        }
    }

    /// One read and, if the lease is ours or free, one compare-and-swap.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, ApiError> {
        let now = Instant::now();
        let wall = micro_time(SystemTime::now());
        let identity = self.lock.identity.clone();
        let lease = match self.api.get().await {
            Ok(lease) => lease,
            Err(e) if e.reason == Reason::NotFound => {
                let record = LeaseRecord::created(&identity, self.config.lease_seconds(), wall);
                let lease = record.to_lease(&self.lock.namespace, &self.lock.name);
                return match self.api.create(&lease).await {
                    Ok(created) => {
                        self.observe(created, now);
                        Ok(Attempt::Held)
                    }
                    Err(e) if e.reason == Reason::AlreadyExists => Ok(Attempt::Raced),
                    Err(e) => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        self.observe(lease.clone(), now);
        let Some(observed) = &self.observed else {
            return Ok(Attempt::Raced);
        };
        let old = observed.record.clone();
        match verdict(
            &old,
            observed.at,
            now,
            &identity,
            self.config.lease_duration,
        ) {
            Verdict::HeldByOther => return Ok(Attempt::HeldByOther),
            Verdict::Renew | Verdict::Acquire => {}
        }
        let record = old.claimed(&identity, self.config.lease_seconds(), wall);
        let mut updated = lease;
        record.write_to(&mut updated);
        match self.api.update(&updated).await {
            Ok(written) => {
                self.observe(written, now);
                Ok(Attempt::Held)
            }
            Err(e) if e.reason == Reason::Conflict => Ok(Attempt::Raced),
            Err(e) => Err(e),
        }
    }

    /// Remembers the Lease; its observation time moves only when its record changed.
    fn observe(&mut self, lease: Value, now: Instant) {
        self.observed = Some(Observed::new(lease, now, self.observed.as_ref()));
    }

    /// Clears `holderIdentity` if the lease is still ours, so a successor takes over at once.
    /// A renewal cut short by the shutdown may have landed unseen, so a stale copy is refused
    /// with Conflict: then the lease is read again and, if still ours, released from that.
    async fn release(&mut self) {
        let Some(observed) = &self.observed else {
            return;
        };
        if observed.record.holder != self.lock.identity {
            return;
        }
        let mut lease = observed.lease.clone();
        let held = observed.record.clone();
        let deadline = Instant::now() + self.config.renew_deadline;
        for _attempt in 0..3 {
            let record = held.released(micro_time(SystemTime::now()));
            record.write_to(&mut lease);
            match tokio::time::timeout_at(deadline, self.api.update(&lease)).await {
                Ok(Ok(released)) => {
                    self.observe(released, Instant::now());
                    tracing::info!(lease = %self.lock.name, identity = %self.lock.identity, "released the lease");
                    return;
                }
                Ok(Err(e)) if e.reason == Reason::Conflict => {
                    match tokio::time::timeout_at(deadline, self.api.get()).await {
                        Ok(Ok(fresh))
                            if LeaseRecord::from_lease(&fresh).holder == self.lock.identity =>
                        {
                            lease = fresh;
                        }
                        // Someone else holds it now, or it is gone: nothing of ours to release.
                        Ok(Ok(_)) => return,
                        Ok(Err(e)) => {
                            tracing::warn!(lease = %self.lock.name, error = %e, "cannot release the lease");
                            return;
                        }
                        Err(_) => break,
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.lock.name, error = %e, "cannot release the lease");
                    return;
                }
                Err(_) => break,
            }
        }
        tracing::warn!(lease = %self.lock.name, "releasing the lease did not finish in time");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use keel_api::Target;
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    /// One Lease in memory with a resourceVersion counter, shared by candidates; `down`
    /// makes every call fail as if the server were unreachable.
    #[derive(Clone, Default)]
    struct MemLease {
        inner: Arc<Mutex<Mem>>,
    }

    #[derive(Default)]
    struct Mem {
        lease: Option<Value>,
        rv: u64,
        down: bool,
        writes: Vec<(Duration, String)>,
        start: Option<Instant>,
    }

    impl MemLease {
        fn new() -> MemLease {
            let m = MemLease::default();
            m.inner.lock().unwrap().start = Some(Instant::now());
            m
        }

        fn set_down(&self, down: bool) {
            self.inner.lock().unwrap().down = down;
        }

        fn spec(&self) -> Value {
            self.inner.lock().unwrap().lease.as_ref().unwrap()["spec"].clone()
        }

        fn call(
            &self,
            f: impl FnOnce(&mut Mem) -> Result<Value, ApiError>,
        ) -> Result<Value, ApiError> {
            let mut m = self.inner.lock().unwrap();
            if m.down {
                return Err(ApiError::unavailable("down"));
            }
            f(&mut m)
        }
    }

    impl Mem {
        fn write(&mut self, mut lease: Value) -> Value {
            self.rv += 1;
            lease["metadata"]["resourceVersion"] = json!(self.rv.to_string());
            let at = self.start.unwrap().elapsed();
            let holder = lease["spec"]["holderIdentity"]
                .as_str()
                .unwrap_or("")
                .to_string();
            self.writes.push((at, holder));
            self.lease = Some(lease.clone());
            lease
        }
    }

    fn target() -> Target {
        Target::new("coordination.k8s.io", "leases", "lock")
    }

    impl LeaseApi for MemLease {
        fn get(&self) -> impl Future<Output = Result<Value, ApiError>> + Send {
            let r = self.call(|m| m.lease.clone().ok_or_else(|| ApiError::not_found(target())));
            async move { r }
        }

        fn create(&self, lease: &Value) -> impl Future<Output = Result<Value, ApiError>> + Send {
            let r = self.call(|m| {
                if m.lease.is_some() {
                    return Err(ApiError::already_exists(target()));
                }
                Ok(m.write(lease.clone()))
            });
            async move { r }
        }

        fn update(&self, lease: &Value) -> impl Future<Output = Result<Value, ApiError>> + Send {
            let r = self.call(|m| {
                let current = m
                    .lease
                    .as_ref()
                    .ok_or_else(|| ApiError::not_found(target()))?;
                if current["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"] {
                    return Err(ApiError::conflict(target(), "stale"));
                }
                Ok(m.write(lease.clone()))
            });
            async move { r }
        }
    }

    fn config() -> LeaderElectionConfig {
        LeaderElectionConfig::default()
    }

    fn candidate(api: &MemLease, identity: &str) -> Elector<MemLease> {
        let lock = LeaseLock {
            namespace: "ns".into(),
            name: "lock".into(),
            identity: identity.into(),
        };
        Elector::new(api.clone(), lock, config()).unwrap()
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// Runs a candidate until the returned sender fires (or is dropped).
    fn spawn(
        e: Elector<MemLease>,
    ) -> (
        LeaderHandle,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let handle = e.handle();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(e.run(async move {
            let _ = stopped.await;
        }));
        (handle, stop, task)
    }

    #[test]
    fn configs_are_validated_like_client_go() {
        assert_eq!(config().validate(), Ok(()));
        let c = LeaderElectionConfig {
            renew_deadline: secs(15),
            ..config()
        };
        assert!(matches!(
            c.validate(),
            Err(LeaderElectionError::LeaseNotLongerThanRenewDeadline { .. })
        ));
        let c = LeaderElectionConfig {
            retry_period: secs(9),
            ..config()
        };
        assert!(matches!(
            c.validate(),
            Err(LeaderElectionError::RenewDeadlineTooShort { .. })
        ));
        let lock = LeaseLock {
            namespace: "ns".into(),
            name: "lock".into(),
            identity: String::new(),
        };
        assert!(matches!(
            Elector::new(MemLease::default(), lock, config()),
            Err(LeaderElectionError::IncompleteLock)
        ));
    }

    /// A renewal cut short by the shutdown can land without the elector seeing it: its copy of
    /// the lease is then stale, and the release must still happen (else a successor waits out
    /// the whole lease).
    #[tokio::test(start_paused = true)]
    async fn a_release_from_a_stale_copy_reads_the_lease_again() {
        let api = MemLease::new();
        let (handle, stop, task) = spawn(candidate(&api, "a"));
        assert!(handle.wait_for_leadership().await);
        {
            let mut m = api.inner.lock().unwrap();
            let unseen = m.lease.clone().unwrap();
            m.write(unseen);
        }
        stop.send(()).unwrap();
        task.await.unwrap();
        assert_eq!(
            api.spec()["holderIdentity"],
            "",
            "released despite the stale copy"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_candidate_creates_the_lease_and_renews_every_retry_period() {
        let api = MemLease::new();
        let (handle, stop, task) = spawn(candidate(&api, "a"));
        assert!(handle.wait_for_leadership().await);
        let spec = api.spec();
        assert_eq!(spec["holderIdentity"], "a");
        assert_eq!(spec["leaseDurationSeconds"], 15);
        assert_eq!(spec["leaseTransitions"], 0);
        let renew = spec["renewTime"].as_str().unwrap().to_string();
        assert_eq!(renew.len(), "2024-01-01T00:00:00.000000Z".len(), "{renew}");
        tokio::time::sleep(secs(7)).await;
        let writes: Vec<Duration> = api
            .inner
            .lock()
            .unwrap()
            .writes
            .iter()
            .map(|w| w.0)
            .collect();
        assert_eq!(writes, [secs(0), secs(2), secs(4), secs(6)]);
        stop.send(()).unwrap();
        task.await.unwrap();
        assert!(!handle.is_leader());
        assert_eq!(api.spec()["holderIdentity"], "", "released on shutdown");
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_cannot_renew_gives_up_at_the_renew_deadline_before_the_lease_ends() {
        let api = MemLease::new();
        let (leader, _stop, _task) = spawn(candidate(&api, "a"));
        assert!(leader.wait_for_leadership().await);
        tokio::time::sleep(secs(3)).await; // renewed at 2 s
        api.set_down(true);
        let t0 = Instant::now();
        leader.wait_for_loss().await;
        // Last renewal at 2 s, deadline 10 s later: 12 s, i.e. 9 s from now.
        assert_eq!(t0.elapsed(), secs(9));
    }

    #[tokio::test(start_paused = true)]
    async fn a_candidate_takes_over_a_lease_duration_after_the_leader_stopped_renewing() {
        let api = MemLease::new();
        let (a, _stop_a, task_a) = spawn(candidate(&api, "a"));
        assert!(a.wait_for_leadership().await);
        let (b, _stop_b, _task_b) = spawn(candidate(&api, "b"));
        tokio::time::sleep(secs(30)).await;
        assert!(a.is_leader() && !b.is_leader(), "exactly one leader");

        // `a` dies without releasing (its last renewal is at most 2 s old).
        task_a.abort();
        let died = Instant::now();
        assert!(b.wait_for_leadership().await);
        let waited = died.elapsed();
        // a renewed at most 2 s before it died; b first saw that renewal within one of its
        // jittered retries (< 4.4 s) after it, waits 15 s from then, and takes the lease at its
        // next retry after that.
        assert!(waited >= secs(13), "{waited:?}");
        assert!(
            waited <= secs(15) + Duration::from_millis(8800),
            "{waited:?}"
        );
        let spec = api.spec();
        assert_eq!(spec["holderIdentity"], "b");
        assert_eq!(spec["leaseTransitions"], 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_lease_is_taken_within_a_retry() {
        let api = MemLease::new();
        let (a, stop_a, task_a) = spawn(candidate(&api, "a"));
        assert!(a.wait_for_leadership().await);
        let (b, _stop_b, _task_b) = spawn(candidate(&api, "b"));
        tokio::time::sleep(secs(5)).await;
        stop_a.send(()).unwrap();
        task_a.await.unwrap();
        let released = Instant::now();
        assert!(b.wait_for_leadership().await);
        assert!(released.elapsed() <= Duration::from_millis(4400));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_election_does_not_lead() {
        let api = MemLease::new();
        let (a, _stop, task) = spawn(candidate(&api, "a"));
        assert!(a.wait_for_leadership().await);
        task.abort();
        let _ = task.await;
        assert!(!a.is_leader());
        assert!(!a.wait_for_leadership().await, "the election ended");
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_lost_campaigns_again() {
        let api = MemLease::new();
        let (a, _stop, _task) = spawn(candidate(&api, "a"));
        assert!(a.wait_for_leadership().await);
        tokio::time::sleep(secs(1)).await;
        api.set_down(true);
        a.wait_for_loss().await;
        api.set_down(false);
        assert!(a.wait_for_leadership().await);
        assert_eq!(api.spec()["holderIdentity"], "a");
    }
}
