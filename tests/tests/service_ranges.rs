//! Service cluster IPs and node ports across API server replicas, on a real etcd and the real
//! binaries: two replicas allocating at once never hand out one IP, every IP comes back on
//! delete, and kubectl's NodePort Service gets a port of the range.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::process::Command;
use tokio::time::Instant;

use base64::Engine;
use keel_client::{Client, DeleteParams, gvr};
use keel_tests::{ApiServer, Etcd};
use serde_json::{Value, json};

/// 510 usable addresses (10.0.0.1 to 10.0.1.254): room for 500 Services, not for 1000.
const RANGE: &str = "10.0.0.0/23";
const SERVICES: usize = 500;

fn service(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80}]},
    })
}

/// Creates `names` all at once, alternating between the clients (the replicas): their IPs.
async fn create_all(clients: &[Client; 2], names: &[String]) -> Vec<Ipv4Addr> {
    let services = gvr("", "v1", "services");
    let tasks: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let (c, services, obj) = (clients[i % 2].clone(), services.clone(), service(name));
            tokio::spawn(async move { c.create(&services, "default", &obj).await })
        })
        .collect();
    let mut ips = Vec::new();
    for t in tasks {
        let created = t.await.unwrap().unwrap();
        let ip = created["spec"]["clusterIP"].as_str().unwrap();
        assert_eq!(created["spec"]["clusterIPs"], json!([ip]));
        ips.push(ip.parse().unwrap());
    }
    ips
}

/// Deletes `names` all at once, alternating between the clients.
async fn delete_all(clients: &[Client; 2], names: &[String]) {
    let services = gvr("", "v1", "services");
    let tasks: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let (c, services, name) = (clients[i % 2].clone(), services.clone(), name.clone());
            tokio::spawn(async move {
                c.delete(&services, "default", &name, &DeleteParams::default())
                    .await
            })
        })
        .collect();
    for t in tasks {
        let (_, gone) = t.await.unwrap().unwrap();
        assert!(gone);
    }
}

/// How many addresses the stored bitmap (`/registry/ranges/serviceips`) marks.
async fn marked(etcd: &Etcd) -> u32 {
    let mut kv = etcd.client().await;
    let got = kv.get("/registry/ranges/serviceips", None).await.unwrap();
    let stored: Value = serde_json::from_slice(got.kvs()[0].value()).unwrap();
    assert_eq!(stored["range"], RANGE);
    let data = stored["data"].as_str().unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    bytes.iter().map(|b| b.count_ones()).sum()
}

fn assert_distinct_in_range(ips: &[Ipv4Addr]) {
    let distinct: BTreeSet<_> = ips.iter().collect();
    assert_eq!(distinct.len(), ips.len(), "an IP was handed out twice");
    let (first, last): (Ipv4Addr, Ipv4Addr) =
        ("10.0.0.1".parse().unwrap(), "10.0.1.254".parse().unwrap());
    for ip in ips {
        assert!(*ip >= first && *ip <= last, "{ip} is outside {RANGE}");
    }
}

#[tokio::test]
async fn two_replicas_allocate_500_cluster_ips_at_once_without_a_duplicate_and_release_each() {
    let etcd = Etcd::start().await;
    let flags = ["--service-cluster-ip-range", RANGE];
    let a = ApiServer::start_with(&etcd, &flags).await;
    let b = ApiServer::start_with(&etcd, &flags).await;
    let clients = [a.client().await, b.client().await];
    let names: Vec<String> = (0..SERVICES).map(|i| format!("svc-{i}")).collect();

    let start = Instant::now();
    let ips = create_all(&clients, &names).await;
    eprintln!(
        "created {SERVICES} Services through two replicas in {:?}",
        start.elapsed()
    );
    // The `kubernetes` Service has the first address, as in Kubernetes.
    let kubernetes = clients[0]
        .get(&gvr("", "v1", "services"), "default", "kubernetes")
        .await
        .unwrap();
    assert_eq!(kubernetes["spec"]["clusterIP"], "10.0.0.1");
    let mut all = ips;
    all.push("10.0.0.1".parse().unwrap());
    assert_distinct_in_range(&all);
    assert_eq!(marked(&etcd).await, SERVICES as u32 + 1);

    let start = Instant::now();
    delete_all(&clients, &names).await;
    eprintln!("deleted them in {:?}", start.elapsed());
    assert_eq!(
        marked(&etcd).await,
        1,
        "every IP released but the kubernetes Service's"
    );

    // 500 more: the range could not hold them had any IP stayed taken.
    let again: Vec<String> = (0..SERVICES).map(|i| format!("again-{i}")).collect();
    let start = Instant::now();
    let ips = create_all(&clients, &again).await;
    eprintln!("created {SERVICES} more in {:?}", start.elapsed());
    // The range holds 510: the kubernetes Service's, these 500, nine more, then it is full.
    let last: Vec<String> = (0..9).map(|i| format!("last-{i}")).collect();
    let mut all = ips;
    all.extend(create_all(&clients, &last).await);
    all.push("10.0.0.1".parse().unwrap());
    assert_distinct_in_range(&all);
    assert_eq!(all.len(), 510);
    let e = clients[0]
        .create(
            &gvr("", "v1", "services"),
            "default",
            &service("one-too-many"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, keel_client::Reason::InternalError, "{e:?}");
    assert_eq!(
        e.message,
        "Internal error occurred: failed to allocate a serviceIP: range is full"
    );
}

/// kubectl (v1.32, `/usr/bin/kubectl` or `$KUBECTL`) with a kubeconfig for `api`, in a
/// directory of its own: its output, or its error when `ok` is false.
fn kubectl(api: &ApiServer, dir: &tempfile::TempDir, args: &[&str], ok: bool) -> String {
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: keel\n  cluster: {{server: \"{}\"}}\n\
         users:\n- name: me\n  user: {{}}\ncontexts:\n- name: keel\n  context:\n    cluster: keel\n    user: me\n\
         current-context: keel\n",
        api.endpoint()
    );
    std::fs::write(dir.path().join("kubeconfig"), config).unwrap();
    let bin = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = Command::new(bin)
        .args(args)
        .env("KUBECONFIG", dir.path().join("kubeconfig"))
        .env("HOME", dir.path())
        .output()
        .expect("cannot run kubectl (install kubectl v1.32 or set KUBECTL)");
    assert_eq!(
        out.status.success(),
        ok,
        "kubectl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(if ok { &out.stdout } else { &out.stderr }).into_owned()
}

#[tokio::test]
async fn kubectl_create_service_nodeport_gets_a_port_of_the_range_and_a_taken_one_is_refused() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let dir = tempfile::tempdir().unwrap();
    let kubernetes = kubectl(
        &api,
        &dir,
        &[
            "get",
            "service",
            "kubernetes",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
        true,
    );
    assert_eq!(kubernetes, "10.96.0.1");
    kubectl(
        &api,
        &dir,
        &["create", "service", "nodeport", "web", "--tcp=80:80"],
        true,
    );
    let get = |field: &str| {
        kubectl(
            &api,
            &dir,
            &[
                "get",
                "service",
                "web",
                "-o",
                &format!("jsonpath={{{field}}}"),
            ],
            true,
        )
    };
    let port: u16 = get(".spec.ports[0].nodePort").parse().unwrap();
    assert!((30000..=32767).contains(&port), "{port}");
    let ip: Ipv4Addr = get(".spec.clusterIP").parse().unwrap();
    // Above the 256 addresses of 10.96.0.0/12 kept for static ones.
    let (low, high): (Ipv4Addr, Ipv4Addr) = (
        "10.96.1.1".parse().unwrap(),
        "10.111.255.254".parse().unwrap(),
    );
    assert!(ip >= low && ip <= high, "{ip}");
    assert_eq!(get(".spec.ipFamilies"), "[\"IPv4\"]");
    let taken = format!("--node-port={port}");
    let e = kubectl(
        &api,
        &dir,
        &[
            "create",
            "service",
            "nodeport",
            "other",
            "--tcp=80:80",
            &taken,
        ],
        false,
    );
    assert!(
        e.contains(&format!(
            "spec.ports[0].nodePort: Invalid value: {port}: provided port is already allocated"
        )),
        "{e}"
    );
    // Deleted, its port is free for another.
    kubectl(&api, &dir, &["delete", "service", "web"], true);
    kubectl(
        &api,
        &dir,
        &[
            "create",
            "service",
            "nodeport",
            "other",
            "--tcp=80:80",
            &taken,
        ],
        true,
    );
}
