//! The API's one error type, shaped like Kubernetes' `Status`, and its mapping to gRPC codes.
//!
//! On the wire an error is a gRPC status whose code follows [`Reason::code`] and whose `details`
//! bytes are the Kubernetes-style `Status` JSON, so a client gets the reason, the object and the
//! offending fields back exactly ([`ApiError::from_status`]).

use serde::{Deserialize, Serialize};
use serde_json::json;

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
    /// A bug or an unexpected state on the server.
    InternalError,
}

impl Reason {
    /// The gRPC code this reason travels as (DESIGN.md, "Errors").
    pub fn code(self) -> tonic::Code {
        use tonic::Code;
        match self {
            Reason::NotFound => Code::NotFound,
            Reason::AlreadyExists => Code::AlreadyExists,
            Reason::Conflict => Code::Aborted,
            Reason::Invalid | Reason::BadRequest => Code::InvalidArgument,
            Reason::Expired => Code::OutOfRange,
            Reason::RequestEntityTooLarge
            | Reason::TooManyRequests
            | Reason::InsufficientStorage => Code::ResourceExhausted,
            Reason::Unauthorized => Code::Unauthenticated,
            Reason::Forbidden => Code::PermissionDenied,
            Reason::Timeout => Code::DeadlineExceeded,
            Reason::ServiceUnavailable => Code::Unavailable,
            Reason::MethodNotAllowed => Code::Unimplemented,
            Reason::InternalError => Code::Internal,
        }
    }

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
            Reason::InternalError => 500,
        }
    }

    /// A reason for a gRPC code that carries no keel detail (transport errors, other servers).
    fn from_code(code: tonic::Code) -> Reason {
        use tonic::Code;
        match code {
            Code::NotFound => Reason::NotFound,
            Code::AlreadyExists => Reason::AlreadyExists,
            Code::Aborted => Reason::Conflict,
            Code::InvalidArgument => Reason::BadRequest,
            Code::OutOfRange => Reason::Expired,
            // keel's own TooManyRequests carries a detail; a bare one is the transport refusing a message.
            Code::ResourceExhausted => Reason::RequestEntityTooLarge,
            Code::Unauthenticated => Reason::Unauthorized,
            Code::PermissionDenied => Reason::Forbidden,
            Code::DeadlineExceeded | Code::Cancelled => Reason::Timeout,
            Code::Unavailable => Reason::ServiceUnavailable,
            Code::Unimplemented => Reason::MethodNotAllowed,
            _ => Reason::InternalError,
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
            message: format!("Invalid value: {value:?}: {}", why.as_ref()),
            field,
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
            message: format!("Duplicate value: {value:?}"),
            field: field.into(),
        }
    }

    /// A value outside a fixed set (Kubernetes' `field.NotSupported`).
    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        FieldCause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {value:?}: supported values: {}",
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
            format!("{what} {:?}", self.name)
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

#[derive(Serialize, Deserialize, Default)]
struct DetailsJson {
    #[serde(flatten)]
    target: Target,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    causes: Vec<FieldCause>,
}

impl ApiError {
    pub fn new(reason: Reason, target: Target, message: impl Into<String>) -> Self {
        ApiError {
            reason,
            message: message.into(),
            target,
            causes: Vec::new(),
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
        let list: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let message = format!("{} is invalid: {}", target.describe(), list.join(", "));
        ApiError {
            reason: Reason::Invalid,
            message,
            target,
            causes,
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

    pub fn timeout(target: Target, message: impl Into<String>) -> Self {
        Self::new(Reason::Timeout, target, message)
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

    /// Names the object, for errors raised below the layer that knows it.
    pub fn with_target(mut self, target: &Target) -> Self {
        if self.target == Target::default() {
            self.target = target.clone();
        }
        self
    }

    /// The Kubernetes `Status` JSON of this error.
    pub fn to_status_json(&self) -> serde_json::Value {
        let status = StatusJson {
            api_version: "v1".into(),
            kind: "Status".into(),
            status: "Failure".into(),
            message: self.message.clone(),
            reason: self.reason,
            details: DetailsJson {
                target: self.target.clone(),
                causes: self.causes.clone(),
            },
            code: self.reason.http_code(),
        };
        serde_json::to_value(status).unwrap_or_else(|_| json!({"message": self.message}))
    }

    /// Reads an error back from a gRPC status: exactly, when it carries keel's detail; from
    /// the code and message otherwise (a transport failure, a proxy).
    pub fn from_status(status: &tonic::Status) -> ApiError {
        if let Ok(s) = serde_json::from_slice::<StatusJson>(status.details()) {
            return ApiError {
                reason: s.reason,
                message: s.message,
                target: s.details.target,
                causes: s.details.causes,
            };
        }
        // The transport refuses oversized messages itself, without a keel detail.
        let reason = if status.message().contains("message length too large") {
            Reason::RequestEntityTooLarge
        } else if status.message().contains("transport error") {
            // The connection broke (a server died mid-request): retry elsewhere.
            Reason::ServiceUnavailable
        } else {
            Reason::from_code(status.code())
        };
        ApiError::new(reason, Target::default(), status.message())
    }
}

impl From<ApiError> for tonic::Status {
    fn from(e: ApiError) -> tonic::Status {
        let details = serde_json::to_vec(&e.to_status_json()).unwrap_or_default();
        tonic::Status::with_details(e.reason.code(), e.message, details.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_round_trip_through_grpc_status() {
        let e = ApiError::invalid(
            Target::new("", "ConfigMap", "Bad"),
            vec![FieldCause::invalid(
                "metadata.name",
                "Bad",
                "must be lowercase",
            )],
        );
        let status: tonic::Status = e.clone().into();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(ApiError::from_status(&status), e);
        assert!(
            e.message
                .contains("ConfigMap \"Bad\" is invalid: metadata.name")
        );
    }

    #[test]
    fn every_reason_has_its_design_code() {
        assert_eq!(Reason::Conflict.code(), tonic::Code::Aborted);
        assert_eq!(Reason::Expired.code(), tonic::Code::OutOfRange);
        assert_eq!(
            Reason::RequestEntityTooLarge.code(),
            tonic::Code::ResourceExhausted
        );
        assert_eq!(Reason::ServiceUnavailable.code(), tonic::Code::Unavailable);
    }
}
