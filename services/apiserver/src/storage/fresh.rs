//! Reads at a `resourceVersion` the store has not reached: they wait for it briefly, as
//! Kubernetes' watch cache does, and never answer with an older state than asked for.

use std::sync::Arc;
use std::time::Duration;

use keel_api::{ApiError, ResourceInfo, Target};
use tokio::time::{Instant, timeout_at};

use super::Store;

/// How long a read waits for a revision newer than etcd's (Kubernetes: 3 s).
pub const FRESH_WAIT: Duration = Duration::from_secs(3);
/// The first pause between reads of etcd's revision while a read waits, doubling: about
/// eight reads in the 3 s, most of them early, when a client just ahead of this replica by a
/// write or two sees the wait end soonest. (The watch cache of a quiet resource only advances
/// on progress notifications, so it cannot be waited on alone.)
const FIRST_PAUSE: Duration = Duration::from_millis(25);
/// The longest pause.
const MAX_PAUSE: Duration = Duration::from_millis(800);

impl Store {
    /// Returns once the store has reached revision `rv`: at once when the watch cache has it
    /// (the usual case: a client resuming from what a replica sent it), else when etcd's
    /// current revision does, within [`FRESH_WAIT`] (and `deadline`). Past that, Kubernetes'
    /// `Timeout` "Too large resource version".
    pub async fn wait_for_revision(
        &self,
        info: &Arc<ResourceInfo>,
        rv: i64,
        deadline: Instant,
    ) -> Result<(), ApiError> {
        let mut current = self.cache(info).revision();
        if current >= rv {
            return Ok(());
        }
        let until = deadline.min(Instant::now() + FRESH_WAIT);
        let mut pause = FIRST_PAUSE;
        let mut answered = false;
        loop {
            // A read still unanswered when the wait is over leaves the revision known so far,
            // if etcd answered at all; if it never did, that is the error, not the version.
            match timeout_at(until, self.kv.current_revision(deadline)).await {
                Ok(read) => {
                    current = current.max(read?);
                    answered = true;
                }
                Err(_) if !answered => {
                    return Err(ApiError::timeout(
                        Target::default(),
                        "etcd did not tell its revision within the wait for the requested resourceVersion",
                    ));
                }
                Err(_) => {}
            }
            current = current.max(self.cache(info).revision());
            if current >= rv {
                return Ok(());
            }
            if Instant::now() + pause > until {
                return Err(ApiError::too_large_resource_version(rv, current));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}
