//! `v1` LimitRange: stored and served; keel applies no limits to pods (DESIGN.md).

use super::{Kind, MergeKeys, builtin_merge_keys};

pub struct LimitRange {
    merge: Option<MergeKeys>,
}

impl LimitRange {
    pub fn new() -> Self {
        LimitRange {
            merge: builtin_merge_keys("v1", "LimitRange"),
        }
    }
}

impl Kind for LimitRange {
    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
