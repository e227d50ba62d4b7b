//! RBAC (issue 16): two API servers on one etcd, users from a token file. A user bound to a
//! namespaced Role may get, list and watch ConfigMaps in that namespace only; every other verb,
//! namespace and resource is Forbidden in Kubernetes' words. A binding made through one replica
//! takes effect on the other within a second, and its deletion as fast. `system:masters` may do
//! everything; keel's own components have bootstrap roles.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use keel_client::{
    ApiError, ApplyParams, Client, ClientConfig, DeleteParams, ListParams, PatchType, Reason,
    WatchParams, gvr,
};
use keel_tests::{ApiServer, Etcd, eventually, list_names};
use serde_json::json;

const TOKENS: &str = "\
admin-token,admin,1,system:masters
alice-token,alice,2,dev
loadtest-token,keel-loadtest,3,
bob-token,bob,4,
cm-token,system:keel-controller-manager,5,
builder-token,system:serviceaccount:team-a:builder,6,system:serviceaccounts
";

/// `TOKENS` written into `dir`: the path, for `--token-auth-file`.
fn token_file(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("tokens.csv");
    std::fs::write(&path, TOKENS).unwrap();
    path.to_string_lossy().into_owned()
}

async fn client(api: &ApiServer, token: &str) -> Client {
    let mut config = ClientConfig::new([api.endpoint()]).timeout(Duration::from_secs(5));
    config.token = Some(token.to_string());
    Client::connect(&config).await.unwrap()
}

fn configmap(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

fn forbidden(r: Result<impl std::fmt::Debug, ApiError>, message: &str) {
    let e = r.expect_err("Forbidden");
    assert_eq!(e.reason, Reason::Forbidden, "{e}");
    assert_eq!(e.message, message);
}

#[tokio::test]
async fn a_role_binding_grants_its_namespace_only_and_takes_effect_on_every_replica() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = &token_file(&dir);
    let etcd = Etcd::start().await;
    let a = ApiServer::start_with(&etcd, &["--token-auth-file", tokens]).await;
    let b = ApiServer::start_with(&etcd, &["--token-auth-file", tokens]).await;
    let admin = client(&a, "admin-token").await;
    let alice = client(&b, "alice-token").await;
    let cms = gvr("", "v1", "configmaps");
    let ns = gvr("", "v1", "namespaces");
    for name in ["team", "other"] {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        admin.create(&ns, "", &obj).await.unwrap();
        admin
            .create(&cms, name, &configmap("settings"))
            .await
            .unwrap();
    }

    // Nothing is bound to alice yet.
    forbidden(
        alice.get(&cms, "team", "settings").await,
        "configmaps \"settings\" is forbidden: User \"alice\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"team\"",
    );

    let roles = gvr("rbac.authorization.k8s.io", "v1", "roles");
    let bindings = gvr("rbac.authorization.k8s.io", "v1", "rolebindings");
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "configmap-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]});
    admin.create(&roles, "team", &role).await.unwrap();
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "alice-reads"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
        "subjects": [{"kind": "Group", "name": "dev"}]});
    admin.create(&bindings, "team", &binding).await.unwrap();

    // Made through replica a, in force on replica b within a second.
    eventually(
        Duration::from_secs(1),
        "the binding works on the other replica",
        || async { alice.get(&cms, "team", "settings").await.ok() },
    )
    .await;
    let list = alice
        .list(&cms, "team", &ListParams::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let watch = WatchParams {
        namespace: "team".into(),
        ..Default::default()
    };
    assert!(alice.watch(&cms, &watch).await.is_ok());

    // Every other verb, namespace and resource is Forbidden.
    forbidden(
        alice.create(&cms, "team", &configmap("mine")).await,
        "configmaps is forbidden: User \"alice\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"team\"",
    );
    forbidden(
        alice
            .delete(&cms, "team", "settings", &DeleteParams::default())
            .await,
        "configmaps \"settings\" is forbidden: User \"alice\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"team\"",
    );
    forbidden(
        alice.get(&cms, "other", "settings").await,
        "configmaps \"settings\" is forbidden: User \"alice\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"other\"",
    );
    forbidden(
        alice.list(&cms, "", &ListParams::default()).await,
        "configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope",
    );
    let other = WatchParams {
        namespace: "other".into(),
        ..Default::default()
    };
    forbidden(
        alice.watch(&cms, &other).await.map(|_| ()),
        "configmaps is forbidden: User \"alice\" cannot watch resource \"configmaps\" in API group \"\" in the namespace \"other\"",
    );
    forbidden(
        alice.get(&gvr("", "v1", "pods"), "team", "p").await,
        "pods \"p\" is forbidden: User \"alice\" cannot get resource \"pods\" in API group \"\" in the namespace \"team\"",
    );
    forbidden(
        alice.list(&roles, "team", &ListParams::default()).await,
        "roles.rbac.authorization.k8s.io is forbidden: User \"alice\" cannot list resource \"roles\" in API group \"rbac.authorization.k8s.io\" in the namespace \"team\"",
    );

    // Deleted through replica a: refused on replica b within a second.
    admin
        .delete(&bindings, "team", "alice-reads", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        Duration::from_secs(1),
        "the deleted binding stops working",
        || async {
            match alice.get(&cms, "team", "settings").await {
                Err(e) if e.reason == Reason::Forbidden => Some(()),
                _ => None,
            }
        },
    )
    .await;
    // Nothing alice tried was written.
    let names = list_names(&admin, &cms, "team").await;
    assert_eq!(names, ["settings"]);
}

#[tokio::test]
async fn keel_components_have_least_privilege_bootstrap_roles() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", &token_file(&dir)]).await;
    let loadtest = client(&api, "loadtest-token").await;
    let cms = gvr("", "v1", "configmaps");
    // The bootstrap policy is created at start; readiness waits for it.
    loadtest
        .create(&cms, "default", &configmap("load"))
        .await
        .unwrap();
    forbidden(
        loadtest
            .delete(
                &gvr("", "v1", "namespaces"),
                "",
                "default",
                &DeleteParams::default(),
            )
            .await,
        "namespaces \"default\" is forbidden: User \"keel-loadtest\" cannot delete resource \"namespaces\" in API group \"\" at the cluster scope",
    );
    let crb = gvr("rbac.authorization.k8s.io", "v1", "clusterrolebindings");
    let escalate = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "mine"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "User", "name": "keel-loadtest"}]});
    forbidden(
        loadtest.create(&crb, "", &escalate).await,
        "clusterrolebindings.rbac.authorization.k8s.io is forbidden: User \"keel-loadtest\" cannot create resource \"clusterrolebindings\" in API group \"rbac.authorization.k8s.io\" at the cluster scope",
    );
    // The bootstrap objects are there for an admin to read (and edit).
    let admin = client(&api, "admin-token").await;
    let names = list_names(
        &admin,
        &gvr("rbac.authorization.k8s.io", "v1", "clusterroles"),
        "",
    )
    .await;
    assert_eq!(
        names,
        [
            "admin",
            "cluster-admin",
            "edit",
            "keel-loadtest",
            "system:aggregate-to-admin",
            "system:aggregate-to-edit",
            "system:aggregate-to-view",
            "system:basic-user",
            "system:keel-controller-manager",
            "system:keel-initializer",
            "view"
        ]
    );
}

/// A replica that was just started (or restarted) listens before it has read its RBAC policy,
/// and clients that do not look at `/readyz` (keel-client goes by its endpoint list) reach it
/// at once. What the policy allows must not be refused in that window: the request waits for
/// the policy instead.
#[tokio::test]
async fn a_just_started_replica_does_not_refuse_what_its_policy_allows() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = &token_file(&dir);
    let etcd = Etcd::start().await;
    let a = ApiServer::start_with(&etcd, &["--token-auth-file", tokens]).await;
    let admin = client(&a, "admin-token").await;
    let cms = gvr("", "v1", "configmaps");
    admin
        .create(&cms, "default", &configmap("settings"))
        .await
        .unwrap();
    // One ClusterRoleBinding made through the API, 30,000 copies of it put straight into etcd
    // (fast): a replica takes a while to read them all, and keel-loadtest's grant is one.
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "b0"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "keel-loadtest"},
        "subjects": [{"kind": "User", "name": "someone"}]});
    admin
        .create(
            &gvr("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
            "",
            &binding,
        )
        .await
        .unwrap();
    let mut kv = etcd.client().await;
    let key = "/registry/rbac.authorization.k8s.io/clusterrolebindings/";
    let stored = kv.get(format!("{key}b0"), None).await.unwrap();
    let stored: serde_json::Value =
        serde_json::from_slice(stored.kvs().first().expect("stored binding").value()).unwrap();
    for chunk in (1..30_000).collect::<Vec<_>>().chunks(100) {
        let puts: Vec<_> = chunk
            .iter()
            .map(|i| {
                let mut b = stored.clone();
                b["metadata"]["name"] = json!(format!("b{i}"));
                b["metadata"]["uid"] = json!(format!("00000000-0000-0000-0000-{i:012}"));
                etcd_client::TxnOp::put(format!("{key}b{i}"), b.to_string(), None)
            })
            .collect();
        kv.txn(etcd_client::Txn::new().and_then(puts))
            .await
            .unwrap();
    }

    let b = ApiServer::start_listening(&etcd.endpoint, &["--token-auth-file", tokens]).await;
    let loadtest = client(&b, "loadtest-token").await;
    let mut before_ready = 0;
    loop {
        let ready = b.is_ready();
        let got = loadtest.get(&cms, "default", "settings").await;
        assert!(
            got.is_ok(),
            "answered {:?} (request {}, ready: {ready})",
            got.err(),
            before_ready + 1
        );
        if ready {
            break;
        }
        before_ready += 1;
    }
    // Else the test did not reach the window it is about.
    assert!(
        before_ready > 0,
        "the replica was ready before the first request"
    );
}

const RBAC: &str = "rbac.authorization.k8s.io";

fn role(namespace: &str, name: &str, rules: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": namespace}, "rules": rules})
}

fn cluster_role(name: &str, rules: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": rules})
}

fn binding(
    namespace: &str,
    name: &str,
    role_kind: &str,
    role: &str,
    user: &str,
) -> serde_json::Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role},
        "subjects": [{"kind": "User", "name": user}]})
}

/// A Role `name` in `namespace` holding `rules`, and its RoleBinding to `user`, by an admin.
async fn grant(admin: &Client, namespace: &str, name: &str, user: &str, rules: serde_json::Value) {
    admin
        .create(
            &gvr(RBAC, "v1", "roles"),
            namespace,
            &role(namespace, name, rules),
        )
        .await
        .unwrap();
    let b = binding(namespace, name, "Role", name, user);
    admin
        .create(&gvr(RBAC, "v1", "rolebindings"), namespace, &b)
        .await
        .unwrap();
}

/// The issue's alice, in team-a: create/get/list on roles and rolebindings, get/list on
/// configmaps; and, for the rules' finer points, get on pods/status, get on the pod "web" by
/// name, and get on everything of the group apps. team-b exists too. Returns once alice's
/// binding is in force.
async fn alice_in_team_a(admin: &Client, alice: &Client) {
    let ns = gvr("", "v1", "namespaces");
    for name in ["team-a", "team-b"] {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        admin.create(&ns, "", &obj).await.unwrap();
    }
    let rules = json!([
        {"apiGroups": [RBAC], "resources": ["roles", "rolebindings"], "verbs": ["create", "get", "list", "update", "patch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "resourceNames": ["web"], "verbs": ["get"]},
        {"apiGroups": ["apps"], "resources": ["*"], "verbs": ["get"]}]);
    grant(admin, "team-a", "alice", "alice", rules).await;
    eventually(
        Duration::from_secs(5),
        "alice's binding in force",
        || async {
            alice
                .list(&gvr(RBAC, "v1", "roles"), "team-a", &ListParams::default())
                .await
                .ok()
        },
    )
    .await;
}

/// `Forbidden` for granting what is not held, in Kubernetes' words.
fn escalation(r: Result<serde_json::Value, ApiError>, object: &str, missing: &[&str]) {
    let e = r.expect_err("refused as an escalation");
    assert_eq!(e.reason, Reason::Forbidden, "{e}");
    assert_eq!(
        e.message,
        format!(
            "{object} is forbidden: user \"alice\" (groups=[\"dev\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{}",
            missing.join("\n")
        )
    );
}

#[tokio::test]
async fn roles_and_bindings_grant_only_what_their_writer_holds() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", &token_file(&dir)]).await;
    let admin = client(&api, "admin-token").await;
    let alice = client(&api, "alice-token").await;
    let bob = client(&api, "bob-token").await;
    alice_in_team_a(&admin, &alice).await;
    let roles = gvr(RBAC, "v1", "roles");
    let bindings = gvr(RBAC, "v1", "rolebindings");
    let cms = gvr("", "v1", "configmaps");

    // Binding herself to cluster-admin, and a Role with a verb she lacks: refused.
    escalation(
        alice
            .create(
                &bindings,
                "team-a",
                &binding("team-a", "mine", "ClusterRole", "cluster-admin", "alice"),
            )
            .await,
        "rolebindings.rbac.authorization.k8s.io \"mine\"",
        &[
            "{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}",
            "{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}",
        ],
    );
    let deleter = role(
        "team-a",
        "deleter",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "delete"]}]),
    );
    escalation(
        alice.create(&roles, "team-a", &deleter).await,
        "roles.rbac.authorization.k8s.io \"deleter\"",
        &["{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"delete\"]}"],
    );

    // Rule by rule: what she holds may be granted, exactly that.
    let cases: &[(serde_json::Value, bool)] = &[
        (
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}),
            true,
        ),
        (
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}),
            false,
        ),
        (
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["watch"]}),
            false,
        ),
        // Subresources: held ones, never the parent, never a wildcard subresource.
        (
            json!({"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get"]}),
            true,
        ),
        (
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}),
            false,
        ),
        (
            json!({"apiGroups": [""], "resources": ["*/status"], "verbs": ["get"]}),
            false,
        ),
        // Resource names: the name held, no other, and not every object.
        (
            json!({"apiGroups": [""], "resources": ["pods"], "resourceNames": ["web"], "verbs": ["get"]}),
            true,
        ),
        (
            json!({"apiGroups": [""], "resources": ["pods"], "resourceNames": ["db"], "verbs": ["get"]}),
            false,
        ),
        // Wildcards: a held `*` covers every resource of its group, and itself; an unheld one
        // covers nothing.
        (
            json!({"apiGroups": ["apps"], "resources": ["deployments", "deployments/scale"], "verbs": ["get"]}),
            true,
        ),
        (
            json!({"apiGroups": ["apps"], "resources": ["*"], "verbs": ["get"]}),
            true,
        ),
        (
            json!({"apiGroups": ["*"], "resources": ["deployments"], "verbs": ["get"]}),
            false,
        ),
        (
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}),
            false,
        ),
    ];
    for (i, (rule, allowed)) in cases.iter().enumerate() {
        let r = alice
            .create(
                &roles,
                "team-a",
                &role("team-a", &format!("case-{i}"), json!([rule])),
            )
            .await;
        match (allowed, r) {
            (true, Ok(_)) => {}
            (false, Err(e)) if e.reason == Reason::Forbidden => {}
            (_, r) => panic!("rule {rule}: allowed should be {allowed}, got {r:?}"),
        }
    }
    // In a namespace where she holds nothing, nothing (she may not even write there).
    let e = alice
        .create(&roles, "team-b", &role("team-b", "x", json!([])))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden);

    // A Role she holds all of may be bound to someone else, who then has it.
    alice
        .create(
            &bindings,
            "team-a",
            &binding("team-a", "bob-reads", "Role", "case-0", "bob"),
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "bob reads configmaps", || async {
        bob.list(&cms, "team-a", &ListParams::default()).await.ok()
    })
    .await;
    // A binding to a role that does not exist: NotFound, as Kubernetes' lister says it.
    let e = alice
        .create(
            &bindings,
            "team-a",
            &binding("team-a", "ghost", "ClusterRole", "no-such-role", "bob"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::NotFound, "{e}");
    assert_eq!(
        e.message,
        "clusterrole.rbac.authorization.k8s.io \"no-such-role\" not found"
    );

    // Updates are checked as creates are, by patch and by replace alike.
    let grow = json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "delete"]}]});
    escalation(
        alice
            .patch(&roles, "team-a", "case-0", PatchType::Merge, &grow)
            .await,
        "roles.rbac.authorization.k8s.io \"case-0\"",
        &["{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"delete\"]}"],
    );
    let mut replaced = alice.get(&roles, "team-a", "case-0").await.unwrap();
    replaced["rules"] = grow["rules"].clone();
    escalation(
        alice.update(&roles, "team-a", &replaced).await,
        "roles.rbac.authorization.k8s.io \"case-0\"",
        &["{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"delete\"]}"],
    );
    // A binding's role cannot be changed to another.
    let mut rebound = alice.get(&bindings, "team-a", "bob-reads").await.unwrap();
    rebound["roleRef"]["name"] = json!("case-3");
    let e = alice
        .update(&bindings, "team-a", &rebound)
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    assert_eq!(e.causes[0].field, "roleRef");
    // Labels change what no rule holds: still checked, and allowed for a role she holds.
    alice
        .patch(
            &roles,
            "team-a",
            "case-0",
            PatchType::Merge,
            &json!({"metadata": {"labels": {"team": "a"}}}),
        )
        .await
        .unwrap();
    let stored = admin.get(&roles, "team-a", "case-0").await.unwrap();
    assert_eq!(stored["rules"][0]["verbs"], json!(["get", "list"]));

    // `bind` on a ClusterRole, by name, lets her bind it without holding its rules.
    let crs = gvr(RBAC, "v1", "clusterroles");
    for name in ["reader-plus", "writer"] {
        let rules = json!([{"apiGroups": [""], "resources": ["configmaps", "pods"], "verbs": ["get", "list", "watch", "create"]}]);
        admin
            .create(&crs, "", &cluster_role(name, rules))
            .await
            .unwrap();
    }
    let may_bind = json!([{"apiGroups": [RBAC], "resources": ["clusterroles"], "resourceNames": ["reader-plus"], "verbs": ["bind"]}]);
    grant(&admin, "team-a", "binder", "alice", may_bind).await;
    eventually(Duration::from_secs(5), "bind in force", || async {
        alice
            .create(
                &bindings,
                "team-a",
                &binding(
                    "team-a",
                    "bob-reader-plus",
                    "ClusterRole",
                    "reader-plus",
                    "bob",
                ),
            )
            .await
            .ok()
    })
    .await;
    let e = alice
        .create(
            &bindings,
            "team-a",
            &binding("team-a", "bob-writer", "ClusterRole", "writer", "bob"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden, "{e}");

    // `escalate` on roles lets her write a Role with rules she lacks.
    let may_escalate =
        json!([{"apiGroups": [RBAC], "resources": ["roles"], "verbs": ["escalate"]}]);
    grant(&admin, "team-a", "escalator", "alice", may_escalate).await;
    eventually(Duration::from_secs(5), "escalate in force", || async {
        alice.create(&roles, "team-a", &deleter).await.ok()
    })
    .await;
    // Yet escalate on Roles is not bind: binding that Role to herself is still refused.
    escalation(
        alice
            .create(
                &bindings,
                "team-a",
                &binding("team-a", "del", "Role", "deleter", "alice"),
            )
            .await,
        "rolebindings.rbac.authorization.k8s.io \"del\"",
        &["{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"delete\"]}"],
    );
}

#[tokio::test]
async fn a_watch_needs_watch_a_get_names_one_object_and_clients_stop_at_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", &token_file(&dir)]).await;
    let admin = client(&api, "admin-token").await;
    let alice = client(&api, "alice-token").await;
    alice_in_team_a(&admin, &alice).await;
    let cms = gvr("", "v1", "configmaps");
    admin
        .create(&cms, "team-a", &configmap("settings"))
        .await
        .unwrap();

    // get and list, not watch.
    alice.get(&cms, "team-a", "settings").await.unwrap();
    alice
        .list(&cms, "team-a", &ListParams::default())
        .await
        .unwrap();
    let params = WatchParams {
        namespace: "team-a".into(),
        ..Default::default()
    };
    forbidden(
        alice.watch(&cms, &params).await.map(|_| ()),
        "configmaps is forbidden: User \"alice\" cannot watch resource \"configmaps\" in API group \"\" in the namespace \"team-a\"",
    );
    // The resumable watch hands the refusal on and ends, instead of retrying it for ever:
    // Forbidden, and Unauthorized for a token the server does not know.
    let stranger = client(&api, "not-a-token").await;
    for (c, reason) in [
        (&alice, Reason::Forbidden),
        (&stranger, Reason::Unauthorized),
    ] {
        let mut events = c.watch_resumable(&cms, &params);
        let first = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an answer, not retries");
        let e = first.expect("an item").expect_err("refused");
        assert_eq!(e.reason, reason);
        let end = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("the end of the stream");
        assert!(end.is_none());
    }
    // keelctl's watches print it and exit 1, with and without the list first.
    let keelctl = keel_tests::keelctl::Keelctl::new(&api);
    for how in ["--watch-only", "-w"] {
        let run = keelctl.run(&[
            "--token",
            "alice-token",
            "get",
            "configmaps",
            "-n",
            "team-a",
            how,
        ]);
        let err = run.failed();
        assert!(
            err.contains("Error from server (Forbidden): configmaps is forbidden: User \"alice\" cannot watch resource \"configmaps\""),
            "{how}: {err}"
        );
    }

    // A get names one object: a rule with resourceNames allows that object, no list.
    let pods = gvr("", "v1", "pods");
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    };
    for name in ["web", "db"] {
        admin.create(&pods, "team-a", &pod(name)).await.unwrap();
    }
    alice.get(&pods, "team-a", "web").await.unwrap();
    forbidden(
        alice.get(&pods, "team-a", "db").await,
        "pods \"db\" is forbidden: User \"alice\" cannot get resource \"pods\" in API group \"\" in the namespace \"team-a\"",
    );
    forbidden(
        alice.list(&pods, "team-a", &ListParams::default()).await,
        "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"team-a\"",
    );
}

/// Kubernetes' review objects, over gRPC (the kubectl test sends them over REST).
#[tokio::test]
async fn reviews_answer_from_the_policy_in_force() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", &token_file(&dir)]).await;
    let admin = client(&api, "admin-token").await;
    let alice = client(&api, "alice-token").await;
    alice_in_team_a(&admin, &alice).await;
    let ssar = gvr("authorization.k8s.io", "v1", "selfsubjectaccessreviews");
    let ask = |verb: &str, resource: &str, ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": ns}}})
    };
    let yes = alice
        .create(&ssar, "", &ask("list", "configmaps", "team-a"))
        .await
        .unwrap();
    assert_eq!(
        yes["status"],
        json!({"allowed": true, "reason": "RBAC: allowed by RoleBinding \"alice/team-a\" of Role \"alice\" to User \"alice\""})
    );
    let no = alice
        .create(&ssar, "", &ask("delete", "configmaps", "team-a"))
        .await
        .unwrap();
    assert_eq!(no["status"], json!({"allowed": false}));
    let no = alice
        .create(&ssar, "", &ask("list", "configmaps", "team-b"))
        .await
        .unwrap();
    assert_eq!(no["status"], json!({"allowed": false}));
    let e = alice
        .create(&ssar, "", &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}}))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(e.causes[0].field, "spec.resourceAttributes");
    // A review is never stored: nothing to get, list or watch.
    let e = alice
        .list(&ssar, "", &ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::MethodNotAllowed, "{e}");

    // What may I do here: her Role's rules and system:basic-user's.
    let ssrr = gvr("authorization.k8s.io", "v1", "selfsubjectrulesreviews");
    let rules = alice
        .create(&ssrr, "", &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": "team-a"}}))
        .await
        .unwrap();
    let resources: Vec<String> = rules["status"]["resourceRules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["resources"].to_string())
        .collect();
    assert!(
        resources.contains(&"[\"configmaps\"]".to_string()),
        "{resources:?}"
    );
    assert!(
        resources
            .contains(&"[\"selfsubjectaccessreviews\",\"selfsubjectrulesreviews\"]".to_string()),
        "{resources:?}"
    );
    assert_eq!(rules["status"]["incomplete"], json!(false));
    let e = alice
        .create(&ssrr, "", &json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {}}))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);

    // Who am I.
    let ssr = gvr("authentication.k8s.io", "v1", "selfsubjectreviews");
    let me = alice
        .create(
            &ssr,
            "",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        )
        .await
        .unwrap();
    assert_eq!(
        me["status"]["userInfo"],
        json!({"username": "alice", "uid": "2", "groups": ["dev", "system:authenticated"]})
    );

    // Asking about someone else needs the right to: an admin may, alice may not.
    let sar = gvr("authorization.k8s.io", "v1", "subjectaccessreviews");
    let about_alice = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "alice", "groups": ["dev"], "resourceAttributes": {"verb": "get", "resource": "configmaps", "namespace": "team-a"}}});
    forbidden(
        alice.create(&sar, "", &about_alice).await,
        "subjectaccessreviews.authorization.k8s.io is forbidden: User \"alice\" cannot create resource \"subjectaccessreviews\" in API group \"authorization.k8s.io\" at the cluster scope",
    );
    let answer = admin.create(&sar, "", &about_alice).await.unwrap();
    assert_eq!(answer["status"]["allowed"], json!(true));
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb_and_the_audit_log_names_both() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.log");
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(
        &etcd,
        &[
            "--token-auth-file",
            &token_file(&dir),
            "--audit-log-path",
            audit.to_str().unwrap(),
        ],
    )
    .await;
    let admin = client(&api, "admin-token").await;
    let alice = client(&api, "alice-token").await;
    alice_in_team_a(&admin, &alice).await;
    let endpoint = api.endpoint();
    let as_uid = |token: &str, user: &str, groups: &[&str], uid: &str| {
        let mut config = ClientConfig::new([endpoint.clone()]).timeout(Duration::from_secs(5));
        config.token = Some(token.to_string());
        config.impersonate = Some(keel_client::Impersonate {
            user: user.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            uid: uid.into(),
        });
        async move { Client::connect(&config).await.unwrap() }
    };
    let as_user = |token: &str, user: &str, groups: &[&str]| as_uid(token, user, groups, "");
    let cms = gvr("", "v1", "configmaps");
    // An admin acting as alice has alice's rights, not its own.
    let admin_as_alice = as_user("admin-token", "alice", &[]).await;
    admin_as_alice
        .list(&cms, "team-a", &ListParams::default())
        .await
        .unwrap();
    forbidden(
        admin_as_alice
            .list(&cms, "team-b", &ListParams::default())
            .await,
        "configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team-b\"",
    );
    // alice may not act as anyone.
    let alice_as_admin = as_user("alice-token", "admin", &[]).await;
    forbidden(
        alice_as_admin
            .list(&cms, "team-a", &ListParams::default())
            .await,
        "users \"admin\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
    );
    // bob may act as alice, by name, and as no group.
    let crs = gvr(RBAC, "v1", "clusterroles");
    // bob may also act as the service account ci/builder, and with the uid 42.
    let rule = json!([
        {"apiGroups": [""], "resources": ["users"], "resourceNames": ["alice"], "verbs": ["impersonate"]},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "resourceNames": ["builder"], "verbs": ["impersonate"]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["uids"], "resourceNames": ["42"], "verbs": ["impersonate"]}]);
    admin
        .create(&crs, "", &cluster_role("as-alice", rule))
        .await
        .unwrap();
    let crb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "bob-as-alice"},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "as-alice"},
        "subjects": [{"kind": "User", "name": "bob"}]});
    admin
        .create(&gvr(RBAC, "v1", "clusterrolebindings"), "", &crb)
        .await
        .unwrap();
    let bob_as_alice = as_user("bob-token", "alice", &[]).await;
    eventually(Duration::from_secs(5), "bob acts as alice", || async {
        bob_as_alice
            .list(&cms, "team-a", &ListParams::default())
            .await
            .ok()
    })
    .await;
    let bob_as_admin = as_user("bob-token", "admin", &[]).await;
    forbidden(
        bob_as_admin
            .list(&cms, "team-a", &ListParams::default())
            .await,
        "users \"admin\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
    );
    let bob_as_masters = as_user("bob-token", "alice", &["system:masters"]).await;
    forbidden(
        bob_as_masters
            .list(&cms, "team-b", &ListParams::default())
            .await,
        "groups \"system:masters\" is forbidden: User \"bob\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope",
    );
    let ssr = gvr("authentication.k8s.io", "v1", "selfsubjectreviews");
    let whoami = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let builder = as_user("bob-token", "system:serviceaccount:ci:builder", &[]).await;
    let me = builder.create(&ssr, "", &whoami).await.unwrap();
    assert_eq!(
        me["status"]["userInfo"],
        json!({"username": "system:serviceaccount:ci:builder",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:ci", "system:authenticated"]})
    );
    let other = as_user("bob-token", "system:serviceaccount:ci:other", &[]).await;
    forbidden(
        other.create(&ssr, "", &whoami).await,
        "serviceaccounts \"other\" is forbidden: User \"bob\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"ci\"",
    );
    let with_uid = as_uid("bob-token", "alice", &[], "42").await;
    let me = with_uid.create(&ssr, "", &whoami).await.unwrap();
    assert_eq!(me["status"]["userInfo"]["uid"], "42");
    let other_uid = as_uid("bob-token", "alice", &[], "43").await;
    forbidden(
        other_uid.create(&ssr, "", &whoami).await,
        "uids.authentication.k8s.io \"43\" is forbidden: User \"bob\" cannot impersonate resource \"uids\" in API group \"authentication.k8s.io\" at the cluster scope",
    );
    // Whoever acts as alice is alice to the reviews.
    let me = bob_as_alice
        .create(
            &gvr("authentication.k8s.io", "v1", "selfsubjectreviews"),
            "",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        )
        .await
        .unwrap();
    assert_eq!(
        me["status"]["userInfo"],
        json!({"username": "alice", "groups": ["system:authenticated"]})
    );

    // The audit log names who sent each request and whom it acted as.
    let line = eventually(Duration::from_secs(5), "the audit line", || {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        async move {
            text.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|l| l["user"] == "bob" && l["verb"] == "list" && l["code"] == 200)
        }
    })
    .await;
    assert_eq!(
        line["impersonatedUser"],
        json!({"username": "alice", "groups": ["system:authenticated"]})
    );
    assert_eq!(line["namespace"], "team-a");
}

#[tokio::test]
async fn edit_admin_and_view_are_aggregated_and_a_custom_role_joins_them() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", &token_file(&dir)]).await;
    let _cm = keel_tests::ControllerManager::start(&[&api], &["--token", "cm-token"]).await;
    let admin = client(&api, "admin-token").await;
    let alice = client(&api, "alice-token").await;
    let ns = gvr("", "v1", "namespaces");
    let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
    admin.create(&ns, "", &obj).await.unwrap();
    let crs = gvr(RBAC, "v1", "clusterroles");
    let rules_of = |name: &'static str| {
        let admin = admin.clone();
        let crs = crs.clone();
        async move {
            admin.get(&crs, "", name).await.unwrap()["rules"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        }
    };
    // view ⊂ edit ⊂ admin, filled in by the controller.
    eventually(
        Duration::from_secs(20),
        "admin, edit and view filled",
        || async {
            let (view, edit, adm) = (
                rules_of("view").await,
                rules_of("edit").await,
                rules_of("admin").await,
            );
            (!view.is_empty()
                && view.iter().all(|r| edit.contains(r))
                && edit.iter().all(|r| adm.contains(r))
                && edit.len() > view.len()
                && adm.len() > edit.len())
            .then_some(())
        },
    )
    .await;

    // "Bind alice to edit in team-a" works as users expect.
    admin
        .create(
            &gvr(RBAC, "v1", "rolebindings"),
            "team-a",
            &binding("team-a", "alice-edits", "ClusterRole", "edit", "alice"),
        )
        .await
        .unwrap();
    let cms = gvr("", "v1", "configmaps");
    eventually(Duration::from_secs(5), "alice edits configmaps", || async {
        alice.create(&cms, "team-a", &configmap("mine")).await.ok()
    })
    .await;
    alice
        .list(
            &gvr("apps", "v1", "deployments"),
            "team-a",
            &ListParams::default(),
        )
        .await
        .unwrap();
    // edit holds no RBAC: alice cannot write roles.
    let e = alice
        .create(
            &gvr(RBAC, "v1", "roles"),
            "team-a",
            &role("team-a", "r", json!([])),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden);

    // A CRD's role labelled for edit joins edit, and admin through it.
    let networks = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "networks-edit", "labels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
        "rules": [{"apiGroups": ["samplecrd.k8s.io"], "resources": ["networks"], "verbs": ["get", "list", "create"]}]});
    admin.create(&crs, "", &networks).await.unwrap();
    let rule = networks["rules"][0].clone();
    eventually(
        Duration::from_secs(10),
        "networks in edit and admin",
        || async {
            (rules_of("edit").await.contains(&rule) && rules_of("admin").await.contains(&rule))
                .then_some(())
        },
    )
    .await;
    assert!(!rules_of("view").await.contains(&rule));
}

/// The issue's alice, who may only create and update ClusterRoles and create
/// ClusterRoleBindings (and `escalate` the ClusterRole `big` alone), tries to gather
/// cluster-admin's rules through an aggregation rule: on create, and on a role she already bound
/// to herself. Both are Forbidden, and she never reads a Secret; a cluster-admin may still set
/// one, and then its holder does read them, so the refusal is what keeps her out.
#[tokio::test]
async fn an_aggregation_rule_takes_cluster_admin_and_escalate_by_name_holds_on_create_on_apply() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", &token_file(&dir)]).await;
    let _cm = keel_tests::ControllerManager::start(&[&api], &["--token", "cm-token"]).await;
    let admin = client(&api, "admin-token").await;
    let alice = client(&api, "alice-token").await;
    let crs = gvr(RBAC, "v1", "clusterroles");
    let crbs = gvr(RBAC, "v1", "clusterrolebindings");
    let writer = cluster_role(
        "role-writer",
        json!([
            {"apiGroups": [RBAC], "resources": ["clusterroles"], "verbs": ["create", "update", "patch", "get"]},
            {"apiGroups": [RBAC], "resources": ["clusterrolebindings"], "verbs": ["create"]},
            {"apiGroups": [RBAC], "resources": ["clusterroles"], "resourceNames": ["big"], "verbs": ["escalate"]}]),
    );
    admin.create(&crs, "", &writer).await.unwrap();
    let bind = |name: &str, role: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": "alice"}]})
    };
    admin
        .create(&crbs, "", &bind("role-writer", "role-writer"))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(5),
        "alice's binding in force",
        || async {
            alice
                .create(&crs, "", &cluster_role("mine", json!([])))
                .await
                .ok()
        },
    )
    .await;
    // She binds her empty role to herself: it grants nothing.
    alice
        .create(&crbs, "", &bind("mine", "mine"))
        .await
        .unwrap();
    let message = |name: &str| {
        format!(
            "clusterroles.rbac.authorization.k8s.io \"{name}\" is forbidden: must have cluster-admin privileges to use the aggregationRule"
        )
    };
    let aggregate = json!({"aggregationRule": {"clusterRoleSelectors": [{}]}});
    forbidden(
        alice
            .patch(&crs, "", "mine", PatchType::Merge, &aggregate)
            .await,
        &message("mine"),
    );
    let mut gatherer = cluster_role("gatherer", json!([]));
    gatherer["aggregationRule"] = aggregate["aggregationRule"].clone();
    forbidden(
        alice.create(&crs, "", &gatherer).await,
        &message("gatherer"),
    );
    let secrets = gvr("", "v1", "secrets");
    let all = ListParams::default();
    let read_secrets = || alice.list(&secrets, "default", &all);
    forbidden(
        read_secrets().await,
        "secrets is forbidden: User \"alice\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\"",
    );

    // `escalate` granted by name counts on create-on-apply, which names its object.
    let big = cluster_role(
        "big",
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
    );
    alice
        .apply(&crs, "", "big", &big, &ApplyParams::new("alice"))
        .await
        .unwrap();
    let mut other = big.clone();
    other["metadata"]["name"] = json!("other");
    let e = alice
        .apply(&crs, "", "other", &other, &ApplyParams::new("alice"))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden, "{e}");

    // A cluster-admin may set one, and the controller then fills it: had alice's patch
    // passed, this is what she would have read.
    admin
        .patch(&crs, "", "mine", PatchType::Merge, &aggregate)
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "mine gathers secrets", || async {
        read_secrets().await.ok()
    })
    .await;
}

/// A RoleBinding's ServiceAccount subject without a namespace is the binding's own
/// namespace's, as Argo CD's install.yaml writes them; a ClusterRoleBinding's must name one.
#[tokio::test]
async fn a_service_account_subject_without_a_namespace_is_the_role_bindings_own() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", &token_file(&dir)]).await;
    let admin = client(&api, "admin-token").await;
    let builder = client(&api, "builder-token").await;
    let ns = gvr("", "v1", "namespaces");
    let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
    admin.create(&ns, "", &obj).await.unwrap();
    let reader = role(
        "team-a",
        "cm-reader",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]),
    );
    admin
        .create(&gvr(RBAC, "v1", "roles"), "team-a", &reader)
        .await
        .unwrap();
    let mut b = binding("team-a", "builder", "Role", "cm-reader", "unused");
    b["subjects"] = json!([{"kind": "ServiceAccount", "name": "builder"}]);
    let stored = admin
        .create(&gvr(RBAC, "v1", "rolebindings"), "team-a", &b)
        .await
        .unwrap();
    assert_eq!(
        stored["subjects"],
        json!([{"kind": "ServiceAccount", "name": "builder"}])
    );
    let cms = gvr("", "v1", "configmaps");
    let all = ListParams::default();
    eventually(Duration::from_secs(5), "builder lists team-a", || async {
        builder.list(&cms, "team-a", &all).await.ok()
    })
    .await;
    forbidden(
        builder.list(&cms, "default", &all).await,
        "configmaps is forbidden: User \"system:serviceaccount:team-a:builder\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"",
    );
    let cluster_binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "builder"},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "builder"}]});
    let e = admin
        .create(
            &gvr(RBAC, "v1", "clusterrolebindings"),
            "",
            &cluster_binding,
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    assert_eq!(
        e.message,
        "ClusterRoleBinding.rbac.authorization.k8s.io \"builder\" is invalid: subjects[0].namespace: Required value"
    );
}

/// A role whose `resourceNames` hold one ConfigMap lets its holder list and watch that one
/// by a field selector on its name, as Kubernetes authorizes such a list (single-object
/// informers); a list of all, or of another name, is still refused.
#[tokio::test]
async fn a_list_or_watch_of_one_name_is_authorized_as_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", &token_file(&dir)]).await;
    let admin = client(&api, "admin-token").await;
    let bob = client(&api, "bob-token").await;
    let cms = gvr("", "v1", "configmaps");
    admin
        .create(&cms, "default", &configmap("foo"))
        .await
        .unwrap();
    grant(
        &admin,
        "default",
        "foo-reader",
        "bob",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["foo"],
                "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    let by_name = |name: &str| ListParams {
        field_selector: format!("metadata.name={name}"),
        ..ListParams::default()
    };
    let foo = by_name("foo");
    let listed = eventually(Duration::from_secs(5), "bob lists foo", || async {
        bob.list(&cms, "default", &foo).await.ok()
    })
    .await;
    let names: Vec<&str> = listed
        .items
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["foo"]);
    forbidden(
        bob.list(&cms, "default", &ListParams::default()).await,
        "configmaps is forbidden: User \"bob\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"",
    );
    forbidden(
        bob.list(&cms, "default", &by_name("bar")).await,
        "configmaps \"bar\" is forbidden: User \"bob\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"",
    );
    let params = WatchParams {
        namespace: "default".into(),
        field_selector: "metadata.name=foo".into(),
        ..Default::default()
    };
    let mut w = bob.watch(&cms, &params).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.object["metadata"]["name"], "foo");
    let all = WatchParams {
        namespace: "default".into(),
        ..Default::default()
    };
    let refused = match bob.watch(&cms, &all).await {
        Err(e) => e,
        Ok(mut w) => w.next().await.unwrap().unwrap_err(),
    };
    assert_eq!(refused.reason, Reason::Forbidden);
}

/// One plain-text REST request with a bearer token: the status code and the body.
fn rest(
    api: &ApiServer,
    method: &str,
    path: &str,
    token: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = api.grpc;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    // A watch that opened would stream until the read timeout: an error here is that.
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

/// Protobuf's length-delimited field `n` holding `bytes`.
fn field(n: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![(n << 3) | 2];
    let mut len = bytes.len();
    loop {
        let b = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(bytes);
    out
}

#[tokio::test]
async fn over_rest_a_watch_needs_watch_a_collection_delete_needs_deletecollection_and_reviews_read_protobuf()
 {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", &token_file(&dir)]).await;
    let admin = client(&api, "admin-token").await;
    let alice = client(&api, "alice-token").await;
    alice_in_team_a(&admin, &alice).await;
    let cms = "/api/v1/namespaces/team-a/configmaps";
    let (code, text) = rest(
        &api,
        "GET",
        &format!("{cms}?watch=1"),
        "alice-token",
        "",
        b"",
    );
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains("cannot watch resource \\\"configmaps\\\""),
        "{text}"
    );
    // delete on configmaps is not deletecollection.
    let rules = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["delete"]}]);
    grant(&admin, "team-a", "deleter", "alice", rules).await;
    let gone = gvr("", "v1", "configmaps");
    admin
        .create(&gone, "team-a", &configmap("a"))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "delete in force", || async {
        alice
            .delete(&gone, "team-a", "a", &DeleteParams::default())
            .await
            .ok()
    })
    .await;
    let (code, text) = rest(&api, "DELETE", cms, "alice-token", "application/json", b"");
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains("cannot deletecollection resource \\\"configmaps\\\""),
        "{text}"
    );

    // A SelfSubjectAccessReview in Kubernetes' protobuf, as client-go's typed clients send it.
    let attributes = [
        field(1, b"team-a"),
        field(2, b"list"),
        field(5, b"configmaps"),
    ]
    .concat();
    let review = field(2, &field(1, &attributes));
    let type_meta = [
        field(1, b"authorization.k8s.io/v1"),
        field(2, b"SelfSubjectAccessReview"),
    ]
    .concat();
    let body = [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &review)].concat();
    let (code, text) = rest(
        &api,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        "alice-token",
        "application/vnd.kubernetes.protobuf",
        &body,
    );
    assert_eq!(code, 201, "{text}");
    assert!(text.contains("\"allowed\":true"), "{text}");
}

/// A CRD's `scale` subresource is authorized as `<plural>/scale`, as Kubernetes authorizes it:
/// who holds only `widgets/scale` reads and scales a widget over gRPC (get, merge patch,
/// replace of the Scale) but may not read the widget; who holds only `widgets` may not touch
/// its Scale. The scale writes are recorded under the subresource.
#[tokio::test]
async fn a_custom_resources_scale_is_authorized_as_its_own_resource_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", &token_file(&dir)]).await;
    let admin = client(&api, "admin-token").await;
    let (alice, bob) = (
        client(&api, "alice-token").await,
        client(&api, "bob-token").await,
    );
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.ex.com"},
        "spec": {"group": "ex.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"replicas": {"type": "integer"},
                                                                 "selector": {"type": "string"}}}}}}}]}});
    admin.create(&crds, "", &crd).await.unwrap();
    let widgets = gvr("ex.com", "v1", "widgets");
    eventually(Duration::from_secs(5), "widgets served", || async {
        let w = json!({"apiVersion": "ex.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
                       "spec": {"replicas": 1}});
        admin.create(&widgets, "default", &w).await.ok()
    })
    .await;
    let roles = gvr("rbac.authorization.k8s.io", "v1", "roles");
    let bindings = gvr("rbac.authorization.k8s.io", "v1", "rolebindings");
    for (name, resource, verbs, user) in [
        (
            "scaler",
            "widgets/scale",
            json!(["get", "patch", "update"]),
            "alice",
        ),
        (
            "reader",
            "widgets",
            json!(["get", "patch", "update"]),
            "bob",
        ),
    ] {
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name},
            "rules": [{"apiGroups": ["ex.com"], "resources": [resource], "verbs": verbs}]});
        admin.create(&roles, "default", &role).await.unwrap();
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "User", "name": user}]});
        admin.create(&bindings, "default", &binding).await.unwrap();
    }

    let scale = eventually(
        Duration::from_secs(5),
        "alice may read the scale",
        || async {
            alice
                .get_subresource(&widgets, "default", "w1", "scale")
                .await
                .ok()
        },
    )
    .await;
    assert_eq!(
        (
            &scale["apiVersion"],
            &scale["kind"],
            &scale["spec"]["replicas"]
        ),
        (&json!("autoscaling/v1"), &json!("Scale"), &json!(1))
    );
    let patched = alice
        .patch_subresource(
            &widgets,
            "default",
            "w1",
            "scale",
            PatchType::Merge,
            serde_json::to_vec(&json!({"spec": {"replicas": 3}})).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(patched["spec"]["replicas"], 3);
    let mut replaced = patched.clone();
    replaced["spec"]["replicas"] = json!(4);
    let replaced = alice
        .update_subresource(&widgets, "default", "scale", &replaced)
        .await
        .unwrap();
    assert_eq!(
        (&replaced["kind"], &replaced["spec"]["replicas"]),
        (&json!("Scale"), &json!(4))
    );
    forbidden(
        alice.get(&widgets, "default", "w1").await,
        "widgets.ex.com \"w1\" is forbidden: User \"alice\" cannot get resource \"widgets\" in API group \"ex.com\" in the namespace \"default\"",
    );

    eventually(
        Duration::from_secs(5),
        "bob may read the widget",
        || async { bob.get(&widgets, "default", "w1").await.ok() },
    )
    .await;
    forbidden(
        bob.get_subresource(&widgets, "default", "w1", "scale")
            .await,
        "widgets.ex.com \"w1\" is forbidden: User \"bob\" cannot get resource \"widgets/scale\" in API group \"ex.com\" in the namespace \"default\"",
    );
    forbidden(
        bob.patch_subresource(
            &widgets,
            "default",
            "w1",
            "scale",
            PatchType::Merge,
            serde_json::to_vec(&json!({"spec": {"replicas": 9}})).unwrap(),
        )
        .await,
        "widgets.ex.com \"w1\" is forbidden: User \"bob\" cannot patch resource \"widgets/scale\" in API group \"ex.com\" in the namespace \"default\"",
    );

    let widget = admin.get(&widgets, "default", "w1").await.unwrap();
    assert_eq!(widget["spec"]["replicas"], 4, "bob's patch changed nothing");
    let scale_entries = widget["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["subresource"] == "scale")
        .count();
    assert_eq!(scale_entries, 1, "{widget}");
}

/// A Secret of type `kubernetes.io/service-account-token` gets its ServiceAccount's token,
/// `ca.crt` and `namespace` from the controller-manager; the token authenticates as the
/// ServiceAccount while the Secret holds it, RBAC applies to it, and a Secret whose
/// ServiceAccount is gone is deleted.
#[tokio::test]
async fn a_service_account_token_secret_is_filled_and_its_token_works() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    keel_tests::certs(dir.path());
    let key = dir.path().join("service-account.key");
    let ca = dir.path().join("ca.crt");
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(
        &etcd,
        &[
            "--token-auth-file",
            &token_file(&dir),
            "--service-account-signing-key-file",
            key.to_str().unwrap(),
        ],
    )
    .await;
    let _cm = keel_tests::ControllerManager::start(
        &[&api],
        &[
            "--token",
            "cm-token",
            "--service-account-private-key-file",
            key.to_str().unwrap(),
            "--root-ca-file",
            ca.to_str().unwrap(),
        ],
    )
    .await;
    let admin = client(&api, "admin-token").await;
    let (sas, secrets) = (gvr("", "v1", "serviceaccounts"), gvr("", "v1", "secrets"));
    admin
        .create(
            &sas,
            "default",
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ci"}}),
        )
        .await
        .unwrap();
    admin
        .create(
            &secrets,
            "default",
            &json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
                    "metadata": {"name": "ci-token",
                                 "annotations": {"kubernetes.io/service-account.name": "ci"}}}),
        )
        .await
        .unwrap();
    let filled = eventually(
        Duration::from_secs(20),
        "the token secret filled",
        || async {
            let s = admin.get(&secrets, "default", "ci-token").await.ok()?;
            s["data"]["token"].is_string().then_some(s)
        },
    )
    .await;
    let b64 = base64::engine::general_purpose::STANDARD;
    let field = |f: &str| b64.decode(filled["data"][f].as_str().unwrap()).unwrap();
    assert_eq!(field("namespace"), b"default");
    assert_eq!(field("ca.crt"), std::fs::read(&ca).unwrap());
    let sa = admin.get(&sas, "default", "ci").await.unwrap();
    assert_eq!(
        filled["metadata"]["annotations"]["kubernetes.io/service-account.uid"],
        sa["metadata"]["uid"]
    );
    let token = String::from_utf8(field("token")).unwrap();

    // The token is the ServiceAccount's: authenticated, and only what RBAC grants it.
    let ci = client(&api, &token).await;
    forbidden(
        ci.list(&gvr("", "v1", "configmaps"), "default", &Default::default())
            .await,
        "configmaps is forbidden: User \"system:serviceaccount:default:ci\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\"",
    );
    // A forged token, and the token once its Secret no longer holds it, are not.
    let stranger = client(&api, &format!("{token}x")).await;
    let e = stranger
        .list(&gvr("", "v1", "configmaps"), "default", &Default::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason, keel_client::Reason::Unauthorized);

    // Its ServiceAccount deleted: the Secret goes too, and the token stops working.
    admin
        .delete(&sas, "default", "ci", &Default::default())
        .await
        .unwrap();
    eventually(
        Duration::from_secs(60),
        "the token secret deleted",
        || async {
            admin
                .get(&secrets, "default", "ci-token")
                .await
                .err()
                .filter(|e| e.reason == keel_client::Reason::NotFound)
        },
    )
    .await;
    let e = ci
        .list(&gvr("", "v1", "configmaps"), "default", &Default::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason, keel_client::Reason::Unauthorized);
}
