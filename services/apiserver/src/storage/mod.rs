//! Storage: objects on etcd. The codec and key layout, the store (read, list, create, the
//! guaranteed-update write loop every change goes through, watch), the coalescer (a layer over
//! the store that batches concurrent PATCHes of one object), the watch caches and watchers, and
//! history compaction.
//!
//! Storage knows nothing above it: the registry's rules reach it as mutations and as a
//! [`WriteRules`], and its errors and watch events are keel's own types, not the wire's.

mod cached;
pub mod coalescer;
mod codec;
pub mod compactor;
mod create;
mod draft;
mod filter;
mod fresh;
mod keys;
mod list;
mod ranges;
mod read;
mod recent;
pub mod resource_version;
mod store;
#[cfg(test)]
pub(crate) mod testing;
mod ttl;
mod update;
mod watch;
pub mod watch_cache;
pub mod watcher;

pub use cached::CachedObject;
pub use coalescer::Coalescer;
pub use codec::{from_storage, target, to_storage};
pub use draft::{Change, Draft, write_entries};
pub use filter::Filter;
pub use fresh::FRESH_WAIT;
pub use keys::ObjectKey;
pub use list::{ListQuery, ListResult};
pub use ranges::{RangeValue, RangeWrite};
pub use read::ReadFrom;
pub use store::{Store, StoreConfig};
pub use update::{Committed, Mutation, UpdateOptions, WriteRules, apply_in_order};
pub use watcher::{WatchEvent, WatchEventKind, WatchStream};
