//! The keel controller runtime: the Kubernetes programming model on [`keel_client`].
//!
//! ```text
//! reflector ──▶ delta FIFO ──▶ indexer (Store) ──▶ handlers ──▶ work queue ──▶ controller
//! List+Watch     per-key deltas   cache + indexes    add/update/    dedup, one     N workers
//! (paged,        (bounded by      (swapped whole     delete         worker per     reconcile(key)
//!  resumed,       the keys)        on relist)                       key, backoff)
//!  relisted)
//! ```
//!
//! - [`reflector`]: paged List, then Watch from its resourceVersion with bookmarks; a broken
//!   watch resumes from the last revision, `Expired` relists; reconnects back off 800 ms → 30 s.
//! - [`delta_fifo`]: what the reflector saw, queued per key.
//! - [`store`]: the thread-safe cache with indexes by namespace, by controlling owner, and
//!   custom ones.
//! - [`informer`] and [`factory`]: one shared informer per resource and options per process,
//!   with event handlers ([`handler`]) and optional resync.
//! - [`workqueue`] and [`rate_limiter`]: client-go's rate-limited queue.
//! - [`controller`]: workers running `reconcile(key)`, with metrics and a span per reconcile.
//! - [`shards`]: shard leases, so that replicas split a controller's keyspace between them.
//! - [`events`]: Events about objects, counted and rate-limited as client-go's recorder does.
//! - [`health`]: the HTTP side port of a controller binary (`/healthz`, `/readyz`, `/metrics`).
//!
//! ```no_run
//! # async fn demo(client: keel_runtime::Client) {
//! use keel_runtime::*;
//! let factory = InformerFactory::new(client);
//! let rs = factory.informer(&keel_client::gvr("apps", "v1", "replicasets"));
//! let pods = factory.informer(&keel_client::gvr("", "v1", "pods"));
//! let queue = WorkQueue::default_controller_queue();
//! rs.add_handler(enqueue_handler(queue.clone()));
//! pods.add_handler(enqueue_owner_handler(queue.clone(), "ReplicaSet"));
//! factory.start();
//! factory.wait_for_cache_sync().await;
//! let store = rs.store();
//! let reconcile = move |key: ObjectKey| {
//!     let rs = store.get(&key); // None: deleted
//!     async move {
//!         // ... compare rs with its pods, create or delete pods ...
//!         Ok::<_, keel_client::ApiError>(Action::await_change())
//!     }
//! };
//! let shutdown = async {
//!     let _ = tokio::signal::ctrl_c().await;
//! };
//! Controller::new("replicaset", queue)
//!     .workers(4)
//!     .run(reconcile, shutdown)
//!     .await;
//! # }
//! ```

#![forbid(unsafe_code)]

mod backoff;
pub mod controller;
pub mod delta_fifo;
pub mod events;
pub mod factory;
pub mod handler;
pub mod health;
pub mod informer;
mod key;
mod lease;
mod metrics;
pub mod rate_limiter;
pub mod reflector;
pub mod shards;
pub mod store;
pub mod workqueue;

pub use backoff::Backoff;
pub use controller::{Action, Controller};
pub use events::{EventType, Recorder};
pub use factory::InformerFactory;
pub use handler::{
    EnqueueHandler, EnqueueOwnerHandler, EventHandler, HandlerFns, enqueue_handler,
    enqueue_owner_handler,
};
pub use health::termination;
pub use informer::Informer;
pub use keel_client::{Client, GroupVersionResource};
pub use key::{KeyError, ObjectKey};
pub use lease::{LeaseTiming, LeaseTimingError};
pub use rate_limiter::RateLimiter;
pub use reflector::{ReflectorError, ShardBy, ShardFeed, WatchOptions};
pub use shards::{ShardGuard, ShardHandle, ShardLeaseConfig, ShardLeaseError, ShardLeaseManager};
pub use store::{BY_CONTROLLER_UID, BY_NAMESPACE, Store, StoreError};
pub use workqueue::WorkQueue;
