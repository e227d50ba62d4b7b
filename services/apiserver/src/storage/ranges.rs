//! Keys storage keeps beside the objects, for the registry's range allocations (Kubernetes'
//! `RangeAllocation`s under `/registry/ranges/`): one value per key, read whole and written by
//! compare-and-swap on the key's revision, so that writers on several replicas never lose one
//! another's changes. No watch cache and no codec: the registry owns the bytes.

use keel_api::ApiError;
use tokio::time::Instant;

use super::Store;
use crate::etcd::{Cas, NO_LEASE, Stored};

/// A range key's value and the revision it was last written at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeValue {
    pub bytes: Vec<u8>,
    pub revision: i64,
}

/// The outcome of a compare-and-swap of a range key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeWrite {
    /// Written, at this revision.
    Done(i64),
    /// Another writer moved the key first: its value now, from the same transaction (`None`:
    /// the key is gone).
    Stale(Option<RangeValue>),
}

fn value(s: Stored) -> RangeValue {
    RangeValue {
        bytes: s.value,
        revision: s.mod_revision,
    }
}

impl Store {
    /// The key of the range `name` (`serviceips`): `<prefix>/ranges/<name>`, as Kubernetes'
    /// `/registry/ranges/serviceips`. No resource's objects live there (an API group is never
    /// `ranges`: built-in groups are fixed and a CRD's has a dot).
    pub fn range_key(&self, name: &str) -> String {
        format!("{}/ranges/{name}", self.config.prefix.trim_end_matches('/'))
    }

    /// Reads a range key (linearizable); `None` when it was never written.
    pub async fn get_range(
        &self,
        key: &str,
        deadline: Instant,
    ) -> Result<Option<RangeValue>, ApiError> {
        Ok(self.kv.get(key, deadline).await?.map(value))
    }

    /// Writes `bytes` at `key` if the key's revision is still `expected` (0: the key does not
    /// exist yet).
    pub async fn put_range(
        &self,
        key: &str,
        expected: i64,
        bytes: Vec<u8>,
        deadline: Instant,
    ) -> Result<RangeWrite, ApiError> {
        let cas = if expected == 0 {
            self.kv.create(key, bytes, NO_LEASE, deadline).await?
        } else {
            self.kv
                .compare_and_put(key, expected, bytes, NO_LEASE, deadline)
                .await?
        };
        Ok(match cas {
            Cas::Done(rev) => RangeWrite::Done(rev),
            Cas::Stale(current) => RangeWrite::Stale(current.map(value)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::testing::{Fixture, far};

    #[tokio::test]
    async fn a_range_key_is_created_once_then_swapped_on_its_revision() {
        let f = Fixture::new();
        let key = f.store.range_key("serviceips");
        assert_eq!(key, "/registry/ranges/serviceips");
        assert_eq!(f.store.get_range(&key, far()).await.unwrap(), None);
        let RangeWrite::Done(first) = f
            .store
            .put_range(&key, 0, b"a".to_vec(), far())
            .await
            .unwrap()
        else {
            panic!("the first write creates the key");
        };
        // A second creator, and a writer of an older revision, lose and learn the value.
        let stale = RangeWrite::Stale(Some(RangeValue {
            bytes: b"a".to_vec(),
            revision: first,
        }));
        assert_eq!(
            f.store
                .put_range(&key, 0, b"b".to_vec(), far())
                .await
                .unwrap(),
            stale
        );
        assert_eq!(
            f.store
                .put_range(&key, first - 1, b"b".to_vec(), far())
                .await
                .unwrap(),
            stale
        );
        let RangeWrite::Done(second) = f
            .store
            .put_range(&key, first, b"c".to_vec(), far())
            .await
            .unwrap()
        else {
            panic!("the current revision wins");
        };
        assert_eq!(
            f.store.get_range(&key, far()).await.unwrap(),
            Some(RangeValue {
                bytes: b"c".to_vec(),
                revision: second
            })
        );
    }
}
