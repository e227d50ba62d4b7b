//! `networking.k8s.io/v1` IngressClass: stored as sent.

use super::{Kind, MergeKeys, builtin_merge_keys};

pub struct IngressClass {
    merge: Option<MergeKeys>,
}

impl IngressClass {
    pub fn new() -> Self {
        IngressClass {
            merge: builtin_merge_keys("networking.k8s.io/v1", "IngressClass"),
        }
    }
}

impl Kind for IngressClass {
    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
