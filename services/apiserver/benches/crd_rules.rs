//! What validating one custom object costs with every rule of a large CRD: Gateway API
//! v1.5.1's HTTPRoute (89 `x-kubernetes-validations` rules in its v1 schema), on an HTTPRoute
//! that reaches most of them (parent references, hostnames, four rules of matches, filters and
//! weighted backends). Prints the time per object of the rules alone, of the OpenAPI schema's
//! checks alone, and of the whole check a create makes (pruning, defaulting, the OpenAPI
//! schema, then the rules), as Markdown rows for BENCHMARKS.md.
//!
//!   cargo bench -p keel-apiserver --bench crd_rules

// A benchmark, not served code: wall-clock time is what it measures.
#![allow(clippy::disallowed_types, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use keel_apiserver::registry::crd_schema::CrdSchema;
use serde_json::{Value, json};

fn httproute_schema() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/gateway-api-v1.5.1/gateway.networking.k8s.io_httproutes.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let crd: Value = serde_saphyr::from_str(&text).unwrap();
    let v1 = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1")
        .unwrap();
    v1["schema"]["openAPIV3Schema"].clone()
}

fn rule(i: usize) -> Value {
    json!({
        "name": format!("rule-{i}"),
        "matches": [
            {"path": {"type": "PathPrefix", "value": format!("/api/v{i}")},
             "headers": [{"type": "Exact", "name": "x-tenant", "value": "blue"}],
             "queryParams": [{"type": "Exact", "name": "debug", "value": "1"}],
             "method": "GET"},
            {"path": {"type": "Exact", "value": format!("/health/{i}")}},
        ],
        "filters": [
            {"type": "RequestHeaderModifier", "requestHeaderModifier": {
                "set": [{"name": "x-route", "value": format!("r{i}")}],
                "add": [{"name": "x-added", "value": "yes"}],
                "remove": ["x-internal"]}},
            {"type": "ResponseHeaderModifier", "responseHeaderModifier": {
                "set": [{"name": "cache-control", "value": "no-store"}]}},
        ],
        "backendRefs": [
            {"name": format!("svc-{i}-a"), "port": 8080, "weight": 90},
            {"name": format!("svc-{i}-b"), "port": 8080, "weight": 10,
             "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
                 "set": [{"name": "x-canary", "value": "true"}]}}]},
        ],
    })
}

fn httproute() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "shop", "namespace": "default"},
        "spec": {
            "parentRefs": [
                {"name": "public", "sectionName": "https"},
                {"name": "public", "sectionName": "http"},
                {"name": "internal", "namespace": "infra"},
            ],
            "hostnames": ["shop.example.com", "www.shop.example.com", "*.shop.example.net"],
            "rules": (0..4).map(rule).collect::<Vec<_>>(),
        },
    })
}

/// The median time per call of `f` over rounds of `n` calls.
fn per_call(n: u32, mut f: impl FnMut()) -> Duration {
    let mut rounds: Vec<Duration> = (0..15)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..n {
                f();
            }
            started.elapsed() / n
        })
        .collect();
    rounds.sort();
    rounds[rounds.len() / 2]
}

fn main() {
    let schema = CrdSchema::new(
        &httproute_schema(),
        "spec.versions[0].schema.openAPIV3Schema",
    )
    .unwrap_or_else(|e| panic!("the HTTPRoute schema does not compile: {e:?}"));
    let route = httproute();
    let mut defaulted = route.clone();
    schema.prune(&mut defaulted);
    schema.default(&mut defaulted);
    let causes = schema.validate(&defaulted);
    assert!(causes.is_empty(), "the route is not valid: {causes:?}");
    let causes = schema.check_rules(&defaulted, None, true);
    assert!(causes.is_empty(), "the route breaks a rule: {causes:?}");
    let rules = per_call(200, || {
        std::hint::black_box(schema.check_rules(std::hint::black_box(&defaulted), None, true));
    });
    let update = per_call(200, || {
        std::hint::black_box(schema.check_rules(&defaulted, Some(&defaulted), true));
    });
    let schema_only = per_call(200, || {
        std::hint::black_box(schema.validate(std::hint::black_box(&defaulted)));
    });
    let whole = per_call(200, || {
        let mut obj = route.clone();
        schema.prune(&mut obj);
        schema.default(&mut obj);
        let mut causes = schema.validate(&obj);
        causes.extend(schema.check_rules(&obj, None, true));
        std::hint::black_box(causes);
    });
    println!("| what | per object |");
    println!("|---|---|");
    println!(
        "| HTTPRoute, every rule (create) | {:.1} µs |",
        rules.as_secs_f64() * 1e6
    );
    println!(
        "| HTTPRoute, every rule (update, oldSelf unchanged) | {:.1} µs |",
        update.as_secs_f64() * 1e6
    );
    println!(
        "| HTTPRoute, the OpenAPI schema alone | {:.1} µs |",
        schema_only.as_secs_f64() * 1e6
    );
    println!(
        "| HTTPRoute, prune + default + schema + rules (create) | {:.1} µs |",
        whole.as_secs_f64() * 1e6
    );
}
