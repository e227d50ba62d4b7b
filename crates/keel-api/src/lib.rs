//! keel's API: the object model and the error type.
//!
//! Nothing here does I/O, and nothing here knows the transport: the gRPC messages and the
//! mapping of errors to gRPC codes are keel-wire's, the tables of `get` are keel-print's. The
//! server and the client both speak in these terms:
//! - [`Object`]: a Kubernetes-shaped JSON object;
//! - [`Metadata`]: the one vocabulary for reading an object's metadata (names, owners,
//!   finalizers, initializers), over an [`Object`] or its JSON; [`Selectable`] is what
//!   selectors read of an object;
//! - [`ResourceInfo`] and [`builtin_resources`]: what a resource is (group, version, kind, scope);
//! - [`ApiError`]: the one error type, shaped like Kubernetes' `Status`;
//! - [`selector`]: label and field selectors; [`validation`]: names, labels, annotations;
//! - [`shard`]: which shard of a controller's keyspace an object belongs to.

#![forbid(unsafe_code)]

pub mod conversion;
pub mod error;
pub mod meta;
pub mod object;
pub mod resource;
pub mod scale;
pub mod selector;
pub mod shard;
pub mod validation;

pub use error::{ApiError, FieldCause, Reason, Target, echo, echo_name, shorten, shorten_name};
pub use meta::Metadata;
pub use object::{Object, ObjectError, Selectable};
pub use resource::{GroupVersionResource, ResourceInfo, builtin_resources, review_resources};
