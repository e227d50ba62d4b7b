//! `admission.k8s.io/v1` `AdmissionReview`: the request a webhook is sent, and its answer read
//! and checked as Kubernetes' `VerifyAdmissionResponse` checks it.

use std::collections::BTreeMap;

use base64::Engine;
use bytes::Bytes;
use keel_api::{ApiError, Object, Reason, ResourceInfo, Target};
use serde_json::{Value, json};

use super::Attributes;

/// A review to send: its `request.uid`, and its JSON.
pub struct Review {
    pub uid: String,
    pub body: Bytes,
    /// `request`, as CEL's `request` variable sees it (`matchConditions`).
    pub request: Value,
}

/// The review of write `a`, for a webhook that matched resource `matched`; `obj` and `old`
/// at `matched`'s version.
pub fn request(
    a: &Attributes<'_>,
    matched: &ResourceInfo,
    obj: Option<&Object>,
    old: Option<&Object>,
) -> Review {
    let mut request = attributes(a, matched);
    let uid = request["uid"].as_str().unwrap_or_default().to_string();
    if let Some(r) = request.as_object_mut() {
        r.insert(
            "object".into(),
            obj.map_or(Value::Null, |o| Value::Object(o.as_map().clone())),
        );
        r.insert(
            "oldObject".into(),
            old.map_or(Value::Null, |o| Value::Object(o.as_map().clone())),
        );
    }
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": request,
    });
    let body = Bytes::from(serde_json::to_vec(&review).unwrap_or_default());
    let mut request = review["request"].clone();
    if let Some(r) = request.as_object_mut() {
        r.remove("object");
        r.remove("oldObject");
    }
    Review { uid, body, request }
}

/// The `AdmissionRequest` of write `a` for resource `matched`, without its objects: what a
/// webhook's `matchConditions` and a policy's expressions see as `request`.
pub fn attributes(a: &Attributes<'_>, matched: &ResourceInfo) -> Value {
    let uid = uuid::Uuid::new_v4().to_string();
    let (group, version, kind) = a.kind(matched);
    let (req_group, req_version, req_kind) = a.kind(a.info);
    let gvr = |info: &ResourceInfo| json!({"group": info.gvr.group, "version": info.gvr.version, "resource": info.gvr.resource});
    let user = match a.requester.user {
        Some(u) => {
            let mut user = json!({"username": u.name, "groups": u.groups});
            if !u.uid.is_empty() {
                user["uid"] = json!(u.uid);
            }
            user
        }
        None => json!({}),
    };
    let mut options = json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": a.operation.options_kind(),
    });
    if a.dry_run {
        options["dryRun"] = json!(["All"]);
    }
    if !a.manager.is_empty() && a.operation != super::Operation::Delete {
        options["fieldManager"] = json!(a.manager);
    }
    let mut request = json!({
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": gvr(matched),
        "requestKind": {"group": req_group, "version": req_version, "kind": req_kind},
        "requestResource": gvr(a.info),
        "name": a.name,
        "operation": a.operation.as_str(),
        "userInfo": user,
        "dryRun": a.dry_run,
        "options": options,
    });
    if !a.namespace.is_empty() {
        request["namespace"] = json!(a.namespace);
    } else if super::is_namespace(a.info) {
        // A Namespace is in itself, as Kubernetes' admission attributes say.
        request["namespace"] = json!(a.name);
    }
    if !a.subresource.is_empty() {
        request["subResource"] = json!(a.subresource);
        request["requestSubResource"] = json!(a.subresource);
    }
    request
}

/// A webhook's answer.
#[derive(Debug, Default)]
pub struct Answer {
    pub allowed: bool,
    /// `response.status` (a `Status`), for a denial's message and code.
    pub status: Value,
    pub patch: Option<json_patch::Patch>,
    pub warnings: Vec<String>,
    pub audit_annotations: BTreeMap<String, String>,
}

/// Reads the answer `body` to the review `uid`; what is wrong with it, in Kubernetes' words
/// (`received invalid webhook response: …`).
pub fn answer(body: &[u8], uid: &str, mutating: bool) -> Result<Answer, String> {
    let invalid = |why: String| format!("received invalid webhook response: {why}");
    let review: Value = serde_json::from_slice(body).map_err(|e| invalid(e.to_string()))?;
    let api_version = review["apiVersion"].as_str().unwrap_or_default();
    let kind = review["kind"].as_str().unwrap_or_default();
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(invalid(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"
        )));
    }
    let Some(response) = review.get("response").and_then(Value::as_object) else {
        return Err(invalid("webhook response was absent".into()));
    };
    let got = response
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if got != uid {
        return Err(invalid(format!(
            "expected response.uid={uid:?}, got {got:?}"
        )));
    }
    let patch_type = response.get("patchType").and_then(Value::as_str);
    let patch = match response.get("patch").and_then(Value::as_str) {
        None | Some("") if patch_type.is_some_and(|t| !t.is_empty()) => {
            return Err(invalid(
                "webhook returned response.patchType but not response.patch".into(),
            ));
        }
        None | Some("") => None,
        Some(_) if !mutating => {
            return Err(invalid(
                "validating webhook may not return response.patch".into(),
            ));
        }
        Some(encoded) => {
            match patch_type {
                Some("JSONPatch") => {}
                None | Some("") => {
                    return Err(invalid(
                        "webhook returned response.patch but not response.patchType".into(),
                    ));
                }
                Some(other) => {
                    return Err(invalid(format!(
                        "webhook returned invalid response.patchType of {other:?}"
                    )));
                }
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| invalid(format!("response.patch is not base64: {e}")))?;
            let patch: json_patch::Patch = serde_json::from_slice(&bytes)
                .map_err(|e| invalid(format!("response.patch is not a JSON patch: {e}")))?;
            Some(patch)
        }
    };
    let strings = |k: &str| -> Vec<String> {
        response
            .get(k)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let audit_annotations = response
        .get("auditAnnotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    Ok(Answer {
        allowed: response.get("allowed").and_then(Value::as_bool) == Some(true),
        status: response.get("status").cloned().unwrap_or(Value::Null),
        patch,
        warnings: strings("warnings"),
        audit_annotations,
    })
}

/// A webhook's denial, as Kubernetes' `ToStatusErr` words it: `admission webhook "x" denied
/// the request: <its message>`, with its code (at least 400).
pub fn denied(webhook: &str, target: Target, status: &Value) -> ApiError {
    let by = format!("admission webhook {webhook:?} denied the request");
    let message = status["message"].as_str().unwrap_or_default();
    let reason = status["reason"].as_str().unwrap_or_default();
    let message = if !message.is_empty() {
        format!("{by}: {message}")
    } else if !reason.is_empty() {
        format!("{by}: {reason}")
    } else {
        format!("{by} without explanation")
    };
    let code = status["code"].as_u64().unwrap_or(0).max(400);
    let mut e = ApiError::new(reason_of(code), target, message);
    // The webhook's field causes, as kubectl shows them.
    e.causes = status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| keel_api::FieldCause {
            reason: c["reason"].as_str().unwrap_or_default().to_string(),
            message: c["message"].as_str().unwrap_or_default().to_string(),
            field: c["field"].as_str().unwrap_or_default().to_string(),
        })
        .take(100)
        .collect();
    e
}

/// The reason keel answers a webhook's code with.
fn reason_of(code: u64) -> Reason {
    match code {
        401 => Reason::Unauthorized,
        403 => Reason::Forbidden,
        404 => Reason::NotFound,
        405 => Reason::MethodNotAllowed,
        409 => Reason::Conflict,
        410 => Reason::Expired,
        413 => Reason::RequestEntityTooLarge,
        422 => Reason::Invalid,
        429 => Reason::TooManyRequests,
        500..=502 => Reason::InternalError,
        503 => Reason::ServiceUnavailable,
        504 => Reason::Timeout,
        c if c >= 500 => Reason::InternalError,
        _ => Reason::BadRequest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(response: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        }))
        .unwrap_or_default()
    }

    #[test]
    fn an_answer_with_a_patch_is_read() {
        let patch = base64::engine::general_purpose::STANDARD
            .encode(r#"[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]"#);
        let a = answer(
            &review(
                json!({"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": patch, "warnings": ["w"], "auditAnnotations": {"k": "v"}}),
            ),
            "u",
            true,
        );
        let a = a.unwrap_or_default();
        assert!(a.allowed);
        assert!(a.patch.is_some());
        assert_eq!(a.warnings, vec!["w".to_string()]);
        assert_eq!(a.audit_annotations.get("k").map(String::as_str), Some("v"));
    }

    #[test]
    fn bad_answers_are_refused_in_kubernetes_words() {
        let table = [
            (
                review(json!({"uid": "other", "allowed": true})),
                true,
                "expected response.uid=\"u\", got \"other\"",
            ),
            (
                b"{}".to_vec(),
                true,
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview",
            ),
            (
                b"garbage".to_vec(),
                true,
                "received invalid webhook response",
            ),
            (
                review(json!({"uid": "u", "allowed": true, "patch": "W10="})),
                true,
                "webhook returned response.patch but not response.patchType",
            ),
            (
                review(
                    json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"}),
                ),
                false,
                "validating webhook may not return response.patch",
            ),
            (
                serde_json::to_vec(
                    &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
                )
                .unwrap_or_default(),
                true,
                "webhook response was absent",
            ),
        ];
        for (body, mutating, want) in table {
            match answer(&body, "u", mutating) {
                Ok(_) => panic!("accepted {}", String::from_utf8_lossy(&body)),
                Err(e) => assert!(e.contains(want), "{e} lacks {want}"),
            }
        }
    }

    #[test]
    fn a_denial_is_worded_as_kubernetes_words_it() {
        let t = Target::new("", "pods", "p");
        let e = denied(
            "deny.example.com",
            t.clone(),
            &json!({"message": "no pods today", "code": 403}),
        );
        assert_eq!(
            e.message,
            "admission webhook \"deny.example.com\" denied the request: no pods today"
        );
        assert_eq!(e.reason, Reason::Forbidden);
        let e = denied("deny.example.com", t.clone(), &Value::Null);
        assert_eq!(
            e.message,
            "admission webhook \"deny.example.com\" denied the request without explanation"
        );
        assert_eq!(e.reason, Reason::BadRequest);
        let e = denied(
            "deny.example.com",
            t.clone(),
            &json!({"reason": "Nope", "code": 200}),
        );
        let with_causes = denied(
            "deny.example.com",
            t,
            &json!({"message": "bad", "code": 422, "details": {"causes": [{"reason": "FieldValueInvalid", "message": "no", "field": "spec.x"}]}}),
        );
        assert_eq!(with_causes.reason, Reason::Invalid);
        assert_eq!(with_causes.causes[0].field, "spec.x");
        assert_eq!(
            e.message,
            "admission webhook \"deny.example.com\" denied the request: Nope"
        );
        assert_eq!(e.reason, Reason::BadRequest);
    }
}
