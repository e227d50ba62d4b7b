//! `v1` ServiceAccount: stored as sent; every namespace gets a `default` one from the
//! controller-manager. Its `token` subresource issues tokens (`request/token.rs`).

use super::{Kind, MergeKeys, builtin_merge_keys};

pub struct ServiceAccount {
    merge: Option<MergeKeys>,
}

impl ServiceAccount {
    pub fn new() -> Self {
        ServiceAccount {
            merge: builtin_merge_keys("v1", "ServiceAccount"),
        }
    }
}

impl Kind for ServiceAccount {
    fn subresources(&self) -> &'static [&'static str] {
        &["token"]
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
