//! `networking.k8s.io/v1` Ingress: stored and served; no ingress controller comes with keel.

use serde_json::{Value, json};

use super::{Kind, MergeKeys, builtin_merge_keys};

pub struct Ingress {
    merge: Option<MergeKeys>,
}

impl Ingress {
    pub fn new() -> Self {
        Ingress {
            merge: builtin_merge_keys("networking.k8s.io/v1", "Ingress"),
        }
    }
}

impl Kind for Ingress {
    fn initial_status(&self) -> Option<Value> {
        Some(json!({"loadBalancer": {}}))
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        self.merge.clone()
    }
}
