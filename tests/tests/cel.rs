//! CEL validation rules in CRDs (issue 44, first step): `x-kubernetes-validations` compiled when
//! the CRD is written and judged on every write of its objects by the real `keel-apiserver`,
//! in Kubernetes' words. Real etcd, nothing mocked.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use keel_client::{Client, PatchType, Reason, gvr};
use keel_tests::{ApiServer, Etcd, eventually};
use serde_json::{Value, json};

fn crd(rules_on_spec: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {
                    "type": "object",
                    "x-kubernetes-validations": rules_on_spec,
                    "properties": {
                        "name": {"type": "string", "x-kubernetes-validations": [
                            {"rule": "self == oldSelf", "message": "Value is immutable"}]},
                        "replicas": {"type": "integer"},
                        "maxReplicas": {"type": "integer"},
                    }}}}}}],
        }
    })
}

async fn served(c: &Client) {
    let widgets = gvr("example.com", "v1", "widgets");
    eventually(Duration::from_secs(10), "widgets served", || {
        let c = c.clone();
        let widgets = widgets.clone();
        async move { c.list(&widgets, "default", &Default::default()).await.ok() }
    })
    .await;
}

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn validation_rules_refuse_in_kubernetes_words_and_transition_rules_keep_a_field_immutable() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    c.create(
        &crds,
        "",
        &crd(json!([{
            "rule": "self.replicas <= self.maxReplicas",
            "messageExpression": "'replicas ' + string(self.replicas) + ' is more than maxReplicas ' + string(self.maxReplicas)",
        }])),
    )
    .await
    .unwrap();
    served(&c).await;
    let widgets = gvr("example.com", "v1", "widgets");
    c.create(
        &widgets,
        "default",
        &widget("a", json!({"name": "a", "replicas": 1, "maxReplicas": 3})),
    )
    .await
    .unwrap();
    let e = c
        .create(
            &widgets,
            "default",
            &widget("b", json!({"name": "b", "replicas": 5, "maxReplicas": 3})),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(
        e.message,
        "Widget.example.com \"b\" is invalid: spec: Invalid value: \"object\": replicas 5 is more than maxReplicas 3"
    );
    // self == oldSelf: the name may not change; other fields may.
    c.patch(
        &widgets,
        "default",
        "a",
        PatchType::Merge,
        &json!({"spec": {"replicas": 2}}),
    )
    .await
    .unwrap();
    let e = c
        .patch(
            &widgets,
            "default",
            "a",
            PatchType::Merge,
            &json!({"spec": {"name": "z"}}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "Widget.example.com \"a\" is invalid: spec.name: Invalid value: \"string\": Value is immutable"
    );
    assert_eq!(e.causes[0].field, "spec.name");
}

#[tokio::test]
async fn a_rule_that_does_not_compile_refuses_its_crd() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let e = c
        .create(&crds, "", &crd(json!([{"rule": "self.nosuchfield +++ 1"}])))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert!(
        e.message.contains(
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \"self.nosuchfield +++ 1\": compilation failed: ERROR: <input>:1:19: Syntax error:"
        ),
        "{}",
        e.message
    );
}
