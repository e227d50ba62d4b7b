//! ValidatingAdmissionPolicy end to end (issue 44): policies and bindings written to the real
//! `keel-apiserver` check writes with CEL inside it, as Kubernetes 1.32 does: params, the
//! three validation actions (Deny in the answer, Warn as kubectl prints it, Audit in the audit
//! log), failure policies. Real etcd, nothing mocked.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use keel_client::{Client, GroupVersionResource, Reason, gvr};
use keel_tests::{ApiServer, Etcd, eventually, kubectl};
use serde_json::{Value, json};

fn policies() -> GroupVersionResource {
    gvr(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
    )
}

fn bindings() -> GroupVersionResource {
    gvr(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
    )
}

fn configmaps() -> GroupVersionResource {
    gvr("", "v1", "configmaps")
}

fn deployments() -> GroupVersionResource {
    gvr("apps", "v1", "deployments")
}

async fn policy(c: &Client, name: &str, spec: Value) {
    c.create(
        &policies(),
        "",
        &json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name}, "spec": spec}),
    )
    .await
    .unwrap();
}

async fn binding(c: &Client, name: &str, spec: Value) {
    c.create(
        &bindings(),
        "",
        &json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name}, "spec": spec}),
    )
    .await
    .unwrap();
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

async fn namespace(c: &Client, name: &str) {
    c.create(
        &gvr("", "v1", "namespaces"),
        "",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_policy_with_params_refuses_in_kubernetes_words() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    // The params: a ConfigMap per namespace says how many replicas it may run.
    c.create(
        &configmaps(),
        "default",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "limits"}, "data": {"maxReplicas": "3"}}),
    )
    .await
    .unwrap();
    policy(
        &c,
        "max-replicas.example.com",
        json!({
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
            "variables": [{"name": "limit", "expression": "int(params.data.maxReplicas)"}],
            "validations": [
                {"expression": "object.spec.replicas <= variables.limit",
                 "messageExpression": "'replicas must be at most ' + string(variables.limit) + ', not ' + string(object.spec.replicas)"},
                {"expression": "!object.metadata.name.startsWith('forbidden-')",
                 "message": "this name is not allowed", "reason": "Forbidden"},
            ],
        }),
    )
    .await;
    binding(
        &c,
        "max-replicas",
        json!({"policyName": "max-replicas.example.com", "validationActions": ["Deny"],
            "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}),
    )
    .await;

    // In force as soon as the binding is written: refused, in Kubernetes' words.
    let e = c
        .create(&deployments(), "default", &deployment("web", 5))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e:?}");
    assert_eq!(
        e.message,
        "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'max-replicas.example.com' with binding 'max-replicas' denied request: replicas must be at most 3, not 5"
    );
    assert!(
        c.get(&deployments(), "default", "web").await.is_err(),
        "nothing was stored"
    );
    // The validation's reason is the answer's.
    let e = c
        .create(&deployments(), "default", &deployment("forbidden-web", 1))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden, "{e:?}");
    assert!(
        e.message
            .ends_with("denied request: this name is not allowed"),
        "{}",
        e.message
    );
    // Within the limit: admitted; an update past it: refused.
    let web = c
        .create(&deployments(), "default", &deployment("web", 2))
        .await
        .unwrap();
    let mut more = web.clone();
    more["spec"]["replicas"] = json!(4);
    let e = c
        .update(&deployments(), "default", &more)
        .await
        .unwrap_err();
    assert!(
        e.message.ends_with("replicas must be at most 3, not 4"),
        "{}",
        e.message
    );
    // New params take effect as the ConfigMap changes.
    let mut limits = c.get(&configmaps(), "default", "limits").await.unwrap();
    limits["data"]["maxReplicas"] = json!("10");
    c.update(&configmaps(), "default", &limits).await.unwrap();
    eventually(Duration::from_secs(5), "the new limit in force", || {
        let (c, more) = (c.clone(), more.clone());
        async move { c.update(&deployments(), "default", &more).await.ok() }
    })
    .await;
    // A namespace without params: `parameterNotFoundAction: Deny` refuses.
    namespace(&c, "team-a").await;
    let e = c
        .create(&deployments(), "team-a", &deployment("api", 1))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "deployments.apps \"api\" is forbidden: ValidatingAdmissionPolicy 'max-replicas.example.com' with binding 'max-replicas' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );
    // Other kinds are not the policy's business.
    c.create(
        &configmaps(),
        "team-a",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn bindings_choose_resources_and_failure_policy_decides_errors() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    namespace(&c, "prod").await;
    let mut prod = c
        .get(&gvr("", "v1", "namespaces"), "", "prod")
        .await
        .unwrap();
    prod["metadata"]["labels"] = json!({"env": "prod"});
    c.update(&gvr("", "v1", "namespaces"), "", &prod)
        .await
        .unwrap();
    // Every configmap must say who owns it, in namespaces labelled env=prod only (the
    // binding's matchResources narrows the policy's constraints).
    policy(
        &c,
        "owner.example.com",
        json!({
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "validations": [{"expression": "object.metadata.labels.owner != ''",
                "message": "configmaps need an owner"}],
        }),
    )
    .await;
    binding(
        &c,
        "owner-prod",
        json!({"policyName": "owner.example.com", "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"env": "prod"}}}}),
    )
    .await;
    let cm = |name: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": labels}})
    };
    c.create(&configmaps(), "default", &cm("free", json!({})))
        .await
        .unwrap();
    c.create(&configmaps(), "prod", &cm("owned", json!({"owner": "me"})))
        .await
        .unwrap();
    // No labels at all: the expression errors, and Fail makes the error a denial.
    let e = c
        .create(&configmaps(), "prod", &cm("bare", Value::Null))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "configmaps \"bare\" is forbidden: ValidatingAdmissionPolicy 'owner.example.com' with binding 'owner-prod' denied request: expression 'object.metadata.labels.owner != ''' resulted in error: no such key: labels"
    );
    // Ignore lets the same error through; a plain failure still refuses.
    let mut p = c.get(&policies(), "", "owner.example.com").await.unwrap();
    p["spec"]["failurePolicy"] = json!("Ignore");
    c.update(&policies(), "", &p).await.unwrap();
    c.create(&configmaps(), "prod", &cm("bare", Value::Null))
        .await
        .unwrap();
    let e = c
        .create(&configmaps(), "prod", &cm("empty", json!({"owner": ""})))
        .await
        .unwrap_err();
    assert!(
        e.message
            .ends_with("denied request: configmaps need an owner"),
        "{}",
        e.message
    );

    // Policies and bindings are refused with Kubernetes' messages when wrong.
    let e = c
        .create(
            &policies(),
            "",
            &json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "bad"},
                "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"]}]},
                    "validations": [{"expression": "object.spec +++ 1"}]}}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert!(
        e.message.contains("spec.validations[0].expression: Invalid value: \"object.spec +++ 1\": compilation failed: ERROR: <input>:1:"),
        "{}",
        e.message
    );
    let e = c
        .create(
            &bindings(),
            "",
            &json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "bad"},
                "spec": {"policyName": "owner.example.com", "validationActions": ["Deny", "Warn"]}}),
        )
        .await
        .unwrap_err();
    assert!(
        e.message.contains("spec.validationActions: Invalid value: \"[Deny Warn]\": must not contain both Deny and Warn"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn warn_is_printed_by_kubectl_and_audit_writes_an_audit_annotation() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.log");
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--audit-log-path", audit.to_str().unwrap()]).await;
    let c = api.client().await;
    policy(
        &c,
        "no-passwords.example.com",
        json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
            "validations": [{"expression": "!has(object.data) || !('password' in object.data)",
                "message": "configmaps must not hold passwords"}],
            "auditAnnotations": [{"key": "keys",
                "valueExpression": "has(object.data) ? object.data.map(k, k).join(',') : ''"}],
        }),
    )
    .await;
    binding(
        &c,
        "no-passwords",
        json!({"policyName": "no-passwords.example.com", "validationActions": ["Warn", "Audit"]}),
    )
    .await;
    let (ok, _, err) = kubectl(
        &api,
        dir.path(),
        &[
            "create",
            "configmap",
            "leaky",
            "--from-literal=password=hunter2",
        ],
    );
    assert!(ok, "Warn and Audit do not refuse: {err}");
    assert!(
        err.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'no-passwords.example.com' with binding 'no-passwords': configmaps must not hold passwords"),
        "{err}"
    );
    let (ok, _, err) = kubectl(
        &api,
        dir.path(),
        &["create", "configmap", "clean", "--from-literal=user=me"],
    );
    assert!(ok, "{err}");
    assert!(!err.contains("Warning"), "{err}");
    let line = |name: &'static str| {
        let audit = audit.clone();
        eventually(
            Duration::from_secs(5),
            "the create's audit line",
            move || {
                let audit = audit.clone();
                async move {
                    std::fs::read_to_string(&audit)
                        .unwrap_or_default()
                        .lines()
                        .map(|l| serde_json::from_str::<Value>(l).unwrap())
                        .find(|l| l["verb"] == "create" && l["name"] == name)
                }
            },
        )
    };
    let leaky = line("leaky").await;
    let failure: Value = serde_json::from_str(
        leaky["annotations"]["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .unwrap_or_else(|| panic!("no validation_failure annotation: {leaky}")),
    )
    .unwrap();
    assert_eq!(
        failure,
        json!([{"message": "configmaps must not hold passwords",
            "policy": "no-passwords.example.com", "binding": "no-passwords",
            "expressionIndex": 0, "validationActions": ["Warn", "Audit"]}])
    );
    assert_eq!(
        leaky["annotations"]["no-passwords.example.com/keys"], "password",
        "{leaky}"
    );
    let clean = line("clean").await;
    assert!(
        clean["annotations"]
            .get("validation.policy.admission.k8s.io/validation_failure")
            .is_none(),
        "{clean}"
    );
    assert_eq!(
        clean["annotations"]["no-passwords.example.com/keys"],
        "user"
    );
}

/// `authorizer` asks RBAC as this API server follows it, for the requester or a service
/// account: only users who may `approve` configmaps may label one approved.
#[tokio::test]
async fn the_authorizer_asks_rbac_for_the_requester() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "admin-token,admin,1,system:masters\nalice-token,alice,2,dev\nbob-token,bob,3,dev\n",
    )
    .unwrap();
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, &["--token-auth-file", tokens.to_str().unwrap()]).await;
    let as_user = |token: &'static str| {
        let endpoint = api.endpoint();
        async move {
            let mut config =
                keel_client::ClientConfig::new([endpoint]).timeout(Duration::from_secs(5));
            config.token = Some(token.to_string());
            Client::connect(&config).await.unwrap()
        }
    };
    let admin = as_user("admin-token").await;
    let rbac = |resource: &str| gvr("rbac.authorization.k8s.io", "v1", resource);
    // Both may write configmaps in default; only alice may approve them.
    admin
        .create(
            &rbac("roles"),
            "default",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "writer"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                    "verbs": ["create", "get", "update"]}]}),
        )
        .await
        .unwrap();
    admin
        .create(
            &rbac("roles"),
            "default",
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "approver"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["approve"]}]}),
        )
        .await
        .unwrap();
    for (name, role, users) in [
        ("writers", "writer", json!(["alice", "bob"])),
        ("approvers", "approver", json!(["alice"])),
    ] {
        let subjects: Vec<Value> = users
            .as_array()
            .unwrap()
            .iter()
            .map(|u| json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": u}))
            .collect();
        admin
            .create(
                &rbac("rolebindings"),
                "default",
                &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                    "subjects": subjects}),
            )
            .await
            .unwrap();
    }
    policy(
        &admin,
        "approval.example.com",
        json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
            "validations": [{
                "expression": "!has(object.metadata.labels) || !('approved' in object.metadata.labels) || authorizer.requestResource.check('approve').allowed()",
                "messageExpression": "'only approvers may approve, and ' + request.userInfo.username + ' is not one'",
                "reason": "Forbidden"}],
        }),
    )
    .await;
    binding(
        &admin,
        "approval",
        json!({"policyName": "approval.example.com", "validationActions": ["Deny"]}),
    )
    .await;
    let approved = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"approved": "yes"}}})
    };
    let (alice, bob) = (as_user("alice-token").await, as_user("bob-token").await);
    alice
        .create(&configmaps(), "default", &approved("by-alice"))
        .await
        .unwrap();
    let e = bob
        .create(&configmaps(), "default", &approved("by-bob"))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden, "{e:?}");
    assert_eq!(
        e.message,
        "configmaps \"by-bob\" is forbidden: ValidatingAdmissionPolicy 'approval.example.com' with binding 'approval' denied request: only approvers may approve, and bob is not one"
    );
    // Without the label, bob writes as RBAC lets him.
    bob.create(
        &configmaps(),
        "default",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}),
    )
    .await
    .unwrap();
}
