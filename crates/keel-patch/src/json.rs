//! RFC 6902 JSON Patch, on top of the `json-patch` crate, with an operation limit.

use serde::Deserialize;
use serde_json::Value;

use crate::PatchError;

/// The most operations one JSON Patch may carry: bounds the work a single request can cause.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// A parsed JSON Patch: parse it once, apply it as often as needed (a write that loses a
/// compare-and-swap applies its patch again to the fresh object).
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPatch(json_patch::Patch);

/// Parses a JSON Patch document (a JSON array of operations), enforcing the operation limit.
pub fn parse_json_patch(patch: &Value) -> Result<JsonPatch, PatchError> {
    let ops = patch.as_array().ok_or_else(|| {
        PatchError::Malformed("a JSON patch must be a JSON array of operations".into())
    })?;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooManyOperations {
            count: ops.len(),
            limit: MAX_JSON_PATCH_OPERATIONS,
        });
    }
    let parsed =
        json_patch::Patch::deserialize(patch).map_err(|e| PatchError::Malformed(e.to_string()))?;
    Ok(JsonPatch(parsed))
}

impl JsonPatch {
    /// Applies the patch to a copy of `doc`. On any failure `doc` is unchanged and the error
    /// names the operation's path.
    pub fn apply(&self, doc: &Value) -> Result<Value, PatchError> {
        let mut out = doc.clone();
        // Applied an operation at a time, each to the document the ones before made. The copy
        // is dropped on failure, so json-patch's own rollback is not needed; and its rollback
        // panics on some inputs (an `add` at `/-` undone after a later `move`).
        for op in &self.0.0 {
            if is_null_test_of_missing_member(&out, op) {
                continue;
            }
            json_patch::patch_unsafe(&mut out, std::slice::from_ref(op)).map_err(|e| {
                let path = e.path.to_string();
                match e.kind {
                    json_patch::PatchErrorKind::TestFailed => PatchError::TestFailed { path },
                    kind => PatchError::Inapplicable {
                        path,
                        reason: kind.to_string(),
                    },
                }
            })?;
        }
        Ok(out)
    }
}

/// Kubernetes' JSON patch (evanphx/json-patch) lets a `test` of `null` pass on a member that is
/// not there, in an object that is: "test that it is unset". kube-runtime's `finalizer()` adds
/// the first finalizer so (`test /metadata/finalizers null`, then `add`).
fn is_null_test_of_missing_member(doc: &Value, op: &json_patch::PatchOperation) -> bool {
    let json_patch::PatchOperation::Test(t) = op else {
        return false;
    };
    if !t.value.is_null() || doc.pointer(t.path.as_str()).is_some() {
        return false;
    }
    let path = t.path.as_str();
    let parent = path.rfind('/').map(|i| &path[..i]).unwrap_or("");
    matches!(doc.pointer(parent), Some(Value::Object(_)))
}

/// Parses and applies a JSON Patch to a copy of `doc` ([`parse_json_patch`], then
/// [`JsonPatch::apply`]).
pub fn apply_json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    parse_json_patch(patch)?.apply(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_test_of_null_passes_on_a_missing_member_as_kubernetes_has_it() {
        // kube-runtime's finalizer(): test that there are no finalizers yet, then add the first.
        let doc = json!({"metadata": {"name": "x"}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}
        ]);
        assert_eq!(
            apply_json_patch(&doc, &patch),
            Ok(json!({"metadata": {"name": "x", "finalizers": ["x"]}}))
        );
        // A member that is there is not null.
        let with = json!({"metadata": {"finalizers": ["y"]}});
        assert_eq!(
            apply_json_patch(&with, &patch),
            Err(PatchError::TestFailed {
                path: "/metadata/finalizers".into()
            })
        );
        // The object it would be in must exist.
        let patch = json!([{"op": "test", "path": "/spec/x", "value": null}]);
        assert!(apply_json_patch(&doc, &patch).is_err());
        // A null that is there is null.
        let null = json!({"a": null});
        let patch = json!([{"op": "test", "path": "/a", "value": null}]);
        assert_eq!(apply_json_patch(&null, &patch), Ok(null.clone()));
    }

    #[test]
    fn all_six_operations_apply() {
        let doc = json!({"a": 1, "b": [1, 2], "c": {"d": "x"}});
        let patch = json!([
            {"op": "test", "path": "/a", "value": 1},
            {"op": "add", "path": "/b/-", "value": 3},
            {"op": "remove", "path": "/a"},
            {"op": "replace", "path": "/c/d", "value": "y"},
            {"op": "copy", "from": "/c", "path": "/e"},
            {"op": "move", "from": "/b", "path": "/f"},
        ]);
        let out = apply_json_patch(&doc, &patch).unwrap();
        assert_eq!(
            out,
            json!({"c": {"d": "y"}, "e": {"d": "y"}, "f": [1, 2, 3]})
        );
    }

    #[test]
    fn failing_test_refuses_the_whole_patch() {
        let doc = json!({"a": 1});
        let patch = json!([
            {"op": "replace", "path": "/a", "value": 2},
            {"op": "test", "path": "/a", "value": 1},
        ]);
        assert_eq!(
            apply_json_patch(&doc, &patch),
            Err(PatchError::TestFailed { path: "/a".into() })
        );
    }

    #[test]
    fn not_an_array_is_malformed() {
        let err = apply_json_patch(&json!({}), &json!({"op": "add"})).unwrap_err();
        assert!(matches!(err, PatchError::Malformed(_)));
        let err = apply_json_patch(&json!({}), &json!([{"op": "frobnicate", "path": "/a"}]));
        assert!(matches!(err, Err(PatchError::Malformed(_))));
    }

    #[test]
    fn too_many_operations_is_refused() {
        let ops: Vec<Value> = (0..=MAX_JSON_PATCH_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "", "value": {}}))
            .collect();
        let err = apply_json_patch(&json!({}), &Value::Array(ops)).unwrap_err();
        assert!(matches!(err, PatchError::TooManyOperations { .. }));
    }

    /// Found by fuzzing: json-patch's rollback of these operations panicked.
    #[test]
    fn a_failing_patch_whose_rollback_cannot_be_undone_is_an_error() {
        let doc = json!({"a": [1, 2]});
        let patch = json!([
            {"op": "add", "path": "/a/-", "value": 3},
            {"op": "test", "path": "/a/0", "value": 1},
            {"op": "move", "from": "/a", "path": "/b/c"},
        ]);
        assert!(matches!(
            apply_json_patch(&doc, &patch),
            Err(PatchError::Inapplicable { .. })
        ));
    }

    #[test]
    fn missing_path_is_inapplicable() {
        let err = apply_json_patch(&json!({}), &json!([{"op": "remove", "path": "/x/y"}]));
        assert!(matches!(err, Err(PatchError::Inapplicable { .. })));
    }
}
