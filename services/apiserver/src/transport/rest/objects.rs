//! Every verb on a resource path: the HTTP method, path and query become the request layer's
//! verb, as gRPC's messages do; the answer becomes Kubernetes' JSON or protobuf, as `Accept`
//! asks (an object, a `...List`, a stream of `WatchEvent`s, a `Status`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Response, StatusCode, header};
use keel_api::{ApiError, GroupVersionResource, Metadata, Reason, Target};

use super::answer::Format;
use super::path::ResourcePath;
use super::protobuf;
use super::query::Query;
use super::status::{deleted, value_response};
use super::table::{self, Printer};
use super::watch;
use crate::auth::User;
use crate::request::{
    Caller, Create, Delete, DeleteCollection, DeleteOptions, Evict, FieldManager, FieldValidation,
    Get, Handler, Impersonation, List, Patch, PatchType, Propagation, Request, RequestToken,
    Update, Warnings, Watch,
};

/// What one REST request carries besides its path.
pub struct Call {
    pub method: Method,
    pub query: Query,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub user: Option<User>,
}

fn request<V>(p: &ResourcePath, timeout: Option<Duration>, caller: Caller, verb: V) -> Request<V> {
    Request {
        caller,
        resource: Some(p.gvr.clone()),
        timeout,
        verb,
    }
}

/// The patch type a PATCH's `Content-Type` names.
fn patch_type(headers: &HeaderMap, t: &Target) -> Result<PatchType, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = ct.split(';').next().unwrap_or("").trim();
    match media {
        "application/json-patch+json" => Ok(PatchType::Json),
        "application/merge-patch+json" => Ok(PatchType::Merge),
        "application/strategic-merge-patch+json" => Ok(PatchType::Strategic),
        "application/apply-patch+yaml" => Ok(PatchType::Apply),
        other => Err(unsupported(
            t,
            &format!(
                "the body of the request was in an unknown format ({other:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
            ),
        )),
    }
}

fn unsupported(t: &Target, message: &str) -> ApiError {
    ApiError::new(Reason::UnsupportedMediaType, t.clone(), message)
}

/// A custom object asked for as protobuf: Kubernetes' 406, in its words (its objects are
/// `Unstructured`, which has no protobuf form).
fn not_acceptable(t: &Target, list: bool) -> ApiError {
    let go_type = if list {
        "*unstructured.UnstructuredList"
    } else {
        "*unstructured.Unstructured"
    };
    ApiError::new(
        Reason::NotAcceptable,
        t.clone(),
        format!(
            "object {go_type} does not implement the protobuf marshalling interface and cannot be encoded to a protobuf message"
        ),
    )
}

/// Whether the body is Kubernetes' protobuf.
fn is_protobuf(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.split(';').next().unwrap_or("").trim() == protobuf::MEDIA_TYPE)
}

/// The JSON of a body that holds an object (a create's or update's object, a delete's
/// options): JSON as it came, or Kubernetes' protobuf decoded (what typed clients send).
fn json_body(headers: &HeaderMap, body: &[u8], t: &Target) -> Result<Vec<u8>, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    match ct.split(';').next().unwrap_or("").trim() {
        "application/json" | "" | "*/*" => Ok(body.to_vec()),
        protobuf::MEDIA_TYPE if body.is_empty() => Ok(Vec::new()),
        protobuf::MEDIA_TYPE => protobuf::to_json(body, t),
        other => Err(unsupported(
            t,
            &format!(
                "the body of the request was in an unknown format ({other:?}) - accepted media types include: application/json, application/vnd.kubernetes.protobuf"
            ),
        )),
    }
}

/// The kind of a resource's list (`ConfigMapList`) and its apiVersion.
fn list_kind(handler: &Handler, gvr: &GroupVersionResource) -> (String, String) {
    (format!("{}List", handler.kind(gvr)), gvr.api_version())
}

/// Serves one call on a resource path. A call refused before it reached the handler (its
/// method, body or query) is recorded as the handler records every request it runs.
pub async fn serve(handler: Arc<Handler>, p: ResourcePath, call: Call) -> Response<Body> {
    let handled = AtomicBool::new(false);
    let verb = verb_of(&call.method, &p, &call.query);
    let format = Format::of(&call.headers);
    let user = call.user.clone();
    let warnings = Warnings::default();
    match run(&handler, &p, call, format, &handled, &warnings).await {
        Ok(mut r) => {
            // As Kubernetes: `299 - "<text>"`, one header a warning; past 4,096 characters
            // in all, each is cut to 256 (its `warning` filter's limits).
            let warnings = warnings.take();
            let total: usize = warnings.iter().map(|w| w.chars().count()).sum();
            for w in warnings {
                let w = if total > 4096 {
                    keel_api::shorten(&w, 256)
                } else {
                    w
                };
                let quoted = format!("{w:?}");
                let quoted = if quoted.is_ascii() {
                    quoted
                } else {
                    format!("\"{}\"", w.escape_default())
                };
                if let Ok(v) = format!("299 - {quoted}").parse() {
                    r.headers_mut().append("warning", v);
                }
            }
            r
        }
        Err(e) => {
            if !handled.load(Ordering::Relaxed) {
                let scope = (
                    p.namespace.as_str(),
                    p.name.as_deref().unwrap_or(""),
                    p.subresource.as_str(),
                );
                handler
                    .refused(verb, &p.gvr, user.as_ref(), scope, &e)
                    .await;
            }
            format.error(&e)
        }
    }
}

/// Kubernetes' verb of a REST call, for the record of one refused before its verb ran.
fn verb_of(method: &Method, p: &ResourcePath, q: &Query) -> &'static str {
    let named = p.name.is_some();
    match *method {
        Method::GET if named => "get",
        Method::GET if matches!(q.get("watch"), "true" | "1") => "watch",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

async fn run(
    handler: &Arc<Handler>,
    p: &ResourcePath,
    call: Call,
    format: Format,
    handled: &AtomicBool,
    warnings: &Warnings,
) -> Result<Response<Body>, ApiError> {
    // The handler, once a verb is handed to it: it records the request from then on.
    let verb_handler = || {
        handled.store(true, Ordering::Relaxed);
        handler
    };
    let t = Target::new(
        &p.gvr.group,
        &p.gvr.resource,
        p.name.as_deref().unwrap_or(""),
    );
    let q = &call.query;
    // `kubectl get` asks for a Table (a get, a list or a watch); no other request does.
    let printer = (call.method == Method::GET && table::wanted(&call.headers))
        .then(|| Printer::new(handler, &p.gvr, q, &t))
        .transpose()?;
    // A protobuf body is read, and a protobuf answer written, by its kind's message: a
    // resource keel does not serve is NotFound first, as Kubernetes routes before it decodes,
    // not a body it cannot read.
    let protobuf_answer = format == Format::Protobuf && printer.is_none();
    let info = if protobuf_answer || (is_protobuf(&call.headers) && !call.body.is_empty()) {
        Some(handler.lookup(&p.gvr).await?)
    } else {
        None
    };
    // The form of answers about this resource's objects (a Table is JSON).
    let format = match info {
        Some(info) if protobuf_answer => {
            // A custom object has no protobuf form: Kubernetes answers 406 even when JSON is
            // acceptable too. keel refuses before the verb runs, where Kubernetes refuses
            // once it has run (a create or update is then done, yet answered 406).
            if handler.is_custom(&p.gvr) {
                let list = call.method == Method::GET && p.name.is_none();
                return Err(not_acceptable(&t, list));
            }
            format.for_kind(&info.api_version(), &info.kind)
        }
        _ => Format::Json,
    };
    let dry_run = q.dry_run(&t)?;
    let field_validation = FieldValidation::parse(q.get("fieldValidation"), &t)?;
    let manager = FieldManager {
        field_manager: q.get("fieldManager").to_string(),
        user_agent: call
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string(),
    };
    let timeout = q.timeout(&t)?;
    // The `Impersonate-*` headers (kubectl --as).
    let user = Caller {
        user: call.user.clone(),
        impersonate: Impersonation::from_headers(
            call.headers
                .iter()
                .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?))),
        ),
        warnings: warnings.clone(),
    };
    match (&call.method, p.name.as_deref()) {
        (&Method::GET, None) if q.watch(&t)? => {
            let verb = Watch {
                namespace: p.namespace.clone(),
                label_selector: q.get("labelSelector").to_string(),
                field_selector: q.get("fieldSelector").to_string(),
                resource_version: q.get("resourceVersion").to_string(),
                allow_bookmarks: q.flag("allowWatchBookmarks", &t)?,
                send_initial_events: q.flag("sendInitialEvents", &t)?,
                include_uninitialized: q.flag("includeUninitialized", &t)?,
                shard: q.shard(&t)?,
            };
            let timeout_seconds = q.timeout_seconds(&t)?;
            let events = verb_handler().handle(request(p, None, user, verb)).await?;
            Ok(watch::response(events, timeout_seconds, printer, format))
        }
        (&Method::GET, None) => {
            let verb = List {
                namespace: p.namespace.clone(),
                label_selector: q.get("labelSelector").to_string(),
                field_selector: q.get("fieldSelector").to_string(),
                limit: q.int("limit", &t)?,
                continue_token: q.get("continue").to_string(),
                resource_version: q.get("resourceVersion").to_string(),
                resource_version_match: q.get("resourceVersionMatch").to_string(),
                include_uninitialized: q.flag("includeUninitialized", &t)?,
                shard: q.shard(&t)?,
            };
            let list = verb_handler()
                .handle(request(p, timeout, user, verb))
                .await?;
            if let Some(printer) = printer {
                let objects: Vec<serde_json::Value> = list
                    .items
                    .iter()
                    .filter_map(|i| serde_json::from_slice(i).ok())
                    .collect();
                let table =
                    printer.table(&objects, &list.revision.to_string(), &list.continue_token);
                return Ok(value_response(StatusCode::OK, &table));
            }
            let (kind, api_version) = list_kind(handler, &p.gvr);
            format.list(&kind, &api_version, list)
        }
        (&Method::GET, Some(name)) => {
            let verb = Get {
                namespace: p.namespace.clone(),
                name: name.to_string(),
                resource_version: q.get("resourceVersion").to_string(),
                include_uninitialized: q.flag("includeUninitialized", &t)?,
                subresource: p.subresource.clone(),
            };
            let obj = verb_handler()
                .handle(request(p, timeout, user, verb))
                .await?;
            if let Some(printer) = printer {
                let rv = obj.resource_version().to_string();
                let table = printer.table(&[obj.into_value()], &rv, "");
                return Ok(value_response(StatusCode::OK, &table));
            }
            format.object(StatusCode::OK, &obj)
        }
        (&Method::POST, None) => {
            let verb = Create {
                namespace: p.namespace.clone(),
                object: json_body(&call.headers, &call.body, &t)?,
                dry_run,
                field_validation,
                manager,
            };
            let obj = verb_handler()
                .handle(request(p, timeout, user, verb))
                .await?;
            format.object(StatusCode::CREATED, &obj)
        }
        (&Method::POST, Some(name)) if p.subresource == "eviction" => {
            let body = json_body(&call.headers, &call.body, &t)?;
            let eviction: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
                ApiError::bad_request(t.clone(), format!("malformed Eviction: {e}"))
            })?;
            let options = serde_json::to_vec(&eviction["deleteOptions"]).unwrap_or_default();
            let verb = Evict {
                namespace: p.namespace.clone(),
                name: name.to_string(),
                eviction_name: eviction["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                options: delete_options(&options, q, dry_run, &t)?,
                eviction,
            };
            verb_handler()
                .handle(request(p, timeout, user, verb))
                .await?;
            format.value(
                StatusCode::CREATED,
                &serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Success", "code": 201}),
            )
        }
        (&Method::POST, Some(name)) if p.subresource == "token" => {
            let body = json_body(&call.headers, &call.body, &t)?;
            let token_request: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
                ApiError::bad_request(t.clone(), format!("malformed TokenRequest: {e}"))
            })?;
            let verb = RequestToken {
                namespace: p.namespace.clone(),
                name: name.to_string(),
                request: token_request,
            };
            let answer = verb_handler()
                .handle(request(p, timeout, user, verb))
                .await?;
            format.value(StatusCode::CREATED, &answer)
        }
        (&Method::PUT, Some(_)) => {
            let verb = Update {
                namespace: p.namespace.clone(),
                subresource: p.subresource.clone(),
                object: json_body(&call.headers, &call.body, &t)?,
                dry_run,
                field_validation,
                manager,
            };
            let obj = verb_handler()
                .handle(request(p, timeout, user, verb))
                .await?;
            format.object(StatusCode::OK, &obj)
        }
        (&Method::PATCH, Some(name)) => {
            let verb = Patch {
                namespace: p.namespace.clone(),
                name: name.to_string(),
                subresource: p.subresource.clone(),
                patch_type: patch_type(&call.headers, &t)?,
                patch: call.body.to_vec(),
                dry_run,
                field_validation,
                manager,
                force: q.optional_flag("force", &t)?,
            };
            let patched = verb_handler()
                .handle(request(p, timeout, user, verb))
                .await?;
            let code = if patched.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            format.object(code, &patched.object)
        }
        (&Method::DELETE, Some(name)) => {
            let body = json_body(&call.headers, &call.body, &t)?;
            let options = delete_options(&body, q, dry_run, &t)?;
            let verb = Delete {
                namespace: p.namespace.clone(),
                name: name.to_string(),
                options,
            };
            let (obj, gone) = verb_handler()
                .handle(request(p, timeout, user, verb))
                .await?;
            if gone {
                let kind = obj.kind().to_string();
                format.value(
                    StatusCode::OK,
                    &deleted(&p.gvr.group, &kind, name, obj.uid()),
                )
            } else {
                // Still there (finalizers, a foreground deletion): the object, as Kubernetes.
                format.object(StatusCode::OK, &obj)
            }
        }
        (&Method::DELETE, None) => {
            let body = json_body(&call.headers, &call.body, &t)?;
            let verb = DeleteCollection {
                namespace: p.namespace.clone(),
                label_selector: q.get("labelSelector").to_string(),
                field_selector: q.get("fieldSelector").to_string(),
                options: delete_options(&body, q, dry_run, &t)?,
            };
            let deleted = verb_handler()
                .handle(request(p, timeout, user, verb))
                .await?;
            let (kind, api_version) = list_kind(handler, &p.gvr);
            format.value(
                StatusCode::OK,
                &serde_json::json!({
                    "kind": kind,
                    "apiVersion": api_version,
                    "metadata": {},
                    "items": deleted.into_iter().map(keel_api::Object::into_value).collect::<Vec<_>>(),
                }),
            )
        }
        (m, _) => Err(ApiError::new(
            Reason::MethodNotAllowed,
            t.clone(),
            format!("the server does not allow this method on the requested resource ({m})"),
        )),
    }
}

/// A delete's options: `DeleteOptions` in the body (preconditions, `propagationPolicy`), or the
/// `propagationPolicy` query parameter.
fn delete_options(
    body: &[u8],
    q: &Query,
    dry_run: bool,
    t: &Target,
) -> Result<DeleteOptions, ApiError> {
    let opts: serde_json::Value = if body.is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(t.clone(), format!("malformed DeleteOptions: {e}"))
        })?
    };
    let pre = &opts["preconditions"];
    let policy = opts["propagationPolicy"]
        .as_str()
        .unwrap_or_else(|| q.get("propagationPolicy"));
    let propagation = match policy {
        "" | "Background" => Propagation::Background,
        "Foreground" => Propagation::Foreground,
        "Orphan" => Propagation::Orphan,
        other => {
            return Err(ApiError::bad_request(
                t.clone(),
                format!(
                    "propagationPolicy {}: supported values: \"Background\", \"Foreground\", \"Orphan\"",
                    keel_api::echo(other)
                ),
            ));
        }
    };
    Ok(DeleteOptions {
        uid: pre["uid"].as_str().unwrap_or("").to_string(),
        resource_version: pre["resourceVersion"].as_str().unwrap_or("").to_string(),
        propagation,
        // A body's `dryRun: ["All"]` counts as the query's.
        dry_run: dry_run || opts["dryRun"].as_array().is_some_and(|d| !d.is_empty()),
    })
}
