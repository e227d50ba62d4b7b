//! The checks the fuzz target runs on one input, shared with the regression tests so that a
//! crasher found by fuzzing is replayed by `cargo test`.

use keel_patch::{
    BuiltinSchema, MergeSchema, OpenApiSchema, apply_json_patch, apply_merge_patch,
    apply_strategic_merge_patch, create_three_way_json_merge_patch, create_three_way_merge_patch,
    create_two_way_json_merge_patch, create_two_way_merge_patch,
};
use serde_json::{Value, json};

/// Splits `data` (after a first mode byte) at NUL bytes into up to three JSON documents — a
/// document, a patch (also used as the modified document) and a live document — and runs
/// every applier and builder on them. Errors are fine; a panic means an invariant broke: a
/// patch the crate built does not apply, or does not give what it promised.
pub fn check(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.splitn(3, |&b| b == 0);
    let Some(doc) = parts.next().and_then(parse) else {
        return;
    };
    let Some(patch) = parts.next().and_then(parse) else {
        return;
    };
    let live = parts.next().and_then(parse).unwrap_or_else(|| doc.clone());
    let schema = schema(mode);
    let schema: &dyn MergeSchema = schema.as_ref();
    let overwrite = mode & 0x10 != 0;

    let _ = apply_json_patch(&doc, &patch);
    let _ = apply_merge_patch(&doc, &patch);
    let _ = apply_strategic_merge_patch(&doc, &patch, schema);

    let modified = &patch;
    if let Ok(two_way) = create_two_way_merge_patch(&doc, modified, schema) {
        let applied = apply_strategic_merge_patch(&doc, &two_way, schema)
            .unwrap_or_else(|e| panic!("two-way patch {two_way} does not apply: {e}"));
        if plain(modified) {
            assert_eq!(&applied, modified, "two-way patch {two_way}");
        }
    }
    if let Ok(two_way) = create_two_way_json_merge_patch(&doc, modified)
        && !has_null_member(modified)
    {
        let applied = apply_merge_patch(&doc, &two_way);
        assert_eq!(&applied, modified, "merge patch {two_way}");
    }
    if let Ok(three_way) =
        create_three_way_merge_patch(Some(&doc), modified, &live, schema, overwrite)
    {
        let applied = apply_strategic_merge_patch(&live, &three_way, schema)
            .unwrap_or_else(|e| panic!("three-way patch {three_way} does not apply: {e}"));
        if plain(modified) {
            for (name, value) in modified.as_object().into_iter().flatten() {
                if !value.is_object() && !value.is_array() {
                    assert_eq!(
                        applied.get(name),
                        Some(value),
                        "three-way patch {three_way}"
                    );
                }
            }
        }
    }
    if let Ok(three_way) = create_three_way_json_merge_patch(Some(&doc), modified, &live) {
        let applied = apply_merge_patch(&live, &three_way);
        if let Some(fields) = modified.as_object() {
            for (name, value) in fields {
                // Objects merge with what only the live document has; the rest is replaced.
                if !value.is_null() && !value.is_object() && !has_null_member(value) {
                    assert_eq!(applied.get(name), Some(value), "merge patch {three_way}");
                }
            }
        }
    }
}

fn parse(bytes: &[u8]) -> Option<Value> {
    serde_json::from_slice(bytes).ok()
}

fn schema(mode: u8) -> Box<dyn MergeSchema> {
    match mode % 4 {
        0 => Box::new(BuiltinSchema::for_kind("v1", "Pod").expect("built-in")),
        1 => Box::new(BuiltinSchema::for_kind("apps/v1", "Deployment").expect("built-in")),
        2 => Box::new(OpenApiSchema::new(
            json!({"properties": {"spec": {"properties": {
                "items": {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a", "b"],
                          "items": {"properties": {"b": {"default": 0}}}},
                "set": {"x-kubernetes-list-type": "set"},
                "union": {"x-kubernetes-patch-strategy": "retainKeys"},
            }}}}),
        )),
        _ => Box::new(EveryListKeyed),
    }
}

/// Every list merges by `name`, every map is a union: the most directives per input.
struct EveryListKeyed;

impl MergeSchema for EveryListKeyed {
    fn list_strategy(&self, _path: &[&str]) -> keel_patch::ListStrategy {
        keel_patch::ListStrategy::MergeByKeys(vec!["name".into()])
    }

    fn retain_keys(&self, _path: &[&str]) -> bool {
        true
    }
}

/// A modified document a patch can reproduce exactly: no `null` members (a patch's `null`
/// deletes) and no `$` keys (a patch's `$` keys are directives).
fn plain(value: &Value) -> bool {
    match value {
        Value::Object(fields) => fields
            .iter()
            .all(|(k, v)| !k.starts_with('$') && !v.is_null() && plain(v)),
        Value::Array(items) => items.iter().all(plain),
        _ => true,
    }
}

fn has_null_member(value: &Value) -> bool {
    match value {
        Value::Object(fields) => fields.values().any(|v| v.is_null() || has_null_member(v)),
        Value::Array(items) => items.iter().any(has_null_member),
        _ => false,
    }
}
