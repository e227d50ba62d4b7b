//! Reading one object: Get (from etcd, or from the watch cache when any version will do) and
//! the current state a write starts from.

use keel_api::{ApiError, Object, ResourceInfo};
use tokio::time::Instant;

use super::Store;
use super::codec::from_storage;
use super::keys::ObjectKey;
use crate::etcd::{Stored, prefix_end};

/// Where a Get reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// etcd, linearizable: the newest state.
    Etcd,
    /// The watch cache: any version will do (`resourceVersion: "0"`).
    Cache,
}

/// The current state of a key, as a write starts from it.
pub(super) struct Current {
    pub obj: Object,
    pub rv: i64,
    /// Read from the watch cache (or remembered from an earlier write): it may be stale, so a
    /// no-op result must be confirmed against etcd before it is answered.
    pub unverified: bool,
}

impl Current {
    /// The state a lost compare-and-swap returned (`None`: the key is gone).
    pub fn fresh(info: &ResourceInfo, stale: Option<Stored>) -> Result<Option<Current>, ApiError> {
        stale
            .map(|kv| {
                from_storage(info, &kv.value, kv.mod_revision).map(|obj| Current {
                    obj,
                    rv: kv.mod_revision,
                    unverified: false,
                })
            })
            .transpose()
    }
}

impl Store {
    /// One object, or `NotFound`.
    pub async fn get(
        &self,
        key: &ObjectKey,
        from: ReadFrom,
        deadline: Instant,
    ) -> Result<Object, ApiError> {
        let t = key.target();
        if from == ReadFrom::Cache {
            let cache = self.cache(&key.info);
            cache.wait_ready(deadline).await?;
            return match cache.get(&key.key) {
                Some(o) => o.object(),
                None => Err(ApiError::not_found(t)),
            };
        }
        match self
            .read_current(key, false, deadline)
            .await
            .map_err(|e| e.with_target(&t))?
        {
            Some(c) => Ok(c.obj),
            None => Err(ApiError::not_found(t)),
        }
    }

    /// The names of a cluster-scoped resource's objects with their `resourceVersion`s, newest,
    /// from etcd without reading the objects.
    pub async fn versions(
        &self,
        info: &ResourceInfo,
        deadline: Instant,
    ) -> Result<Vec<(String, String)>, ApiError> {
        let prefix = self.keys.resource_prefix(info);
        let keys = self
            .kv
            .revisions(prefix.as_bytes(), prefix_end(&prefix), deadline)
            .await?;
        Ok(keys
            .into_iter()
            .map(|(key, rv)| {
                let name = key.strip_prefix(&prefix).unwrap_or(&key);
                (name.to_string(), rv.to_string())
            })
            .collect())
    }

    /// The state a write starts from: with `allow_cache`, the newer of the watch cache's copy
    /// and this replica's own last write (no round trip); else, or when neither has the key,
    /// etcd's.
    pub(super) async fn read_current(
        &self,
        key: &ObjectKey,
        allow_cache: bool,
        deadline: Instant,
    ) -> Result<Option<Current>, ApiError> {
        if allow_cache {
            let cache = self.cache(&key.info);
            let cached = if cache.is_ready() {
                cache.get(&key.key)
            } else {
                None
            };
            let mine = self.recent.get(&key.key);
            // The newer of the two, parsed.
            let newest = match (cached, mine) {
                (Some(c), Some(m)) if m.rv > c.rv() => {
                    Some((from_storage(&key.info, &m.bytes, m.rv)?, m.rv))
                }
                (Some(c), _) => Some((c.object()?, c.rv())),
                (None, Some(m)) => Some((from_storage(&key.info, &m.bytes, m.rv)?, m.rv)),
                (None, None) => None,
            };
            if let Some((obj, rv)) = newest {
                return Ok(Some(Current {
                    rv,
                    obj,
                    unverified: true,
                }));
            }
        }
        let Some(kv) = self.kv.get(&key.key, deadline).await? else {
            return Ok(None);
        };
        let obj = from_storage(&key.info, &kv.value, kv.mod_revision)?;
        Ok(Some(Current {
            obj,
            rv: kv.mod_revision,
            unverified: false,
        }))
    }
}
