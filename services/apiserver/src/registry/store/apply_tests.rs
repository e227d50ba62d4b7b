//! Server-side apply and managedFields through the registry, on the cases of
//! docs/server-side-apply.md §10 (structured-merge-diff's and Kubernetes' apply tests).

use keel_api::{Metadata, Object, Reason};
use serde_json::{Value, json};

use crate::registry::managed::LAST_APPLIED;
use crate::registry::testing::{Fixture, far};
use crate::registry::{PatchType, Subresource, Write};

/// The entries of `obj`, as (manager, operation, subresource).
fn owners(obj: &Object) -> Vec<(String, String, String)> {
    managed_fields(obj)
        .iter()
        .map(|e| {
            let text = |f: &str| e[f].as_str().unwrap_or("").to_string();
            (text("manager"), text("operation"), text("subresource"))
        })
        .collect()
}

fn managed_fields(obj: &Object) -> Vec<Value> {
    obj.metadata()
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The `fieldsV1` of `manager`'s entry (of operation `op`).
fn fields_of(obj: &Object, manager: &str, op: &str) -> Value {
    managed_fields(obj)
        .into_iter()
        .find(|e| e["manager"] == manager && e["operation"] == op)
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or(Value::Null)
}

fn owner(manager: &str, op: &str, sub: &str) -> (String, String, String) {
    (manager.into(), op.into(), sub.into())
}

/// The seeds' Deployment, as a file holds it.
fn nginx(replicas: Option<i64>, image: &str) -> Value {
    let mut d = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": image,
                                         "ports": [{"containerPort": 80}]}]},
            },
        },
    });
    if let Some(r) = replicas {
        d["spec"]["replicas"] = json!(r);
    }
    d
}

fn configmap(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "cm", "namespace": "default"}, "data": data})
}

fn replicas(obj: &Object) -> i64 {
    obj.as_map()["spec"]["replicas"].as_i64().unwrap()
}

fn image(obj: &Object) -> &str {
    obj.as_map()["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
}

#[tokio::test]
async fn the_seeds_walkthrough_applies_conflicts_forces_and_leaves_a_taken_field_alone() {
    let f = Fixture::new().await;
    let made = f
        .apply("kubectl", nginx(Some(2), "nginx:1.14"))
        .await
        .unwrap();
    assert_eq!(owners(&made), vec![owner("kubectl", "Apply", "")]);
    let mine = fields_of(&made, "kubectl", "Apply");
    assert_eq!(
        mine.to_string(),
        r#"{"f:spec":{"f:replicas":{},"f:selector":{},"f:template":{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{".":{},"f:image":{},"f:name":{},"f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}}}}}}}}"#,
        "Kubernetes' FieldsV1; the defaults (strategy, progressDeadlineSeconds, the port's protocol) are nobody's"
    );
    assert_eq!(
        made.as_map()["spec"]["progressDeadlineSeconds"],
        600,
        "defaulted"
    );

    let changed = f
        .apply("kubectl", nginx(Some(2), "nginx:1.16"))
        .await
        .unwrap();
    assert_eq!(image(&changed), "nginx:1.16");
    assert_ne!(changed.resource_version(), made.resource_version());

    let e = f
        .apply("other", nginx(Some(3), "nginx:1.16"))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Conflict);
    assert_eq!(
        e.message,
        r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas"#
    );
    assert_eq!(e.causes.len(), 1);
    assert_eq!(
        (
            e.causes[0].reason.as_str(),
            e.causes[0].message.as_str(),
            e.causes[0].field.as_str()
        ),
        (
            "FieldManagerConflict",
            r#"conflict with "kubectl""#,
            ".spec.replicas"
        )
    );
    assert_eq!(replicas(&f.get(&made).await.unwrap()), 2, "nothing changed");

    let of = Object::from_value(nginx(None, "")).unwrap();
    let forced = f
        .patch_as(
            "other",
            &of,
            Subresource::Main,
            PatchType::Apply,
            nginx(Some(3), "nginx:1.16"),
            true,
        )
        .await
        .unwrap();
    assert_eq!(replicas(&forced), 3);
    assert!(fields_of(&forced, "kubectl", "Apply")["f:spec"]["f:replicas"].is_null());
    assert_eq!(
        fields_of(&forced, "other", "Apply")["f:spec"]["f:replicas"],
        json!({})
    );

    let again = f.apply("kubectl", nginx(None, "nginx:1.16")).await.unwrap();
    assert_eq!(replicas(&again), 3, "other's replicas are left alone");
}

#[tokio::test]
async fn an_update_takes_the_fields_it_changes_in_kubernetes_own_entries() {
    // TestApplyManagedFields.
    let f = Fixture::new().await;
    let mut config = configmap(json!({"key": "value"}));
    config["metadata"]["labels"] = json!({"test-label": "test"});
    let cm = f.apply("apply_test", config).await.unwrap();
    for patch in [
        json!({"data": {"new-key": "value"}}),
        json!({"data": {"key": "new value"}}),
    ] {
        f.patch_as(
            "updater",
            &cm,
            Subresource::Main,
            PatchType::Merge,
            patch,
            false,
        )
        .await
        .unwrap();
    }
    let got = f.get(&cm).await.unwrap();
    let mut entries = managed_fields(&got);
    for e in &mut entries {
        assert!(e["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{e}");
        e.as_object_mut().unwrap().remove("time");
    }
    assert_eq!(
        Value::Array(entries),
        json!([
            {"manager": "apply_test", "operation": "Apply", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:test-label": {}}}}},
            {"manager": "updater", "operation": "Update", "apiVersion": "v1",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:key": {}, "f:new-key": {}}}},
        ])
    );
}

#[tokio::test]
async fn what_only_the_applier_owned_goes_when_it_stops_applying_it() {
    let f = Fixture::new().await;
    let cm = f
        .apply("one", configmap(json!({"a": "1", "b": "2", "c": "3"})))
        .await
        .unwrap();
    // The updater takes c; a second applier shares a by applying the same value.
    f.patch_as(
        "controller",
        &cm,
        Subresource::Main,
        PatchType::Merge,
        json!({"data": {"c": "30"}}),
        false,
    )
    .await
    .unwrap();
    f.apply("two", configmap(json!({"a": "1"}))).await.unwrap();
    let mut nothing = configmap(json!({}));
    nothing.as_object_mut().unwrap().remove("data");
    let after = f.apply("one", nothing).await.unwrap();
    assert_eq!(
        after.as_map()["data"],
        json!({"a": "1", "c": "30"}),
        "b was one's alone; a is two's too; c is the controller's"
    );
    assert_eq!(
        owners(&after),
        vec![owner("two", "Apply", ""), owner("controller", "Update", "")],
        "an applier that owns nothing has no entry"
    );
}

/// Removal that empties a map or list leaves no field at all in a built-in object (not `{}`,
/// nor the `null` structured-merge-diff leaves, which Go's structs read as absent); and an
/// object nobody owned is first `before-first-apply`'s, at a time, with its marks.
#[tokio::test]
async fn removal_that_empties_a_field_leaves_none_in_a_built_in_object() {
    let f = Fixture::new().await;
    let mut labelled = configmap(json!({"a": "1"}));
    labelled["metadata"]["labels"] = json!({"tier": "web"});
    f.apply("bob", labelled).await.unwrap();
    let mut bare = configmap(json!({}));
    bare.as_object_mut().unwrap().remove("data");
    let after = f.apply("bob", bare).await.unwrap();
    assert!(after.as_map().get("data").is_none(), "{:?}", after.as_map());
    assert!(
        after.metadata().unwrap().get("labels").is_none(),
        "{:?}",
        after.metadata()
    );

    // before-first-apply.
    let cm = f
        .create(crate::registry::testing::configmap(
            "untracked",
            json!({"k": "v"}),
        ))
        .await
        .unwrap();
    let mut reset = cm.clone();
    reset
        .metadata_mut()
        .insert("managedFields".into(), json!([]));
    f.update(&reset, Subresource::Main).await.unwrap();
    let mut config = configmap(json!({"other": "x"}));
    config["metadata"]["name"] = json!("untracked");
    let applied = f.apply("alice", config).await.unwrap();
    let before = managed_fields(&applied)
        .into_iter()
        .find(|e| e["manager"] == "before-first-apply")
        .expect("before-first-apply's entry");
    assert!(before["time"].is_string(), "{before}");
    assert_eq!(before["fieldsV1"], json!({"f:data": {".": {}, "f:k": {}}}));
}

#[tokio::test]
async fn a_keyed_item_goes_with_its_last_owner_whatever_others_set_inside_it() {
    // TestApplyCanRemoveMapItemsContributedToByControllers.
    let f = Fixture::new().await;
    let d = f
        .apply("kubectl", nginx(Some(1), "nginx:1.14"))
        .await
        .unwrap();
    f.patch_as(
        "controller",
        &d,
        Subresource::Main,
        PatchType::Strategic,
        json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "workingDir": "/srv"}]}}}}),
        false,
    )
    .await
    .unwrap();
    let mut other = nginx(Some(1), "busybox");
    other["spec"]["template"]["spec"]["containers"][0]["name"] = json!("other-container");
    let after = f.apply("kubectl", other).await.unwrap();
    let containers = &after.as_map()["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers.as_array().unwrap().len(), 1);
    assert_eq!(containers[0]["name"], "other-container");
    assert!(
        !owners(&after).contains(&owner("controller", "Update", "")),
        "what the controller owned went with the item"
    );
}

#[tokio::test]
async fn a_port_without_its_protocol_is_the_tcp_one_when_keyed() {
    // TestDefaultMissingKeys: the key of a port a file leaves the protocol out of is
    // `protocol: TCP`, so a second applier naming it names the same item.
    let f = Fixture::new().await;
    let mut one = nginx(Some(1), "nginx:1.14");
    one["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{"containerPort": 80, "name": "foo"}]);
    f.apply("one", one).await.unwrap();
    let mut two = nginx(Some(1), "nginx:1.14");
    two["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{"containerPort": 80, "protocol": "TCP", "name": "bar"}]);
    let e = f.apply("two", two).await.unwrap_err();
    assert_eq!(e.causes.len(), 1, "{}", e.message);
    assert_eq!(
        e.causes[0].field,
        r#".spec.template.spec.containers[name="nginx"].ports[containerPort=80,protocol="TCP"].name"#
    );
}

#[tokio::test]
async fn an_apply_that_changes_nothing_writes_nothing() {
    let f = Fixture::new().await;
    let first = f
        .apply("kubectl", nginx(Some(2), "nginx:1.14"))
        .await
        .unwrap();
    let second = f
        .apply("kubectl", nginx(Some(2), "nginx:1.14"))
        .await
        .unwrap();
    assert_eq!(second.resource_version(), first.resource_version());
    assert_eq!(managed_fields(&second), managed_fields(&first));
}

/// Argo CD re-applies its NetworkPolicy, whose ports leave out the protocol: its atomic
/// `ingress` is replaced by the configuration's, so the apply changes the object and stamps
/// its entry with the time; defaulting puts `TCP` back, and what is left differs from the
/// stored object in that time alone. As Kubernetes, that is no write: the same
/// resourceVersion, the old time kept.
#[tokio::test]
async fn an_apply_that_changes_nothing_but_its_entrys_time_writes_nothing() {
    let f = Fixture::new().await;
    let policy = json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "np", "namespace": "default"},
        "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 8084}]}]}});
    let first = f.apply("argocd", policy.clone()).await.unwrap();
    assert_eq!(
        first.as_map()["spec"]["ingress"][0]["ports"][0]["protocol"],
        "TCP"
    );
    // The same object, its entry written long ago.
    let mut old = first.clone();
    old.metadata_mut().remove("resourceVersion");
    let long_ago = "2020-01-01T00:00:00Z";
    for e in old.metadata_mut()["managedFields"].as_array_mut().unwrap() {
        e["time"] = json!(long_ago);
    }
    let rv = f.storage.overwrite_as(&f.info("NetworkPolicy"), &old);
    let second = f.apply("argocd", policy.clone()).await.unwrap();
    assert_eq!(second.resource_version(), rv.to_string());
    assert_eq!(managed_fields(&second)[0]["time"], long_ago);
    assert_eq!(f.revision(), rv, "nothing written");
    // An update and a patch of the same: no write either.
    let mut replaced = f.get(&second).await.unwrap();
    replaced.as_map_mut()["spec"]["ingress"] = json!([{"ports": [{"port": 8084}]}]);
    let updated = f.update(&replaced, Subresource::Main).await.unwrap();
    assert_eq!(updated.resource_version(), rv.to_string());
    let patch = json!({"spec": {"ingress": [{"ports": [{"port": 8084}]}]}});
    let patched = f
        .patch(&second, Subresource::Main, PatchType::Merge, patch)
        .await
        .unwrap();
    assert_eq!(patched.resource_version(), rv.to_string());
    assert_eq!(f.revision(), rv, "nothing written");
    // A real change is written, with its time.
    let mut changed = policy;
    changed["spec"]["ingress"][0]["ports"][0]["port"] = json!(8085);
    let third = f.apply("argocd", changed).await.unwrap();
    assert!(third.resource_version() != rv.to_string());
    assert_ne!(managed_fields(&third)[0]["time"], long_ago);
}

#[tokio::test]
async fn creates_and_updates_record_their_manager_and_a_reset_stops_it_until_an_apply() {
    let f = Fixture::new().await;
    let info = f.info("ConfigMap");
    let made = f
        .registry
        .create(
            &info,
            Object::from_value(configmap(json!({"a": "1"}))).unwrap(),
            Write {
                manager: "kubectl-create",
                ..Write::server()
            },
            far(),
        )
        .await
        .unwrap();
    assert_eq!(owners(&made), vec![owner("kubectl-create", "Update", "")]);
    assert_eq!(
        fields_of(&made, "kubectl-create", "Update"),
        json!({"f:data": {".": {}, "f:a": {}}})
    );
    for reset in [json!([{}]), json!([])] {
        let cleared = f
            .patch_as(
                "flux",
                &made,
                Subresource::Main,
                PatchType::Merge,
                json!({"metadata": {"managedFields": reset}}),
                false,
            )
            .await
            .unwrap();
        assert!(managed_fields(&cleared).is_empty(), "{reset}");
    }
    let untracked = f
        .patch_as(
            "updater",
            &made,
            Subresource::Main,
            PatchType::Merge,
            json!({"data": {"b": "2"}}),
            false,
        )
        .await
        .unwrap();
    assert!(managed_fields(&untracked).is_empty(), "tracking stays off");
    // An apply starts it again; what was there is `before-first-apply`'s, which a change
    // conflicts with.
    let e = f
        .apply("kubectl", configmap(json!({"a": "changed"})))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        r#"Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.a"#
    );
    let applied = f
        .apply("kubectl", configmap(json!({"a": "1", "c": "3"})))
        .await
        .unwrap();
    assert_eq!(
        owners(&applied),
        vec![
            owner("kubectl", "Apply", ""),
            owner("before-first-apply", "Update", "")
        ]
    );
}

#[tokio::test]
async fn status_and_scale_writes_are_recorded_under_their_subresource() {
    let f = Fixture::new().await;
    let d = f
        .apply("kubectl", nginx(Some(1), "nginx:1.14"))
        .await
        .unwrap();
    let scaled = f
        .patch_as(
            "scaler",
            &d,
            Subresource::Scale,
            PatchType::Merge,
            json!({"spec": {"replicas": 4}}),
            false,
        )
        .await
        .unwrap();
    assert_eq!(replicas(&scaled), 4);
    // TestSubresourceField: kubectl's replicas are taken by the scale's writer.
    assert_eq!(
        owners(&scaled),
        vec![
            owner("kubectl", "Apply", ""),
            owner("scaler", "Update", "scale")
        ]
    );
    assert_eq!(
        fields_of(&scaled, "scaler", "Update"),
        json!({"f:spec": {"f:replicas": {}}})
    );

    let status = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default"},
        "spec": {"replicas": 9}, "status": {"collisionCount": 1}});
    let reported = f
        .patch_as(
            "ctrl",
            &d,
            Subresource::Status,
            PatchType::Apply,
            status.clone(),
            false,
        )
        .await
        .unwrap();
    assert_eq!(reported.as_map()["status"]["collisionCount"], 1);
    assert_eq!(replicas(&reported), 4, "a status apply writes only status");
    assert_eq!(
        fields_of(&reported, "ctrl", "Apply"),
        json!({"f:status": {"f:collisionCount": {}}})
    );
    assert!(owners(&reported).contains(&owner("ctrl", "Apply", "status")));

    // The object's own apply leaves status to the status writers, and owns none of it.
    let mut main = nginx(None, "nginx:1.14");
    main["status"] = json!({"collisionCount": 2});
    let main = f.apply("kubectl", main).await.unwrap();
    assert_eq!(main.as_map()["status"]["collisionCount"], 1);
    assert!(fields_of(&main, "kubectl", "Apply")["f:status"].is_null());
}

#[tokio::test]
async fn an_apply_of_the_scale_owns_the_replicas_and_conflicts_with_their_applier() {
    let f = Fixture::new().await;
    let d = f
        .apply("kubectl", nginx(Some(1), "nginx:1.14"))
        .await
        .unwrap();
    let scale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "nginx", "namespace": "default"}, "spec": {"replicas": 7}});
    let apply = |force| {
        f.patch_as(
            "autoscaler",
            &d,
            Subresource::Scale,
            PatchType::Apply,
            scale.clone(),
            force,
        )
    };
    let e = apply(false).await.unwrap_err();
    assert_eq!(
        e.message,
        r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas"#
    );
    let scaled = apply(true).await.unwrap();
    assert_eq!(replicas(&scaled), 7);
    assert!(owners(&scaled).contains(&owner("autoscaler", "Apply", "scale")));
    assert_eq!(
        fields_of(&scaled, "autoscaler", "Apply"),
        json!({"f:spec": {"f:replicas": {}}})
    );
    let mut wrong = scale.clone();
    wrong["kind"] = json!("Deployment");
    let e = f
        .patch_as(
            "autoscaler",
            &d,
            Subresource::Scale,
            PatchType::Apply,
            wrong,
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "invalid object type: autoscaling/v1, Kind=Deployment"
    );
}

#[tokio::test]
async fn kubectl_takes_what_its_client_side_apply_set_but_not_what_changed_since() {
    // TestUpgradeClientSideToServerSideApply.
    let f = Fixture::new().await;
    let info = f.info("Deployment");
    let file = nginx(Some(3), "nginx:1.14");
    let mut obj = file.clone();
    obj["metadata"]["annotations"] = json!({LAST_APPLIED: format!("{file}\n")});
    let made = f
        .registry
        .create(
            &info,
            Object::from_value(obj).unwrap(),
            Write {
                manager: "kubectl-client-side-apply",
                ..Write::server()
            },
            far(),
        )
        .await
        .unwrap();
    f.patch_as(
        "scaler",
        &made,
        Subresource::Main,
        PatchType::Merge,
        json!({"spec": {"replicas": 100000}}),
        false,
    )
    .await
    .unwrap();
    // The image was set by client-side apply and is as it left it: forgiven. The replicas
    // were changed since: a conflict.
    let e = f
        .apply("kubectl", nginx(Some(3), "nginx:1.16"))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        r#"Apply failed with 1 conflict: conflict with "scaler" using apps/v1: .spec.replicas"#
    );
    let mut labelled = nginx(None, "nginx:1.16");
    labelled["metadata"]["labels"] = json!({"new": "label"});
    let applied = f.apply("kubectl", labelled.clone()).await.unwrap();
    assert_eq!(image(&applied), "nginx:1.16");
    assert_eq!(replicas(&applied), 100000);
    let last: Value = serde_json::from_str(applied.annotation(LAST_APPLIED).unwrap()).unwrap();
    assert_eq!(
        last, labelled,
        "the annotation follows the applied configuration"
    );
    // Another manager gets no such forgiveness.
    let e = f
        .apply("someone", nginx(None, "nginx:1.17"))
        .await
        .unwrap_err();
    assert!(
        e.message.contains(r#"conflict with "kubectl""#),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn twenty_updaters_leave_ten_update_entries() {
    // TestApplyGroupsManySeparateUpdates.
    let f = Fixture::new().await;
    let cm = f
        .apply("apply_test", configmap(json!({"a": "1"})))
        .await
        .unwrap();
    for i in 0..20 {
        f.patch_as(
            &format!("updater{i}"),
            &cm,
            Subresource::Main,
            PatchType::Merge,
            json!({"data": {format!("k{i}"): "v"}}),
            false,
        )
        .await
        .unwrap();
    }
    let got = f.get(&cm).await.unwrap();
    let owners = owners(&got);
    assert_eq!(owners.len(), 11, "{owners:?}");
    assert_eq!(owners[0], owner("apply_test", "Apply", ""));
    assert!(owners.contains(&owner("ancient-changes", "Update", "")));
}

#[tokio::test]
async fn an_apply_is_refused_for_what_kubernetes_refuses() {
    let f = Fixture::new().await;
    let of = Object::from_value(configmap(json!({}))).unwrap();
    let apply = |config: Value| {
        f.patch_as(
            "kubectl",
            &of,
            Subresource::Main,
            PatchType::Apply,
            config,
            false,
        )
    };
    let mut untyped = configmap(json!({}));
    untyped.as_object_mut().unwrap().remove("apiVersion");
    untyped.as_object_mut().unwrap().remove("kind");
    let e = apply(untyped).await.unwrap_err();
    assert_eq!(
        (e.reason, e.message.as_str()),
        (Reason::BadRequest, "invalid object type: /, Kind=")
    );
    let mut wrong = configmap(json!({}));
    wrong["apiVersion"] = json!("apps/v1");
    let e = apply(wrong).await.unwrap_err();
    assert_eq!(e.message, "invalid object type: apps/v1, Kind=ConfigMap");
    let mut managed = configmap(json!({}));
    managed["metadata"]["managedFields"] = json!([]);
    let e = apply(managed).await.unwrap_err();
    assert_eq!(
        (e.reason, e.message.as_str()),
        (Reason::BadRequest, "metadata.managedFields must be nil")
    );
    let mut with_uid = configmap(json!({}));
    with_uid["metadata"]["uid"] = json!("1234");
    let e = apply(with_uid).await.unwrap_err();
    assert_eq!(e.reason, Reason::Conflict);
    assert_eq!(
        e.message,
        r#"Operation cannot be fulfilled on configmaps "cm": uid mismatch: the provided object specified uid 1234, and no existing object was found"#
    );
    let mut renamed = configmap(json!({}));
    renamed["metadata"]["name"] = json!("other");
    let e = apply(renamed).await.unwrap_err();
    assert_eq!(
        e.message,
        "the name of the object (other) does not match the name on the URL (cm)"
    );
    assert!(
        f.get(&of)
            .await
            .is_err_and(|e| e.reason == Reason::NotFound),
        "nothing was created"
    );
}

#[tokio::test]
async fn many_managers_applying_their_own_field_at_once_never_conflict_nor_lose_one() {
    let f = Fixture::new().await;
    f.apply("base", configmap(json!({}))).await.unwrap();
    let managers: Vec<String> = (0..32).map(|i| format!("writer-{i}")).collect();
    let applies = managers.iter().enumerate().map(|(i, manager)| {
        f.apply(
            manager,
            configmap(json!({ format!("k{i}"): format!("{i}") })),
        )
    });
    for result in futures::future::join_all(applies).await {
        result.unwrap();
    }
    let cm = f
        .get(&Object::from_value(configmap(json!({}))).unwrap())
        .await
        .unwrap();
    let data = cm.as_map()["data"].as_object().unwrap();
    assert_eq!(data.len(), 32);
    for i in 0..32 {
        assert_eq!(
            fields_of(&cm, &format!("writer-{i}"), "Apply"),
            json!({"f:data": {format!("f:k{i}"): {}}})
        );
    }
}

#[tokio::test]
async fn appliers_of_one_field_at_once_are_judged_in_turn_and_one_wins() {
    let f = Fixture::new().await;
    f.apply("base", configmap(json!({}))).await.unwrap();
    let managers: Vec<String> = (0..16).map(|i| format!("writer-{i}")).collect();
    let applies = managers
        .iter()
        .map(|m| f.apply(m, configmap(json!({"shared": m}))));
    let results = futures::future::join_all(applies).await;
    let won: Vec<&Object> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(
        won.len(),
        1,
        "the first takes the field; the rest conflict with it"
    );
    for e in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(e.reason, Reason::Conflict, "{}", e.message);
    }
    let winner = won[0].as_map()["data"]["shared"].as_str().unwrap();
    let cm = f
        .get(&Object::from_value(configmap(json!({}))).unwrap())
        .await
        .unwrap();
    assert_eq!(cm.as_map()["data"]["shared"], winner);
    assert_eq!(
        fields_of(&cm, winner, "Apply"),
        json!({"f:data": {"f:shared": {}}})
    );
}

#[tokio::test]
async fn a_write_too_large_with_its_managed_fields_is_stored_without_them() {
    // Kubernetes tries such a write again with no managedFields; an apply is not.
    let f = Fixture::new().await;
    let data: serde_json::Map<String, Value> = (0..100_000)
        .map(|i| (format!("k{i:06}"), json!("")))
        .collect();
    let cm = f.create(configmap(Value::Object(data))).await.unwrap();
    assert!(managed_fields(&cm).is_empty());
    assert_eq!(cm.as_map()["data"].as_object().unwrap().len(), 100_000);
    let patched = f
        .patch_as(
            "updater",
            &cm,
            Subresource::Main,
            PatchType::Merge,
            json!({"data": {"k000000": "x"}}),
            false,
        )
        .await
        .unwrap();
    assert_eq!(patched.as_map()["data"]["k000000"], "x");
    assert!(
        managed_fields(&patched).is_empty(),
        "untracked from then on"
    );
}

#[tokio::test]
async fn applies_kubernetes_does_not_take_are_refused_with_its_codes() {
    let f = Fixture::new().await;
    let d = f
        .apply("kubectl", nginx(Some(1), "nginx:1.14"))
        .await
        .unwrap();
    let mut elsewhere = nginx(Some(1), "nginx:1.14");
    elsewhere["metadata"]["namespace"] = json!("other");
    let e = f
        .patch_as(
            "kubectl",
            &d,
            Subresource::Main,
            PatchType::Apply,
            elsewhere,
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(
        (e.reason, e.message.as_str()),
        (
            Reason::BadRequest,
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    );
    let scale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
        "metadata": {"name": "nginx", "namespace": "default"}, "spec": {"replicas": -1}});
    let e = f
        .patch_as(
            "hpa",
            &d,
            Subresource::Scale,
            PatchType::Apply,
            scale,
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{}", e.message);
    let ns = f
        .get(
            &Object::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "default"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let e = f
        .patch_as(
            "kubectl",
            &ns,
            Subresource::Finalize,
            PatchType::Apply,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"},
                   "spec": {"finalizers": []}}),
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::MethodNotAllowed, "{}", e.message);
    let mut twice = nginx(Some(1), "nginx:1.14");
    twice["spec"]["template"]["spec"]["containers"] = json!([
        {"name": "nginx", "image": "a"}, {"name": "nginx", "image": "b"}]);
    let e = f.apply("kubectl", twice).await.unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);
    assert!(
        e.message.contains(
            r#".spec.template.spec.containers: duplicate entries for key [name="nginx"]"#
        ),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn an_apply_too_large_with_its_entries_is_refused_not_stored_without_them() {
    let f = Fixture::new().await;
    let cm = f
        .apply("kubectl", configmap(json!({"a": "1"})))
        .await
        .unwrap();
    let data: serde_json::Map<String, Value> = (0..100_000)
        .map(|i| (format!("k{i:06}"), json!("")))
        .collect();
    let Err(e) = f.apply("kubectl", configmap(Value::Object(data))).await else {
        panic!("the apply was stored without its entries");
    };
    assert_eq!(e.reason, Reason::RequestEntityTooLarge, "{}", e.message);
    let got = f.get(&cm).await.unwrap();
    assert_eq!(got, cm, "nothing was written");
}

/// A pod template spreading over zones with `constraints`.
fn spread(constraints: Value) -> Value {
    let mut d = nginx(Some(1), "nginx:1.14");
    d["spec"]["template"]["spec"]["topologySpreadConstraints"] = constraints;
    d
}

fn zone(when: &str, skew: u64) -> Value {
    json!({"topologyKey": "zone", "whenUnsatisfiable": when, "maxSkew": skew,
           "labelSelector": {"matchLabels": {"app": "nginx"}}})
}

#[tokio::test]
async fn two_spread_constraints_on_one_topology_key_are_two_items() {
    // Kubernetes' document keys topologySpreadConstraints by topologyKey and
    // whenUnsatisfiable: a hard and a soft constraint on one key are two items, not a
    // duplicate.
    let f = Fixture::new().await;
    let both = json!([zone("DoNotSchedule", 1), zone("ScheduleAnyway", 3)]);
    let made = f.apply("kubectl", spread(both.clone())).await.unwrap();
    assert_eq!(
        made.as_map()["spec"]["template"]["spec"]["topologySpreadConstraints"],
        both
    );
    let owned = &fields_of(&made, "kubectl", "Apply")["f:spec"]["f:template"]["f:spec"]["f:topologySpreadConstraints"];
    for key in [
        r#"k:{"topologyKey":"zone","whenUnsatisfiable":"DoNotSchedule"}"#,
        r#"k:{"topologyKey":"zone","whenUnsatisfiable":"ScheduleAnyway"}"#,
    ] {
        assert_eq!(
            owned[key],
            json!({".": {}, "f:labelSelector": {}, "f:maxSkew": {}, "f:topologyKey": {},
                   "f:whenUnsatisfiable": {}}),
            "{owned}"
        );
    }
    // Another applier's soft constraint with another skew conflicts on that item alone.
    let e = f
        .apply("other", spread(json!([zone("ScheduleAnyway", 5)])))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Conflict);
    assert_eq!(
        e.causes
            .iter()
            .map(|c| c.field.as_str())
            .collect::<Vec<_>>(),
        [
            r#".spec.template.spec.topologySpreadConstraints[topologyKey="zone",whenUnsatisfiable="ScheduleAnyway"].maxSkew"#
        ]
    );
    // Dropping the soft one from the file removes it and keeps the hard one.
    let one = f
        .apply("kubectl", spread(json!([zone("DoNotSchedule", 1)])))
        .await
        .unwrap();
    assert_eq!(
        one.as_map()["spec"]["template"]["spec"]["topologySpreadConstraints"],
        json!([zone("DoNotSchedule", 1)])
    );
}

#[tokio::test]
async fn label_selectors_of_network_policies_and_disruption_budgets_are_atomic() {
    // LabelSelector is `x-kubernetes-map-type: atomic`: owned, conflicting and replaced whole.
    let f = Fixture::new().await;
    let pdb = |labels: Value| {
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "web", "namespace": "default"},
               "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}})
    };
    let policy = |labels: Value| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": "web", "namespace": "default"},
               "spec": {"podSelector": {"matchLabels": labels},
                        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": labels}}]}]}})
    };
    let made = f.apply("one", pdb(json!({"app": "web"}))).await.unwrap();
    assert_eq!(
        fields_of(&made, "one", "Apply"),
        json!({"f:spec": {"f:minAvailable": {}, "f:selector": {}}})
    );
    let e = f
        .apply("two", pdb(json!({"tier": "front"})))
        .await
        .unwrap_err();
    // The same minAvailable is no conflict; the selector is one, whichever labels differ.
    assert_eq!(
        e.message,
        r#"Apply failed with 1 conflict: conflict with "one": .spec.selector"#
    );
    let other = Object::from_value(pdb(json!({"tier": "front"}))).unwrap();
    let forced = f
        .patch_as(
            "two",
            &other,
            Subresource::Main,
            PatchType::Apply,
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                   "metadata": {"name": "web", "namespace": "default"},
                   "spec": {"selector": {"matchLabels": {"tier": "front"}}}}),
            true,
        )
        .await
        .unwrap();
    assert_eq!(
        forced.as_map()["spec"]["selector"],
        json!({"matchLabels": {"tier": "front"}}),
        "replaced whole, not merged key by key"
    );

    let made = f.apply("one", policy(json!({"app": "web"}))).await.unwrap();
    assert_eq!(
        fields_of(&made, "one", "Apply"),
        json!({"f:spec": {"f:ingress": {}, "f:podSelector": {}}})
    );
    let e = f
        .apply("two", policy(json!({"tier": "front"})))
        .await
        .unwrap_err();
    let fields: Vec<&str> = e.causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(
        fields,
        [".spec.ingress", ".spec.podSelector"],
        "{}",
        e.message
    );
}
