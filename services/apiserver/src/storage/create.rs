//! Create: a transaction that puts the object only if its key has never been written.

use keel_api::{ApiError, Object};
use tokio::time::Instant;

use super::Store;
use super::codec;
use super::keys::ObjectKey;
use crate::etcd::Cas;

impl Store {
    /// Stores a new object; `AlreadyExists` when the key holds one. Returns it at its revision.
    pub async fn create(
        &self,
        key: &ObjectKey,
        mut obj: Object,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let t = key.target();
        let bytes = codec::encode(&t, &obj)?;
        let lease = self.lease_for(key, deadline).await?;
        match self
            .kv
            .create(&key.key, bytes, lease, deadline)
            .await
            .map_err(|e| e.with_target(&t))?
        {
            Cas::Done(rev) => {
                obj.set_resource_version(&rev.to_string());
                Ok(obj)
            }
            Cas::Stale(_) => Err(ApiError::already_exists(t)),
        }
    }

    /// What [`Store::create`] would answer, writing nothing: the object (without a
    /// resourceVersion, as Kubernetes answers a dry run), or `AlreadyExists`.
    pub async fn create_dry_run(
        &self,
        key: &ObjectKey,
        obj: Object,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let t = key.target();
        codec::encode(&t, &obj)?;
        match self.kv.get(&key.key, deadline).await {
            Ok(Some(_)) => Err(ApiError::already_exists(t)),
            Ok(None) => Ok(obj),
            Err(e) => Err(e.with_target(&t)),
        }
    }
}
