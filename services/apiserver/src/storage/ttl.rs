//! Objects that expire: core Events live `--event-ttl` (1 h) after their last write, as
//! Kubernetes keeps them, carried out by etcd leases so that expiry costs the API server
//! nothing. As Kubernetes' `LeaseManager`, one lease serves many writes: it is granted for the
//! TTL plus a reuse window (5 % of the TTL, at most a minute) and handed to writes while at
//! least the TTL is left of it, up to 1,000 objects, so an object lives between the TTL and
//! the TTL plus the window.

use std::sync::Mutex;
use std::time::Duration;

use keel_api::ApiError;
use tokio::time::Instant;

use crate::etcd::{KeyValue, LeaseId};

/// Objects one lease is handed to before a new one is granted (Kubernetes' `MaxObjectCount`).
const MAX_OBJECTS: usize = 1000;
/// The longest reuse window (Kubernetes' `ReuseDurationSeconds`).
const MAX_REUSE: Duration = Duration::from_secs(60);

pub struct LeaseManager {
    ttl: Duration,
    reuse: Duration,
    /// The lease being handed out: its id, when it expires, and how many writes took it.
    current: Mutex<Option<(LeaseId, Instant, usize)>>,
}

impl LeaseManager {
    pub fn new(ttl: Duration) -> LeaseManager {
        LeaseManager {
            ttl,
            reuse: (ttl / 20).min(MAX_REUSE),
            current: Mutex::new(None),
        }
    }

    /// A lease with at least the TTL left: the current one, or a new one.
    pub async fn lease(&self, kv: &dyn KeyValue, deadline: Instant) -> Result<LeaseId, ApiError> {
        let now = Instant::now();
        if let Some(id) = self.reuse_at(now) {
            return Ok(id);
        }
        let life = self.ttl + self.reuse;
        let seconds = i64::try_from(life.as_secs().max(1)).unwrap_or(i64::MAX);
        let id = kv.grant_lease(seconds, deadline).await?;
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        *cur = Some((id, now + Duration::from_secs(seconds.unsigned_abs()), 1));
        Ok(id)
    }

    fn reuse_at(&self, now: Instant) -> Option<LeaseId> {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        match cur.as_mut() {
            Some((id, expires, n)) if *expires >= now + self.ttl && *n < MAX_OBJECTS => {
                *n += 1;
                Some(*id)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::mem::MemEtcd;

    #[tokio::test(start_paused = true)]
    async fn a_lease_serves_writes_while_the_ttl_is_left_of_it() {
        let kv = MemEtcd::new();
        let far = Instant::now() + Duration::from_secs(3600);
        let m = LeaseManager::new(Duration::from_secs(3600));
        assert_eq!(m.reuse, Duration::from_secs(60));
        let first = m.lease(&kv, far).await.unwrap();
        assert_eq!(m.lease(&kv, far).await.unwrap(), first);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(
            m.lease(&kv, far + Duration::from_secs(60)).await.unwrap(),
            first
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        let second = m.lease(&kv, far + Duration::from_secs(60)).await.unwrap();
        assert_ne!(second, first, "less than the TTL left: a new lease");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_serves_at_most_a_thousand_objects() {
        let kv = MemEtcd::new();
        let far = Instant::now() + Duration::from_secs(60);
        let m = LeaseManager::new(Duration::from_secs(20));
        let first = m.lease(&kv, far).await.unwrap();
        for _ in 1..MAX_OBJECTS {
            assert_eq!(m.lease(&kv, far).await.unwrap(), first);
        }
        assert_ne!(m.lease(&kv, far).await.unwrap(), first);
    }
}
