//! The shared informer factory: one informer (one List+Watch) per resource and options per
//! process, however many controllers ask for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use keel_api::GroupVersionResource;
use keel_client::Client;
use tokio::sync::watch;

use crate::informer::Informer;
use crate::reflector::{ShardFeed, WatchOptions};

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

    /// Stops every informer's list, watch and handlers. Their stores keep what they hold.
    pub fn shut_down(&self) {
        self.shared.stop.send_replace(true);
    }
}
