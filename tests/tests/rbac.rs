//! RBAC (issue 16): two API servers on one etcd, users from a token file. A user bound to a
//! namespaced Role may get, list and watch ConfigMaps in that namespace only; every other verb,
//! namespace and resource is Forbidden in Kubernetes' words. A binding made through one replica
//! takes effect on the other within a second, and its deletion as fast. `system:masters` may do
//! everything; keel's own components have bootstrap roles.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use keel_client::{
    ApiError, Client, ClientConfig, DeleteParams, ListParams, Reason, WatchParams, gvr,
};
use keel_tests::{ApiServer, Etcd, eventually, list_names};
use serde_json::json;

const TOKENS: &str = "\
admin-token,admin,1,system:masters
alice-token,alice,2,dev
loadtest-token,keel-loadtest,3,
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
            "cluster-admin",
            "keel-loadtest",
            "system:keel-controller-manager",
            "system:keel-initializer"
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
