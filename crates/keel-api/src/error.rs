//! The API's one error type, shaped like Kubernetes' `Status`.
//!
//! On the wire (keel-wire) an error is a gRPC status with the reason's code and the
//! Kubernetes-style `Status` JSON as its `details` ([`ApiError::to_bounded`]), so a client gets
//! the reason, the object and the offending fields back exactly
//! ([`ApiError::from_status_json`]). A REST answer carries the same JSON as its body.

mod bounded;

use serde::{Deserialize, Serialize};
use serde_json::json;

pub use bounded::{echo, echo_name, go_value, shorten, shorten_name};

/// An `Invalid` error's message lists at most this many of its causes, in at most about this
/// many bytes, then says how many more there are (all are in its `causes`, as far as they fit).
const LISTED_CAUSES: usize = 10;
const LISTED_BYTES: usize = 640;

/// Why a request failed, as Kubernetes names it (`metav1.StatusReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Reason {
    /// The object (or the resource, or the namespace) does not exist.
    NotFound,
    /// Create of a name that is taken.
    AlreadyExists,
    /// A precondition (`resourceVersion`, `uid`) did not hold: re-read and retry.
    Conflict,
    /// The object is well-formed but some fields are wrong: see `causes`.
    Invalid,
    /// The request could not be parsed (malformed JSON, YAML, patch, selector).
    BadRequest,
    /// The resourceVersion asked for is older than the server still has: relist.
    Expired,
    /// The object or request is larger than the server accepts.
    RequestEntityTooLarge,
    /// The server sheds load: retry later.
    TooManyRequests,
    Unauthorized,
    Forbidden,
    /// The request's deadline passed before it could complete.
    Timeout,
    /// The server cannot reach its storage.
    ServiceUnavailable,
    /// The storage is full (etcd's `NOSPACE` alarm): writes fail until an operator frees space;
    /// reads and watches go on.
    InsufficientStorage,
    /// The verb is not supported on this resource.
    MethodNotAllowed,
    /// The body is in a format the server does not take (HTTP: its `Content-Type`).
    UnsupportedMediaType,
    /// The answer cannot be written in a format the client accepts (HTTP: its `Accept`), as
    /// a custom object asked for as Kubernetes' protobuf.
    NotAcceptable,
    /// A bug or an unexpected state on the server.
    InternalError,
}

impl Reason {
    /// The HTTP status Kubernetes would use, kept in the JSON detail for familiarity.
    pub fn http_code(self) -> u16 {
        match self {
            Reason::NotFound => 404,
            Reason::AlreadyExists | Reason::Conflict => 409,
            Reason::Invalid => 422,
            Reason::BadRequest => 400,
            Reason::Expired => 410,
            Reason::RequestEntityTooLarge => 413,
            Reason::TooManyRequests => 429,
            Reason::Unauthorized => 401,
            Reason::Forbidden => 403,
            Reason::Timeout => 504,
            Reason::ServiceUnavailable => 503,
            Reason::InsufficientStorage => 507,
            Reason::MethodNotAllowed => 405,
            Reason::NotAcceptable => 406,
            Reason::UnsupportedMediaType => 415,
            Reason::InternalError => 500,
        }
    }
}

/// One wrong field of an `Invalid` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldCause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueTooLong`, `FieldValueForbidden`, ...
    pub reason: String,
    pub message: String,
    /// The JSON path of the field, e.g. `metadata.name` or `spec.containers[0].image`.
    pub field: String,
}

impl FieldCause {
    pub fn invalid(field: impl Into<String>, value: &str, why: impl AsRef<str>) -> Self {
        let field = field.into();
        FieldCause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: {}", echo(value), why.as_ref()),
            field,
        }
    }

    /// An invalid JSON value, printed as Kubernetes prints the Go value it decodes to
    /// ([`go_value`]: `Invalid value: -1: ...`).
    pub fn invalid_value(
        field: impl Into<String>,
        value: &serde_json::Value,
        why: impl AsRef<str>,
    ) -> Self {
        FieldCause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: {}", go_value(value), why.as_ref()),
            field: field.into(),
        }
    }

    pub fn required(field: impl Into<String>) -> Self {
        FieldCause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: field.into(),
        }
    }

    pub fn forbidden(field: impl Into<String>, why: impl AsRef<str>) -> Self {
        FieldCause {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {}", why.as_ref()),
            field: field.into(),
        }
    }

    pub fn too_long(field: impl Into<String>, limit: usize) -> Self {
        FieldCause {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: must have at most {limit} bytes"),
            field: field.into(),
        }
    }

    pub fn type_error(field: impl Into<String>, want: &str) -> Self {
        FieldCause {
            reason: "FieldValueTypeInvalid".into(),
            message: format!("Invalid value: must be {want}"),
            field: field.into(),
        }
    }

    /// A value given twice where each must be unique (Kubernetes' `field.Duplicate`).
    pub fn duplicate(field: impl Into<String>, value: &str) -> Self {
        FieldCause {
            reason: "FieldValueDuplicate".into(),
            message: format!("Duplicate value: {}", echo(value)),
            field: field.into(),
        }
    }

    /// A value outside a fixed set (Kubernetes' `field.NotSupported`).
    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        FieldCause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                echo(value),
                list.join(", ")
            ),
            field: field.into(),
        }
    }
}

/// The object a request was about; every error names it (`Status.details`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// The kind when known, else the plural resource name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

impl Target {
    pub fn new(group: &str, kind: &str, name: &str) -> Self {
        Target {
            group: group.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    /// `configmaps "x"`, or `configmaps` when no name is known.
    fn describe(&self) -> String {
        let what = if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        };
        if self.name.is_empty() {
            what
        } else {
            format!("{what} {}", echo_name(&self.name))
        }
    }
}

/// An API error: a reason, a human message, the object and, for `Invalid`, the fields.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason:?}: {message}")]
pub struct ApiError {
    pub reason: Reason,
    pub message: String,
    pub target: Target,
    pub causes: Vec<FieldCause>,
    /// For `TooManyRequests` (and `ServiceUnavailable`): how long the client should wait
    /// before it tries again (Kubernetes' `details.retryAfterSeconds`, HTTP's `Retry-After`).
    pub retry_after_seconds: Option<u32>,
}

/// The Kubernetes `Status` JSON, as it travels in the gRPC status details.
#[derive(Serialize, Deserialize)]
struct StatusJson {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    status: String,
    message: String,
    reason: Reason,
    #[serde(default)]
    details: DetailsJson,
    code: u16,
}

impl From<StatusJson> for ApiError {
    fn from(s: StatusJson) -> ApiError {
        ApiError {
            reason: s.reason,
            message: s.message,
            target: s.details.target,
            causes: s.details.causes,
            retry_after_seconds: s.details.retry_after_seconds,
        }
    }
}

#[derive(Serialize, Deserialize, Default)]
struct DetailsJson {
    #[serde(flatten)]
    target: Target,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    causes: Vec<FieldCause>,
    #[serde(
        rename = "retryAfterSeconds",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    retry_after_seconds: Option<u32>,
}

impl ApiError {
    pub fn new(reason: Reason, target: Target, message: impl Into<String>) -> Self {
        ApiError {
            reason,
            message: message.into(),
            target,
            causes: Vec::new(),
            retry_after_seconds: None,
        }
    }

    pub fn not_found(target: Target) -> Self {
        let message = format!("{} not found", target.describe());
        Self::new(Reason::NotFound, target, message)
    }

    pub fn already_exists(target: Target) -> Self {
        let message = format!("{} already exists", target.describe());
        Self::new(Reason::AlreadyExists, target, message)
    }

    /// A failed precondition. `why` completes "Operation cannot be fulfilled on X: ".
    pub fn conflict(target: Target, why: impl AsRef<str>) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {}: {}",
            target.describe(),
            why.as_ref()
        );
        Self::new(Reason::Conflict, target, message)
    }

    /// The standard conflict of a stale `resourceVersion`.
    pub fn stale(target: Target) -> Self {
        Self::conflict(
            target,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn invalid(target: Target, causes: Vec<FieldCause>) -> Self {
        let mut list: Vec<String> = Vec::new();
        let mut length = 0;
        let mut listed = 0;
        for c in causes.iter().take(LISTED_CAUSES) {
            let item = format!("{}: {}", c.field, c.message);
            // apimachinery lists a message once however many causes have it.
            if !list.contains(&item) {
                length += item.len();
                if !list.is_empty() && length > LISTED_BYTES {
                    break;
                }
                list.push(item);
            }
            listed += 1;
        }
        if causes.len() > listed {
            list.push(format!("and {} more", causes.len() - listed));
        }
        // As apimachinery's aggregate prints a list: one error alone, several in brackets.
        let message = match list.as_slice() {
            [] => format!("{} is invalid", target.describe()),
            [one] => format!("{} is invalid: {one}", target.describe()),
            _ => format!("{} is invalid: [{}]", target.describe(), list.join(", ")),
        };
        ApiError {
            reason: Reason::Invalid,
            message,
            target,
            causes,
            retry_after_seconds: None,
        }
    }

    pub fn bad_request(target: Target, message: impl Into<String>) -> Self {
        Self::new(Reason::BadRequest, target, message)
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(Reason::Expired, Target::default(), message)
    }

    pub fn too_large(target: Target, message: impl Into<String>) -> Self {
        Self::new(Reason::RequestEntityTooLarge, target, message)
    }

    pub fn too_many_requests(target: Target, message: impl Into<String>) -> Self {
        Self::new(Reason::TooManyRequests, target, message)
    }

    /// Tells the client to wait this long before it tries again.
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after_seconds = Some(seconds);
        self
    }

    pub fn timeout(target: Target, message: impl Into<String>) -> Self {
        Self::new(Reason::Timeout, target, message)
    }

    /// A read at a `resourceVersion` newer than the store reached while the read waited for
    /// it; Kubernetes' words, cause and retry hint.
    pub fn too_large_resource_version(asked: i64, current: i64) -> Self {
        let mut e = Self::new(
            Reason::Timeout,
            Target::default(),
            format!("Timeout: Too large resource version: {asked}, current: {current}"),
        )
        .retry_after(1);
        e.causes.push(FieldCause {
            reason: "ResourceVersionTooLarge".into(),
            message: "Too large resource version".into(),
            field: String::new(),
        });
        e
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(Reason::ServiceUnavailable, Target::default(), message)
    }

    pub fn insufficient_storage(message: impl Into<String>) -> Self {
        Self::new(Reason::InsufficientStorage, Target::default(), message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Reason::InternalError, Target::default(), message)
    }

    /// The client's view of the collection is gone and it must list again (client-go's
    /// reflector: `isExpiredError || isTooLargeResourceVersionError`): its resourceVersion is
    /// compacted, or newer than the store's, as after etcd was restored from a backup.
    pub fn must_relist(&self) -> bool {
        self.reason == Reason::Expired
            || (self.reason == Reason::Timeout
                && self
                    .causes
                    .iter()
                    .any(|c| c.reason == "ResourceVersionTooLarge"))
    }

    /// The request itself is refused: sent again, it gets the same answer (who sent it, what
    /// it asks for, or how), so a client reports it rather than retrying.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self.reason,
            Reason::Unauthorized
                | Reason::Forbidden
                | Reason::BadRequest
                | Reason::Invalid
                | Reason::MethodNotAllowed
                | Reason::NotAcceptable
                | Reason::UnsupportedMediaType
        )
    }

    /// Names the object, for errors raised below the layer that knows it.
    pub fn with_target(mut self, target: &Target) -> Self {
        if self.target == Target::default() {
            self.target = target.clone();
        }
        self
    }

    /// The Kubernetes `Status` JSON of this error.
    pub fn to_status_json(&self) -> serde_json::Value {
        let status = bounded::status(
            self,
            self.message.clone(),
            self.target.clone(),
            self.causes.clone(),
        );
        serde_json::to_value(status).unwrap_or_else(|_| json!({"message": self.message}))
    }

    /// The error as a transport with small trailers carries it (gRPC): a one-line summary of
    /// at most 200 bytes, and the whole Status JSON cut to at most 4 KiB ([`bounded`]).
    pub fn to_bounded(&self) -> (String, Vec<u8>) {
        bounded::encode(self)
    }

    /// Reads an error back from the Status JSON a keel server sent, if `bytes` is one.
    pub fn from_status_json(bytes: &[u8]) -> Option<ApiError> {
        serde_json::from_slice::<StatusJson>(bytes)
            .ok()
            .map(Into::into)
    }
}

impl ApiError {
    /// Reads an error back from a REST answer: the Kubernetes `Status` in its body, or the
    /// HTTP code alone when the body is not one (a proxy, a transport).
    pub fn from_http(code: u16, body: &[u8]) -> ApiError {
        if let Ok(s) = serde_json::from_slice::<StatusJson>(body) {
            return s.into();
        }
        let reason = [
            Reason::NotFound,
            Reason::Conflict,
            Reason::Invalid,
            Reason::BadRequest,
            Reason::Expired,
            Reason::RequestEntityTooLarge,
            Reason::TooManyRequests,
            Reason::Unauthorized,
            Reason::Forbidden,
            Reason::Timeout,
            Reason::ServiceUnavailable,
            Reason::InsufficientStorage,
            Reason::MethodNotAllowed,
            Reason::NotAcceptable,
            Reason::UnsupportedMediaType,
        ]
        .into_iter()
        .find(|r| r.http_code() == code)
        .unwrap_or(Reason::InternalError);
        let text = String::from_utf8_lossy(body);
        let text: String = text.chars().take(200).collect();
        ApiError::new(reason, Target::default(), format!("HTTP {code}: {text}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_round_trip_through_a_rest_status_body() {
        let e = ApiError::conflict(Target::new("", "ConfigMap", "a"), "stale");
        let body = serde_json::to_vec(&e.to_status_json()).unwrap_or_default();
        let back = ApiError::from_http(409, &body);
        assert_eq!((back.reason, back.target), (Reason::Conflict, e.target));
        let bare = ApiError::from_http(503, b"upstream connect error");
        assert_eq!(bare.reason, Reason::ServiceUnavailable);
        assert!(bare.message.contains("upstream connect error"));
        assert_eq!(ApiError::from_http(418, b"").reason, Reason::InternalError);
    }

    #[test]
    fn errors_round_trip_through_their_bounded_status_json() {
        let e = ApiError::invalid(
            Target::new("", "ConfigMap", "Bad"),
            vec![FieldCause::invalid(
                "metadata.name",
                "Bad",
                "must be lowercase",
            )],
        );
        let (summary, details) = e.to_bounded();
        assert_eq!(ApiError::from_status_json(&details), Some(e.clone()));
        assert!(summary.contains("ConfigMap \"Bad\" is invalid: metadata.name"));
        assert_eq!(ApiError::from_status_json(b"transport error"), None);
        let e = ApiError::too_many_requests(Target::default(), "slow down").retry_after(3);
        assert_eq!(e.to_status_json()["details"]["retryAfterSeconds"], 3);
        let back = ApiError::from_status_json(&e.to_bounded().1);
        assert_eq!(back.and_then(|b| b.retry_after_seconds), Some(3));
    }

    #[test]
    fn expired_and_too_large_resource_versions_mean_relist() {
        assert!(ApiError::expired("gone").must_relist());
        assert!(ApiError::too_large_resource_version(10, 5).must_relist());
        assert!(!ApiError::timeout(Target::default(), "slow").must_relist());
    }
}
