//! CRD conversion webhooks (`spec.conversion.strategy: Webhook`), as Kubernetes'
//! apiextensions server calls them: a `ConversionReview` v1 with the objects to convert and the
//! version wanted, over the same HTTPS client as admission webhooks, and the answer checked
//! (as many objects, each at the version asked, its metadata unchanged but for labels and
//! annotations) before anything is served or stored.

use std::time::Duration;

use keel_api::{ApiError, FieldCause, Metadata, Object, Reason, ResourceInfo, Target};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_rustls::rustls::pki_types::CertificateDer;

use super::Caller;
use super::config::{self, Endpoint};

/// How long a conversion webhook is given (Kubernetes' fixed 30 s).
const TIMEOUT: Duration = Duration::from_secs(30);
/// The most objects one review carries (a List's page is converted in reviews of this many).
const BATCH: usize = 500;

/// Where a CRD's objects are converted.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversionWebhook {
    pub endpoint: Endpoint,
    pub ca: Vec<CertificateDer<'static>>,
}

/// The conversion webhook of a CRD's `spec` (`None`: strategy `None`, or an unreadable one,
/// which validation keeps out).
pub fn of_crd(spec: &Value) -> Option<ConversionWebhook> {
    let conversion = &spec["conversion"];
    if conversion["strategy"] != "Webhook" {
        return None;
    }
    let client = &conversion["webhook"]["clientConfig"];
    Some(ConversionWebhook {
        endpoint: config::endpoint(Some(client))?,
        ca: client
            .get("caBundle")
            .and_then(|b| config::ca_certificates(b).ok())
            .unwrap_or_default(),
    })
}

/// Kubernetes' checks of a CRD's `spec.conversion`.
pub fn validate_crd(spec: &Value, causes: &mut Vec<FieldCause>) {
    let conversion = &spec["conversion"];
    if conversion.is_null() {
        return;
    }
    let strategy = conversion["strategy"].as_str().unwrap_or_default();
    match strategy {
        "None" => {
            if !conversion["webhook"].is_null() {
                causes.push(FieldCause::forbidden(
                    "spec.conversion.webhook",
                    "should not be set when strategy is not set to Webhook",
                ));
            }
        }
        "Webhook" => {
            let webhook = &conversion["webhook"];
            if !webhook.is_object() {
                causes.push(FieldCause {
                    message: "Required value: required when strategy is set to Webhook".into(),
                    ..FieldCause::required("spec.conversion.webhook")
                });
                return;
            }
            let versions: Vec<&str> = webhook["conversionReviewVersions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if versions.is_empty() {
                causes.push(FieldCause {
                    message: "Required value: must specify one of v1, v1beta1".into(),
                    ..FieldCause::required("spec.conversion.webhook.conversionReviewVersions")
                });
            } else if !versions.contains(&"v1") {
                causes.push(FieldCause::invalid(
                    "spec.conversion.webhook.conversionReviewVersions",
                    &versions.join(","),
                    "must include v1: keel sends apiextensions.k8s.io/v1 ConversionReviews only",
                ));
            }
            config::validate_client_config(
                webhook.get("clientConfig"),
                "spec.conversion.webhook.clientConfig",
                causes,
            );
            if spec["preserveUnknownFields"] == true {
                causes.push(FieldCause::invalid(
                    "spec.conversion.strategy",
                    strategy,
                    "must be None if spec.preserveUnknownFields is true",
                ));
            }
        }
        other => causes.push(FieldCause::not_supported(
            "spec.conversion.strategy",
            other,
            &["None", "Webhook"],
        )),
    }
}

impl Caller {
    /// `objects`, of `info`'s resource (any of its versions), at `version`: those at another
    /// version converted by `webhook` (in reviews of at most [`BATCH`]); the rest as they are.
    pub async fn convert_objects(
        &self,
        info: &ResourceInfo,
        webhook: Option<&ConversionWebhook>,
        version: &str,
        mut objects: Vec<Object>,
        deadline: Instant,
    ) -> Result<Vec<Object>, ApiError> {
        let desired = format!("{}/{version}", info.gvr.group);
        let Some(webhook) = webhook else {
            for o in &mut objects {
                o.as_map_mut()
                    .insert("apiVersion".into(), Value::String(desired.clone()));
            }
            return Ok(objects);
        };
        let stale: Vec<usize> = (0..objects.len())
            .filter(|i| objects[*i].api_version() != desired)
            .collect();
        for chunk in stale.chunks(BATCH) {
            let sent: Vec<Object> = chunk.iter().map(|i| objects[*i].clone()).collect();
            let converted = self
                .convert_by_webhook(info, webhook, &desired, &sent, deadline)
                .await?;
            for (i, o) in chunk.iter().zip(converted) {
                objects[*i] = o;
            }
        }
        Ok(objects)
    }

    /// One `ConversionReview` of `objects` to `desired` (`group/version`).
    async fn convert_by_webhook(
        &self,
        info: &ResourceInfo,
        webhook: &ConversionWebhook,
        desired: &str,
        objects: &[Object],
        deadline: Instant,
    ) -> Result<Vec<Object>, ApiError> {
        // Kubernetes names the objects' own version in its errors (the first's, for a list).
        let from = objects.first().map_or(desired, |o| o.api_version());
        let gvk = format!("{from}, Kind={}", info.kind);
        let target = Target::new(&info.gvr.group, &info.gvr.resource, "");
        let error = |what: String| {
            ApiError::new(
                Reason::InternalError,
                target.clone(),
                format!("conversion webhook for {gvk} {what}"),
            )
        };
        let failed = |why: String| error(format!("failed: {why}"));
        let uid = uuid::Uuid::new_v4().to_string();
        let review = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {
                "uid": uid,
                "desiredAPIVersion": desired,
                "objects": objects.iter().map(|o| Value::Object(o.as_map().clone())).collect::<Vec<_>>(),
            },
        });
        let body = bytes::Bytes::from(serde_json::to_vec(&review).unwrap_or_default());
        let timeout = TIMEOUT.min(deadline.saturating_duration_since(Instant::now()));
        let answer = self
            .post(&webhook.endpoint, &webhook.ca, body, timeout, deadline)
            .await
            .map_err(failed)?;
        let answer: Value = serde_json::from_slice(&answer)
            .map_err(|e| failed(format!("the answer is not JSON: {e}")))?;
        let (api_version, kind) = (
            answer["apiVersion"].as_str().unwrap_or_default(),
            answer["kind"].as_str().unwrap_or_default(),
        );
        if api_version != "apiextensions.k8s.io/v1" || kind != "ConversionReview" {
            return Err(failed(format!(
                "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {api_version}, Kind={kind}"
            )));
        }
        let response = &answer["response"];
        if response["uid"].as_str() != Some(uid.as_str()) {
            return Err(failed(format!(
                "expected response.uid={uid:?}, got {:?}",
                response["uid"].as_str().unwrap_or_default()
            )));
        }
        if response["result"]["status"] != "Success" {
            let message = response["result"]["message"].as_str().unwrap_or_default();
            return Err(failed(message.to_string()));
        }
        let converted = response["convertedObjects"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if converted.len() != objects.len() {
            return Err(error(format!(
                "returned {} objects, expected {}",
                converted.len(),
                objects.len()
            )));
        }
        let mut out = Vec::with_capacity(objects.len());
        for (i, (value, sent)) in converted.into_iter().zip(objects).enumerate() {
            let invalid = |why: String| {
                error(format!(
                    "returned invalid converted object at index {i}: {why}"
                ))
            };
            let mut obj = Object::from_value(value).map_err(|e| invalid(e.to_string()))?;
            if obj.api_version() != desired {
                return Err(invalid(format!(
                    "invalid apiVersion {:?}, expected {desired:?}",
                    obj.api_version()
                )));
            }
            for (what, theirs, ours) in [
                ("kind", obj.kind(), sent.kind()),
                ("name", obj.name(), sent.name()),
                ("namespace", obj.namespace(), sent.namespace()),
                ("UID", obj.uid(), sent.uid()),
            ] {
                if theirs != ours {
                    return Err(invalid(format!(
                        "must have the same {what}: {ours} != {theirs}"
                    )));
                }
            }
            restore_metadata(&mut obj, sent).map_err(|why| {
                error(format!(
                    "returned invalid metadata in object at index {i}: {why}"
                ))
            })?;
            out.push(obj);
        }
        Ok(out)
    }
}

/// The converted object's metadata as the sent object's, but for labels and annotations,
/// which a conversion may change if they stay maps of strings (Kubernetes'
/// `restoreObjectMeta`).
fn restore_metadata(converted: &mut Object, sent: &Object) -> Result<(), String> {
    let mut meta = sent.as_map().get("metadata").cloned().unwrap_or(json!({}));
    let theirs = converted
        .as_map()
        .get("metadata")
        .cloned()
        .unwrap_or(json!({}));
    for k in ["labels", "annotations"] {
        match theirs.get(k) {
            Some(Value::Object(m)) if m.values().all(Value::is_string) => {
                meta[k] = Value::Object(m.clone());
            }
            None | Some(Value::Null) => {
                if let Some(m) = meta.as_object_mut() {
                    m.remove(k);
                }
            }
            Some(_) => return Err(format!("invalid metadata.{k}: must be a map of strings")),
        }
    }
    converted.as_map_mut().insert("metadata".into(), meta);
    Ok(())
}
