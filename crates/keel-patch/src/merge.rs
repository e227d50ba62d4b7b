//! RFC 7386 JSON Merge Patch, and the merge patches between documents.

use serde_json::{Map, Value};

use crate::PatchError;
use crate::limits::{MAX_DEPTH, check_depth, too_deep};

/// Applies an RFC 7386 merge patch to a copy of `doc`: objects merge recursively, `null`
/// deletes a member, anything else (arrays included) replaces. Never fails: every JSON value
/// is a valid merge patch.
pub fn apply_merge_patch(doc: &Value, patch: &Value) -> Value {
    let mut out = doc.clone();
    json_patch::merge(&mut out, patch);
    out
}

/// The RFC 7386 merge patch that turns `original` into `modified`: changed and added fields
/// with their new values, removed fields as `null`, lists whole. Applying it to `original`
/// gives `modified` whenever `modified` holds no `null` (which a merge patch cannot set).
pub fn create_two_way_json_merge_patch(
    original: &Value,
    modified: &Value,
) -> Result<Value, PatchError> {
    check_depth(original, "the original document")?;
    check_depth(modified, "the modified document")?;
    Ok(match (original, modified) {
        (Value::Object(original), Value::Object(modified)) => {
            Value::Object(diff(Some(original), modified, original, 0)?)
        }
        // A patch that is not an object replaces the document; an object patch cannot turn
        // an object into anything else.
        _ => modified.clone(),
    })
}

/// The merge patch `keelctl apply` sends for kinds without merge keys: it sets what
/// `modified` sets to its values (where `live` differs), deletes what `last_applied` set and
/// `modified` no longer does, and keeps what only `live` has. A `null` in `modified` counts
/// as not set. Lists are replaced whole, as merge patches do.
pub fn create_three_way_json_merge_patch(
    last_applied: Option<&Value>,
    modified: &Value,
    live: &Value,
) -> Result<Value, PatchError> {
    if let Some(last) = last_applied {
        check_depth(last, "the last-applied configuration")?;
    }
    check_depth(modified, "the modified document")?;
    check_depth(live, "the live document")?;
    let Value::Object(modified) = modified else {
        return Ok(modified.clone());
    };
    let empty = Map::new();
    let live = live.as_object().unwrap_or(&empty);
    let last = last_applied.and_then(Value::as_object);
    Ok(Value::Object(diff(last, modified, live, 0)?))
}

/// Merge patch from `live` to `modified`, plus `null` for what `last` had and `modified` lacks.
fn diff(
    last: Option<&Map<String, Value>>,
    modified: &Map<String, Value>,
    live: &Map<String, Value>,
    depth: usize,
) -> Result<Map<String, Value>, PatchError> {
    if depth > MAX_DEPTH {
        return Err(too_deep("the document"));
    }
    let mut patch = Map::new();
    for (name, wanted) in modified {
        if wanted.is_null() {
            continue;
        }
        match (wanted, live.get(name)) {
            (Value::Object(wanted), Some(Value::Object(current))) => {
                let last = last.and_then(|l| l.get(name)).and_then(Value::as_object);
                let sub = diff(last, wanted, current, depth + 1)?;
                if !sub.is_empty() {
                    patch.insert(name.clone(), Value::Object(sub));
                }
            }
            (wanted, current) if current != Some(wanted) => {
                patch.insert(name.clone(), wanted.clone());
            }
            _ => {}
        }
    }
    for name in last.into_iter().flat_map(Map::keys) {
        if modified.get(name).is_none_or(Value::is_null) {
            patch.insert(name.clone(), Value::Null);
        }
    }
    Ok(patch)
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

    #[test]
    fn two_way_merge_patch_is_the_rfc7386_diff() {
        let original = json!({"a": 1, "b": {"c": [1, 2], "d": "x"}, "e": {"f": 1}});
        let modified = json!({"a": 1, "b": {"c": [2], "g": true}, "e": "flat", "h": {"i": {}}});
        let patch = create_two_way_json_merge_patch(&original, &modified).unwrap();
        assert_eq!(
            patch,
            json!({"b": {"c": [2], "d": null, "g": true}, "e": "flat", "h": {"i": {}}})
        );
        assert_eq!(apply_merge_patch(&original, &patch), modified);
        assert_eq!(
            create_two_way_json_merge_patch(&original, &original).unwrap(),
            json!({})
        );
        // Documents that are not objects are replaced whole.
        for (a, b) in [
            (json!([1]), json!([2])),
            (json!(1), json!({"a": 1})),
            (json!({"a": 1}), json!("s")),
        ] {
            let patch = create_two_way_json_merge_patch(&a, &b).unwrap();
            assert_eq!(apply_merge_patch(&a, &patch), b);
        }
    }

    #[test]
    fn three_way_merge_patch_keeps_live_only_fields() {
        let last = json!({"spec": {"size": 1, "mode": "a", "tags": ["x"]}, "metadata": {"labels": {"l": "1"}}});
        let file = json!({"spec": {"size": 2, "tags": ["x"]}, "metadata": {"labels": {}}});
        let live = json!({
            "spec": {"size": 1, "mode": "a", "tags": ["x"], "defaulted": true},
            "metadata": {"labels": {"l": "1", "other": "o"}, "uid": "u"},
            "status": {"ready": true},
        });
        let patch = create_three_way_json_merge_patch(Some(&last), &file, &live).unwrap();
        assert_eq!(
            patch,
            json!({"spec": {"size": 2, "mode": null}, "metadata": {"labels": {"l": null}}})
        );
        assert_eq!(
            apply_merge_patch(&live, &patch),
            json!({
                "spec": {"size": 2, "tags": ["x"], "defaulted": true},
                "metadata": {"labels": {"other": "o"}, "uid": "u"},
                "status": {"ready": true},
            })
        );
        // First apply: nothing to delete; a null in the file means "not set".
        let file = json!({"spec": {"size": 2, "mode": null}});
        let patch = create_three_way_json_merge_patch(None, &file, &live).unwrap();
        assert_eq!(patch, json!({"spec": {"size": 2}}));
        let patch = create_three_way_json_merge_patch(Some(&last), &file, &live).unwrap();
        assert_eq!(
            patch,
            json!({"spec": {"size": 2, "mode": null, "tags": null}, "metadata": null})
        );
    }

    #[test]
    fn merge_patch_diffs_refuse_too_deep_documents() {
        let mut deep = json!(1);
        for _ in 0..=MAX_DEPTH {
            deep = json!({ "a": deep });
        }
        assert!(create_two_way_json_merge_patch(&deep, &json!({})).is_err());
        assert!(create_three_way_json_merge_patch(None, &json!({}), &deep).is_err());
    }
}
