//! Gateway API's standard install on keel (issue 44), as a user installs it: its v1.5.1 CRDs
//! and its ValidatingAdmissionPolicy (`tests/data/gateway-api-v1.5.1`, unchanged) applied with
//! `kubectl apply --server-side`, then a sample of Gateway API's own CEL test cases
//! (`tests/cel/*_test.go`, transcribed in `gateway-api-v1.5.1-cel-cases.json`): each object is created (and
//! updated, for the update cases) through the real `keel-apiserver`, and refused exactly when
//! Kubernetes refuses it, with Kubernetes' words. Real etcd, nothing mocked.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use keel_client::{Client, GroupVersionResource, gvr};
use keel_tests::{ApiServer, Etcd, eventually, kubectl};
use serde_json::Value;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gateway-api-v1.5.1")
}

fn cases_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gateway-api-v1.5.1-cel-cases.json")
}

/// The resource of a Gateway API object (`HTTPRoute` → `httproutes`).
fn resource_of(obj: &Value) -> GroupVersionResource {
    let api_version = obj["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = obj["kind"].as_str().unwrap().to_lowercase();
    let plural = match kind.as_str() {
        "backendtlspolicy" => "backendtlspolicies".to_string(),
        "customresourcedefinition" => "customresourcedefinitions".to_string(),
        "gatewayclass" => "gatewayclasses".to_string(),
        _ => format!("{kind}s"),
    };
    gvr(group, version, &plural)
}

/// Whether `message` has `want`, as Gateway API's `celErrorStringMatches` reads it (Kubernetes
/// 1.32 says "may not be more than" where older releases said "longer than").
fn has(message: &str, want: &str) -> bool {
    message.contains(want) || message.contains(&want.replace("longer than", "more than"))
}

/// Creates `obj` (and then updates it with `update`) and says what went differently from
/// `want` (the last write's error substrings; none: it must pass).
async fn judge(c: &Client, case: &Value) -> Option<String> {
    let name = case["name"].as_str().unwrap_or_default();
    let obj = &case["object"];
    let r = resource_of(obj);
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    let wants = |k: &str| -> Vec<String> {
        case[k]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| w.as_str().map(str::to_string))
            .collect()
    };
    let check =
        |what: &str, result: Result<Value, keel_client::ApiError>, wants: Vec<String>| match (
            result,
            wants.is_empty(),
        ) {
            (Ok(_), true) => None,
            (Ok(_), false) => Some(format!("{name}: {what} accepted, want {wants:?}")),
            (Err(e), true) => Some(format!("{name}: {what} refused: {}", e.message)),
            (Err(e), false) => {
                let missing: Vec<&String> = wants.iter().filter(|w| !has(&e.message, w)).collect();
                (!missing.is_empty()).then(|| {
                    format!(
                        "{name}: {what} refused with {:?}, missing {missing:?}",
                        e.message
                    )
                })
            }
        };
    let update = case.get("update").filter(|u| !u.is_null());
    let create_wants = if update.is_some() {
        wants("createWantErrors")
    } else {
        wants("wantErrors")
    };
    let created = c.create(&r, ns, obj).await;
    let stored = created.as_ref().ok().cloned();
    if let Some(problem) = check("create", created, create_wants) {
        return Some(problem);
    }
    let (Some(update), Some(stored)) = (update, stored) else {
        return None;
    };
    let mut update = update.clone();
    update["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"].clone();
    let updated = if case["updateSubresource"] == "status" {
        c.update_status(&r, ns, &update).await
    } else {
        c.update(&r, ns, &update).await
    };
    check("update", updated, wants("wantErrors"))
}

#[tokio::test]
async fn gateway_apis_standard_install_applies_and_its_own_cel_cases_hold() {
    let etcd = Etcd::start().await;
    let api = ApiServer::start(&etcd).await;
    let c = api.client().await;
    let home = tempfile::tempdir().unwrap();
    let dir = data();
    let (ok, out, err) = kubectl(
        &api,
        home.path(),
        &["apply", "--server-side", "-f", dir.to_str().unwrap()],
    );
    assert!(ok, "{out}\n{err}");
    for kind in [
        "customresourcedefinition.apiextensions.k8s.io/httproutes.gateway.networking.k8s.io serverside-applied",
        "validatingadmissionpolicy.admissionregistration.k8s.io/safe-upgrades.gateway.networking.k8s.io serverside-applied",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/safe-upgrades.gateway.networking.k8s.io serverside-applied",
    ] {
        assert!(out.contains(kind), "{out}");
    }
    // Applying it again changes nothing and passes the policy it installed.
    let (ok, out, err) = kubectl(
        &api,
        home.path(),
        &["apply", "--server-side", "-f", dir.to_str().unwrap()],
    );
    assert!(ok, "{out}\n{err}");

    let cases: Value = serde_json::from_slice(&std::fs::read(cases_file()).unwrap()).unwrap();
    for kind in [
        "httproutes",
        "grpcroutes",
        "gateways",
        "gatewayclasses",
        "backendtlspolicies",
        "listenersets",
    ] {
        let r = gvr("gateway.networking.k8s.io", "v1", kind);
        eventually(Duration::from_secs(10), kind, || {
            let (c, r) = (c.clone(), r.clone());
            async move { c.list(&r, "default", &Default::default()).await.ok() }
        })
        .await;
    }
    let mut problems = Vec::new();
    let all = cases["cases"].as_array().unwrap();
    for case in all {
        problems.extend(judge(&c, case).await);
    }
    let crds = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    for case in cases["vapCases"].as_array().unwrap() {
        let mut case = case.clone();
        // The policy's CRDs, as kubectl would send them.
        assert_eq!(
            resource_of(&case["object"]).resource,
            "customresourcedefinitions"
        );
        case["object"]["metadata"]["namespace"] = Value::Null;
        problems.extend(judge(&c, &case).await);
        let name = case["object"]["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_string();
        let _ = c.delete(&crds, "", &name, &Default::default()).await;
    }
    assert!(
        problems.is_empty(),
        "{} of {} cases differ from Kubernetes:\n{}",
        problems.len(),
        all.len(),
        problems.join("\n")
    );
}
