//! Self-registration, as istiod patches its own webhook configuration: once the server listens
//! (and the sidecar's ConfigMap is read), the `admissionregistration.k8s.io/v1`
//! MutatingWebhookConfiguration `--register-webhook` is created or replaced to call it for
//! every Pod CREATE, retried with a bounded backoff until the API server takes it.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use keel_client::{ApiError, ApplyParams, Client, GroupVersionResource, Reason};
use keel_runtime::Backoff;
use serde_json::{Value, json};
use tokio::time::Instant;
use tracing::{info, warn};

/// The field manager of the configuration in `managedFields`.
pub const FIELD_MANAGER: &str = "keel-initializer";

fn mutating_webhook_configurations() -> GroupVersionResource {
    GroupVersionResource::new(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
    )
}

/// What the API server does when the webhook cannot be called (Kubernetes' `failurePolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailurePolicy {
    /// Refuse the Pod: no Pod runs without its sidecar.
    #[value(name = "Fail")]
    Fail,
    /// Admit the Pod unchanged.
    #[value(name = "Ignore")]
    Ignore,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

/// A Service in front of the webhook servers: `--webhook-service NAMESPACE/NAME[:PORT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    /// 443 unless given, as in Kubernetes.
    pub port: u16,
}

impl ServiceRef {
    /// Parses `NAMESPACE/NAME[:PORT]`.
    pub fn parse(s: &str) -> Result<ServiceRef, String> {
        let bad = || format!("{s:?}: expected NAMESPACE/NAME[:PORT]");
        let (namespace, rest) = s.split_once('/').ok_or_else(bad)?;
        let (name, port) = match rest.split_once(':') {
            Some((name, port)) => (name, port.parse::<u16>().map_err(|_| bad())?),
            None => (rest, 443),
        };
        if namespace.is_empty() || name.is_empty() || name.contains('/') || port == 0 {
            return Err(bad());
        }
        Ok(ServiceRef {
            namespace: namespace.into(),
            name: name.into(),
            port,
        })
    }
}

/// How the API server reaches the webhook (its `clientConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `--webhook-url`: the whole `https://` URL, path included, used as given.
    Url(String),
    /// `--webhook-service`, at `--webhook-path`.
    Service { service: ServiceRef, path: String },
}

/// The configuration to register, from the flags.
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    /// The MutatingWebhookConfiguration's name (`--register-webhook`).
    pub configuration: String,
    /// The webhook's name in it (`--webhook-name`).
    pub webhook: String,
    pub target: Target,
    /// The CA whose PEM becomes `caBundle` (`--webhook-ca-file`): the API server verifies the
    /// webhook's certificate by it (keel's calls no webhook without one).
    pub ca_file: PathBuf,
    pub failure_policy: FailurePolicy,
    /// A `LabelSelector` object; none: every Pod.
    pub object_selector: Option<Value>,
}

impl Registration {
    /// The MutatingWebhookConfiguration, with `ca_pem` (the CA's PEM bytes) as its
    /// `caBundle`.
    pub fn configuration(&self, ca_pem: &[u8]) -> Value {
        let mut client_config = match &self.target {
            Target::Url(url) => json!({"url": url}),
            Target::Service { service, path } => json!({"service": {
                "namespace": service.namespace,
                "name": service.name,
                "port": service.port,
                "path": path,
            }}),
        };
        client_config["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca_pem));
        let mut webhook = json!({
            "name": self.webhook,
            "clientConfig": client_config,
            "rules": [{
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": self.failure_policy.as_str(),
            "reinvocationPolicy": "Never",
            "timeoutSeconds": 10,
        });
        // The empty selector selects everything: the same as none, so written as none.
        if let Some(selector) = self
            .object_selector
            .as_ref()
            .filter(|s| s.as_object().is_some_and(|o| !o.is_empty()))
        {
            webhook["objectSelector"] = selector.clone();
        }
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": self.configuration},
            "webhooks": [webhook],
        })
    }
}

/// Where MutatingWebhookConfigurations are written: the API (a [`Client`]) or a test's twin.
pub trait WebhookConfigurations {
    /// Creates the configuration, or replaces the one of its name.
    fn put(&self, configuration: &Value) -> impl Future<Output = Result<(), ApiError>> + Send;
}

impl WebhookConfigurations for Client {
    /// Server-side apply, forced: this process owns the configuration, as istiod owns its
    /// own (an edit by hand is overwritten at the next start). An API server that does not
    /// apply this kind gets a get, then a create or an update.
    async fn put(&self, configuration: &Value) -> Result<(), ApiError> {
        let gvr = mutating_webhook_configurations();
        let name = configuration["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        let params = ApplyParams::new(FIELD_MANAGER).force();
        match self.apply(&gvr, "", name, configuration, &params).await {
            Err(e)
                if matches!(
                    e.reason,
                    Reason::MethodNotAllowed | Reason::UnsupportedMediaType
                ) =>
            {
                replace(self, &gvr, name, configuration).await
            }
            other => other.map(drop),
        }
    }
}

/// Get, then create or update with the live `resourceVersion` (a race is a `Conflict`, and the
/// caller retries).
async fn replace(
    client: &Client,
    gvr: &GroupVersionResource,
    name: &str,
    configuration: &Value,
) -> Result<(), ApiError> {
    match client.get(gvr, "", name).await {
        Err(e) if e.reason == Reason::NotFound => {
            client.create(gvr, "", configuration).await.map(drop)
        }
        Err(e) => Err(e),
        Ok(live) => {
            let mut replacement = configuration.clone();
            replacement["metadata"]["resourceVersion"] =
                live["metadata"]["resourceVersion"].clone();
            client.update(gvr, "", &replacement).await.map(drop)
        }
    }
}

/// The registration's backoff: 500 ms doubling to 30 s, with up to half again of jitter.
pub fn backoff() -> Backoff {
    Backoff::new(
        Duration::from_millis(500),
        Duration::from_secs(30),
        Duration::from_secs(600),
        0.5,
    )
}

/// Puts `configuration` until the API takes it, logging each failure and waiting as `backoff`
/// says between attempts (the API server may not be up yet). Returns the attempts made.
pub async fn register(
    api: &impl WebhookConfigurations,
    configuration: &Value,
    mut backoff: Backoff,
) -> u32 {
    let name = configuration["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let mut attempt = 1;
    loop {
        match api.put(configuration).await {
            Ok(()) => {
                info!(configuration = name, attempt, "registered the webhook");
                return attempt;
            }
            Err(e) => {
                let delay = backoff.next_delay(Instant::now());
                warn!(configuration = name, attempt, retry_in = ?delay, "registering the webhook failed: {e}");
                tokio::time::sleep(delay).await;
            }
        }
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::sync::Mutex;

    fn registration(target: Target) -> Registration {
        Registration {
            configuration: "keel-sidecar-injector".into(),
            webhook: "envoy.sidecar.keel.dev".into(),
            target,
            ca_file: "ca.crt".into(),
            failure_policy: FailurePolicy::Fail,
            object_selector: None,
        }
    }

    #[test]
    fn the_configuration_calls_the_service_for_every_pod_create() {
        let service = ServiceRef::parse("keel-system/injector").unwrap();
        let r = registration(Target::Service {
            service,
            path: "/inject".into(),
        });
        assert_eq!(
            r.configuration(b"PEM"),
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "keel-sidecar-injector"},
                "webhooks": [{
                    "name": "envoy.sidecar.keel.dev",
                    "clientConfig": {
                        "service": {"namespace": "keel-system", "name": "injector",
                            "port": 443, "path": "/inject"},
                        "caBundle": "UEVN",
                    },
                    "rules": [{"operations": ["CREATE"], "apiGroups": [""],
                        "apiVersions": ["v1"], "resources": ["pods"]}],
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Fail",
                    "reinvocationPolicy": "Never",
                    "timeoutSeconds": 10,
                }]
            })
        );
    }

    #[test]
    fn a_url_an_object_selector_and_ignore_are_written_as_given() {
        let mut r = registration(Target::Url("https://10.0.0.7:8443/inject".into()));
        r.failure_policy = FailurePolicy::Ignore;
        r.object_selector = Some(json!({"matchLabels": {"sidecar.keel.dev/inject": "true"}}));
        let webhook = &r.configuration(b"PEM")["webhooks"][0];
        assert_eq!(
            webhook["clientConfig"],
            json!({"url": "https://10.0.0.7:8443/inject", "caBundle": "UEVN"})
        );
        assert_eq!(webhook["failurePolicy"], "Ignore");
        assert_eq!(
            webhook["objectSelector"],
            json!({"matchLabels": {"sidecar.keel.dev/inject": "true"}})
        );
        r.object_selector = Some(json!({}));
        assert!(
            r.configuration(b"PEM")["webhooks"][0]
                .get("objectSelector")
                .is_none()
        );
    }

    #[test]
    fn service_references_are_parsed_and_checked() {
        assert_eq!(
            ServiceRef::parse("ns/svc:8443").unwrap(),
            ServiceRef {
                namespace: "ns".into(),
                name: "svc".into(),
                port: 8443
            }
        );
        for bad in [
            "svc",
            "/svc",
            "ns/",
            "ns/svc:",
            "ns/svc:0",
            "ns/svc:99999",
            "a/b/c",
        ] {
            assert!(ServiceRef::parse(bad).is_err(), "{bad}");
        }
    }

    /// Fails its first `failures` puts, recording when each put came.
    struct Flaky {
        failures: u32,
        calls: Mutex<Vec<Instant>>,
    }

    impl WebhookConfigurations for Flaky {
        async fn put(&self, _: &Value) -> Result<(), ApiError> {
            let mut calls = self.calls.lock().unwrap();
            calls.push(Instant::now());
            if calls.len() as u32 <= self.failures {
                Err(ApiError::new(
                    Reason::ServiceUnavailable,
                    keel_api::Target::default(),
                    "connection refused",
                ))
            } else {
                Ok(())
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn registration_retries_with_a_doubling_bounded_backoff_until_it_succeeds() {
        let api = Flaky {
            failures: 5,
            calls: Mutex::new(Vec::new()),
        };
        let no_jitter = Backoff::new(
            Duration::from_millis(500),
            Duration::from_secs(4),
            Duration::from_secs(600),
            0.0,
        );
        let configuration =
            registration(Target::Url("https://x/inject".into())).configuration(b"PEM");
        let attempts = register(&api, &configuration, no_jitter).await;
        assert_eq!(attempts, 6);
        let calls = api.calls.lock().unwrap();
        let gaps: Vec<Duration> = calls.windows(2).map(|w| w[1] - w[0]).collect();
        let ms = Duration::from_millis;
        assert_eq!(gaps, [ms(500), ms(1000), ms(2000), ms(4000), ms(4000)]);
    }
}
