//! Admission webhooks end to end (issue 43): the real `keel-apiserver` calls real HTTPS webhook
//! servers the tests start (`keel_tests::webhook`, a CA of their own), as Kubernetes 1.32's
//! MutatingAdmissionWebhook and ValidatingAdmissionWebhook do. Real etcd, nothing mocked.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use keel_client::{Client, DeleteParams, GroupVersionResource, PatchType, Reason, gvr};
use keel_tests::webhook::{Reply, TestCa, WebhookServer};
use keel_tests::{ApiServer, Etcd, eventually, free_port, kubectl};
use serde_json::{Value, json};

fn configmaps() -> GroupVersionResource {
    gvr("", "v1", "configmaps")
}

fn namespaces() -> GroupVersionResource {
    gvr("", "v1", "namespaces")
}

fn mutating() -> GroupVersionResource {
    gvr(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
    )
}

fn validating() -> GroupVersionResource {
    gvr(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
    )
}

fn configmap(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

/// One webhook called at `url` with `ca_bundle` for `operations` on `resources` of the core
/// group, with these extra fields.
fn hook(name: &str, url: &str, ca_bundle: &str, resources: &[&str], extra: Value) -> Value {
    hook_for(name, url, ca_bundle, "", &["CREATE"], resources, extra)
}

fn hook_for(
    name: &str,
    url: &str,
    ca_bundle: &str,
    group: &str,
    operations: &[&str],
    resources: &[&str],
    extra: Value,
) -> Value {
    let mut h = json!({
        "name": name,
        "clientConfig": {"url": url},
        "rules": [{"operations": operations, "apiGroups": [group], "apiVersions": ["*"], "resources": resources}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    });
    if !ca_bundle.is_empty() {
        h["clientConfig"]["caBundle"] = json!(ca_bundle);
    }
    for (k, v) in extra.as_object().into_iter().flatten() {
        h[k] = v.clone();
    }
    h
}

async fn configure(c: &Client, resource: &GroupVersionResource, name: &str, hooks: Vec<Value>) {
    let kind = if resource.resource.starts_with("mutating") {
        "MutatingWebhookConfiguration"
    } else {
        "ValidatingWebhookConfiguration"
    };
    c.create(
        resource,
        "",
        &json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": name}, "webhooks": hooks}),
    )
    .await
    .unwrap();
}

struct Cluster {
    _etcd: Etcd,
    api: ApiServer,
    c: Client,
}

async fn cluster(extra: &[&str]) -> Cluster {
    let etcd = Etcd::start().await;
    let api = ApiServer::start_with(&etcd, extra).await;
    let c = api.client().await;
    Cluster {
        _etcd: etcd,
        api,
        c,
    }
}

fn labels(obj: &Value) -> Value {
    obj["metadata"]["labels"].clone()
}

#[tokio::test]
async fn a_mutating_webhook_adds_a_label_and_a_validating_one_refuses_in_kubernetes_words() {
    let k = cluster(&[]).await;
    let hooks = WebhookServer::start(&[], |path, review| match path {
        "/mutate" => Reply::patch(
            review,
            json!([{"op": "add", "path": "/metadata/labels/injected", "value": "yes"}]),
        ),
        _ if review["request"]["object"]["metadata"]["labels"]["deny"] == "true" => {
            Reply::deny(review, "configmaps labelled deny are not welcome", 403)
        }
        _ => Reply::review(
            review,
            json!({"allowed": true, "warnings": ["checked by the validator"]}),
        ),
    })
    .await;
    let bundle = hooks.ca.ca_bundle();
    configure(
        &k.c,
        &mutating(),
        "label",
        vec![hook(
            "label.keel.test",
            &hooks.url("/mutate"),
            &bundle,
            &["configmaps"],
            json!({}),
        )],
    )
    .await;
    configure(
        &k.c,
        &validating(),
        "deny",
        vec![hook(
            "deny.keel.test",
            &hooks.url("/validate"),
            &bundle,
            &["configmaps"],
            json!({}),
        )],
    )
    .await;

    let made =
        k.c.create(
            &configmaps(),
            "default",
            &configmap("plain", json!({"app": "x"})),
        )
        .await
        .unwrap();
    assert_eq!(labels(&made), json!({"app": "x", "injected": "yes"}));
    let stored = k.c.get(&configmaps(), "default", "plain").await.unwrap();
    assert_eq!(labels(&stored)["injected"], "yes");

    // What the webhooks were told: the validator sees the mutated object, with its uid.
    let review = &hooks.calls_to("/validate")[0]["request"];
    assert_eq!(review["operation"], "CREATE");
    assert_eq!(
        review["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        review["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(review["namespace"], "default");
    assert_eq!(review["name"], "plain");
    assert_eq!(review["object"]["metadata"]["labels"]["injected"], "yes");
    assert!(review["object"]["metadata"]["uid"].as_str().is_some());
    assert_eq!(review["oldObject"], Value::Null);
    assert_eq!(review["dryRun"], false);
    assert_eq!(review["options"]["kind"], "CreateOptions");
    let mutate_review = &hooks.calls_to("/mutate")[0]["request"];
    assert_eq!(
        mutate_review["object"]["metadata"]["labels"],
        json!({"app": "x"})
    );

    let e =
        k.c.create(
            &configmaps(),
            "default",
            &configmap("refused", json!({"deny": "true"})),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden, "{e:?}");
    assert_eq!(
        e.message,
        "admission webhook \"deny.keel.test\" denied the request: configmaps labelled deny are not welcome"
    );
    let gone =
        k.c.get(&configmaps(), "default", "refused")
            .await
            .unwrap_err();
    assert_eq!(gone.reason, Reason::NotFound);

    // An update is sent too, with the stored object as oldObject.
    let mut changed = stored.clone();
    changed["data"]["k"] = json!("w");
    configure(
        &k.c,
        &validating(),
        "updates",
        vec![hook_for(
            "updates.keel.test",
            &hooks.url("/updates"),
            &bundle,
            "",
            &["UPDATE"],
            &["configmaps"],
            json!({}),
        )],
    )
    .await;
    k.c.update(&configmaps(), "default", &changed)
        .await
        .unwrap();
    let update = &hooks.calls_to("/updates")[0]["request"];
    assert_eq!(update["operation"], "UPDATE");
    assert_eq!(update["oldObject"]["data"]["k"], "v");
    assert_eq!(update["object"]["data"]["k"], "w");

    // Metrics per webhook.
    let metrics = k.api.metrics();
    assert!(
        metrics.lines().any(
            |l| l.starts_with("keel_apiserver_admission_webhook_requests_total")
                && l.contains("name=\"deny.keel.test\"")
                && l.contains("result=\"rejected\"")
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn failure_policies_apply_to_a_webhook_that_is_down_or_slow() {
    let k = cluster(&[]).await;
    let slow = WebhookServer::start(&[], |_, review| {
        Reply::allow(review).after(Duration::from_secs(3))
    })
    .await;
    let garbage = WebhookServer::start(&[], |path, _| match path {
        "/not-json" => Reply {
            delay: Duration::ZERO,
            status: 200,
            body: b"<html>surprise</html>".to_vec(),
        },
        _ => Reply::json(
            &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "someone-else", "allowed": true}}),
        ),
    })
    .await;
    let bundle = slow.ca.ca_bundle();
    let down = format!("https://127.0.0.1:{}/down", free_port());
    let cases = [
        ("down-fail", down.clone(), "Fail", false, bundle.clone()),
        ("down-ignore", down.clone(), "Ignore", true, bundle.clone()),
        (
            "slow-fail",
            slow.url("/slow"),
            "Fail",
            false,
            bundle.clone(),
        ),
        (
            "slow-ignore",
            slow.url("/slow"),
            "Ignore",
            true,
            bundle.clone(),
        ),
        (
            "garbage-fail",
            garbage.url("/not-json"),
            "Fail",
            false,
            garbage.ca.ca_bundle(),
        ),
        (
            "garbage-ignore",
            garbage.url("/not-json"),
            "Ignore",
            true,
            garbage.ca.ca_bundle(),
        ),
        (
            "stranger-fail",
            garbage.url("/uid"),
            "Fail",
            false,
            garbage.ca.ca_bundle(),
        ),
    ];
    for (name, url, policy, _, bundle) in &cases {
        configure(
            &k.c,
            &validating(),
            name,
            vec![hook(
                &format!("{name}.keel.test"),
                url,
                bundle,
                &["configmaps"],
                json!({"failurePolicy": policy, "timeoutSeconds": 1,
                    "objectSelector": {"matchLabels": {"case": name}}}),
            )],
        )
        .await;
    }
    for (name, _, _, admitted, _) in &cases {
        let made =
            k.c.create(
                &configmaps(),
                "default",
                &configmap(name, json!({"case": name})),
            )
            .await;
        match (admitted, made) {
            (true, Ok(_)) => {}
            (false, Err(e)) => {
                assert_eq!(e.reason, Reason::InternalError, "{name}: {e:?}");
                let prefix = format!(
                    "Internal error occurred: failed calling webhook \"{name}.keel.test\": "
                );
                let want = match *name {
                    "garbage-fail" => format!("{prefix}received invalid webhook response: "),
                    "stranger-fail" => {
                        format!("{prefix}received invalid webhook response: expected response.uid=")
                    }
                    _ => format!("{prefix}failed to call webhook: Post \"https://127.0.0.1:"),
                };
                assert!(e.message.starts_with(&want), "{name}: {}", e.message);
                if name.starts_with("slow") {
                    assert!(
                        e.message.ends_with("context deadline exceeded"),
                        "{}",
                        e.message
                    );
                }
            }
            (admitted, made) => panic!("{name}: admitted {admitted}, got {made:?}"),
        }
    }

    // A webhook of everything that is down does not hold its own configuration in place.
    configure(
        &k.c,
        &validating(),
        "everything",
        vec![hook_for(
            "everything.keel.test",
            &down,
            &bundle,
            "*",
            &["*"],
            &["*/*"],
            json!({}),
        )],
    )
    .await;
    let e =
        k.c.create(&configmaps(), "default", &configmap("blocked", json!({})))
            .await
            .unwrap_err();
    assert!(e.message.contains("everything.keel.test"), "{}", e.message);
    k.c.delete(&validating(), "", "everything", &DeleteParams::default())
        .await
        .unwrap();
    k.c.create(&configmaps(), "default", &configmap("unblocked", json!({})))
        .await
        .unwrap();
}

#[tokio::test]
async fn namespace_and_object_selectors_choose_which_calls_are_made() {
    let k = cluster(&[]).await;
    let hooks = WebhookServer::start(&[], |_, review| Reply::allow(review)).await;
    let bundle = hooks.ca.ca_bundle();
    for (ns, team) in [("team-a", "a"), ("team-b", "b")] {
        k.c.create(
            &namespaces(),
            "",
            &json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"team": team}}}),
        )
        .await
        .unwrap();
    }
    configure(
        &k.c,
        &validating(),
        "selectors",
        vec![
            hook(
                "by-namespace.keel.test",
                &hooks.url("/ns"),
                &bundle,
                &["configmaps"],
                json!({"namespaceSelector": {"matchLabels": {"team": "a"}}}),
            ),
            hook(
                "by-object.keel.test",
                &hooks.url("/obj"),
                &bundle,
                &["configmaps"],
                json!({"objectSelector": {"matchExpressions": [{"key": "audit", "operator": "Exists"}]}}),
            ),
        ],
    )
    .await;
    for (ns, name, l) in [
        ("team-a", "a1", json!({})),
        ("team-b", "b1", json!({})),
        ("team-b", "b2", json!({"audit": "yes"})),
        ("team-a", "a2", json!({"audit": "yes"})),
    ] {
        k.c.create(&configmaps(), ns, &configmap(name, l))
            .await
            .unwrap();
    }
    let names = |path: &str| -> Vec<String> {
        hooks
            .calls_to(path)
            .iter()
            .map(|r| r["request"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("/ns"), vec!["a1", "a2"]);
    assert_eq!(names("/obj"), vec!["b2", "a2"]);
}

#[tokio::test]
async fn a_webhook_that_asks_is_called_again_after_a_later_one_changed_the_object() {
    let k = cluster(&[]).await;
    // "a-first" records whether it saw b's label; "b-second" adds it.
    let hooks = WebhookServer::start(&[], |path, review| {
        let obj = &review["request"]["object"];
        match path {
            "/a" => {
                let saw = if obj["metadata"]["labels"]["b"].is_null() { "no" } else { "yes" };
                Reply::patch(
                    review,
                    json!([{"op": "add", "path": "/metadata/annotations", "value": {"a-saw-b": saw}}]),
                )
            }
            "/b" => Reply::patch(
                review,
                json!([{"op": "add", "path": "/metadata/labels/b", "value": "1"}]),
            ),
            _ => Reply::allow(review),
        }
    })
    .await;
    let bundle = hooks.ca.ca_bundle();
    configure(
        &k.c,
        &mutating(),
        "a-first",
        vec![hook(
            "a.keel.test",
            &hooks.url("/a"),
            &bundle,
            &["configmaps"],
            json!({"reinvocationPolicy": "IfNeeded"}),
        )],
    )
    .await;
    configure(
        &k.c,
        &mutating(),
        "b-second",
        vec![hook(
            "b.keel.test",
            &hooks.url("/b"),
            &bundle,
            &["configmaps"],
            json!({}),
        )],
    )
    .await;
    configure(
        &k.c,
        &mutating(),
        "c-never",
        vec![hook(
            "c.keel.test",
            &hooks.url("/c"),
            &bundle,
            &["configmaps"],
            json!({}),
        )],
    )
    .await;
    let made =
        k.c.create(&configmaps(), "default", &configmap("twice", json!({})))
            .await
            .unwrap();
    assert_eq!(made["metadata"]["annotations"]["a-saw-b"], "yes");
    assert_eq!(made["metadata"]["labels"]["b"], "1");
    assert_eq!(hooks.calls_to("/a").len(), 2);
    assert_eq!(hooks.calls_to("/b").len(), 1);
    assert_eq!(hooks.calls_to("/c").len(), 1);

    // Alone, a webhook's own patch does not call it again.
    for name in ["b-second", "c-never"] {
        k.c.delete(&mutating(), "", name, &DeleteParams::default())
            .await
            .unwrap();
    }
    let made =
        k.c.create(&configmaps(), "default", &configmap("once", json!({})))
            .await
            .unwrap();
    assert_eq!(made["metadata"]["annotations"]["a-saw-b"], "no");
    assert_eq!(hooks.calls_to("/a").len(), 3);
}

#[tokio::test]
async fn a_dry_run_is_sent_to_webhooks_without_side_effects_and_refused_by_one_with_them() {
    let k = cluster(&[]).await;
    let hooks = WebhookServer::start(&[], |_, review| Reply::allow(review)).await;
    let bundle = hooks.ca.ca_bundle();
    // A new configuration may not declare side effects (v1 allows None and NoneOnDryRun).
    let e = k
        .c
        .create(
            &validating(),
            "",
            &json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "effects"},
                "webhooks": [hook("effects.keel.test", &hooks.url("/effects"), &bundle, &["configmaps"],
                    json!({"sideEffects": "Some"}))]}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert!(
        e.message.contains(
            "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\""
        ),
        "{}",
        e.message
    );
    configure(
        &k.c,
        &validating(),
        "pure",
        vec![hook(
            "pure.keel.test",
            &hooks.url("/pure"),
            &bundle,
            &["configmaps"],
            json!({}),
        )],
    )
    .await;
    // A dry run (an apply that would create the object, over gRPC).
    let dry = keel_client::ApplyParams {
        dry_run: true,
        ..keel_client::ApplyParams::new("tester")
    };
    k.c.apply(
        &configmaps(),
        "default",
        "dry",
        &configmap("dry", json!({})),
        &dry,
    )
    .await
    .unwrap();
    let sent = &hooks.calls_to("/pure")[0]["request"];
    assert_eq!(sent["dryRun"], true);
    assert_eq!(sent["options"]["dryRun"], json!(["All"]));
    assert_eq!(
        k.c.get(&configmaps(), "default", "dry")
            .await
            .unwrap_err()
            .reason,
        Reason::NotFound
    );

    // A configuration stored before v1 refused side effects (written by an older server) is
    // kept; a dry run it would see fails, and it is never called.
    configure(
        &k.c,
        &validating(),
        "legacy",
        vec![hook(
            "legacy.keel.test",
            &hooks.url("/legacy"),
            &bundle,
            &["configmaps"],
            json!({}),
        )],
    )
    .await;
    let etcd = k._etcd.client().await;
    let key = "/registry/admissionregistration.k8s.io/validatingwebhookconfigurations/legacy";
    let mut kv = etcd.clone();
    let stored = kv.get(key, None).await.unwrap();
    let text = String::from_utf8(stored.kvs()[0].value().to_vec()).unwrap();
    let legacy = text.replace("\"sideEffects\":\"None\"", "\"sideEffects\":\"Unknown\"");
    assert_ne!(text, legacy, "{text}");
    kv.put(key, legacy, None).await.unwrap();
    let e = eventually(
        Duration::from_secs(5),
        "the legacy webhook in force",
        || {
            let c = k.c.clone();
            let dry = dry.clone();
            async move {
                c.apply(
                    &configmaps(),
                    "default",
                    "dry2",
                    &configmap("dry2", json!({})),
                    &dry,
                )
                .await
                .err()
            }
        },
    )
    .await;
    assert_eq!(e.reason, Reason::BadRequest);
    assert_eq!(
        e.message,
        "admission webhook \"legacy.keel.test\" does not support dry run"
    );
    assert!(hooks.calls_to("/legacy").is_empty());
    // Without a dry run it is called.
    k.c.create(&configmaps(), "default", &configmap("wet", json!({})))
        .await
        .unwrap();
    assert_eq!(hooks.calls_to("/legacy").len(), 1);
}

#[tokio::test]
async fn a_webhook_behind_a_service_with_hand_made_endpoints_is_called_by_the_services_name() {
    let k = cluster(&[]).await;
    let hooks =
        WebhookServer::start(&["hooks.webhooks.svc"], |_, review| Reply::allow(review)).await;
    k.c.create(
        &namespaces(),
        "",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "webhooks"}}),
    )
    .await
    .unwrap();
    k.c.create(
        &gvr("", "v1", "services"),
        "webhooks",
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hooks"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 9443}]}}),
    )
    .await
    .unwrap();
    k.c.create(
        &gvr("", "v1", "endpoints"),
        "webhooks",
        &json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "hooks"},
            "subsets": [{"addresses": [{"ip": "127.0.0.1"}],
                "ports": [{"name": "https", "port": hooks.addr.port()}]}]}),
    )
    .await
    .unwrap();
    let mut h = hook(
        "svc.keel.test",
        "",
        &hooks.ca.ca_bundle(),
        &["configmaps"],
        json!({}),
    );
    h["clientConfig"] = json!({"service": {"namespace": "webhooks", "name": "hooks", "path": "/by-service"},
        "caBundle": hooks.ca.ca_bundle()});
    configure(&k.c, &validating(), "svc", vec![h]).await;
    k.c.create(
        &configmaps(),
        "default",
        &configmap("via-service", json!({})),
    )
    .await
    .unwrap();
    assert_eq!(hooks.calls_to("/by-service").len(), 1);

    // A Service port the configuration names that the Service lacks: the call fails, naming
    // it.
    let mut h = hook(
        "port.keel.test",
        "",
        &hooks.ca.ca_bundle(),
        &["configmaps"],
        json!({}),
    );
    h["clientConfig"] = json!({"service": {"namespace": "webhooks", "name": "hooks", "port": 8443},
        "caBundle": hooks.ca.ca_bundle()});
    configure(&k.c, &validating(), "port", vec![h]).await;
    let e =
        k.c.create(&configmaps(), "default", &configmap("no-port", json!({})))
            .await
            .unwrap_err();
    assert!(
        e.message
            .contains("failed calling webhook \"port.keel.test\"")
            && e.message
                .contains("service \"webhooks/hooks\" has no port 8443"),
        "{}",
        e.message
    );
    k.c.delete(&validating(), "", "port", &DeleteParams::default())
        .await
        .unwrap();

    // No ready endpoint (an Endpoints with no subsets, as the endpoints controller writes it
    // when no Pod is ready): the call fails, the server goes on.
    let mut endpoints =
        k.c.get(&gvr("", "v1", "endpoints"), "webhooks", "hooks")
            .await
            .unwrap();
    endpoints.as_object_mut().unwrap().remove("subsets");
    k.c.update(&gvr("", "v1", "endpoints"), "webhooks", &endpoints)
        .await
        .unwrap();
    let e = eventually(Duration::from_secs(5), "the call to fail", || {
        let c = k.c.clone();
        async move {
            c.create(
                &configmaps(),
                "default",
                &configmap("no-endpoints", json!({})),
            )
            .await
            .err()
        }
    })
    .await;
    assert!(
        e.message
            .contains("no endpoints available for service \"hooks\""),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn a_ca_bundle_that_does_not_match_the_webhooks_certificate_fails_the_call() {
    let k = cluster(&[]).await;
    let hooks = WebhookServer::start(&[], |_, review| Reply::allow(review)).await;
    let other = TestCa::new(&[]);
    configure(
        &k.c,
        &validating(),
        "stranger",
        vec![hook(
            "stranger.keel.test",
            &hooks.url("/x"),
            &other.ca_bundle(),
            &["configmaps"],
            json!({}),
        )],
    )
    .await;
    let e =
        k.c.create(
            &configmaps(),
            "default",
            &configmap("unverified", json!({})),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::InternalError);
    assert!(
        e.message
            .contains("failed calling webhook \"stranger.keel.test\"")
            && e.message.contains("certificate"),
        "{}",
        e.message
    );
    assert!(hooks.calls().is_empty(), "the server was sent the review");
}

#[tokio::test]
async fn webhooks_see_pods_status_and_deployments_scale() {
    let k = cluster(&[]).await;
    let hooks = WebhookServer::start(&[], |path, review| match path {
        "/status" if review["request"]["object"]["status"]["phase"] == "Failed" => {
            Reply::deny(review, "no pod fails here", 422)
        }
        "/scale" => Reply::patch(
            review,
            json!([{"op": "replace", "path": "/spec/replicas", "value": 2}]),
        ),
        _ => Reply::allow(review),
    })
    .await;
    let bundle = hooks.ca.ca_bundle();
    configure(
        &k.c,
        &validating(),
        "status",
        vec![hook_for(
            "status.keel.test",
            &hooks.url("/status"),
            &bundle,
            "",
            &["UPDATE"],
            &["pods/status"],
            json!({}),
        )],
    )
    .await;
    configure(
        &k.c,
        &mutating(),
        "scale",
        vec![hook_for(
            "scale.keel.test",
            &hooks.url("/scale"),
            &bundle,
            "apps",
            &["UPDATE"],
            &["deployments/scale"],
            json!({}),
        )],
    )
    .await;
    let pods = gvr("", "v1", "pods");
    let pod =
        k.c.create(
            &pods,
            "default",
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .await
        .unwrap();
    // An update of the Pod itself is not sent.
    k.c.patch(
        &pods,
        "default",
        "p",
        PatchType::Merge,
        &json!({"metadata": {"labels": {"x": "y"}}}),
    )
    .await
    .unwrap();
    assert!(hooks.calls_to("/status").is_empty());
    let mut running = pod.clone();
    running["metadata"]["resourceVersion"] = json!(null);
    running["status"] = json!({"phase": "Running"});
    k.c.update_status(&pods, "default", &running).await.unwrap();
    let e =
        k.c.patch_subresource(
            &pods,
            "default",
            "p",
            "status",
            PatchType::Merge,
            serde_json::to_vec(&json!({"status": {"phase": "Failed"}})).unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(
        e.message,
        "admission webhook \"status.keel.test\" denied the request: no pod fails here"
    );
    let calls = hooks.calls_to("/status");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["request"]["subResource"], "status");
    assert_eq!(calls[0]["request"]["kind"]["kind"], "Pod");

    let deployments = gvr("apps", "v1", "deployments");
    k.c.create(
        &deployments,
        "default",
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
    )
    .await
    .unwrap();
    k.c.patch_subresource(
        &deployments,
        "default",
        "web",
        "scale",
        PatchType::Merge,
        serde_json::to_vec(&json!({"spec": {"replicas": 5}})).unwrap(),
    )
    .await
    .unwrap();
    let web = k.c.get(&deployments, "default", "web").await.unwrap();
    assert_eq!(web["spec"]["replicas"], 2, "the webhook's patch holds");
    let scale = &hooks.calls_to("/scale")[0]["request"];
    assert_eq!(
        scale["kind"],
        json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    );
    assert_eq!(scale["subResource"], "scale");
    assert_eq!(scale["object"]["spec"]["replicas"], 5);
    assert_eq!(scale["oldObject"]["spec"]["replicas"], 1);
}

#[tokio::test]
async fn a_delete_is_sent_with_the_object_being_deleted() {
    let k = cluster(&[]).await;
    let hooks = WebhookServer::start(&[], |_, review| {
        if review["request"]["oldObject"]["metadata"]["labels"]["protected"] == "true" {
            Reply::deny(review, "protected", 403)
        } else {
            Reply::allow(review)
        }
    })
    .await;
    configure(
        &k.c,
        &validating(),
        "deletes",
        vec![hook_for(
            "deletes.keel.test",
            &hooks.url("/delete"),
            &hooks.ca.ca_bundle(),
            "",
            &["DELETE"],
            &["configmaps"],
            json!({}),
        )],
    )
    .await;
    k.c.create(
        &configmaps(),
        "default",
        &configmap("keep", json!({"protected": "true"})),
    )
    .await
    .unwrap();
    k.c.create(&configmaps(), "default", &configmap("drop", json!({})))
        .await
        .unwrap();
    assert!(hooks.calls().is_empty(), "creates are not sent");
    // A mutating webhook may not patch what a delete has no object for.
    let patcher = WebhookServer::start(&[], |_, review| {
        Reply::patch(
            review,
            json!([{"op": "add", "path": "/metadata/labels", "value": {}}]),
        )
    })
    .await;
    configure(
        &k.c,
        &mutating(),
        "delete-patcher",
        vec![hook_for(
            "patcher.keel.test",
            &patcher.url("/p"),
            &patcher.ca.ca_bundle(),
            "",
            &["DELETE"],
            &["configmaps"],
            json!({"objectSelector": {"matchLabels": {"patch-me": "true"}}}),
        )],
    )
    .await;
    k.c.create(
        &configmaps(),
        "default",
        &configmap("patched", json!({"patch-me": "true"})),
    )
    .await
    .unwrap();
    let e =
        k.c.delete(
            &configmaps(),
            "default",
            "patched",
            &DeleteParams::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "Internal error occurred: admission webhook \"patcher.keel.test\" attempted to modify the object, which is not supported for this operation"
    );
    let e =
        k.c.delete(&configmaps(), "default", "keep", &DeleteParams::default())
            .await
            .unwrap_err();
    assert_eq!(
        e.message,
        "admission webhook \"deletes.keel.test\" denied the request: protected"
    );
    k.c.get(&configmaps(), "default", "keep").await.unwrap();
    k.c.delete(&configmaps(), "default", "drop", &DeleteParams::default())
        .await
        .unwrap();
    let sent = &hooks.calls_to("/delete")[1]["request"];
    assert_eq!(sent["operation"], "DELETE");
    assert_eq!(sent["object"], Value::Null);
    assert_eq!(sent["oldObject"]["metadata"]["name"], "drop");
    assert_eq!(sent["options"]["kind"], "DeleteOptions");
}

#[tokio::test]
async fn a_configuration_takes_effect_on_another_replica_within_a_second() {
    let etcd = Etcd::start().await;
    let a = ApiServer::start(&etcd).await;
    let b = ApiServer::start(&etcd).await;
    let (ca, cb) = (a.client().await, b.client().await);
    // b has read (and cached) the configurations before this one exists.
    cb.create(&configmaps(), "default", &configmap("before", json!({})))
        .await
        .unwrap();
    let hooks = WebhookServer::start(&[], |_, review| Reply::deny(review, "closed", 403)).await;
    configure(
        &ca,
        &validating(),
        "closed",
        vec![hook(
            "closed.keel.test",
            &hooks.url("/closed"),
            &hooks.ca.ca_bundle(),
            &["configmaps"],
            json!({}),
        )],
    )
    .await;
    let start = tokio::time::Instant::now();
    let mut i = 0;
    eventually(
        Duration::from_secs(1),
        "replica b calling the webhook",
        || {
            i += 1;
            let cb = cb.clone();
            async move {
                cb.create(
                    &configmaps(),
                    "default",
                    &configmap(&format!("after-{i}"), json!({})),
                )
                .await
                .err()
            }
        },
    )
    .await;
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn bad_configurations_are_refused_naming_the_field() {
    let k = cluster(&[]).await;
    let table = [
        (
            json!({"clientConfig": {"url": "http://127.0.0.1:1/x"}}),
            "webhooks[0].clientConfig.url: Invalid value: \"http://127.0.0.1:1/x\": 'https' is the only allowed URL scheme",
        ),
        (
            json!({"clientConfig": {"url": "https://127.0.0.1:1/x", "caBundle": "bm90IGEgY2VydGlmaWNhdGU="}}),
            "webhooks[0].clientConfig.caBundle: Invalid value: \"<caBundle>\": must be PEM-encoded certificates",
        ),
        (
            json!({"clientConfig": {"service": {"namespace": "a", "name": "b", "port": 0}}}),
            "webhooks[0].clientConfig.service.port: Invalid value: 0: port is not valid",
        ),
        (
            json!({"matchConditions": [{"name": "labelled", "expression": "has(object.metadata.labels"}]}),
            "webhooks[0].matchConditions[0].expression: Invalid value: \"has(object.metadata.labels\": compilation failed: ERROR: <input>:1:",
        ),
    ];
    for (extra, want) in table {
        let h = hook(
            "bad.keel.test",
            "https://127.0.0.1:1/x",
            "",
            &["configmaps"],
            extra,
        );
        let e = k
            .c
            .create(
                &validating(),
                "",
                &json!({"apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "bad"}, "webhooks": [h]}),
            )
            .await
            .unwrap_err();
        assert_eq!(e.reason, Reason::Invalid);
        assert!(
            e.message.starts_with(
                "ValidatingWebhookConfiguration.admissionregistration.k8s.io \"bad\" is invalid"
            ) && e.message.contains(want),
            "{}",
            e.message
        );
    }
    let h = hook(
        "twice.keel.test",
        "https://127.0.0.1:1/x",
        "",
        &["configmaps"],
        json!({}),
    );
    let e = k
        .c
        .create(
            &mutating(),
            "",
            &json!({"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration", "metadata": {"name": "twice"}, "webhooks": [h.clone(), h]}),
        )
        .await
        .unwrap_err();
    assert!(
        e.message
            .contains("webhooks[1].name: Duplicate value: \"twice.keel.test\""),
        "{}",
        e.message
    );
}

/// Runs kubectl (v1.32, or `KUBECTL`) against `api` over REST; its output, status first.

// kubectl blocks its thread: the webhook server needs another.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_prints_a_webhooks_warnings_and_denial_and_the_audit_log_keeps_its_annotations() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.log");
    let k = cluster(&["--audit-log-path", audit.to_str().unwrap()]).await;
    let hooks = WebhookServer::start(&[], |_, review| {
        let name = review["request"]["name"].as_str().unwrap_or_default();
        if name == "refused" {
            return Reply::deny(review, "refused by policy", 403);
        }
        Reply::review(
            review,
            json!({"allowed": true, "warnings": ["this configmap is watched"],
                "auditAnnotations": {"decision": "allowed"}}),
        )
    })
    .await;
    configure(
        &k.c,
        &validating(),
        "warn",
        vec![hook(
            "warn.keel.test",
            &hooks.url("/warn"),
            &hooks.ca.ca_bundle(),
            &["configmaps"],
            json!({}),
        )],
    )
    .await;
    let (ok, _, err) = kubectl(
        &k.api,
        dir.path(),
        &["create", "configmap", "watched", "--from-literal=a=b"],
    );
    assert!(ok, "{err}");
    assert!(err.contains("Warning: this configmap is watched"), "{err}");
    let (ok, _, err) = kubectl(&k.api, dir.path(), &["create", "configmap", "refused"]);
    assert!(!ok);
    assert!(
        err.contains(
            "error: failed to create configmap: admission webhook \"warn.keel.test\" denied the request: refused by policy"
        ),
        "{err}"
    );
    // The Status behind it, as kubectl shows a server's error.
    let manifest = dir.path().join("refused.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: refused\n",
    )
    .unwrap();
    let (ok, _, err) = kubectl(
        &k.api,
        dir.path(),
        &["create", "-f", manifest.to_str().unwrap()],
    );
    assert!(!ok);
    assert!(
        err.contains("Error from server (Forbidden): error when creating \"")
            && err.contains(
                "admission webhook \"warn.keel.test\" denied the request: refused by policy"
            ),
        "{err}"
    );
    let line = eventually(Duration::from_secs(5), "the create's audit line", || {
        let audit = audit.clone();
        async move {
            std::fs::read_to_string(&audit)
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .find(|l| l["verb"] == "create" && l["name"] == "watched")
        }
    })
    .await;
    assert_eq!(
        line["annotations"]["warn.keel.test/decision"], "allowed",
        "{line}"
    );
}

#[tokio::test]
async fn match_policy_equivalent_sends_another_versions_request_converted() {
    let k = cluster(&[]).await;
    let hooks = WebhookServer::start(&[], |_, review| Reply::allow(review)).await;
    let bundle = hooks.ca.ca_bundle();
    for (name, policy) in [("equivalent", "Equivalent"), ("exact", "Exact")] {
        let mut h = hook_for(
            &format!("{name}.keel.test"),
            &hooks.url(&format!("/{name}")),
            &bundle,
            "autoscaling",
            &["CREATE"],
            &["horizontalpodautoscalers"],
            json!({"matchPolicy": policy}),
        );
        h["rules"][0]["apiVersions"] = json!(["v2"]);
        configure(&k.c, &validating(), name, vec![h]).await;
    }
    k.c.create(
        &gvr("autoscaling", "v1", "horizontalpodautoscalers"),
        "default",
        &json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "maxReplicas": 5, "targetCPUUtilizationPercentage": 70}}),
    )
    .await
    .unwrap();
    assert!(hooks.calls_to("/exact").is_empty());
    let sent = &hooks.calls_to("/equivalent")[0]["request"];
    assert_eq!(
        sent["kind"],
        json!({"group": "autoscaling", "version": "v2", "kind": "HorizontalPodAutoscaler"})
    );
    assert_eq!(sent["requestKind"]["version"], "v1");
    assert_eq!(sent["requestResource"]["version"], "v1");
    assert_eq!(sent["object"]["apiVersion"], "autoscaling/v2");
    assert_eq!(
        sent["object"]["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        70
    );
}

// kubectl blocks its thread: the webhook server needs another.
#[tokio::test(flavor = "multi_thread")]
async fn an_eviction_is_sent_to_webhooks_of_pods_eviction() {
    let k = cluster(&[]).await;
    let hooks = WebhookServer::start(&[], |_, review| Reply::deny(review, "not now", 429)).await;
    configure(
        &k.c,
        &validating(),
        "evictions",
        vec![hook(
            "evictions.keel.test",
            &hooks.url("/evict"),
            &hooks.ca.ca_bundle(),
            &["pods/eviction"],
            json!({}),
        )],
    )
    .await;
    let pods = gvr("", "v1", "pods");
    k.c.create(
        &pods,
        "default",
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    )
    .await
    .unwrap();
    assert!(
        hooks.calls().is_empty(),
        "a pod's create is not pods/eviction"
    );
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, err) = kubectl(&k.api, dir.path(), &["drain", "--help"]);
    assert!(ok, "{err}");
    // kubectl has no eviction verb of its own: the Eviction is POSTed as kubectl drain does.
    let body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "default"},
        "deleteOptions": {"gracePeriodSeconds": 0}});
    let file = dir.path().join("eviction.json");
    std::fs::write(&file, body.to_string()).unwrap();
    let (ok, _, err) = kubectl(
        &k.api,
        dir.path(),
        &[
            "create",
            "--raw",
            "/api/v1/namespaces/default/pods/p/eviction",
            "-f",
            file.to_str().unwrap(),
        ],
    );
    assert!(!ok);
    assert!(
        err.contains("admission webhook \\\"evictions.keel.test\\\" denied the request: not now")
            || err
                .contains("admission webhook \"evictions.keel.test\" denied the request: not now"),
        "{err}"
    );
    let sent = &hooks.calls_to("/evict")[0]["request"];
    assert_eq!(
        sent["kind"],
        json!({"group": "policy", "version": "v1", "kind": "Eviction"})
    );
    assert_eq!(sent["subResource"], "eviction");
    assert_eq!(sent["object"]["deleteOptions"]["gracePeriodSeconds"], 0);
    assert_eq!(sent["operation"], "CREATE");
    k.c.get(&pods, "default", "p").await.unwrap();
}

/// `stable.example.com` CronTabs at v1 (`spec.cronSpec`, stored) and v2 (`spec.cron`),
/// converted by the webhook at `url`.
fn crontab_crd(url: &str, ca_bundle: &str) -> Value {
    let schema = |field: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {field: {"type": "string"}, "replicas": {"type": "integer"}}}}}})
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {
            "group": "stable.example.com", "scope": "Namespaced",
            "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab"},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": schema("cronSpec")},
                {"name": "v2", "served": true, "storage": false, "schema": schema("cron")},
            ],
            "conversion": {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": url, "caBundle": ca_bundle}}},
        }
    })
}

/// The test's conversion: v1 `spec.cronSpec` <-> v2 `spec.cron`; an object labelled
/// `broken` cannot be converted.
fn convert_crontabs(review: &Value) -> Reply {
    let request = &review["request"];
    let desired = request["desiredAPIVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut out = Vec::new();
    for obj in request["objects"].as_array().into_iter().flatten() {
        if obj["metadata"]["labels"]["broken"] == "true" {
            return Reply::json(
                &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "response": {"uid": request["uid"], "result": {"status": "Failure",
                    "message": format!("cannot convert {}", obj["metadata"]["name"])}}}),
            );
        }
        let mut o = obj.clone();
        let spec = o["spec"].as_object_mut().unwrap();
        match desired.as_str() {
            "stable.example.com/v2" => {
                if let Some(v) = spec.remove("cronSpec") {
                    spec.insert("cron".into(), v);
                }
            }
            _ => {
                if let Some(v) = spec.remove("cron") {
                    spec.insert("cronSpec".into(), v);
                }
            }
        }
        o["apiVersion"] = json!(desired);
        out.push(o);
    }
    Reply::json(
        &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "response": {"uid": request["uid"], "convertedObjects": out, "result": {"status": "Success"}}}),
    )
}

#[tokio::test]
async fn a_two_version_crd_is_read_listed_and_watched_in_both_versions_through_its_conversion_webhook()
 {
    let k = cluster(&[]).await;
    let hooks = WebhookServer::start(&[], |_, review| convert_crontabs(review)).await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    k.c.create(
        &crds,
        "",
        &crontab_crd(&hooks.url("/convert"), &hooks.ca.ca_bundle()),
    )
    .await
    .unwrap();
    let (v1, v2) = (
        gvr("stable.example.com", "v1", "crontabs"),
        gvr("stable.example.com", "v2", "crontabs"),
    );
    let mut watch = eventually(Duration::from_secs(10), "CronTabs served", || {
        let c = k.c.clone();
        let v2 = v2.clone();
        async move {
            c.watch(&v2, &keel_client::WatchParams::default())
                .await
                .ok()
        }
    })
    .await;
    let mut watch_v1 =
        k.c.watch(&v1, &keel_client::WatchParams::default())
            .await
            .unwrap();

    // Created at v2: stored at v1, by the webhook.
    let made =
        k.c.create(
            &v2,
            "default",
            &json!({"apiVersion": "stable.example.com/v2", "kind": "CronTab",
                "metadata": {"name": "backup"}, "spec": {"cron": "*/5 * * * *", "replicas": 1}}),
        )
        .await
        .unwrap();
    assert_eq!(made["apiVersion"], "stable.example.com/v2");
    assert_eq!(made["spec"]["cron"], "*/5 * * * *");
    let mut etcd = k._etcd.client().await;
    let raw = etcd
        .get("/registry/stable.example.com/crontabs/default/backup", None)
        .await
        .unwrap();
    let stored: Value = serde_json::from_slice(raw.kvs()[0].value()).unwrap();
    assert_eq!(stored["apiVersion"], "stable.example.com/v1");
    assert_eq!(
        stored["spec"],
        json!({"cronSpec": "*/5 * * * *", "replicas": 1})
    );

    // Read in both versions.
    let at_v1 = k.c.get(&v1, "default", "backup").await.unwrap();
    assert_eq!(at_v1["apiVersion"], "stable.example.com/v1");
    assert_eq!(at_v1["spec"]["cronSpec"], "*/5 * * * *");
    let at_v2 = k.c.get(&v2, "default", "backup").await.unwrap();
    assert_eq!(at_v2["spec"], json!({"cron": "*/5 * * * *", "replicas": 1}));

    // Written at v1 (a patch), listed at v2.
    k.c.patch(
        &v1,
        "default",
        "backup",
        PatchType::Merge,
        &json!({"spec": {"cronSpec": "0 * * * *"}}),
    )
    .await
    .unwrap();
    k.c.create(
        &v1,
        "default",
        &json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab",
            "metadata": {"name": "report"}, "spec": {"cronSpec": "0 0 * * *"}}),
    )
    .await
    .unwrap();
    let listed = k.c.list(&v2, "default", &Default::default()).await.unwrap();
    let crons: Vec<(String, String, String)> = listed
        .items
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o["apiVersion"].as_str().unwrap().to_string(),
                o["spec"]["cron"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        crons,
        vec![
            (
                "backup".into(),
                "stable.example.com/v2".into(),
                "0 * * * *".into()
            ),
            (
                "report".into(),
                "stable.example.com/v2".into(),
                "0 0 * * *".into()
            ),
        ]
    );
    // A patch at v2 of v2's field.
    k.c.patch(
        &v2,
        "default",
        "report",
        PatchType::Merge,
        &json!({"spec": {"cron": "30 0 * * *"}}),
    )
    .await
    .unwrap();
    assert_eq!(
        k.c.get(&v1, "default", "report").await.unwrap()["spec"]["cronSpec"],
        "30 0 * * *"
    );

    // Each watch saw every change, at its own version.
    let all = vec!["*/5 * * * *", "0 * * * *", "0 0 * * *", "30 0 * * *"];
    assert_eq!(schedules(&mut watch, "v2", "cron").await, all);
    assert_eq!(schedules(&mut watch_v1, "v1", "cronSpec").await, all);
    // Listed at v1.
    let listed = k.c.list(&v1, "default", &Default::default()).await.unwrap();
    let crons: Vec<&str> = listed
        .items
        .iter()
        .map(|o| o["spec"]["cronSpec"].as_str().unwrap())
        .collect();
    assert_eq!(crons, vec!["0 * * * *", "30 0 * * *"]);

    // An object the webhook cannot convert: a clear error at v2; at v1 (stored) it is whole.
    k.c.create(
        &v1,
        "default",
        &json!({"apiVersion": "stable.example.com/v1", "kind": "CronTab",
            "metadata": {"name": "odd", "labels": {"broken": "true"}}, "spec": {"cronSpec": "x"}}),
    )
    .await
    .unwrap();
    let e = k.c.get(&v2, "default", "odd").await.unwrap_err();
    assert_eq!(e.reason, Reason::InternalError);
    assert_eq!(
        e.message,
        "conversion webhook for stable.example.com/v1, Kind=CronTab failed: cannot convert \"odd\""
    );
    let e =
        k.c.list(&v2, "default", &Default::default())
            .await
            .unwrap_err();
    assert!(
        e.message.contains("cannot convert \"odd\""),
        "{}",
        e.message
    );
    let odd = k.c.get(&v1, "default", "odd").await.unwrap();
    assert_eq!(odd["spec"]["cronSpec"], "x");
    let e =
        k.c.patch(
            &v2,
            "default",
            "odd",
            PatchType::Merge,
            &json!({"spec": {"cron": "y"}}),
        )
        .await
        .unwrap_err();
    assert!(e.message.contains("cannot convert"), "{}", e.message);
    assert_eq!(
        k.c.get(&v1, "default", "odd").await.unwrap()["spec"]["cronSpec"],
        "x"
    );
}

/// The schedules (`spec.<field>`) of the next four events of `watch`, each checked to be at
/// `version`.
async fn schedules(
    watch: &mut (impl futures::Stream<Item = Result<keel_client::Event, keel_client::ApiError>> + Unpin),
    version: &str,
    field: &str,
) -> Vec<String> {
    use futures::StreamExt;
    let mut seen = Vec::new();
    while seen.len() < 4 {
        let e = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("a watch event")
            .unwrap()
            .unwrap();
        assert_eq!(
            e.object["apiVersion"],
            format!("stable.example.com/{version}"),
            "{:?}",
            e.object
        );
        seen.push(e.object["spec"][field].as_str().unwrap().to_string());
    }
    seen
}

#[tokio::test]
async fn a_crd_with_a_webhook_conversion_needs_the_webhook() {
    let k = cluster(&[]).await;
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let mut crd = crontab_crd("https://127.0.0.1:1/convert", "");
    crd["spec"]["conversion"] = json!({"strategy": "Webhook"});
    let e = k.c.create(&crds, "", &crd).await.unwrap_err();
    assert!(
        e.message.contains(
            "spec.conversion.webhook: Required value: required when strategy is set to Webhook"
        ),
        "{}",
        e.message
    );
    crd["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
        "clientConfig": {"url": "http://127.0.0.1:1/convert"}}});
    let e = k.c.create(&crds, "", &crd).await.unwrap_err();
    assert!(
        e.message.contains("spec.conversion.webhook.clientConfig.url: Invalid value: \"http://127.0.0.1:1/convert\": 'https' is the only allowed URL scheme"),
        "{}",
        e.message
    );
}

/// The seeds' walkthrough with today's Istio flow: `keel-initializer --webhook` registers a
/// MutatingWebhookConfiguration and injects Envoy into a Deployment's Pods as they are
/// created. No InitializerConfiguration exists; the Pods never wait.
#[tokio::test]
async fn a_deployments_pods_come_up_with_envoy_from_the_initializer_as_a_webhook() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    keel_tests::create_envoy_configmap(&c).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(&[]);
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let (cert, key, ca_file) = (
        file("injector.crt", &ca.cert_pem),
        file("injector.key", &ca.key_pem),
        file("ca.crt", &ca.ca_pem),
    );
    let listen = format!("127.0.0.1:{}", free_port());
    let url = format!("https://{listen}/inject");
    let _injector = keel_tests::KeelService::initializer(
        &[&api],
        &[
            "--webhook",
            "--webhook-listen",
            &listen,
            "--tls-cert-file",
            &cert,
            "--tls-private-key-file",
            &key,
            "--register-webhook",
            "envoy-sidecar-injector",
            "--webhook-url",
            &url,
            "--webhook-ca-file",
            &ca_file,
        ],
    )
    .await;
    let config = eventually(
        Duration::from_secs(20),
        "the injector's registration",
        || {
            let c = c.clone();
            async move { c.get(&mutating(), "", "envoy-sidecar-injector").await.ok() }
        },
    )
    .await;
    assert_eq!(config["webhooks"][0]["clientConfig"]["url"], url);
    let _cm = keel_tests::ControllerManager::start(&[&api], &[]).await;
    let deployments = gvr("apps", "v1", "deployments");
    c.create(
        &deployments,
        "default",
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "myapp"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "myapp"}},
                "template": {"metadata": {"labels": {"app": "myapp"}},
                    "spec": {"containers": [{"name": "myapp-container", "image": "busybox",
                        "command": ["sh", "-c", "echo Hello Kubernetes! && sleep 3600"]}]}}}}),
    )
    .await
    .unwrap();
    let pods = eventually(Duration::from_secs(30), "two myapp Pods", || {
        let c = c.clone();
        async move {
            let list = c
                .list(&gvr("", "v1", "pods"), "default", &Default::default())
                .await
                .ok()?;
            (list.items.len() == 2).then_some(list.items)
        }
    })
    .await;
    for p in &pods {
        let containers: Vec<&str> = p["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(containers, vec!["myapp-container", "envoy"], "{p}");
        assert!(p["metadata"]["initializers"].is_null(), "{p}");
    }
    let initializer_configs = c
        .list(
            &keel_tests::initializer_configurations(),
            "",
            &Default::default(),
        )
        .await
        .unwrap();
    assert!(initializer_configs.items.is_empty());
}

/// `matchConditions` (CEL): a webhook is called only when every condition holds; one that
/// cannot be evaluated is its failure policy's.
#[tokio::test]
async fn match_conditions_choose_which_calls_are_made() {
    let k = cluster(&[]).await;
    let hooks = WebhookServer::start(&[], |_, review| Reply::allow(review)).await;
    let bundle = hooks.ca.ca_bundle();
    configure(
        &k.c,
        &validating(),
        "conditions",
        vec![
            hook(
                "checked.keel.test",
                &hooks.url("/checked"),
                &bundle,
                &["configmaps"],
                json!({"matchConditions": [
                    {"name": "named-check", "expression": "object.metadata.name.startsWith('check-')"},
                    {"name": "creates", "expression": "request.operation == 'CREATE'"}]}),
            ),
            hook(
                "strict.keel.test",
                &hooks.url("/strict"),
                &bundle,
                &["configmaps"],
                json!({"failurePolicy": "Fail", "matchConditions": [
                    {"name": "team", "expression": "object.metadata.labels.team == 'a'"}]}),
            ),
            hook(
                "lenient.keel.test",
                &hooks.url("/lenient"),
                &bundle,
                &["configmaps"],
                json!({"failurePolicy": "Ignore", "matchConditions": [
                    {"name": "team", "expression": "object.metadata.labels.team == 'a'"}]}),
            ),
        ],
    )
    .await;
    for name in ["check-1", "other"] {
        k.c.create(
            &configmaps(),
            "default",
            &configmap(name, json!({"team": "b"})),
        )
        .await
        .unwrap();
    }
    let names = |path: &str| -> Vec<String> {
        hooks
            .calls_to(path)
            .iter()
            .map(|r| r["request"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("/checked"), vec!["check-1"]);
    assert!(names("/strict").is_empty() && names("/lenient").is_empty());
    k.c.create(
        &configmaps(),
        "default",
        &configmap("team-a", json!({"team": "a"})),
    )
    .await
    .unwrap();
    assert_eq!(names("/strict"), vec!["team-a"]);
    // No labels: the condition cannot be evaluated; Fail refuses, Ignore skips.
    let e =
        k.c.create(
            &configmaps(),
            "default",
            &configmap("unlabelled", Value::Null),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden);
    assert!(
        e.message.starts_with(
            "configmaps \"unlabelled\" is forbidden: expression 'object.metadata.labels.team == 'a'' resulted in error: "
        ),
        "{}",
        e.message
    );
    assert_eq!(names("/lenient"), vec!["team-a"]);
}
