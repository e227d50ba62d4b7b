//! Custom resources: each served version of a CRD is a kind, its rules read from the CRD
//! (`registry::crd` derives them).

use keel_api::{Object, ResourceInfo};
use serde_json::{Map, Value};

use super::{Kind, MergeKeys};
use crate::registry::crd::{self, CustomResource};

/// A custom resource's rules, from its CRD: created without status when the CRD has the
/// status subresource (its controller writes one), so the schema's required status fields are
/// not asked of its creator; pruned and validated against its version's schema; stored at
/// the storage version; merge keys from `x-kubernetes-list-map-keys` (keel's extension, since
/// Kubernetes refuses strategic patches of custom objects); replaced only at a named
/// `resourceVersion`, as in Kubernetes.
impl Kind for CustomResource {
    fn initial_status(&self) -> Option<Value> {
        None
    }

    fn scale(&self) -> Option<keel_api::scale::ScalePaths> {
        self.scale.clone()
    }

    /// What its schema would prune, as Kubernetes warns of or refuses it (`fieldValidation`).
    fn unknown_fields(&self, _: &ResourceInfo, obj: &Map<String, Value>) -> Vec<String> {
        crd::unknown_fields(self, obj)
    }

    /// Pruned by its schema in `admit`, with its validation.
    fn prune(&self, _: &ResourceInfo, _: &mut Object) {}

    fn admit(&self, obj: &mut Object) -> Result<(), keel_api::ApiError> {
        crd::validate_object(self, obj, None, false)
    }

    /// An update's: the schema's transition rules see the stored object as `oldSelf`; a
    /// status write is checked as Kubernetes' status strategy checks it.
    fn admit_update(
        &self,
        obj: &mut Object,
        old: &Object,
        status: bool,
    ) -> Result<(), keel_api::ApiError> {
        crd::validate_object(self, obj, Some(old), status)
    }

    fn to_storage_version(&self, obj: &mut Object) {
        crd::to_storage_version(self, obj)
    }

    fn merge_schema(&self) -> Option<MergeKeys> {
        Some(self.merge())
    }

    fn update_needs_resource_version(&self) -> bool {
        true
    }

    fn printer_columns(&self) -> &[Value] {
        &self.printer_columns
    }

    fn openapi_schema(&self) -> Option<Value> {
        CustomResource::openapi_schema(self)
    }
}
