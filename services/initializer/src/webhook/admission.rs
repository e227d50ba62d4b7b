//! The webhook's core: an `admission.k8s.io/v1` AdmissionReview in, the AdmissionReview to
//! answer out. A new Pod that lacks the sidecar is admitted with a JSON Patch (RFC 6902) from
//! the Pod as sent to the Pod [`inject::injected_pod`] makes, the injection the initializer
//! mode makes; everything else is admitted unchanged. Pure: no I/O.

use base64::Engine;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::configmap::SidecarUnavailable;
use crate::inject::{self, Sidecar};

/// The AdmissionReview version this webhook reads and answers (the only one it registers).
pub const API_VERSION: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

/// Why a request body gets no AdmissionReview back.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON, or not shaped as an AdmissionReview (the message says where): answer 400.
    #[error("the body is not an AdmissionReview: {0}")]
    Malformed(String),
    /// An AdmissionReview of another version: answer 400 (the webhook is registered with
    /// `admissionReviewVersions: ["v1"]`, so an API server does not send one).
    #[error("AdmissionReview of {0:?}: this webhook answers {API_VERSION} only")]
    Version(String),
    /// A Pod CREATE whose `request.object` is not an object: answer 400.
    #[error("the request is a Pod CREATE but request.object is not a Pod")]
    NoPod,
    /// The patch could not be encoded (a bug, not the caller's fault): answer 500.
    #[error("cannot encode the patch: {0}")]
    Encode(String),
}

impl ReviewError {
    /// Whether the caller sent something wrong (HTTP 400) rather than the webhook failing.
    pub fn is_bad_request(&self) -> bool {
        !matches!(self, ReviewError::Encode(_))
    }
}

/// What the answer does, for logs and metrics.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The Pod gets the sidecar: the answer carries a JSON Patch of this many operations.
    Injected { operations: usize },
    /// The Pod has every container and volume of the sidecar already: admitted unchanged.
    AlreadyInjected,
    /// There is no sidecar to inject (its ConfigMap is missing or unreadable): admitted
    /// unchanged.
    NoSidecar(SidecarUnavailable),
    /// Not a Pod CREATE (another resource or operation, a subresource): admitted unchanged.
    NotAPodCreate,
}

/// An AdmissionReview to send back (HTTP 200), and what it does.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub review: Value,
    pub outcome: Outcome,
    /// The object the request is about, for logs: `namespace/name`, or `namespace/prefix*`
    /// for a Pod that only has a `generateName` yet.
    pub object: String,
}

/// The parts of an AdmissionReview the webhook reads; others are ignored.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    api_version: String,
    kind: String,
    request: Option<Request>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    uid: String,
    resource: Resource,
    #[serde(default)]
    sub_resource: String,
    operation: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    object: Value,
}

#[derive(Deserialize)]
struct Resource {
    #[serde(default)]
    group: String,
    version: String,
    resource: String,
}

impl Request {
    fn is_pod_create(&self) -> bool {
        let r = &self.resource;
        (r.group.as_str(), r.version.as_str(), r.resource.as_str()) == ("", "v1", "pods")
            && self.sub_resource.is_empty()
            && self.operation == "CREATE"
    }

    /// `namespace/name` for logs; a Pod created with `generateName` has no name yet.
    fn object(&self) -> String {
        let meta = &self.object["metadata"];
        let name = match (meta["name"].as_str(), meta["generateName"].as_str()) {
            (Some(n), _) if !n.is_empty() => n.to_string(),
            (_, Some(prefix)) if !prefix.is_empty() => format!("{prefix}*"),
            _ => self.name.clone(),
        };
        if self.namespace.is_empty() {
            name
        } else {
            format!("{}/{name}", self.namespace)
        }
    }
}

/// Answers the AdmissionReview `body`. `sidecar` is asked only for a Pod CREATE.
pub fn review(
    body: &[u8],
    sidecar: impl FnOnce() -> Result<Sidecar, SidecarUnavailable>,
) -> Result<Answer, ReviewError> {
    let review: Review =
        serde_json::from_slice(body).map_err(|e| ReviewError::Malformed(e.to_string()))?;
    if review.kind != KIND {
        return Err(ReviewError::Malformed(format!(
            "kind is {:?}, not {KIND:?}",
            review.kind
        )));
    }
    if review.api_version != API_VERSION {
        return Err(ReviewError::Version(review.api_version));
    }
    let request = review
        .request
        .ok_or_else(|| ReviewError::Malformed("it has no request".into()))?;
    if request.uid.is_empty() {
        return Err(ReviewError::Malformed("request.uid is empty".into()));
    }
    let object = request.object();
    if !request.is_pod_create() {
        return Ok(Answer {
            review: allowed(&request.uid, None),
            outcome: Outcome::NotAPodCreate,
            object,
        });
    }
    if !request.object.is_object() {
        return Err(ReviewError::NoPod);
    }
    let sidecar = match sidecar() {
        Ok(s) => s,
        Err(why) => {
            return Ok(Answer {
                review: allowed(&request.uid, None),
                outcome: Outcome::NoSidecar(why),
                object,
            });
        }
    };
    let patch = injection_json_patch(&request.object, &sidecar);
    if patch.0.is_empty() {
        return Ok(Answer {
            review: allowed(&request.uid, None),
            outcome: Outcome::AlreadyInjected,
            object,
        });
    }
    let encoded = serde_json::to_vec(&patch).map_err(|e| ReviewError::Encode(e.to_string()))?;
    Ok(Answer {
        review: allowed(&request.uid, Some(&encoded)),
        outcome: Outcome::Injected {
            operations: patch.0.len(),
        },
        object,
    })
}

/// The JSON Patch from `pod` to `pod` with the sidecar; empty when it has the sidecar already.
pub fn injection_json_patch(pod: &Value, sidecar: &Sidecar) -> json_patch::Patch {
    json_patch::diff(pod, &inject::injected_pod(pod, sidecar))
}

/// The AdmissionReview admitting request `uid`, with the JSON Patch `patch` when there is one.
fn allowed(uid: &str, patch: Option<&[u8]>) -> Value {
    let mut response = json!({"uid": uid, "allowed": true});
    if let Some(patch) = patch {
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(patch));
    }
    json!({"apiVersion": API_VERSION, "kind": KIND, "response": response})
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use keel_patch::{BuiltinSchema, apply_strategic_merge_patch};
    use keel_runtime::ObjectKey;

    const INITIALIZER: &str = "envoy.initializer.kubernetes.io";

    use crate::inject::testing::CONFIG;

    fn sidecar() -> Result<Sidecar, SidecarUnavailable> {
        Ok(Sidecar::from_config(CONFIG).unwrap())
    }

    fn myapp_pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "myapp-pod", "namespace": "default", "labels": {"app": "myapp"}},
            "spec": {"containers": [{"name": "myapp-container", "image": "busybox",
                "command": ["sh", "-c", "echo Hello Kubernetes! && sleep 3600"]}]}
        })
    }

    fn pod_create(pod: &Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "default",
                "operation": "CREATE",
                "userInfo": {"username": "admin", "groups": ["system:masters"]},
                "object": pod,
                "oldObject": null,
                "dryRun": false,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
            }
        }))
        .unwrap()
    }

    fn decoded_patch(review: &Value) -> json_patch::Patch {
        let b64 = review["response"]["patch"].as_str().unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// The initializer mode's Pod: its strategic merge patch applied to `pod`.
    fn initializer_output(pod: &Value) -> Value {
        let sidecar = sidecar().unwrap();
        let patch = inject::injection_patch(pod, &sidecar, INITIALIZER)
            .unwrap()
            .unwrap();
        let schema = BuiltinSchema::for_kind("v1", "Pod").unwrap();
        apply_strategic_merge_patch(pod, &patch, &schema).unwrap()
    }

    #[test]
    fn a_new_pod_gets_the_sidecar_the_initializer_mode_gives_it() {
        let pod = myapp_pod();
        let answer = review(&pod_create(&pod), sidecar).unwrap();
        assert_eq!(answer.object, "default/myapp-pod");
        let response = &answer.review["response"];
        assert_eq!(answer.review["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer.review["kind"], "AdmissionReview");
        assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        let patch = decoded_patch(&answer.review);
        assert_eq!(answer.outcome, Outcome::Injected { operations: 2 });
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &patch.0).unwrap();
        assert_eq!(patched, initializer_output(&pod));
        assert_eq!(patched["spec"]["containers"][1]["name"], "envoy");
        assert_eq!(patched["spec"]["volumes"][0]["name"], "envoy-conf");
    }

    #[test]
    fn a_pod_with_containers_and_volumes_gets_the_sidecar_appended() {
        let mut pod = myapp_pod();
        pod["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
        pod["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "data", "mountPath": "/data"}]);
        let answer = review(&pod_create(&pod), sidecar).unwrap();
        let patch = decoded_patch(&answer.review);
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &patch.0).unwrap();
        assert_eq!(patched, initializer_output(&pod));
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "add", "path": "/spec/containers/1",
                    "value": sidecar().unwrap().containers[0]},
                {"op": "add", "path": "/spec/volumes/1",
                    "value": sidecar().unwrap().volumes[0]},
            ])
        );
    }

    #[test]
    fn a_pod_that_has_the_sidecar_is_admitted_unchanged() {
        let pod = initializer_output(&myapp_pod());
        let answer = review(&pod_create(&pod), sidecar).unwrap();
        assert_eq!(answer.outcome, Outcome::AlreadyInjected);
        assert_eq!(
            answer.review["response"],
            json!({"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": true})
        );
    }

    #[test]
    fn without_the_configmap_a_pod_is_admitted_unchanged() {
        let key = ObjectKey::new("default", "envoy-initializer");
        let missing = SidecarUnavailable::Missing(key);
        let answer = review(&pod_create(&myapp_pod()), || Err(missing.clone())).unwrap();
        assert_eq!(answer.outcome, Outcome::NoSidecar(missing));
        assert_eq!(answer.review["response"]["allowed"], true);
        assert!(answer.review["response"].get("patch").is_none());
    }

    #[test]
    fn a_request_that_is_not_a_pod_create_is_admitted_unchanged_without_reading_the_sidecar() {
        let not_asked = || -> Result<Sidecar, SidecarUnavailable> { panic!("sidecar read") };
        let mut body: Value = serde_json::from_slice(&pod_create(&myapp_pod())).unwrap();
        body["request"]["resource"] =
            json!({"group": "", "version": "v1", "resource": "configmaps"});
        body["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
        body["request"]["object"] = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings"}, "data": {"a": "b"}});
        let answer = review(&serde_json::to_vec(&body).unwrap(), not_asked).unwrap();
        assert_eq!(answer.outcome, Outcome::NotAPodCreate);
        assert_eq!(
            answer.review,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": true}})
        );
        for (field, value) in [
            ("operation", json!("UPDATE")),
            ("subResource", json!("status")),
        ] {
            let mut body: Value = serde_json::from_slice(&pod_create(&myapp_pod())).unwrap();
            body["request"][field] = value;
            let answer = review(&serde_json::to_vec(&body).unwrap(), not_asked).unwrap();
            assert_eq!(answer.outcome, Outcome::NotAPodCreate, "{field}");
        }
    }

    #[test]
    fn a_pod_with_only_a_generate_name_is_named_by_its_prefix() {
        let mut pod = myapp_pod();
        pod["metadata"] = json!({"generateName": "web-7d4b9-"});
        let answer = review(&pod_create(&pod), sidecar).unwrap();
        assert_eq!(answer.object, "default/web-7d4b9-*");
    }

    #[test]
    fn malformed_bodies_are_refused_with_a_reason() {
        let bad = |body: &[u8]| review(body, sidecar).unwrap_err();
        assert!(matches!(bad(b"{not json"), ReviewError::Malformed(_)));
        assert!(matches!(bad(b""), ReviewError::Malformed(_)));
        assert!(matches!(bad(b"[1, 2]"), ReviewError::Malformed(_)));
        assert_eq!(
            bad(br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#),
            ReviewError::Malformed("it has no request".into())
        );
        assert_eq!(
            bad(br#"{"apiVersion": "v1", "kind": "Pod"}"#),
            ReviewError::Malformed("kind is \"Pod\", not \"AdmissionReview\"".into())
        );
        assert_eq!(
            bad(br#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}"#),
            ReviewError::Version("admission.k8s.io/v1beta1".into())
        );
        let mut body: Value = serde_json::from_slice(&pod_create(&myapp_pod())).unwrap();
        body["request"]["uid"] = json!("");
        assert_eq!(
            bad(&serde_json::to_vec(&body).unwrap()),
            ReviewError::Malformed("request.uid is empty".into())
        );
        body["request"]["uid"] = json!(7);
        let ReviewError::Malformed(why) = bad(&serde_json::to_vec(&body).unwrap()) else {
            panic!("not malformed")
        };
        assert!(why.contains("invalid type"), "{why}");
        body["request"]["uid"] = json!("u");
        body["request"]["object"] = json!("a string");
        assert_eq!(bad(&serde_json::to_vec(&body).unwrap()), ReviewError::NoPod);
        assert!(bad(b"{}").is_bad_request());
    }
}
