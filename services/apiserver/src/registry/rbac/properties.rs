//! The property escalation prevention exists for: whatever Roles, ClusterRoles and bindings a
//! user who holds neither `escalate` nor `bind` writes, in any order, no one ends up with a
//! right that neither they nor that user held before. Random sequences of writes over a small
//! universe of rules (wildcards, subresources, resource names, two namespaces and the cluster
//! scope, aggregation rules and the labels they select by), each checked as the API server
//! checks it ([`GrantCheck`]) and applied when allowed, the aggregation controller's work
//! included. (Without the aggregation rule's check, 4,096 cases find alice's three steps:
//! an empty ClusterRole, bound to herself, then given an aggregation rule.)

use std::collections::BTreeSet;
use std::sync::Arc;

use keel_api::resource::RBAC_GROUP;
use keel_api::{Metadata, Object};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::{Attributes, GrantCheck, Policy};
use crate::auth::User;

const NAMESPACES: [&str; 2] = ["team-a", "team-b"];

fn user(name: &str, groups: &[&str]) -> User {
    User {
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        uid: String::new(),
    }
}

fn grant_kind(resource: &str) -> super::GrantKind {
    super::GrantKind::of_resource(resource)
}

/// A rule of the universe. `held`: one a user may start with (no verb that is or includes
/// `escalate` or `bind`).
fn rule(held: bool) -> impl Strategy<Value = Value> {
    let verbs: Vec<&'static str> = if held {
        vec!["get", "list", "delete", "create"]
    } else {
        vec!["get", "list", "delete", "create", "*"]
    };
    (
        proptest::sample::subsequence(verbs, 1..=2),
        proptest::sample::subsequence(vec!["", "apps", "*"], 1..=2),
        proptest::sample::subsequence(
            vec!["configmaps", "pods", "pods/status", "*", "*/status"],
            1..=2,
        ),
        proptest::option::of(Just("a")),
    )
        .prop_map(|(verbs, groups, resources, name)| {
            let mut r = json!({"verbs": verbs, "apiGroups": groups, "resources": resources});
            if let Some(n) = name {
                r["resourceNames"] = json!([n]);
            }
            r
        })
}

/// One write by the user.
#[derive(Debug, Clone)]
enum Write {
    /// A Role (`namespace` Some) or ClusterRole named `r<n>`; a ClusterRole may aggregate
    /// (every other ClusterRole, or those labelled `tier: x`) and be labelled `tier: x`.
    Role {
        namespace: Option<usize>,
        n: usize,
        rules: Vec<Value>,
        aggregation: Option<Value>,
        labelled: bool,
    },
    /// A RoleBinding (`namespace` Some) or ClusterRoleBinding named `b<n>`, of a Role (its
    /// own namespace's) or ClusterRole named `role`, to `subject`.
    Binding {
        namespace: Option<usize>,
        n: usize,
        cluster_role: bool,
        role: &'static str,
        subject: &'static str,
    },
}

fn write() -> impl Strategy<Value = Write> {
    // The cluster scope half the time: aggregation is a ClusterRole's.
    let ns = prop_oneof![Just(None), (0..NAMESPACES.len()).prop_map(Some)];
    prop_oneof![
        (
            ns.clone(),
            0..2usize,
            proptest::collection::vec(rule(false), 0..3),
            proptest::option::of(proptest::sample::select(vec![
                json!({"clusterRoleSelectors": [{}]}),
                json!({"clusterRoleSelectors": [{"matchLabels": {"tier": "x"}}]}),
            ])),
            any::<bool>(),
        )
            .prop_map(|(namespace, n, rules, aggregation, labelled)| Write::Role {
                namespace,
                n,
                rules,
                aggregation,
                labelled,
            }),
        (
            ns,
            0..2usize,
            any::<bool>(),
            proptest::sample::select(vec!["r0", "r1", "held", "other", "missing"]),
            proptest::sample::select(vec!["alice", "bob", "dev"]),
        )
            .prop_map(
                |(namespace, n, cluster_role, role, subject)| Write::Binding {
                    namespace,
                    n,
                    cluster_role,
                    role,
                    subject,
                }
            ),
    ]
}

/// Every object of the four kinds, by (resource, namespace, name).
#[derive(Debug, Clone, Default)]
struct World {
    objects: Vec<(&'static str, Object)>,
}

impl World {
    /// The policy in force once the aggregation controller has settled: each aggregating
    /// ClusterRole holds every rule of the ClusterRoles its selectors pick (chains included).
    fn policy(&self) -> Policy {
        let of = |kind: &str| -> Vec<Object> {
            self.objects
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, o)| o.clone())
                .collect()
        };
        let mut cluster_roles = of("clusterroles");
        loop {
            let mut changed = false;
            for i in 0..cluster_roles.len() {
                let role = &cluster_roles[i];
                let rule = role.as_map().get("aggregationRule");
                let Some(selectors) = rule
                    .and_then(|r| r.get("clusterRoleSelectors"))
                    .and_then(Value::as_array)
                    .cloned()
                else {
                    continue;
                };
                let mut rules: Vec<Value> = Vec::new();
                for other in cluster_roles.iter().filter(|o| o.name() != role.name()) {
                    if !selectors.iter().any(|s| selects(s, other)) {
                        continue;
                    }
                    let own = other.as_map().get("rules").and_then(Value::as_array);
                    for r in own.into_iter().flatten() {
                        if !rules.contains(r) {
                            rules.push(r.clone());
                        }
                    }
                }
                let rules = Value::Array(rules);
                if cluster_roles[i].as_map().get("rules") != Some(&rules) {
                    cluster_roles[i].as_map_mut().insert("rules".into(), rules);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        Policy::build(
            &of("roles"),
            &cluster_roles,
            &of("rolebindings"),
            &of("clusterrolebindings"),
        )
    }

    fn find(&self, kind: &str, obj: &Object) -> Option<usize> {
        self.objects.iter().position(|(k, o)| {
            *k == kind && o.name() == obj.name() && o.namespace() == obj.namespace()
        })
    }

    fn put(&mut self, kind: &'static str, obj: Object) {
        match self.find(kind, &obj) {
            Some(i) => self.objects[i] = (kind, obj),
            None => self.objects.push((kind, obj)),
        }
    }

    /// What `user` may do, over every request the universe's rules could speak of.
    fn rights(&self, user: &User) -> BTreeSet<String> {
        let policy = self.policy();
        let mut out = BTreeSet::new();
        for verb in ["get", "list", "delete", "create", "escalate", "bind"] {
            for group in ["", "apps", RBAC_GROUP] {
                for (resource, subresource) in [
                    ("configmaps", ""),
                    ("pods", ""),
                    ("pods", "status"),
                    ("deployments", "status"),
                    ("roles", ""),
                ] {
                    for namespace in ["", NAMESPACES[0], NAMESPACES[1]] {
                        for name in ["", "a", "b"] {
                            let a = Attributes {
                                verb,
                                group,
                                resource,
                                subresource,
                                namespace,
                                name,
                                path: None,
                            };
                            if policy.allows(user, &a) {
                                out.insert(format!(
                                    "{verb} {group}/{resource}/{subresource} {namespace}/{name}"
                                ));
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

/// Whether a selector of the universe (`{}`, or `matchLabels` of one label) picks `role`.
fn selects(selector: &Value, role: &Object) -> bool {
    let labels = role.as_map().get("metadata").and_then(|m| m.get("labels"));
    selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

fn object(kind: &str, namespace: Option<usize>, name: &str, body: Value) -> Object {
    let mut v = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": {"name": name}});
    if let Some(ns) = namespace {
        v["metadata"]["namespace"] = NAMESPACES[ns].into();
    }
    if let (Value::Object(m), Value::Object(mut b)) = (&mut v, body) {
        if let (Some(Value::Object(meta)), Some(Value::Object(own))) =
            (m.get_mut("metadata"), b.remove("metadata"))
        {
            meta.extend(own);
        }
        m.extend(b);
    }
    Object::from_value(v).expect("an object")
}

/// The starting world: `held` bound to alice (by a RoleBinding in team-a, or cluster-wide),
/// `other` bound to no one.
fn start(held: Vec<Value>, other: Vec<Value>, cluster_wide: bool) -> World {
    let mut w = World::default();
    w.put(
        "clusterroles",
        object("ClusterRole", None, "held", json!({"rules": held})),
    );
    // Labelled, so that a selector by label can pick it too.
    w.put(
        "clusterroles",
        object(
            "ClusterRole",
            None,
            "other",
            json!({"rules": other, "metadata": {"labels": {"tier": "x"}}}),
        ),
    );
    let binding = json!({"roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "held"},
        "subjects": [{"kind": "User", "name": "alice"}]});
    if cluster_wide {
        w.put(
            "clusterrolebindings",
            object("ClusterRoleBinding", None, "alice", binding),
        );
    } else {
        w.put(
            "rolebindings",
            object("RoleBinding", Some(0), "alice", binding),
        );
    }
    w
}

/// Applies `write` by `alice` if the API server would allow it.
fn apply(w: &mut World, alice: &User, write: &Write) {
    let (resource, obj) = match write {
        Write::Role {
            namespace,
            n,
            rules,
            aggregation,
            labelled,
        } => {
            let kind = if namespace.is_some() {
                ("roles", "Role")
            } else {
                ("clusterroles", "ClusterRole")
            };
            let mut body = json!({"rules": rules});
            if namespace.is_none() {
                if let Some(a) = aggregation {
                    body["aggregationRule"] = a.clone();
                }
                if *labelled {
                    body["metadata"] = json!({"labels": {"tier": "x"}});
                }
            }
            (kind.0, object(kind.1, *namespace, &format!("r{n}"), body))
        }
        Write::Binding {
            namespace,
            n,
            cluster_role,
            role,
            subject,
        } => {
            let kind = if namespace.is_some() {
                ("rolebindings", "RoleBinding")
            } else {
                ("clusterrolebindings", "ClusterRoleBinding")
            };
            // A ClusterRoleBinding refers to ClusterRoles only (validation).
            let role_kind = if *cluster_role || namespace.is_none() {
                "ClusterRole"
            } else {
                "Role"
            };
            let subject = if *subject == "dev" {
                json!({"kind": "Group", "name": "dev"})
            } else {
                json!({"kind": "User", "name": subject})
            };
            let body = json!({"roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": role},
                "subjects": [subject]});
            (kind.0, object(kind.1, *namespace, &format!("b{n}"), body))
        }
    };
    let old = w.find(resource, &obj).map(|i| w.objects[i].1.clone());
    if let Some(old) = &old
        && old.as_map().get("roleRef") != obj.as_map().get("roleRef")
    {
        // Refused by the update rules: a binding's roleRef is immutable.
        return;
    }
    let request_name = if old.is_some() { obj.name() } else { "" };
    let check = GrantCheck::new(
        grant_kind(resource),
        Some(alice),
        Arc::new(w.policy()),
        request_name,
    )
    .expect("alice's writes are checked");
    if check.confirm(&obj, old.as_ref()).is_ok() {
        w.put(resource, obj);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn writes_by_a_user_without_escalate_or_bind_never_grow_anyones_rights(
        held in proptest::collection::vec(rule(true), 1..4),
        other in proptest::collection::vec(rule(false), 1..3),
        cluster_wide in any::<bool>(),
        writes in proptest::collection::vec(write(), 1..12),
    ) {
        let alice = user("alice", &["system:authenticated"]);
        let bob = user("bob", &["dev", "system:authenticated"]);
        let mut w = start(held, other, cluster_wide);
        let alice_before = w.rights(&alice);
        let bob_before = w.rights(&bob);
        for write in &writes {
            apply(&mut w, &alice, write);
        }
        let alice_after = w.rights(&alice);
        let grown: Vec<&String> = alice_after.difference(&alice_before).collect();
        prop_assert!(grown.is_empty(), "alice gained {:?}", grown);
        let bob_after = w.rights(&bob);
        let granted: Vec<&String> = bob_after
            .iter()
            .filter(|r| !bob_before.contains(*r) && !alice_before.contains(*r))
            .collect();
        prop_assert!(granted.is_empty(), "bob was granted {:?}, which alice did not hold", granted);
    }
}

/// The property is not vacuous: a user's writes do grant what the user holds.
#[test]
fn a_user_may_pass_on_what_it_holds() {
    let alice = user("alice", &["system:authenticated"]);
    let bob = user("bob", &["dev", "system:authenticated"]);
    let get = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]});
    let mut w = start(vec![get.clone()], vec![], false);
    apply(
        &mut w,
        &alice,
        &Write::Role {
            namespace: Some(0),
            n: 0,
            rules: vec![get],
            aggregation: None,
            labelled: false,
        },
    );
    apply(
        &mut w,
        &alice,
        &Write::Binding {
            namespace: Some(0),
            n: 0,
            cluster_role: false,
            role: "r0",
            subject: "bob",
        },
    );
    assert!(w.rights(&bob).contains("get /configmaps/ team-a/a"));
    // And cannot pass on what it does not.
    let before = w.rights(&bob);
    apply(
        &mut w,
        &alice,
        &Write::Binding {
            namespace: Some(1),
            n: 1,
            cluster_role: true,
            role: "held",
            subject: "bob",
        },
    );
    assert_eq!(w.rights(&bob), before);
}
