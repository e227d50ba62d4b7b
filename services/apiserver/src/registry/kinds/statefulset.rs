//! `apps/v1` StatefulSet: a workload (replicas, selector, pod template, `scale`) with a
//! governing service, defaulted as Kubernetes' apps/v1 does; the controller-manager's
//! `statefulset` controller runs it.

use keel_api::{FieldCause, Object};
use serde_json::json;

use super::{Kind, MergeKeys, builtin_merge_keys, pod, set_default, spec_mut, workload};

pub struct StatefulSet {
    merge: Option<MergeKeys>,
}

impl StatefulSet {
    pub fn new() -> Self {
        StatefulSet {
            merge: builtin_merge_keys("apps/v1", "StatefulSet"),
        }
    }
}

impl Kind for StatefulSet {
    fn subresources(&self) -> &'static [&'static str] {
        workload::SUBRESOURCES
    }

    fn scale(&self) -> Option<keel_api::scale::ScalePaths> {
        Some(keel_api::scale::ScalePaths::workload())
    }

    fn initial_status(&self) -> Option<serde_json::Value> {
        Some(json!({"replicas": 0, "availableReplicas": 0}))
    }

    /// `SetDefaults_StatefulSet`.
    fn defaults(&self, obj: &mut Object) {
        workload::default_replicas(obj);
        pod::template_defaults(obj, &["spec", "template"]);
        let Some(spec) = spec_mut(obj) else { return };
        set_default(spec, "podManagementPolicy", json!("OrderedReady"));
        set_default(spec, "revisionHistoryLimit", json!(10));
        set_default(
            spec,
            "updateStrategy",
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
        );
        set_default(
            spec,
            "persistentVolumeClaimRetentionPolicy",
            json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
        );
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        workload::workload_spec(obj.as_map().get("spec"), causes);
    }

    /// Kubernetes lets an update change replicas, ordinals, the template, the update
    /// strategy, the revision history limit, the retention policy and minReadySeconds only.
    fn validate_update(&self, new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
        let fixed = |o: &Object| {
            let mut spec = o.as_map().get("spec").cloned().unwrap_or(json!({}));
            if let Some(m) = spec.as_object_mut() {
                for f in [
                    "replicas",
                    "ordinals",
                    "template",
                    "updateStrategy",
                    "persistentVolumeClaimRetentionPolicy",
                    "minReadySeconds",
                    "revisionHistoryLimit",
                ] {
                    m.remove(f);
                }
            }
            spec
        };
        if fixed(new) != fixed(old) {
            causes.push(FieldCause::forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ));
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_may_change_the_history_limit_but_not_the_service_name() {
        let sts = |history: i64, service: &str| {
            let mut o = Object::from_value(json!({"metadata": {"name": "db"},
                "spec": {"serviceName": service, "revisionHistoryLimit": history}}))
            .unwrap();
            StatefulSet::new().defaults(&mut o);
            o
        };
        let mut causes = Vec::new();
        StatefulSet::new().validate_update(&sts(5, "db"), &sts(10, "db"), &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
        StatefulSet::new().validate_update(&sts(10, "other"), &sts(10, "db"), &mut causes);
        assert_eq!(causes.len(), 1);
    }
}
