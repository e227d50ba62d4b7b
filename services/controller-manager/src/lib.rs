//! keel-controller-manager: the controllers that make declared objects happen, written the
//! Kubernetes way on `keel-runtime` (shared informers → work queues → reconcile), talking to the
//! API servers only through gRPC watch streams and writes.
//!
//! - [`controllers::replicaset`]: `spec.replicas` Pods per ReplicaSet, with expectations.
//! - [`controllers::deployment`]: a ReplicaSet per pod template; rolling update and recreate.
//! - [`controllers::podlifecycle`]: keel has no nodes; this plays the kubelet.
//! - [`controllers::garbagecollector`]: dependents of deleted owners; foreground and orphan.
//! - [`controllers::namespace`]: a deleted namespace's contents go first, then the namespace.
//! - [`controllers::clusterroleaggregation`]: aggregated ClusterRoles (`admin`, `edit`, `view`)
//!   get the rules of the ClusterRoles they select.
//! - [`controllers::serviceaccount`]: every namespace has a `default` ServiceAccount.
//!
//! Any number of replicas share the work: each controller's keyspace is split into shards
//! (`--shards`, 32 by default), each held by one replica through a `Lease` in `keel-system`
//! (`keel_runtime::shards`). A replica reconciles a key only while it holds the key's shard, and
//! its informers cache only its shards' objects; a replica that dies has its shards taken by the
//! others within a lease duration.

#![forbid(unsafe_code)]

pub mod config;
pub mod controllers;
pub mod objects;
pub mod shutdown;

use std::sync::{Arc, Mutex};

use keel_client::Client;
use keel_runtime::{InformerFactory, LeaseTiming, ShardLeaseConfig, ShardLeaseManager};
use prometheus_client::registry::Registry;
use tracing::info;

pub use config::Config;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the controller-manager until SIGTERM: then no new reconcile begins, those in flight
/// finish (within the drain timeout), every shard lease is released at once, and it returns.
pub async fn run(config: Config) -> Result<(), BoxError> {
    let config = Arc::new(config);
    let names = controllers::enabled(&config.controllers)?;
    let identity = config.identity();
    let client = Client::connect(&config.connect.config()?).await?;
    let manager = ShardLeaseManager::new(client.clone(), identity.clone(), config.shard_leases())?;
    let shards = manager.handle();
    let factory = InformerFactory::new(client.clone()).with_shards(shards.feed());
    let mut registry = Registry::default();
    manager.register_metrics(&mut registry);
    factory.register_metrics(&mut registry);
    let ctx = controllers::Context {
        client: client.clone(),
        factory: factory.clone(),
        config: config.clone(),
        shards: shards.clone(),
        gate: controllers::Gate::new(shards.clone(), &config, &mut registry)?,
        events: keel_runtime::Recorder::start(
            client.clone(),
            "keel-controller-manager",
            &identity,
            &mut registry,
        ),
    };
    let mut starts = Vec::new();
    for name in &names {
        starts.push(controllers::setup(name, &ctx, &mut registry)?);
    }

    let state = keel_runtime::health::HttpState {
        factory: factory.clone(),
        registry: Arc::new(Mutex::new(registry)),
    };
    let http_addr = keel_runtime::health::serve(config.http_listen, state).await?;
    // The first line on stdout names the bound address (tests and scripts read it).
    println!("keel-controller-manager http={http_addr} id={identity}");
    info!(controllers = ?names, %identity, shards = config.shards, "starting");
    let (stop_shards, shards_stopping) = shutdown::channel();
    let leases = tokio::spawn(manager.run(shards_stopping.wait()));
    factory.start();

    let mut term = std::pin::pin!(keel_runtime::termination());
    tokio::select! {
        _ = factory.wait_for_cache_sync() => {}
        _ = &mut term => {
            stop_shards.trigger();
            let _ = leases.await;
            factory.shut_down();
            return Ok(());
        }
    }
    info!("caches synced; controllers running");
    let (stop_controllers, stopping) = shutdown::channel();
    let mut tasks = tokio::task::JoinSet::new();
    for start in starts {
        tasks.spawn(start(stopping.clone()));
    }
    term.await;
    info!("stopping: in-flight reconciles drain, then every shard lease is released");
    // The lease manager stops new work on every shard, waits for what is in flight (up to the
    // drain timeout) and releases the leases; the controllers' workers drain meanwhile.
    stop_shards.trigger();
    stop_controllers.trigger();
    let _ = leases.await;
    while tasks.join_next().await.is_some() {}
    factory.shut_down();
    Ok(())
}

impl Config {
    /// The shard leases as the flags set them.
    pub fn shard_leases(&self) -> ShardLeaseConfig {
        ShardLeaseConfig {
            count: self.shards,
            timing: LeaseTiming {
                lease_duration: self.shard_lease_duration,
                renew_deadline: self.shard_renew_deadline,
                retry_period: self.shard_retry_period,
            },
            drain_timeout: self.shard_drain_timeout,
            ..ShardLeaseConfig::default()
        }
    }
}
