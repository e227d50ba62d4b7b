//! `v1` Event: stored as sent; no rule of its own.

use super::{Kind, MergeKeys, builtin_merge_keys};

pub struct Event {
    merge: Option<MergeKeys>,
}

impl Event {
    pub fn new() -> Self {
        Event {
            merge: builtin_merge_keys("v1", "Event"),
        }
    }
}

impl Kind for Event {
    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
