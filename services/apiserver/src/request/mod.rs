//! Request handling: the one path every verb takes, whatever transport it came by. A transport
//! turns its wire into a [`Request`] of one verb ([`Create`], [`Get`], ...); the [`Handler`]
//! gives it a deadline, looks up its resource, runs it against the registry and records its
//! metrics. Limits, authorization (with the user that the transport authenticated) and the
//! audit log are here too, the same for every transport.
//!
//! It knows the registry below it and nothing of the wire: requests and answers are keel's
//! types, errors are `ApiError`s.

mod audit;
mod authorizer;
mod create;
mod delete;
mod delete_collection;
mod evict;
mod fields;
mod get;
mod handler;
mod impersonation;
mod limits;
mod list;
mod manager;
mod names;
mod patch;
mod token;
mod update;
mod watch;

pub use audit::{AuditConfig, AuditLog};
pub use create::Create;
pub use delete::Delete;
pub use delete_collection::DeleteCollection;
pub use evict::Evict;
pub use fields::FieldValidation;
pub use get::Get;
pub use handler::{
    Caller, Context, DEFAULT_TIMEOUT, Handler, MAX_TIMEOUT, Request, TokenIssuer, Verb, Warnings,
};
pub use impersonation::Impersonation;
pub use limits::{Class, Limits, LimitsConfig};
pub use list::{List, ListResult};
pub use manager::FieldManager;
pub use patch::{Patch, Patched};
pub use token::RequestToken;
pub use update::Update;
pub use watch::{OpenWatch, Watch, WatchEvent, WatchEventKind};
// The parameters verbs take, as the registry defines them.
pub use crate::registry::{DeleteOptions, PatchType, Propagation, Subresource};
