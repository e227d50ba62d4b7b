//! The seeds' Network controller against a real API server, etcd and controller-manager: the
//! example Network becomes Ready with its gateway, an overlapping CIDR gets a condition and no
//! allocation, and deleting a Network releases its range (through its finalizer) so that the
//! other can take it. The controller-manager starts before the CRD exists, as it may.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use keel_client::{Client, DeleteParams, GroupVersionResource, PatchType, Reason, gvr};
use keel_tests::{ApiServer, ControllerManager, Etcd, eventually};
use serde_json::{Value, json};

fn networks() -> GroupVersionResource {
    gvr("samplecrd.k8s.io", "v1", "networks")
}

fn example(file: &str) -> Value {
    let text = std::fs::read_to_string(format!(
        "{}/../deploy/examples/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

fn network(name: &str, cidr: &str) -> Value {
    json!({
        "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
        "metadata": {"name": name},
        "spec": {"cidr": cidr}
    })
}

/// The CRD of file `crd` (as `apiextensions.k8s.io/<version>`), then, once Networks are
/// served, the seeds' example Network.
async fn create_example(c: &Client, version: &str, crd: &str) {
    let crds = gvr("apiextensions.k8s.io", version, "customresourcedefinitions");
    c.create(&crds, "", &example(crd)).await.unwrap();
    eventually(Duration::from_secs(10), "Networks served", || async {
        c.list(&networks(), "default", &Default::default())
            .await
            .ok()
    })
    .await;
    c.create(&networks(), "default", &example("example-network.yaml"))
        .await
        .unwrap();
}

/// The Network once its status says `phase`.
async fn phase(c: &Client, name: &str, phase: &str) -> Value {
    eventually(
        Duration::from_secs(30),
        &format!("{name} {phase}"),
        || async {
            let n = c.get(&networks(), "default", name).await.ok()?;
            (n["status"]["phase"] == phase).then_some(n)
        },
    )
    .await
}

/// The ranges the allocator holds, from its ConfigMap.
async fn allocated(c: &Client) -> Vec<String> {
    let cm = c
        .get(&gvr("", "v1", "configmaps"), "keel-system", "network-ipam")
        .await
        .unwrap();
    let mut keys: Vec<String> = cm["data"]
        .as_object()
        .map(|d| d.keys().map(|k| k.replace('_', "/")).collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

#[tokio::test]
async fn networks_get_their_range_overlaps_are_refused_and_deletion_releases() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    // The controller-manager first: it waits for Networks to be served.
    let _cm = ControllerManager::start(&[&api], &[]).await;
    create_example(&c, "v1", "network-crd.yaml").await;
    let ready = phase(&c, "example-network", "Ready").await;
    assert_eq!(ready["status"]["gateway"], "192.168.0.1");
    assert_eq!(ready["status"]["conditions"][0]["type"], "Allocated");
    assert_eq!(ready["status"]["conditions"][0]["status"], "True");
    assert_eq!(
        ready["metadata"]["finalizers"],
        json!(["samplecrd.k8s.io/ipam"])
    );
    assert_eq!(allocated(&c).await, ["192.168.0.0/16"]);

    // Inside the example's range: refused with a condition, nothing allocated.
    c.create(&networks(), "default", &network("inner", "192.168.5.0/24"))
        .await
        .unwrap();
    let failed = phase(&c, "inner", "Failed").await;
    let cond = &failed["status"]["conditions"][0];
    assert_eq!(cond["status"], "False");
    assert_eq!(cond["reason"], "Overlap");
    assert!(
        cond["message"]
            .as_str()
            .unwrap()
            .contains("default/example-network"),
        "{cond}"
    );
    assert_eq!(allocated(&c).await, ["192.168.0.0/16"]);
    // A range of its own is allocated beside it; the gateway defaults to its first address.
    c.create(&networks(), "default", &network("other", "10.8.0.0/16"))
        .await
        .unwrap();
    let other = phase(&c, "other", "Ready").await;
    assert_eq!(other["status"]["gateway"], "10.8.0.1");

    // Deleting the example releases its range (finalizer), and the inner one gets it.
    c.delete(
        &networks(),
        "default",
        "example-network",
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(30), "example-network gone", || async {
        let e = c
            .get(&networks(), "default", "example-network")
            .await
            .err()?;
        (e.reason == Reason::NotFound).then_some(())
    })
    .await;
    phase(&c, "inner", "Ready").await;
    assert_eq!(allocated(&c).await, ["10.8.0.0/16", "192.168.5.0/24"]);
}

/// The README's commands with the real keelctl: apply the CRD and the example, then `get` by
/// plural and short name shows the CRD's printer columns, and `api-resources` lists Networks.
#[tokio::test]
async fn keelctl_applies_and_shows_networks_with_their_printer_columns() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let _cm = ControllerManager::start(&[&api], &[]).await;
    let k = keel_tests::keelctl::Keelctl::new(&api);
    let examples = format!("{}/../deploy/examples", env!("CARGO_MANIFEST_DIR"));
    let out = k
        .run(&["apply", "-f", &format!("{examples}/network-crd.yaml")])
        .ok()
        .to_string();
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io/networks.samplecrd.k8s.io created"
    );
    // keelctl asks discovery each time: the new resource is known once served.
    eventually(
        Duration::from_secs(10),
        "keelctl to know networks",
        || async { (k.run(&["get", "networks"]).code == 0).then_some(()) },
    )
    .await;
    let out = k
        .run(&["apply", "-f", &format!("{examples}/example-network.yaml")])
        .ok()
        .to_string();
    assert_eq!(
        out.trim(),
        "network.samplecrd.k8s.io/example-network created"
    );
    phase(&c, "example-network", "Ready").await;
    let table = k.run(&["get", "networks"]).ok().to_string();
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAME", "CIDR", "GATEWAY", "PHASE"], "{table}");
    assert_eq!(
        lines[1],
        ["example-network", "192.168.0.0/16", "192.168.0.1", "Ready"],
        "{table}"
    );
    let by_short_name = k.run(&["get", "net", "example-network"]).ok().to_string();
    assert!(by_short_name.contains("192.168.0.0/16"), "{by_short_name}");
    let resources = k.run(&["api-resources"]).ok().to_string();
    assert!(
        resources
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["networks", "net", "samplecrd.k8s.io/v1", "true", "Network"]),
        "{resources}"
    );
    // Applying the same file again changes nothing.
    let again = k
        .run(&["apply", "-f", &format!("{examples}/example-network.yaml")])
        .ok()
        .to_string();
    assert_eq!(
        again.trim(),
        "network.samplecrd.k8s.io/example-network unchanged"
    );
}

/// The seeds' CRD exactly (v1beta1, no schema, no status subresource): status is an ordinary
/// part of the Network, and the controller writes it so. Adding the status subresource to the
/// CRD switches the controller to it.
#[tokio::test]
async fn the_seeds_v1beta1_crd_gets_status_and_the_controller_follows_the_crd() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let _cm = ControllerManager::start(&[&api], &[]).await;
    create_example(&c, "v1beta1", "network-crd-v1beta1.yaml").await;
    let ready = eventually(Duration::from_secs(5), "example-network Ready", || async {
        let n = c
            .get(&networks(), "default", "example-network")
            .await
            .ok()?;
        (n["status"]["phase"] == "Ready").then_some(n)
    })
    .await;
    assert_eq!(ready["status"]["cidr"], "192.168.0.0/16");
    assert_eq!(ready["status"]["gateway"], "192.168.0.1");

    // The status subresource added: the main resource no longer writes status, and the
    // controller writes it through the subresource.
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    let mut crd = c.get(&crds, "", "networks.samplecrd.k8s.io").await.unwrap();
    crd["spec"]["versions"][0]["subresources"] = json!({"status": {}});
    c.update(&crds, "", &crd).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the status subresource served",
        || async {
            let empty = b"{}".to_vec();
            c.patch_subresource(
                &networks(),
                "default",
                "example-network",
                "status",
                PatchType::Merge,
                empty,
            )
            .await
            .ok()
        },
    )
    .await;
    let mut changed = c
        .get(&networks(), "default", "example-network")
        .await
        .unwrap();
    changed["spec"] = json!({"cidr": "10.1.0.0/16"});
    c.update(&networks(), "default", &changed).await.unwrap();
    let followed = eventually(Duration::from_secs(10), "the status follows", || async {
        let n = c
            .get(&networks(), "default", "example-network")
            .await
            .ok()?;
        (n["status"]["cidr"] == "10.1.0.0/16" && n["status"]["phase"] == "Ready").then_some(n)
    })
    .await;
    assert_eq!(followed["status"]["gateway"], "10.1.0.1");
    assert_eq!(allocated(&c).await, ["10.1.0.0/16"]);
}
