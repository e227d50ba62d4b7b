//! The initializer mode (2018): for each Pod whose `metadata.initializers.pending` starts with
//! this initializer's name, a worker PATCHes the Pod with the sidecar and removes the name in
//! the same strategic merge patch ([`inject::injection_patch`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_client::{ApiError, Client, GroupVersionResource, PatchType, Reason};
use keel_runtime::{
    Action, Controller, HandlerFns, InformerFactory, ObjectKey, Store, WatchOptions, WorkQueue,
};
use prometheus_client::registry::Registry;
use tracing::{info, warn};

use crate::configmap::SidecarConfigMap;
use crate::{BoxError, Config, inject};

fn pods() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "pods")
}

struct Initializer {
    client: Client,
    name: String,
    pods: Store,
    configmap: SidecarConfigMap,
}

/// Runs until SIGTERM, then drains in-flight Pods.
pub async fn run(config: Config, configmap: ObjectKey) -> Result<(), BoxError> {
    let client = Client::connect(&config.connect.config()?).await?;
    let factory = InformerFactory::new(client.clone());
    let pod_informer =
        factory.informer_with(&pods(), WatchOptions::default().include_uninitialized());
    let configmap = SidecarConfigMap::follow(&factory, configmap);
    let queue = WorkQueue::default_controller_queue();
    let (q, name) = (queue.clone(), config.name.clone());
    let wake = move |pod: &Arc<serde_json::Value>| {
        if inject::is_next(pod, &name)
            && let Ok(k) = ObjectKey::from_object(pod)
        {
            q.add(k);
        }
    };
    let (w1, w2) = (wake.clone(), wake);
    pod_informer.add_handler(
        HandlerFns::new()
            .added(move |p| w1(p))
            .updated(move |_, p| w2(p)),
    );
    let this = Arc::new(Initializer {
        client,
        name: config.name.clone(),
        pods: pod_informer.store(),
        configmap,
    });
    let mut registry = Registry::default();
    let controller = Controller::new("initializer", queue)
        .workers(config.workers)
        .metrics(&mut registry);
    let state = keel_runtime::health::HttpState {
        factory: factory.clone(),
        registry: Arc::new(Mutex::new(registry)),
    };
    let http = keel_runtime::health::serve(config.http_listen, state).await?;
    println!("keel-initializer http={http} name={}", config.name);
    factory.start();
    factory.wait_for_cache_sync().await;
    info!(name = %config.name, configmap = %this.configmap.key(), "initializing pods");
    controller
        .run(
            move |key| {
                let this = this.clone();
                async move { this.reconcile(key).await }
            },
            keel_runtime::termination(),
        )
        .await;
    factory.shut_down();
    Ok(())
}

impl Initializer {
    async fn reconcile(&self, key: ObjectKey) -> Result<Action, ApiError> {
        let Some(pod) = self.pods.get(&key) else {
            return Ok(Action::await_change());
        };
        if !inject::is_next(&pod, &self.name) {
            return Ok(Action::await_change());
        }
        let sidecar = match self.configmap.sidecar() {
            Ok(s) => s,
            Err(e) => {
                warn!(pod = %key, "{e}; waiting for it");
                return Ok(Action::requeue(Duration::from_secs(5)));
            }
        };
        let patch = match inject::injection_patch(&pod, &sidecar, &self.name) {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(Action::await_change()),
            Err(e) => {
                warn!(pod = %key, "cannot build the patch: {e}");
                return Ok(Action::await_change());
            }
        };
        match self
            .client
            .patch(
                &pods(),
                &key.namespace,
                &key.name,
                PatchType::Strategic,
                &patch,
            )
            .await
        {
            Ok(_) => {
                info!(pod = %key, "initialized");
                Ok(Action::await_change())
            }
            // Gone, or replaced by a Pod of another uid: its own events bring it back.
            Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => {
                Ok(Action::await_change())
            }
            Err(e) => Err(e),
        }
    }
}
