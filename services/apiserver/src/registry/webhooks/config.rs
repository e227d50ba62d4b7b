//! `admissionregistration.k8s.io/v1` MutatingWebhookConfiguration and
//! ValidatingWebhookConfiguration: Kubernetes' defaults and validation
//! (`SetDefaults_*Webhook`, `ValidateMutatingWebhookConfiguration`), and the stored objects
//! read into [`Hook`]s, the form the admission chain matches and calls.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use keel_api::selector::{LabelSelector, label_selector};
use keel_api::validation::dns1123_subdomain;
use keel_api::{FieldCause, Metadata, Object};
use serde_json::{Map, Value, json};
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::pki_types::pem::PemObject;

use crate::registry::rbac::validate_label_selector;

pub const GROUP: &str = "admissionregistration.k8s.io";
pub const MUTATING: &str = "mutatingwebhookconfigurations";
pub const VALIDATING: &str = "validatingwebhookconfigurations";

pub const DEFAULT_TIMEOUT_SECONDS: i64 = 10;
pub const MAX_TIMEOUT_SECONDS: i64 = 30;
/// The port of a `service` reference that names none.
pub const DEFAULT_SERVICE_PORT: i64 = 443;

const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
const SCOPES: &[&str] = &["*", "Cluster", "Namespaced"];
const FAILURE_POLICIES: &[&str] = &["Fail", "Ignore"];
const MATCH_POLICIES: &[&str] = &["Equivalent", "Exact"];
const REINVOCATION_POLICIES: &[&str] = &["IfNeeded", "Never"];
const SIDE_EFFECTS: &[&str] = &["None", "NoneOnDryRun"];
/// What `sideEffects` may stay on an update once stored (Kubernetes' ratcheting of v1beta1's
/// values).
const LEGACY_SIDE_EFFECTS: &[&str] = &["Some", "Unknown"];

/// Kubernetes' defaults of every webhook of a configuration (`mutating`: a
/// MutatingWebhookConfiguration's, which also has `reinvocationPolicy`).
pub fn defaults(obj: &mut Object, mutating: bool) {
    let Some(Value::Array(hooks)) = obj.as_map_mut().get_mut("webhooks") else {
        return;
    };
    for hook in hooks.iter_mut().filter_map(Value::as_object_mut) {
        let mut set = |k: &str, v: Value| {
            if hook.get(k).is_none_or(Value::is_null) {
                hook.insert(k.to_string(), v);
            }
        };
        set("failurePolicy", json!("Fail"));
        set("matchPolicy", json!("Equivalent"));
        set("namespaceSelector", json!({}));
        set("objectSelector", json!({}));
        set("timeoutSeconds", json!(DEFAULT_TIMEOUT_SECONDS));
        if mutating {
            set("reinvocationPolicy", json!("Never"));
        }
        for rule in hook
            .get_mut("rules")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            if rule.get("scope").is_none_or(Value::is_null) {
                rule.insert("scope".into(), json!("*"));
            }
        }
        if let Some(service) = hook
            .get_mut("clientConfig")
            .and_then(|c| c.get_mut("service"))
            .and_then(Value::as_object_mut)
            && service.get("port").is_none_or(Value::is_null)
        {
            service.insert("port".into(), json!(DEFAULT_SERVICE_PORT));
        }
    }
}

/// The `sideEffects` of a new configuration, or of an update of `old`: only `None` and
/// `NoneOnDryRun`, but v1beta1's `Some` and `Unknown` may stay where the stored configuration
/// has them (Kubernetes' ratcheting).
pub fn validate_side_effects(obj: &Object, old: Option<&Object>, causes: &mut Vec<FieldCause>) {
    let of = |o: &Object| -> Vec<String> {
        o.as_map()
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|h| h.get("sideEffects").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    };
    let stored = old.map(of).unwrap_or_default();
    for (i, s) in of(obj).iter().enumerate() {
        if LEGACY_SIDE_EFFECTS.contains(&s.as_str()) && !stored.contains(s) {
            causes.push(FieldCause::not_supported(
                format!("webhooks[{i}].sideEffects"),
                s,
                SIDE_EFFECTS,
            ));
        }
    }
}

/// Kubernetes' validation of a configuration's webhooks (`sideEffects` that only a stored
/// configuration may keep are [`validate_side_effects`]'s to refuse).
pub fn validate(obj: &Object, causes: &mut Vec<FieldCause>) {
    let hooks = match obj.as_map().get("webhooks") {
        None | Some(Value::Null) => return,
        Some(Value::Array(h)) => h,
        Some(_) => {
            causes.push(FieldCause::type_error("webhooks", "a list"));
            return;
        }
    };
    let mut names: Vec<&str> = Vec::new();
    for (i, hook) in hooks.iter().enumerate() {
        let at = format!("webhooks[{i}]");
        let Some(hook) = hook.as_object() else {
            causes.push(FieldCause::type_error(at, "an object"));
            continue;
        };
        let name = str_of(hook, "name");
        if name.is_empty() {
            causes.push(FieldCause::required(format!("{at}.name")));
        } else {
            if names.contains(&name) {
                causes.push(FieldCause::duplicate(format!("{at}.name"), name));
            }
            names.push(name);
            for e in dns1123_subdomain(name) {
                causes.push(FieldCause::invalid(format!("{at}.name"), name, e));
            }
            if name.split('.').count() < 3 {
                causes.push(FieldCause::invalid(
                    format!("{at}.name"),
                    name,
                    "should be a domain with at least three segments separated by dots",
                ));
            }
        }
        validate_rules(hook.get("rules"), &format!("{at}.rules"), causes);
        one_of(hook, "failurePolicy", FAILURE_POLICIES, &at, causes);
        one_of(hook, "matchPolicy", MATCH_POLICIES, &at, causes);
        if hook.contains_key("reinvocationPolicy") {
            one_of(
                hook,
                "reinvocationPolicy",
                REINVOCATION_POLICIES,
                &at,
                causes,
            );
        }
        match hook.get("sideEffects").and_then(Value::as_str) {
            None => causes.push(FieldCause::required(format!("{at}.sideEffects"))),
            Some(s) if SIDE_EFFECTS.contains(&s) || LEGACY_SIDE_EFFECTS.contains(&s) => {}
            Some(s) => causes.push(FieldCause::not_supported(
                format!("{at}.sideEffects"),
                s,
                SIDE_EFFECTS,
            )),
        }
        let timeout = hook.get("timeoutSeconds").and_then(Value::as_i64);
        if let Some(t) = timeout.filter(|t| !(1..=MAX_TIMEOUT_SECONDS).contains(t)) {
            causes.push(FieldCause::invalid(
                format!("{at}.timeoutSeconds"),
                &t.to_string(),
                "the timeout value must be between 1 and 30 seconds",
            ));
        }
        let versions = strings(hook.get("admissionReviewVersions"));
        if versions.is_empty() {
            causes.push(FieldCause {
                message: "Required value: must specify one of v1, v1beta1".into(),
                ..FieldCause::required(format!("{at}.admissionReviewVersions"))
            });
        } else if !versions.iter().any(|v| v == "v1") {
            causes.push(FieldCause::invalid(
                format!("{at}.admissionReviewVersions"),
                &versions.join(","),
                "must include v1: keel sends admission.k8s.io/v1 AdmissionReviews only",
            ));
        }
        for selector in ["namespaceSelector", "objectSelector"] {
            if let Some(s) = hook.get(selector).filter(|s| !s.is_null()) {
                validate_label_selector(s, &format!("{at}.{selector}"), causes);
            }
        }
        validate_match_conditions(
            hook.get("matchConditions"),
            &format!("{at}.matchConditions"),
            MATCH_CONDITION_VARIABLES,
            causes,
        );
        validate_client_config(
            hook.get("clientConfig"),
            &format!("{at}.clientConfig"),
            causes,
        );
    }
}

/// The variables of a webhook's `matchConditions`.
const MATCH_CONDITION_VARIABLES: &[&str] = &["object", "oldObject", "request", "authorizer"];

/// The most `matchConditions` a webhook has.
const MAX_MATCH_CONDITIONS: usize = 64;

/// Kubernetes' checks of `matchConditions`: at most 64, each with a unique qualified name and
/// an expression that compiles.
pub(super) fn validate_match_conditions(
    conditions: Option<&Value>,
    at: &str,
    variables: &[&str],
    causes: &mut Vec<FieldCause>,
) {
    let conditions = match conditions {
        None | Some(Value::Null) => return,
        Some(Value::Array(c)) => c,
        Some(_) => {
            causes.push(FieldCause::type_error(at, "a list"));
            return;
        }
    };
    if conditions.len() > MAX_MATCH_CONDITIONS {
        causes.push(FieldCause {
            reason: "FieldValueTooMany".into(),
            message: format!(
                "Too many: {}: must have at most {MAX_MATCH_CONDITIONS} items",
                conditions.len()
            ),
            field: at.to_string(),
        });
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, c) in conditions.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
        if name.is_empty() {
            causes.push(FieldCause::required(format!("{at}.name")));
        } else {
            for e in keel_api::validation::label_key(name) {
                causes.push(FieldCause::invalid(format!("{at}.name"), name, e));
            }
            if names.contains(&name) {
                causes.push(FieldCause::duplicate(format!("{at}.name"), name));
            }
            names.push(name);
        }
        let expression = c
            .get("expression")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if expression.trim().is_empty() {
            causes.push(FieldCause::required(format!("{at}.expression")));
        } else if let Err(e) = keel_cel::compile_declared(expression, variables) {
            causes.push(FieldCause::invalid(
                format!("{at}.expression"),
                expression,
                format!("compilation failed: {e}"),
            ));
        }
    }
}

pub(super) fn validate_rules(rules: Option<&Value>, at: &str, causes: &mut Vec<FieldCause>) {
    let rules = match rules {
        None | Some(Value::Null) => return,
        Some(Value::Array(r)) => r,
        Some(_) => {
            causes.push(FieldCause::type_error(at, "a list"));
            return;
        }
    };
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let Some(rule) = rule.as_object() else {
            causes.push(FieldCause::type_error(at, "an object"));
            continue;
        };
        let operations = strings(rule.get("operations"));
        if operations.is_empty() {
            causes.push(FieldCause::required(format!("{at}.operations")));
        }
        for (j, op) in operations.iter().enumerate() {
            if !OPERATIONS.contains(&op.as_str()) {
                causes.push(FieldCause::not_supported(
                    format!("{at}.operations[{j}]"),
                    op,
                    OPERATIONS,
                ));
            }
        }
        if operations.len() > 1 && operations.iter().any(|o| o == "*") {
            causes.push(FieldCause::invalid(
                format!("{at}.operations"),
                &operations.join(","),
                "if '*' is present, must not specify other operations",
            ));
        }
        for field in ["apiGroups", "apiVersions", "resources"] {
            let list = strings(rule.get(field));
            if list.is_empty() {
                causes.push(FieldCause::required(format!("{at}.{field}")));
            }
            if list.len() > 1 && list.iter().any(|x| x == "*") {
                causes.push(FieldCause::invalid(
                    format!("{at}.{field}"),
                    &list.join(","),
                    format!("if '*' is present, must not specify other {field}"),
                ));
            }
        }
        for (j, r) in strings(rule.get("resources")).iter().enumerate() {
            let field = format!("{at}.resources[{j}]");
            if r.is_empty() {
                causes.push(FieldCause::required(field));
            } else if r.starts_with('/') || r.split('/').count() > 2 || r.ends_with('/') {
                causes.push(FieldCause::invalid(
                    field,
                    r,
                    "must be a resource, a resource/subresource, or '*'",
                ));
            }
        }
        let scope = str_of(rule, "scope");
        if !scope.is_empty() && !SCOPES.contains(&scope) {
            causes.push(FieldCause::not_supported(
                format!("{at}.scope"),
                scope,
                SCOPES,
            ));
        }
    }
}

pub(super) fn validate_client_config(
    config: Option<&Value>,
    at: &str,
    causes: &mut Vec<FieldCause>,
) {
    let Some(config) = config.and_then(Value::as_object) else {
        causes.push(FieldCause {
            message: "Required value: exactly one of url or service is required".into(),
            ..FieldCause::required(at)
        });
        return;
    };
    let url = config.get("url").and_then(Value::as_str);
    let service = config.get("service").and_then(Value::as_object);
    match (url, service) {
        (Some(_), Some(_)) | (None, None) => causes.push(FieldCause {
            message: "Required value: exactly one of url or service is required".into(),
            ..FieldCause::required(at)
        }),
        (Some(url), None) => {
            if let Err(why) = parse_url(url) {
                causes.push(FieldCause::invalid(format!("{at}.url"), url, why));
            }
        }
        (None, Some(service)) => {
            for field in ["name", "namespace"] {
                if str_of(service, field).is_empty() {
                    causes.push(FieldCause::required(format!("{at}.service.{field}")));
                }
            }
            let path = str_of(service, "path");
            if !path.is_empty() && !path.starts_with('/') {
                causes.push(FieldCause::invalid(
                    format!("{at}.service.path"),
                    path,
                    "must start with a '/'",
                ));
            }
            match service.get("port") {
                Some(Value::Number(n)) if n.as_i64().is_some_and(|p| (1..=65535).contains(&p)) => {}
                Some(p) => causes.push(FieldCause::invalid_value(
                    format!("{at}.service.port"),
                    p,
                    "port is not valid: must be between 1 and 65535, inclusive",
                )),
                None => causes.push(FieldCause::required(format!("{at}.service.port"))),
            }
        }
    }
    if let Some(bundle) = config
        .get("caBundle")
        .filter(|b| !b.is_null() && b.as_str() != Some(""))
        && let Err(why) = ca_certificates(bundle)
    {
        causes.push(FieldCause::invalid(
            format!("{at}.caBundle"),
            "<caBundle>",
            why,
        ));
    }
}

/// A webhook's URL as Kubernetes' `ValidateWebhookURL` allows it: HTTPS, a host, no user
/// information, query or fragment.
pub fn parse_url(url: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("not a URL: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err("'https' is the only allowed URL scheme".into());
    }
    let Some(authority) = uri.authority() else {
        return Err("host must be specified".into());
    };
    if authority.host().is_empty() {
        return Err("host must be specified".into());
    }
    if authority.as_str().contains('@') {
        return Err("user information is not permitted in the URL".into());
    }
    if url.contains('#') {
        return Err("fragments are not permitted in the URL".into());
    }
    if uri.query().is_some() {
        return Err("query parameters are not permitted in the URL".into());
    }
    Ok(uri)
}

/// The certificates of a `caBundle` (base64 of PEM, as JSON carries bytes); an error saying
/// what is wrong with it.
pub fn ca_certificates(bundle: &Value) -> Result<Vec<CertificateDer<'static>>, String> {
    let Some(text) = bundle.as_str() else {
        return Err("must be base64-encoded PEM certificates".into());
    };
    let pem = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("must be base64-encoded PEM certificates: {e}"))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("must be PEM-encoded certificates: {e}"))?;
    if certs.is_empty() {
        return Err("must be PEM-encoded certificates: no CERTIFICATE block found".into());
    }
    Ok(certs)
}

pub(super) fn one_of(
    hook: &Map<String, Value>,
    field: &str,
    allowed: &[&str],
    at: &str,
    causes: &mut Vec<FieldCause>,
) {
    let v = str_of(hook, field);
    if !allowed.contains(&v) {
        causes.push(FieldCause::not_supported(
            format!("{at}.{field}"),
            v,
            allowed,
        ));
    }
}

pub(super) fn str_of<'a>(m: &'a Map<String, Value>, k: &str) -> &'a str {
    m.get(k).and_then(Value::as_str).unwrap_or_default()
}

pub(super) fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// What a webhook does when it cannot be called or answers garbage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    Fail,
    Ignore,
}

impl FailurePolicy {
    /// A webhook's or a policy's `failurePolicy` (`Fail` unless it says `Ignore`).
    pub fn of(m: &Map<String, Value>) -> FailurePolicy {
        if str_of(m, "failurePolicy") == "Ignore" {
            FailurePolicy::Ignore
        } else {
            FailurePolicy::Fail
        }
    }
}

/// Where a webhook is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `clientConfig.url`.
    Url(http::Uri),
    /// `clientConfig.service`: reached through the Service's endpoints, its certificate
    /// verified for `<name>.<namespace>.svc`.
    Service {
        namespace: String,
        name: String,
        port: u16,
        path: String,
    },
}

/// One rule of a webhook: the operations and resources it is called for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub operations: Vec<String>,
    pub groups: Vec<String>,
    pub versions: Vec<String>,
    /// `pods`, `pods/status`, `*/scale`, `*`, `*/*`.
    pub resources: Vec<String>,
    /// `*`, `Cluster` or `Namespaced`.
    pub scope: String,
    /// A policy's `resourceNames` (none: any name).
    pub names: Vec<String>,
}

/// Which writes a webhook or a policy applies to: rules, `matchPolicy`, selectors.
#[derive(Debug, Default)]
pub struct Match {
    pub rules: Vec<Rule>,
    /// A policy's `excludeResourceRules`.
    pub exclude: Vec<Rule>,
    /// A policy binding's `matchResources`: no rules is every resource (a webhook with no
    /// rules is called for nothing).
    pub all_without_rules: bool,
    /// `matchPolicy: Equivalent`: also other versions of the resources it names.
    pub equivalent: bool,
    pub namespace_selector: LabelSelector,
    pub object_selector: LabelSelector,
}

impl Match {
    /// Reads a webhook's match fields (`rules` under `rules`) or a policy's
    /// `matchConstraints`/`matchResources` (`resourceRules`, `excludeResourceRules`).
    pub fn read(m: &Map<String, Value>, rules: &str) -> Match {
        let selector = |k: &str| {
            m.get(k)
                .map(label_selector)
                .and_then(|s| LabelSelector::parse(&s).ok())
                .unwrap_or_default()
        };
        let rules_of = |k: &str| {
            m.get(k)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object)
                .map(|r| Rule {
                    operations: strings(r.get("operations")),
                    groups: strings(r.get("apiGroups")),
                    versions: strings(r.get("apiVersions")),
                    resources: strings(r.get("resources")),
                    scope: Some(str_of(r, "scope"))
                        .filter(|s| !s.is_empty())
                        .unwrap_or("*")
                        .to_string(),
                    names: strings(r.get("resourceNames")),
                })
                .collect()
        };
        Match {
            rules: rules_of(rules),
            exclude: rules_of("excludeResourceRules"),
            all_without_rules: rules == "resourceRules",
            equivalent: str_of(m, "matchPolicy") != "Exact",
            namespace_selector: selector("namespaceSelector"),
            object_selector: selector("objectSelector"),
        }
    }
}

/// One webhook, as the admission chain matches and calls it.
#[derive(Debug)]
pub struct Hook {
    /// The configuration it is in.
    pub configuration: String,
    pub name: String,
    pub mutating: bool,
    pub when: Match,
    pub failure_policy: FailurePolicy,
    pub side_effects: String,
    pub timeout: Duration,
    /// `reinvocationPolicy: IfNeeded`.
    pub reinvoke: bool,
    pub endpoint: Endpoint,
    /// The `caBundle`'s certificates (none: the webhook cannot be verified, so not called).
    pub ca: Vec<CertificateDer<'static>>,
    /// `matchConditions` (expression, compiled): each must hold for the webhook to be called.
    pub match_conditions: Vec<(String, keel_cel::Compiled)>,
}

impl Hook {
    /// The webhook's type, as Kubernetes' metrics label it.
    pub fn kind(&self) -> &'static str {
        if self.mutating { "admit" } else { "validating" }
    }
}

/// Reads the webhooks of a stored configuration (validated on its way in: what cannot be read
/// is skipped).
pub fn hooks(config: &Object, mutating: bool) -> Vec<Arc<Hook>> {
    let mut out = Vec::new();
    for h in config
        .as_map()
        .get("webhooks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
    {
        let Some(endpoint) = endpoint(h.get("clientConfig")) else {
            continue;
        };
        let ca = h
            .get("clientConfig")
            .and_then(|c| c.get("caBundle"))
            .and_then(|b| ca_certificates(b).ok())
            .unwrap_or_default();
        let timeout = h
            .get("timeoutSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
            .clamp(1, MAX_TIMEOUT_SECONDS);
        out.push(Arc::new(Hook {
            configuration: config.name().to_string(),
            name: str_of(h, "name").to_string(),
            mutating,
            when: Match::read(h, "rules"),
            failure_policy: FailurePolicy::of(h),
            side_effects: str_of(h, "sideEffects").to_string(),
            timeout: Duration::from_secs(timeout as u64),
            reinvoke: mutating && str_of(h, "reinvocationPolicy") == "IfNeeded",
            endpoint,
            ca,
            match_conditions: h
                .get("matchConditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    let expression = c.get("expression")?.as_str()?;
                    let compiled =
                        keel_cel::compile_declared(expression, MATCH_CONDITION_VARIABLES).ok()?;
                    Some((expression.to_string(), compiled))
                })
                .collect(),
        }));
    }
    out
}

pub(super) fn endpoint(config: Option<&Value>) -> Option<Endpoint> {
    let config = config?.as_object()?;
    if let Some(url) = config.get("url").and_then(Value::as_str) {
        return parse_url(url).ok().map(Endpoint::Url);
    }
    let s = config.get("service")?.as_object()?;
    Some(Endpoint::Service {
        namespace: str_of(s, "namespace").to_string(),
        name: str_of(s, "name").to_string(),
        port: u16::try_from(
            s.get("port")
                .and_then(Value::as_i64)
                .unwrap_or(DEFAULT_SERVICE_PORT),
        )
        .ok()?,
        path: str_of(s, "path").to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn config(hook: Value) -> Object {
        let mut obj = Object::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "c"},
            "webhooks": [hook],
        }))
        .unwrap();
        defaults(&mut obj, true);
        obj
    }

    fn causes(hook: Value) -> Vec<String> {
        let mut causes = Vec::new();
        let obj = config(hook);
        validate(&obj, &mut causes);
        validate_side_effects(&obj, None, &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn good() -> Value {
        json!({
            "name": "deny.example.com",
            "clientConfig": {"url": "https://127.0.0.1:9443/validate"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    }

    fn with(k: &str, v: Value) -> Value {
        let mut h = good();
        h[k] = v;
        h
    }

    #[test]
    fn a_good_webhook_is_defaulted_as_kubernetes_defaults_it() {
        assert_eq!(causes(good()), Vec::<String>::new());
        let obj = config(
            json!({"clientConfig": {"service": {"name": "s", "namespace": "n"}}, "rules": [{}]}),
        );
        let h = &obj.as_map()["webhooks"][0];
        assert_eq!(h["failurePolicy"], "Fail");
        assert_eq!(h["matchPolicy"], "Equivalent");
        assert_eq!(h["timeoutSeconds"], 10);
        assert_eq!(h["reinvocationPolicy"], "Never");
        assert_eq!(h["namespaceSelector"], json!({}));
        assert_eq!(h["rules"][0]["scope"], "*");
        assert_eq!(h["clientConfig"]["service"]["port"], 443);
    }

    #[test]
    fn bad_webhooks_are_refused_naming_the_field() {
        let table: Vec<(Value, &str)> = vec![
            (
                with("clientConfig", json!({"url": "http://127.0.0.1/x"})),
                "webhooks[0].clientConfig.url: Invalid value: \"http://127.0.0.1/x\": 'https' is the only allowed URL scheme",
            ),
            (
                with("clientConfig", json!({"url": "https://h/x?a=b"})),
                "query parameters are not permitted in the URL",
            ),
            (
                with(
                    "clientConfig",
                    json!({"url": "https://127.0.0.1/x", "caBundle": "bm90IHBlbQ=="}),
                ),
                "webhooks[0].clientConfig.caBundle: Invalid value: \"<caBundle>\": must be PEM-encoded certificates",
            ),
            (
                with(
                    "clientConfig",
                    json!({"service": {"name": "s", "namespace": "n", "port": 0}}),
                ),
                "webhooks[0].clientConfig.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive",
            ),
            (
                with("clientConfig", json!({})),
                "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
            ),
            (
                with("timeoutSeconds", json!(31)),
                "webhooks[0].timeoutSeconds: Invalid value: \"31\": the timeout value must be between 1 and 30 seconds",
            ),
            (
                with("sideEffects", json!("Some")),
                "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
            ),
            (
                with("name", json!("deny")),
                "webhooks[0].name: Invalid value: \"deny\": should be a domain with at least three segments separated by dots",
            ),
            (
                with("failurePolicy", json!("Sometimes")),
                "webhooks[0].failurePolicy: Unsupported value: \"Sometimes\"",
            ),
            (
                with(
                    "matchConditions",
                    json!([{"name": "x", "expression": "object.+"}]),
                ),
                "webhooks[0].matchConditions[0].expression: Invalid value: \"object.+\": compilation failed: ERROR: <input>:1:",
            ),
            (
                with(
                    "matchConditions",
                    json!([{"name": "x", "expression": "true"}, {"name": "x", "expression": "true"}]),
                ),
                "webhooks[0].matchConditions[1].name: Duplicate value: \"x\"",
            ),
            (
                with(
                    "rules",
                    json!([{"operations": ["GET"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]),
                ),
                "webhooks[0].rules[0].operations[0]: Unsupported value: \"GET\"",
            ),
            (
                with(
                    "objectSelector",
                    json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
                ),
                "webhooks[0].objectSelector.matchExpressions[0].values: Required value",
            ),
            (
                with("admissionReviewVersions", json!(["v1beta1"])),
                "must include v1",
            ),
        ];
        for (hook, want) in table {
            let got = causes(hook.clone());
            assert!(
                got.iter().any(|c| c.contains(want)),
                "{hook}: want {want:?}, got {got:?}"
            );
        }
    }

    #[test]
    fn two_webhooks_of_one_name_are_refused() {
        let mut obj = config(good());
        if let Some(Value::Array(h)) = obj.as_map_mut().get_mut("webhooks") {
            h.push(good());
        }
        let mut causes = Vec::new();
        validate(&obj, &mut causes);
        assert!(
            causes
                .iter()
                .any(|c| c.field == "webhooks[1].name" && c.message.starts_with("Duplicate value")),
            "{causes:?}"
        );
    }

    #[test]
    fn a_stored_side_effect_may_stay_on_an_update() {
        let old = config(with("sideEffects", json!("Unknown")));
        let mut causes = Vec::new();
        validate(&old, &mut causes);
        validate_side_effects(&old, Some(&old), &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
        validate_side_effects(&old, Some(&config(good())), &mut causes);
        assert_eq!(causes.len(), 1, "{causes:?}");
    }
}
