//! `apiextensions.k8s.io/v1` CustomResourceDefinition: validated as Kubernetes validates a
//! CRD, and given its cleanup finalizer and status on create (`registry::crd`). The custom
//! resources a CRD defines are kinds of their own: `crd::CustomResource`.

use keel_api::{FieldCause, Object};

use super::{Kind, MergeKeys, builtin_merge_keys};
use crate::registry::crd;

pub struct CustomResourceDefinition;

impl Kind for CustomResourceDefinition {
    /// Its lists all replace, as Kubernetes' types declare no merge key for them.
    fn merge_schema(&self) -> Option<MergeKeys> {
        builtin_merge_keys("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    }

    fn prepare_for_create(&self, obj: &mut Object) {
        crd::prepare_for_create(obj);
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        causes.extend(crd::validate(obj));
    }
}
