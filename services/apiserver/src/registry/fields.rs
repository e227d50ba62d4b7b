//! Reading the fields of an object's JSON for validation: leaf helpers the kinds' rules share.

use keel_api::FieldCause;
use serde_json::{Map, Value};

/// The list at `root[field]`: empty when absent or null; a `type_error` cause (and empty) when
/// it is not a list.
pub fn optional_list<'a>(
    root: &'a Map<String, Value>,
    field: &str,
    causes: &mut Vec<FieldCause>,
) -> &'a [Value] {
    match root.get(field) {
        None | Some(Value::Null) => &[],
        Some(Value::Array(a)) => a,
        Some(_) => {
            causes.push(FieldCause::type_error(field, "a list"));
            &[]
        }
    }
}
