//! Built-in kinds' validation errors in Kubernetes' words: the whole message of the 422 a
//! client sees, and its causes, for the refusals users meet most. Each expected text is
//! Kubernetes 1.32's, from the function named beside it (`k8s.io/kubernetes/pkg/apis/...`
//! validation, apimachinery's `field.Error` and `errors.NewInvalid`).

use keel_api::{ApiError, Reason};
use serde_json::{Value, json};

use crate::registry::testing::{Fixture, deployment};

async fn refused(f: &Fixture, obj: Value) -> ApiError {
    let e = f.create(obj).await.unwrap_err();
    assert_eq!(e.reason, Reason::Invalid, "{e}");
    e
}

/// `obj` with the field at `pointer` set (its parent must exist).
fn with(mut obj: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    obj.pointer_mut(parent).unwrap()[key] = value;
    obj
}

fn service(port: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": "s", "namespace": "default"},
           "spec": {"ports": [{"port": port}]}})
}

#[tokio::test]
async fn built_in_refusals_are_worded_as_kubernetes_words_them() {
    let f = Fixture::new().await;
    let cases: Vec<(Value, &str)> = vec![
        // apps ValidateDeploymentSpec: ValidateNonnegativeField(int64(spec.Replicas)), a Go
        // int64 printed bare; IsNegativeErrorMsg.
        (
            with(deployment("web"), "/spec/replicas", json!(-1)),
            "Deployment.apps \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0",
        ),
        // Two errors: errors.NewInvalid prints the aggregate, in brackets.
        (
            with(
                with(deployment("web"), "/spec/replicas", json!(-1)),
                "/spec/revisionHistoryLimit",
                json!(-2),
            ),
            "Deployment.apps \"web\" is invalid: [spec.replicas: Invalid value: -1: must be greater than or equal to 0, spec.revisionHistoryLimit: Invalid value: -2: must be greater than or equal to 0]",
        ),
        // core ValidateServicePort: field.Invalid(idxPath.Child("port"), sp.Port,
        // InclusiveRangeError(1, 65535)).
        (
            service(json!(0)),
            "Service \"s\" is invalid: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
        ),
        // ValidateObjectMeta's name: NameIsDNSSubdomain's message.
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad", "namespace": "default"}}),
            "ConfigMap \"Bad\" is invalid: metadata.name: Invalid value: \"Bad\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ),
        // apimachinery ValidateLabels: a value's errors at the labels' path, IsValidLabelValue's
        // RegexError; ValidateLabelName: IsQualifiedName's "name part".
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "namespace": "default", "labels": {"app": "bad value!"}}}),
            "ConfigMap \"c\" is invalid: metadata.labels: Invalid value: \"bad value!\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "namespace": "default", "labels": {"-app": "x"}}}),
            "ConfigMap \"c\" is invalid: metadata.labels: Invalid value: \"-app\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
        // core ValidateConfigMap: IsConfigMapKey at data[<key>].
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "c", "namespace": "default"}, "data": {"..conf": "x"}}),
            "ConfigMap \"c\" is invalid: data[..conf]: Invalid value: \"..conf\": must not start with '..'",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "s", "namespace": "default"}, "data": {"a b": "eA=="}}),
            "Secret \"s\" is invalid: data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
        ),
        // core ValidateNamespaceName: a DNS label, IsDNS1123Label's RegexError.
        (
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "Team.A"}}),
            "Namespace \"Team.A\" is invalid: metadata.name: Invalid value: \"Team.A\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        ),
        // autoscaling ValidateHorizontalPodAutoscalerSpec: minReplicas < 1.
        (
            json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                   "metadata": {"name": "h", "namespace": "default"},
                   "spec": {"minReplicas": 0, "maxReplicas": 3,
                            "scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"}}}),
            "HorizontalPodAutoscaler.autoscaling \"h\" is invalid: spec.minReplicas: Invalid value: 0: must be greater than or equal to 1",
        ),
    ];
    let mut differences = Vec::new();
    for (obj, want) in cases {
        let e = refused(&f, obj).await;
        if e.message != want {
            differences.push(format!("want {want}\n got {}", e.message));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
