//! keel-apiserver: a gRPC API over Kubernetes-shaped JSON objects stored in etcd.
//!
//! Layers, each calling only the one below it (DESIGN.md, "How a request flows"; checked by the
//! `layers` test):
//!
//! - [`transport`]: gRPC and Kubernetes' REST dialect on one port, and the HTTP side port for health and metrics;
//! - [`request`]: the one path every verb takes: deadline, resource lookup, metrics;
//! - [`registry`]: the served resources and each kind's rules (strategy, validation,
//!   admission, deletion and finalizers), PATCH as a mutation, the registry store;
//! - [`storage`]: objects on etcd: codec and keys, reads and paged lists, the guaranteed-update
//!   write loop, PATCH coalescing, watch caches and watchers, history compaction;
//! - [`etcd`]: key-value calls, compare-and-swap transactions and watches on etcd.
//!
//! [`auth`] tells who sent a request (client certificates, bearer tokens); [`tls`] reads the
//! listeners' certificates; [`server`] wires
//! them together and shuts them down in order on the [`shutdown`] signals;
//! [`metrics`] is what every layer records into.

#![forbid(unsafe_code)]

pub mod auth;
pub mod config;
pub mod etcd;
#[cfg(test)]
mod kind_rule;
#[cfg(test)]
mod layers;
pub mod metrics;
pub mod registry;
pub mod request;
pub mod server;
pub mod shutdown;
pub mod storage;
pub mod tls;
pub mod transport;

pub use config::Config;
pub use server::run;
