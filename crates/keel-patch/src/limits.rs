//! Bounds on the documents this crate walks, and the canonical form used to compare values.

use std::fmt::Write as _;

use serde_json::Value;

use crate::PatchError;

/// The deepest nesting of arrays and objects a document or patch may have. serde_json refuses
/// to parse anything deeper, so every parsed document fits; checking up front keeps every
/// recursion in this crate (and serde_json's own recursive `clone`/`eq`/`drop`) off the end of
/// the stack when a caller builds a deeper value by hand.
pub const MAX_DEPTH: usize = 128;

/// Refuses `value` if it nests deeper than [`MAX_DEPTH`]. Iterative, so it is safe on any input.
pub(crate) fn check_depth(value: &Value, what: &str) -> Result<(), PatchError> {
    let mut stack = vec![(value, 0usize)];
    while let Some((value, depth)) = stack.pop() {
        let is_container = matches!(value, Value::Array(_) | Value::Object(_));
        if is_container && depth >= MAX_DEPTH {
            return Err(too_deep(what));
        }
        match value {
            Value::Array(items) => stack.extend(items.iter().map(|child| (child, depth + 1))),
            Value::Object(fields) => stack.extend(fields.values().map(|child| (child, depth + 1))),
            _ => {}
        }
    }
    Ok(())
}

/// The error for a recursion that went past [`MAX_DEPTH`].
pub(crate) fn too_deep(what: &str) -> PatchError {
    PatchError::Malformed(format!("{what} is nested deeper than {MAX_DEPTH} levels"))
}

/// An injective text form of `value` with object keys sorted, so equal JSON values (whatever
/// their key order) get equal strings: list elements are hashed and compared through it.
pub(crate) fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out, 0);
    out
}

fn write_canonical(value: &Value, out: &mut String, depth: usize) {
    // Inputs were depth-checked; this guard only keeps the recursion bounded if that changes.
    if depth > MAX_DEPTH {
        out.push('…');
        return;
    }
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        // Debug quoting escapes quotes, backslashes and control characters: unambiguous.
        Value::String(s) => {
            let _ = write!(out, "{s:?}");
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out, depth + 1);
            }
            out.push(']');
        }
        Value::Object(fields) => {
            let mut keys: Vec<&String> = fields.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{key:?}:");
                if let Some(v) = fields.get(key) {
                    write_canonical(v, out, depth + 1);
                }
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested_arrays(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn everything_serde_json_parses_passes_the_depth_check() {
        let mut deepest = None;
        for levels in 1..=200 {
            match serde_json::from_str::<Value>(&nested_arrays(levels)) {
                Ok(v) => deepest = Some(v),
                Err(_) => break,
            }
        }
        let deepest = deepest.unwrap();
        assert!(check_depth(&deepest, "doc").is_ok());
    }

    #[test]
    fn deeper_values_are_refused_without_recursing() {
        let mut v = json!(1);
        for _ in 0..100_000 {
            v = Value::Array(vec![v]);
        }
        assert!(matches!(
            check_depth(&v, "doc"),
            Err(PatchError::Malformed(_))
        ));
        // Dropping a value this deep would itself recurse 100k frames: unwrap it iteratively.
        while let Value::Array(mut items) = v {
            v = items.pop().unwrap_or(Value::Null);
        }
    }

    #[test]
    fn canonical_form_ignores_key_order_and_is_unambiguous() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":[true,null,"x"]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":[true,null,"x"],"b":1}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
        assert_ne!(canonical(&json!("1")), canonical(&json!(1)));
        assert_ne!(canonical(&json!(["a,b"])), canonical(&json!(["a", "b"])));
    }
}
