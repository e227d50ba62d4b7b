//! Controller metrics: queue depth, queue latency, reconcile duration, retries and errors,
//! labelled by controller.
//!
//! The metric families are process-wide, as client-go's work-queue metrics are: each
//! controller is one label value of the same families. A registry gets the families once,
//! however many controllers register into it, since a family named twice in one exposition
//! is invalid.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

const QUEUE_DEPTH: &str = "keel_controller_queue_depth";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

type HistogramFamily = Family<ControllerLabel, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    // 1 ms to 33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

#[derive(Clone)]
struct Families {
    depth: Family<ControllerLabel, Gauge>,
    queue_latency: HistogramFamily,
    work_duration: HistogramFamily,
    retries: Family<ControllerLabel, Counter>,
    errors: Family<ControllerLabel, Counter>,
}

static FAMILIES: LazyLock<Families> = LazyLock::new(|| Families {
    depth: Family::default(),
    queue_latency: Family::new_with_constructor(seconds_histogram),
    work_duration: Family::new_with_constructor(seconds_histogram),
    retries: Family::default(),
    errors: Family::default(),
});

/// The work queue's share: updated by the queue itself.
#[derive(Clone, Debug)]
pub(crate) struct QueueMetrics {
    /// Keys ready and waiting for a worker.
    pub depth: Gauge,
    /// Seconds from a key being queued to a worker taking it.
    pub latency: Histogram,
    /// Rate-limited re-queues.
    pub retries: Counter,
}

/// One controller's metrics.
#[derive(Clone, Debug)]
pub(crate) struct ControllerMetrics {
    pub queue: QueueMetrics,
    /// Seconds one reconcile took.
    pub work_duration: Histogram,
    /// Reconciles that returned an error (or panicked).
    pub errors: Counter,
}

impl ControllerMetrics {
    /// The metrics of `controller`, with the families registered into `registry` unless it
    /// has them already.
    pub fn register(registry: &mut Registry, controller: &str) -> ControllerMetrics {
        let f = &*FAMILIES;
        let label = ControllerLabel {
            controller: controller.to_string(),
        };
        // Made before the registry is searched: an exposition leaves empty families out, and
        // these families are never empty from here on.
        let metrics = ControllerMetrics {
            queue: QueueMetrics {
                depth: f.depth.get_or_create_owned(&label),
                latency: f.queue_latency.get_or_create_owned(&label),
                retries: f.retries.get_or_create_owned(&label),
            },
            work_duration: f.work_duration.get_or_create_owned(&label),
            errors: f.errors.get_or_create_owned(&label),
        };
        if !has_family(registry, QUEUE_DEPTH) {
            registry.register(
                QUEUE_DEPTH,
                "Keys waiting in a controller's work queue",
                f.depth.clone(),
            );
            registry.register(
                "keel_controller_queue_latency_seconds",
                "How long a key waits in the work queue before a worker takes it",
                f.queue_latency.clone(),
            );
            registry.register(
                "keel_controller_reconcile_duration_seconds",
                "How long one reconcile takes",
                f.work_duration.clone(),
            );
            registry.register(
                "keel_controller_retries",
                "Keys re-queued with rate limiting after a failed reconcile",
                f.retries.clone(),
            );
            registry.register(
                "keel_controller_reconcile_errors",
                "Reconciles that failed",
                f.errors.clone(),
            );
        }
        metrics
    }
}

/// Whether `registry` exposes a family whose name ends with `name` (a registry may prefix
/// names). The registry offers no lookup, so its exposition is read: once per controller, at
/// start-up.
fn has_family(registry: &Registry, name: &str) -> bool {
    let mut text = String::new();
    if prometheus_client::encoding::text::encode_registry(&mut text, registry).is_err() {
        return false;
    }
    text.lines().any(|line| {
        line.strip_prefix("# TYPE ")
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|family| family.ends_with(name))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn exposition(r: &Registry) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, r).unwrap();
        s
    }

    #[test]
    fn controllers_share_one_family_per_registry() {
        let mut r = Registry::with_prefix("app");
        let a = ControllerMetrics::register(&mut r, "metrics-test-a");
        let b = ControllerMetrics::register(&mut r, "metrics-test-b");
        a.errors.inc();
        b.errors.inc_by(2);
        b.queue.depth.set(7);
        let text = exposition(&r);
        let types: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("# TYPE app_keel_controller_reconcile_errors "))
            .collect();
        assert_eq!(types.len(), 1, "{text}");
        assert!(text.contains(
            "app_keel_controller_reconcile_errors_total{controller=\"metrics-test-a\"} 1"
        ));
        assert!(text.contains(
            "app_keel_controller_reconcile_errors_total{controller=\"metrics-test-b\"} 2"
        ));
        assert!(text.contains("app_keel_controller_queue_depth{controller=\"metrics-test-b\"} 7"));
    }

    #[test]
    fn registering_one_controller_twice_registers_the_families_once() {
        let mut r = Registry::default();
        assert!(!has_family(&r, QUEUE_DEPTH));
        ControllerMetrics::register(&mut r, "metrics-test-twice");
        assert!(has_family(&r, QUEUE_DEPTH));
        ControllerMetrics::register(&mut r, "metrics-test-twice");
        let text = exposition(&r);
        assert_eq!(
            text.matches("# TYPE keel_controller_queue_depth ").count(),
            1,
            "{text}"
        );
    }
}
