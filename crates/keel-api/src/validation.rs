//! Validation of names, labels and annotations, as Kubernetes' apimachinery does it. Each
//! function returns the problems found (empty when valid) so callers can report every field.

use serde_json::Value;

use crate::{FieldCause, Metadata, Object};

const DNS1123_SUBDOMAIN_MAX: usize = 253;
const DNS1123_LABEL_MAX: usize = 63;
const QUALIFIED_NAME_MAX: usize = 63;
/// Total size of all annotations of one object, as Kubernetes.
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

fn is_alnum_lower(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// apimachinery's `RegexError`: what a value must be, its examples and the regular expression,
/// as Kubernetes words a refusal (examples joined as Go joins them, double space included).
fn regex_error(msg: &str, regex: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{regex}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{regex}')"));
    out
}

/// apimachinery's `MaxLenError`.
fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| is_alnum_lower(c) || c == '-')
        && s.starts_with(is_alnum_lower)
        && s.ends_with(is_alnum_lower)
}

/// A lowercase RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters
/// (apimachinery's `IsDNS1123Label`, its words).
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !is_dns1123_label(s) {
        errs.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errs
}

/// A lowercase RFC 1123 subdomain: dot-separated labels, at most 253 characters
/// (apimachinery's `IsDNS1123Subdomain`, its words).
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    let ok = !s.is_empty()
        && s.split('.')
            .all(|l| l.chars().all(|c| is_alnum_lower(c) || c == '-') && is_dns1123_label(l));
    if !ok {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            &format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*"),
            &["example.com"],
        ));
    }
    errs
}

/// A key of a ConfigMap's or Secret's data (apimachinery's `IsConfigMapKey`, its words).
pub fn config_map_key(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    if s.is_empty()
        || !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if s == "." {
        errs.push("must not be '.'".to_string());
    } else if s == ".." {
        errs.push("must not be '..'".to_string());
    } else if s.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

/// A name that is one path segment, as Kubernetes requires of RBAC objects (whose names, like
/// `system:kube-scheduler`, are not DNS names): not `.` or `..`, no `/` or `%`.
pub fn path_segment_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s == "." || s == ".." {
        errs.push(format!("may not be '{s}'"));
    }
    for bad in ['/', '%'] {
        if s.contains(bad) {
            errs.push(format!("may not contain '{bad}'"));
        }
    }
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(format!(
            "must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
        ));
    }
    errs
}

/// The rule a resource's object names follow: a DNS label for namespaces, a path segment for
/// RBAC objects, a DNS subdomain for every other kind.
pub fn name_rule(info: &crate::ResourceInfo) -> fn(&str) -> Vec<String> {
    if info.kind == "Namespace" && info.gvr.group.is_empty() {
        dns1123_label
    } else if info.gvr.group == crate::resource::RBAC_GROUP {
        path_segment_name
    } else {
        dns1123_subdomain
    }
}

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

fn qualified_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| is_alnum(c) || c == '-' || c == '_' || c == '.')
        && s.starts_with(is_alnum)
        && s.ends_with(is_alnum)
}

/// A qualified name (label and annotation keys, finalizers): `[prefix/]name`, the prefix a DNS
/// subdomain, the name at most 63 alphanumerics, `-`, `_`, `.`, starting and ending
/// alphanumeric (apimachinery's `IsQualifiedName`, its words).
pub fn label_key(s: &str) -> Vec<String> {
    let examples = ["MyName", "my.name", "123-abc"];
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &examples)
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX)));
    }
    if !qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &examples)
        ));
    }
    errs
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_`, `.`, starting and ending
/// alphanumeric (apimachinery's `IsValidLabelValue`, its words).
pub fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > QUALIFIED_NAME_MAX {
        errs.push(max_len_error(QUALIFIED_NAME_MAX));
    }
    if !s.is_empty() && !qualified_name_part(s) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            &format!("({QUALIFIED_NAME_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

fn string_map(
    meta: &serde_json::Map<String, Value>,
    key: &str,
    errs: &mut Vec<FieldCause>,
) -> Vec<(String, String)> {
    match meta.get(key) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(m)) => {
            let mut out = Vec::new();
            for (k, v) in m {
                match v.as_str() {
                    Some(v) => out.push((k.clone(), v.to_string())),
                    None => errs.push(FieldCause::type_error(
                        format!("metadata.{key}.{k}"),
                        "a string",
                    )),
                }
            }
            out
        }
        Some(_) => {
            errs.push(FieldCause::type_error(
                format!("metadata.{key}"),
                "a map of strings",
            ));
            Vec::new()
        }
    }
}

/// Validates an object's `metadata` for a resource of the given scope. `name_check` is
/// [`dns1123_subdomain`] for most kinds, [`dns1123_label`] for namespaces.
pub fn object_meta(
    obj: &Object,
    namespaced: bool,
    name_check: fn(&str) -> Vec<String>,
) -> Vec<FieldCause> {
    let mut errs = Vec::new();
    let Some(meta) = obj.metadata() else {
        return vec![FieldCause::required("metadata")];
    };
    match meta.get("name") {
        None | Some(Value::Null) => errs.push(FieldCause::required("metadata.name")),
        Some(Value::String(n)) if n.is_empty() => errs.push(FieldCause::required("metadata.name")),
        Some(Value::String(n)) => {
            for e in name_check(n) {
                errs.push(FieldCause::invalid("metadata.name", n, e));
            }
        }
        Some(_) => errs.push(FieldCause::type_error("metadata.name", "a string")),
    }
    match meta.get("generateName") {
        None | Some(Value::Null) => {}
        Some(Value::String(g)) => {
            // A prefix: it may end in a dash (Kubernetes' `maskTrailingDash`).
            let masked = match g.strip_suffix('-') {
                Some(rest) if !rest.is_empty() => format!("{rest}a"),
                _ => g.clone(),
            };
            if !g.is_empty() {
                for e in name_check(&masked) {
                    errs.push(FieldCause::invalid("metadata.generateName", g, e));
                }
            }
        }
        Some(_) => errs.push(FieldCause::type_error("metadata.generateName", "a string")),
    }
    if namespaced {
        let ns = obj.namespace();
        for e in dns1123_label(ns) {
            errs.push(FieldCause::invalid("metadata.namespace", ns, e));
        }
    } else if !obj.namespace().is_empty() {
        errs.push(FieldCause::forbidden(
            "metadata.namespace",
            "not allowed on a cluster-scoped resource",
        ));
    }
    for (k, v) in string_map(meta, "labels", &mut errs) {
        for e in label_key(&k) {
            errs.push(FieldCause::invalid("metadata.labels", &k, e));
        }
        for e in label_value(&v) {
            // apimachinery reports a value at the labels' path, not the key's.
            errs.push(FieldCause::invalid("metadata.labels", &v, e));
        }
    }
    let annotations = string_map(meta, "annotations", &mut errs);
    let mut total = 0;
    for (k, v) in &annotations {
        total += k.len() + v.len();
        for e in label_key(k) {
            errs.push(FieldCause::invalid("metadata.annotations", k, e));
        }
    }
    if total > ANNOTATIONS_MAX_BYTES {
        errs.push(FieldCause::too_long(
            "metadata.annotations",
            ANNOTATIONS_MAX_BYTES,
        ));
    }
    match meta.get("finalizers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for (i, f) in a.iter().enumerate() {
                match f.as_str() {
                    Some(s) if label_key(s).is_empty() => {}
                    Some(s) => errs.push(FieldCause::invalid(
                        format!("metadata.finalizers[{i}]"),
                        s,
                        "must be a qualified name",
                    )),
                    None => errs.push(FieldCause::type_error(
                        format!("metadata.finalizers[{i}]"),
                        "a string",
                    )),
                }
            }
        }
        Some(_) => errs.push(FieldCause::type_error(
            "metadata.finalizers",
            "a list of strings",
        )),
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_rfc1123() {
        for ok in ["a", "my-app", "a.b.c", "0abc"] {
            assert!(dns1123_subdomain(ok).is_empty(), "{ok}");
        }
        let long = "a".repeat(254);
        for bad in [
            "",
            "A",
            "a/b",
            "..",
            "a..b",
            "-a",
            "a-",
            "a_b",
            long.as_str(),
        ] {
            assert!(!dns1123_subdomain(bad).is_empty(), "{bad}");
        }
        assert!(!dns1123_label("a.b").is_empty());
        assert!(!dns1123_label(&"a".repeat(64)).is_empty());
    }

    #[test]
    fn label_keys_and_values() {
        for ok in ["app", "example.com/app", "a_b.c-d", "A"] {
            assert!(label_key(ok).is_empty(), "{ok}");
        }
        for bad in ["", "/app", "Example.com/app", "-a", "a b", &"a".repeat(64)] {
            assert!(!label_key(bad).is_empty(), "{bad}");
        }
        assert!(label_value("").is_empty());
        assert!(label_value("v1.2_3").is_empty());
        assert!(!label_value("a b").is_empty());
        assert!(!label_value(&"a".repeat(64)).is_empty());
    }

    #[test]
    fn a_generate_name_is_a_name_prefix() {
        let meta = |g: serde_json::Value| {
            let o = Object::from_value(
                serde_json::json!({"metadata": {"name": "a-x1", "generateName": g}}),
            )
            .unwrap();
            object_meta(&o, false, dns1123_subdomain)
        };
        assert!(meta("web-".into()).is_empty());
        assert!(meta("web".into()).is_empty());
        let bad = meta("Web_-".into());
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].field, "metadata.generateName");
        assert_eq!(meta(7.into())[0].field, "metadata.generateName");
    }

    #[test]
    fn metadata_problems_name_their_field() {
        let o = Object::from_slice(
            br#"{"metadata":{"name":"Bad","labels":{"x":1},"finalizers":["ok/f","bad f"]}}"#,
        )
        .unwrap();
        let fields: Vec<String> = object_meta(&o, true, dns1123_subdomain)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(
            fields,
            [
                "metadata.name",
                "metadata.namespace",
                "metadata.labels.x",
                "metadata.finalizers[1]"
            ]
        );
    }
}
