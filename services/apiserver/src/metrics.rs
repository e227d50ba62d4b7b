//! The API server's Prometheus metrics: requests by verb, resource and code, latencies, etcd
//! round trips, PATCH retries and batches, open watches.

use std::sync::Arc;
use std::time::Duration;

use keel_api::Reason;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: &'static str,
    resource: String,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    verb: &'static str,
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    request_kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    name: String,
    r#type: &'static str,
    operation: &'static str,
    /// `allowed`, `rejected` or `error`.
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLatencyLabels {
    name: String,
    r#type: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs .. ~6.5 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

fn batch_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 10))
}

struct Inner {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_duration: HistogramFamily<VerbLabels>,
    etcd_requests: Family<OperationLabels, Counter>,
    etcd_duration: HistogramFamily<OperationLabels>,
    etcd_retries: Family<OperationLabels, Counter>,
    etcd_member_up: Family<EndpointLabels, Gauge>,
    patch_retries: Family<ResourceLabels, Counter>,
    patch_batch_size: HistogramFamily<ResourceLabels>,
    watches: Family<ResourceLabels, Gauge>,
    watch_events: Family<ResourceLabels, Counter>,
    inflight: Family<KindLabels, Gauge>,
    webhook_calls: Family<WebhookLabels, Counter>,
    webhook_duration: HistogramFamily<WebhookLatencyLabels>,
}

/// Cheap to clone; every clone records into the same registry.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("keel_apiserver");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "API requests by verb, resource and gRPC code",
            requests.clone(),
        );
        let request_duration: HistogramFamily<VerbLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "request_duration_seconds",
            "API request latency",
            request_duration.clone(),
        );
        let etcd_requests = Family::<OperationLabels, Counter>::default();
        registry.register(
            "etcd_requests",
            "etcd round trips by operation",
            etcd_requests.clone(),
        );
        let etcd_duration: HistogramFamily<OperationLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "etcd_request_duration_seconds",
            "etcd round-trip latency",
            etcd_duration.clone(),
        );
        let etcd_retries = Family::<OperationLabels, Counter>::default();
        registry.register(
            "etcd_retries",
            "etcd calls sent again to another member after one failed or stopped answering",
            etcd_retries.clone(),
        );
        let etcd_member_up = Family::<EndpointLabels, Gauge>::default();
        registry.register(
            "etcd_member_up",
            "1 while the etcd member answers its health probes and gets calls, else 0",
            etcd_member_up.clone(),
        );
        let patch_retries = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "patch_retries",
            "PATCH compare-and-swap attempts lost to a concurrent writer and retried",
            patch_retries.clone(),
        );
        let patch_batch_size: HistogramFamily<ResourceLabels> =
            Family::new_with_constructor(batch_histogram);
        registry.register(
            "patch_batch_size",
            "PATCHes of one object committed in one compare-and-swap",
            patch_batch_size.clone(),
        );
        let watches = Family::<ResourceLabels, Gauge>::default();
        registry.register("watches", "Open watch streams", watches.clone());
        let watch_events = Family::<ResourceLabels, Counter>::default();
        registry.register(
            "watch_events_sent",
            "Watch events sent to clients",
            watch_events.clone(),
        );
        let inflight = Family::<KindLabels, Gauge>::default();
        registry.register(
            "current_inflight_requests",
            "Requests being served, by kind (readOnly, mutating), as Kubernetes counts them",
            inflight.clone(),
        );
        let webhook_calls = Family::<WebhookLabels, Counter>::default();
        registry.register(
            "admission_webhook_requests",
            "Admission webhook calls by webhook, type (admit, validating), operation and result \
             (allowed, rejected, error)",
            webhook_calls.clone(),
        );
        let webhook_duration: HistogramFamily<WebhookLatencyLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "admission_webhook_duration_seconds",
            "Admission webhook call latency, by webhook and type",
            webhook_duration.clone(),
        );
        Metrics(Arc::new(Inner {
            registry,
            requests,
            request_duration,
            etcd_requests,
            etcd_duration,
            etcd_retries,
            etcd_member_up,
            patch_retries,
            patch_batch_size,
            watches,
            watch_events,
            inflight,
            webhook_calls,
            webhook_duration,
        }))
    }

    /// One request served: its verb, resource, outcome (`None`: success; else the reason, as
    /// its gRPC code) and latency.
    pub fn request(
        &self,
        verb: &'static str,
        resource: &str,
        error: Option<Reason>,
        took: Duration,
    ) {
        let code = code_name(error.map_or(tonic::Code::Ok, keel_wire::code));
        self.0
            .requests
            .get_or_create(&RequestLabels {
                verb,
                resource: resource.into(),
                code,
            })
            .inc();
        self.0
            .request_duration
            .get_or_create(&VerbLabels {
                verb,
                resource: resource.into(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn etcd_request(&self, operation: &'static str, took: Duration) {
        let l = OperationLabels { operation };
        self.0.etcd_requests.get_or_create(&l).inc();
        self.0
            .etcd_duration
            .get_or_create(&l)
            .observe(took.as_secs_f64());
    }

    pub fn etcd_retry(&self, operation: &'static str) {
        let l = OperationLabels { operation };
        self.0.etcd_retries.get_or_create(&l).inc();
    }

    pub fn etcd_member_up(&self, endpoint: &str, up: bool) {
        let l = EndpointLabels {
            endpoint: endpoint.to_string(),
        };
        self.0.etcd_member_up.get_or_create(&l).set(i64::from(up));
    }

    pub fn patch_retry(&self, resource: &str) {
        self.0
            .patch_retries
            .get_or_create(&ResourceLabels {
                resource: resource.into(),
            })
            .inc();
    }

    pub fn patch_batch(&self, resource: &str, size: usize) {
        self.0
            .patch_batch_size
            .get_or_create(&ResourceLabels {
                resource: resource.into(),
            })
            .observe(size as f64);
    }

    /// The gauge of requests in flight of one kind (`readOnly`, `mutating`).
    pub fn inflight(&self, request_kind: &'static str) -> Gauge {
        self.0
            .inflight
            .get_or_create(&KindLabels { request_kind })
            .clone()
    }

    pub fn watch_opened(&self, resource: &str) {
        self.0
            .watches
            .get_or_create(&ResourceLabels {
                resource: resource.into(),
            })
            .inc();
    }

    pub fn watch_closed(&self, resource: &str) {
        self.0
            .watches
            .get_or_create(&ResourceLabels {
                resource: resource.into(),
            })
            .dec();
    }

    pub fn watch_event_sent(&self, resource: &str) {
        self.0
            .watch_events
            .get_or_create(&ResourceLabels {
                resource: resource.into(),
            })
            .inc();
    }

    /// One admission webhook call: its webhook, type (`admit`, `validating`), operation,
    /// result (`allowed`, `rejected`, `error`) and latency.
    pub fn webhook_call(
        &self,
        name: &str,
        kind: &'static str,
        operation: &'static str,
        result: &'static str,
        took: Duration,
    ) {
        self.0
            .webhook_calls
            .get_or_create(&WebhookLabels {
                name: name.into(),
                r#type: kind,
                operation,
                result,
            })
            .inc();
        self.0
            .webhook_duration
            .get_or_create(&WebhookLatencyLabels {
                name: name.into(),
                r#type: kind,
            })
            .observe(took.as_secs_f64());
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.0.registry).is_err() {
            out.clear();
        }
        out
    }
}

fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}
