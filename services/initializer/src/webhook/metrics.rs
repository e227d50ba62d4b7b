//! The webhook's counters, in the registry the side port (`--http-listen`) exposes at
//! `/metrics` beside the controller runtime's.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::webhook::admission::Outcome;

/// Why a request was admitted without the sidecar, or answered with an error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    reason: String,
}

/// Why a request got an HTTP error instead of an AdmissionReview.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorReason {
    /// The body is not an AdmissionReview (400).
    Malformed,
    /// The sidecar's ConfigMap has not been read yet (503).
    NotReady,
    /// The webhook failed (500).
    Internal,
}

impl ErrorReason {
    fn as_str(self) -> &'static str {
        match self {
            ErrorReason::Malformed => "malformed",
            ErrorReason::NotReady => "not_ready",
            ErrorReason::Internal => "internal",
        }
    }
}

/// Counters of the webhook; cheap to clone (clones count into the same series).
#[derive(Clone, Debug, Default)]
pub struct WebhookMetrics {
    /// AdmissionReviews received (every POST to the webhook path).
    requests: Counter,
    /// Pods admitted with the sidecar patch.
    injections: Counter,
    /// Requests admitted unchanged, by reason: `already_injected`, `no_sidecar`,
    /// `not_a_pod_create`.
    skipped: Family<ReasonLabel, Counter>,
    /// Requests answered with an error, by reason: `malformed` (400), `not_ready` (503: the
    /// ConfigMap not read yet), `internal` (500).
    errors: Family<ReasonLabel, Counter>,
}

impl WebhookMetrics {
    /// New counters, registered into `registry` (which must not have them yet).
    pub fn register(registry: &mut Registry) -> WebhookMetrics {
        let m = WebhookMetrics::default();
        registry.register(
            "keel_initializer_webhook_requests",
            "AdmissionReviews received by the sidecar webhook",
            m.requests.clone(),
        );
        registry.register(
            "keel_initializer_webhook_injections",
            "Pods admitted with the sidecar patch",
            m.injections.clone(),
        );
        registry.register(
            "keel_initializer_webhook_skipped",
            "Requests admitted unchanged, by reason",
            m.skipped.clone(),
        );
        registry.register(
            "keel_initializer_webhook_errors",
            "Requests answered with an HTTP error, by reason",
            m.errors.clone(),
        );
        m
    }

    pub fn request(&self) {
        self.requests.inc();
    }

    /// Counts what an answer did.
    pub fn outcome(&self, outcome: &Outcome) {
        let skipped = match outcome {
            Outcome::Injected { .. } => {
                self.injections.inc();
                return;
            }
            Outcome::AlreadyInjected => "already_injected",
            Outcome::NoSidecar(_) => "no_sidecar",
            Outcome::NotAPodCreate => "not_a_pod_create",
        };
        self.skipped.get_or_create(&label(skipped)).inc();
    }

    /// Counts an error answer.
    pub fn error(&self, reason: ErrorReason) {
        self.errors.get_or_create(&label(reason.as_str())).inc();
    }

    /// Requests received so far (for tests).
    pub fn requests(&self) -> u64 {
        self.requests.get()
    }

    /// Pods injected so far (for tests).
    pub fn injections(&self) -> u64 {
        self.injections.get()
    }

    /// Errors of `reason` so far (for tests).
    pub fn errors(&self, reason: ErrorReason) -> u64 {
        self.errors.get_or_create(&label(reason.as_str())).get()
    }
}

fn label(reason: &str) -> ReasonLabel {
    ReasonLabel {
        reason: reason.to_string(),
    }
}
