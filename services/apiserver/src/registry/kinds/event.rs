//! `v1` Event (and `events.k8s.io/v1`, the same objects converted): stored as sent, and
//! expiring `--event-ttl` after the last write.

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
    /// Events expire `--event-ttl` after their last write.
    fn expires(&self) -> bool {
        true
    }

    /// What `kubectl describe` selects an object's Events by, and the rest of Kubernetes'
    /// Event fields (`source` reads `source.component`, as in Kubernetes).
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
