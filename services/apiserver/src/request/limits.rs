//! Limits, so that no client can starve the others: requests in flight, by kind (read-only and
//! mutating, as Kubernetes' `--max-requests-inflight` and `--max-mutating-requests-inflight`),
//! open watches (counted apart: they are long-running), and a token bucket per user. Past any
//! of them a request gets `TooManyRequests` at once, with a hint of when to retry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_api::{ApiError, Target};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::auth::User;
use crate::metrics::Metrics;

/// A group whose members no limit applies to, as Kubernetes' priority and fairness exempts
/// it: its members run the cluster, and must get through when others flood.
const EXEMPT_GROUP: &str = "system:masters";

/// Users whose buckets are kept at most; past it the idle ones (full buckets) are forgotten,
/// else the least recently used tenth (a forgotten bucket only starts full again).
const MAX_TRACKED_USERS: usize = 10_000;

/// How long a client told to slow down by the in-flight limits waits (Kubernetes: 1 s).
const RETRY_AFTER_IN_FLIGHT: u32 = 1;

/// The limits' settings (flags).
#[derive(Debug, Clone, Copy)]
pub struct LimitsConfig {
    /// Get and List in flight at once (0: no limit).
    pub max_read_only: usize,
    /// Create, Update, Patch and Delete in flight at once (0: no limit).
    pub max_mutating: usize,
    /// Watches open at once (0: no limit).
    pub max_watches: usize,
    /// Requests per second each user may make, on average (0: no limit).
    pub user_qps: f64,
    /// Requests a user may make at once above the average.
    pub user_burst: u32,
}

/// What kind of request a verb is, for the in-flight limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    ReadOnly,
    Mutating,
    /// Long-running: held for as long as the watch is open.
    Watch,
}

/// A request's place among those in flight: held until it is answered (a watch: closed).
pub struct Slot {
    _permit: Option<OwnedSemaphorePermit>,
    /// The in-flight gauge of its kind, counted down when the slot is given back.
    gauge: Option<Gauge>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(g) = &self.gauge {
            g.dec();
        }
    }
}

pub struct Limits {
    read_only: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
    watches: Option<Arc<Semaphore>>,
    users: Option<UserBuckets>,
    /// Requests in flight, by kind (`keel_apiserver_current_inflight_requests`).
    read_only_gauge: Gauge,
    mutating_gauge: Gauge,
}

impl Limits {
    pub fn new(config: LimitsConfig, metrics: &Metrics) -> Limits {
        let semaphore = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        Limits {
            read_only_gauge: metrics.inflight("readOnly"),
            mutating_gauge: metrics.inflight("mutating"),
            read_only: semaphore(config.max_read_only),
            mutating: semaphore(config.max_mutating),
            watches: semaphore(config.max_watches),
            users: (config.user_qps > 0.0).then(|| UserBuckets {
                rate: config.user_qps,
                burst: f64::from(config.user_burst.max(1)),
                buckets: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Admits a request of `class` from `user` (`None`: no authentication, nobody to limit
    /// per user), or refuses it with `TooManyRequests`.
    pub fn admit(&self, class: Class, user: Option<&User>) -> Result<Slot, ApiError> {
        let (semaphore, gauge) = match class {
            Class::ReadOnly => (&self.read_only, Some(&self.read_only_gauge)),
            Class::Mutating => (&self.mutating, Some(&self.mutating_gauge)),
            Class::Watch => (&self.watches, None),
        };
        let slot = |permit| {
            if let Some(g) = gauge {
                g.inc();
            }
            Ok(Slot {
                _permit: permit,
                gauge: gauge.cloned(),
            })
        };
        let exempt = user.is_some_and(|u| u.groups.iter().any(|g| g == EXEMPT_GROUP));
        if exempt {
            return slot(None);
        }
        // The place first: a request refused for want of one costs its user no token.
        let permit = match semaphore {
            Some(semaphore) => match semaphore.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    let message = match class {
                        Class::Watch => "too many watches open, please try again later",
                        _ => "Too many requests, please try again later.",
                    };
                    return Err(ApiError::too_many_requests(Target::default(), message)
                        .retry_after(RETRY_AFTER_IN_FLIGHT));
                }
            },
            None => None,
        };
        if let (Some(users), Some(user)) = (&self.users, user) {
            users.take(&user.name)?;
        }
        slot(permit)
    }
}

/// A token bucket per user name.
struct UserBuckets {
    /// Tokens added per second.
    rate: f64,
    /// Tokens a bucket holds at most (and starts with).
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl UserBuckets {
    /// Takes one token from `user`'s bucket, or says how long until there is one.
    fn take(&self, user: &str) -> Result<(), ApiError> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if !buckets.contains_key(user) && buckets.len() >= MAX_TRACKED_USERS {
            // Forget the idle (full again) buckets; if none is, the least recently used tenth:
            // a forgotten bucket only starts full again.
            let full = Duration::try_from_secs_f64(self.burst / self.rate).unwrap_or(Duration::MAX);
            buckets.retain(|_, b| now.duration_since(b.at) < full);
            if buckets.len() >= MAX_TRACKED_USERS {
                let mut ages: Vec<Instant> = buckets.values().map(|b| b.at).collect();
                ages.sort_unstable();
                if let Some(&cut) = ages.get(MAX_TRACKED_USERS / 10) {
                    buckets.retain(|_, b| b.at > cut);
                }
            }
        }
        let b = buckets.entry(user.to_string()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * self.rate).min(self.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            return Ok(());
        }
        let wait = ((1.0 - b.tokens) / self.rate).ceil().max(1.0);
        let message = format!(
            "the user {user:?} is over its request rate ({} per second); please try again later",
            self.rate
        );
        Err(ApiError::too_many_requests(Target::default(), message).retry_after(wait as u32))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use keel_api::Reason;

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..User::default()
        }
    }

    fn limits(max: usize, user_qps: f64, user_burst: u32) -> Limits {
        let config = LimitsConfig {
            max_read_only: max,
            max_mutating: max,
            max_watches: max,
            user_qps,
            user_burst,
        };
        Limits::new(config, &Metrics::new())
    }

    #[test]
    fn requests_past_the_in_flight_limit_are_told_to_retry() {
        let l = limits(2, 0.0, 0);
        let a = l.admit(Class::Mutating, None).unwrap();
        let _b = l.admit(Class::Mutating, None).unwrap();
        let e = l.admit(Class::Mutating, None).err().unwrap();
        assert_eq!(e.reason, Reason::TooManyRequests);
        assert_eq!(e.retry_after_seconds, Some(1));
        // Reads and watches have limits of their own.
        let _r = l.admit(Class::ReadOnly, None).unwrap();
        let _w = l.admit(Class::Watch, None).unwrap();
        assert_eq!(l.mutating_gauge.get(), 2);
        drop(a);
        assert_eq!(l.mutating_gauge.get(), 1);
        assert!(l.admit(Class::Mutating, None).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn each_user_has_a_bucket_of_their_own() {
        let l = limits(0, 10.0, 5);
        let (alice, bob) = (user("alice", &[]), user("bob", &[]));
        for _ in 0..5 {
            l.admit(Class::Mutating, Some(&alice)).unwrap();
        }
        let e = l.admit(Class::ReadOnly, Some(&alice)).err().unwrap();
        assert_eq!(e.reason, Reason::TooManyRequests);
        assert!(e.message.contains("\"alice\""), "{}", e.message);
        assert_eq!(e.retry_after_seconds, Some(1));
        assert!(l.admit(Class::Mutating, Some(&bob)).is_ok());
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(l.admit(Class::Mutating, Some(&alice)).is_ok());
        assert!(l.admit(Class::Mutating, Some(&alice)).is_err());
    }

    #[test]
    fn system_masters_and_unauthenticated_requests_have_no_user_limit() {
        let l = limits(1, 1.0, 1);
        let admin = user("admin", &["system:masters"]);
        let _held = l.admit(Class::Mutating, Some(&user("a", &[]))).unwrap();
        for _ in 0..10 {
            assert!(l.admit(Class::Mutating, Some(&admin)).is_ok());
        }
        let l = limits(0, 1.0, 1);
        for _ in 0..10 {
            assert!(l.admit(Class::Mutating, None).is_ok());
        }
    }

    #[test]
    fn a_request_refused_a_place_costs_no_token() {
        let l = limits(1, 1.0, 1);
        let alice = user("alice", &[]);
        let held = l.admit(Class::Mutating, None).unwrap();
        let e = l.admit(Class::Mutating, Some(&alice)).err().unwrap();
        assert_eq!(e.message, "Too many requests, please try again later.");
        drop(held);
        // Her one token is still there.
        assert!(l.admit(Class::Mutating, Some(&alice)).is_ok());
    }

    #[test]
    fn the_buckets_kept_are_bounded() {
        let l = limits(0, 1.0, 1);
        for i in 0..MAX_TRACKED_USERS + 10 {
            l.admit(Class::ReadOnly, Some(&user(&format!("u{i}"), &[])))
                .unwrap();
        }
        let kept = l.users.as_ref().unwrap().buckets.lock().unwrap().len();
        assert!(kept <= MAX_TRACKED_USERS, "{kept}");
    }
}
