//! Strategic merge patch: JSON merge patch whose lists merge by key, with Kubernetes' directives.
//!
//! A patch is a JSON object merged into the document: objects merge recursively, `null`
//! deletes, and a list merges as its [`ListStrategy`](crate::ListStrategy) says. Directives:
//!
//! - `$patch: replace` in an object replaces the whole object; as a list element, replaces the
//!   whole list with the other elements.
//! - `$patch: delete` in an object deletes it; in a keyed list element, deletes the element
//!   with that key.
//! - `$patch: merge` asks for the default merge.
//! - `$deleteFromPrimitiveList/<field>: [values]` removes those values from the list `<field>`.
//! - `$setElementOrder/<field>: [keys or values]` gives the order of the merged list.
//! - `$retainKeys: [fields]` clears every field of the object not listed (unions).

mod apply;
mod diff;
mod list;

use serde_json::Value;

use crate::PatchError;

pub use apply::apply_strategic_merge_patch;
pub use diff::{create_three_way_merge_patch, create_two_way_merge_patch};

/// The directive key of objects and list elements.
const PATCH: &str = "$patch";
/// Lists the fields an object keeps.
const RETAIN_KEYS: &str = "$retainKeys";
/// Prefix of the parallel list of values to remove from a list.
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
/// Prefix of the parallel list giving a list's order.
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

/// Whether an object key would be read as a directive in a patch.
fn is_directive_key(key: &str) -> bool {
    key == PATCH
        || key == RETAIN_KEYS
        || key.starts_with(SET_ELEMENT_ORDER)
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

/// Refuses a document with a field named like a directive: a patch carrying that field would
/// be read as the directive, so no patch can reproduce the document. Iterative, like the depth
/// check.
fn check_no_directive_keys(document: &Value, what: &str) -> Result<(), PatchError> {
    let mut stack = vec![document];
    while let Some(value) = stack.pop() {
        match value {
            Value::Array(items) => stack.extend(items),
            Value::Object(fields) => {
                if let Some(key) = fields.keys().find(|key| is_directive_key(key)) {
                    return Err(PatchError::Malformed(format!(
                        "{what} has a field named {key:?}, which a patch would read as a directive"
                    )));
                }
                stack.extend(fields.values());
            }
            _ => {}
        }
    }
    Ok(())
}

/// Renders a field path for error messages.
fn show(path: &[&str]) -> String {
    if path.is_empty() {
        "the root".to_owned()
    } else {
        path.join(".")
    }
}
