//! The keel client: typed calls over gRPC to one or several API server endpoints.
//!
//! ```no_run
//! # async fn demo() -> Result<(), keel_api::ApiError> {
//! use keel_client::{Client, ClientConfig};
//! let client = Client::connect(&ClientConfig::new(["http://127.0.0.1:6443"])).await?;
//! let cm = client.get(&keel_client::gvr("", "v1", "configmaps"), "default", "settings").await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod client;
mod delivery;
mod endpoints;
mod flags;
mod watch;

pub use client::{
    ApplyParams, Client, ClientConfig, DeleteParams, Impersonate, ListParams, ObjectList,
    TlsConfig, gvr,
};
pub use flags::ConnectFlags;
pub use keel_api::shard::ShardSelector;
pub use keel_api::{ApiError, GroupVersionResource, Metadata, Reason};
pub use keel_wire::proto::{PatchType, PropagationPolicy};
pub use watch::{Event, EventType, RawEvent, WatchParams};
