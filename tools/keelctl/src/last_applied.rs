//! The `kubectl.kubernetes.io/last-applied-configuration` annotation, written byte for byte as
//! kubectl writes it so that kubectl and keelctl can apply to the same objects in turn.

use serde_json::{Map, Value};

/// The annotation holding the configuration of the last `apply`.
pub const ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The object to send: `object` with the annotation set to `object` itself (without the
/// annotation). Returns it with the configuration the annotation holds.
///
/// As kubectl: the annotations map is created when absent, so the recorded configuration
/// has `"annotations":{}`; the JSON is compact with sorted keys, Go's HTML-safe escapes and a
/// trailing newline (Go's `json.Encoder`).
pub fn annotate(object: &Value) -> (Value, Value) {
    let mut original = object.clone();
    if let Some(annotations) = annotations_mut(&mut original) {
        annotations.remove(ANNOTATION);
    }
    let mut modified = original.clone();
    if let Some(annotations) = annotations_mut(&mut modified) {
        annotations.insert(ANNOTATION.into(), Value::String(encode(&original)));
    }
    (modified, original)
}

/// The configuration recorded on a live object; `None` when it has none (it was created, not
/// applied) or the annotation is not JSON (then apply proceeds as on a first apply).
pub fn recorded(live: &Value) -> Option<Value> {
    let text = live["metadata"]["annotations"][ANNOTATION].as_str()?;
    serde_json::from_str(text).ok()
}

/// `metadata.annotations`, created (with `metadata`) when absent; `None` when the object or
/// its metadata is not an object, which the server will refuse anyway.
fn annotations_mut(object: &mut Value) -> Option<&mut Map<String, Value>> {
    let metadata = object
        .as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()?;
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if annotations.is_null() {
        *annotations = Value::Object(Map::new());
    }
    annotations.as_object_mut()
}

/// JSON as Go's `json.Encoder` writes it: compact, map keys sorted (serde_json's map is
/// ordered), `<`, `>`, `&`, U+2028 and U+2029 escaped, and a newline at the end.
pub fn encode(v: &Value) -> String {
    let compact = v.to_string();
    let mut out = String::with_capacity(compact.len() + 1);
    for c in compact.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_annotation_is_what_kubectl_writes() {
        let file = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "nginx-deployment", "namespace": "default"},
            "spec": {"replicas": 2},
        });
        let (modified, original) = annotate(&file);
        let written = modified["metadata"]["annotations"][ANNOTATION]
            .as_str()
            .unwrap();
        // The exact string kubectl 1.x records for this file.
        assert_eq!(
            written,
            "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"annotations\":{},\"name\":\"nginx-deployment\",\"namespace\":\"default\"},\"spec\":{\"replicas\":2}}\n"
        );
        assert_eq!(recorded(&modified), Some(original));
    }

    #[test]
    fn a_stale_annotation_in_the_file_is_not_recorded_in_itself() {
        let file = json!({
            "kind": "ConfigMap",
            "metadata": {"name": "x", "annotations": {ANNOTATION: "{}", "team": "a<b>&c"}},
        });
        let (modified, original) = annotate(&file);
        assert_eq!(
            original["metadata"]["annotations"],
            json!({"team": "a<b>&c"})
        );
        let written = modified["metadata"]["annotations"][ANNOTATION]
            .as_str()
            .unwrap();
        assert!(written.contains("a\\u003cb\\u003e\\u0026c"), "{written}");
    }
}
