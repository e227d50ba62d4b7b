//! ValidatingAdmissionPolicies in the admission chain, as Kubernetes' `validating` plugin
//! dispatches them (docs/cel.md §6.2-6.4): each policy that has bindings and matches the write,
//! each of its bindings that matches too, each param the binding finds; the failures go where
//! the binding's `validationActions` send them: the answer (`Deny`), warnings (`Warn`), the
//! audit log (`Audit`).

use std::sync::Arc;

use keel_api::{ApiError, FieldCause, Metadata, Object, Reason, ResourceInfo, Target};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::config::FailurePolicy;
use super::policy::{self, Input, ParamRef, Policy, PolicyBinding};
use super::{Attributes, Snapshot, describe, label, labels_of, review};
use crate::auth::User;
use crate::registry::Registry;
use crate::storage::{ListQuery, ReadFrom};

/// The RBAC policy as the CEL authorizer library asks it.
struct Rbac {
    policy: Arc<crate::registry::rbac::Policy>,
    user: Option<User>,
}

impl keel_cel::Authorize for Rbac {
    fn authorize(&self, r: &keel_cel::AuthzRequest) -> keel_cel::AuthzDecision {
        let user = match &r.service_account {
            Some((ns, name)) => User {
                name: format!("system:serviceaccount:{ns}:{name}"),
                groups: vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                    crate::auth::AUTHENTICATED.into(),
                ],
                uid: String::new(),
            },
            None => match &self.user {
                Some(u) => u.clone(),
                None => {
                    return keel_cel::AuthzDecision {
                        allowed: true,
                        ..Default::default()
                    };
                }
            },
        };
        let attributes = crate::registry::rbac::Attributes {
            verb: &r.verb,
            group: &r.group,
            resource: &r.resource,
            subresource: &r.subresource,
            namespace: &r.namespace,
            name: &r.name,
            path: r.path.as_deref(),
        };
        match self.policy.decide(&user, &attributes) {
            Some(reason) => keel_cel::AuthzDecision {
                allowed: true,
                reason,
                error: None,
            },
            None => keel_cel::AuthzDecision::default(),
        }
    }
}

/// A denial of the write: `<resource> "<name>" is forbidden: <message>` with the reason (and
/// so the code) the failed validation names, as Kubernetes' `policyDecision` error reads.
fn denial(target: &Target, reason: Reason, message: String) -> ApiError {
    let mut e = ApiError::new(
        reason,
        target.clone(),
        format!("{} is forbidden: {message}", describe(target)),
    );
    e.causes = vec![FieldCause {
        reason: String::new(),
        message,
        field: String::new(),
    }];
    e
}

impl Registry {
    /// The policies' step of the validating phase: `Err` with the first denial when a binding
    /// that denies has a failure; warnings and audit annotations recorded on the way.
    pub(in crate::registry) async fn validate_by_policies(
        &self,
        snapshot: &Snapshot,
        a: &Attributes<'_>,
        obj: Option<&Object>,
        old: Option<&Object>,
        namespace: Option<&Object>,
        deadline: Instant,
    ) -> Result<(), ApiError> {
        let labels = namespace.map(labels_of);
        let name = if !a.name.is_empty() {
            a.name.to_string()
        } else {
            obj.or(old)
                .map(|o| {
                    let n = o.name();
                    if n.is_empty() {
                        o.metadata()
                            .and_then(|m| m.get("generateName"))
                            .and_then(Value::as_str)
                            .unwrap_or("Unknown")
                            .to_string()
                    } else {
                        n.to_string()
                    }
                })
                .unwrap_or_else(|| "Unknown".into())
        };
        let target = Target::new(&a.info.gvr.group, &a.info.gvr.resource, &name);
        let namespace_object =
            namespace.map_or(Value::Null, |ns| Value::Object(ns.as_map().clone()));
        let mut denied: Option<ApiError> = None;
        let mut deny = |e: ApiError| {
            if denied.is_none() {
                denied = Some(e);
            }
        };
        let mut audit_failures: Vec<Value> = Vec::new();
        let authorizer = self.cel_authorizer(a);
        for (policy, bindings) in &snapshot.policies {
            let fails = policy.failure_policy == FailurePolicy::Fail;
            let policy_error = |why: String| {
                denial(
                    &target,
                    Reason::Invalid,
                    format!(
                        "ValidatingAdmissionPolicy '{}' denied request: failed to configure policy: {why}",
                        policy.name
                    ),
                )
            };
            let Some(when) = &policy.when else {
                if fails {
                    deny(policy_error(
                        "policy contained no match constraints, a required field".into(),
                    ));
                }
                continue;
            };
            let Some(matched) = self.matched(when, a, obj, old, labels.as_ref()) else {
                continue;
            };
            let param_info = match &policy.param_kind {
                None => None,
                Some((api_version, kind)) => match self.resource_of_kind(api_version, kind) {
                    Some(info) => Some(info),
                    None => {
                        if fails {
                            let gv = if api_version.contains('/') {
                                api_version.clone()
                            } else {
                                format!("/{api_version}")
                            };
                            deny(policy_error(format!(
                                "failed to find resource referenced by paramKind: '{gv}, Kind={kind}'"
                            )));
                        }
                        continue;
                    }
                },
            };
            let as_json = |o: Option<Object>| o.map_or(Value::Null, Object::into_value);
            let object = match obj {
                Some(o) => Some(
                    self.convert_for_webhook(o, a.info, &matched, deadline)
                        .await?,
                ),
                None => None,
            };
            let old_object = match old {
                Some(o) => Some(
                    self.convert_for_webhook(o, a.info, &matched, deadline)
                        .await?,
                ),
                None => None,
            };
            let (object, old_object) = (as_json(object), as_json(old_object));
            let request = review::attributes(a, &matched);
            for binding in bindings {
                if let Some(w) = &binding.when
                    && self.matched(w, a, obj, old, labels.as_ref()).is_none()
                {
                    continue;
                }
                let binding_error = |why: String| {
                    denial(
                        &target,
                        Reason::Invalid,
                        format!(
                            "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: failed to configure binding: {why}",
                            policy.name, binding.name
                        ),
                    )
                };
                let params = match (&param_info, &binding.param_ref) {
                    (Some(info), Some(r)) => match self.policy_params(info, r, a, deadline).await {
                        Ok(p) if p.is_empty() && r.deny_when_missing => {
                            if fails {
                                deny(binding_error(
                                    "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
                                ));
                            }
                            continue;
                        }
                        Ok(p) => p,
                        Err(why) => {
                            if fails {
                                deny(binding_error(why));
                            }
                            continue;
                        }
                    },
                    _ => vec![Value::Null],
                };
                for param in &params {
                    let verdict = policy::evaluate(
                        policy,
                        &Input {
                            object: &object,
                            old_object: &old_object,
                            request: &request,
                            namespace_object: &namespace_object,
                            params: param_info.is_some().then_some(param),
                            authorizer: Some(&authorizer),
                        },
                    );
                    if let Some(audit) = a.requester.audit {
                        for (k, v) in verdict.audit_annotations {
                            audit.insert(k, v);
                        }
                    }
                    for f in verdict.failures {
                        self.act_on(
                            policy,
                            binding,
                            &f,
                            a,
                            &target,
                            &mut deny,
                            &mut audit_failures,
                        );
                    }
                }
            }
        }
        if let Some(audit) = a.requester.audit
            && !audit_failures.is_empty()
        {
            audit.insert(
                policy::VALIDATION_FAILURE_ANNOTATION.into(),
                Value::Array(audit_failures).to_string(),
            );
        }
        denied.map_or(Ok(()), Err)
    }

    /// The `authorizer` of `a`'s expressions: RBAC as this replica follows it, asked for the
    /// requester (everything is allowed when authentication is off, as the request itself
    /// was).
    pub(super) fn cel_authorizer(&self, a: &Attributes<'_>) -> keel_cel::Authorizer {
        keel_cel::Authorizer::new(
            Arc::new(Rbac {
                policy: self.policies().current(),
                user: a.requester.user.cloned(),
            }),
            keel_cel::AuthzRequest {
                group: a.info.gvr.group.clone(),
                resource: a.info.gvr.resource.clone(),
                subresource: a.subresource.to_string(),
                namespace: a.namespace.to_string(),
                name: a.name.to_string(),
                ..Default::default()
            },
        )
    }

    /// Sends failure `f` of `policy` under `binding` where the binding's actions say.
    #[allow(clippy::too_many_arguments)]
    fn act_on(
        &self,
        policy: &Policy,
        binding: &PolicyBinding,
        f: &policy::Failure,
        a: &Attributes<'_>,
        target: &Target,
        deny: &mut impl FnMut(ApiError),
        audit_failures: &mut Vec<Value>,
    ) {
        if binding.deny {
            deny(denial(
                target,
                f.reason,
                format!(
                    "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {}",
                    policy.name, binding.name, f.message
                ),
            ));
        }
        if binding.warn
            && let Some(w) = a.requester.warnings
        {
            w.push(format!(
                "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                policy.name, binding.name, f.message
            ));
        }
        if binding.audit {
            audit_failures.push(json!({
                "message": f.message,
                "policy": policy.name,
                "binding": binding.name,
                "expressionIndex": f.index,
                "validationActions": binding.actions,
            }));
        }
    }

    /// The served resource of `kind` at `api_version` (`v1`, `example.com/v1`).
    fn resource_of_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.resources()
            .into_iter()
            .find(|r| r.gvr.group == group && r.gvr.version == version && r.kind == kind)
    }

    /// The params a binding's `paramRef` finds, as Kubernetes' `CollectParams` finds them:
    /// by name or by selector, in the paramRef's namespace or else the write's.
    async fn policy_params(
        &self,
        info: &Arc<ResourceInfo>,
        r: &ParamRef,
        a: &Attributes<'_>,
        deadline: Instant,
    ) -> Result<Vec<Value>, String> {
        let namespace = if info.namespaced {
            let ns = if r.namespace.is_empty() {
                a.namespace
            } else {
                &r.namespace
            };
            if ns.is_empty() {
                return Err(
                    "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                        .into(),
                );
            }
            ns.to_string()
        } else if !r.namespace.is_empty() {
            return Err(
                "paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into(),
            );
        } else {
            String::new()
        };
        let store = self.store();
        let found: Vec<Object> = match &r.selector {
            None => {
                let key = store.key(info, &namespace, &r.name);
                // A param made a moment ago may not be in the cache yet: read it live then.
                let read = match store.get(&key, ReadFrom::Cache, deadline).await {
                    Err(e) if e.reason == Reason::NotFound => {
                        store.get(&key, ReadFrom::Etcd, deadline).await
                    }
                    read => read,
                };
                match read {
                    Ok(o) => vec![o],
                    Err(e) if e.reason == Reason::NotFound => Vec::new(),
                    Err(e) => return Err(e.message),
                }
            }
            Some(selector) => {
                let all = match store.cached_at(info, |_| true) {
                    Some((objects, _)) => objects,
                    None => store
                        .list(info, &ListQuery::default(), deadline)
                        .await
                        .map_err(|e| e.message)?
                        .items
                        .iter()
                        .filter_map(|b| Object::from_slice(b).ok())
                        .collect(),
                };
                all.into_iter()
                    .filter(|o| namespace.is_empty() || o.namespace() == namespace)
                    .filter(|o| selector.matches(|k| label(o, k)))
                    .collect()
            }
        };
        Ok(found
            .into_iter()
            .map(|mut o| {
                // Params carry their type, as Kubernetes' `wrappedParam` gives them.
                let m = o.as_map_mut();
                m.entry("apiVersion")
                    .or_insert_with(|| json!(info.gvr.api_version()));
                m.entry("kind").or_insert_with(|| json!(info.kind));
                o.into_value()
            })
            .collect())
    }
}
