//! `rbac.authorization.k8s.io/v1` ClusterRole: rules that its writer must hold (`rbac::GrantCheck`).

use keel_api::{FieldCause, Object};

use super::{Kind, MergeKeys, builtin_merge_keys};
use crate::registry::rbac::{self, GrantKind};

pub struct ClusterRole;

impl Kind for ClusterRole {
    /// Its lists all replace, as Kubernetes' types declare no merge key for them.
    fn merge_schema(&self) -> Option<MergeKeys> {
        builtin_merge_keys("rbac.authorization.k8s.io/v1", "ClusterRole")
    }

    fn validate(&self, obj: &Object, causes: &mut Vec<FieldCause>) {
        rbac::validate_role(obj.as_map(), false, causes);
        rbac::validate_aggregation_rule(obj.as_map(), causes);
    }

    fn grant_kind(&self) -> Option<GrantKind> {
        Some(GrantKind::ClusterRole)
    }
}
