//! `v1` ResourceQuota: stored and served; keel enforces no quota (DESIGN.md).

use super::{Kind, MergeKeys, builtin_merge_keys};

pub struct ResourceQuota {
    merge: Option<MergeKeys>,
}

impl ResourceQuota {
    pub fn new() -> Self {
        ResourceQuota {
            merge: builtin_merge_keys("v1", "ResourceQuota"),
        }
    }
}

impl Kind for ResourceQuota {
    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
