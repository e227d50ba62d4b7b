//! keel's gRPC wire: the messages and services generated from `proto/keel/v1/keel.proto`
//! ([`proto`]), and how an [`ApiError`] travels as a gRPC status ([`status`], [`error`]).
//!
//! The object model and the error type are keel-api's and know nothing of gRPC; only the
//! server's gRPC transport and the client depend on this crate.

#![forbid(unsafe_code)]

use keel_api::{ApiError, Reason, Target};
use tonic::Code;

/// Generated from `proto/keel/v1/keel.proto`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    tonic::include_proto!("keel.v1");
}

/// The gRPC code a reason travels as (DESIGN.md, "Errors").
pub fn code(reason: Reason) -> Code {
    match reason {
        Reason::NotFound => Code::NotFound,
        Reason::AlreadyExists => Code::AlreadyExists,
        Reason::Conflict => Code::Aborted,
        Reason::Invalid
        | Reason::BadRequest
        | Reason::UnsupportedMediaType
        | Reason::NotAcceptable => Code::InvalidArgument,
        Reason::Expired => Code::OutOfRange,
        Reason::RequestEntityTooLarge | Reason::TooManyRequests | Reason::InsufficientStorage => {
            Code::ResourceExhausted
        }
        Reason::Unauthorized => Code::Unauthenticated,
        Reason::Forbidden => Code::PermissionDenied,
        Reason::Timeout => Code::DeadlineExceeded,
        Reason::ServiceUnavailable => Code::Unavailable,
        Reason::MethodNotAllowed => Code::Unimplemented,
        Reason::InternalError => Code::Internal,
    }
}

/// A reason for a gRPC code that carries no keel detail (transport errors, other servers).
fn reason_of(code: Code) -> Reason {
    match code {
        Code::NotFound => Reason::NotFound,
        Code::AlreadyExists => Reason::AlreadyExists,
        Code::Aborted => Reason::Conflict,
        Code::InvalidArgument => Reason::BadRequest,
        // keel's own Expired and TooManyRequests carry a detail; bare, these codes are the
        // transport refusing a message over its size limit (tonic: OUT_OF_RANGE; others:
        // RESOURCE_EXHAUSTED).
        Code::OutOfRange | Code::ResourceExhausted => Reason::RequestEntityTooLarge,
        Code::Unauthenticated => Reason::Unauthorized,
        Code::PermissionDenied => Reason::Forbidden,
        Code::DeadlineExceeded | Code::Cancelled => Reason::Timeout,
        Code::Unavailable => Reason::ServiceUnavailable,
        Code::Unimplemented => Reason::MethodNotAllowed,
        _ => Reason::InternalError,
    }
}

/// An error on the wire: its code, a one-line summary as `grpc-message`, and its whole Status
/// once, in `grpc-status-details-bin`, cut to fit every gRPC client's trailer limit
/// ([`ApiError::to_bounded`]).
pub fn status(e: ApiError) -> tonic::Status {
    let (summary, details) = e.to_bounded();
    tonic::Status::with_details(code(e.reason), summary, details.into())
}

/// Reads an error back from a gRPC status: exactly, when it carries keel's detail; from the
/// code and message otherwise (a transport failure, a proxy).
pub fn error(status: &tonic::Status) -> ApiError {
    if let Some(e) = ApiError::from_status_json(status.details()) {
        return e;
    }
    let reason = if status.message().contains("transport error") {
        // The connection broke (a server died mid-request): retry elsewhere.
        Reason::ServiceUnavailable
    } else {
        reason_of(status.code())
    };
    ApiError::new(reason, Target::default(), status.message())
}

#[cfg(test)]
mod tests {
    use keel_api::FieldCause;

    use super::*;

    #[test]
    fn errors_round_trip_through_a_grpc_status() {
        let e = ApiError::invalid(
            Target::new("", "ConfigMap", "Bad"),
            vec![FieldCause::invalid(
                "metadata.name",
                "Bad",
                "must be lowercase",
            )],
        );
        let s = status(e.clone());
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(error(&s), e);
        assert!(
            s.message()
                .contains("ConfigMap \"Bad\" is invalid: metadata.name")
        );
    }

    #[test]
    fn a_retry_after_hint_travels_in_the_status_details() {
        let e = ApiError::too_many_requests(Target::default(), "slow down").retry_after(3);
        let s = status(e);
        assert_eq!(s.code(), Code::ResourceExhausted);
        assert_eq!(error(&s).retry_after_seconds, Some(3));
    }

    #[test]
    fn a_bare_status_is_read_from_its_code() {
        // A bare size refusal of the transport is never mistaken for Expired.
        let bare = tonic::Status::out_of_range("decoded message length too large");
        assert_eq!(error(&bare).reason, Reason::RequestEntityTooLarge);
        let broken = tonic::Status::unknown("transport error: connection reset");
        assert_eq!(error(&broken).reason, Reason::ServiceUnavailable);
        let other = tonic::Status::permission_denied("no");
        assert_eq!(
            (error(&other).reason, error(&other).message),
            (Reason::Forbidden, "no".to_string())
        );
    }

    #[test]
    fn every_reason_has_its_design_code() {
        assert_eq!(code(Reason::Conflict), Code::Aborted);
        assert_eq!(code(Reason::Expired), Code::OutOfRange);
        assert_eq!(code(Reason::RequestEntityTooLarge), Code::ResourceExhausted);
        assert_eq!(code(Reason::ServiceUnavailable), Code::Unavailable);
        assert_eq!(code(Reason::Forbidden), Code::PermissionDenied);
    }
}
