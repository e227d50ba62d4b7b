//! The repair of the Service ranges (Kubernetes' cluster IP and node port `Repair`
//! controllers): at start-up, then every `--service-range-repair-interval` (Kubernetes: 3
//! minutes), each range's bitmap is rebuilt from the values every Service holds and written
//! by compare-and-swap on the revision it was read at. A value a Service holds but the bitmap
//! lacks is marked (a range key lost, or written before the Service existed: an upgrade); a
//! value marked that no Service holds is freed once enough repairs in a row found it so
//! (`allocator::plan`: what a create that crashed between its allocation and its write leaves).
//! Until its first repair, a replica is not ready and refuses allocations: an empty range key
//! would hand out values Services already hold.
//!
//! Order matters: the bitmap is read before the Services are listed (from etcd, not the
//! cache). An allocation after the read makes the write lose its compare-and-swap (and the
//! repair starts over); one before it whose Service is not written yet looks like a leak,
//! which is not freed for longer than any request can take.

use std::sync::Arc;
use std::time::Duration;

use keel_api::{ApiError, Object};
use tokio::time::Instant;

use crate::registry::allocator::{self, Leaks, Pool, REPAIRS_BEFORE_LEAK_CLEANUP, Range, Stored};
use crate::registry::{Filter, ListOptions, Registry};

/// How long one repair may take.
const REPAIR_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts of one repair that lose their compare-and-swap before it waits for the next run.
const ATTEMPTS: usize = 5;
/// Services listed per page.
const PAGE: i64 = 500;
/// How long a value must have been found leaked before it is freed, whatever the interval:
/// longer than any request can take (a deadline is at most 120 s), so that a create between
/// its allocation and its write is never robbed.
pub const LEAK_GRACE: Duration = Duration::from_secs(150);

/// Repairs the ranges of [`Registry::allocators`] ([`ServiceRangeRepair::run`]).
pub struct ServiceRangeRepair {
    pub(super) registry: Arc<Registry>,
    /// Time between repairs.
    pub(super) interval: Duration,
    /// How long a value must have been leaked before it is freed ([`LEAK_GRACE`]).
    pub(super) grace: Duration,
    /// What earlier repairs found leaked, per pool ([`Pool::ALL`]'s order).
    leaks: [Leaks; 2],
}

impl ServiceRangeRepair {
    pub fn new(registry: Arc<Registry>, interval: Duration) -> ServiceRangeRepair {
        ServiceRangeRepair {
            registry,
            interval,
            grace: LEAK_GRACE,
            leaks: Default::default(),
        }
    }

    /// Repairs now, then every interval; the first success makes the replica ready. A failure
    /// is tried again soon while the ranges were never repaired, else at the next interval.
    pub async fn run(mut self) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let wait = match self.repair_once().await {
                Ok(()) => {
                    self.registry.set_ranges_repaired();
                    self.interval
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot repair the Service ranges yet");
                    // Soon while the replica waits for it to be ready.
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    if self.registry.ranges_repaired() {
                        self.interval
                    } else {
                        backoff
                    }
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// One repair of both ranges, starting over (at most [`ATTEMPTS`] times) when another
    /// writer moved a range meanwhile.
    pub async fn repair_once(&mut self) -> Result<(), ApiError> {
        let deadline = Instant::now() + REPAIR_TIMEOUT;
        let allocators = self.registry.allocators().clone();
        for _ in 0..ATTEMPTS {
            let mut stored: Vec<Stored> = Vec::with_capacity(Pool::ALL.len());
            for pool in Pool::ALL {
                stored.push(allocators.pool(pool).stored(deadline).await?);
            }
            let held = self.held(deadline).await?;
            let now = Instant::now();
            let mut lost = false;
            let mut repairs = Vec::with_capacity(Pool::ALL.len());
            for (i, pool) in Pool::ALL.into_iter().enumerate() {
                let allocator = allocators.pool(pool);
                let range = allocator.range();
                let values = held
                    .iter()
                    .filter(|(p, _)| *p == pool)
                    .map(|(_, v)| v.clone());
                let repair = allocator::plan(
                    range,
                    stored[i].bitmap.as_ref(),
                    values,
                    &self.leaks[i],
                    now,
                    self.grace,
                );
                if stored[i].bitmap.as_ref() != Some(&repair.bitmap)
                    && !allocator
                        .overwrite(stored[i].revision, &repair.bitmap, deadline)
                        .await?
                {
                    lost = true;
                    break;
                }
                repairs.push(repair);
            }
            if lost {
                continue;
            }
            for ((i, pool), repair) in Pool::ALL.into_iter().enumerate().zip(repairs) {
                report(pool, allocators.pool(pool).range(), &repair);
                self.leaks[i].commit(repair);
            }
            return Ok(());
        }
        Err(ApiError::conflict(
            Default::default(),
            "the Service ranges kept changing during their repair; trying again at the next one",
        ))
    }

    /// Every value every object of a kind with allocations holds (Services, initialized or
    /// not, marked for deletion or not), read from etcd a page at a time.
    async fn held(&self, deadline: Instant) -> Result<Vec<(Pool, String)>, ApiError> {
        let mut held = Vec::new();
        for info in self.registry.resources() {
            let kind = self.registry.kind(&info);
            let Some(alloc) = kind.allocations() else {
                continue;
            };
            let mut continue_token = String::new();
            loop {
                let opts = ListOptions {
                    filter: Filter {
                        include_uninitialized: true,
                        ..Filter::default()
                    },
                    limit: PAGE,
                    continue_token,
                    ..ListOptions::default()
                };
                let page = self.registry.list(&info, opts, deadline).await?;
                for item in &page.items {
                    let Ok(obj) = Object::from_slice(item) else {
                        continue;
                    };
                    held.extend(
                        alloc
                            .claims(&obj)
                            .into_iter()
                            .filter_map(|c| Some((c.pool, c.value?))),
                    );
                }
                if page.continue_token.is_empty() {
                    break;
                }
                continue_token = page.continue_token;
            }
        }
        Ok(held)
    }
}

/// Logs what a repair found, as Kubernetes' repair records events.
fn report(pool: Pool, range: &Range, repair: &allocator::Repair) {
    let r = pool.resource();
    for v in &repair.marked {
        let v = range.show(*v);
        tracing::warn!(range = r, value = %v, "a Service's value was not marked in {range}; marked now");
    }
    for v in &repair.duplicates {
        let v = range.show(*v);
        tracing::warn!(range = r, value = %v, "a value is held by more than one Service");
    }
    for v in &repair.out_of_range {
        tracing::warn!(range = r, value = %v, "a Service holds a value outside {range}");
    }
    for v in &repair.leaked {
        let v = range.show(*v);
        tracing::info!(range = r, value = %v, "a value no Service holds; freed once {REPAIRS_BEFORE_LEAK_CLEANUP} repairs in a row find it so");
    }
    for v in &repair.freed {
        let v = range.show(*v);
        tracing::warn!(range = r, value = %v, "freed a leaked value no Service holds");
    }
}

#[cfg(test)]
mod tests {
    use keel_api::Reason;
    use serde_json::{Value, json};

    use super::*;
    use crate::registry::allocator::{Bitmap, Claim};
    use crate::registry::testing::{Fixture, far};

    fn service(name: &str, ip: &str) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"clusterIP": ip, "ports": [{"port": 80}]},
        })
    }

    async fn marked(f: &Fixture) -> Vec<String> {
        let a = f.registry.allocators().pool(Pool::ClusterIps);
        let stored = a.stored(far()).await.unwrap().bitmap.unwrap();
        stored
            .iter()
            .map(|i| a.range().show(a.range().value_at(i)))
            .collect()
    }

    /// A repair with no grace: leaks go on the third repair in a row.
    fn hasty(f: &Fixture) -> ServiceRangeRepair {
        ServiceRangeRepair {
            grace: Duration::ZERO,
            ..ServiceRangeRepair::new(f.registry.clone(), Duration::from_secs(1))
        }
    }

    #[tokio::test]
    async fn a_services_ip_missing_from_the_range_is_marked_again() {
        let f = Fixture::new().await;
        f.create(service("a", "10.96.0.9")).await.unwrap();
        // The range loses the mark (written over by a replica that crashed mid-way, say).
        let a = f.registry.allocators().pool(Pool::ClusterIps);
        let stored = a.stored(far()).await.unwrap();
        let empty = Bitmap::new(a.range().max());
        assert!(a.overwrite(stored.revision, &empty, far()).await.unwrap());
        hasty(&f).repair_once().await.unwrap();
        assert_eq!(marked(&f).await, ["10.96.0.9"]);
        let e = f.create(service("b", "10.96.0.9")).await.unwrap_err();
        assert_eq!(e.reason, Reason::Invalid, "{e:?}");
    }

    #[tokio::test]
    async fn a_value_no_service_holds_is_freed_by_the_third_repair_in_a_row() {
        let f = Fixture::new().await;
        f.create(service("a", "10.96.0.9")).await.unwrap();
        // An allocation whose Service was never written (its replica crashed).
        let leak = Claim {
            pool: Pool::ClusterIps,
            field: "spec.clusterIPs".into(),
            at: 0,
            value: Some("10.96.0.10".into()),
        };
        f.registry
            .allocators()
            .allocate(&Default::default(), &[&leak], false, far())
            .await
            .unwrap();
        let mut repair = hasty(&f);
        for _ in 0..2 {
            repair.repair_once().await.unwrap();
            assert_eq!(marked(&f).await, ["10.96.0.9", "10.96.0.10"]);
        }
        repair.repair_once().await.unwrap();
        assert_eq!(marked(&f).await, ["10.96.0.9"]);
        f.create(service("b", "10.96.0.10")).await.unwrap();
    }

    #[tokio::test]
    async fn a_leak_younger_than_any_request_can_be_is_kept_however_many_repairs_found_it() {
        let f = Fixture::new().await;
        let leak = Claim {
            pool: Pool::ClusterIps,
            field: "spec.clusterIPs".into(),
            at: 0,
            value: Some("10.96.0.10".into()),
        };
        f.registry
            .allocators()
            .allocate(&Default::default(), &[&leak], false, far())
            .await
            .unwrap();
        // Every second, as a test might set the interval: a create between its allocation
        // and its write keeps its value.
        let mut repair = ServiceRangeRepair::new(f.registry.clone(), Duration::from_secs(1));
        for _ in 0..5 {
            repair.repair_once().await.unwrap();
        }
        assert_eq!(marked(&f).await, ["10.96.0.10"]);
    }

    #[tokio::test]
    async fn until_the_first_repair_writes_a_range_allocations_are_refused() {
        let f = Fixture::new().await;
        f.create(service("a", "10.96.0.9")).await.unwrap();
        let key = f
            .registry
            .allocators()
            .pool(Pool::ClusterIps)
            .key()
            .to_string();
        f.storage.mem.delete(&key);
        let e = f.create(service("b", "")).await.unwrap_err();
        assert_eq!(e.reason, Reason::ServiceUnavailable);
        assert_eq!(
            e.message,
            "cannot allocate resources of type serviceipallocations at this time"
        );
        assert_eq!(e.retry_after_seconds, Some(1));
        hasty(&f).repair_once().await.unwrap();
        assert_eq!(marked(&f).await, ["10.96.0.9"], "rebuilt from the Services");
        f.create(service("b", "")).await.unwrap();
    }
}
