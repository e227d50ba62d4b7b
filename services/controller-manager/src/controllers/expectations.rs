//! Expectations: what a controller has asked the API server for and not yet seen in its cache.
//!
//! A controller that creates Pods and reconciles again before its informer has seen them would
//! count too few and create again. So before it writes, it records how many creations and
//! which deletions it expects; the informer's handlers check them off as the events arrive, and
//! the controller does not act on a key until its expectations are met (or have expired: a
//! lost event must not wedge the key forever). As Kubernetes' `ControllerExpectations`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use keel_runtime::ObjectKey;
use tokio::time::Instant;

/// Kubernetes' `ExpectationsTimeout`.
pub const TIMEOUT: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
struct Expected {
    adds: i64,
    deletes: HashSet<String>,
    since: Instant,
}

/// Shared between a controller's workers and its handlers. Bounded: one entry per owner key
/// with outstanding writes, removed when the owner is gone.
#[derive(Clone, Default)]
pub struct Expectations(Arc<Mutex<HashMap<ObjectKey, Expected>>>);

impl Expectations {
    fn lock(&self) -> MutexGuard<'_, HashMap<ObjectKey, Expected>> {
        // A panic elsewhere while holding the lock leaves counters that are still usable.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the controller may act on `key`: nothing outstanding, or expired.
    pub fn satisfied(&self, key: &ObjectKey) -> bool {
        match self.lock().get(key) {
            None => true,
            Some(e) => (e.adds <= 0 && e.deletes.is_empty()) || e.since.elapsed() > TIMEOUT,
        }
    }

    /// Before creating `n` objects for `key`.
    pub fn expect_creations(&self, key: &ObjectKey, n: usize) {
        let mut m = self.lock();
        let e = m.entry(key.clone()).or_insert_with(|| Expected {
            adds: 0,
            deletes: HashSet::new(),
            since: Instant::now(),
        });
        e.adds = i64::try_from(n).unwrap_or(i64::MAX);
        e.since = Instant::now();
    }

    /// Before deleting these objects (by name) of `key`.
    pub fn expect_deletions(&self, key: &ObjectKey, names: impl IntoIterator<Item = String>) {
        let mut m = self.lock();
        let e = m.entry(key.clone()).or_insert_with(|| Expected {
            adds: 0,
            deletes: HashSet::new(),
            since: Instant::now(),
        });
        e.deletes.extend(names);
        e.since = Instant::now();
    }

    /// A creation seen in the cache, or one that failed and will never be seen.
    pub fn creation_observed(&self, key: &ObjectKey) {
        if let Some(e) = self.lock().get_mut(key) {
            e.adds -= 1;
        }
    }

    /// A deletion seen in the cache, or one that failed and will never be seen.
    pub fn deletion_observed(&self, key: &ObjectKey, name: &str) {
        if let Some(e) = self.lock().get_mut(key) {
            e.deletes.remove(name);
        }
    }

    /// The owner is gone: forget it.
    pub fn forget(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn expectations_are_met_by_observations_or_expire() {
        let x = Expectations::default();
        let k = ObjectKey::new("ns", "rs");
        assert!(x.satisfied(&k));
        x.expect_creations(&k, 2);
        x.expect_deletions(&k, ["p1".to_string()]);
        assert!(!x.satisfied(&k));
        x.creation_observed(&k);
        x.creation_observed(&k);
        assert!(!x.satisfied(&k), "a deletion is still outstanding");
        x.deletion_observed(&k, "p1");
        assert!(x.satisfied(&k));

        x.expect_creations(&k, 1);
        assert!(!x.satisfied(&k));
        tokio::time::advance(TIMEOUT + Duration::from_secs(1)).await;
        assert!(x.satisfied(&k), "expired");
        x.forget(&k);
        assert!(x.satisfied(&k));
    }
}
