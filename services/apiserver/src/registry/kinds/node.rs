//! `v1` Node: stored and served (keel schedules nothing onto nodes).

use super::{Kind, MergeKeys, builtin_merge_keys};

pub struct Node {
    merge: Option<MergeKeys>,
}

impl Node {
    pub fn new() -> Self {
        Node {
            merge: builtin_merge_keys("v1", "Node"),
        }
    }
}

impl Kind for Node {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.unschedulable"]
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
