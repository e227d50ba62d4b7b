//! The handler every request goes through: deadline, resource lookup, the verb, metrics.

use std::sync::Arc;
use std::time::Duration;

use keel_api::{ApiError, GroupVersionResource, Reason, ResourceInfo};
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::registry::Registry;

/// Used when the client sets no deadline: long enough for a contended PATCH to land.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// No request holds server resources longer than this, whatever it asks for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(120);

/// A request of one verb, as every transport hands it over.
pub struct Request<V> {
    /// The resource it addresses (`None`: the client named none, a `BadRequest`).
    pub resource: Option<GroupVersionResource>,
    /// How long the client gives it (`None`: [`DEFAULT_TIMEOUT`]; at most [`MAX_TIMEOUT`]).
    pub timeout: Option<Duration>,
    pub verb: V,
}

/// What a verb has to work with once its resource is known.
pub struct Context<'a> {
    pub registry: &'a Registry,
    pub info: Arc<ResourceInfo>,
    /// When the request must be answered by.
    pub deadline: Instant,
    pub metrics: &'a Metrics,
}

/// One verb: its name in metrics, and what it does.
pub trait Verb: Send {
    const NAME: &'static str;
    type Output: Send;
    fn run(self, cx: Context<'_>) -> impl Future<Output = Result<Self::Output, ApiError>> + Send;
}

/// Runs requests against the registry.
pub struct Handler {
    registry: Arc<Registry>,
    metrics: Metrics,
}

impl Handler {
    pub fn new(registry: Arc<Registry>, metrics: Metrics) -> Handler {
        Handler { registry, metrics }
    }

    /// Serves one request: every verb of every transport comes through here.
    pub async fn handle<V: Verb>(&self, req: Request<V>) -> Result<V::Output, ApiError> {
        let start = Instant::now();
        let deadline = start + req.timeout.unwrap_or(DEFAULT_TIMEOUT).min(MAX_TIMEOUT);
        let label = resource_label(req.resource.as_ref());
        let out = match self.registry.lookup(req.resource.as_ref()) {
            Ok(info) => {
                let cx = Context {
                    registry: &self.registry,
                    info,
                    deadline,
                    metrics: &self.metrics,
                };
                req.verb.run(cx).await
            }
            Err(e) => Err(e),
        };
        let reason = out.as_ref().err().map(|e| e.reason);
        self.metrics
            .request(V::NAME, &label, reason, start.elapsed());
        if let Err(e) = &out
            && e.reason == Reason::InternalError
        {
            tracing::error!(verb = V::NAME, resource = %label, error = %e, "internal error");
        }
        out
    }

    /// Every served resource (discovery).
    pub fn resources(&self) -> Vec<Arc<ResourceInfo>> {
        self.registry.resources()
    }

    /// A custom resource's `additionalPrinterColumns` (none for a built-in one).
    pub fn printer_columns(&self, gvr: &GroupVersionResource) -> Vec<serde_json::Value> {
        self.registry.printer_columns(gvr)
    }

    /// Whether this replica can serve; else why not.
    pub async fn readiness(&self) -> Result<(), String> {
        self.registry.readiness().await
    }
}

/// The resource as metrics label it: `deployments.apps`, `pods`.
fn resource_label(r: Option<&GroupVersionResource>) -> String {
    r.map(|r| {
        if r.group.is_empty() {
            r.resource.clone()
        } else {
            format!("{}.{}", r.resource, r.group)
        }
    })
    .unwrap_or_default()
}
