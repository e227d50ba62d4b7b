//! `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy and
//! ValidatingAdmissionPolicyBinding: CEL checks of writes inside the API server, defaulted and
//! validated as `registry::webhooks::policy` reads them.

use keel_api::{FieldCause, Object};

use super::{Kind, MergeKeys, builtin_merge_keys};
use crate::registry::webhooks::policy;

pub struct ValidatingAdmissionPolicy;

impl Kind for ValidatingAdmissionPolicy {
    fn merge_schema(&self) -> Option<MergeKeys> {
        builtin_merge_keys(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy",
        )
    }

    fn defaults(&self, obj: &mut Object) {
        policy::default_policy(obj);
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        policy::validate_policy(obj, causes);
    }
}

pub struct ValidatingAdmissionPolicyBinding;

impl Kind for ValidatingAdmissionPolicyBinding {
    fn merge_schema(&self) -> Option<MergeKeys> {
        builtin_merge_keys(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicyBinding",
        )
    }

    fn defaults(&self, obj: &mut Object) {
        policy::default_binding(obj);
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        policy::validate_binding(obj, causes);
    }
}
