//! keel's API: the generated gRPC code, the object model and the error type.
//!
//! Nothing here does I/O. The server and the client both speak in these terms:
//! - [`proto`]: the gRPC messages and services generated from `proto/keel/v1/keel.proto`;
//! - [`Object`]: a Kubernetes-shaped JSON object with typed accessors for its metadata;
//! - [`ResourceInfo`] and [`builtin_resources`]: what a resource is (group, version, kind, scope);
//! - [`ApiError`]: the one error type, shaped like Kubernetes' `Status`, mapped to gRPC codes;
//! - [`selector`]: label and field selectors; [`validation`]: names, labels, annotations;
//! - [`shard`]: which shard of a controller's keyspace an object belongs to;
//! - [`table`]: the columns `get` shows for each kind ([`age`]: the AGE column's words).

#![forbid(unsafe_code)]

pub mod age;
pub mod conversion;
pub mod error;
pub mod object;
pub mod resource;
pub mod scale;
pub mod selector;
pub mod shard;
pub mod table;
pub mod validation;

/// Generated from `proto/keel/v1/keel.proto`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    tonic::include_proto!("keel.v1");
}

pub use error::{ApiError, FieldCause, Reason, Target, echo, echo_name, shorten_name};
pub use object::{Object, ObjectError, Selectable};
pub use resource::{GroupVersionResource, ResourceInfo, builtin_resources, review_resources};
