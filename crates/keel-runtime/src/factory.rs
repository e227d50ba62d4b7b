//! The shared informer factory: one informer (one List+Watch) per resource and options per
//! process, however many controllers ask for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use keel_api::GroupVersionResource;
use keel_client::Client;
use tokio::sync::watch;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::informer::Informer;
use crate::reflector::{ShardBy, ShardFeed, WatchOptions};

/// Hands out shared [`Informer`]s and runs them. Cheap to clone (clones share the informers).
///
/// Informers run from [`InformerFactory::start`] until [`InformerFactory::shut_down`], or
/// until the last clone of the factory is dropped: keep the factory for as long as its
/// informers are used.
#[derive(Clone)]
pub struct InformerFactory {
    shared: Arc<Shared>,
}

struct Shared {
    client: Client,
    state: Mutex<State>,
    /// Tells the informers' tasks to stop; dropping it (with the last factory) does too.
    stop: watch::Sender<bool>,
}

struct State {
    informers: HashMap<(GroupVersionResource, WatchOptions), Informer>,
    started: bool,
    resync: Option<Duration>,
    shards: Option<ShardFeed>,
}

impl InformerFactory {
    pub fn new(client: Client) -> InformerFactory {
        InformerFactory {
            shared: Arc::new(Shared {
                client,
                state: Mutex::new(State {
                    informers: HashMap::new(),
                    started: false,
                    resync: None,
                    shards: None,
                }),
                stop: watch::channel(false).0,
            }),
        }
    }

    /// Re-delivers every cached object to the handlers (as an update with the object alike
    /// on both sides) every `period`, for controllers that must re-check the world even when
    /// nothing changes. Applies to informers started afterwards. Off by default.
    pub fn with_resync(self, period: Duration) -> InformerFactory {
        self.state().resync = Some(period);
        self
    }

    /// Informers made with [`WatchOptions::sharded`] cache only the shards `feed` says this
    /// replica holds, following the set as it changes. Applies to informers started afterwards.
    pub fn with_shards(self, feed: ShardFeed) -> InformerFactory {
        self.state().shards = Some(feed);
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The informer of every object of a resource.
    pub fn informer(&self, gvr: &GroupVersionResource) -> Informer {
        self.informer_with(gvr, WatchOptions::default())
    }

    /// The informer of a resource's objects selected by `options`; equal options share one.
    /// Started at once if the factory is.
    pub fn informer_with(&self, gvr: &GroupVersionResource, options: WatchOptions) -> Informer {
        let mut state = self.state();
        let informer = state
            .informers
            .entry((gvr.clone(), options.clone()))
            .or_insert_with(|| Informer::new(gvr.clone(), options))
            .clone();
        if state.started {
            self.start_one(&informer, &state);
        }
        informer
    }

    fn start_one(&self, informer: &Informer, state: &State) {
        informer.start(
            self.shared.client.clone(),
            state.resync,
            state.shards.clone(),
            self.shared.stop.subscribe(),
        );
    }

    /// Starts every informer made so far, and every one made from now on. Must be called
    /// inside a tokio runtime.
    pub fn start(&self) {
        let mut state = self.state();
        state.started = true;
        for informer in state.informers.values() {
            self.start_one(informer, &state);
        }
    }

    /// Waits until every started informer has its first full list.
    pub async fn wait_for_cache_sync(&self) {
        let started: Vec<Informer> = self
            .state()
            .informers
            .values()
            .filter(|i| i.is_started())
            .cloned()
            .collect();
        for informer in started {
            informer.wait_for_sync().await;
        }
    }

    /// Whether every started informer has its first full list.
    pub fn has_synced(&self) -> bool {
        self.state()
            .informers
            .values()
            .filter(|i| i.is_started())
            .all(Informer::has_synced)
    }

    /// Registers, into `registry`, what each informer caches and receives, read on every
    /// scrape: `keel_informer_objects` (objects in its store) and
    /// `keel_informer_received` (objects received: watch events and listed objects), labelled
    /// by resource and by how the informer is sharded.
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(InformerMetrics {
            factory: self.clone(),
        }));
    }

    /// Stops every informer's list, watch and handlers. Their stores keep what they hold.
    pub fn shut_down(&self) {
        self.shared.stop.send_replace(true);
    }
}

/// An informer's labels: resource, how it is sharded, whether it shows uninitialized objects.
type InformerLabels = [(&'static str, String); 3];

/// The per-informer metrics of a factory, computed on each scrape.
struct InformerMetrics {
    factory: InformerFactory,
}

impl std::fmt::Debug for InformerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InformerMetrics")
    }
}

impl Collector for InformerMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut rows: Vec<(InformerLabels, i64, u64)> = self
            .factory
            .state()
            .informers
            .values()
            .map(|i| {
                let options = i.options();
                let sharded = match options.shard_by {
                    None => "none",
                    Some(ShardBy::Name) => "name",
                    Some(ShardBy::Owner) => "owner",
                };
                let labels = [
                    ("resource", i.gvr().to_string()),
                    ("shard_by", sharded.to_string()),
                    ("uninitialized", options.include_uninitialized.to_string()),
                ];
                let cached = i64::try_from(i.store().len()).unwrap_or(i64::MAX);
                (labels, cached, i.received())
            })
            .collect();
        rows.sort();
        let mut objects = encoder.encode_descriptor(
            "keel_informer_objects",
            "Objects in an informer's cache",
            None,
            MetricType::Gauge,
        )?;
        for (labels, cached, _) in &rows {
            ConstGauge::new(*cached).encode(objects.encode_family(labels)?)?;
        }
        let mut received = encoder.encode_descriptor(
            "keel_informer_received",
            "Objects an informer received: watch events and listed objects",
            None,
            MetricType::Counter,
        )?;
        for (labels, _, n) in &rows {
            ConstCounter::new(*n).encode(received.encode_family(labels)?)?;
        }
        Ok(())
    }
}
