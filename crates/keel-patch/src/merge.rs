//! RFC 7386 JSON Merge Patch.

use serde_json::Value;

/// Applies an RFC 7386 merge patch to a copy of `doc`: objects merge recursively, `null`
/// deletes a member, anything else (arrays included) replaces. Never fails: every JSON value
/// is a valid merge patch.
pub fn apply_merge_patch(doc: &Value, patch: &Value) -> Value {
    let mut out = doc.clone();
    json_patch::merge(&mut out, patch);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc7386_examples() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
        ];
        for (doc, patch, want) in cases {
            assert_eq!(apply_merge_patch(&doc, &patch), want, "{doc} + {patch}");
        }
    }
}
