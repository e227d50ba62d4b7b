//! Custom resources against a real etcd and the real API server: a CRD is served by every
//! replica within a second, custom objects are pruned and validated against its schema, get a
//! status subresource and generation, strategic merge patches by the schema's list-map keys,
//! several versions over one storage version, and deleting the CRD deletes its objects and
//! stops serving it.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use keel_client::{Client, DeleteParams, GroupVersionResource, ListParams, PatchType, Reason, gvr};
use keel_tests::{ApiServer, Etcd, eventually};
use serde_json::{Value, json};
use tokio::time::Instant;

fn crds() -> GroupVersionResource {
    gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions")
}

fn networks() -> GroupVersionResource {
    gvr("samplecrd.k8s.io", "v1", "networks")
}

/// The seeds' Network as a v1 CRD with a schema: `spec.cidr` required (an IPv4 CIDR),
/// `spec.gateway`, `spec.routes` a list keyed by `destination`; status free-form.
fn network_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "networks.samplecrd.k8s.io"},
        "spec": {
            "group": "samplecrd.k8s.io",
            "scope": "Namespaced",
            "names": {"kind": "Network", "plural": "networks", "singular": "network", "shortNames": ["net"]},
            "versions": [
                {
                    "name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": schema()}
                },
                {
                    "name": "v2", "served": true, "storage": false,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": schema()}
                }
            ]
        }
    })
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["cidr"],
                "properties": {
                    "cidr": {"type": "string", "pattern": "^([0-9]{1,3}\\.){3}[0-9]{1,3}/[0-9]{1,2}$"},
                    "gateway": {"type": "string"},
                    "mtu": {"type": "integer", "minimum": 576, "maximum": 9000},
                    "routes": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["destination"],
                        "items": {"type": "object", "properties": {
                            "destination": {"type": "string"}, "via": {"type": "string"}}}
                    }
                }
            },
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }
    })
}

fn network(name: &str, cidr: &str) -> Value {
    json!({
        "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
        "metadata": {"name": name},
        "spec": {"cidr": cidr, "gateway": "192.168.0.1"}
    })
}

async fn two_servers() -> (Etcd, ApiServer, ApiServer, Client, Client) {
    let etcd = Etcd::start().await;
    let a = ApiServer::start(&etcd).await;
    let b = ApiServer::start(&etcd).await;
    let (ca, cb) = (a.client().await, b.client().await);
    (etcd, a, b, ca, cb)
}

/// Creates the CRD through `c` and waits until `other`, then `c`, serve Networks; returns how
/// long the other replica took.
async fn establish(c: &Client, other: &Client) -> Duration {
    let created = Instant::now();
    c.create(&crds(), "", &network_crd()).await.unwrap();
    serving(other).await;
    let took = created.elapsed();
    serving(c).await;
    took
}

async fn serving(c: &Client) {
    eventually(
        Duration::from_secs(5),
        "a replica to serve networks",
        || async {
            match c.list(&networks(), "default", &ListParams::default()).await {
                Ok(_) => Some(()),
                Err(e) => {
                    assert_eq!(e.reason, Reason::NotFound, "{e}");
                    None
                }
            }
        },
    )
    .await;
}

/// Waits until the Network CRD, deleted, is gone (its cleanup done).
async fn crd_gone(c: &Client) {
    eventually(Duration::from_secs(20), "the CRD to be gone", || async {
        let e = c
            .get(&crds(), "", "networks.samplecrd.k8s.io")
            .await
            .err()?;
        (e.reason == Reason::NotFound).then_some(())
    })
    .await;
}

fn fields(e: &keel_client::ApiError) -> Vec<String> {
    e.causes.iter().map(|c| c.field.clone()).collect()
}

#[tokio::test]
async fn a_crd_is_served_by_every_replica_within_a_second() {
    let (_etcd, _a, _b, ca, cb) = two_servers().await;
    let e = cb
        .get(&networks(), "default", "example-network")
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::NotFound);
    let took = establish(&ca, &cb).await;
    eprintln!("served by the other replica {took:?} after the CRD's creation");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    let created = cb
        .create(
            &networks(),
            "default",
            &network("example-network", "192.168.0.0/16"),
        )
        .await
        .unwrap();
    assert_eq!(created["spec"]["cidr"], "192.168.0.0/16");
    // The CRD says it is established, holds its cleanup finalizer; discovery lists Networks.
    let crd = ca
        .get(&crds(), "", "networks.samplecrd.k8s.io")
        .await
        .unwrap();
    assert!(
        crd["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );
    assert_eq!(
        crd["metadata"]["finalizers"],
        json!(["customresourcecleanup.apiextensions.k8s.io"])
    );
    let found = cb.discovery().await.unwrap();
    let net = found
        .iter()
        .find(|r| r.group == "samplecrd.k8s.io" && r.version == "v1")
        .expect("networks in discovery");
    assert_eq!(net.resource, "networks");
    assert_eq!(net.kind, "Network");
    assert_eq!(net.short_names, ["net"]);
    assert!(net.namespaced);
    assert!(net.subresources.contains(&"status".to_string()));
}

#[tokio::test]
async fn a_bad_crd_is_refused_naming_its_fields() {
    let (_etcd, _a, _b, ca, _cb) = two_servers().await;
    let mut bad = network_crd();
    bad["metadata"]["name"] = json!("nets.samplecrd.k8s.io");
    bad["spec"]["scope"] = json!("Everywhere");
    bad["spec"]["versions"][1]["storage"] = json!(true);
    let e = ca.create(&crds(), "", &bad).await.unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    let f = fields(&e);
    for want in ["metadata.name", "spec.scope", "spec.versions"] {
        assert!(f.iter().any(|x| x == want), "{want} not in {f:?}");
    }
    let mut bad = network_crd();
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["type"] =
        json!("hashmap");
    let e = ca.create(&crds(), "", &bad).await.unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    assert!(
        fields(&e)
            .iter()
            .any(|f| f.starts_with("spec.versions[0].schema.openAPIV3Schema")),
        "{:?}",
        fields(&e)
    );
}

#[tokio::test]
async fn custom_objects_are_validated_against_the_schema_and_pruned() {
    let (_etcd, _a, _b, ca, cb) = two_servers().await;
    establish(&ca, &cb).await;
    // Missing cidr, wrong type, out of bounds: every field named at once.
    let bad = json!({
        "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
        "metadata": {"name": "bad"},
        "spec": {"gateway": 7, "mtu": 100}
    });
    let e = ca.create(&networks(), "default", &bad).await.unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    let f = fields(&e);
    for want in ["spec.cidr", "spec.gateway", "spec.mtu"] {
        assert!(f.iter().any(|x| x == want), "{want} not in {f:?}");
    }
    assert!(
        e.message
            .starts_with("Network.samplecrd.k8s.io \"bad\" is invalid: "),
        "{}",
        e.message
    );
    let e = ca
        .create(&networks(), "default", &network("bad", "not-a-cidr"))
        .await
        .unwrap_err();
    assert_eq!(fields(&e), ["spec.cidr"]);
    // Unknown fields are dropped, at the root and in spec.
    let mut n = network("pruned", "10.0.0.0/8");
    n["spec"]["color"] = json!("blue");
    n["extra"] = json!({"x": 1});
    let created = ca.create(&networks(), "default", &n).await.unwrap();
    assert!(created.get("extra").is_none(), "{created}");
    assert!(created["spec"].get("color").is_none(), "{created}");
    let read = cb.get(&networks(), "default", "pruned").await.unwrap();
    assert!(read["spec"].get("color").is_none());
    // A patch is validated too.
    let e = ca
        .patch(
            &networks(),
            "default",
            "pruned",
            PatchType::Merge,
            &json!({"spec": {"mtu": 10000}}),
        )
        .await
        .unwrap_err();
    assert_eq!(fields(&e), ["spec.mtu"]);
}

#[tokio::test]
async fn status_generation_updates_and_strategic_patches_of_custom_objects() {
    let (_etcd, _a, _b, ca, cb) = two_servers().await;
    establish(&ca, &cb).await;
    let mut n = network("net", "10.1.0.0/16");
    n["spec"]["routes"] = json!([{"destination": "0.0.0.0/0", "via": "10.1.0.1"}]);
    let created = ca.create(&networks(), "default", &n).await.unwrap();
    assert_eq!(created["metadata"]["generation"], 1);
    // The status subresource: status changes, generation does not; the main resource ignores
    // status.
    let mut with_status = created.clone();
    with_status["status"] = json!({"phase": "Ready", "gateway": "10.1.0.1"});
    let after = ca
        .update_status(&networks(), "default", &with_status)
        .await
        .unwrap();
    assert_eq!(after["status"]["phase"], "Ready");
    assert_eq!(after["metadata"]["generation"], 1);
    let patched = ca
        .patch(
            &networks(),
            "default",
            "net",
            PatchType::Merge,
            &json!({"spec": {"mtu": 1500}, "status": {"phase": "Lost"}}),
        )
        .await
        .unwrap();
    assert_eq!(patched["metadata"]["generation"], 2);
    assert_eq!(patched["status"]["phase"], "Ready");
    // An Update of a custom object needs a resourceVersion.
    let mut no_rv = patched.clone();
    no_rv["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let e = ca.update(&networks(), "default", &no_rv).await.unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    assert_eq!(fields(&e), ["metadata.resourceVersion"]);
    // Strategic merge patch merges routes by destination, as the schema's list-map keys say.
    let merged = ca
        .patch(
            &networks(),
            "default",
            "net",
            PatchType::Strategic,
            &json!({"spec": {"routes": [{"destination": "10.9.0.0/16", "via": "10.1.0.9"}]}}),
        )
        .await
        .unwrap();
    let destinations: Vec<&str> = merged["spec"]["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["destination"].as_str().unwrap())
        .collect();
    // Merged, not replaced: as Kubernetes orders a merge without $setElementOrder, the patch's
    // items come first, then those only the object had.
    assert_eq!(destinations, ["10.9.0.0/16", "0.0.0.0/0"]);
}

#[tokio::test]
async fn several_versions_share_one_storage_version() {
    let (_etcd, _a, _b, ca, cb) = two_servers().await;
    establish(&ca, &cb).await;
    let v2 = gvr("samplecrd.k8s.io", "v2", "networks");
    let mut n = network("both", "10.2.0.0/16");
    n["apiVersion"] = json!("samplecrd.k8s.io/v2");
    let created = ca.create(&v2, "default", &n).await.unwrap();
    assert_eq!(created["apiVersion"], "samplecrd.k8s.io/v2");
    let as_v1 = cb.get(&networks(), "default", "both").await.unwrap();
    assert_eq!(as_v1["apiVersion"], "samplecrd.k8s.io/v1");
    assert_eq!(as_v1["spec"]["cidr"], "10.2.0.0/16");
    let listed = cb
        .list(&v2, "default", &ListParams::default())
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0]["apiVersion"], "samplecrd.k8s.io/v2");
    let patched = cb
        .patch(
            &v2,
            "default",
            "both",
            PatchType::Merge,
            &json!({"spec": {"gateway": "10.2.0.254"}}),
        )
        .await
        .unwrap();
    assert_eq!(patched["apiVersion"], "samplecrd.k8s.io/v2");
    let as_v1 = ca.get(&networks(), "default", "both").await.unwrap();
    assert_eq!(as_v1["spec"]["gateway"], "10.2.0.254");
}

#[tokio::test]
async fn deleting_the_crd_deletes_its_objects_and_stops_serving_it() {
    let (_etcd, _a, _b, ca, cb) = two_servers().await;
    establish(&ca, &cb).await;
    for i in 0..5 {
        ca.create(
            &networks(),
            "default",
            &network(&format!("n{i}"), "10.3.0.0/16"),
        )
        .await
        .unwrap();
    }
    ca.delete(
        &crds(),
        "",
        "networks.samplecrd.k8s.io",
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    crd_gone(&ca).await;
    for c in [&ca, &cb] {
        eventually(
            Duration::from_secs(5),
            "networks no longer served",
            || async {
                let e = c
                    .list(&networks(), "default", &ListParams::default())
                    .await
                    .err()?;
                (e.reason == Reason::NotFound
                    && e.message.contains("could not find the requested resource"))
                .then_some(())
            },
        )
        .await;
    }
    // Its objects went with it: a new CRD of the same name starts empty.
    establish(&ca, &cb).await;
    let left = cb
        .list(&networks(), "default", &ListParams::default())
        .await
        .unwrap();
    assert!(left.items.is_empty(), "{:?}", left.items);
}

#[tokio::test]
async fn the_seeds_v1beta1_crd_is_served_and_read_back_in_its_own_form() {
    let (_etcd, _a, _b, ca, cb) = two_servers().await;
    let v1beta1 = gvr(
        "apiextensions.k8s.io",
        "v1beta1",
        "customresourcedefinitions",
    );
    let text = std::fs::read_to_string(format!(
        "{}/../deploy/examples/network-crd-v1beta1.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let seeds: Value = serde_saphyr::from_str(&text).unwrap();
    let created = ca.create(&v1beta1, "", &seeds).await.unwrap();
    assert_eq!(created["apiVersion"], "apiextensions.k8s.io/v1beta1");
    assert_eq!(created["spec"]["version"], "v1");
    // Stored and served as v1 too.
    let as_v1 = cb
        .get(&crds(), "", "networks.samplecrd.k8s.io")
        .await
        .unwrap();
    assert_eq!(as_v1["spec"]["versions"][0]["name"], "v1", "{as_v1}");
    assert!(as_v1["spec"].get("version").is_none());
    serving(&ca).await;
    serving(&cb).await;
    // Without a schema, any spec goes and nothing is pruned.
    let mut n = network("example-network", "192.168.0.0/16");
    n["spec"]["anything"] = json!({"goes": true});
    let created = cb.create(&networks(), "default", &n).await.unwrap();
    assert_eq!(created["spec"]["anything"]["goes"], true);
    // A merge patch at v1beta1 (as keelctl apply sends) keeps the v1beta1 form.
    let patched = ca
        .patch(
            &v1beta1,
            "",
            "networks.samplecrd.k8s.io",
            PatchType::Merge,
            &json!({"spec": {"names": {"shortNames": ["net"]}}}),
        )
        .await
        .unwrap();
    assert_eq!(patched["spec"]["version"], "v1");
    assert_eq!(patched["spec"]["names"]["shortNames"], json!(["net"]));
    // Deleted through v1beta1, as it was created: marked (at v1, as stored), cleaned up, gone.
    ca.delete(
        &v1beta1,
        "",
        "networks.samplecrd.k8s.io",
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    crd_gone(&cb).await;
}

/// A CRD of a built-in group and resource, stored before such CRDs were refused (here: written
/// to etcd directly), is never served, may still be deleted, and its deletion leaves the
/// built-in objects it named alone: they share its keys.
#[tokio::test]
async fn a_stored_crd_of_a_built_in_resource_is_deleted_without_taking_the_built_in_objects() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let bindings = gvr("rbac.authorization.k8s.io", "v1", "clusterrolebindings");
    let before = c
        .list(&bindings, "", &ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    assert!(before > 0, "the bootstrap bindings");
    let name = "clusterrolebindings.rbac.authorization.k8s.io";
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "uid": "5f0c3c4e-0000-4000-8000-000000000001",
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "finalizers": ["customresourcecleanup.apiextensions.k8s.io"]},
        "spec": {"group": "rbac.authorization.k8s.io", "scope": "Cluster",
                 "names": {"kind": "ClusterRoleBinding", "plural": "clusterrolebindings",
                           "singular": "clusterrolebinding", "listKind": "ClusterRoleBindingList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                   "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let mut kv = etcd.client().await;
    kv.put(
        format!("/registry/apiextensions.k8s.io/customresourcedefinitions/{name}"),
        serde_json::to_vec(&crd).unwrap(),
        None,
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(5), "the CRD read back", || async {
        c.get(&crds(), "", name).await.ok()
    })
    .await;
    c.delete(&crds(), "", name, &DeleteParams::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the CRD to be gone", || async {
        let e = c.get(&crds(), "", name).await.err()?;
        (e.reason == Reason::NotFound).then_some(())
    })
    .await;
    let after = c
        .list(&bindings, "", &ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(
        after, before,
        "no built-in binding was deleted with the CRD"
    );
}

/// Kubernetes' structural defaulting, as operators rely on it (kube-rs's `#[serde(default)]`,
/// controller-gen's `+kubebuilder:default`): a missing field gets its schema's default at
/// every depth; a `null` where the schema allows none is defaulted, or dropped when there is
/// no default; a nullable field's `null` stays. A CRD whose default does not validate is
/// refused.
#[tokio::test]
async fn custom_objects_get_their_schemas_defaults() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.ex.com"},
        "spec": {"group": "ex.com", "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                     "spec": {"type": "object", "properties": {
                       "size": {"type": "string", "default": "medium"},
                       "ports": {"type": "array", "items": {"type": "integer"}},
                       "note": {"type": "string", "nullable": true},
                       "tls": {"type": "object", "default": {}, "properties": {
                         "enabled": {"type": "boolean", "default": false}}}}}}}}}]}});
    c.create(&crds(), "", &crd).await.unwrap();
    let widgets = gvr("ex.com", "v1", "widgets");
    let widget = |spec: Value| {
        json!({"apiVersion": "ex.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
               "spec": spec})
    };
    let created = eventually(Duration::from_secs(5), "widgets served", || async {
        c.create(
            &widgets,
            "default",
            &widget(json!({"ports": null, "note": null})),
        )
        .await
        .ok()
    })
    .await;
    assert_eq!(
        created["spec"],
        json!({"size": "medium", "note": null, "tls": {"enabled": false}})
    );
    // An update's null is defaulted too; what is set stays.
    let mut changed = created.clone();
    changed["spec"] = json!({"size": null, "tls": {"enabled": true}});
    let updated = c.update(&widgets, "default", &changed).await.unwrap();
    assert_eq!(
        updated["spec"],
        json!({"size": "medium", "tls": {"enabled": true}})
    );
    // A default that does not validate: refused when the CRD is written.
    let mut bad = crd.clone();
    bad["metadata"]["name"] = json!("gadgets.ex.com");
    bad["spec"]["names"] = json!({"kind": "Gadget", "plural": "gadgets"});
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"]
        ["default"] = json!(3);
    let e = c.create(&crds(), "", &bad).await.unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    assert_eq!(
        fields(&e),
        ["spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].default"]
    );
}

/// Defaults apply when objects are read, too: a default added to a CRD shows on an object
/// written before it, in a get, a list and a watch, at its resourceVersion (Kubernetes defaults
/// what it decodes from etcd and writes nothing back).
#[tokio::test]
async fn a_default_added_later_shows_on_objects_written_before_it() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let schema = |size: Value| {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "size": size, "name": {"type": "string"}}}}})
    };
    let mut crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.ex.com"},
        "spec": {"group": "ex.com", "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                   "schema": {"openAPIV3Schema": schema(json!({"type": "string"}))}}]}});
    let stored = c.create(&crds(), "", &crd).await.unwrap();
    let widgets = gvr("ex.com", "v1", "widgets");
    let created = eventually(Duration::from_secs(5), "widgets served", || async {
        let w = json!({"apiVersion": "ex.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
                       "spec": {"name": "a"}});
        c.create(&widgets, "default", &w).await.ok()
    })
    .await;
    assert_eq!(created["spec"], json!({"name": "a"}));
    let rv = created["metadata"]["resourceVersion"].clone();

    crd["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"].clone();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] =
        schema(json!({"type": "string", "default": "medium"}));
    c.update(&crds(), "", &crd).await.unwrap();
    let read = eventually(Duration::from_secs(5), "the default on a get", || async {
        let w = c.get(&widgets, "default", "w1").await.ok()?;
        (w["spec"]["size"] == json!("medium")).then_some(w)
    })
    .await;
    assert_eq!(read["spec"], json!({"name": "a", "size": "medium"}));
    assert_eq!(
        read["metadata"]["resourceVersion"], rv,
        "nothing is written back"
    );
    let cached = c.get_at(&widgets, "default", "w1", "0").await.unwrap();
    assert_eq!(
        cached["spec"], read["spec"],
        "a read from the watch cache too"
    );
    let listed = c
        .list(&widgets, "default", &ListParams::default())
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0]["spec"], read["spec"]);
    let params = keel_client::WatchParams {
        namespace: "default".into(),
        ..Default::default()
    };
    let mut events = c.watch(&widgets, &params).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("the watch's first event")
        .expect("an event")
        .unwrap();
    assert_eq!(first.object["spec"], read["spec"]);
    assert_eq!(first.object["metadata"]["resourceVersion"], rv);
}

/// A custom object's writes are recorded in managedFields as a built-in one's are.
#[tokio::test]
async fn a_custom_objects_writes_are_recorded_in_managed_fields() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    c.create(&crds(), "", &network_crd()).await.unwrap();
    serving(&c).await;
    let created = c
        .create(&networks(), "default", &network("n1", "10.0.0.0/24"))
        .await
        .unwrap();
    let managers: Vec<&str> = created["metadata"]["managedFields"]
        .as_array()
        .unwrap_or_else(|| panic!("no managedFields: {created}"))
        .iter()
        .filter_map(|e| e["manager"].as_str())
        .collect();
    assert_eq!(managers.len(), 1, "{created}");
}
