//! Answers in Kubernetes' HTTP dialect: objects as JSON, errors as `metav1.Status` with the HTTP
//! code Kubernetes uses for their reason (and `Retry-After` when the server says when).

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use keel_api::{ApiError, Reason, Target};
use serde_json::{Value, json};

/// A JSON answer with `code`.
pub fn json_response(code: StatusCode, body: Vec<u8>) -> Response<Body> {
    json_stream(code, Body::from(body))
}

/// A JSON answer with `code` whose body may be a stream.
pub fn json_stream(code: StatusCode, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A JSON value answered with `code`.
pub fn value_response(code: StatusCode, v: &Value) -> Response<Body> {
    json_response(code, serde_json::to_vec(v).unwrap_or_default())
}

/// An error, as Kubernetes answers it.
pub fn error_response(e: &ApiError) -> Response<Body> {
    let code =
        StatusCode::from_u16(e.reason.http_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = value_response(code, &e.to_status_json());
    if let Some(secs) = e.retry_after_seconds {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    r
}

/// A path the API does not serve: Kubernetes' words for it.
pub fn no_such_path() -> Response<Body> {
    error_response(&not_found_path())
}

/// The error of a path the API does not serve.
pub fn not_found_path() -> ApiError {
    ApiError::new(
        Reason::NotFound,
        Target::default(),
        "the server could not find the requested resource",
    )
}

/// A delete that removed the object at once: Kubernetes answers a `Success` Status naming it.
pub fn deleted(group: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": group, "kind": kind, "uid": uid},
    })
}
