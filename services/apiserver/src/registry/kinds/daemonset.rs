//! `apps/v1` DaemonSet: a selector and a pod template, defaulted as Kubernetes' apps/v1
//! does; the controller-manager's `daemonset` controller runs it.

use keel_api::{FieldCause, Object};
use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, pod, set_default, spec_mut, workload};

pub struct DaemonSet {
    merge: Option<MergeKeys>,
}

impl DaemonSet {
    pub fn new() -> Self {
        DaemonSet {
            merge: builtin_merge_keys("apps/v1", "DaemonSet"),
        }
    }
}

impl Kind for DaemonSet {
    fn initial_status(&self) -> Option<Value> {
        Some(json!({
            "currentNumberScheduled": 0,
            "desiredNumberScheduled": 0,
            "numberMisscheduled": 0,
            "numberReady": 0,
        }))
    }

    /// `SetDefaults_DaemonSet`.
    fn defaults(&self, obj: &mut Object) {
        pod::template_defaults(obj, &["spec", "template"]);
        let Some(spec) = spec_mut(obj) else { return };
        set_default(spec, "revisionHistoryLimit", json!(10));
        set_default(spec, "updateStrategy", json!({"type": "RollingUpdate"}));
        if let Some(strategy) = spec
            .get_mut("updateStrategy")
            .and_then(Value::as_object_mut)
            && strategy.get("type") == Some(&json!("RollingUpdate"))
        {
            set_default(
                strategy,
                "rollingUpdate",
                json!({"maxUnavailable": 1, "maxSurge": 0}),
            );
        }
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        workload::workload_spec(obj.as_map().get("spec"), causes);
    }

    fn validate_update(&self, new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
        workload::selector_unchanged(new, old, causes);
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
