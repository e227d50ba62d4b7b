//! `networking.k8s.io/v1` NetworkPolicy: `policyTypes` and port protocols defaulted as
//! Kubernetes does. Stored and served: keel enforces no network policy.

use keel_api::Object;
use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys, items_mut, set_default, spec_mut};

pub struct NetworkPolicy {
    merge: Option<MergeKeys>,
}

impl NetworkPolicy {
    pub fn new() -> Self {
        NetworkPolicy {
            merge: builtin_merge_keys("networking.k8s.io/v1", "NetworkPolicy"),
        }
    }
}

impl Kind for NetworkPolicy {
    /// `SetDefaults_NetworkPolicy`: `Ingress` always, `Egress` when there are egress rules.
    fn defaults(&self, obj: &mut Object) {
        let Some(spec) = spec_mut(obj) else { return };
        if spec.get("policyTypes").is_none_or(Value::is_null) {
            let egress = spec
                .get("egress")
                .and_then(Value::as_array)
                .is_some_and(|e| !e.is_empty());
            let types = if egress {
                json!(["Ingress", "Egress"])
            } else {
                json!(["Ingress"])
            };
            spec.insert("policyTypes".into(), types);
        }
        for rules in ["ingress", "egress"] {
            for rule in items_mut(spec, rules) {
                for p in items_mut(rule, "ports") {
                    set_default(p, "protocol", json!("TCP"));
                }
            }
        }
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
