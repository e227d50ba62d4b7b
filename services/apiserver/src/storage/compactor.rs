//! Periodic compaction of etcd history: every interval, compact to the revision seen one
//! interval earlier, so watchers and paged lists keep at least one interval of history.

use std::time::Duration;

use tokio::time::Instant;

use std::sync::Arc;

use crate::etcd::KeyValue;

/// Compacts until the process ends. Several replicas may each compact: compacting a revision
/// that is already compacted is refused by etcd and ignored here.
pub async fn run(kv: Arc<dyn KeyValue>, interval: Duration) {
    let mut previous: Option<i64> = None;
    let mut tick = tokio::time::interval(interval);
    tick.tick().await;
    loop {
        tick.tick().await;
        let deadline = Instant::now() + Duration::from_secs(30);
        let now = match kv.current_revision(deadline).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "compactor: cannot read the current revision");
                continue;
            }
        };
        if let Some(rev) = previous {
            match kv.compact(rev, deadline).await {
                Ok(()) => tracing::info!(revision = rev, "compacted etcd history"),
                Err(e) => tracing::debug!(revision = rev, error = %e, "compaction skipped"),
            }
        }
        previous = Some(now);
    }
}
