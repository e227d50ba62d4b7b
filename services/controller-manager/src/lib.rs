//! keel-controller-manager: the controllers that make declared objects happen, written the
//! Kubernetes way on `keel-runtime` (shared informers → work queues → reconcile), talking to the
//! API servers only through gRPC watch streams and writes.
//!
//! - [`controllers::replicaset`]: `spec.replicas` Pods per ReplicaSet, with expectations.
//! - [`controllers::deployment`]: a ReplicaSet per pod template; rolling update and recreate.
//! - [`controllers::podlifecycle`]: keel has no nodes; this plays the kubelet.
//! - [`controllers::garbagecollector`]: dependents of deleted owners; foreground and orphan.
//! - [`controllers::namespace`]: a deleted namespace's contents go first, then the namespace.
//!
//! One replica is active at a time (a `Lease` in `keel-system`); standbys keep their caches
//! warm so a take-over starts at once.

#![forbid(unsafe_code)]

pub mod config;
pub mod controllers;
pub mod objects;
pub mod shutdown;

use std::sync::{Arc, Mutex};

use keel_client::{Client, ClientConfig};
use keel_runtime::{InformerFactory, LeaderElection, LeaderElectionConfig, LeaseLock};
use prometheus_client::registry::Registry;
use tracing::info;

pub use config::Config;

/// The Lease the replicas elect their active one on.
pub const LEADER_LEASE: (&str, &str) = ("keel-system", "keel-controller-manager");

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the controller-manager until SIGTERM (`Ok`) or until it loses leadership (`Err`: the
/// process exits so that nothing it started can act as a second leader).
pub async fn run(config: Config) -> Result<(), BoxError> {
    let config = Arc::new(config);
    let names = controllers::enabled(&config.controllers)?;
    let identity = config.identity();
    let client = Client::connect(&ClientConfig::new(&config.server)).await?;
    let factory = InformerFactory::new(client.clone());
    let mut registry = Registry::default();
    let ctx = controllers::Context {
        client: client.clone(),
        factory: factory.clone(),
        config: config.clone(),
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
    info!(controllers = ?names, %identity, "starting informers");
    factory.start();

    let mut term = std::pin::pin!(keel_runtime::termination());
    let (stop_election, election_stopped) = shutdown::channel();
    let mut election = None;
    let leader = if config.leader_elect {
        let le = LeaderElection::new(
            client.clone(),
            LeaseLock {
                namespace: LEADER_LEASE.0.into(),
                name: LEADER_LEASE.1.into(),
                identity: identity.clone(),
            },
            LeaderElectionConfig {
                lease_duration: config.leader_elect_lease_duration,
                renew_deadline: config.leader_elect_renew_deadline,
                retry_period: config.leader_elect_retry_period,
            },
        )?;
        let handle = le.handle();
        election = Some(tokio::spawn(le.run(election_stopped.wait())));
        info!("waiting to become the leader");
        tokio::select! {
            led = handle.wait_for_leadership() => if !led {
                return Err("leader election ended before this replica led".into());
            },
            _ = &mut term => {
                stop_election.trigger();
                factory.shut_down();
                return Ok(());
            }
        }
        info!("became the leader");
        Some(handle)
    } else {
        None
    };

    tokio::select! {
        _ = factory.wait_for_cache_sync() => {}
        _ = &mut term => {
            stop_election.trigger();
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
    let lost = async {
        match &leader {
            Some(h) => h.wait_for_loss().await,
            None => std::future::pending().await,
        }
    };
    let lost_leadership = tokio::select! {
        _ = &mut term => false,
        _ = lost => true,
    };
    info!(
        lost_leadership,
        "stopping: controllers drain their in-flight work"
    );
    stop_controllers.trigger();
    while tasks.join_next().await.is_some() {}
    stop_election.trigger();
    if let Some(e) = election {
        let _ = e.await;
    }
    factory.shut_down();
    if lost_leadership {
        return Err("lost leadership".into());
    }
    Ok(())
}
