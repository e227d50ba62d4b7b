//! Authorization: Kubernetes' RBAC (`rbac.authorization.k8s.io/v1`). Roles and ClusterRoles
//! hold rules (verbs × API groups × resources, optionally resource names); RoleBindings grant a
//! Role or ClusterRole to users and groups in one namespace, ClusterRoleBindings grant a
//! ClusterRole everywhere. The group `system:masters` may do everything, whatever is bound.
//!
//! Every replica decides from a [`Policy`] built from its watch caches of the four kinds and
//! rebuilt whenever one of them changes ([`Policies::follow`]): a new binding takes
//! effect within a sync period of its write reaching the cache, on every replica.

pub mod defaults;
mod escalation;
mod policies;
#[cfg(test)]
mod properties;
mod rules;

use std::collections::HashMap;

use keel_api::resource::RBAC_GROUP;
use keel_api::{ApiError, FieldCause, Metadata, Object, Target};
use serde_json::{Map, Value};

use super::fields::optional_list;
use crate::auth::User;

pub use escalation::{GrantCheck, GrantKind, role_ref};
pub use policies::{Policies, policy_resources};
use rules::strings;
pub use rules::{Attributes, Rule};

/// The group allowed everything, as in Kubernetes.
pub const MASTERS: &str = "system:masters";

/// Who a binding grants its role to.
#[derive(Debug, Clone, PartialEq)]
enum Subject {
    User(String),
    Group(String),
    /// Authenticated as the user `system:serviceaccount:<namespace>:<name>`.
    ServiceAccount {
        namespace: String,
        name: String,
    },
}

impl Subject {
    fn matches(&self, user: &User) -> bool {
        match self {
            Subject::User(n) => *n == user.name,
            Subject::Group(g) => user.groups.iter().any(|ug| ug == g),
            Subject::ServiceAccount { namespace, name } => user
                .name
                .strip_prefix("system:serviceaccount:")
                .and_then(|rest| rest.split_once(':'))
                .is_some_and(|(ns, n)| ns == namespace && n == name),
        }
    }

    /// As Kubernetes' RBAC describes it in a decision's reason: `User "alice"`.
    fn describe(&self) -> String {
        match self {
            Subject::User(n) => format!("User {n:?}"),
            Subject::Group(g) => format!("Group {g:?}"),
            Subject::ServiceAccount { namespace, name } => {
                format!("ServiceAccount {:?}", format!("{name}/{namespace}"))
            }
        }
    }
}

/// A binding: its subjects and the role it grants (a Role of its own namespace, or a
/// ClusterRole).
#[derive(Debug, Clone)]
struct Binding {
    name: String,
    /// `""` for a ClusterRoleBinding.
    namespace: String,
    subjects: Vec<Subject>,
    cluster_role: bool,
    role: String,
}

impl Binding {
    /// As Kubernetes' RBAC describes it: `RoleBinding "alice/team" of Role "reader"`.
    fn describe(&self) -> String {
        let role_kind = if self.cluster_role {
            "ClusterRole"
        } else {
            "Role"
        };
        if self.namespace.is_empty() {
            format!(
                "ClusterRoleBinding {:?} of {role_kind} {:?}",
                self.name, self.role
            )
        } else {
            let name = format!("{}/{}", self.name, self.namespace);
            format!("RoleBinding {name:?} of {role_kind} {:?}", self.role)
        }
    }
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
                .insert(r.name().to_string(), Rule::all_of(r.as_map()));
        }
        for r in roles {
            p.roles.insert(
                (r.namespace().to_string(), r.name().to_string()),
                Rule::all_of(r.as_map()),
            );
        }
        for b in cluster_bindings {
            if let Some(b) = binding_of(b.as_map(), "").filter(|b| b.cluster_role) {
                p.cluster_bindings.push(b);
            }
        }
        for b in bindings {
            if let Some(binding) = binding_of(b.as_map(), b.namespace()) {
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
        defaults::policy_objects().iter().all(|(resource, obj)| {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            match *resource {
                "clusterroles" => self.cluster_roles.contains_key(name),
                _ => self.cluster_bindings.iter().any(|b| b.name == name),
            }
        })
    }

    /// The rules a binding grants: `None` when its role does not exist (yet).
    fn role_rules(
        &self,
        binding_namespace: &str,
        cluster_role: bool,
        role: &str,
    ) -> Option<&[Rule]> {
        if cluster_role {
            self.cluster_roles.get(role)
        } else {
            self.roles
                .get(&(binding_namespace.to_string(), role.to_string()))
        }
        .map(Vec::as_slice)
    }

    /// Each binding that applies to `user` in `namespace` (`""`: at the cluster scope, where
    /// only ClusterRoleBindings apply), with the subject that matched and the rules it
    /// grants: Kubernetes' `VisitRulesFor`, ClusterRoleBindings first.
    fn grants<'p>(
        &'p self,
        user: &'p User,
        namespace: &str,
    ) -> impl Iterator<Item = (&'p Binding, &'p Subject, &'p [Rule])> + 'p {
        let local = if namespace.is_empty() {
            None
        } else {
            self.bindings.get(namespace)
        };
        self.cluster_bindings
            .iter()
            .chain(local.into_iter().flatten())
            .filter_map(move |b| {
                let subject = b.subjects.iter().find(|s| s.matches(user))?;
                let rules = self.role_rules(&b.namespace, b.cluster_role, &b.role)?;
                Some((b, subject, rules))
            })
    }

    /// Every rule `user` holds in `namespace` (`""`: at the cluster scope), as Kubernetes'
    /// `RulesFor` gathers them (a rule held twice is listed twice).
    pub fn rules_for(&self, user: &User, namespace: &str) -> Vec<Rule> {
        self.grants(user, namespace)
            .flat_map(|(_, _, rules)| rules.iter().cloned())
            .collect()
    }

    /// Whether `user` may do `a`.
    pub fn allows(&self, user: &User, a: &Attributes<'_>) -> bool {
        // Every request is asked: no reason is worded for it.
        is_master(user)
            || self
                .grants(user, a.namespace)
                .any(|(_, _, rules)| rules.iter().any(|r| r.allows(a)))
    }

    /// `Some(reason)` when `user` may do `a`, in Kubernetes' words (`RBAC: allowed by
    /// RoleBinding "alice/team" of Role "reader" to User "alice"`; empty for `system:masters`,
    /// which Kubernetes allows before RBAC is asked); `None` when not.
    pub fn decide(&self, user: &User, a: &Attributes<'_>) -> Option<String> {
        if is_master(user) {
            return Some(String::new());
        }
        self.grants(user, a.namespace)
            .find(|(_, _, rules)| rules.iter().any(|r| r.allows(a)))
            .map(|(b, s, _)| format!("RBAC: allowed by {} to {}", b.describe(), s.describe()))
    }
}

/// Whether `user` is in `system:masters`, which may do everything.
pub fn is_master(user: &User) -> bool {
    user.groups.iter().any(|g| g == MASTERS)
}

fn binding_of(root: &Map<String, Value>, namespace: &str) -> Option<Binding> {
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
                        // In a RoleBinding, a ServiceAccount without a namespace is one of
                        // the binding's own; with none at all, no one (Kubernetes'
                        // `appliesToUser`).
                        "ServiceAccount" => {
                            let namespace = s
                                .get("namespace")
                                .and_then(Value::as_str)
                                .filter(|ns| !ns.is_empty())
                                .unwrap_or(namespace);
                            (!namespace.is_empty()).then(|| Subject::ServiceAccount {
                                namespace: namespace.to_string(),
                                name,
                            })
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
        namespace: namespace.to_string(),
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
    super::errors::forbidden(Target::new(a.group, a.resource, a.name), &why)
}

/// A binding's role is what its writer was checked against (`GrantCheck`), as in Kubernetes:
/// a different role is a different binding, so `roleRef` cannot change.
pub fn role_ref_unchanged(new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
    if new.as_map().get("roleRef") != old.as_map().get("roleRef") {
        let value = new
            .as_map()
            .get("roleRef")
            .map(Value::to_string)
            .unwrap_or_default();
        causes.push(FieldCause::invalid(
            "roleRef",
            &value,
            "cannot change roleRef",
        ));
    }
}

/// Validation of a Role's or ClusterRole's rules (`namespaced`: a Role, whose rules cannot
/// name non-resource URLs).
pub fn validate_role(root: &Map<String, Value>, namespaced: bool, causes: &mut Vec<FieldCause>) {
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
        let urls = strings(rule.get("nonResourceURLs"));
        let non_resource = !urls.is_empty();
        if non_resource {
            let value = format!("{urls:?}");
            if namespaced {
                causes.push(FieldCause::invalid(
                    format!("{path}.nonResourceURLs"),
                    &value,
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            } else if !strings(rule.get("resources")).is_empty()
                || !strings(rule.get("apiGroups")).is_empty()
            {
                causes.push(FieldCause::invalid(
                    format!("{path}.nonResourceURLs"),
                    &value,
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
        } else {
            if rule.get("apiGroups").is_none() {
                causes.push(FieldCause::required(format!("{path}.apiGroups")));
            }
            if strings(rule.get("resources")).is_empty() {
                causes.push(FieldCause::required(format!("{path}.resources")));
            }
        }
    }
}

/// Validation of a ClusterRole's `aggregationRule` (Kubernetes' `ValidateClusterRole`): at
/// least one selector, each a valid label selector.
pub fn validate_aggregation_rule(root: &Map<String, Value>, causes: &mut Vec<FieldCause>) {
    let rule = match root.get("aggregationRule") {
        None | Some(Value::Null) => return,
        Some(Value::Object(rule)) => rule,
        Some(_) => {
            causes.push(FieldCause::type_error("aggregationRule", "an object"));
            return;
        }
    };
    let path = "aggregationRule.clusterRoleSelectors";
    let selectors = optional_list(rule, "clusterRoleSelectors", causes);
    if selectors.is_empty() {
        causes.push(FieldCause {
            message: "Required value: at least one clusterRoleSelector required if aggregationRule is non-nil".into(),
            ..FieldCause::required(path)
        });
    }
    for (i, selector) in selectors.iter().enumerate() {
        validate_label_selector(selector, &format!("{path}[{i}]"), causes);
    }
}

/// Kubernetes' `ValidateLabelSelector`: label names and values of `matchLabels`, and each
/// requirement of `matchExpressions` with an operator its values fit.
pub fn validate_label_selector(selector: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    let Some(selector) = selector.as_object() else {
        causes.push(FieldCause::type_error(path, "an object"));
        return;
    };
    use keel_api::validation::{label_key, label_value};
    match selector.get("matchLabels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(labels)) => {
            let field = format!("{path}.matchLabels");
            for (k, v) in labels {
                for e in label_key(k) {
                    causes.push(FieldCause::invalid(&field, k, e));
                }
                match v.as_str() {
                    Some(v) => {
                        for e in label_value(v) {
                            causes.push(FieldCause::invalid(&field, v, e));
                        }
                    }
                    None => causes.push(FieldCause::type_error(format!("{field}.{k}"), "a string")),
                }
            }
        }
        Some(_) => causes.push(FieldCause::type_error(
            format!("{path}.matchLabels"),
            "an object",
        )),
    }
    let expressions = optional_list(selector, "matchExpressions", causes);
    for (i, r) in expressions.iter().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        let Some(r) = r.as_object() else {
            causes.push(FieldCause::type_error(at, "an object"));
            continue;
        };
        let values = strings(r.get("values"));
        match r
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "In" | "NotIn" if values.is_empty() => causes.push(FieldCause {
                message: "Required value: must be specified when `operator` is 'In' or 'NotIn'"
                    .into(),
                ..FieldCause::required(format!("{at}.values"))
            }),
            "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(FieldCause::forbidden(
                format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => causes.push(FieldCause::invalid(
                format!("{at}.operator"),
                op,
                "not a valid selector operator",
            )),
        }
        let key = r.get("key").and_then(Value::as_str).unwrap_or_default();
        for e in label_key(key) {
            causes.push(FieldCause::invalid(format!("{at}.key"), key, e));
        }
        for (j, v) in values.iter().enumerate() {
            for e in label_value(v) {
                causes.push(FieldCause::invalid(format!("{at}.values[{j}]"), v, e));
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
        match s.as_object() {
            Some(s) => validate_subject(s, namespaced, &path, causes),
            None => causes.push(FieldCause::type_error(path, "an object")),
        }
    }
}

/// Kubernetes' `ValidateRoleBindingSubject`: a name; a ServiceAccount of the core group,
/// named as a ServiceAccount is, and in a ClusterRoleBinding with its namespace (in a
/// RoleBinding it defaults to the binding's); a User or Group of RBAC's group.
fn validate_subject(
    s: &Map<String, Value>,
    namespaced: bool,
    path: &str,
    causes: &mut Vec<FieldCause>,
) {
    let text = |field: &str| s.get(field).and_then(Value::as_str).unwrap_or_default();
    let (name, group) = (text("name"), text("apiGroup"));
    if name.is_empty() {
        causes.push(FieldCause::required(format!("{path}.name")));
    }
    match text("kind") {
        "ServiceAccount" => {
            if !name.is_empty() {
                for e in keel_api::validation::dns1123_subdomain(name) {
                    causes.push(FieldCause::invalid(format!("{path}.name"), name, e));
                }
            }
            if !group.is_empty() {
                causes.push(FieldCause::not_supported(
                    format!("{path}.apiGroup"),
                    group,
                    &[""],
                ));
            }
            if !namespaced && text("namespace").is_empty() {
                causes.push(FieldCause::required(format!("{path}.namespace")));
            }
        }
        "User" | "Group" => {
            if group != RBAC_GROUP {
                causes.push(FieldCause::not_supported(
                    format!("{path}.apiGroup"),
                    group,
                    &[RBAC_GROUP],
                ));
            }
        }
        kind => causes.push(FieldCause::not_supported(
            format!("{path}.kind"),
            kind,
            &["ServiceAccount", "User", "Group"],
        )),
    }
}

/// Kubernetes' defaults of a binding (`SetDefaults_RoleBinding`, `SetDefaults_Subject`):
/// `roleRef.apiGroup` and a User's or Group's `apiGroup` are RBAC's group when left out.
pub fn default_binding(root: &mut Map<String, Value>) {
    if let Some(Value::Object(r)) = root.get_mut("roleRef") {
        let empty = r
            .get("apiGroup")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if empty {
            r.insert("apiGroup".into(), RBAC_GROUP.into());
        }
    }
    let Some(Value::Array(subjects)) = root.get_mut("subjects") else {
        return;
    };
    for s in subjects.iter_mut().filter_map(Value::as_object_mut) {
        // A ServiceAccount's group is the core group, `""`, which Kubernetes leaves out.
        let person = matches!(
            s.get("kind").and_then(Value::as_str),
            Some("User" | "Group")
        );
        let empty = s
            .get("apiGroup")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if person && empty {
            s.insert("apiGroup".into(), RBAC_GROUP.into());
        }
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
            ..User::default()
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
            path: None,
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
        validate_role(role.as_object().expect("object"), true, &mut causes);
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

    /// Each subject, defaulted as Kubernetes defaults it, in a RoleBinding and in a
    /// ClusterRoleBinding: the causes Kubernetes' `ValidateRoleBindingSubject` gives.
    fn subject_causes(subject: Value, namespaced: bool) -> Vec<String> {
        let mut binding = json!({"roleRef": {"kind": "ClusterRole", "name": "r"},
            "subjects": [subject]});
        let root = binding.as_object_mut().expect("object");
        default_binding(root);
        let mut causes = Vec::new();
        validate_binding(root, namespaced, &mut causes);
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn subjects_are_validated_as_kubernetes_validates_them() {
        let sa = json!({"kind": "ServiceAccount", "name": "builder"});
        assert!(subject_causes(sa.clone(), true).is_empty());
        assert_eq!(
            subject_causes(sa, false),
            ["subjects[0].namespace: Required value"]
        );
        let sa_in = json!({"kind": "ServiceAccount", "name": "builder", "namespace": "ci"});
        assert!(subject_causes(sa_in, false).is_empty());
        assert_eq!(
            subject_causes(
                json!({"kind": "ServiceAccount", "name": "Bad_Name", "apiGroup": "rbac.authorization.k8s.io"}),
                true
            ),
            [
                "subjects[0].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "subjects[0].apiGroup: Unsupported value: \"rbac.authorization.k8s.io\": supported values: \"\"",
            ]
        );
        // A User's and a Group's group defaults to RBAC's; another is refused.
        assert!(subject_causes(json!({"kind": "User", "name": "alice"}), false).is_empty());
        assert!(subject_causes(json!({"kind": "Group", "name": "devs"}), true).is_empty());
        assert_eq!(
            subject_causes(
                json!({"kind": "User", "name": "alice", "apiGroup": "x.io"}),
                true
            ),
            [
                "subjects[0].apiGroup: Unsupported value: \"x.io\": supported values: \"rbac.authorization.k8s.io\""
            ]
        );
        assert_eq!(
            subject_causes(json!({"kind": "User"}), true),
            ["subjects[0].name: Required value"]
        );
        assert_eq!(
            subject_causes(json!({"name": "x"}), true),
            [
                "subjects[0].kind: Unsupported value: \"\": supported values: \"ServiceAccount\", \"User\", \"Group\""
            ]
        );
    }

    #[test]
    fn an_aggregation_rule_needs_a_selector_and_valid_ones() {
        let causes = |rule: Value| {
            let mut root = Map::new();
            root.insert("aggregationRule".into(), rule);
            let mut causes = Vec::new();
            validate_aggregation_rule(&root, &mut causes);
            causes
                .iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            causes(json!({})),
            [
                "aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"
            ]
        );
        assert!(causes(json!({"clusterRoleSelectors": [{}]})).is_empty());
        assert!(causes(Value::Null).is_empty());
        assert_eq!(
            causes(json!({"clusterRoleSelectors": [
                {"matchLabels": {"a": "b,c"}},
                {"matchExpressions": [{"key": "k", "operator": "In"},
                                      {"key": "k", "operator": "Exists", "values": ["x"]},
                                      {"key": "-bad", "operator": "Near"}]}]})),
            [
                "aggregationRule.clusterRoleSelectors[0].matchLabels: Invalid value: \"b,c\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
                "aggregationRule.clusterRoleSelectors[1].matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
                "aggregationRule.clusterRoleSelectors[1].matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                "aggregationRule.clusterRoleSelectors[1].matchExpressions[2].operator: Invalid value: \"Near\": not a valid selector operator",
                "aggregationRule.clusterRoleSelectors[1].matchExpressions[2].key: Invalid value: \"-bad\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ]
        );
    }

    #[test]
    fn defaults_fill_the_groups_left_out_and_nothing_else() {
        let mut binding = json!({"roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "User", "name": "a"}, {"kind": "ServiceAccount", "name": "b"},
                         {"kind": "Group", "name": "c", "apiGroup": "x"}]});
        default_binding(binding.as_object_mut().expect("object"));
        assert_eq!(
            binding,
            json!({"roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "r"},
                "subjects": [{"kind": "User", "name": "a", "apiGroup": RBAC_GROUP},
                             {"kind": "ServiceAccount", "name": "b"},
                             {"kind": "Group", "name": "c", "apiGroup": "x"}]})
        );
    }

    #[test]
    fn a_service_account_without_a_namespace_is_the_role_bindings_own() {
        let binding = obj(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "builder", "namespace": "ci"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "status"},
            "subjects": [{"kind": "ServiceAccount", "name": "builder"}]}),
        );
        let status_patcher = obj(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "status"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        );
        let p = Policy::build(&[], std::slice::from_ref(&status_patcher), &[binding], &[]);
        let builder = |ns: &str| user(&format!("system:serviceaccount:{ns}:builder"), &[]);
        assert!(p.allows(&builder("ci"), &attrs("get", "pods", "ci", "x")));
        // Not elsewhere, and not the same name in another namespace.
        assert!(!p.allows(&builder("ci"), &attrs("get", "pods", "other", "x")));
        assert!(!p.allows(&builder("other"), &attrs("get", "pods", "ci", "x")));
        // A ClusterRoleBinding's ServiceAccount without a namespace (older data) is no one's,
        // not the user `system:serviceaccount::builder`'s.
        let cluster_binding = obj(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "builder"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "status"},
            "subjects": [{"kind": "ServiceAccount", "name": "builder"}]}),
        );
        let p = Policy::build(&[], &[status_patcher], &[], &[cluster_binding]);
        assert!(!p.allows(&builder(""), &attrs("get", "pods", "ci", "x")));
    }
}
