//! Services' cluster IPs and node ports through the Registry's verbs, on the in-memory etcd:
//! what a create, an update, a delete and their failures give and give back.

use keel_api::{Object, Reason};
use serde_json::{Value, json};

use super::*;
use crate::registry::allocator::{Pool, ServiceRanges};
use crate::registry::testing::{Fixture, far};
use crate::registry::{DeleteOptions, PatchType, Subresource, Write};

fn claim(pool: Pool, value: Option<&str>) -> Claim {
    Claim {
        pool,
        field: "f".into(),
        at: 0,
        value: value.map(str::to_string),
    }
}

#[test]
fn only_what_is_not_held_is_allocated_and_a_shared_value_once() {
    let held = [
        claim(Pool::ClusterIps, Some("10.0.0.1")),
        claim(Pool::NodePorts, Some("30001")),
    ];
    let claims = [
        claim(Pool::ClusterIps, Some("10.0.0.1")),
        claim(Pool::NodePorts, Some("30001")),
        claim(Pool::NodePorts, Some("30002")),
        claim(Pool::NodePorts, Some("30002")),
        claim(Pool::NodePorts, None),
        // The same text in the other pool is another value.
        claim(Pool::NodePorts, Some("10.0.0.1")),
    ];
    let needed = to_allocate(&claims, &held);
    assert_eq!(needed, [&claims[2], &claims[4], &claims[5]]);
}

#[test]
fn what_is_no_longer_held_is_released_once() {
    let before = [
        claim(Pool::ClusterIps, Some("10.0.0.1")),
        claim(Pool::NodePorts, Some("30001")),
        claim(Pool::NodePorts, Some("30001")),
        claim(Pool::NodePorts, Some("30002")),
        claim(Pool::NodePorts, None),
    ];
    let after = [
        claim(Pool::ClusterIps, Some("10.0.0.1")),
        claim(Pool::NodePorts, Some("30002")),
    ];
    assert_eq!(released(&before, &after), [&before[1]]);
    assert_eq!(released(&before, &[]).len(), 3);
}

/// A Service in `default` with this spec.
fn service(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    })
}

/// A ClusterIP Service of one port, with `clusterIP` if given.
fn cluster_ip(name: &str, ip: Option<&str>) -> Value {
    let mut spec = json!({"ports": [{"port": 80}]});
    if let Some(ip) = ip {
        spec["clusterIP"] = json!(ip);
    }
    service(name, spec)
}

/// A NodePort Service of two ports, the first with `nodePort` if given.
fn node_port(name: &str, port: Option<i64>) -> Value {
    let mut spec = json!({"type": "NodePort", "ports": [
        {"name": "http", "port": 80},
        {"name": "https", "port": 443},
    ]});
    if let Some(p) = port {
        spec["ports"][0]["nodePort"] = json!(p);
    }
    service(name, spec)
}

fn spec(obj: &Object) -> &Value {
    &obj.as_map()["spec"]
}

fn ip_of(obj: &Object) -> String {
    spec(obj)["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn node_ports_of(obj: &Object) -> Vec<i64> {
    spec(obj)["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["nodePort"].as_i64())
        .collect()
}

/// The values the pool's stored bitmap marks, as clients write them.
async fn marked(f: &Fixture, pool: Pool) -> Vec<String> {
    let a = f.registry.allocators().pool(pool);
    let stored = a.stored(far()).await.unwrap().bitmap.unwrap();
    stored
        .iter()
        .map(|i| a.range().show(a.range().value_at(i)))
        .collect()
}

fn small() -> ServiceRanges {
    ServiceRanges::parse("10.0.0.0/29", "30000-30002").unwrap()
}

#[tokio::test]
async fn a_cluster_ip_service_gets_an_ip_of_the_upper_range_and_the_ipv4_family() {
    let f = Fixture::new().await;
    let svc = f.create(cluster_ip("web", None)).await.unwrap();
    let ip: std::net::Ipv4Addr = ip_of(&svc).parse().unwrap();
    // 10.96.0.0/12 keeps 10.96.0.1 to 10.96.1.0 for IPs clients choose.
    let (low, high): (std::net::Ipv4Addr, std::net::Ipv4Addr) =
        ("10.96.1.0".parse().unwrap(), "10.112.0.0".parse().unwrap());
    assert!(ip > low && ip < high, "{ip}");
    assert_eq!(spec(&svc)["clusterIPs"], json!([ip.to_string()]));
    assert_eq!(spec(&svc)["ipFamilies"], json!(["IPv4"]));
    assert_eq!(spec(&svc)["ipFamilyPolicy"], json!("SingleStack"));
    assert_eq!(f.get(&svc).await.unwrap(), svc, "as stored");
    assert_eq!(marked(&f, Pool::ClusterIps).await, [ip.to_string()]);
}

#[tokio::test]
async fn a_headless_service_gets_no_ip_but_the_family_fields_and_an_external_name_nothing() {
    let f = Fixture::new().await;
    let headless = f.create(cluster_ip("db", Some("None"))).await.unwrap();
    assert_eq!(spec(&headless)["clusterIPs"], json!(["None"]));
    assert_eq!(spec(&headless)["ipFamilies"], json!(["IPv4"]));
    assert_eq!(spec(&headless)["ipFamilyPolicy"], json!("SingleStack"));
    let external = f
        .create(service(
            "ext",
            json!({"type": "ExternalName", "externalName": "example.com"}),
        ))
        .await
        .unwrap();
    for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        assert!(spec(&external).get(field).is_none(), "{field}");
    }
    assert!(marked(&f, Pool::ClusterIps).await.is_empty());
}

#[tokio::test]
async fn a_requested_ip_is_given_once_and_then_invalid_in_kubernetes_words() {
    let f = Fixture::new().await;
    let a = f.create(cluster_ip("a", Some("10.96.0.5"))).await.unwrap();
    assert_eq!(ip_of(&a), "10.96.0.5");
    let e = f
        .create(cluster_ip("b", Some("10.96.0.5")))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(
        e.message,
        "Service \"b\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.96.0.5\"}: \
         failed to allocate IP 10.96.0.5: provided IP is already allocated"
    );
    assert_eq!(e.causes[0].field, "spec.clusterIPs");
    let e = f
        .create(cluster_ip("c", Some("10.0.0.5")))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "Service \"c\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.0.0.5\"}: \
         failed to allocate IP 10.0.0.5: the provided IP (10.0.0.5) is not in the valid range. \
         The range of valid IPs is 10.96.0.0/12"
    );
    assert_eq!(marked(&f, Pool::ClusterIps).await, ["10.96.0.5"]);
}

#[tokio::test]
async fn a_node_port_service_gets_a_port_per_port_and_a_taken_one_is_invalid() {
    let f = Fixture::new().await;
    let a = f.create(node_port("a", Some(30080))).await.unwrap();
    let ports = node_ports_of(&a);
    assert_eq!(ports.len(), 2);
    assert_eq!(ports[0], 30080);
    // Random ones come after the 86 ports kept for static ones.
    assert!((30086..=32767).contains(&ports[1]), "{ports:?}");
    let e = f.create(node_port("b", Some(30080))).await.unwrap_err();
    assert_eq!(
        e.message,
        "Service \"b\" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port \
         is already allocated"
    );
    let e = f.create(node_port("c", Some(40000))).await.unwrap_err();
    assert_eq!(
        e.message,
        "Service \"c\" is invalid: spec.ports[0].nodePort: Invalid value: 40000: provided port \
         is not in the valid range. The range of valid ports is 30000-32767"
    );
    // The refused creates gave back the cluster IP and the other port they were given.
    assert_eq!(marked(&f, Pool::ClusterIps).await, [ip_of(&a)]);
    let mut want: Vec<String> = ports.iter().map(i64::to_string).collect();
    want.sort();
    assert_eq!(marked(&f, Pool::NodePorts).await, want);
}

#[tokio::test]
async fn a_full_range_is_an_internal_error_as_in_kubernetes() {
    let f = Fixture::with_ranges(small()).await;
    for i in 0..6 {
        f.create(cluster_ip(&format!("s{i}"), None)).await.unwrap();
    }
    let e = f.create(cluster_ip("full", None)).await.unwrap_err();
    assert_eq!(e.reason, Reason::InternalError);
    assert_eq!(
        e.message,
        "Internal error occurred: failed to allocate a serviceIP: range is full"
    );
    assert_eq!(e.target.name, "full");
    // Three node ports: one Service of two, then one of two is refused, whole.
    f.create(node_port("np", None)).await.err();
    let e = f.create(node_port("np2", None)).await.unwrap_err();
    assert_eq!(e.reason, Reason::InternalError, "{e:?}");
}

#[tokio::test]
async fn delete_releases_the_ip_and_node_ports() {
    let f = Fixture::new().await;
    let a = f.create(node_port("a", Some(30080))).await.unwrap();
    let (_, gone) = f.delete(&a, DeleteOptions::default()).await.unwrap();
    assert!(gone);
    assert!(marked(&f, Pool::ClusterIps).await.is_empty());
    assert!(marked(&f, Pool::NodePorts).await.is_empty());
    let mut again = node_port("b", Some(30080));
    again["spec"]["clusterIP"] = json!(ip_of(&a));
    f.create(again).await.unwrap();
}

#[tokio::test]
async fn a_service_held_by_a_finalizer_keeps_its_ip_until_it_is_removed() {
    let f = Fixture::new().await;
    let mut held = cluster_ip("a", Some("10.96.0.7"));
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    let a = f.create(held).await.unwrap();
    let (_, gone) = f.delete(&a, DeleteOptions::default()).await.unwrap();
    assert!(!gone, "only marked");
    assert_eq!(marked(&f, Pool::ClusterIps).await, ["10.96.0.7"]);
    let e = f
        .create(cluster_ip("b", Some("10.96.0.7")))
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    // The last finalizer goes: removed, and released.
    f.patch(
        &a,
        Subresource::Main,
        PatchType::Merge,
        json!({"metadata": {"finalizers": null}}),
    )
    .await
    .unwrap();
    assert!(f.get(&a).await.is_err());
    assert!(marked(&f, Pool::ClusterIps).await.is_empty());
    f.create(cluster_ip("b", Some("10.96.0.7"))).await.unwrap();
}

#[tokio::test]
async fn a_create_that_fails_after_its_allocation_releases_it() {
    let f = Fixture::new().await;
    f.create(cluster_ip("a", None)).await.unwrap();
    let before = marked(&f, Pool::ClusterIps).await;
    // The name is taken: allocated, refused by etcd, released.
    let e = f.create(node_port("a", Some(30080))).await.unwrap_err();
    assert_eq!(e.reason, Reason::AlreadyExists);
    assert_eq!(marked(&f, Pool::ClusterIps).await, before);
    assert!(marked(&f, Pool::NodePorts).await.is_empty());
    f.create(node_port("b", Some(30080))).await.unwrap();
}

#[tokio::test]
async fn a_dry_run_answers_with_values_and_allocates_nothing() {
    let f = Fixture::new().await;
    let info = f.info("Service");
    let before = f.revision();
    let obj = Object::from_value(node_port("a", Some(30080))).unwrap();
    let answer = f
        .registry
        .create(&info, obj, Write::server().dry_run(), far())
        .await
        .unwrap();
    assert!(!ip_of(&answer).is_empty());
    assert_eq!(node_ports_of(&answer).len(), 2);
    assert_eq!(f.revision(), before, "nothing written");
    assert!(marked(&f, Pool::ClusterIps).await.is_empty());
    assert!(marked(&f, Pool::NodePorts).await.is_empty());
    // A dry-run delete releases nothing either.
    let a = f.create(node_port("a", Some(30080))).await.unwrap();
    let opts = DeleteOptions {
        dry_run: true,
        ..DeleteOptions::default()
    };
    f.delete(&a, opts).await.unwrap();
    assert_eq!(marked(&f, Pool::NodePorts).await.len(), 2);
}

#[tokio::test]
async fn type_changes_release_and_allocate_what_the_new_type_needs() {
    let f = Fixture::new().await;
    let a = f.create(node_port("a", None)).await.unwrap();
    let ip = ip_of(&a);
    // NodePort → ClusterIP: the node ports go, the cluster IP stays.
    let b = f
        .patch(
            &a,
            Subresource::Main,
            PatchType::Merge,
            json!({"spec": {"type": "ClusterIP"}}),
        )
        .await
        .unwrap();
    assert!(node_ports_of(&b).is_empty());
    assert_eq!(ip_of(&b), ip);
    assert!(marked(&f, Pool::NodePorts).await.is_empty());
    // ClusterIP → NodePort: new node ports.
    let c = f
        .patch(
            &b,
            Subresource::Main,
            PatchType::Merge,
            json!({"spec": {"type": "NodePort"}}),
        )
        .await
        .unwrap();
    assert_eq!(node_ports_of(&c).len(), 2);
    let mut ports: Vec<String> = node_ports_of(&c).iter().map(i64::to_string).collect();
    ports.sort();
    assert_eq!(marked(&f, Pool::NodePorts).await, ports);
    // A port removed gives its node port back; one added gets one.
    let mut replaced = c.clone();
    replaced.as_map_mut()["spec"]["ports"] =
        json!([{"name": "https", "port": 443}, {"name": "dns", "port": 53, "protocol": "UDP"}]);
    let d = f.update(&replaced, Subresource::Main).await.unwrap();
    let kept = node_ports_of(&c)[1];
    assert_eq!(node_ports_of(&d)[0], kept, "kept for the same port");
    assert_eq!(node_ports_of(&d).len(), 2);
    let mut ports: Vec<String> = node_ports_of(&d).iter().map(i64::to_string).collect();
    ports.sort();
    assert_eq!(marked(&f, Pool::NodePorts).await, ports);
    // → ExternalName: the cluster IP and node ports go.
    let e = f
        .patch(
            &d,
            Subresource::Main,
            PatchType::Merge,
            json!({"spec": {"type": "ExternalName", "externalName": "example.com"}}),
        )
        .await
        .unwrap();
    assert!(ip_of(&e).is_empty());
    assert!(marked(&f, Pool::ClusterIps).await.is_empty());
    assert!(marked(&f, Pool::NodePorts).await.is_empty());
}

#[tokio::test]
async fn a_replace_that_leaves_the_ip_out_keeps_it() {
    let f = Fixture::new().await;
    let a = f.create(node_port("a", None)).await.unwrap();
    let mut manifest = Object::from_value(node_port("a", None)).unwrap();
    manifest.as_map_mut()["spec"]["selector"] = json!({"app": "a"});
    let b = f.update(&manifest, Subresource::Main).await.unwrap();
    assert_eq!(ip_of(&b), ip_of(&a));
    assert_eq!(node_ports_of(&b), node_ports_of(&a));
    assert_eq!(marked(&f, Pool::ClusterIps).await, [ip_of(&a)]);
    assert_eq!(marked(&f, Pool::NodePorts).await.len(), 2);
}

#[tokio::test]
async fn an_update_asking_for_a_taken_node_port_is_invalid_and_changes_nothing() {
    let f = Fixture::new().await;
    f.create(node_port("a", Some(30080))).await.unwrap();
    let b = f.create(node_port("b", None)).await.unwrap();
    let before = marked(&f, Pool::NodePorts).await;
    let e = f
        .patch(
            &b,
            Subresource::Main,
            PatchType::Json,
            json!([{"op": "replace", "path": "/spec/ports/1/nodePort", "value": 30080}]),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(e.causes[0].field, "spec.ports[1].nodePort");
    assert_eq!(marked(&f, Pool::NodePorts).await, before);
    assert_eq!(f.get(&b).await.unwrap(), b);
}

#[tokio::test]
async fn what_keel_cannot_allocate_is_invalid_before_anything_is_allocated() {
    let f = Fixture::new().await;
    for (spec, field) in [
        (
            json!({"clusterIP": "ten", "ports": [{"port": 80}]}),
            "spec.clusterIPs[0]",
        ),
        (
            json!({"type": "ExternalName", "externalName": "a.example", "clusterIP": "10.96.0.9"}),
            "spec.clusterIPs",
        ),
        (
            json!({"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}),
            "spec.ipFamilyPolicy",
        ),
        (
            json!({"ipFamilies": ["IPv6"], "ports": [{"port": 80}]}),
            "spec.ipFamilies[0]",
        ),
        (
            json!({"clusterIPs": ["10.96.0.9", "fd00::9"], "ports": [{"port": 80}]}),
            "spec.clusterIPs",
        ),
        (
            json!({"clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.8"], "ports": [{"port": 80}]}),
            "spec.clusterIPs[0]",
        ),
    ] {
        let e = f.create(service("s", spec.clone())).await.unwrap_err();
        assert_eq!(e.reason, Reason::Invalid, "{spec}: {e:?}");
        assert!(e.causes.iter().any(|c| c.field == field), "{spec}: {e:?}");
    }
    assert!(marked(&f, Pool::ClusterIps).await.is_empty());
}

#[tokio::test]
async fn a_port_whose_number_changes_keeps_its_node_port_by_name() {
    let f = Fixture::new().await;
    let a = f.create(node_port("a", None)).await.unwrap();
    let before = node_ports_of(&a);
    // A Helm upgrade of the chart's port number: the list is replaced, no node ports given.
    let moved = f
        .patch(
            &a,
            Subresource::Main,
            PatchType::Merge,
            json!({"spec": {"ports": [{"name": "http", "port": 8080}, {"name": "https", "port": 443}]}}),
        )
        .await
        .unwrap();
    assert_eq!(node_ports_of(&moved), before);
    assert_eq!(marked(&f, Pool::NodePorts).await.len(), 2);
    // Two ports may not share one node port of one protocol.
    let e = f
        .patch(
            &moved,
            Subresource::Main,
            PatchType::Json,
            json!([{"op": "replace", "path": "/spec/ports/1/nodePort", "value": before[0]}]),
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason, Reason::Invalid);
    assert_eq!(e.causes[0].field, "spec.ports[1].nodePort");
}

#[tokio::test]
async fn a_local_load_balancer_holds_a_health_check_node_port_until_it_is_no_longer_local() {
    let f = Fixture::new().await;
    let lb = f
        .create(service(
            "lb",
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                   "ports": [{"name": "http", "port": 80}]}),
        ))
        .await
        .unwrap();
    let health = spec(&lb)["healthCheckNodePort"].as_i64().unwrap();
    assert_ne!(Some(health), node_ports_of(&lb).first().copied());
    assert_eq!(marked(&f, Pool::NodePorts).await.len(), 2);
    // Another Service may not take it.
    let mut taken = node_port("np", None);
    taken["spec"]["ports"][1]["nodePort"] = json!(health);
    let e = f.create(taken).await.unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e:?}");
    // Cluster traffic policy: the port is given back.
    let cluster = f
        .patch(
            &lb,
            Subresource::Main,
            PatchType::Merge,
            json!({"spec": {"externalTrafficPolicy": "Cluster"}}),
        )
        .await
        .unwrap();
    assert_eq!(spec(&cluster).get("healthCheckNodePort"), None);
    assert_eq!(marked(&f, Pool::NodePorts).await.len(), 1);
}
