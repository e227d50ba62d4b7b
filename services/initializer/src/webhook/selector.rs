//! `--webhook-object-selector`: a label selector in the syntax of `kubectl -l`, turned into the
//! `LabelSelector` object (`matchLabels`, `matchExpressions`) a webhook's `objectSelector`
//! holds. Pure: no I/O.
//!
//! Supported: `k=v` (and `k==v`), `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, joined by
//! commas; requirements are ANDed, as in Kubernetes.

use serde_json::{Map, Value, json};

/// Why a selector flag was refused; the message names the offending part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A key that is not a label key (`[prefix/]name`, as Kubernetes checks it).
    #[error("invalid label key {key:?} in {part:?}: {why}")]
    Key {
        key: String,
        part: String,
        why: String,
    },
    /// A value that is not a label value (at most 63 alphanumerics, `-`, `_`, `.`).
    #[error("invalid label value {value:?} in {part:?}: {why}")]
    Value {
        value: String,
        part: String,
        why: String,
    },
    /// A set (`in`, `notin`) that is not `(value, ...)`, or parentheses that do not pair.
    #[error("expected a (value, ...) set in {0:?}")]
    Set(String),
}

/// Parses `s` into a `LabelSelector` object. The empty string is the empty selector (`{}`),
/// which selects every object.
pub fn parse_label_selector(s: &str) -> Result<Value, SelectorError> {
    let mut match_labels = Map::new();
    let mut match_expressions = Vec::new();
    for part in split_top_level(s)? {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        match requirement(part)? {
            // A second `k=v` on a key (`a=1,a=2`, which selects nothing) cannot share
            // matchLabels with the first: it becomes `k in (v)`, which means the same.
            Requirement::Equals(k, v) if !match_labels.contains_key(&k) => {
                match_labels.insert(k, Value::String(v));
            }
            Requirement::Equals(k, v) => match_expressions.push(expression(&k, "In", &[v])),
            Requirement::NotEquals(k, v) => match_expressions.push(expression(&k, "NotIn", &[v])),
            Requirement::In(k, set) => match_expressions.push(expression(&k, "In", &set)),
            Requirement::NotIn(k, set) => match_expressions.push(expression(&k, "NotIn", &set)),
            Requirement::Exists(k) => match_expressions.push(expression(&k, "Exists", &[])),
            Requirement::DoesNotExist(k) => {
                match_expressions.push(expression(&k, "DoesNotExist", &[]));
            }
        }
    }
    let mut selector = Map::new();
    if !match_labels.is_empty() {
        selector.insert("matchLabels".into(), Value::Object(match_labels));
    }
    if !match_expressions.is_empty() {
        selector.insert("matchExpressions".into(), Value::Array(match_expressions));
    }
    Ok(Value::Object(selector))
}

/// One comma-separated part of a selector.
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

fn requirement(part: &str) -> Result<Requirement, SelectorError> {
    Ok(if let Some(k) = part.strip_prefix('!') {
        Requirement::DoesNotExist(key(k, part)?)
    } else if let Some((k, v)) = part.split_once("!=") {
        Requirement::NotEquals(key(k, part)?, value(v, part)?)
    } else if let Some((k, v)) = part.split_once("==") {
        Requirement::Equals(key(k, part)?, value(v, part)?)
    } else if let Some((k, v)) = part.split_once('=') {
        Requirement::Equals(key(k, part)?, value(v, part)?)
    } else if let Some((k, set)) = part.split_once(" notin ") {
        Requirement::NotIn(key(k, part)?, values(set, part)?)
    } else if let Some((k, set)) = part.split_once(" in ") {
        Requirement::In(key(k, part)?, values(set, part)?)
    } else {
        Requirement::Exists(key(part, part)?)
    })
}

fn expression(key: &str, operator: &str, values: &[String]) -> Value {
    if values.is_empty() {
        json!({"key": key, "operator": operator})
    } else {
        json!({"key": key, "operator": operator, "values": values})
    }
}

/// Splits on the commas outside parentheses (those inside separate a set's values).
fn split_top_level(s: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0u32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            ')' if depth == 1 => depth = 0,
            '(' | ')' => return Err(SelectorError::Set(s.to_string())),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError::Set(s.to_string()));
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn key(k: &str, part: &str) -> Result<String, SelectorError> {
    let k = k.trim();
    let errors = keel_api::validation::label_key(k);
    if errors.is_empty() {
        Ok(k.to_string())
    } else {
        Err(SelectorError::Key {
            key: k.to_string(),
            part: part.to_string(),
            why: errors.join("; "),
        })
    }
}

fn value(v: &str, part: &str) -> Result<String, SelectorError> {
    let v = v.trim();
    let errors = keel_api::validation::label_value(v);
    if errors.is_empty() {
        Ok(v.to_string())
    } else {
        Err(SelectorError::Value {
            value: v.to_string(),
            part: part.to_string(),
            why: errors.join("; "),
        })
    }
}

fn values(set: &str, part: &str) -> Result<Vec<String>, SelectorError> {
    let inner = set
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError::Set(part.to_string()))?;
    inner.split(',').map(|v| value(v, part)).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use keel_api::selector::{LabelSelector, label_selector};

    #[test]
    fn the_empty_selector_selects_everything() {
        assert_eq!(parse_label_selector("").unwrap(), json!({}));
        assert_eq!(parse_label_selector("  ").unwrap(), json!({}));
    }

    #[test]
    fn equality_is_match_labels() {
        assert_eq!(
            parse_label_selector("sidecar.keel.dev/inject=true").unwrap(),
            json!({"matchLabels": {"sidecar.keel.dev/inject": "true"}})
        );
        assert_eq!(
            parse_label_selector("app==web, tier=front").unwrap(),
            json!({"matchLabels": {"app": "web", "tier": "front"}})
        );
    }

    #[test]
    fn the_other_operators_are_match_expressions() {
        assert_eq!(
            parse_label_selector("app=web,env!=prod,canary,!legacy").unwrap(),
            json!({
                "matchLabels": {"app": "web"},
                "matchExpressions": [
                    {"key": "env", "operator": "NotIn", "values": ["prod"]},
                    {"key": "canary", "operator": "Exists"},
                    {"key": "legacy", "operator": "DoesNotExist"},
                ]
            })
        );
        assert_eq!(
            parse_label_selector("k2 in (a, b),k3 notin (c)").unwrap(),
            json!({"matchExpressions": [
                {"key": "k2", "operator": "In", "values": ["a", "b"]},
                {"key": "k3", "operator": "NotIn", "values": ["c"]},
            ]})
        );
    }

    #[test]
    fn a_key_asked_equal_twice_keeps_both_requirements() {
        assert_eq!(
            parse_label_selector("a=1,a=2").unwrap(),
            json!({
                "matchLabels": {"a": "1"},
                "matchExpressions": [{"key": "a", "operator": "In", "values": ["2"]}]
            })
        );
    }

    #[test]
    fn bad_keys_values_and_sets_are_refused() {
        assert!(matches!(
            parse_label_selector("=x"),
            Err(SelectorError::Key { .. })
        ));
        assert!(matches!(
            parse_label_selector("a=b c"),
            Err(SelectorError::Value { .. })
        ));
        assert!(matches!(
            parse_label_selector("-bad-"),
            Err(SelectorError::Key { .. })
        ));
        assert_eq!(
            parse_label_selector("a in (x"),
            Err(SelectorError::Set("a in (x".into()))
        );
        assert_eq!(
            parse_label_selector("a in x"),
            Err(SelectorError::Set("a in x".into()))
        );
    }

    /// The object means what the flag means: read back as text by keel-api, it selects the
    /// same label sets as the flag parsed by keel-api.
    #[test]
    fn the_object_selects_what_the_flag_selects() {
        let flag = "app=web,env!=prod,canary,!legacy,zone in (a,b),tier notin (db)";
        let object = parse_label_selector(flag).unwrap();
        let from_flag = LabelSelector::parse(flag).unwrap();
        let from_object = LabelSelector::parse(&label_selector(&object)).unwrap();
        let label_sets: [&[(&str, &str)]; 5] = [
            &[("app", "web"), ("canary", ""), ("zone", "a")],
            &[
                ("app", "web"),
                ("canary", ""),
                ("zone", "a"),
                ("env", "prod"),
            ],
            &[("app", "web"), ("canary", ""), ("zone", "c")],
            &[
                ("app", "web"),
                ("canary", ""),
                ("zone", "b"),
                ("legacy", "1"),
            ],
            &[
                ("app", "web"),
                ("canary", ""),
                ("zone", "b"),
                ("tier", "db"),
            ],
        ];
        for labels in label_sets {
            let get = |k: &str| {
                labels
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| v.to_string())
            };
            assert_eq!(
                from_object.matches(get),
                from_flag.matches(get),
                "{labels:?}"
            );
        }
        assert!(from_flag.matches(|k| {
            label_sets[0]
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.to_string())
        }));
    }
}
