//! Which patch a kind takes, and computing patches between versions of an object.
//!
//! Built-in kinds have merge keys (containers by name...), so keelctl sends them strategic
//! merge patches, as kubectl does; other kinds (custom resources) get JSON merge patches,
//! whose lists replace whole.

use keel_client::PatchType;
use keel_patch::{BuiltinSchema, PatchError};
use serde_json::Value;

/// The patch flavour of one kind.
#[derive(Debug, Clone, Copy)]
pub enum Flavour {
    Strategic(BuiltinSchema),
    Merge,
}

impl Flavour {
    pub fn of(api_version: &str, kind: &str) -> Flavour {
        match BuiltinSchema::for_kind(api_version, kind) {
            Some(schema) => Flavour::Strategic(schema),
            None => Flavour::Merge,
        }
    }

    /// The flavour of an object, from its `apiVersion` and `kind`.
    pub fn of_object(object: &Value) -> Flavour {
        Flavour::of(
            object["apiVersion"].as_str().unwrap_or(""),
            object["kind"].as_str().unwrap_or(""),
        )
    }

    pub fn patch_type(self) -> PatchType {
        match self {
            Flavour::Strategic(_) => PatchType::Strategic,
            Flavour::Merge => PatchType::Merge,
        }
    }

    /// What `apply` sends: sets what the file sets, deletes what the last apply set and the
    /// file no longer does, keeps what other writers set. The configuration wins over other
    /// writers' changes to the same fields, as `kubectl apply` (its `--overwrite` default).
    pub fn three_way(
        self,
        last_applied: Option<&Value>,
        modified: &Value,
        live: &Value,
    ) -> Result<Value, PatchError> {
        match self {
            Flavour::Strategic(schema) => keel_patch::create_three_way_merge_patch(
                last_applied,
                modified,
                live,
                &schema,
                true,
            ),
            Flavour::Merge => {
                keel_patch::create_three_way_json_merge_patch(last_applied, modified, live)
            }
        }
    }

    /// The smallest patch from `original` to `modified` (`edit`, `set image`).
    pub fn two_way(self, original: &Value, modified: &Value) -> Result<Value, PatchError> {
        match self {
            Flavour::Strategic(schema) => {
                keel_patch::create_two_way_merge_patch(original, modified, &schema)
            }
            Flavour::Merge => keel_patch::create_two_way_json_merge_patch(original, modified),
        }
    }

    /// The object the server will make of `live` with `patch` (`diff`).
    pub fn apply(self, live: &Value, patch: &Value) -> Result<Value, PatchError> {
        match self {
            Flavour::Strategic(schema) => {
                keel_patch::apply_strategic_merge_patch(live, patch, &schema)
            }
            Flavour::Merge => Ok(keel_patch::apply_merge_patch(live, patch)),
        }
    }
}

/// Whether a patch changes nothing: kubectl's `{}` test, after which nothing is sent.
pub fn is_empty(patch: &Value) -> bool {
    patch.as_object().is_some_and(|m| m.is_empty())
}
