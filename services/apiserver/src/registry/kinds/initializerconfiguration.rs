//! `admissionregistration.k8s.io/v1alpha1` InitializerConfiguration: which initializers new
//! objects get, defaulted and validated as `registry::initializers` reads them.

use keel_api::{FieldCause, Object};

use super::{Kind, MergeKeys, builtin_merge_keys};
use crate::registry::initializers;

pub struct InitializerConfiguration;

impl Kind for InitializerConfiguration {
    /// Kubernetes 1.13's types, kept by hand in keel-patch (the kind is in no document of
    /// Kubernetes 1.32): `initializers` merge by name, their `rules` replace.
    fn merge_schema(&self) -> Option<MergeKeys> {
        builtin_merge_keys(
            "admissionregistration.k8s.io/v1alpha1",
            "InitializerConfiguration",
        )
    }

    fn defaults(&self, obj: &mut Object) {
        initializers::config_defaults(obj);
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        initializers::validate_config(obj.as_map(), causes);
    }
}
