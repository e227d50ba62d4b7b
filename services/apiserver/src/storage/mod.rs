//! Storage on etcd: the store of every verb, the watch caches, the watchers, PATCH coalescing
//! and history compaction.

pub mod coalescer;
pub mod compactor;
pub mod etcd;
pub mod store;
pub mod watch_cache;
pub mod watcher;

pub use etcd::Etcd;
pub use store::{ListQuery, Mutation, Propagation, Store, StoreConfig};
