//! Authorization: Kubernetes' RBAC (`rbac.authorization.k8s.io/v1`). Roles and ClusterRoles
//! hold rules (verbs × API groups × resources, optionally resource names); RoleBindings grant a
//! Role or ClusterRole to users and groups in one namespace, ClusterRoleBindings grant a
//! ClusterRole everywhere. The group `system:masters` may do everything, whatever is bound.
//!
//! Every replica decides from a [`Policy`] built from its watch caches of the four kinds and
//! rebuilt whenever one of them changes ([`Registry::follow_policy`]): a new binding takes
//! effect within a sync period of its write reaching the cache, on every replica.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use keel_api::resource::RBAC_GROUP;
use keel_api::{ApiError, FieldCause, GroupVersionResource, Object, Target};
use serde_json::{Map, Value};

use super::store::Registry;
use super::validation::optional_list;
use crate::auth::User;

/// How often each replica looks for changed RBAC objects in its caches.
const SYNC_EVERY: Duration = Duration::from_millis(100);
/// How long a request waits for a just-started replica to read its policy (`authorize`).
const POLICY_WAIT: Duration = Duration::from_secs(5);
/// The group allowed everything, as in Kubernetes.
pub const MASTERS: &str = "system:masters";

/// What a request wants to do: Kubernetes' authorization attributes of a resource request.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`.
    pub verb: &'a str,
    pub group: &'a str,
    /// The plural resource name.
    pub resource: &'a str,
    /// `""`, `status`, `finalize`.
    pub subresource: &'a str,
    /// `""`: cluster-scoped, or every namespace.
    pub namespace: &'a str,
    /// `""` when the request names no object (list, watch, create).
    pub name: &'a str,
}

/// One rule of a role.
#[derive(Debug, Clone, Default, PartialEq)]
struct Rule {
    verbs: Vec<String>,
    api_groups: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
}

impl Rule {
    /// Kubernetes' `RuleAllows`.
    fn allows(&self, a: &Attributes<'_>) -> bool {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        if !any(&self.verbs, a.verb) || !any(&self.api_groups, a.group) {
            return false;
        }
        let resource_ok = self.resources.iter().any(|r| {
            if a.subresource.is_empty() {
                r == "*" || r == a.resource
            } else {
                r == "*"
                    || r.strip_prefix("*/") == Some(a.subresource)
                    || r.split_once('/') == Some((a.resource, a.subresource))
            }
        });
        resource_ok
            && (self.resource_names.is_empty()
                || (!a.name.is_empty() && self.resource_names.iter().any(|n| n == a.name)))
    }
}

/// Who a binding grants its role to.
#[derive(Debug, Clone, PartialEq)]
enum Subject {
    User(String),
    Group(String),
}

impl Subject {
    fn matches(&self, user: &User) -> bool {
        match self {
            Subject::User(n) => *n == user.name,
            Subject::Group(g) => user.groups.iter().any(|ug| ug == g),
        }
    }
}

/// A binding: its subjects and the role it grants (a Role of its own namespace, or a
/// ClusterRole).
#[derive(Debug, Clone)]
struct Binding {
    name: String,
    subjects: Vec<Subject>,
    cluster_role: bool,
    role: String,
}

/// Every rule and binding, as one replica's caches hold them.
#[derive(Debug, Default)]
pub struct Policy {
    cluster_roles: HashMap<String, Vec<Rule>>,
    /// By (namespace, name).
    roles: HashMap<(String, String), Vec<Rule>>,
    cluster_bindings: Vec<Binding>,
    /// By namespace.
    bindings: HashMap<String, Vec<Binding>>,
}

impl Policy {
    /// From the objects of the four kinds. Objects that are not well-formed (validation keeps
    /// them out; a write of an older version may not) grant nothing.
    pub fn build(
        roles: &[Object],
        cluster_roles: &[Object],
        bindings: &[Object],
        cluster_bindings: &[Object],
    ) -> Policy {
        let mut p = Policy::default();
        for r in cluster_roles {
            p.cluster_roles
                .insert(r.name().to_string(), rules_of(r.as_map()));
        }
        for r in roles {
            p.roles.insert(
                (r.namespace().to_string(), r.name().to_string()),
                rules_of(r.as_map()),
            );
        }
        for b in cluster_bindings {
            if let Some(b) = binding_of(b.as_map()).filter(|b| b.cluster_role) {
                p.cluster_bindings.push(b);
            }
        }
        for b in bindings {
            if let Some(binding) = binding_of(b.as_map()) {
                p.bindings
                    .entry(b.namespace().to_string())
                    .or_default()
                    .push(binding);
            }
        }
        p
    }

    /// Whether it holds every bootstrap ClusterRole and ClusterRoleBinding (by name).
    pub fn has_bootstrap(&self) -> bool {
        super::bootstrap::policy_objects()
            .iter()
            .all(|(resource, obj)| {
                let name = obj["metadata"]["name"].as_str().unwrap_or_default();
                match *resource {
                    "clusterroles" => self.cluster_roles.contains_key(name),
                    _ => self.cluster_bindings.iter().any(|b| b.name == name),
                }
            })
    }

    /// Whether `user` may do `a`.
    pub fn allows(&self, user: &User, a: &Attributes<'_>) -> bool {
        if user.groups.iter().any(|g| g == MASTERS) {
            return true;
        }
        let granted =
            |rules: Option<&Vec<Rule>>| rules.is_some_and(|r| r.iter().any(|r| r.allows(a)));
        let cluster_wide = self.cluster_bindings.iter().any(|b| {
            b.subjects.iter().any(|s| s.matches(user)) && granted(self.cluster_roles.get(&b.role))
        });
        if cluster_wide || a.namespace.is_empty() {
            return cluster_wide;
        }
        self.bindings.get(a.namespace).is_some_and(|bs| {
            bs.iter().any(|b| {
                b.subjects.iter().any(|s| s.matches(user))
                    && if b.cluster_role {
                        granted(self.cluster_roles.get(&b.role))
                    } else {
                        granted(self.roles.get(&(a.namespace.to_string(), b.role.clone())))
                    }
            })
        })
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn rules_of(root: &Map<String, Value>) -> Vec<Rule> {
    root.get("rules")
        .and_then(Value::as_array)
        .map(|rules| {
            rules
                .iter()
                .filter_map(Value::as_object)
                .map(|r| Rule {
                    verbs: strings(r.get("verbs")),
                    api_groups: strings(r.get("apiGroups")),
                    resources: strings(r.get("resources")),
                    resource_names: strings(r.get("resourceNames")),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn binding_of(root: &Map<String, Value>) -> Option<Binding> {
    let role_ref = root.get("roleRef")?.as_object()?;
    let cluster_role = match role_ref.get("kind")?.as_str()? {
        "ClusterRole" => true,
        "Role" => false,
        _ => return None,
    };
    let role = role_ref.get("name")?.as_str()?.to_string();
    let subjects = root
        .get("subjects")
        .and_then(Value::as_array)
        .map(|subjects| {
            subjects
                .iter()
                .filter_map(|s| {
                    let name = s.get("name")?.as_str()?.to_string();
                    match s.get("kind")?.as_str()? {
                        "User" => Some(Subject::User(name)),
                        "Group" => Some(Subject::Group(name)),
                        // A service account is the user Kubernetes names after it.
                        "ServiceAccount" => {
                            let ns = s.get("namespace")?.as_str()?;
                            Some(Subject::User(format!("system:serviceaccount:{ns}:{name}")))
                        }
                        _ => None,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Some(Binding {
        name: root
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        subjects,
        cluster_role,
        role,
    })
}

/// Kubernetes' `Forbidden` for a denied request: `configmaps "x" is forbidden: User "alice"
/// cannot get resource "configmaps" in API group "" in the namespace "default"`.
pub fn forbidden(user: &User, a: &Attributes<'_>) -> ApiError {
    let resource = if a.subresource.is_empty() {
        a.resource.to_string()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {:?}", a.namespace)
    };
    let why = format!(
        "User {:?} cannot {} resource {resource:?} in API group {:?} {scope}",
        user.name, a.verb, a.group
    );
    super::strategy::forbidden(Target::new(a.group, a.resource, a.name), &why)
}

/// Validation of a Role's or ClusterRole's rules.
pub fn validate_role(root: &Map<String, Value>, causes: &mut Vec<FieldCause>) {
    let rules = optional_list(root, "rules", causes);
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("rules[{i}]");
        let Some(rule) = rule.as_object() else {
            causes.push(FieldCause::type_error(path, "an object"));
            continue;
        };
        for field in [
            "verbs",
            "apiGroups",
            "resources",
            "resourceNames",
            "nonResourceURLs",
        ] {
            match rule.get(field) {
                None | Some(Value::Null) => {}
                Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
                Some(_) => causes.push(FieldCause::type_error(
                    format!("{path}.{field}"),
                    "a list of strings",
                )),
            }
        }
        if strings(rule.get("verbs")).is_empty() {
            causes.push(FieldCause::required(format!("{path}.verbs")));
        }
        let non_resource = !strings(rule.get("nonResourceURLs")).is_empty();
        if !non_resource {
            if rule.get("apiGroups").is_none() {
                causes.push(FieldCause::required(format!("{path}.apiGroups")));
            }
            if strings(rule.get("resources")).is_empty() {
                causes.push(FieldCause::required(format!("{path}.resources")));
            }
        }
    }
}

/// Validation of a RoleBinding's or ClusterRoleBinding's `roleRef` and `subjects`.
pub fn validate_binding(root: &Map<String, Value>, namespaced: bool, causes: &mut Vec<FieldCause>) {
    match root.get("roleRef").and_then(Value::as_object) {
        None => causes.push(FieldCause::required("roleRef")),
        Some(r) => {
            match r.get("apiGroup").and_then(Value::as_str) {
                Some(RBAC_GROUP) => {}
                Some(g) => causes.push(FieldCause::not_supported(
                    "roleRef.apiGroup",
                    g,
                    &[RBAC_GROUP],
                )),
                None => causes.push(FieldCause::required("roleRef.apiGroup")),
            }
            let kinds: &[&str] = if namespaced {
                &["Role", "ClusterRole"]
            } else {
                &["ClusterRole"]
            };
            match r.get("kind").and_then(Value::as_str) {
                Some(k) if kinds.contains(&k) => {}
                Some(k) => causes.push(FieldCause::not_supported("roleRef.kind", k, kinds)),
                None => causes.push(FieldCause::required("roleRef.kind")),
            }
            match r.get("name").and_then(Value::as_str) {
                Some(n) if !n.is_empty() => {
                    for e in keel_api::validation::path_segment_name(n) {
                        causes.push(FieldCause::invalid("roleRef.name", n, e));
                    }
                }
                _ => causes.push(FieldCause::required("roleRef.name")),
            }
        }
    }
    let subjects = optional_list(root, "subjects", causes);
    for (i, s) in subjects.iter().enumerate() {
        let path = format!("subjects[{i}]");
        let Some(s) = s.as_object() else {
            causes.push(FieldCause::type_error(path, "an object"));
            continue;
        };
        let kind = s.get("kind").and_then(Value::as_str);
        match kind {
            Some("User" | "Group" | "ServiceAccount") => {}
            Some(k) => causes.push(FieldCause::not_supported(
                format!("{path}.kind"),
                k,
                &["User", "Group", "ServiceAccount"],
            )),
            None => causes.push(FieldCause::required(format!("{path}.kind"))),
        }
        if s.get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(FieldCause::required(format!("{path}.name")));
        }
        if kind == Some("ServiceAccount")
            && s.get("namespace")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            causes.push(FieldCause::required(format!("{path}.namespace")));
        }
    }
}

/// The four RBAC resources.
fn gvr(resource: &str) -> GroupVersionResource {
    GroupVersionResource::new(RBAC_GROUP, "v1", resource)
}

impl Registry {
    /// Keeps this replica's policy current until the process ends: rebuilt whenever one of
    /// the four kinds changes in this replica's caches.
    pub async fn follow_policy(self: Arc<Self>) {
        let infos: Vec<_> = [
            "roles",
            "clusterroles",
            "rolebindings",
            "clusterrolebindings",
        ]
        .iter()
        .filter_map(|r| self.lookup(Some(&gvr(r))).ok())
        .collect();
        let [roles, cluster_roles, bindings, cluster_bindings] = infos.as_slice() else {
            return;
        };
        let mut tick = tokio::time::interval(SYNC_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Also rebuilt when bootstrapping ends or the last of the four caches has loaded, for
        // readiness (`set_policy`).
        let mut seen: Option<(bool, Vec<Option<i64>>)> = None;
        let kinds = [roles, cluster_roles, bindings, cluster_bindings];
        loop {
            tick.tick().await;
            // A cache that is loading holds nothing yet: the policy is complete only once all
            // four have loaded.
            let changed: Vec<Option<i64>> = kinds
                .iter()
                .map(|info| self.store().cache_changed(info))
                .collect();
            let complete = self.is_bootstrapped() && changed.iter().all(Option::is_some);
            let fingerprint = (complete, changed);
            if seen.as_ref() == Some(&fingerprint) {
                continue;
            }
            let [r, cr, b, cb] = kinds.map(|info| self.store().cached(info, |_| true));
            self.set_policy(Policy::build(&r, &cr, &b, &cb), complete);
            seen = Some(fingerprint);
        }
    }

    /// Whether `user` may do `a`: `Forbidden` in Kubernetes' words if not. `None`: the
    /// request came with no identity because authentication is off (a development server),
    /// or authorization is `AlwaysAllow`.
    ///
    /// RBAC only grants, so a policy read in part can only refuse too much. A replica that has
    /// not read its whole policy yet (just started) lets what it already allows through and
    /// makes the rest wait for the policy, up to [`POLICY_WAIT`] and `deadline`; past that the
    /// answer is `ServiceUnavailable`, which a client retries, never a wrong `Forbidden`.
    pub async fn authorize(
        &self,
        user: Option<&User>,
        a: &Attributes<'_>,
        deadline: Instant,
    ) -> Result<(), ApiError> {
        let Some(user) = user else { return Ok(()) };
        let mut ready = self.policy_ready();
        let read = *ready.borrow_and_update();
        if self.policy().allows(user, a) {
            return Ok(());
        }
        if !read {
            let until = deadline.min(Instant::now() + POLICY_WAIT);
            if tokio::time::timeout_at(until, ready.wait_for(|r| *r))
                .await
                .is_err()
            {
                return Err(ApiError::unavailable(
                    "this API server has not read its RBAC policy yet: try again",
                )
                .retry_after(1));
            }
            if self.policy().allows(user, a) {
                return Ok(());
            }
        }
        Err(forbidden(user, a))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use keel_api::Reason;

    fn obj(v: Value) -> Object {
        Object::from_value(v).expect("an object")
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn attrs<'a>(
        verb: &'a str,
        resource: &'a str,
        namespace: &'a str,
        name: &'a str,
    ) -> Attributes<'a> {
        Attributes {
            verb,
            group: "",
            resource,
            subresource: "",
            namespace,
            name,
        }
    }

    fn policy() -> Policy {
        let reader = obj(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "cm-reader", "namespace": "team"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]}),
        );
        let binding = obj(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "alice-reads", "namespace": "team"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "cm-reader"},
            "subjects": [{"kind": "User", "name": "alice"}]}),
        );
        let status_patcher = obj(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "status"},
            "rules": [{"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["patch"]},
                      {"apiGroups": [""], "resources": ["pods"], "resourceNames": ["one"], "verbs": ["*"]}]}),
        );
        let cluster_binding = obj(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "ops-status"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "status"},
            "subjects": [{"kind": "Group", "name": "ops"}]}),
        );
        Policy::build(&[reader], &[status_patcher], &[binding], &[cluster_binding])
    }

    #[test]
    fn a_role_binding_grants_its_rules_in_its_namespace_only() {
        let p = policy();
        let alice = user("alice", &["system:authenticated"]);
        assert!(p.allows(&alice, &attrs("get", "configmaps", "team", "x")));
        assert!(p.allows(&alice, &attrs("watch", "configmaps", "team", "")));
        assert!(!p.allows(&alice, &attrs("get", "configmaps", "other", "x")));
        assert!(!p.allows(&alice, &attrs("list", "configmaps", "", "")));
        assert!(!p.allows(&alice, &attrs("delete", "configmaps", "team", "x")));
        assert!(!p.allows(&alice, &attrs("get", "pods", "team", "x")));
        assert!(!p.allows(&user("bob", &[]), &attrs("get", "configmaps", "team", "x")));
    }

    #[test]
    fn subresources_resource_names_and_groups_match_as_in_kubernetes() {
        let p = policy();
        let ops = user("carol", &["ops"]);
        let status = Attributes {
            group: "apps",
            subresource: "status",
            ..attrs("patch", "deployments", "team", "web")
        };
        assert!(p.allows(&ops, &status));
        assert!(!p.allows(
            &ops,
            &Attributes {
                subresource: "",
                ..status
            }
        ));
        assert!(!p.allows(
            &ops,
            &Attributes {
                group: "",
                ..status
            }
        ));
        assert!(p.allows(&ops, &attrs("delete", "pods", "any", "one")));
        assert!(!p.allows(&ops, &attrs("delete", "pods", "any", "two")));
        // A rule with resourceNames never allows a request that names no object.
        assert!(!p.allows(&ops, &attrs("list", "pods", "any", "")));
    }

    #[test]
    fn system_masters_may_do_everything() {
        let p = Policy::default();
        assert!(p.allows(
            &user("root", &[MASTERS]),
            &attrs("delete", "namespaces", "", "default")
        ));
        assert!(!p.allows(
            &user("root", &[]),
            &attrs("get", "namespaces", "", "default")
        ));
    }

    #[test]
    fn forbidden_uses_kubernetes_wording() {
        let alice = user("alice", &[]);
        let e = forbidden(&alice, &attrs("get", "configmaps", "other", "x"));
        assert_eq!(e.reason, Reason::Forbidden);
        assert_eq!(
            e.message,
            "configmaps \"x\" is forbidden: User \"alice\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"other\""
        );
        let e = forbidden(
            &alice,
            &Attributes {
                group: "apps",
                subresource: "status",
                ..attrs("list", "deployments", "", "")
            },
        );
        assert_eq!(
            e.message,
            "deployments.apps is forbidden: User \"alice\" cannot list resource \"deployments/status\" in API group \"apps\" at the cluster scope"
        );
    }

    #[test]
    fn malformed_rules_and_bindings_are_reported_with_their_fields() {
        let mut causes = Vec::new();
        let role = json!({"rules": [{"resources": ["pods"]}, 3]});
        validate_role(role.as_object().expect("object"), &mut causes);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["rules[0].verbs", "rules[0].apiGroups", "rules[1]"]);
        let mut causes = Vec::new();
        let binding = json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "Robot", "name": "x"}, {"kind": "ServiceAccount", "name": "y"}]});
        validate_binding(binding.as_object().expect("object"), false, &mut causes);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            ["roleRef.kind", "subjects[0].kind", "subjects[1].namespace"]
        );
    }
}
