//! Escalation prevention, as Kubernetes' RBAC storage does it: a Role or ClusterRole may be
//! written only by a user who already holds every rule it grants in its scope (or holds
//! `escalate` on it), and a binding only by a user who holds every rule of the role it
//! refers to in the binding's scope (or holds `bind` on that role). Without this, whoever may
//! write RBAC objects may grant themselves anything.

use std::collections::BTreeSet;
use std::sync::Arc;

use keel_api::resource::RBAC_GROUP;
use keel_api::{ApiError, Metadata, Object, Target};
use serde_json::Value;

use super::rules::{self, Attributes, Rule};
use super::{Policy, is_master};
use crate::auth::User;

/// The four RBAC kinds, whose writes grant rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantKind {
    Role,
    ClusterRole,
    RoleBinding,
    ClusterRoleBinding,
}

impl GrantKind {
    /// The kind whose resource is `resource` (`roles`, ...), for tests that name one.
    #[cfg(test)]
    pub fn of_resource(resource: &str) -> GrantKind {
        let all = [
            GrantKind::Role,
            GrantKind::ClusterRole,
            GrantKind::RoleBinding,
            GrantKind::ClusterRoleBinding,
        ];
        let found = all.into_iter().find(|k| k.resource() == resource);
        found.unwrap_or_else(|| panic!("{resource} is no RBAC resource"))
    }

    pub fn is_binding(self) -> bool {
        matches!(self, GrantKind::RoleBinding | GrantKind::ClusterRoleBinding)
    }

    fn resource(self) -> &'static str {
        match self {
            GrantKind::Role => "roles",
            GrantKind::ClusterRole => "clusterroles",
            GrantKind::RoleBinding => "rolebindings",
            GrantKind::ClusterRoleBinding => "clusterrolebindings",
        }
    }
}

/// The check one write of an RBAC object must pass: who writes, against the policy in force
/// when the request came (each replica's, as Kubernetes checks against its informers').
pub struct GrantCheck {
    kind: GrantKind,
    user: User,
    policy: Arc<Policy>,
    /// The object's name as the request was authorized (`""` for a create), for `escalate`.
    request_name: String,
    /// A binding's role as read from etcd when the request came ([`GrantCheck::with_role`]):
    /// a role written just before its binding (one `apply -f` of both) is in no replica's
    /// cache yet, and a role changed just before must be judged as it is now.
    role: Option<(RoleRef, Option<Vec<Rule>>)>,
}

/// A binding's role: (is it a ClusterRole, its name).
pub type RoleRef = (bool, String);

impl GrantCheck {
    /// The check for `user` writing an object of `info`, or `None` when there is nothing to
    /// check: not an RBAC kind, no user (authorization is off), or `system:masters`, which
    /// Kubernetes lets escalate.
    pub fn new(
        kind: GrantKind,
        user: Option<&User>,
        policy: Arc<Policy>,
        request_name: &str,
    ) -> Option<GrantCheck> {
        let user = user.filter(|u| !is_master(u))?;
        Some(GrantCheck {
            kind,
            user: user.clone(),
            policy,
            request_name: request_name.to_string(),
            role: None,
        })
    }

    /// The binding's role as read fresh: its rules, `None` when it does not exist.
    pub fn with_role(mut self, role: RoleRef, rules: Option<Vec<Rule>>) -> GrantCheck {
        self.role = Some((role, rules));
        self
    }

    /// Whether a write of an RBAC kind by `user` is checked at all (before the policy is read).
    pub fn applies(user: Option<&User>) -> bool {
        user.is_some_and(|u| !is_master(u))
    }

    /// Refuses `new` (created, or replacing `old`) when it grants what its writer does not
    /// hold. A change of nothing but owner references and finalizers, which the garbage
    /// collector makes, is let through as Kubernetes lets it.
    pub fn confirm(&self, new: &Object, old: Option<&Object>) -> Result<(), ApiError> {
        if old.is_some_and(|old| only_gc_fields_differ(old, new)) {
            return Ok(());
        }
        let namespace = new.namespace();
        let rules = if self.kind.is_binding() {
            let Some((cluster_role, role)) = role_ref(new) else {
                // Validation refuses it.
                return Ok(());
            };
            let role_resource = if cluster_role {
                "clusterroles"
            } else {
                "roles"
            };
            let bind = Attributes {
                verb: "bind",
                group: RBAC_GROUP,
                resource: role_resource,
                namespace,
                name: &role,
                ..Attributes::default()
            };
            if self.policy.allows(&self.user, &bind) {
                return Ok(());
            }
            let fresh = self
                .role
                .as_ref()
                .filter(|(r, _)| r.0 == cluster_role && r.1 == role)
                .map(|(_, rules)| rules.clone());
            let rules = match fresh {
                Some(rules) => rules,
                None => self
                    .policy
                    .role_rules(namespace, cluster_role, &role)
                    .map(<[Rule]>::to_vec),
            };
            match rules {
                Some(rules) => rules,
                None => {
                    // As Kubernetes' listers word it.
                    let singular = if cluster_role { "clusterrole" } else { "role" };
                    return Err(ApiError::not_found(Target::new(
                        RBAC_GROUP, singular, &role,
                    )));
                }
            }
        } else {
            let escalate = Attributes {
                verb: "escalate",
                group: RBAC_GROUP,
                resource: self.kind.resource(),
                namespace,
                name: &self.request_name,
                ..Attributes::default()
            };
            if self.policy.allows(&self.user, &escalate) {
                return Ok(());
            }
            Rule::all_of(new.as_map())
        };
        let held = self.policy.rules_for(&self.user, namespace);
        let missing = rules::uncovered(&held, &rules);
        if missing.is_empty() {
            // An aggregation rule gathers whatever rules any ClusterRole has or will have, and
            // a change to it can also stop a role from tightening: setting, changing or
            // dropping one takes full authority, as in Kubernetes' ClusterRole storage.
            let aggregates = |o: &Object| {
                o.as_map()
                    .get("aggregationRule")
                    .is_some_and(|r| !r.is_null())
            };
            if self.kind == GrantKind::ClusterRole
                && (aggregates(new) || old.is_some_and(aggregates))
                && !rules::uncovered(&held, &Rule::full_authority()).is_empty()
            {
                return Err(crate::registry::errors::forbidden(
                    Target::new(RBAC_GROUP, self.kind.resource(), new.name()),
                    "must have cluster-admin privileges to use the aggregationRule",
                ));
            }
            return Ok(());
        }
        let missing: BTreeSet<String> = rules::compact(&missing)
            .iter()
            .map(Rule::compact_string)
            .collect();
        let groups: Vec<String> = self.user.groups.iter().map(|g| format!("{g:?}")).collect();
        let why = format!(
            "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
            self.user.name,
            groups.join(" "),
            missing.into_iter().collect::<Vec<_>>().join("\n")
        );
        Err(crate::registry::errors::forbidden(
            Target::new(RBAC_GROUP, self.kind.resource(), new.name()),
            &why,
        ))
    }
}

/// A binding's role, if well-formed.
pub fn role_ref(binding: &Object) -> Option<RoleRef> {
    let r = binding.as_map().get("roleRef")?.as_object()?;
    let cluster_role = match r.get("kind")?.as_str()? {
        "ClusterRole" => true,
        "Role" => false,
        _ => return None,
    };
    Some((cluster_role, r.get("name")?.as_str()?.to_string()))
}

/// Kubernetes' `IsOnlyMutatingGCFields`: `new` is `old` with other owner references or
/// finalizers (and the server's bookkeeping: resourceVersion, generation).
fn only_gc_fields_differ(old: &Object, new: &Object) -> bool {
    let strip = |o: &Object| {
        let mut v = o.as_map().clone();
        if let Some(Value::Object(m)) = v.get_mut("metadata") {
            for f in [
                "ownerReferences",
                "finalizers",
                "resourceVersion",
                "generation",
                "managedFields",
            ] {
                m.remove(f);
            }
        }
        v
    };
    strip(old) == strip(new)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use keel_api::Reason;

    fn obj(v: Value) -> Object {
        Object::from_value(v).expect("an object")
    }

    fn grant_kind(resource: &str) -> GrantKind {
        GrantKind::of_resource(resource)
    }

    fn alice() -> User {
        User {
            name: "alice".into(),
            groups: vec!["system:authenticated".into()],
            uid: String::new(),
        }
    }

    /// alice, in team-a: create/get/list on roles and rolebindings, get/list on configmaps,
    /// and `bind` on the ClusterRole `view` only.
    fn policy() -> Arc<Policy> {
        let role = obj(
            json!({"kind": "Role", "metadata": {"name": "alice", "namespace": "team-a"},
            "rules": [
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create", "get", "list"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": ["view"], "verbs": ["bind"]}]}),
        );
        let binding = obj(
            json!({"kind": "RoleBinding", "metadata": {"name": "alice", "namespace": "team-a"},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "alice"},
            "subjects": [{"kind": "User", "name": "alice"}]}),
        );
        let admin = obj(
            json!({"kind": "ClusterRole", "metadata": {"name": "cluster-admin"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        );
        let view = obj(json!({"kind": "ClusterRole", "metadata": {"name": "view"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps", "pods"], "verbs": ["get", "list", "watch"]}]}));
        let reader = obj(
            json!({"kind": "ClusterRole", "metadata": {"name": "cm-reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
        );
        let escalator = obj(
            json!({"kind": "ClusterRole", "metadata": {"name": "escalator"},
            "rules": [{"apiGroups": [RBAC_GROUP], "resources": ["clusterroles"], "verbs": ["escalate"]}]}),
        );
        // Kubernetes' bootstrap cluster-admin: every resource and every URL.
        let full = obj(json!({"kind": "ClusterRole", "metadata": {"name": "full"},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                      {"nonResourceURLs": ["*"], "verbs": ["*"]}]}));
        // Each of these roles is bound, cluster-wide, to a user of its name.
        let bound = ["full", "escalator"].map(|r| {
            obj(
                json!({"kind": "ClusterRoleBinding", "metadata": {"name": r},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": r},
                "subjects": [{"kind": "User", "name": r}]}),
            )
        });
        Arc::new(Policy::build(
            &[role],
            &[admin, view, reader, escalator, full],
            &[binding],
            &bound,
        ))
    }

    fn check(resource: &str, name: &str) -> GrantCheck {
        GrantCheck::new(grant_kind(resource), Some(&alice()), policy(), name).expect("a check")
    }

    fn binding(kind: &str, role: &str) -> Object {
        obj(
            json!({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "team-a"},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": kind, "name": role},
            "subjects": [{"kind": "User", "name": "alice"}]}),
        )
    }

    #[test]
    fn a_binding_to_a_role_with_more_than_its_writer_holds_is_forbidden() {
        let e = check("rolebindings", "")
            .confirm(&binding("ClusterRole", "cluster-admin"), None)
            .expect_err("refused");
        assert_eq!(e.reason, Reason::Forbidden);
        assert_eq!(
            e.message,
            "rolebindings.rbac.authorization.k8s.io \"b\" is forbidden: user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}"
        );
        // A role whose rules alice holds may be bound.
        check("rolebindings", "")
            .confirm(&binding("ClusterRole", "cm-reader"), None)
            .expect("allowed");
        // `bind` on the role is enough, by name.
        check("rolebindings", "")
            .confirm(&binding("ClusterRole", "view"), None)
            .expect("allowed by bind");
        let e = check("rolebindings", "")
            .confirm(&binding("ClusterRole", "missing"), None)
            .expect_err("no such role");
        assert_eq!(e.reason, Reason::NotFound);
    }

    #[test]
    fn a_role_granting_a_verb_its_writer_lacks_is_forbidden() {
        let role = obj(
            json!({"kind": "Role", "metadata": {"name": "r", "namespace": "team-a"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "delete"]}]}),
        );
        let e = check("roles", "")
            .confirm(&role, None)
            .expect_err("refused");
        assert!(
            e.message.ends_with(
                "not currently held:\n{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"delete\"]}"
            ),
            "{}",
            e.message
        );
        // In another namespace alice holds nothing.
        let elsewhere = obj(
            json!({"kind": "Role", "metadata": {"name": "r", "namespace": "team-b"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
        );
        check("roles", "")
            .confirm(&elsewhere, None)
            .expect_err("refused");
        let held = obj(
            json!({"kind": "Role", "metadata": {"name": "r", "namespace": "team-a"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
        );
        check("roles", "").confirm(&held, None).expect("allowed");
    }

    #[test]
    fn owner_reference_and_finalizer_changes_are_not_checked() {
        let role = obj(
            json!({"kind": "Role", "metadata": {"name": "r", "namespace": "team-a", "resourceVersion": "5"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]}]}),
        );
        let mut finalized = role.clone();
        finalized.as_map_mut()["metadata"]["finalizers"] = json!(["x/y"]);
        check("roles", "r")
            .confirm(&finalized, Some(&role))
            .expect("GC fields only");
        let mut labelled = role.clone();
        labelled.as_map_mut()["metadata"]["labels"] = json!({"a": "b"});
        check("roles", "r")
            .confirm(&labelled, Some(&role))
            .expect_err("checked");
    }

    #[test]
    fn an_aggregation_rule_takes_full_authority_to_set_change_or_drop() {
        let empty = obj(json!({"kind": "ClusterRole", "metadata": {"name": "mine"}}));
        let mut aggregating = empty.clone();
        aggregating.as_map_mut().insert(
            "aggregationRule".into(),
            json!({"clusterRoleSelectors": [{}]}),
        );
        let refused = |r: Result<(), ApiError>| {
            let e = r.expect_err("refused");
            assert_eq!(e.reason, Reason::Forbidden);
            assert_eq!(
                e.message,
                "clusterroles.rbac.authorization.k8s.io \"mine\" is forbidden: must have cluster-admin privileges to use the aggregationRule"
            );
        };
        // alice holds no rule of it, yet may not create it, nor set or keep one on update.
        check("clusterroles", "")
            .confirm(&empty, None)
            .expect("grants nothing");
        refused(check("clusterroles", "").confirm(&aggregating, None));
        refused(check("clusterroles", "mine").confirm(&aggregating, Some(&empty)));
        let mut relabelled = aggregating.clone();
        relabelled.as_map_mut()["metadata"]
            .as_object_mut()
            .expect("metadata")
            .insert("labels".into(), json!({"a": "b"}));
        refused(check("clusterroles", "mine").confirm(&relabelled, Some(&aggregating)));
        refused(check("clusterroles", "mine").confirm(&empty, Some(&aggregating)));
        // A null aggregation rule is none.
        let mut null = empty.clone();
        null.as_map_mut()
            .insert("aggregationRule".into(), Value::Null);
        check("clusterroles", "")
            .confirm(&null, None)
            .expect("no rule");
        // Whoever holds `*` on `*.*` and on every URL may.
        let admin = user_bound_to("full");
        let admin_check = |name: &str| {
            GrantCheck::new(grant_kind("clusterroles"), Some(&admin), policy(), name)
                .expect("a check")
        };
        admin_check("")
            .confirm(&aggregating, None)
            .expect("allowed");
        admin_check("mine")
            .confirm(&empty, Some(&aggregating))
            .expect("allowed");
        // `escalate` lets its holder write any role, as in Kubernetes.
        let escalator = user_bound_to("escalator");
        GrantCheck::new(grant_kind("clusterroles"), Some(&escalator), policy(), "")
            .expect("a check")
            .confirm(&aggregating, None)
            .expect("escalate");
    }

    /// A user named as the ClusterRole it is bound to, cluster-wide.
    fn user_bound_to(role: &str) -> User {
        User {
            name: role.into(),
            groups: vec!["system:authenticated".into()],
            uid: String::new(),
        }
    }

    #[test]
    fn masters_and_unauthenticated_servers_are_not_checked() {
        let root = User {
            groups: vec![crate::registry::rbac::MASTERS.into()],
            ..alice()
        };
        assert!(GrantCheck::new(grant_kind("roles"), Some(&root), policy(), "").is_none());
        assert!(GrantCheck::new(grant_kind("roles"), None, policy(), "").is_none());
    }
}
