//! Request handling: the one path every verb takes, whatever transport it came by. A transport
//! turns its wire into a [`Request`] of one verb ([`Create`], [`Get`], ...); the [`Handler`]
//! gives it a deadline, looks up its resource, runs it against the registry and records its
//! metrics. Authentication, authorization and limits belong here too, once keel has them.
//!
//! It knows the registry below it and nothing of the wire: requests and answers are keel's
//! types, errors are `ApiError`s.

mod create;
mod delete;
mod get;
mod handler;
mod list;
mod names;
mod patch;
mod update;
mod watch;

pub use create::Create;
pub use delete::Delete;
pub use get::Get;
pub use handler::{Context, DEFAULT_TIMEOUT, Handler, MAX_TIMEOUT, Request, Verb};
pub use list::{List, ListResult};
pub use patch::Patch;
pub use update::Update;
pub use watch::{OpenWatch, Watch, WatchEvent, WatchEventKind};
// The parameters verbs take, as the registry defines them.
pub use crate::registry::{DeleteOptions, PatchType, Propagation, Subresource};
