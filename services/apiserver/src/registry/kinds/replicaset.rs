//! `apps/v1` ReplicaSet: a workload (replicas, selector, pod template, `scale`).

use keel_api::{FieldCause, Object};

use super::{Kind, MergeKeys, builtin_merge_keys, pod, workload};

pub struct ReplicaSet {
    merge: Option<MergeKeys>,
}

impl ReplicaSet {
    pub fn new() -> Self {
        ReplicaSet {
            merge: builtin_merge_keys("apps/v1", "ReplicaSet"),
        }
    }
}

impl Kind for ReplicaSet {
    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.replicas"]
    }

    fn subresources(&self) -> &'static [&'static str] {
        workload::SUBRESOURCES
    }

    fn scale(&self) -> Option<keel_api::scale::ScalePaths> {
        Some(keel_api::scale::ScalePaths::workload())
    }

    fn defaults(&self, obj: &mut Object) {
        workload::default_replicas(obj);
        pod::template_defaults(obj, &["spec", "template"]);
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        workload::workload_spec(obj.as_map().get("spec"), causes);
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
