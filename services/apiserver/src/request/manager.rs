//! The field manager a write names, as `managedFields` records it (docs/server-side-apply.md
//! §3): the request's `fieldManager`, else the product of its User-Agent (`kubectl/v1.32.9
//! (linux/amd64) ...` is `kubectl`). An apply must name one.

use keel_api::{ApiError, FieldCause};

use crate::registry::managed::{check_field_manager, options_invalid};

/// What a write says of its manager.
#[derive(Debug, Clone, Default)]
pub struct FieldManager {
    /// The `fieldManager` parameter (empty: not given).
    pub field_manager: String,
    /// The client's User-Agent.
    pub user_agent: String,
}

impl FieldManager {
    /// The manager's name, once its `fieldManager` is checked (`options`: `CreateOptions`,
    /// `UpdateOptions` or `PatchOptions`, which the 422 names); `apply`: it is required.
    pub fn resolve(&self, options: &str, apply: bool) -> Result<String, ApiError> {
        if self.field_manager.is_empty() {
            if apply {
                return Err(options_invalid(
                    options,
                    FieldCause {
                        reason: "FieldValueRequired".into(),
                        message: "Required value: is required for apply patch".into(),
                        field: "fieldManager".into(),
                    },
                ));
            }
        } else {
            check_field_manager(&self.field_manager, options)?;
        }
        Ok(keel_patch::managed::manager_of(
            Some(&self.field_manager),
            &self.user_agent,
        ))
    }
}
