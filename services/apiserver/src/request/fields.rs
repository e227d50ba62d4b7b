//! Kubernetes' `fieldValidation`: with `Strict`, a create, update or patch that sets a field
//! the kind's schema does not declare is refused, naming every such field (at most ten), in
//! Kubernetes' words. `Warn` (the default) and `Ignore` accept it as it is: keel stores what it
//! is sent (Kubernetes drops unknown fields of built-in kinds; see DESIGN.md). Built-in kinds
//! are checked against Kubernetes' schemas (`registry::builtin_schema`); custom kinds, whose
//! schemas keel validates on every write anyway, are not checked for unknown fields yet.

use keel_api::{ApiError, ResourceInfo, Target};
use serde_json::Value;

use crate::registry::builtin_schema;

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

    /// Refuses, under `Strict`, a document (an object of the kind, or a merge or strategic
    /// merge patch of one) that sets undeclared fields. A document that is not JSON is left
    /// to the verb, which says so.
    pub fn check(self, info: &ResourceInfo, document: &[u8], t: &Target) -> Result<(), ApiError> {
        if self != FieldValidation::Strict || builtin_schema::schema_name(info).is_none() {
            return Ok(());
        }
        let Ok(value) = serde_json::from_slice::<Value>(document) else {
            return Ok(());
        };
        let unknown = builtin_schema::unknown_fields(info, &value);
        if unknown.is_empty() {
            return Ok(());
        }
        let fields: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field {}", keel_api::echo(f)))
            .collect();
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
}
