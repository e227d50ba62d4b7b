//! The registry: the served resources and, per kind, the rules objects follow on their way
//! into storage (Kubernetes' `registry`): create and update rules with defaults (`strategy`),
//! validation, admission, deletion and finalizers, PATCH as a mutation, and the registry store
//! that applies them around storage's verbs.
//!
//! It knows storage below it and nothing of the transport above: patch types, delete options
//! and errors are its own or keel's types.

mod admission;
pub mod allocator;
pub mod builtin_schema;
pub mod controllers;
pub mod crd;
mod crd_formats;
pub mod crd_schema;
pub mod deletion;
pub mod errors;
mod fields;
pub(crate) mod generate_name;
mod go_regex;
pub mod initializers;
pub mod kinds;
pub mod managed;
pub mod patch;
pub mod rbac;
mod resources;
mod reviews;
mod rules;
mod store;
pub mod strategy;
#[cfg(test)]
mod testing;
pub mod validation;
pub mod webhooks;

pub use allocator::{RangeError, ServiceRanges};
pub use deletion::{DeleteOptions, Propagation};
pub use patch::PatchType;
pub use rbac::{Attributes, Policies, forbidden, policy_resources};
pub use resources::Resources;
pub use rules::RegistryRules;
pub use store::{ListOptions, Registry, Write};
pub use strategy::Subresource;
pub use webhooks::{AuditAnnotations, Requester, Warnings};
// What the registry's verbs take and return, from storage below it.
pub use crate::storage::{Filter, ListResult, WatchEvent, WatchEventKind, WatchStream, target};
