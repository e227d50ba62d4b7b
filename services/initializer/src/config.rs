//! Command-line flags, each also an environment variable, and the mode they ask for.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::Value;

use crate::webhook::registration::{FailurePolicy, Registration, ServiceRef, Target};

/// keel-initializer: injects the Envoy sidecar into new Pods, as an initializer (the 2018
/// way) or as a mutating admission webhook (`--webhook`, the way since Kubernetes 1.14).
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "keel-initializer", version, about)]
pub struct Config {
    #[command(flatten)]
    pub connect: keel_client::ConnectFlags,
    /// This initializer's name: it acts on Pods whose `metadata.initializers.pending` starts
    /// with it.
    #[arg(
        long,
        env = "KEEL_INITIALIZER_NAME",
        default_value = "envoy.initializer.kubernetes.io"
    )]
    pub name: String,
    /// The ConfigMap (namespace/name) whose `data.config` holds the containers and volumes to
    /// inject.
    #[arg(
        long,
        env = "KEEL_INITIALIZER_CONFIGMAP",
        default_value = "default/envoy-initializer"
    )]
    pub configmap: String,
    /// Pods initialized at once.
    #[arg(long, env = "KEEL_WORKERS", default_value_t = 5)]
    pub workers: usize,
    /// HTTP listen address for /healthz, /readyz and /metrics.
    #[arg(long, env = "KEEL_HTTP_LISTEN", default_value = "127.0.0.1:6091")]
    pub http_listen: SocketAddr,

    /// Run as a mutating admission webhook server (HTTPS) instead of as an initializer.
    #[arg(long, env = "KEEL_WEBHOOK")]
    pub webhook: bool,
    /// The webhook server's HTTPS listen address.
    #[arg(long, env = "KEEL_WEBHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    pub webhook_listen: SocketAddr,
    /// The path the webhook answers AdmissionReviews on.
    #[arg(long, env = "KEEL_WEBHOOK_PATH", default_value = "/inject")]
    pub webhook_path: String,
    /// The webhook server's certificate chain (PEM); required with --webhook.
    #[arg(long, env = "KEEL_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of --tls-cert-file (PEM); required with --webhook.
    #[arg(long, env = "KEEL_TLS_PRIVATE_KEY_FILE")]
    pub tls_private_key_file: Option<PathBuf>,
    /// Create or replace the MutatingWebhookConfiguration NAME at start-up, calling this
    /// webhook for every Pod CREATE (with --webhook-url or --webhook-service).
    #[arg(long, env = "KEEL_REGISTER_WEBHOOK", value_name = "NAME")]
    pub register_webhook: Option<String>,
    /// The webhook's name inside the registered configuration.
    #[arg(
        long,
        env = "KEEL_WEBHOOK_NAME",
        default_value = "envoy.sidecar.keel.dev"
    )]
    pub webhook_name: String,
    /// The URL the API server calls (https://, path included, used as given).
    #[arg(
        long,
        env = "KEEL_WEBHOOK_URL",
        value_name = "URL",
        conflicts_with = "webhook_service"
    )]
    pub webhook_url: Option<String>,
    /// The Service the API server calls, at --webhook-path (port 443 unless given).
    #[arg(
        long,
        env = "KEEL_WEBHOOK_SERVICE",
        value_name = "NAMESPACE/NAME[:PORT]",
        value_parser = ServiceRef::parse
    )]
    pub webhook_service: Option<ServiceRef>,
    /// The CA that signed --tls-cert-file (PEM), written as the configuration's caBundle;
    /// required with --register-webhook.
    #[arg(long, env = "KEEL_WEBHOOK_CA_FILE", value_name = "PATH")]
    pub webhook_ca_file: Option<PathBuf>,
    /// What the API server does when it cannot call the webhook: Fail refuses the Pod,
    /// Ignore admits it without the sidecar.
    #[arg(
        long,
        env = "KEEL_WEBHOOK_FAILURE_POLICY",
        value_enum,
        ignore_case = true,
        default_value = "Fail"
    )]
    pub webhook_failure_policy: FailurePolicy,
    /// Only Pods with these labels are sent to the webhook (e.g. `sidecar.keel.dev/inject=true`;
    /// `k=v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, comma-separated). Default:
    /// every Pod.
    #[arg(
        long,
        env = "KEEL_WEBHOOK_OBJECT_SELECTOR",
        value_name = "SELECTOR",
        value_parser = crate::webhook::selector::parse_label_selector
    )]
    pub webhook_object_selector: Option<Value>,
}

/// What the process runs as.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// The 2018 initializer: PATCHes uninitialized Pods.
    Initializer,
    /// The admission webhook server.
    Webhook(Box<WebhookConfig>),
}

/// The webhook mode's settings, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookConfig {
    pub listen: SocketAddr,
    pub path: String,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// What to register at start-up, if anything.
    pub registration: Option<Registration>,
}

/// A combination of flags that cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    /// API servers call webhooks over HTTPS only.
    #[error(
        "--webhook needs --tls-cert-file and --tls-private-key-file (PEM): API servers call webhooks over HTTPS only"
    )]
    NoTls,
    /// A webhook flag given without `--webhook`: the operator probably forgot it.
    #[error("{0} applies to the webhook mode only: add --webhook")]
    WebhookOnly(&'static str),
    /// A registration flag given without `--register-webhook`.
    #[error("{0} applies to the registration only: add --register-webhook NAME")]
    RegistrationOnly(&'static str),
    /// `--register-webhook` without saying where the webhook is.
    #[error("--register-webhook needs --webhook-url or --webhook-service")]
    NoTarget,
    /// `--register-webhook` without the CA that verifies the webhook's certificate.
    #[error(
        "--register-webhook needs --webhook-ca-file: the API server verifies the webhook's certificate by that CA (its caBundle)"
    )]
    NoCa,
    #[error("--webhook-url {0:?}: API servers call webhooks at https:// URLs only")]
    NotHttps(String),
    #[error(
        "--webhook-path {0:?}: expected an absolute path of letters, digits and `/._~-`, other than /healthz"
    )]
    Path(String),
}

impl Config {
    /// The mode the flags ask for, or why they cannot run.
    pub fn mode(&self) -> Result<Mode, FlagError> {
        if !self.webhook {
            for (given, flag) in [
                (self.tls_cert_file.is_some(), "--tls-cert-file"),
                (
                    self.tls_private_key_file.is_some(),
                    "--tls-private-key-file",
                ),
                (self.register_webhook.is_some(), "--register-webhook"),
            ] {
                if given {
                    return Err(FlagError::WebhookOnly(flag));
                }
            }
            return Ok(Mode::Initializer);
        }
        let (Some(cert_file), Some(key_file)) = (&self.tls_cert_file, &self.tls_private_key_file)
        else {
            return Err(FlagError::NoTls);
        };
        if !valid_path(&self.webhook_path) {
            return Err(FlagError::Path(self.webhook_path.clone()));
        }
        Ok(Mode::Webhook(Box::new(WebhookConfig {
            listen: self.webhook_listen,
            path: self.webhook_path.clone(),
            cert_file: cert_file.clone(),
            key_file: key_file.clone(),
            registration: self.registration()?,
        })))
    }

    fn registration(&self) -> Result<Option<Registration>, FlagError> {
        let Some(configuration) = &self.register_webhook else {
            for (given, flag) in [
                (self.webhook_url.is_some(), "--webhook-url"),
                (self.webhook_service.is_some(), "--webhook-service"),
                (self.webhook_ca_file.is_some(), "--webhook-ca-file"),
                (
                    self.webhook_object_selector.is_some(),
                    "--webhook-object-selector",
                ),
            ] {
                if given {
                    return Err(FlagError::RegistrationOnly(flag));
                }
            }
            return Ok(None);
        };
        let target = match (&self.webhook_url, &self.webhook_service) {
            (Some(url), None) if url.starts_with("https://") => Target::Url(url.clone()),
            (Some(url), None) => return Err(FlagError::NotHttps(url.clone())),
            (None, Some(service)) => Target::Service {
                service: service.clone(),
                path: self.webhook_path.clone(),
            },
            // Both: clap refuses them together before this.
            _ => return Err(FlagError::NoTarget),
        };
        let Some(ca_file) = &self.webhook_ca_file else {
            return Err(FlagError::NoCa);
        };
        Ok(Some(Registration {
            configuration: configuration.clone(),
            webhook: self.webhook_name.clone(),
            target,
            ca_file: ca_file.clone(),
            failure_policy: self.webhook_failure_policy,
            object_selector: self.webhook_object_selector.clone(),
        }))
    }
}

/// A path the router can take as it is: absolute, of plain characters (no `{param}` or
/// wildcard syntax), and not the health check's.
fn valid_path(path: &str) -> bool {
    path.starts_with('/')
        && path != "/healthz"
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._~-".contains(c))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use clap::Parser;
    use serde_json::json;

    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        Config::try_parse_from(std::iter::once("keel-initializer").chain(args.iter().copied()))
    }

    fn mode(args: &[&str]) -> Result<Mode, FlagError> {
        parse(args).unwrap().mode()
    }

    const TLS: [&str; 4] = [
        "--tls-cert-file",
        "w.crt",
        "--tls-private-key-file",
        "w.key",
    ];

    fn webhook(args: &[&str]) -> Result<Mode, FlagError> {
        let all: Vec<&str> = ["--webhook"]
            .into_iter()
            .chain(TLS)
            .chain(args.iter().copied())
            .collect();
        mode(&all)
    }

    #[test]
    fn without_webhook_it_is_the_initializer() {
        assert_eq!(mode(&[]).unwrap(), Mode::Initializer);
    }

    #[test]
    fn webhook_without_a_certificate_is_refused() {
        assert_eq!(mode(&["--webhook"]), Err(FlagError::NoTls));
        assert_eq!(
            mode(&["--webhook", "--tls-cert-file", "w.crt"]),
            Err(FlagError::NoTls)
        );
        assert!(FlagError::NoTls.to_string().contains("--tls-cert-file"));
    }

    #[test]
    fn webhook_defaults() {
        let Mode::Webhook(w) = webhook(&[]).unwrap() else {
            panic!("not the webhook mode")
        };
        assert_eq!(
            *w,
            WebhookConfig {
                listen: "0.0.0.0:8443".parse().unwrap(),
                path: "/inject".into(),
                cert_file: "w.crt".into(),
                key_file: "w.key".into(),
                registration: None,
            }
        );
    }

    #[test]
    fn webhook_flags_without_webhook_are_refused() {
        assert_eq!(mode(&TLS), Err(FlagError::WebhookOnly("--tls-cert-file")));
        assert_eq!(
            mode(&["--register-webhook", "x", "--webhook-url", "https://x"]),
            Err(FlagError::WebhookOnly("--register-webhook"))
        );
    }

    #[test]
    fn registration_needs_a_target_and_a_ca_and_they_need_a_registration() {
        assert_eq!(
            webhook(&["--register-webhook", "sidecar"]),
            Err(FlagError::NoTarget)
        );
        assert_eq!(
            webhook(&["--webhook-url", "https://x/inject"]),
            Err(FlagError::RegistrationOnly("--webhook-url"))
        );
        assert_eq!(
            webhook(&["--webhook-object-selector", "a=b"]),
            Err(FlagError::RegistrationOnly("--webhook-object-selector"))
        );
        assert_eq!(
            webhook(&[
                "--register-webhook",
                "s",
                "--webhook-url",
                "http://x/inject"
            ]),
            Err(FlagError::NotHttps("http://x/inject".into()))
        );
        assert_eq!(
            webhook(&[
                "--register-webhook",
                "s",
                "--webhook-url",
                "https://x/inject"
            ]),
            Err(FlagError::NoCa)
        );
        assert_eq!(
            webhook(&["--webhook-ca-file", "ca.crt"]),
            Err(FlagError::RegistrationOnly("--webhook-ca-file"))
        );
        let both = parse(&["--webhook-url", "https://x", "--webhook-service", "ns/svc"]);
        assert_eq!(
            both.unwrap_err().kind(),
            clap::error::ErrorKind::ArgumentConflict
        );
    }

    #[test]
    fn a_registration_takes_every_flag() {
        let Mode::Webhook(w) = webhook(&[
            "--webhook-path",
            "/mutate/pods",
            "--register-webhook",
            "keel-sidecar-injector",
            "--webhook-service",
            "keel-system/injector:8443",
            "--webhook-ca-file",
            "ca.crt",
            "--webhook-failure-policy",
            "ignore",
            "--webhook-name",
            "envoy.example.com",
            "--webhook-object-selector",
            "sidecar.keel.dev/inject=true,!legacy",
        ])
        .unwrap() else {
            panic!("not the webhook mode")
        };
        assert_eq!(
            w.registration.unwrap(),
            Registration {
                configuration: "keel-sidecar-injector".into(),
                webhook: "envoy.example.com".into(),
                target: Target::Service {
                    service: ServiceRef {
                        namespace: "keel-system".into(),
                        name: "injector".into(),
                        port: 8443
                    },
                    path: "/mutate/pods".into()
                },
                ca_file: "ca.crt".into(),
                failure_policy: FailurePolicy::Ignore,
                object_selector: Some(json!({
                    "matchLabels": {"sidecar.keel.dev/inject": "true"},
                    "matchExpressions": [{"key": "legacy", "operator": "DoesNotExist"}],
                })),
            }
        );
    }

    #[test]
    fn bad_selectors_services_and_paths_are_refused() {
        let err = parse(&["--webhook-object-selector", "a in (x"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(err.to_string().contains("(value, ...)"), "{err}");
        let err = parse(&["--webhook-service", "svc"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        for path in ["inject", "/healthz", "/{x}", "/a*"] {
            assert_eq!(
                webhook(&["--webhook-path", path]),
                Err(FlagError::Path(path.into())),
                "{path}"
            );
        }
    }
}
