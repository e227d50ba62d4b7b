//! The namespaces that always exist, created at start-up through the registry like any other
//! object; idempotent, so replicas starting together agree.

use std::time::Duration;

use keel_api::{GroupVersionResource, Object, Reason};
use tokio::time::Instant;

use super::deletion::PROTECTED_NAMESPACES;
use super::store::Registry;

/// How long one attempt to create a namespace may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

impl Registry {
    /// Creates the built-in namespaces, retrying with backoff until etcd takes them; readiness
    /// waits for it.
    pub async fn bootstrap(&self) {
        self.create_builtin_namespaces().await;
        self.set_bootstrapped();
    }

    async fn create_builtin_namespaces(&self) {
        let gvr = GroupVersionResource::new("", "v1", "namespaces");
        let Ok(info) = self.lookup(Some(&gvr)) else {
            return;
        };
        for name in PROTECTED_NAMESPACES {
            let mut backoff = Duration::from_millis(100);
            loop {
                let obj = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
                let Ok(obj) = Object::from_value(obj) else {
                    return;
                };
                match self
                    .create(&info, obj, Instant::now() + ATTEMPT_TIMEOUT)
                    .await
                {
                    Ok(_) => break,
                    Err(e) if e.reason == Reason::AlreadyExists => break,
                    Err(e) => {
                        tracing::warn!(namespace = name, error = %e, "cannot create a built-in namespace yet");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                    }
                }
            }
        }
    }
}
