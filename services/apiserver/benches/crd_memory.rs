//! What a CRD's schema costs the heap, part by part (issue 45): for each CRD of a directory of
//! YAML files, the bytes still allocated after each step the API server takes with it, against
//! the CRD's own JSON. A counting allocator measures live bytes, so the figures do not depend on
//! how the allocator returns memory (RSS does).
//!
//!   cargo bench -p keel-apiserver --bench crd_memory                 # Gateway API v1.5.1
//!   CRD_DIR=<dir of YAML> cargo bench -p keel-apiserver --bench crd_memory
//!
//! Prints a Markdown table for BENCHMARKS.md: per CRD set, the JSON, the served resources (what
//! a CRD costs before any of its objects is read or written), and their compiled schemas
//! (validation, pruning, defaulting, rules; then merge keys), each as bytes and over the JSON.

// A benchmark, not served code.
#![allow(clippy::disallowed_types, clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use keel_api::Object;
use keel_apiserver::registry::crd;
use keel_apiserver::registry::crd_schema::CrdSchema;
use serde_json::Value;

/// The system allocator, counting the bytes it has handed out and not had back.
#[global_allocator]
static ALLOCATOR: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

fn live() -> isize {
    ALLOCATOR.allocated() as isize
}

fn crds(dir: &str) -> Vec<Value> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .expect("CRD_DIR")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_default();
        out.extend(
            docs.into_iter()
                .filter(|d| d["kind"] == "CustomResourceDefinition"),
        );
    }
    out
}

fn row(what: &str, bytes: isize, json: usize) {
    println!(
        "| {what} | {:.2} MB | {:.2}x |",
        bytes as f64 / 1e6,
        bytes as f64 / json as f64
    );
}

fn main() {
    let dir = std::env::var("CRD_DIR").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/data/gateway-api-v1.5.1"
        )
        .to_string()
    });
    let crds = crds(&dir);
    let json: usize = crds
        .iter()
        .map(|c| serde_json::to_vec(c).map_or(0, |v| v.len()))
        .sum();
    println!("{} CRDs from {dir}\n", crds.len());
    println!("| what | heap | over the JSON |");
    println!("|---|---|---|");
    println!("| the CRDs' JSON | {:.2} MB | 1.00x |", json as f64 / 1e6);
    let objects: Vec<Object> = crds
        .into_iter()
        .map(|c| Object::from_value(c).expect("a CRD is an object"))
        .collect();

    // What a CRD's create checks (its schemas included): the bytes it allocates on the way
    // (freed again, but what the allocator must find room for), and the time.
    let before = ALLOCATOR.total_allocated();
    let started = std::time::Instant::now();
    let refused = objects
        .iter()
        .filter(|o| !crd::validate(o).is_empty())
        .count();
    let took = started.elapsed();
    assert_eq!(refused, 0, "every CRD is valid");
    let churn = (ALLOCATOR.total_allocated() - before) as isize;
    println!(
        "| validating the CRDs, as a create does: bytes allocated on the way ({:.0} ms) | {:.2} MB | {:.2}x |",
        took.as_secs_f64() * 1000.0,
        churn as f64 / 1e6,
        churn as f64 / json as f64
    );

    // The CRDs' JSON as the watch cache holds it: what the served resources read from.
    let sources: Vec<Bytes> = objects
        .iter()
        .map(|o| Bytes::from(o.to_vec().into_boxed_slice()))
        .collect();

    let start = live();
    let served: Vec<_> = objects
        .iter()
        .zip(&sources)
        .flat_map(|(o, source)| crd::resources_from(o, source.clone()))
        .collect();
    let after_served = live();
    row(
        "served resources, none used (beyond the JSON they read)",
        after_served - start,
        json,
    );
    for r in &served {
        let _ = r.schema();
    }
    let after_compiled = live();
    row(
        "+ compiled on first use (validation, pruning, defaults, rules, merge keys)",
        after_compiled - after_served,
        json,
    );
    row("all, per served version", after_compiled - start, json);

    // The parts, one at a time (the Draft 4 meta-schema, built once, is left out), with the
    // served resources' compiled forms gone: their shared nodes and rules would be shared again.
    let schemas: Vec<Value> = served.iter().filter_map(|r| r.openapi_schema()).collect();
    drop(served);
    let _ = schemas.first().map(|s| CrdSchema::new(s, ""));
    let before = live();
    let validators: Vec<_> = schemas
        .iter()
        .filter_map(|s| CrdSchema::new(s, "").ok())
        .collect();
    row("  of which: CrdSchema", live() - before, json);
    let before = live();
    let merges: Vec<_> = schemas
        .iter()
        .map(|s| keel_patch::OpenApiSchema::new(s.clone()))
        .collect();
    row("  of which: merge keys", live() - before, json);
    drop((validators, merges));
}
