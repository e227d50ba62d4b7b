//! `rbac.authorization.k8s.io/v1` ClusterRoleBinding: subjects and a role its writer must hold or may `bind` (`rbac::GrantCheck`); `roleRef` is immutable, as in Kubernetes: a different role is a different binding.

use keel_api::{FieldCause, Object};

use super::{Kind, MergeKeys, builtin_merge_keys};
use crate::registry::rbac::{self, GrantKind};

pub struct ClusterRoleBinding;

impl Kind for ClusterRoleBinding {
    /// Its lists all replace, as Kubernetes' types declare no merge key for them.
    fn merge_schema(&self) -> Option<MergeKeys> {
        builtin_merge_keys("rbac.authorization.k8s.io/v1", "ClusterRoleBinding")
    }

    fn defaults(&self, obj: &mut Object) {
        rbac::default_binding(obj.as_map_mut());
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        rbac::validate_binding(obj.as_map(), false, causes);
    }

    fn validate_update(&self, new: &Object, old: &Object, causes: &mut Vec<FieldCause>) {
        rbac::role_ref_unchanged(new, old, causes);
    }

    fn grant_kind(&self) -> Option<GrantKind> {
        Some(GrantKind::ClusterRoleBinding)
    }
}
