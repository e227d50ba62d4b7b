//! The sidecar's ConfigMap, followed by an informer: both modes read the sidecar from here, so
//! an edit of the ConfigMap reaches the next Pod in either mode without a restart.

use keel_client::GroupVersionResource;
use keel_runtime::{InformerFactory, ObjectKey, Store, WatchOptions};

use crate::inject::{ConfigError, Sidecar};

fn configmaps() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "configmaps")
}

/// Why there is no sidecar to inject right now.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SidecarUnavailable {
    /// The ConfigMap does not exist (yet): the initializer waits for it, the webhook admits
    /// Pods unchanged.
    #[error("the sidecar's ConfigMap {0} does not exist")]
    Missing(ObjectKey),
    /// The ConfigMap exists but its `data.config` cannot be read: the same as missing until
    /// someone fixes it.
    #[error("the sidecar's ConfigMap {key}: {error}")]
    Invalid { key: ObjectKey, error: ConfigError },
}

/// The ConfigMap `namespace/name` as the informer cache holds it.
#[derive(Debug, Clone)]
pub struct SidecarConfigMap {
    key: ObjectKey,
    store: Store,
}

impl SidecarConfigMap {
    /// Follows the ConfigMap `key` with an informer of `factory` that watches that one object
    /// only (a field selector on its name), started with the factory.
    pub fn follow(factory: &InformerFactory, key: ObjectKey) -> SidecarConfigMap {
        let informer = factory.informer_with(
            &configmaps(),
            WatchOptions::default()
                .namespace(key.namespace.clone())
                .fields(format!("metadata.name={}", key.name)),
        );
        SidecarConfigMap::new(key, informer.store())
    }

    /// The ConfigMap `key` as `store` holds it (tests fill a store by hand).
    pub fn new(key: ObjectKey, store: Store) -> SidecarConfigMap {
        SidecarConfigMap { key, store }
    }

    pub fn key(&self) -> &ObjectKey {
        &self.key
    }

    /// Whether the informer has listed the ConfigMap once: before that, "missing" means
    /// "not read yet".
    pub fn has_synced(&self) -> bool {
        self.store.has_synced()
    }

    /// The sidecar the ConfigMap holds now.
    pub fn sidecar(&self) -> Result<Sidecar, SidecarUnavailable> {
        let cm = self
            .store
            .get(&self.key)
            .ok_or_else(|| SidecarUnavailable::Missing(self.key.clone()))?;
        Sidecar::from_configmap(&cm).map_err(|error| SidecarUnavailable::Invalid {
            key: self.key.clone(),
            error,
        })
    }
}
