//! Sharding a controller's keyspace: which shard an object belongs to. One function for both
//! sides: the API server filters List and Watch by it, controllers take the shard lease it names
//! before they reconcile a key.
//!
//! The shard of `namespace`/`name` is FNV-1a (64 bit) of the bytes `<namespace>/<name>` (an
//! empty namespace for cluster-scoped objects), modulo the shard count. By owner, an object with
//! a controlling owner (`ownerReferences[].controller: true`) goes by its owner's name in its own
//! namespace, so that a Pod lands in its ReplicaSet's shard and a ReplicaSet in its Deployment's.

use serde_json::Value;

use crate::{Metadata, Selectable};

/// The most shards a selector may name.
pub const MAX_SHARDS: u32 = 1024;

/// The shard of the object `namespace`/`name` among `count` (`count` 0 is taken as 1).
pub fn shard_of(namespace: &str, name: &str, count: u32) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for b in namespace
        .bytes()
        .chain(std::iter::once(b'/'))
        .chain(name.bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    (h % u64::from(count.max(1))) as u32
}

/// The shard of the object `namespace`/`name` among `count`; with `by_owner`, that of its
/// controlling `owner` when it has one.
fn shard_by(namespace: &str, name: &str, owner: Option<&str>, count: u32, by_owner: bool) -> u32 {
    let owner = if by_owner { owner } else { None };
    shard_of(namespace, owner.unwrap_or(name), count)
}

/// The shard of an object's JSON (by its controlling owner with `by_owner`).
pub fn shard_of_json(obj: &Value, count: u32, by_owner: bool) -> u32 {
    shard_by(
        obj.namespace(),
        obj.name(),
        obj.controller_owner(),
        count,
        by_owner,
    )
}

/// Which shards a List or Watch wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSelector {
    pub count: u32,
    /// Sorted, each once, each below `count`.
    pub ids: Vec<u32>,
    pub by_owner: bool,
}

impl ShardSelector {
    /// Checks and normalizes what a client sent; the error says what is wrong.
    pub fn new(count: u32, mut ids: Vec<u32>, by_owner: bool) -> Result<ShardSelector, String> {
        if count == 0 || count > MAX_SHARDS {
            return Err(format!(
                "shard count must be from 1 to {MAX_SHARDS}, not {count}"
            ));
        }
        if let Some(bad) = ids.iter().find(|i| **i >= count) {
            return Err(format!("shard {bad} is not below the shard count {count}"));
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(ShardSelector {
            count,
            ids,
            by_owner,
        })
    }

    /// The shard `obj` belongs to under this selector's count and rule.
    pub fn shard(&self, obj: &impl Selectable) -> u32 {
        shard_by(
            obj.namespace(),
            obj.name(),
            obj.controller_owner(),
            self.count,
            self.by_owner,
        )
    }

    pub fn matches(&self, obj: &impl Selectable) -> bool {
        self.ids.binary_search(&self.shard(obj)).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Object;

    #[test]
    fn the_hash_is_fnv1a_of_namespace_slash_name() {
        // Pinned values (FNV-1a 64 computed independently: "default/nginx" is
        // 0xd41257455e0f9375), so that servers and clients of different builds agree.
        assert_eq!(shard_of("default", "nginx", 32), 21);
        assert_eq!(shard_of("default", "nginx", 1000), 269);
        assert_eq!(shard_of("kube-system", "web-1", 32), 9);
        assert_eq!(shard_of("", "node-a", 1000), 780);
        let spread: std::collections::HashSet<u32> = (0..1000)
            .map(|i| shard_of("default", &format!("web-{i}"), 32))
            .collect();
        assert_eq!(spread.len(), 32, "1000 names reach every shard");
    }

    #[test]
    fn owned_objects_go_with_their_controlling_owner() {
        let pod = Object::from_value(json!({"metadata": {"name": "web-abc12", "namespace": "default",
            "ownerReferences": [{"name": "other", "controller": false}, {"name": "web-7d9", "controller": true}]}}))
        .unwrap();
        let sel = ShardSelector::new(32, vec![shard_of("default", "web-7d9", 32)], true).unwrap();
        assert!(sel.matches(&pod));
        let by_self = ShardSelector {
            by_owner: false,
            ..sel.clone()
        };
        assert_eq!(by_self.shard(&pod), shard_of("default", "web-abc12", 32));
    }

    #[test]
    fn selectors_are_checked() {
        assert!(ShardSelector::new(0, vec![], false).is_err());
        assert!(ShardSelector::new(4, vec![4], false).is_err());
        assert_eq!(
            ShardSelector::new(4, vec![3, 1, 3], false).unwrap().ids,
            [1, 3]
        );
    }
}
