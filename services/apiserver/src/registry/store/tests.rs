//! The Registry's verbs on the in-memory etcd: what a Kubernetes user relies on from create,
//! get, list, update, patch, delete, watch and the subresources, in milliseconds
//! (`tests/tests/verbs.rs` has the same promises end to end, through the transports).

use futures::StreamExt;
use keel_api::selector::LabelSelector;
use keel_api::{GroupVersionResource, Metadata, Object, Reason};
use serde_json::{Value, json};

use super::*;
use crate::registry::testing::{Fixture, configmap, deployment, far, names, namespace, rv};
use crate::registry::{DeleteOptions, PatchType, Propagation, WatchEventKind, Write};

/// `obj` (a new object's JSON) with these labels.
fn labelled(mut obj: Value, labels: Value) -> Value {
    obj["metadata"]["labels"] = labels;
    obj
}

fn data(obj: &Object) -> &Value {
    &obj.as_map()["data"]
}

/// `obj` with `field` (a top-level key) set to `value`.
fn with(obj: &Object, field: &str, value: Value) -> Object {
    let mut obj = obj.clone();
    obj.as_map_mut().insert(field.into(), value);
    obj
}

/// The causes' fields of an error.
fn fields(e: &ApiError) -> Vec<&str> {
    e.causes.iter().map(|c| c.field.as_str()).collect()
}

#[tokio::test]
async fn create_then_get_returns_the_object_with_its_system_fields_at_etcds_revision() {
    let f = Fixture::new().await;
    let created = f.create(configmap("app", json!({"a": "1"}))).await.unwrap();
    assert_eq!(rv(&created), f.revision(), "the revision of its write");
    assert!(!created.uid().is_empty());
    let meta = created.metadata().unwrap();
    let at = meta["creationTimestamp"].as_str().unwrap();
    humantime::parse_rfc3339(at).unwrap();
    assert_eq!(created.generation(), 1);
    assert_eq!(data(&created), &json!({"a": "1"}));
    assert_eq!(f.get(&created).await.unwrap(), created);
}

#[tokio::test]
async fn create_of_a_taken_name_is_already_exists_naming_the_object_and_changes_nothing() {
    let f = Fixture::new().await;
    let first = f.create(configmap("app", json!({"a": "1"}))).await.unwrap();
    let before = f.revision();
    let e = f
        .create(configmap("app", json!({"a": "2"})))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::AlreadyExists);
    assert_eq!(e.target.kind, "configmaps");
    assert_eq!(e.target.name, "app");
    assert_eq!(e.message, "configmaps \"app\" already exists");
    assert_eq!(f.revision(), before);
    assert_eq!(f.get(&first).await.unwrap(), first);
}

fn generated(base: &str) -> Value {
    let mut cm = configmap("", json!({}));
    cm["metadata"] = json!({"generateName": base, "namespace": "default"});
    cm
}

#[tokio::test]
async fn a_generate_name_gets_a_name_of_5_more_characters_and_another_if_it_is_taken() {
    let f = Fixture::new().await;
    let made = f.create(generated("web-")).await.unwrap();
    assert!(
        made.name().starts_with("web-") && made.name().len() == 9,
        "{}",
        made.name()
    );
    assert_eq!(f.get(&made).await.unwrap(), made);
    // Two names taken: the third attempt's is stored.
    f.create(configmap("web-bbbbb", json!({}))).await.unwrap();
    f.create(configmap("web-ccccc", json!({}))).await.unwrap();
    generate_name::testing::next_suffixes(&["bbbbb", "ccccc", "ddddd"]);
    let made = f.create(generated("web-")).await.unwrap();
    assert_eq!(made.name(), "web-ddddd");
}

#[tokio::test]
async fn a_generate_name_taken_8_times_is_already_exists_to_retry_after_a_second() {
    let f = Fixture::new().await;
    f.create(configmap("web-bbbbb", json!({}))).await.unwrap();
    let before = f.revision();
    generate_name::testing::next_suffixes(&["bbbbb"; 8]);
    let e = f.create(generated("web-")).await.unwrap_err();
    assert_eq!(e.reason, Reason::AlreadyExists);
    assert_eq!(
        e.message,
        "configmaps \"web-bbbbb\" already exists, the server was not able to generate a unique name for the object"
    );
    assert_eq!(e.retry_after_seconds, Some(1));
    assert_eq!(f.revision(), before);
    // Every suffix was used: 8 attempts, no more.
    assert!(generate_name::testing::SUFFIXES.with(|s| s.borrow().is_empty()));
}

#[tokio::test]
async fn fields_the_kinds_schema_lacks_are_dropped_on_create_and_update() {
    let f = Fixture::new().await;
    let mut cm = configmap("app", json!({"a": "1"}));
    cm["dta"] = json!({"b": "2"});
    cm["metadata"]["colour"] = json!("red");
    let created = f.create(cm).await.unwrap();
    assert!(created.as_map().get("dta").is_none());
    assert!(created.metadata().unwrap().get("colour").is_none());
    assert_eq!(data(&created), &json!({"a": "1"}));
    let mut changed = with(&created, "data", json!({"a": "3"}));
    changed.as_map_mut().insert("dta".into(), json!({}));
    let info = f.info("ConfigMap");
    let updated = f
        .registry
        .update(&info, changed, Subresource::Main, Write::server(), far())
        .await
        .unwrap();
    assert!(updated.as_map().get("dta").is_none());
    assert_eq!(f.get(&updated).await.unwrap(), updated);
}

#[tokio::test]
async fn create_in_a_missing_namespace_is_not_found_naming_the_namespace() {
    let f = Fixture::new().await;
    let mut cm = configmap("app", json!({}));
    cm["metadata"]["namespace"] = json!("nowhere");
    let before = f.revision();
    let e = f.create(cm).await.unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
    assert_eq!(e.target.kind, "namespaces");
    assert_eq!(e.target.name, "nowhere");
    assert_eq!(f.revision(), before);
}

#[tokio::test]
async fn create_naming_a_resource_version_is_a_bad_request() {
    let f = Fixture::new().await;
    let mut cm = configmap("app", json!({}));
    cm["metadata"]["resourceVersion"] = json!("5");
    let e = f.create(cm.clone()).await.unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);
    assert_eq!(
        e.message,
        "resourceVersion should not be set on objects to be created"
    );
    // "0" is no revision: as Kubernetes, a create may carry it.
    cm["metadata"]["resourceVersion"] = json!("0");
    let created = f.create(cm).await.unwrap();
    assert_eq!(rv(&created), f.revision());
}

#[tokio::test]
async fn an_update_at_a_stale_resource_version_is_a_conflict_and_changes_nothing() {
    let f = Fixture::new().await;
    let created = f.create(configmap("app", json!({"a": "1"}))).await.unwrap();
    let updated = f
        .update(
            &with(&created, "data", json!({"a": "2"})),
            Subresource::Main,
        )
        .await
        .unwrap();
    assert_eq!(data(&updated), &json!({"a": "2"}));
    assert_eq!(updated.uid(), created.uid());
    assert_eq!(rv(&updated), f.revision());
    assert!(rv(&updated) > rv(&created));

    let before = f.revision();
    let stale = with(&created, "data", json!({"a": "3"}));
    let e = f.update(&stale, Subresource::Main).await.unwrap_err();
    assert_eq!(e.reason, Reason::Conflict);
    assert_eq!(
        e.message,
        "Operation cannot be fulfilled on configmaps \"app\": the object has been modified; \
         please apply your changes to the latest version and try again"
    );
    assert_eq!(f.revision(), before);
    assert_eq!(f.get(&created).await.unwrap(), updated);
}

#[tokio::test]
async fn an_update_without_resource_version_replaces_a_built_in_object_unconditionally() {
    let f = Fixture::new().await;
    let created = f.create(configmap("app", json!({"a": "1"}))).await.unwrap();
    f.update(
        &with(&created, "data", json!({"a": "2"})),
        Subresource::Main,
    )
    .await
    .unwrap();
    let mut blind = with(&created, "data", json!({"a": "3"}));
    blind.set_resource_version("");
    let replaced = f.update(&blind, Subresource::Main).await.unwrap();
    assert_eq!(data(&replaced), &json!({"a": "3"}));
    assert_eq!(rv(&replaced), f.revision());
}

#[tokio::test]
async fn resource_version_0_is_no_precondition_for_an_update_or_a_patch() {
    let f = Fixture::new().await;
    let created = f.create(configmap("app", json!({"a": "1"}))).await.unwrap();
    f.patch(
        &created,
        Subresource::Main,
        PatchType::Merge,
        json!({"data": {"a": "2"}}),
    )
    .await
    .unwrap();
    // As Kubernetes' store: a resourceVersion of 0 is none, so the write is unconditional.
    let mut zero = with(&created, "data", json!({"a": "3"}));
    zero.set_resource_version("0");
    let replaced = f.update(&zero, Subresource::Main).await.unwrap();
    assert_eq!(data(&replaced), &json!({"a": "3"}));
    let pinned_to_0 = json!({"metadata": {"resourceVersion": "0"}, "data": {"b": "4"}});
    let patched = f
        .patch(&created, Subresource::Main, PatchType::Merge, pinned_to_0)
        .await
        .unwrap();
    assert_eq!(data(&patched), &json!({"a": "3", "b": "4"}));
    assert_eq!(rv(&patched), f.revision());
}

#[tokio::test]
async fn an_update_of_a_custom_object_must_name_its_resource_version() {
    let f = Fixture::new().await;
    f.create(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {
                "openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                }},
            }}],
        },
    }))
    .await
    .unwrap();
    // Served once etcd's CRDs are read, as a request for it would.
    let gvr = GroupVersionResource::new("example.com", "v1", "widgets");
    f.registry.lookup_fresh(Some(&gvr), far()).await.unwrap();
    let widget = f
        .create(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default"}, "spec": {"size": 1}}))
        .await
        .unwrap();

    let mut blind = with(&widget, "spec", json!({"size": 2}));
    blind.set_resource_version("");
    let before = f.revision();
    let e = f.update(&blind, Subresource::Main).await.unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(e.target.kind, "Widget");
    assert_eq!(fields(&e), ["metadata.resourceVersion"]);
    blind.set_resource_version("0");
    let e = f.update(&blind, Subresource::Main).await.unwrap_err();
    assert_eq!(fields(&e), ["metadata.resourceVersion"], "0 is none");
    assert_eq!(f.revision(), before);

    let updated = f
        .update(
            &with(&widget, "spec", json!({"size": 2})),
            Subresource::Main,
        )
        .await
        .unwrap();
    assert_eq!(updated.as_map()["spec"], json!({"size": 2}));
}

#[tokio::test]
async fn a_spec_change_bumps_generation_and_a_metadata_or_status_change_does_not() {
    let f = Fixture::new().await;
    let d = f.create(deployment("web")).await.unwrap();
    assert_eq!(d.generation(), 1);
    assert_eq!(d.as_map()["spec"]["replicas"], 1, "defaulted");

    let mut tiered = d.clone();
    tiered
        .metadata_mut()
        .insert("labels".into(), json!({"tier": "web"}));
    let labelled = f.update(&tiered, Subresource::Main).await.unwrap();
    assert_eq!(labelled.label("tier"), Some("web"));
    assert_eq!(labelled.generation(), 1, "metadata is not spec");

    let mut scaled = labelled.clone();
    scaled.as_map_mut()["spec"]["replicas"] = json!(3);
    // The object's own update ignores status, which is the status subresource's.
    scaled
        .as_map_mut()
        .insert("status".into(), json!({"replicas": 9}));
    let scaled = f.update(&scaled, Subresource::Main).await.unwrap();
    assert_eq!(scaled.as_map()["spec"]["replicas"], 3);
    assert_eq!(scaled.as_map()["status"], json!({}));
    assert_eq!(scaled.generation(), 2);
}

#[tokio::test]
async fn a_status_write_changes_only_status_and_leaves_generation() {
    let f = Fixture::new().await;
    let mut d = deployment("web");
    d["status"] = json!({"replicas": 5});
    let d = f.create(d).await.unwrap();
    assert_eq!(d.as_map()["status"], json!({}), "not settable on create");

    let mut s = with(&d, "status", json!({"replicas": 1, "readyReplicas": 1}));
    s.as_map_mut()["spec"]["replicas"] = json!(100);
    let written = f.update(&s, Subresource::Status).await.unwrap();
    assert_eq!(
        written.as_map()["status"],
        json!({"replicas": 1, "readyReplicas": 1})
    );
    assert_eq!(written.as_map()["spec"], d.as_map()["spec"], "spec ignored");
    assert_eq!(written.generation(), 1);

    let patched = f
        .patch(
            &d,
            Subresource::Status,
            PatchType::Merge,
            json!({"spec": {"replicas": 7}, "status": {"readyReplicas": 0}}),
        )
        .await
        .unwrap();
    assert_eq!(patched.as_map()["status"]["readyReplicas"], 0);
    assert_eq!(patched.as_map()["spec"]["replicas"], 1);
    assert_eq!(patched.generation(), 1);
    assert_eq!(f.get(&d).await.unwrap(), patched);
}

#[tokio::test]
async fn a_status_write_carrying_another_uid_is_a_conflict() {
    let f = Fixture::new().await;
    let d = f.create(deployment("web")).await.unwrap();
    // A controller's status for an earlier object of the same name.
    let mut s = with(&d, "status", json!({"replicas": 1}));
    s.set_meta_str("uid", "an-earlier-web");
    s.set_resource_version("");
    let before = f.revision();
    let e = f.update(&s, Subresource::Status).await.unwrap_err();
    assert_eq!(e.reason, Reason::Conflict);
    assert_eq!(
        e.message,
        format!(
            "Operation cannot be fulfilled on deployments.apps \"web\": Precondition failed: \
             UID in precondition: an-earlier-web, UID in object meta: {}",
            d.uid()
        )
    );
    assert_eq!(f.revision(), before);
}

#[tokio::test]
async fn a_json_patch_applies_its_operations_in_order() {
    let f = Fixture::new().await;
    let cm = f.create(configmap("app", json!({"a": "1"}))).await.unwrap();
    let patched = f
        .patch(
            &cm,
            Subresource::Main,
            PatchType::Json,
            json!([
                {"op": "add", "path": "/data/b", "value": "2"},
                {"op": "copy", "from": "/data/b", "path": "/data/c"},
                {"op": "remove", "path": "/data/a"},
            ]),
        )
        .await
        .unwrap();
    assert_eq!(data(&patched), &json!({"b": "2", "c": "2"}));
    assert_eq!(rv(&patched), f.revision());
    assert_eq!(f.get(&cm).await.unwrap(), patched);
}

#[tokio::test]
async fn a_json_patch_whose_test_fails_is_invalid_naming_the_patch_and_stores_nothing() {
    let f = Fixture::new().await;
    let cm = f.create(configmap("app", json!({"a": "1"}))).await.unwrap();
    let e = f
        .patch(
            &cm,
            Subresource::Main,
            PatchType::Json,
            json!([
                {"op": "test", "path": "/data/a", "value": "2"},
                {"op": "remove", "path": "/data/a"},
            ]),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(e.target.kind, "ConfigMap");
    assert_eq!(fields(&e), ["patch"]);
    assert_eq!(f.get(&cm).await.unwrap(), cm);
}

#[tokio::test]
async fn a_strategic_merge_patch_merges_containers_by_name_where_a_merge_patch_replaces_them() {
    let f = Fixture::new().await;
    let strategic = f.create(deployment("strategic")).await.unwrap();
    let merge = f.create(deployment("merge")).await.unwrap();
    let new_sidecar = json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "proxy:2"}]}}}});
    // Names and images: the containers also get Kubernetes' defaults.
    let containers = |o: &Object| {
        let list = o.as_map()["spec"]["template"]["spec"]["containers"].clone();
        let list = list.as_array().cloned().unwrap_or_default();
        json!(
            list.iter()
                .map(|c| json!({"name": c["name"], "image": c["image"]}))
                .collect::<Vec<_>>()
        )
    };

    let s = f
        .patch(
            &strategic,
            Subresource::Main,
            PatchType::Strategic,
            new_sidecar.clone(),
        )
        .await
        .unwrap();
    assert_eq!(
        containers(&s),
        json!([{"name": "app", "image": "app:1"}, {"name": "sidecar", "image": "proxy:2"}])
    );
    assert_eq!(s.generation(), 2);

    let m = f
        .patch(&merge, Subresource::Main, PatchType::Merge, new_sidecar)
        .await
        .unwrap();
    assert_eq!(
        containers(&m),
        json!([{"name": "sidecar", "image": "proxy:2"}])
    );

    // A directive removes one container by its name.
    let gone = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "sidecar", "$patch": "delete"},
    ]}}}});
    let s = f
        .patch(&strategic, Subresource::Main, PatchType::Strategic, gone)
        .await
        .unwrap();
    assert_eq!(containers(&s), json!([{"name": "app", "image": "app:1"}]));
    assert_eq!(f.get(&strategic).await.unwrap(), s);
}

#[tokio::test]
async fn a_patch_that_makes_the_object_invalid_is_invalid_naming_the_field_and_stores_nothing() {
    let f = Fixture::new().await;
    let d = f.create(deployment("web")).await.unwrap();
    let before = f.revision();
    let no_image = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "sidecar", "image": null},
    ]}}}});
    let e = f
        .patch(&d, Subresource::Main, PatchType::Strategic, no_image)
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(e.target.kind, "Deployment");
    assert_eq!(e.target.name, "web");
    assert_eq!(fields(&e), ["spec.template.spec.containers[1].image"]);
    assert_eq!(f.revision(), before);
    assert_eq!(f.get(&d).await.unwrap(), d);
}

#[tokio::test]
async fn a_patch_pinning_a_stale_resource_version_is_a_conflict() {
    let f = Fixture::new().await;
    let cm = f.create(configmap("app", json!({"a": "1"}))).await.unwrap();
    let moved = f
        .patch(
            &cm,
            Subresource::Main,
            PatchType::Merge,
            json!({"data": {"b": "2"}}),
        )
        .await
        .unwrap();
    let before = f.revision();
    let pinned = |at: &Object| json!({"metadata": {"resourceVersion": at.resource_version()}, "data": {"c": "3"}});
    let e = f
        .patch(&cm, Subresource::Main, PatchType::Merge, pinned(&cm))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Conflict);
    assert_eq!(f.revision(), before);
    let patched = f
        .patch(&cm, Subresource::Main, PatchType::Merge, pinned(&moved))
        .await
        .unwrap();
    assert_eq!(data(&patched), &json!({"a": "1", "b": "2", "c": "3"}));
}

#[tokio::test]
async fn concurrent_patches_of_one_object_all_apply() {
    let f = Fixture::new().await;
    let cm = f.create(configmap("app", json!({}))).await.unwrap();
    let patches = (0..20).map(|i| {
        f.patch(
            &cm,
            Subresource::Main,
            PatchType::Merge,
            json!({"data": {format!("k{i}"): "v"}}),
        )
    });
    for r in futures::future::join_all(patches).await {
        r.unwrap();
    }
    let got = f.get(&cm).await.unwrap();
    assert_eq!(data(&got).as_object().unwrap().len(), 20, "no patch lost");
}

#[tokio::test]
async fn writes_to_a_missing_object_are_not_found() {
    let f = Fixture::new().await;
    let ghost = Object::from_value(configmap("ghost", json!({}))).unwrap();
    let before = f.revision();
    let e = f.update(&ghost, Subresource::Main).await.unwrap_err();
    assert_eq!(e.reason, Reason::NotFound, "an update never creates");
    let e = f
        .patch(&ghost, Subresource::Main, PatchType::Merge, json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
    let e = f
        .delete(&ghost, DeleteOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
    assert_eq!(e.message, "configmaps \"ghost\" not found");
    assert_eq!(f.revision(), before);
}

#[tokio::test]
async fn a_delete_removes_an_object_and_answers_it_at_the_revision_of_its_removal() {
    let f = Fixture::new().await;
    let cm = f.create(configmap("app", json!({}))).await.unwrap();
    let (gone, removed) = f.delete(&cm, DeleteOptions::default()).await.unwrap();
    assert!(removed);
    assert_eq!(gone.uid(), cm.uid());
    assert_eq!(rv(&gone), f.revision());
    assert_eq!(f.get(&cm).await.unwrap_err().reason, Reason::NotFound);
}

#[tokio::test]
async fn a_delete_held_by_a_finalizer_marks_the_object_until_the_finalizer_goes() {
    let f = Fixture::new().await;
    let mut held = configmap("held", json!({}));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let cm = f.create(held).await.unwrap();

    let (marked, removed) = f.delete(&cm, DeleteOptions::default()).await.unwrap();
    assert!(!removed);
    let since = marked.deletion_timestamp().unwrap().to_string();
    humantime::parse_rfc3339(&since).unwrap();
    assert_eq!(f.get(&cm).await.unwrap(), marked, "kept, marked");

    // Deleting again changes nothing; no finalizer may be added now.
    let (again, removed) = f.delete(&cm, DeleteOptions::default()).await.unwrap();
    assert!(!removed);
    assert_eq!(again, marked);
    let more = json!({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}});
    let e = f
        .patch(&cm, Subresource::Main, PatchType::Merge, more)
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(fields(&e), ["metadata.finalizers"]);

    // Removing the last finalizer removes the object.
    f.patch(
        &cm,
        Subresource::Main,
        PatchType::Merge,
        json!({"metadata": {"finalizers": null}}),
    )
    .await
    .unwrap();
    assert_eq!(f.get(&cm).await.unwrap_err().reason, Reason::NotFound);
}

#[tokio::test]
async fn propagation_policies_are_recorded_as_finalizers_for_the_garbage_collector() {
    let f = Fixture::new().await;
    for (name, propagation, finalizer) in [
        ("fg", Propagation::Foreground, "foregroundDeletion"),
        ("orphan", Propagation::Orphan, "orphan"),
    ] {
        let cm = f.create(configmap(name, json!({}))).await.unwrap();
        let opts = DeleteOptions {
            propagation,
            ..DeleteOptions::default()
        };
        let (marked, removed) = f.delete(&cm, opts).await.unwrap();
        assert!(!removed, "{name}");
        assert_eq!(marked.finalizers(), [finalizer]);
        assert!(marked.deletion_timestamp().is_some());
        assert_eq!(f.get(&cm).await.unwrap(), marked);
    }
}

#[tokio::test]
async fn a_delete_whose_precondition_fails_is_a_conflict_and_deletes_nothing() {
    let f = Fixture::new().await;
    let cm = f.create(configmap("app", json!({}))).await.unwrap();
    let moved = f
        .patch(
            &cm,
            Subresource::Main,
            PatchType::Merge,
            json!({"data": {"a": "1"}}),
        )
        .await
        .unwrap();
    let before = f.revision();
    let wrong_uid = DeleteOptions {
        uid: "not-its-uid".into(),
        ..DeleteOptions::default()
    };
    let e = f.delete(&cm, wrong_uid).await.unwrap_err();
    assert_eq!(e.reason, Reason::Conflict);
    assert!(
        e.message
            .contains("Precondition failed: UID in precondition: not-its-uid"),
        "{}",
        e.message
    );
    let stale = DeleteOptions {
        resource_version: cm.resource_version().into(),
        ..DeleteOptions::default()
    };
    let e = f.delete(&cm, stale).await.unwrap_err();
    assert_eq!(e.reason, Reason::Conflict);
    assert!(
        e.message.contains("Precondition failed: ResourceVersion"),
        "{}",
        e.message
    );
    assert_eq!(f.revision(), before);
    assert_eq!(f.get(&cm).await.unwrap(), moved);

    let both = DeleteOptions {
        uid: cm.uid().into(),
        resource_version: moved.resource_version().into(),
        ..DeleteOptions::default()
    };
    let (_, removed) = f.delete(&cm, both).await.unwrap();
    assert!(removed);
}

#[tokio::test]
async fn deleting_a_namespace_makes_it_terminating_until_it_is_finalized() {
    let f = Fixture::new().await;
    let ns = f.create(namespace("team")).await.unwrap();
    assert_eq!(ns.as_map()["status"], json!({"phase": "Active"}));
    assert_eq!(ns.as_map()["spec"]["finalizers"], json!(["kubernetes"]));
    let mut cm = configmap("app", json!({}));
    cm["metadata"]["namespace"] = json!("team");
    f.create(cm.clone()).await.unwrap();

    let (marked, removed) = f.delete(&ns, DeleteOptions::default()).await.unwrap();
    assert!(!removed, "held by the namespace controller's finalizer");
    assert_eq!(marked.as_map()["status"]["phase"], "Terminating");
    assert!(marked.deletion_timestamp().is_some());
    assert_eq!(f.get(&ns).await.unwrap(), marked);

    // Nothing new in a terminating namespace; a second delete waits for the first.
    cm["metadata"]["name"] = json!("late");
    let e = f.create(cm).await.unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden);
    assert_eq!(fields(&e), ["metadata.namespace"]);
    let e = f.delete(&ns, DeleteOptions::default()).await.unwrap_err();
    assert_eq!(e.reason, Reason::Conflict);

    // The namespace controller's finalize, once the content is gone, removes it.
    let mut done = marked.clone();
    done.as_map_mut()["spec"]["finalizers"] = json!([]);
    f.update(&done, Subresource::Finalize).await.unwrap();
    assert_eq!(f.get(&ns).await.unwrap_err().reason, Reason::NotFound);
}

#[tokio::test]
async fn the_default_namespace_cannot_be_deleted() {
    let f = Fixture::new().await;
    let default = Object::from_value(namespace("default")).unwrap();
    let before = f.revision();
    let e = f
        .delete(&default, DeleteOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Forbidden);
    assert_eq!(
        e.message,
        "namespaces \"default\" is forbidden: this namespace may not be deleted"
    );
    assert_eq!(f.revision(), before);
}

/// Creates ConfigMaps `cm-0` to `cm-{n-1}` in `default`, labelled with their `parity` and `n`.
async fn numbered(f: &Fixture, n: usize) {
    for i in 0..n {
        let parity = if i % 2 == 0 { "even" } else { "odd" };
        let cm = labelled(
            configmap(&format!("cm-{i}"), json!({})),
            json!({"parity": parity, "n": i.to_string()}),
        );
        f.create(cm).await.unwrap();
    }
}

fn selecting(labels: &str) -> ListOptions {
    ListOptions {
        filter: Filter {
            labels: LabelSelector::parse(labels).unwrap(),
            ..Filter::default()
        },
        ..ListOptions::default()
    }
}

#[tokio::test]
async fn a_list_selects_by_labels() {
    let f = Fixture::new().await;
    numbered(&f, 6).await;
    for (selector, want) in [
        ("parity=even", &["cm-0", "cm-2", "cm-4"][..]),
        ("parity=odd,n!=1", &["cm-3", "cm-5"]),
        ("n in (1,4)", &["cm-1", "cm-4"]),
        ("parity", &["cm-0", "cm-1", "cm-2", "cm-3", "cm-4", "cm-5"]),
        ("!parity", &[]),
    ] {
        let list = f.list("ConfigMap", selecting(selector)).await.unwrap();
        assert_eq!(names(&list), want, "{selector}");
        assert_eq!(list.revision, f.revision(), "{selector}");
    }
}

#[tokio::test]
async fn a_list_in_pages_reads_every_page_at_the_first_pages_revision() {
    let f = Fixture::new().await;
    numbered(&f, 5).await;
    let page = |token: &str| ListOptions {
        limit: 2,
        continue_token: token.into(),
        ..ListOptions::default()
    };
    let first = f.list("ConfigMap", page("")).await.unwrap();
    assert_eq!(names(&first), ["cm-0", "cm-1"]);
    assert_eq!(first.remaining, 3);
    // Changes after the first page are not seen by the next ones.
    f.create(configmap("cm-9", json!({}))).await.unwrap();
    let cm4 = Object::from_value(configmap("cm-4", json!({}))).unwrap();
    f.delete(&cm4, DeleteOptions::default()).await.unwrap();

    let mut all = names(&first);
    let mut token = first.continue_token.clone();
    while !token.is_empty() {
        let next = f.list("ConfigMap", page(&token)).await.unwrap();
        assert_eq!(next.revision, first.revision);
        all.extend(names(&next));
        token = next.continue_token;
    }
    assert_eq!(all, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);

    // A filtered page still fills up to its limit.
    let odd = ListOptions {
        limit: 2,
        ..selecting("parity=odd")
    };
    let odd = f.list("ConfigMap", odd).await.unwrap();
    assert_eq!(names(&odd), ["cm-1", "cm-3"]);
}

#[tokio::test]
async fn a_list_at_an_exact_resource_version_sees_the_objects_as_they_were() {
    let f = Fixture::new().await;
    let a = f.create(configmap("a", json!({"v": "1"}))).await.unwrap();
    f.patch(
        &a,
        Subresource::Main,
        PatchType::Merge,
        json!({"data": {"v": "2"}}),
    )
    .await
    .unwrap();
    f.create(configmap("b", json!({}))).await.unwrap();
    let at = |rv: i64, exact: &str| ListOptions {
        resource_version: rv.to_string(),
        resource_version_match: exact.into(),
        ..ListOptions::default()
    };

    let then = f.list("ConfigMap", at(rv(&a), "Exact")).await.unwrap();
    assert_eq!(then.revision, rv(&a));
    assert_eq!(names(&then), ["a"]);
    let then_a = Object::from_slice(&then.items[0]).unwrap();
    assert_eq!(then_a, a);

    // Without Exact, a resourceVersion is "not older than": the newest state.
    let now = f.list("ConfigMap", at(rv(&a), "")).await.unwrap();
    assert_eq!(names(&now), ["a", "b"]);
    assert_eq!(now.revision, f.revision());

    let e = f.list("ConfigMap", at(0, "Exact")).await.unwrap_err();
    assert_eq!(e.reason, Reason::BadRequest);
}

#[tokio::test(start_paused = true)]
async fn reads_at_a_resource_version_etcd_has_not_reached_time_out_as_too_large() {
    let f = Fixture::new().await;
    let cm = f.create(configmap("app", json!({}))).await.unwrap();
    let future = f.revision() + 10;
    let info = f.info("ConfigMap");
    let e = f
        .registry
        .get(&info, "default", "app", &future.to_string(), false, far())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Timeout);
    assert_eq!(
        e.message,
        format!(
            "Timeout: Too large resource version: {future}, current: {}",
            rv(&cm)
        )
    );
    let list = ListOptions {
        resource_version: future.to_string(),
        ..ListOptions::default()
    };
    let e = f.list("ConfigMap", list).await.unwrap_err();
    assert_eq!(e.reason, Reason::Timeout);
    assert_eq!(e.causes[0].reason, "ResourceVersionTooLarge");
}

#[tokio::test]
async fn a_dry_run_answers_as_the_write_would_and_writes_nothing() {
    let f = Fixture::new().await;
    let cm = f.create(configmap("app", json!({"a": "1"}))).await.unwrap();
    let info = f.info("ConfigMap");
    let before = f.revision();

    let new = Object::from_value(configmap("new", json!({}))).unwrap();
    let made = f
        .registry
        .create(&info, new.clone(), Write::server().dry_run(), far())
        .await
        .unwrap();
    assert!(!made.uid().is_empty());
    assert_eq!(made.generation(), 1);
    assert_eq!(
        made.resource_version(),
        "",
        "no revision: it was not stored"
    );
    let taken = Object::from_value(configmap("app", json!({}))).unwrap();
    let e = f
        .registry
        .create(&info, taken, Write::server().dry_run(), far())
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::AlreadyExists, "a dry run checks the name");

    let replaced = f
        .registry
        .update(
            &info,
            with(&cm, "data", json!({"a": "2"})),
            Subresource::Main,
            Write::server().dry_run(),
            far(),
        )
        .await
        .unwrap();
    assert_eq!(data(&replaced), &json!({"a": "2"}));

    let body = serde_json::to_vec(&json!({"data": {"b": "2"}})).unwrap();
    let patched = f
        .registry
        .patch(
            &info,
            "default",
            "app",
            Subresource::Main,
            PatchType::Merge,
            &body,
            Write::server().dry_run(),
            far(),
        )
        .await
        .unwrap();
    assert_eq!(data(&patched), &json!({"a": "1", "b": "2"}));

    let dry = DeleteOptions {
        dry_run: true,
        ..DeleteOptions::default()
    };
    let (_, removed) = f.delete(&cm, dry).await.unwrap();
    assert!(removed, "it would be removed");

    assert_eq!(f.revision(), before, "nothing written");
    assert_eq!(f.get(&cm).await.unwrap(), cm);
    assert_eq!(f.get(&new).await.unwrap_err().reason, Reason::NotFound);
}

#[tokio::test]
async fn the_scale_subresource_reads_and_writes_spec_replicas() {
    let f = Fixture::new().await;
    let d = f.create(deployment("web")).await.unwrap();
    let scale = keel_api::scale::view(&d);
    assert_eq!(scale["spec"]["replicas"], 1);
    assert_eq!(scale["status"]["selector"], "app=web");

    // Only the Scale's replicas reach the Deployment.
    let scaled = f
        .patch(
            &d,
            Subresource::Scale,
            PatchType::Merge,
            json!({"metadata": {"labels": {"x": "y"}}, "spec": {"replicas": 4}}),
        )
        .await
        .unwrap();
    assert_eq!(scaled.as_map()["spec"]["replicas"], 4);
    assert_eq!(scaled.label("x"), None);
    assert_eq!(scaled.generation(), 2);
    let got = f.get(&d).await.unwrap();
    assert_eq!(keel_api::scale::view(&got)["spec"]["replicas"], 4);

    let scaled = f
        .patch(
            &d,
            Subresource::Scale,
            PatchType::Json,
            json!([{"op": "replace", "path": "/spec/replicas", "value": 0}]),
        )
        .await
        .unwrap();
    assert_eq!(scaled.as_map()["spec"]["replicas"], 0);

    let before = f.revision();
    let e = f
        .patch(
            &d,
            Subresource::Scale,
            PatchType::Merge,
            json!({"spec": {"replicas": -1}}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(e.target.kind, "Scale");
    assert_eq!(fields(&e), ["spec.replicas"]);
    assert_eq!(f.revision(), before);
}

/// The next event of a watch: its kind, the object's name, `data.v` and resourceVersion.
async fn next(w: &mut WatchStream) -> (WatchEventKind, String, String, i64) {
    let ev = tokio::time::timeout_at(far(), w.next())
        .await
        .expect("an event in time")
        .expect("the watch goes on")
        .unwrap();
    let o = Object::from_slice(&ev.object).unwrap();
    let v = o.as_map()["data"]["v"].as_str().unwrap_or_default();
    (ev.kind, o.name().to_string(), v.to_string(), rv(&o))
}

#[tokio::test]
async fn a_watch_from_a_resource_version_sees_the_later_changes_in_order() {
    let f = Fixture::new().await;
    let a = f.create(configmap("a", json!({"v": "1"}))).await.unwrap();
    let patch = |v: &str| json!({"data": {"v": v}});
    let a2 = f
        .patch(&a, Subresource::Main, PatchType::Merge, patch("2"))
        .await
        .unwrap();
    let b = f.create(configmap("b", json!({"v": "1"}))).await.unwrap();
    let (gone, _) = f.delete(&a, DeleteOptions::default()).await.unwrap();

    let info = f.info("ConfigMap");
    let mut w = f
        .registry
        .watch(&info, Filter::default(), a.resource_version(), false, false)
        .await
        .unwrap();
    use WatchEventKind::{Added, Deleted, Modified};
    assert_eq!(
        next(&mut w).await,
        (Modified, "a".into(), "2".into(), rv(&a2))
    );
    assert_eq!(next(&mut w).await, (Added, "b".into(), "1".into(), rv(&b)));
    assert_eq!(
        next(&mut w).await,
        (Deleted, "a".into(), "2".into(), rv(&gone))
    );
    // And what comes after.
    let b2 = f
        .patch(&b, Subresource::Main, PatchType::Merge, patch("2"))
        .await
        .unwrap();
    assert_eq!(
        next(&mut w).await,
        (Modified, "b".into(), "2".into(), rv(&b2))
    );
}

#[tokio::test]
async fn a_watch_without_a_resource_version_starts_with_the_current_objects() {
    let f = Fixture::new().await;
    let a = f.create(configmap("a", json!({"v": "1"}))).await.unwrap();
    let b = f.create(configmap("b", json!({"v": "1"}))).await.unwrap();
    f.wait_for_cache("ConfigMap", rv(&b)).await;
    let info = f.info("ConfigMap");
    let mut w = f
        .registry
        .watch(&info, Filter::default(), "", false, false)
        .await
        .unwrap();
    use WatchEventKind::{Added, Modified};
    let mut first = vec![next(&mut w).await, next(&mut w).await];
    first.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(
        first,
        [
            (Added, "a".into(), "1".into(), rv(&a)),
            (Added, "b".into(), "1".into(), rv(&b))
        ]
    );
    let a2 = f
        .patch(
            &a,
            Subresource::Main,
            PatchType::Merge,
            json!({"data": {"v": "2"}}),
        )
        .await
        .unwrap();
    assert_eq!(
        next(&mut w).await,
        (Modified, "a".into(), "2".into(), rv(&a2))
    );
}

#[tokio::test]
async fn a_watch_with_a_label_selector_sees_objects_enter_and_leave_it() {
    let f = Fixture::new().await;
    let a = f
        .create(labelled(
            configmap("a", json!({"v": "1"})),
            json!({"app": "web"}),
        ))
        .await
        .unwrap();
    let info = f.info("ConfigMap");
    let filter = Filter {
        labels: LabelSelector::parse("app=web").unwrap(),
        ..Filter::default()
    };
    let mut w = f
        .registry
        .watch(&info, filter, a.resource_version(), false, false)
        .await
        .unwrap();
    let relabel = |app: &str| json!({"metadata": {"labels": {"app": app}}, "data": {"v": app}});
    let out = f
        .patch(&a, Subresource::Main, PatchType::Merge, relabel("db"))
        .await
        .unwrap();
    let back = f
        .patch(&a, Subresource::Main, PatchType::Merge, relabel("web"))
        .await
        .unwrap();
    use WatchEventKind::{Added, Deleted};
    // As Kubernetes: leaving is a deletion of the state it left from, at the revision it left.
    assert_eq!(
        next(&mut w).await,
        (Deleted, "a".into(), "1".into(), rv(&out))
    );
    assert_eq!(
        next(&mut w).await,
        (Added, "a".into(), "web".into(), rv(&back))
    );
}

#[tokio::test]
async fn an_update_through_a_served_version_is_defaulted_and_compared_in_the_stored_one() {
    let f = Fixture::new().await;
    f.create(
        json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5}}),
    )
    .await
    .unwrap();
    let v1 = f
        .registry
        .resources()
        .into_iter()
        .find(|r| r.gvr.resource == "horizontalpodautoscalers" && r.gvr.version == "v1")
        .unwrap();
    let patch = |body: Value| {
        let (registry, v1) = (f.registry.clone(), v1.clone());
        async move {
            let body = serde_json::to_vec(&body).unwrap();
            registry
                .patch(
                    &v1,
                    "default",
                    "web",
                    Subresource::Main,
                    PatchType::Merge,
                    &body,
                    Write::server(),
                    far(),
                )
                .await
                .unwrap()
        }
    };
    // A label through v1: the spec is the same, the generation too.
    let labelled = patch(json!({"metadata": {"labels": {"team": "a"}}})).await;
    assert_eq!(labelled.generation(), 1);
    assert_eq!(
        labelled.as_map()["spec"]["targetCPUUtilizationPercentage"],
        80
    );
    // A spec change through v1 is one.
    let raised = patch(json!({"spec": {"maxReplicas": 6}})).await;
    assert_eq!(raised.generation(), 2);
}

/// An RBAC write's writer is judged by the policy etcd holds when the write comes, not by
/// what this replica's caches have seen (here none: the fixture follows no policy), as
/// Kubernetes' storage judges it through its registries: a grant counts at once, and a
/// revoked one no longer does.
#[tokio::test]
async fn an_rbac_writer_is_judged_by_the_policy_etcd_holds_now() {
    let f = Fixture::new().await;
    let rbac = |kind: &str, name: &str, body: Value| {
        let mut v = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
            "metadata": {"name": name}});
        v.as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        v
    };
    let binding = |name: &str, role: &str, user: &str| {
        rbac(
            "ClusterRoleBinding",
            name,
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                   "subjects": [{"kind": "User", "name": user}]}),
        )
    };
    f.create(rbac(
        "ClusterRole",
        "secrets",
        json!({"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
    ))
    .await
    .unwrap();
    let alices = f
        .create(binding("alice-secrets", "secrets", "alice"))
        .await
        .unwrap();
    let alice = crate::auth::User {
        name: "alice".into(),
        groups: vec!["system:authenticated".into()],
        uid: String::new(),
    };
    let info = f.info("ClusterRoleBinding");
    let by_alice = |name: &str| {
        let obj = Object::from_value(binding(name, "secrets", "bob")).unwrap();
        let (registry, info, alice) = (f.registry.clone(), info.clone(), alice.clone());
        async move {
            registry
                .create(&info, obj, Write::by(Some(&alice), "alice", false), far())
                .await
        }
    };
    by_alice("bob-1")
        .await
        .expect("alice holds what she grants");
    f.delete(&alices, DeleteOptions::default()).await.unwrap();
    let e = by_alice("bob-2").await.expect_err("no longer held");
    assert_eq!(e.reason, Reason::Forbidden, "{e:?}");
}
