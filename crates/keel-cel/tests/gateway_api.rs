//! Every validation rule of Gateway API v1.5.1's standard CRDs (tests/data) compiles, typed by
//! its schema node, within Kubernetes' cost limits per rule and per CRD: Kubernetes accepts
//! these CRDs, so keel must. The expressions of its ValidatingAdmissionPolicy compile too.

use std::path::{Path, PathBuf};

use keel_cel::{CostTotal, Rule, RuleScope};
use serde_json::Value;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/gateway-api-v1.5.1")
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.split("\n---")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("{path:?}: {e}")))
        .collect()
}

/// Compiles the rules of `schema` and below, as the apiserver walks a CRD's schema; returns
/// how many there were, and pushes what was refused.
fn compile(
    schema: &Value,
    path: &str,
    scope: RuleScope,
    total: &mut CostTotal,
    refused: &mut Vec<String>,
) -> usize {
    let mut count = 0;
    if let Some(Value::Array(rules)) = schema.get("x-kubernetes-validations") {
        for (i, entry) in rules.iter().enumerate() {
            count += 1;
            let at = format!("{path}.x-kubernetes-validations[{i}]");
            if let Err(errors) = Rule::compile(entry, schema, scope, total, &at) {
                refused.push(format!("{at}: {entry}: {errors:?}"));
            }
        }
    }
    let child = scope.child(schema);
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (name, sub) in props {
            let sub_path = format!("{path}.properties[{name}]");
            count += compile(sub, &sub_path, child, total, refused);
        }
    }
    if let Some(items @ Value::Object(_)) = schema.get("items") {
        count += compile(items, &format!("{path}.items"), child, total, refused);
    }
    if let Some(sub @ Value::Object(_)) = schema.get("additionalProperties") {
        let sub_path = format!("{path}.additionalProperties");
        count += compile(sub, &sub_path, child, total, refused);
    }
    count
}

#[test]
fn every_gateway_api_rule_compiles_within_the_cost_limits() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data())
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    let (mut rules, mut refused) = (0, Vec::new());
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
    {
        for doc in documents(file) {
            if doc["kind"] != "CustomResourceDefinition" {
                continue;
            }
            let versions = doc["spec"]["versions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for (v, version) in versions.iter().enumerate() {
                let path = format!("spec.versions[{v}].schema.openAPIV3Schema");
                let schema = &version["schema"]["openAPIV3Schema"];
                let mut total = CostTotal::default();
                rules += compile(schema, &path, RuleScope::root(), &mut total, &mut refused);
                for (field, message) in total.errors(&path) {
                    refused.push(format!("{file:?} {field}: {message}"));
                }
            }
        }
    }
    assert!(refused.is_empty(), "{}", refused.join("\n"));
    assert_eq!(rules, 283);
}

#[test]
fn gateway_api_admission_policy_expressions_compile() {
    let docs = documents(&data().join("gateway.networking.k8s.io_vap_safeupgrades.yaml"));
    let validations = docs[0]["spec"]["validations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!validations.is_empty());
    let variables = [
        "object",
        "oldObject",
        "request",
        "params",
        "namespaceObject",
        "authorizer",
    ];
    for v in validations {
        let expression = v["expression"].as_str().unwrap_or_default();
        let compiled = keel_cel::compile_declared(expression, &variables);
        assert!(compiled.is_ok(), "{expression}: {:?}", compiled.err());
    }
}
