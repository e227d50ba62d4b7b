//! The form of an answer: JSON, or Kubernetes' protobuf when the client's `Accept` puts it
//! first, as client-go's typed clients do (`application/vnd.kubernetes.protobuf,
//! application/json`). An object, a list or a `Status` goes out in the form asked for when its
//! kind has a protobuf message; one whose kind has none (keel's own kinds) goes out as JSON,
//! which clients read by the answer's `Content-Type`.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use keel_api::{ApiError, Object};
use serde_json::Value;

use super::protobuf;
use super::status::{error_response, json_response, json_stream, value_response};
use crate::request::ListResult;

/// The form of a request's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Protobuf,
}

impl Format {
    /// The form `Accept` prefers: its media ranges by quality (ties in the order given), the
    /// first keel can write deciding. Kubernetes' protobuf with an `as=` (a Table,
    /// `PartialObjectMetadata`) is answered as JSON, as before protobuf answers were; no
    /// `Accept`, or none keel can write, is JSON.
    pub fn of(headers: &HeaderMap) -> Format {
        let mut ranges: Vec<(f32, Format)> = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(media_range)
            .collect();
        // Stable: equal qualities keep their order.
        ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
        ranges
            .into_iter()
            .find(|(q, _)| *q > 0.0)
            .map_or(Format::Json, |(_, f)| f)
    }

    /// The form of answers about objects of `api_version` `kind`: protobuf only when the kind
    /// has a message.
    pub fn for_kind(self, api_version: &str, kind: &str) -> Format {
        match self {
            Format::Protobuf if protobuf::has_message(api_version, kind) => Format::Protobuf,
            _ => Format::Json,
        }
    }

    /// An error, as Kubernetes answers it: a `Status` with the HTTP code of its reason.
    pub fn error(self, e: &ApiError) -> Response<Body> {
        if self == Format::Protobuf
            && let Ok(Some(body)) = protobuf::value(&e.to_status_json())
        {
            let mut r = protobuf_response(code_of(e), body);
            if let Some(secs) = e.retry_after_seconds {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            return r;
        }
        error_response(e)
    }

    /// A JSON value naming its own `apiVersion` and `kind` (a `Status`, a `Scale`, a list).
    pub fn value(self, code: StatusCode, v: &Value) -> Result<Response<Body>, ApiError> {
        if self == Format::Protobuf
            && let Some(body) = fallible(protobuf::value(v))
        {
            return Ok(protobuf_response(code, body));
        }
        Ok(value_response(code, v))
    }

    /// An object.
    pub fn object(self, code: StatusCode, obj: &Object) -> Result<Response<Body>, ApiError> {
        if self == Format::Protobuf
            && let Some(body) = fallible(protobuf::object(
                obj.api_version(),
                obj.kind(),
                obj.as_map(),
            ))
        {
            return Ok(protobuf_response(code, body));
        }
        Ok(json_response(code, obj.to_vec()))
    }

    /// A List's answer (`ConfigMapList`).
    pub fn list(
        self,
        kind: &str,
        api_version: &str,
        list: ListResult,
    ) -> Result<Response<Body>, ApiError> {
        let mut metadata = serde_json::json!({"resourceVersion": list.revision.to_string()});
        if !list.continue_token.is_empty() {
            metadata["continue"] = list.continue_token.clone().into();
        }
        if list.remaining > 0 {
            metadata["remainingItemCount"] = list.remaining.into();
        }
        if self == Format::Protobuf
            && let Some(body) = fallible(protobuf::list(api_version, kind, &metadata, &list.items))
        {
            return Ok(protobuf_response(StatusCode::OK, body));
        }
        Ok(json_list(kind, api_version, &metadata, list.items))
    }
}

/// A protobuf body, or `None` (answer JSON) when its kind has no message or the object does
/// not fit it: a stored value of another type than Kubernetes' field (which its JSON decoder
/// would have refused). Clients read the answer by its `Content-Type`, and client-go's typed
/// clients accept JSON too, so one such object does not make its whole resource unreadable.
fn fallible(encoded: Result<Option<Vec<u8>>, ApiError>) -> Option<Vec<u8>> {
    encoded
        .inspect_err(|e| tracing::warn!(error = %e.message, "answering JSON: no protobuf form"))
        .ok()
        .flatten()
}

/// One media range of `Accept` (`type/subtype;param=value;q=0.5`): its quality and the form
/// it asks for, if keel writes it.
fn media_range(range: &str) -> Option<(f32, Format)> {
    let mut parts = range.split(';').map(str::trim);
    let media_type = parts.next()?.to_ascii_lowercase();
    let (mut q, mut as_something) = (1.0f32, false);
    for p in parts {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        match k.trim() {
            "q" => q = v.trim().parse().unwrap_or(1.0),
            "as" => as_something = true,
            _ => {}
        }
    }
    let format = match media_type.as_str() {
        "application/json" | "application/*" | "*/*" => Format::Json,
        protobuf::MEDIA_TYPE if as_something => Format::Json,
        protobuf::MEDIA_TYPE => Format::Protobuf,
        _ => return None,
    };
    Some((q, format))
}

fn code_of(e: &ApiError) -> StatusCode {
    StatusCode::from_u16(e.reason.http_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A protobuf answer with `code`.
fn protobuf_response(code: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(protobuf::MEDIA_TYPE),
    );
    r
}

/// A JSON List's answer goes out in chunks of about this size, each made when the client has
/// taken the one before: a LIST of any size holds one chunk beside the items it shares with
/// the watch cache, never the whole answer.
const LIST_CHUNK: usize = 64 * 1024;

/// `{"kind": "ConfigMapList", ..., "items": [...]}`, the items' JSON copied as they are, a chunk
/// at a time.
fn json_list(
    kind: &str,
    api_version: &str,
    metadata: &Value,
    items: Vec<bytes::Bytes>,
) -> Response<Body> {
    let head = serde_json::json!({"kind": kind, "apiVersion": api_version, "metadata": metadata});
    let mut head = serde_json::to_vec(&head).unwrap_or_default();
    // Replace the closing brace with the items.
    head.pop();
    head.extend_from_slice(br#","items":["#);
    let mut head = Some(head);
    let mut items = items.into_iter();
    let (mut first, mut done) = (true, false);
    let chunks = std::iter::from_fn(move || {
        if done {
            return None;
        }
        let mut chunk = head.take().unwrap_or_default();
        chunk.reserve(LIST_CHUNK);
        while chunk.len() < LIST_CHUNK {
            let Some(item) = items.next() else {
                chunk.extend_from_slice(b"]}");
                done = true;
                break;
            };
            if !first {
                chunk.push(b',');
            }
            first = false;
            chunk.extend_from_slice(&item);
        }
        Some(Ok::<_, std::convert::Infallible>(bytes::Bytes::from(chunk)))
    });
    json_stream(
        StatusCode::OK,
        Body::from_stream(futures::stream::iter(chunks)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> Format {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        Format::of(&h)
    }

    #[test]
    fn an_object_that_does_not_fit_its_message_is_answered_as_json() {
        let content_type = |obj: serde_json::Value| {
            let obj = Object::from_value(obj).unwrap();
            let r = Format::Protobuf.object(StatusCode::OK, &obj).unwrap();
            r.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .to_string()
        };
        let pod = |port: serde_json::Value| {
            serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "image": "i",
                    "ports": [{"containerPort": port}]}]}})
        };
        assert_eq!(
            content_type(pod(serde_json::json!(80))),
            protobuf::MEDIA_TYPE
        );
        assert!(content_type(pod(serde_json::json!("80"))).starts_with("application/json"));
    }

    #[test]
    fn typed_clients_get_protobuf_and_everyone_else_json() {
        // client-go 1.32's typed clients.
        assert_eq!(
            accept("application/vnd.kubernetes.protobuf,application/json"),
            Format::Protobuf
        );
        assert_eq!(
            accept("application/vnd.kubernetes.protobuf"),
            Format::Protobuf
        );
        assert_eq!(accept("application/json, */*"), Format::Json);
        assert_eq!(
            accept("application/json,application/vnd.kubernetes.protobuf"),
            Format::Json
        );
        assert_eq!(Format::of(&HeaderMap::new()), Format::Json);
        // The metadata client and kubectl get: JSON, as before.
        assert_eq!(
            accept(
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
            ),
            Format::Json
        );
        assert_eq!(
            accept("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
            Format::Json
        );
        // What keel cannot write is passed over; qualities order the rest.
        assert_eq!(
            accept("application/yaml, application/vnd.kubernetes.protobuf"),
            Format::Protobuf
        );
        assert_eq!(
            accept("application/json;q=0.5, application/vnd.kubernetes.protobuf"),
            Format::Protobuf
        );
        assert_eq!(
            accept("application/vnd.kubernetes.protobuf;q=0, application/json"),
            Format::Json
        );
    }
}
