//! `coordination.k8s.io/v1` Lease: stored as sent (the shard leases); no rule of its own.

use super::{Kind, MergeKeys, builtin_merge_keys};

pub struct Lease {
    merge: Option<MergeKeys>,
}

impl Lease {
    pub fn new() -> Self {
        Lease {
            merge: builtin_merge_keys("coordination.k8s.io/v1", "Lease"),
        }
    }
}

impl Kind for Lease {
    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
