//! TokenRequest (`POST serviceaccounts/NAME/token`, an `authentication.k8s.io/v1`
//! `TokenRequest`), as `kubectl create token` asks for it: a token of the ServiceAccount, for
//! the audiences asked (the API servers' by default), valid `expirationSeconds` (3,600 by
//! default, at least 600), bound to a Pod or Secret if the request names one. Authorized as
//! `create` on `serviceaccounts/token`, as Kubernetes authorizes it.

use std::time::{Duration, SystemTime};

use keel_api::{ApiError, FieldCause, Metadata, Target};
use serde_json::{Value, json};

use super::handler::{Context, Verb};
use super::limits::Class;
use super::names::{check_lookup, object_namespace};

/// Kubernetes' shortest token life.
const MIN_SECONDS: u64 = 600;
const DEFAULT_SECONDS: u64 = 3600;
/// Kubernetes' longest (2^32 s).
const MAX_SECONDS: u64 = 1 << 32;

pub struct RequestToken {
    pub namespace: String,
    /// The ServiceAccount, as the path names it.
    pub name: String,
    /// The TokenRequest sent.
    pub request: Value,
}

fn invalid(name: &str, field: &str, value: &Value, why: &str) -> ApiError {
    ApiError::invalid(
        Target::new("authentication.k8s.io", "TokenRequest", name),
        vec![FieldCause::invalid_value(field, value, why)],
    )
}

impl Verb for RequestToken {
    const NAME: &'static str = "create";
    const CLASS: Class = Class::Mutating;
    const OK_CODE: u16 = 201;
    type Output = Value;

    async fn run(self, cx: Context<'_>) -> Result<Value, ApiError> {
        let t = Target::new(&cx.info.gvr.group, &cx.info.gvr.resource, &self.name);
        if !cx.info.has_subresource("token") {
            let mut e = ApiError::not_found(t);
            e.message = format!("{} has no subresource \"token\"", cx.info.qualified_name());
            return Err(e);
        }
        let ns = object_namespace(&cx.info, &self.namespace);
        check_lookup(&cx.info, &ns, &self.name)?;
        let registry = cx.authorize(Self::NAME, &ns, &self.name, "token").await?;
        let Some(tokens) = cx.tokens else {
            return Err(ApiError::new(
                keel_api::Reason::NotFound,
                t,
                "the API server issues no service account tokens: it has no \
                 --service-account-signing-key-file",
            ));
        };
        let spec = &self.request["spec"];
        let seconds = match &spec["expirationSeconds"] {
            Value::Null => DEFAULT_SECONDS,
            v => match v.as_u64() {
                Some(s) if s < MIN_SECONDS => {
                    return Err(invalid(
                        &self.name,
                        "spec.expirationSeconds",
                        v,
                        "may not specify a duration less than 10 minutes",
                    ));
                }
                Some(s) if s > MAX_SECONDS => {
                    return Err(invalid(
                        &self.name,
                        "spec.expirationSeconds",
                        v,
                        "may not specify a duration larger than 2^32 seconds",
                    ));
                }
                Some(s) => s,
                None => {
                    return Err(invalid(
                        &self.name,
                        "spec.expirationSeconds",
                        v,
                        "must be a number of seconds",
                    ));
                }
            },
        };
        let audiences: Vec<String> = match spec["audiences"].as_array() {
            Some(a) if !a.is_empty() => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => tokens.audiences.clone(),
        };
        let account = registry
            .get(&cx.info, &ns, &self.name, "", false, cx.deadline)
            .await?;
        let bound = match spec["boundObjectRef"].as_object() {
            None => None,
            Some(r) => {
                let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
                let Some((_, resource)) = keel_token::BOUND_KINDS.iter().find(|(k, _)| *k == kind)
                else {
                    return Err(invalid(
                        &self.name,
                        "spec.boundObjectRef.kind",
                        &json!(kind),
                        "supported values: \"Pod\", \"Secret\"",
                    ));
                };
                let name = r.get("name").and_then(Value::as_str).unwrap_or("");
                let info = registry.lookup(Some(&keel_api::GroupVersionResource::new(
                    "", "v1", resource,
                )))?;
                let obj = registry
                    .get(&info, &ns, name, "", false, cx.deadline)
                    .await?;
                let uid = obj.uid().to_string();
                if let Some(want) = r.get("uid").and_then(Value::as_str)
                    && !want.is_empty()
                    && want != uid
                {
                    return Err(ApiError::conflict(
                        Target::new("", resource, name),
                        format!(
                            "the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"
                        ),
                    ));
                }
                Some(keel_token::Bound {
                    kind: kind.to_string(),
                    name: name.to_string(),
                    uid,
                })
            }
        };
        let now = SystemTime::now();
        let epoch = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let claims = keel_token::bound_claims(
            &tokens.issuer,
            &audiences,
            keel_token::Account {
                namespace: &ns,
                name: &self.name,
                uid: account.uid(),
            },
            bound.as_ref(),
            epoch,
            seconds,
        );
        let token = tokens.key.sign(&claims).map_err(ApiError::internal)?;
        let expires = humantime::format_rfc3339_seconds(now + Duration::from_secs(seconds));
        let mut out_spec = json!({"audiences": audiences, "expirationSeconds": seconds});
        if let Some(b) = &bound {
            out_spec["boundObjectRef"] =
                json!({"kind": b.kind, "apiVersion": "v1", "name": b.name, "uid": b.uid});
        }
        Ok(json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": self.name, "namespace": ns,
                         "creationTimestamp": null},
            "spec": out_spec,
            "status": {"token": token, "expirationTimestamp": expires.to_string()},
        }))
    }
}
