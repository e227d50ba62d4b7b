//! Both directions together: JSON → protobuf → JSON gives the object back, bodies built by
//! hand (as Go would send them) decode, and wrong values are errors, never panics.

use keel_api::{ApiError, FieldCause, Reason, Target};
use prost::Message as _;
use prost_reflect::{DynamicMessage, Value};
use serde_json::{Value as Json, json};

use super::*;

/// The object back from its protobuf answer, as the decoder reads a body.
fn round_trip(v: &Json) -> Json {
    let body = value(v).unwrap().expect("a protobuf form");
    assert!(body.starts_with(MAGIC));
    let back = to_json(&body, &Target::default()).unwrap();
    serde_json::from_slice(&back).unwrap()
}

/// The message inside an envelope.
fn unwrap_envelope(body: &[u8]) -> (String, String, Vec<u8>) {
    let pool = pool().unwrap();
    let unknown = pool.get_message_by_name(UNKNOWN).unwrap();
    let unknown = DynamicMessage::decode(unknown, body.strip_prefix(MAGIC).unwrap()).unwrap();
    let type_meta = unknown.get_field_by_name("typeMeta").unwrap();
    let type_meta = type_meta.as_message().unwrap();
    let text = |f: &str| {
        type_meta
            .get_field_by_name(f)
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    };
    let raw = unknown
        .get_field_by_name("raw")
        .unwrap()
        .as_bytes()
        .unwrap()
        .to_vec();
    (text("apiVersion"), text("kind"), raw)
}

#[test]
fn a_pod_round_trips_with_int_or_strings_quantities_and_times() {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-1",
            "namespace": "team",
            "uid": "7f4e0b9c-1d2a-4c7b-9a33-8e2f5d6c1a00",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"note": "hi"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                "uid": "1", "controller": true, "blockOwnerDeletion": true}],
            "finalizers": ["keel.dev/x"],
            "managedFields": [{"manager": "kubectl", "operation": "Update",
                "apiVersion": "v1", "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]
        },
        "spec": {
            "containers": [{
                "name": "web",
                "image": "nginx:1.27",
                "args": ["-g", "daemon off;"],
                "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                "resources": {
                    "limits": {"cpu": "500m", "memory": "128Mi"},
                    "requests": {"cpu": "250m", "memory": "64Mi"}
                },
                "livenessProbe": {"httpGet": {"path": "/", "port": "http"},
                    "periodSeconds": 10},
                "readinessProbe": {"tcpSocket": {"port": 80}},
                "env": [{"name": "A", "valueFrom":
                    {"configMapKeyRef": {"name": "cfg", "key": "a", "optional": true}}}],
                "envFrom": [{"secretRef": {"name": "creds"}}],
                "volumeMounts": [{"name": "config", "mountPath": "/etc/web"}]
            }],
            "volumes": [
                {"name": "config", "configMap": {"name": "cfg", "defaultMode": 420}},
                {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}
            ],
            "terminationGracePeriodSeconds": 30,
            "restartPolicy": "Always"
        },
        "status": {
            "phase": "Running",
            "startTime": "2024-05-01T10:00:01Z",
            "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0,
                "image": "nginx:1.27", "imageID": "sha",
                "state": {"running": {"startedAt": "2024-05-01T10:00:02Z"}}}]
        }
    });
    assert_eq!(round_trip(&pod), pod);
}

#[test]
fn a_secrets_data_travels_as_bytes() {
    use base64::Engine as _;
    let secret_bytes = b"hello\x00\xffworld";
    let encoded = base64::engine::general_purpose::STANDARD.encode(secret_bytes);
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "default"},
        "type": "Opaque",
        "data": {"key": encoded}
    });
    assert_eq!(round_trip(&secret), secret);
    // On the wire the bytes are themselves, not their base64.
    let (api_version, kind, raw) = unwrap_envelope(&value(&secret).unwrap().unwrap());
    assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "Secret"));
    assert!(raw.windows(secret_bytes.len()).any(|w| w == secret_bytes));
    assert!(!raw.windows(encoded.len()).any(|w| w == encoded.as_bytes()));
    // A ConfigMap's binaryData too.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
        "data": {"a": "1"}, "binaryData": {"b": encoded}});
    assert_eq!(round_trip(&cm), cm);
}

#[test]
fn a_deployment_round_trips_with_an_explicit_zero() {
    let d = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team", "generation": 1,
            "creationTimestamp": "2024-05-01T10:00:00Z"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx",
                    "env": [{"name": "A", "value": "1"}]}]}
            },
            "strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600
        },
        "status": {"observedGeneration": 1, "replicas": 0,
            "conditions": [{"type": "Available", "status": "True",
                "lastUpdateTime": "2024-05-01T10:00:00Z",
                "lastTransitionTime": "2024-05-01T10:00:00Z", "reason": "MinimumReplicasAvailable",
                "message": "ok"}]}
    });
    assert_eq!(round_trip(&d), d);
}

#[test]
fn a_list_carries_list_meta_and_plain_items() {
    let items: Vec<Vec<u8>> = ["a", "b"]
        .iter()
        .map(|n| {
            serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": n, "resourceVersion": "7"}, "data": {"k": n}}))
            .unwrap()
        })
        .collect();
    let metadata = json!({"resourceVersion": "42", "continue": "next", "remainingItemCount": 3});
    let body = list("v1", "ConfigMapList", &metadata, &items)
        .unwrap()
        .unwrap();
    let (api_version, kind, _) = unwrap_envelope(&body);
    assert_eq!(
        (api_version.as_str(), kind.as_str()),
        ("v1", "ConfigMapList")
    );
    let back: Json = serde_json::from_slice(&to_json(&body, &Target::default()).unwrap()).unwrap();
    assert_eq!(
        back,
        json!({
            "apiVersion": "v1", "kind": "ConfigMapList", "metadata": metadata,
            "items": [
                {"metadata": {"name": "a", "resourceVersion": "7"}, "data": {"k": "a"}},
                {"metadata": {"name": "b", "resourceVersion": "7"}, "data": {"k": "b"}},
            ]
        })
    );
    // The same list written from its JSON value (a DeleteCollection's answer) is the same.
    let as_value = json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": metadata,
        "items": items.iter().map(|i| serde_json::from_slice::<Json>(i).unwrap()).collect::<Vec<_>>()});
    assert_eq!(round_trip(&as_value), back);
}

#[test]
fn a_status_round_trips() {
    let mut e = ApiError::invalid(
        Target::new("apps", "Deployment", "web"),
        vec![FieldCause::required("spec.selector")],
    );
    e.retry_after_seconds = Some(2);
    let status = e.to_status_json();
    let back = round_trip(&status);
    assert_eq!(back, status);
    assert_eq!(
        ApiError::from_status_json(&serde_json::to_vec(&back).unwrap()),
        Some(e)
    );
    let not_found = ApiError::not_found(Target::new("", "configmaps", "x")).to_status_json();
    let (api_version, kind, _) = unwrap_envelope(&value(&not_found).unwrap().unwrap());
    assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "Status"));
}

#[test]
fn a_field_whose_json_name_is_not_its_protobuf_name_keeps_its_json_name() {
    let class = json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "nginx"},
        "spec": {"controller": "example.com/ingress",
            "parameters": {"apiGroup": "example.com", "kind": "Params", "name": "p"}}});
    assert_eq!(round_trip(&class), class);
}

#[test]
fn string_list_types_are_json_lists() {
    let review = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "SelfSubjectReview",
        "metadata": {"creationTimestamp": "2024-05-01T10:00:00Z"},
        "status": {"userInfo": {"username": "alice", "groups": ["dev"],
            "extra": {"scopes": ["a", "b"]}}}
    });
    assert_eq!(round_trip(&review), review);
}

#[test]
fn a_watch_frame_is_a_length_then_a_raw_watch_event() {
    let frame = watch_frame("ADDED", b"k8s\x00xyz");
    let mut want = vec![0, 0, 0, 18];
    want.extend_from_slice(&[0x0a, 5]);
    want.extend_from_slice(b"ADDED");
    want.extend_from_slice(&[0x12, 9, 0x0a, 7]);
    want.extend_from_slice(b"k8s\x00xyz");
    assert_eq!(frame, want);

    // A real event: its object is the enveloped object.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "resourceVersion": "5"}});
    let enveloped = value(&cm).unwrap().unwrap();
    let frame = watch_frame("MODIFIED", &enveloped);
    let length = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(length, frame.len() - 4);
    let event = pool()
        .unwrap()
        .get_message_by_name(&format!("{META}.WatchEvent"))
        .unwrap();
    let event = DynamicMessage::decode(event, &frame[4..]).unwrap();
    assert_eq!(
        event.get_field_by_name("type").unwrap().as_str(),
        Some("MODIFIED")
    );
    let object = event.get_field_by_name("object").unwrap();
    let raw = object
        .as_message()
        .unwrap()
        .get_field_by_name("raw")
        .unwrap();
    assert_eq!(raw.as_bytes().unwrap().as_ref(), enveloped.as_slice());
}

#[test]
fn a_bookmark_is_an_object_of_the_kind_with_only_its_resource_version() {
    let bookmark = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"resourceVersion": "12",
            "annotations": {"k8s.io/initial-events-end": "true"}}});
    let body = value(&bookmark).unwrap().unwrap();
    let (api_version, kind, _) = unwrap_envelope(&body);
    assert_eq!(
        (api_version.as_str(), kind.as_str()),
        ("apps/v1", "Deployment")
    );
    assert_eq!(round_trip(&bookmark), bookmark);
}

#[test]
fn kinds_without_a_message_have_no_protobuf_form() {
    let network = json!({"apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
        "metadata": {"name": "n"}});
    assert_eq!(value(&network).unwrap(), None);
    assert_eq!(value(&json!(["not", "an", "object"])).unwrap(), None);
}

#[test]
fn values_of_the_wrong_type_are_internal_errors_naming_the_field() {
    let pod = |spec: Json| {
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p"}, "spec": spec})
    };
    let cases = [
        (pod(json!({"containers": "x"})), ".spec.containers"),
        (
            pod(json!({"containers": [{"name": 1}]})),
            ".spec.containers[0].name",
        ),
        (pod(json!([])), ".spec"),
        (
            pod(json!({"containers": [{"name": "c", "ports": [{"containerPort": 1e10}]}]})),
            ".spec.containers[0].ports[0].containerPort",
        ),
        (
            pod(json!({"containers": [{"name": "c", "ports": [{"containerPort": 1.5}]}]})),
            ".spec.containers[0].ports[0].containerPort",
        ),
        (
            pod(json!({"containers": [{"name": "c", "livenessProbe":
                {"httpGet": {"port": true}}}]})),
            ".spec.containers[0].livenessProbe.httpGet.port",
        ),
        (
            pod(json!({"containers": [{"name": "c", "resources":
                {"limits": {"cpu": {"x": 1}}}}]})),
            ".spec.containers[0].resources.limits[\"cpu\"]",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "labels": {"a": 1}}}),
            ".metadata.labels[\"a\"]",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "creationTimestamp": "yesterday"}}),
            ".metadata.creationTimestamp",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "p"},
                "data": {"a": "%%%"}}),
            ".data[\"a\"]",
        ),
    ];
    for (v, path) in cases {
        let e = value(&v).expect_err(&v.to_string());
        assert_eq!(e.reason, Reason::InternalError, "{v}");
        assert!(e.message.contains(path), "{path}: {}", e.message);
    }
    // A list item that is not an object.
    let e = list("v1", "ConfigMapList", &json!({}), &[b"[1]".to_vec()]).unwrap_err();
    assert_eq!(e.reason, Reason::InternalError);
}

#[test]
fn unknown_fields_and_nulls_are_left_out() {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "initializers": {"pending": [{"name": "a.b.c"}]},
            "deletionTimestamp": null},
        "data": {"a": "1"}, "somethingElse": {"x": 1}});
    assert_eq!(
        round_trip(&cm),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"a": "1"}})
    );
}

/// A message built field by field, as Go's generated code would fill it.
fn build(name: &str, fields: &[(&str, Value)]) -> DynamicMessage {
    let desc = pool().unwrap().get_message_by_name(name).unwrap();
    let mut m = DynamicMessage::new(desc);
    for (f, v) in fields {
        m.set_field_by_name(f, v.clone());
    }
    m
}

fn msg(name: &str, fields: &[(&str, Value)]) -> Value {
    Value::Message(build(name, fields))
}

fn s(text: &str) -> Value {
    Value::String(text.into())
}

/// A body as client-go sends it: the magic, the envelope, the message.
fn body(api_version: &str, kind: &str, m: &DynamicMessage) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    let unknown = build(
        UNKNOWN,
        &[
            (
                "typeMeta",
                msg(
                    "k8s.io.apimachinery.pkg.runtime.TypeMeta",
                    &[("apiVersion", s(api_version)), ("kind", s(kind))],
                ),
            ),
            ("raw", Value::Bytes(m.encode_to_vec().into())),
        ],
    );
    unknown.encode(&mut out).unwrap();
    out
}

fn decoded(api_version: &str, kind: &str, m: &DynamicMessage) -> Json {
    let json = to_json(&body(api_version, kind, m), &Target::default()).unwrap();
    serde_json::from_slice(&json).unwrap()
}

fn meta(name: &str) -> Value {
    msg(&format!("{META}.ObjectMeta"), &[("name", s(name))])
}

#[test]
fn hand_built_bodies_of_the_newly_vendored_kinds_decode() {
    let job = build(
        "k8s.io.api.batch.v1.Job",
        &[
            ("metadata", meta("once")),
            (
                "spec",
                msg(
                    "k8s.io.api.batch.v1.JobSpec",
                    &[
                        ("backoffLimit", Value::I32(2)),
                        (
                            "template",
                            msg(
                                "k8s.io.api.core.v1.PodTemplateSpec",
                                &[(
                                    "spec",
                                    msg(
                                        "k8s.io.api.core.v1.PodSpec",
                                        &[
                                            (
                                                "containers",
                                                Value::List(vec![msg(
                                                    "k8s.io.api.core.v1.Container",
                                                    &[("name", s("once")), ("image", s("busybox"))],
                                                )]),
                                            ),
                                            ("restartPolicy", s("Never")),
                                        ],
                                    ),
                                )],
                            ),
                        ),
                    ],
                ),
            ),
        ],
    );
    assert_eq!(
        decoded("batch/v1", "Job", &job),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once"},
            "spec": {"backoffLimit": 2, "template": {"spec": {
                "containers": [{"name": "once", "image": "busybox"}],
                "restartPolicy": "Never"}}}})
    );

    let port = msg(
        "k8s.io.api.networking.v1.ServiceBackendPort",
        &[("number", Value::I32(80))],
    );
    let ingress = build(
        "k8s.io.api.networking.v1.Ingress",
        &[
            ("metadata", meta("web")),
            (
                "spec",
                msg(
                    "k8s.io.api.networking.v1.IngressSpec",
                    &[(
                        "rules",
                        Value::List(vec![msg(
                            "k8s.io.api.networking.v1.IngressRule",
                            &[
                                ("host", s("example.com")),
                                (
                                    "ingressRuleValue",
                                    msg(
                                        "k8s.io.api.networking.v1.IngressRuleValue",
                                        &[(
                                            "http",
                                            msg(
                                                "k8s.io.api.networking.v1.HTTPIngressRuleValue",
                                                &[(
                                                    "paths",
                                                    Value::List(vec![msg(
                                                        "k8s.io.api.networking.v1.HTTPIngressPath",
                                                        &[
                                                            ("path", s("/")),
                                                            ("pathType", s("Prefix")),
                                                            (
                                                                "backend",
                                                                msg(
                                                                    "k8s.io.api.networking.v1.IngressBackend",
                                                                    &[(
                                                                        "service",
                                                                        msg(
                                                                            "k8s.io.api.networking.v1.IngressServiceBackend",
                                                                            &[
                                                                                ("name", s("web")),
                                                                                ("port", port),
                                                                            ],
                                                                        ),
                                                                    )],
                                                                ),
                                                            ),
                                                        ],
                                                    )]),
                                                )],
                                            ),
                                        )],
                                    ),
                                ),
                            ],
                        )]),
                    )],
                ),
            ),
        ],
    );
    let ingress = decoded("networking.k8s.io/v1", "Ingress", &ingress);
    // Go embeds IngressRuleValue inline: its JSON has `http` on the rule itself.
    assert_eq!(
        ingress["spec"]["rules"][0],
        json!({"host": "example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}})
    );
    assert_eq!(round_trip(&ingress), ingress);

    let pdb = build(
        "k8s.io.api.policy.v1.PodDisruptionBudget",
        &[
            ("metadata", meta("web")),
            (
                "spec",
                msg(
                    "k8s.io.api.policy.v1.PodDisruptionBudgetSpec",
                    &[(
                        "minAvailable",
                        msg(
                            "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
                            &[("type", Value::I64(1)), ("strVal", s("50%"))],
                        ),
                    )],
                ),
            ),
        ],
    );
    assert_eq!(
        decoded("policy/v1", "PodDisruptionBudget", &pdb)["spec"],
        json!({"minAvailable": "50%"})
    );

    let class = build(
        "k8s.io.api.storage.v1.StorageClass",
        &[
            ("metadata", meta("fast")),
            ("provisioner", s("example.com/disk")),
            ("allowVolumeExpansion", Value::Bool(true)),
        ],
    );
    assert_eq!(
        decoded("storage.k8s.io/v1", "StorageClass", &class),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "fast"}, "provisioner": "example.com/disk",
            "allowVolumeExpansion": true})
    );
}

#[test]
fn an_eviction_from_kubectl_drain_decodes_from_kubernetes_own_proto() {
    let eviction = build(
        "k8s.io.api.policy.v1.Eviction",
        &[
            (
                "metadata",
                msg(
                    &format!("{META}.ObjectMeta"),
                    &[("name", s("web-1")), ("namespace", s("team"))],
                ),
            ),
            (
                "deleteOptions",
                msg(
                    &format!("{META}.DeleteOptions"),
                    &[
                        ("gracePeriodSeconds", Value::I64(30)),
                        ("dryRun", Value::List(vec![s("All")])),
                    ],
                ),
            ),
        ],
    );
    assert_eq!(
        decoded("policy/v1", "Eviction", &eviction),
        json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": "web-1", "namespace": "team"},
            "deleteOptions": {"gracePeriodSeconds": 30, "dryRun": ["All"]}})
    );
}
