//! The reviews, as Kubernetes serves them: a client creates one and reads the answer in its
//! `status`; nothing is stored. `SelfSubjectAccessReview` (may I do this?),
//! `SelfSubjectRulesReview` (what may I do in this namespace?), `SubjectAccessReview` (may
//! this user do this?, for who may create it) and `SelfSubjectReview` (who am I?). They are
//! what `kubectl auth can-i` and `kubectl auth whoami` send, and they answer from the same
//! policy that authorizes requests.

use std::time::SystemTime;

use keel_api::{ApiError, FieldCause, Object, ResourceInfo, Target};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::kinds::ReviewKind;
use super::rbac::{Attributes, Rule, is_master};
use super::store::Registry;
use crate::auth::User;

/// The user Kubernetes names a request without credentials.
const ANONYMOUS: &str = "system:anonymous";

fn text<'v>(m: &'v Map<String, Value>, field: &str) -> &'v str {
    m.get(field).and_then(Value::as_str).unwrap_or_default()
}

impl Registry {
    /// Answers a review (`info.create_only`) created by `requester` (the authenticated user,
    /// impersonation applied; `None` when authentication is off). `authorizing`: whether
    /// requests are authorized by RBAC (else everyone may do everything).
    pub async fn review(
        &self,
        info: &ResourceInfo,
        obj: Object,
        requester: Option<&User>,
        authorizing: bool,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let everything = requester.is_none() || !authorizing;
        if !everything {
            self.policies().wait(deadline).await?;
        }
        let Some(review) = self.kind(info).review() else {
            return Err(ApiError::internal(format!("{} is no review", info.gvr)));
        };
        let answer = match review {
            ReviewKind::SelfSubjectReview => Ok(self_subject_review(info, requester)),
            ReviewKind::SelfSubjectAccessReview => {
                let attributes = attributes_of(info, &obj)?;
                let decision = match requester {
                    Some(user) if !everything => {
                        self.policies().current().decide(user, &attributes.get())
                    }
                    _ => Some(String::new()),
                };
                Ok(with_decision(obj, decision))
            }
            ReviewKind::SubjectAccessReview => {
                let attributes = attributes_of(info, &obj)?;
                let subject = subject_of(info, &obj)?;
                let decision = if everything {
                    Some(String::new())
                } else {
                    self.policies()
                        .current()
                        .decide(&subject, &attributes.get())
                };
                Ok(with_decision(obj, decision))
            }
            ReviewKind::SelfSubjectRulesReview => {
                let namespace = obj
                    .as_map()
                    .get("spec")
                    .and_then(|s| s.get("namespace"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                if namespace.is_empty() {
                    return Err(ApiError::bad_request(
                        Target::new(&info.gvr.group, &info.gvr.resource, ""),
                        "no namespace on request",
                    ));
                }
                let rules = match requester {
                    Some(user) if !everything => {
                        let mut rules = Vec::new();
                        // What Kubernetes' privileged-group authorizer grants, before RBAC's.
                        if is_master(user) {
                            rules.extend(Rule::full_authority());
                        }
                        rules.extend(self.policies().current().rules_for(user, &namespace));
                        rules
                    }
                    _ => Rule::full_authority(),
                };
                Ok(rules_review(info, &rules))
            }
        };
        answer.and_then(|v| Object::from_value(v).map_err(|e| ApiError::internal(e.to_string())))
    }
}

/// A review's `spec.resourceAttributes` or `spec.nonResourceAttributes`, owned.
#[derive(Debug)]
struct Asked {
    verb: String,
    group: String,
    resource: String,
    subresource: String,
    namespace: String,
    name: String,
    path: Option<String>,
}

impl Asked {
    fn get(&self) -> Attributes<'_> {
        Attributes {
            verb: &self.verb,
            group: &self.group,
            resource: &self.resource,
            subresource: &self.subresource,
            namespace: &self.namespace,
            name: &self.name,
            path: self.path.as_deref(),
        }
    }
}

fn invalid(info: &ResourceInfo, cause: FieldCause) -> ApiError {
    ApiError::invalid(Target::new(&info.gvr.group, &info.kind, ""), vec![cause])
}

/// What an access review asks about: exactly one of its spec's `resourceAttributes` and
/// `nonResourceAttributes`, as Kubernetes' validation has it.
fn attributes_of(info: &ResourceInfo, obj: &Object) -> Result<Asked, ApiError> {
    let spec = obj.as_map().get("spec").and_then(Value::as_object);
    let field = |name: &str| spec.and_then(|s| s.get(name)).and_then(Value::as_object);
    match (field("resourceAttributes"), field("nonResourceAttributes")) {
        (Some(r), None) => Ok(Asked {
            verb: text(r, "verb").into(),
            group: text(r, "group").into(),
            resource: text(r, "resource").into(),
            subresource: text(r, "subresource").into(),
            namespace: text(r, "namespace").into(),
            name: text(r, "name").into(),
            path: None,
        }),
        (None, Some(n)) => Ok(Asked {
            verb: text(n, "verb").into(),
            group: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            path: Some(text(n, "path").into()),
        }),
        (Some(_), Some(n)) => Err(invalid(
            info,
            FieldCause::invalid(
                "spec.nonResourceAttributes",
                &Value::Object(n.clone()).to_string(),
                "cannot be specified in combination with resourceAttributes",
            ),
        )),
        (None, None) => Err(invalid(
            info,
            FieldCause::invalid(
                "spec.resourceAttributes",
                "null",
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ),
        )),
    }
}

/// The user a SubjectAccessReview asks about: `spec.user`, `spec.groups` (at least one of
/// them) and `spec.uid`, taken as they are (no `system:authenticated` added: Kubernetes asks
/// about exactly the user described).
fn subject_of(info: &ResourceInfo, obj: &Object) -> Result<User, ApiError> {
    let spec = obj.as_map().get("spec").and_then(Value::as_object);
    let empty = Map::new();
    let spec = spec.unwrap_or(&empty);
    let groups: Vec<String> = spec
        .get("groups")
        .and_then(Value::as_array)
        .map(|g| {
            g.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let name = text(spec, "user");
    if name.is_empty() && groups.is_empty() {
        return Err(invalid(
            info,
            FieldCause::invalid(
                "spec.user",
                "",
                "at least one of user or group must be specified",
            ),
        ));
    }
    Ok(User {
        name: name.into(),
        groups,
        uid: text(spec, "uid").into(),
    })
}

/// An access review answered: the request with its `status` (`reason` as RBAC gave it).
fn with_decision(obj: Object, decision: Option<String>) -> Value {
    let mut v = Value::Object(obj.as_map().clone());
    if v["metadata"].get("creationTimestamp").is_none() {
        v["metadata"]["creationTimestamp"] = Value::Null;
    }
    let mut status = json!({"allowed": decision.is_some()});
    if let Some(reason) = decision.filter(|r| !r.is_empty()) {
        status["reason"] = reason.into();
    }
    v["status"] = status;
    v
}

fn type_meta(info: &ResourceInfo) -> Value {
    json!({"apiVersion": info.api_version(), "kind": info.kind})
}

/// A SelfSubjectRulesReview answered: the rules held, resource rules and non-resource rules
/// apart, as `rbac.authorization.k8s.io` holds them (not deduplicated, as Kubernetes).
fn rules_review(info: &ResourceInfo, rules: &[Rule]) -> Value {
    let strings = |l: &[String]| json!(l);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in rules {
        if !r.resources.is_empty() || !r.api_groups.is_empty() {
            let mut rule = json!({"verbs": strings(&r.verbs)});
            for (field, list) in [
                ("apiGroups", &r.api_groups),
                ("resources", &r.resources),
                ("resourceNames", &r.resource_names),
            ] {
                if !list.is_empty() {
                    rule[field] = strings(list);
                }
            }
            resource_rules.push(rule);
        }
        if !r.non_resource_urls.is_empty() {
            non_resource_rules.push(
                json!({"verbs": strings(&r.verbs), "nonResourceURLs": strings(&r.non_resource_urls)}),
            );
        }
    }
    let mut v = type_meta(info);
    v["metadata"] = json!({"creationTimestamp": null});
    v["spec"] = json!({});
    v["status"] = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    v
}

/// A SelfSubjectReview answered: who the request came as (after impersonation);
/// `system:anonymous` when authentication is off.
fn self_subject_review(info: &ResourceInfo, requester: Option<&User>) -> Value {
    let mut user_info = Map::new();
    match requester {
        Some(u) => {
            user_info.insert("username".into(), u.name.clone().into());
            if !u.uid.is_empty() {
                user_info.insert("uid".into(), u.uid.clone().into());
            }
            if !u.groups.is_empty() {
                user_info.insert("groups".into(), json!(u.groups));
            }
        }
        None => {
            user_info.insert("username".into(), ANONYMOUS.into());
            user_info.insert("groups".into(), json!(["system:unauthenticated"]));
        }
    }
    let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let mut v = type_meta(info);
    v["metadata"] = json!({"creationTimestamp": now});
    v["status"] = json!({"userInfo": user_info});
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_api::Reason;

    fn info(kind: &str) -> ResourceInfo {
        keel_api::review_resources()
            .into_iter()
            .find(|r| r.kind == kind)
            .expect("a review")
    }

    fn obj(v: Value) -> Object {
        Object::from_value(v).expect("an object")
    }

    #[test]
    fn an_access_review_asks_exactly_one_question() {
        let i = info("SelfSubjectAccessReview");
        let e = attributes_of(&i, &obj(json!({"spec": {}}))).expect_err("invalid");
        assert_eq!(e.reason, Reason::Invalid);
        assert_eq!(e.causes[0].field, "spec.resourceAttributes");
        let both = obj(json!({"spec": {"resourceAttributes": {"verb": "get"},
            "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}}));
        let e = attributes_of(&i, &both).expect_err("invalid");
        assert_eq!(e.causes[0].field, "spec.nonResourceAttributes");
        let asked = attributes_of(
            &i,
            &obj(
                json!({"spec": {"resourceAttributes": {"verb": "get", "resource": "pods",
                "subresource": "log", "namespace": "a", "name": "p"}}}),
            ),
        )
        .expect("valid");
        let a = asked.get();
        assert_eq!(
            (a.verb, a.resource, a.subresource, a.namespace, a.name),
            ("get", "pods", "log", "a", "p")
        );
    }

    #[test]
    fn a_subject_access_review_names_a_user_or_a_group() {
        let i = info("SubjectAccessReview");
        let e = subject_of(&i, &obj(json!({"spec": {}}))).expect_err("invalid");
        assert_eq!(e.causes[0].field, "spec.user");
        let u = subject_of(&i, &obj(json!({"spec": {"groups": ["dev"]}}))).expect("valid");
        assert_eq!(u.groups, ["dev"]);
    }

    #[test]
    fn answers_are_shaped_as_kubernetes_answers() {
        let asked = obj(
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "metadata": {}, "spec": {"resourceAttributes": {"verb": "get"}}}),
        );
        let v = with_decision(asked.clone(), None);
        assert_eq!(v["status"], json!({"allowed": false}));
        assert_eq!(v["metadata"], json!({"creationTimestamp": null}));
        let v = with_decision(asked, Some("RBAC: allowed by x".into()));
        assert_eq!(
            v["status"],
            json!({"allowed": true, "reason": "RBAC: allowed by x"})
        );
        let rules = [Rule {
            verbs: vec!["get".into()],
            api_groups: vec!["".into()],
            resources: vec!["pods".into()],
            ..Rule::default()
        }];
        let v = rules_review(&info("SelfSubjectRulesReview"), &rules);
        assert_eq!(
            v["status"],
            json!({"resourceRules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}],
                "nonResourceRules": [], "incomplete": false})
        );
        let alice = User {
            name: "alice".into(),
            groups: vec!["system:authenticated".into()],
            uid: "2".into(),
        };
        let v = self_subject_review(&info("SelfSubjectReview"), Some(&alice));
        assert_eq!(
            v["status"]["userInfo"],
            json!({"username": "alice", "uid": "2", "groups": ["system:authenticated"]})
        );
    }
}
