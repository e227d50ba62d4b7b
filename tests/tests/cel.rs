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

/// A real etcd and API server, and a client of it.
async fn start() -> (Etcd, ApiServer, Client) {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    (etcd, api, c)
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
    let (_etcd, _api, c) = start().await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    c.create(
        &crds,
        "",
        &crd(json!([{
            "rule": "self.replicas <= self.maxReplicas",
            // Not `string(self.replicas)`: a converted number has no size bound, and Kubernetes
            // refuses a message built from one as over its cost limit (kubernetes#124234).
            "messageExpression": "'replicas is more than ' + (self.maxReplicas < 10 ? 'a small maxReplicas' : 'maxReplicas')",
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
        "Widget.example.com \"b\" is invalid: spec: Invalid value: \"object\": replicas is more than a small maxReplicas"
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
    let (_etcd, _api, c) = start().await;
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
    // A variable CRD rules do not have.
    let e = c
        .create(
            &crds,
            "",
            &crd(json!([{"rule": "object.spec.replicas > 0"}])),
        )
        .await
        .unwrap_err();
    assert!(
        e.message.contains(
            "x-kubernetes-validations[0].rule: Invalid value: \"object.spec.replicas > 0\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'object' (in container '')"
        ),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn a_rule_reading_an_undefined_field_refuses_its_crd() {
    let (_etcd, _api, c) = start().await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let e = c
        .create(&crds, "", &crd(json!([{"rule": "self.nosuchfield == 1"}])))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(
        e.message,
        "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.com\" is invalid: spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \"self.nosuchfield == 1\": compilation failed: ERROR: <input>:1:5: undefined field 'nosuchfield'\n | self.nosuchfield == 1\n | ....^"
    );
    // A call no overload takes: a string plus an int.
    let e = c
        .create(&crds, "", &crd(json!([{"rule": "self.name + 1 == 'a'"}])))
        .await
        .unwrap_err();
    assert!(
        e.message.contains(
            "compilation failed: ERROR: <input>:1:11: found no matching overload for '_+_' applied to '(string, int)'"
        ),
        "{}",
        e.message
    );
}

/// A CRD whose `spec.items` list has the given bounds, with an O(n²) rule on it.
fn crd_with_pairwise_rule(max_items: Option<u64>, max_length: Option<u64>) -> Value {
    let mut item = json!({"type": "string"});
    if let Some(n) = max_length {
        item["maxLength"] = json!(n);
    }
    let mut items = json!({"type": "array", "items": item,
        "x-kubernetes-validations": [{"rule": "self.all(x, self.all(y, x == y))"}]});
    if let Some(n) = max_items {
        items["maxItems"] = json!(n);
    }
    let mut crd = crd(json!([]));
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["items"] =
        items;
    crd
}

#[tokio::test]
async fn a_rule_over_the_cost_limit_refuses_its_crd_unless_bounded() {
    let (_etcd, _api, c) = start().await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let e = c
        .create(&crds, "", &crd_with_pairwise_rule(None, None))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    let rule = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[items].x-kubernetes-validations[0].rule";
    assert!(
        e.message.contains(&format!(
            "{rule}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
        )),
        "{}",
        e.message
    );
    // And the schema's rules together are over the limit of a whole schema.
    let total = e.causes.last().unwrap();
    assert_eq!(total.field, "spec.versions[0].schema.openAPIV3Schema");
    assert!(
        total.message.starts_with(
            "Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x"
        ),
        "{}",
        total.message
    );
    assert_eq!(e.causes[0].reason, "FieldValueForbidden");
    // Bounded, the same rule is cheap enough.
    c.create(&crds, "", &crd_with_pairwise_rule(Some(100), Some(64)))
        .await
        .unwrap();
    served(&c).await;
}

/// The CRD kube-rs's derive writes for its `Foo` example (kube-derive's tests): rules with
/// `messageExpression` and `reason`, on the root, on a nullable struct (`self == oldSelf`),
/// and an `optionalOldSelf` rule on an optional.
fn kube_rs_foo() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "foos.clux.dev"},
        "spec": {"group": "clux.dev", "names": {"kind": "Foo", "plural": "foos", "singular": "foo"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "required": ["spec"],
                "x-kubernetes-validations": [{"rule": "self.metadata.name != 'forbidden'"}],
                "properties": {"spec": {"type": "object", "properties": {
                    "celValidated": {"default": "legal", "nullable": true, "type": "string",
                        "x-kubernetes-validations": [
                            {"messageExpression": "'string cannot be illegal'",
                             "reason": "FieldValueForbidden", "rule": "self != 'illegal'"},
                            {"reason": "FieldValueInvalid", "rule": "self != 'not legal'"}]},
                    "fooSubSpec": {"nullable": true, "type": "object", "required": ["field"],
                        "x-kubernetes-validations": [{"message": "is immutable", "rule": "self == oldSelf"}],
                        "properties": {"field": {"type": "string"}, "other": {"nullable": true, "type": "string"}}},
                    "immutable": {"nullable": true, "type": "string",
                        "x-kubernetes-validations": [{"message": "Immutable after creation",
                            "optionalOldSelf": true,
                            "rule": "oldSelf.optMap(o, o == self).orValue(true)"}]},
                }}}}}}],
        }
    })
}

#[tokio::test]
async fn the_rules_kube_rs_derives_hold_on_its_objects() {
    let (_etcd, _api, c) = start().await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    c.create(&crds, "", &kube_rs_foo()).await.unwrap();
    let foos = gvr("clux.dev", "v1", "foos");
    eventually(Duration::from_secs(10), "foos served", || {
        let c = c.clone();
        let foos = foos.clone();
        async move { c.list(&foos, "default", &Default::default()).await.ok() }
    })
    .await;
    let foo = |name: &str, spec: Value| json!({"apiVersion": "clux.dev/v1", "kind": "Foo", "metadata": {"name": name}, "spec": spec});
    let refused = [
        (
            "forbidden",
            json!({}),
            ": Invalid value: \"object\": failed rule: self.metadata.name != 'forbidden'",
        ),
        (
            "illegal",
            json!({"celValidated": "illegal"}),
            "spec.celValidated: Forbidden: string cannot be illegal",
        ),
        (
            "not-legal",
            json!({"celValidated": "not legal"}),
            "spec.celValidated: Invalid value: \"string\": failed rule: self != 'not legal'",
        ),
    ];
    for (name, spec, want) in refused {
        let e = c
            .create(&foos, "default", &foo(name, spec))
            .await
            .unwrap_err();
        assert_eq!(e.reason, Reason::Invalid, "{name}");
        assert!(e.message.contains(want), "{name}: {}", e.message);
    }
    c.create(
        &foos,
        "default",
        &foo(
            "ok",
            json!({"fooSubSpec": {"field": "a"}, "immutable": "x"}),
        ),
    )
    .await
    .unwrap();
    let e = c
        .patch(
            &foos,
            "default",
            "ok",
            PatchType::Merge,
            &json!({"spec": {"fooSubSpec": {"field": "b"}}}),
        )
        .await
        .unwrap_err();
    assert!(
        e.message
            .contains("spec.fooSubSpec: Invalid value: \"object\": is immutable"),
        "{}",
        e.message
    );
    let e = c
        .patch(
            &foos,
            "default",
            "ok",
            PatchType::Merge,
            &json!({"spec": {"immutable": "y"}}),
        )
        .await
        .unwrap_err();
    assert!(
        e.message
            .contains("spec.immutable: Invalid value: \"string\": Immutable after creation"),
        "{}",
        e.message
    );
    c.patch(
        &foos,
        "default",
        "ok",
        PatchType::Merge,
        &json!({"spec": {"celValidated": "fine"}}),
    )
    .await
    .unwrap();
}

/// A list-map: uniqueness of its items' names by rule, and a transition rule on its items,
/// each item matched with the old item of the same key.
#[tokio::test]
async fn list_map_rules_check_uniqueness_and_items_keep_their_old_selves() {
    let (_etcd, _api, c) = start().await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let mut crd = crd(json!([]));
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["ports"] = json!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["port"],
        // Bounded: unbounded, both rules are over Kubernetes' estimated cost limit.
        "maxItems": 16,
        "x-kubernetes-validations": [{"rule": "self.all(p, self.exists_one(q, q.name == p.name))",
            "message": "port names must be unique"}],
        "items": {"type": "object", "required": ["port"], "properties": {
            "port": {"type": "integer"}, "name": {"type": "string", "maxLength": 63},
            "protocol": {"type": "string", "maxLength": 8, "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "protocol is immutable"}]}}},
    });
    c.create(&crds, "", &crd).await.unwrap();
    served(&c).await;
    let widgets = gvr("example.com", "v1", "widgets");
    let e = c
        .create(
            &widgets,
            "default",
            &widget(
                "dup",
                json!({"ports": [{"port": 80, "name": "web"}, {"port": 81, "name": "web"}]}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        e.message
            .contains("spec.ports: Invalid value: \"array\": port names must be unique"),
        "{}",
        e.message
    );
    c.create(
        &widgets,
        "default",
        &widget(
            "p",
            json!({"ports": [{"port": 80, "name": "web", "protocol": "TCP"}]}),
        ),
    )
    .await
    .unwrap();
    // A new item has no old self; the existing one keeps its protocol.
    let mut current = c.get(&widgets, "default", "p").await.unwrap();
    current["spec"]["ports"] = json!([{"port": 81, "name": "alt", "protocol": "UDP"},
        {"port": 80, "name": "web", "protocol": "TCP"}]);
    let current = c.update(&widgets, "default", &current).await.unwrap();
    let mut changed = current.clone();
    changed["spec"]["ports"][1]["protocol"] = json!("UDP");
    let e = c.update(&widgets, "default", &changed).await.unwrap_err();
    assert!(
        e.message
            .contains("spec.ports[1].protocol: Invalid value: \"string\": protocol is immutable"),
        "{}",
        e.message
    );
}

/// Ratcheting: a rule added to a CRD after its objects were written does not stop them being
/// changed elsewhere, while the values it judges are unchanged; changing one of them is judged.
#[tokio::test]
async fn a_rule_added_later_ratchets_on_unchanged_values() {
    let (_etcd, _api, c) = start().await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    c.create(&crds, "", &crd(json!([]))).await.unwrap();
    served(&c).await;
    let widgets = gvr("example.com", "v1", "widgets");
    c.create(
        &widgets,
        "default",
        &widget("old", json!({"name": "a", "replicas": 9, "maxReplicas": 3})),
    )
    .await
    .unwrap();
    let mut stored = c.get(&crds, "", "widgets.example.com").await.unwrap();
    stored["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["replicas"]["x-kubernetes-validations"] =
        json!([{"rule": "self <= 5", "message": "at most 5"}]);
    c.update(&crds, "", &stored).await.unwrap();
    // The rule is in force for new objects (once this replica serves the new schema).
    eventually(Duration::from_secs(10), "the new rule in force", || {
        let c = c.clone();
        let widgets = widgets.clone();
        async move {
            c.create(
                &widgets,
                "default",
                &widget("new", json!({"name": "n", "replicas": 9, "maxReplicas": 9})),
            )
            .await
            .err()
        }
    })
    .await;
    // The old object: replicas unchanged, another field changed: admitted.
    c.patch(
        &widgets,
        "default",
        "old",
        PatchType::Merge,
        &json!({"spec": {"maxReplicas": 10}}),
    )
    .await
    .unwrap();
    // Changing replicas to another value the rule refuses: judged.
    let e = c
        .patch(
            &widgets,
            "default",
            "old",
            PatchType::Merge,
            &json!({"spec": {"replicas": 8}}),
        )
        .await
        .unwrap_err();
    assert!(
        e.message
            .contains("spec.replicas: Invalid value: \"integer\": at most 5"),
        "{}",
        e.message
    );
}

/// Kubernetes' libraries in rules: quantities, regex `find`, `isCIDR`.
#[tokio::test]
async fn rules_use_kubernetes_libraries() {
    let (_etcd, _api, c) = start().await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let mut crd = crd(json!([
        {"rule": "!has(self.memory) || quantity(self.memory).isLessThan(quantity('1Gi'))",
         "message": "memory must be less than 1Gi"},
        {"rule": "!has(self.cidr) || isCIDR(self.cidr)", "message": "cidr must be a CIDR"},
    ]));
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    spec["memory"] = json!({"type": "string"});
    spec["cidr"] = json!({"type": "string"});
    c.create(&crds, "", &crd).await.unwrap();
    served(&c).await;
    let widgets = gvr("example.com", "v1", "widgets");
    c.create(
        &widgets,
        "default",
        &widget(
            "small",
            json!({"name": "s", "memory": "512Mi", "cidr": "10.0.0.0/8"}),
        ),
    )
    .await
    .unwrap();
    for (name, spec, want) in [
        (
            "big",
            json!({"name": "b", "memory": "2Gi"}),
            "memory must be less than 1Gi",
        ),
        (
            "bad-cidr",
            json!({"name": "c", "cidr": "10.0.0.0/40"}),
            "cidr must be a CIDR",
        ),
    ] {
        let e = c
            .create(&widgets, "default", &widget(name, spec))
            .await
            .unwrap_err();
        assert!(
            e.message
                .contains(&format!("spec: Invalid value: \"object\": {want}")),
            "{name}: {}",
            e.message
        );
    }
}

/// A status write is checked as Kubernetes' status strategy checks it: the schema on `status`
/// alone (what is wrong in `spec` is not the status writer's), then every rule from the root,
/// none ratcheted.
#[tokio::test]
async fn a_status_write_is_checked_on_status_and_its_rules_do_not_ratchet() {
    let (_etcd, _api, c) = start().await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let mut gadgets = crd(json!([]));
    gadgets["metadata"]["name"] = json!("gadgets.example.com");
    gadgets["spec"]["names"] = json!({"plural": "gadgets", "singular": "gadget", "kind": "Gadget"});
    let version = &mut gadgets["spec"]["versions"][0];
    version["subresources"] = json!({"status": {}});
    version["schema"]["openAPIV3Schema"]["properties"]["status"] = json!({
        "type": "object",
        "properties": {"ready": {"type": "integer"}},
        "x-kubernetes-validations": [
            {"rule": "!has(self.ready) || self.ready <= 100", "message": "ready is at most 100"}],
    });
    c.create(&crds, "", &gadgets).await.unwrap();
    let g = gvr("example.com", "v1", "gadgets");
    eventually(Duration::from_secs(10), "gadgets served", || {
        let (c, g) = (c.clone(), g.clone());
        async move { c.list(&g, "default", &Default::default()).await.ok() }
    })
    .await;
    let gadget = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g"}, "spec": {"name": "g", "replicas": 7}});
    c.create(&g, "default", &gadget).await.unwrap();
    // The status's own rule.
    let e = with_status(&c, &g, 200).await.unwrap_err();
    assert!(
        e.message
            .contains("status: Invalid value: \"object\": ready is at most 100"),
        "{}",
        e.message
    );
    // A schema that the stored spec no longer meets does not stop a status write.
    let mut stored = c.get(&crds, "", "gadgets.example.com").await.unwrap();
    stored["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["replicas"]["maximum"] = json!(5);
    c.update(&crds, "", &stored).await.unwrap();
    eventually(Duration::from_secs(10), "the maximum in force", || {
        let (c, g) = (c.clone(), g.clone());
        let mut other = gadget.clone();
        other["metadata"]["name"] = json!("other");
        async move { c.create(&g, "default", &other).await.err() }
    })
    .await;
    with_status(&c, &g, 3).await.unwrap();
    // A rule the stored spec fails: ratcheted on a main write that leaves it as it is, but
    // judged on a status write, as Kubernetes judges it.
    let mut stored = c.get(&crds, "", "gadgets.example.com").await.unwrap();
    let spec =
        &mut stored["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    spec["properties"]["replicas"]
        .as_object_mut()
        .unwrap()
        .remove("maximum");
    spec["x-kubernetes-validations"] =
        json!([{"rule": "self.replicas % 2 == 0", "message": "replicas must be even"}]);
    c.update(&crds, "", &stored).await.unwrap();
    let e = eventually(Duration::from_secs(10), "the even rule in force", || {
        let (c, g) = (c.clone(), g.clone());
        async move { with_status(&c, &g, 4).await.err() }
    })
    .await;
    assert!(
        e.message
            .contains("spec: Invalid value: \"object\": replicas must be even"),
        "{}",
        e.message
    );
    c.patch(
        &g,
        "default",
        "g",
        PatchType::Merge,
        &json!({"metadata": {"labels": {"seen": "yes"}}}),
    )
    .await
    .unwrap();
}

/// Writes `status.ready` of gadget `g` through the status subresource.
async fn with_status(
    c: &Client,
    g: &keel_client::GroupVersionResource,
    ready: i64,
) -> Result<Value, keel_client::ApiError> {
    let mut obj = c.get(g, "default", "g").await.unwrap();
    obj["status"] = json!({"ready": ready});
    c.update_status(g, "default", &obj).await
}

/// Kubernetes' runtime cost limit: a rule whose estimate is within the CRD's limits, but which
/// costs more than a million to evaluate on a large object, stops validation with Kubernetes'
/// error; the same rule on a small object passes.
#[tokio::test]
async fn a_rule_too_costly_for_its_object_is_stopped_by_the_runtime_cost_limit() {
    let (_etcd, _api, c) = start().await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let mut lists = crd(json!([]));
    lists["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["tags"] = json!({
        "type": "array", "maxItems": 1000, "items": {"type": "string", "maxLength": 7},
        "x-kubernetes-validations": [
            {"rule": "self.all(x, self.exists(y, x == y))", "message": "every tag is a tag"}],
    });
    c.create(&crds, "", &lists).await.unwrap();
    served(&c).await;
    let widgets = gvr("example.com", "v1", "widgets");
    let tags = |n: usize| (0..n).map(|i| format!("t{i}")).collect::<Vec<_>>();
    c.create(
        &widgets,
        "default",
        &widget("few", json!({"name": "a", "tags": tags(10)})),
    )
    .await
    .unwrap();
    let e = c
        .create(
            &widgets,
            "default",
            &widget("many", json!({"name": "a", "tags": tags(1000)})),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e:?}");
    assert!(
        e.message.contains("spec.tags: Invalid value: \"array\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: every tag is a tag"),
        "{}",
        e.message
    );
}
