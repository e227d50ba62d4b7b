//! Kubernetes' `fieldValidation`: with `Strict`, a create, update or patch that sets a field
//! the kind's schema does not declare is refused, naming every such field (at most ten), in
//! Kubernetes' words. `Warn` (the default) accepts it and warns of each such field (Kubernetes'
//! `Warning` header: `unknown field "spec.replica"`); `Ignore` accepts it silently. Either way
//! the registry drops such fields before it stores the object, as Kubernetes does. The kind
//! says which fields it does not know (`Kind::unknown_fields`): Kubernetes' schemas for the
//! built-in kinds, a CRD's for its custom objects.

use keel_api::{ApiError, ResourceInfo, Target};
use serde_json::{Map, Value};

use crate::registry::Registry;

/// How unknown fields are treated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    /// The value of Kubernetes' `fieldValidation` parameter (`""` is the default).
    pub fn parse(s: &str, t: &Target) -> Result<FieldValidation, ApiError> {
        match s {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(ApiError::bad_request(
                t.clone(),
                format!(
                    "fieldValidation {}: supported values: \"Ignore\", \"Warn\", \"Strict\"",
                    keel_api::echo(other)
                ),
            )),
        }
    }

    /// Refuses, under `Strict`, an object of the kind (or a merge or strategic merge patch of
    /// one) that sets undeclared fields; under `Warn`, the warnings that name them.
    pub fn check(
        self,
        registry: &Registry,
        info: &ResourceInfo,
        object: &Map<String, Value>,
        t: &Target,
    ) -> Result<Vec<String>, ApiError> {
        if self == FieldValidation::Ignore {
            return Ok(Vec::new());
        }
        let unknown = registry.unknown_fields(info, object);
        let fields: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field {}", keel_api::echo(f)))
            .collect();
        if self == FieldValidation::Warn || fields.is_empty() {
            return Ok(fields);
        }
        Err(ApiError::bad_request(
            t.clone(),
            format!(
                "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
                fields.join(", "),
                kind = info.kind,
                version = info.gvr.version,
            ),
        ))
    }

    /// [`FieldValidation::check`] of a patch document; one that is not a JSON object is left
    /// to the patch, which says what is wrong with it.
    pub fn check_patch(
        self,
        registry: &Registry,
        info: &ResourceInfo,
        patch: &[u8],
        t: &Target,
    ) -> Result<Vec<String>, ApiError> {
        if self == FieldValidation::Ignore {
            return Ok(Vec::new());
        }
        match serde_json::from_slice::<Value>(patch) {
            Ok(Value::Object(m)) => self.check(registry, info, &m, t),
            _ => Ok(Vec::new()),
        }
    }
}
