//! Label and field selectors, with Kubernetes' syntax:
//! labels `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`, `a`, `!a`, joined by commas;
//! fields `metadata.name` and `metadata.namespace` with `=`, `==`, `!=`.

use serde_json::Value;

use crate::object::Selectable;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Why a selector could not be parsed; the message names the offending part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(String);

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(SelectorError(format!("unbalanced parentheses in {s:?}")));
        }
    }
    if depth != 0 {
        return Err(SelectorError(format!("unbalanced parentheses in {s:?}")));
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn check_key(key: &str, whole: &str) -> Result<String, SelectorError> {
    let key = key.trim();
    if key.is_empty() || !crate::validation::label_key(key).is_empty() {
        return Err(SelectorError(format!(
            "invalid label key {key:?} in {whole:?}"
        )));
    }
    Ok(key.to_string())
}

fn check_value(value: &str, whole: &str) -> Result<String, SelectorError> {
    let value = value.trim();
    if !crate::validation::label_value(value).is_empty() {
        return Err(SelectorError(format!(
            "invalid label value {value:?} in {whole:?}"
        )));
    }
    Ok(value.to_string())
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, SelectorError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError(format!("expected a (value, ...) set in {whole:?}")))?;
    inner.split(',').map(|v| check_value(v, whole)).collect()
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(LabelSelector::default());
        }
        let mut reqs = Vec::new();
        for part in split_top_level(s)? {
            let part = part.trim();
            let (key, op) = if let Some(k) = part.strip_prefix('!') {
                (check_key(k, part)?, Op::DoesNotExist)
            } else if let Some((k, v)) = part.split_once("!=") {
                (check_key(k, part)?, Op::NotEquals(check_value(v, part)?))
            } else if let Some((k, v)) = part.split_once("==") {
                (check_key(k, part)?, Op::Equals(check_value(v, part)?))
            } else if let Some((k, v)) = part.split_once('=') {
                (check_key(k, part)?, Op::Equals(check_value(v, part)?))
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                (check_key(k, part)?, Op::NotIn(parse_set(rest, part)?))
            } else if let Some((k, rest)) = part.split_once(" in ") {
                (check_key(k, part)?, Op::In(parse_set(rest, part)?))
            } else {
                (check_key(part, part)?, Op::Exists)
            };
            reqs.push(Requirement { key, op });
        }
        Ok(LabelSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an object with these labels is selected.
    pub fn matches(&self, label: impl Fn(&str) -> Option<String>) -> bool {
        self.0.iter().all(|r| {
            let v = label(&r.key);
            match &r.op {
                Op::Equals(want) => v.as_deref() == Some(want),
                Op::NotEquals(not) => v.as_deref() != Some(not),
                Op::In(set) => v.is_some_and(|v| set.contains(&v)),
                Op::NotIn(set) => !v.is_some_and(|v| set.contains(&v)),
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
            }
        })
    }

    pub fn matches_object(&self, obj: &impl Selectable) -> bool {
        self.matches(|k| obj.label(k).map(str::to_string))
    }
}

/// A parsed field selector: `metadata.name`, `metadata.namespace`, and the fields the
/// resource's kind makes selectable, each compared with `=`, `==` or `!=`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// The fields every resource can be selected by.
pub const METADATA_FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];

impl FieldSelector {
    /// Parses `s`, whose fields must be [`METADATA_FIELDS`] or among `selectable` (the
    /// resource's: `ResourceInfo::selectable_fields`).
    pub fn parse(s: &str, selectable: &[String]) -> Result<FieldSelector, SelectorError> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(FieldSelector::default());
        }
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(SelectorError(format!(
                    "invalid field selector {part:?}: expected field=value or field!=value"
                )));
            };
            let field = field.trim();
            if !METADATA_FIELDS.contains(&field) && !selectable.iter().any(|f| f == field) {
                let mut supported: Vec<&str> = METADATA_FIELDS.to_vec();
                supported.extend(selectable.iter().map(String::as_str));
                return Err(SelectorError(format!(
                    "field label not supported: {field} (supported: {})",
                    supported.join(", ")
                )));
            }
            reqs.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value `field` must equal, if a requirement says so (Kubernetes'
    /// `RequiresExactMatch`): a list or watch of `metadata.name=x` is authorized as naming `x`.
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, equal, _)| f == field && *equal)
            .map(|(_, _, v)| v.as_str())
    }

    pub fn matches_object(&self, obj: &impl Selectable) -> bool {
        let own: Vec<&str> = self
            .0
            .iter()
            .map(|(field, _, _)| field.as_str())
            .filter(|f| !METADATA_FIELDS.contains(f))
            .map(|f| field_label(f).0)
            .collect();
        // The kind's own fields, read at once, in the requirements' order.
        let mut own = if own.is_empty() {
            Vec::new()
        } else {
            obj.fields(&own)
        }
        .into_iter();
        self.0.iter().all(|(field, equal, value)| {
            let same = match field.as_str() {
                "metadata.name" => obj.name() == value,
                "metadata.namespace" => obj.namespace() == value,
                label => match own.next().flatten() {
                    Some(v) => v == *value,
                    None => field_label(label).1 == value,
                },
            };
            same == *equal
        })
    }
}

/// Field labels that are not the JSON path of their value, or whose absent value Kubernetes
/// prints as something else than `""` (its field-label functions format a zero `int32` or
/// `bool`): (label, path, value when absent).
const FIELD_LABELS: [(&str, &str, &str); 4] = [
    // An Event's `source` is its `source.component`.
    ("source", "source.component", ""),
    // A Job's `status.successful` is its `status.succeeded`.
    ("status.successful", "status.succeeded", "0"),
    ("status.replicas", "status.replicas", "0"),
    ("spec.unschedulable", "spec.unschedulable", "false"),
];

/// The JSON path a field label reads, and what an absent value compares as.
pub fn field_label(label: &str) -> (&str, &str) {
    FIELD_LABELS
        .iter()
        .find(|(l, _, _)| *l == label)
        .map_or((label, ""), |(_, path, absent)| (*path, *absent))
}

/// A `LabelSelector` object in the syntax of `-l` and of List requests ("": everything).
pub fn label_selector(sel: &Value) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(labels) = sel["matchLabels"].as_object() {
        for (k, v) in labels {
            reqs.push((k.clone(), format!("{k}={}", text(v))));
        }
    }
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = text(&e["key"]);
        let values: Vec<String> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        let req = match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            op => format!("{key} {op} ({})", values.join(",")),
        };
        reqs.push((key, req));
    }
    reqs.sort();
    reqs.into_iter()
        .map(|(_, r)| r)
        .collect::<Vec<_>>()
        .join(",")
}

/// A label value or key as text: a string as is, null as nothing.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Object;

    fn labels(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| owned.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn every_operator_selects_as_kubernetes_does() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let yes = [
            "",
            "app=web",
            "app==web",
            "app!=db",
            "app in (web,db)",
            "app notin (db)",
            "app",
            "!missing",
            "app=web,tier=front",
            "missing notin (x)",
            "missing!=x",
        ];
        let no = [
            "app=db",
            "app!=web",
            "app in (db)",
            "app notin (web, db)",
            "missing",
            "!app",
            "missing in (x)",
        ];
        for s in yes {
            assert!(
                LabelSelector::parse(s).unwrap().matches(&l),
                "{s} should match"
            );
        }
        for s in no {
            assert!(
                !LabelSelector::parse(s).unwrap().matches(&l),
                "{s} should not match"
            );
        }
    }

    #[test]
    fn malformed_selectors_are_errors() {
        for s in ["app in (web", "a b c", "=x", "app=(x)", "Bad Key=x"] {
            assert!(LabelSelector::parse(s).is_err(), "{s}");
        }
        let e = FieldSelector::parse("spec.nodeName=x", &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "field label not supported: spec.nodeName (supported: metadata.name, metadata.namespace)"
        );
        assert!(FieldSelector::parse("metadata.name", &[]).is_err());
    }

    #[test]
    fn field_selectors_match_name_and_namespace() {
        let o = Object::from_slice(br#"{"metadata":{"name":"a","namespace":"ns"}}"#).unwrap();
        assert!(
            FieldSelector::parse("metadata.name=a", &[])
                .unwrap()
                .matches_object(&o)
        );
        assert!(
            FieldSelector::parse("metadata.namespace!=other,metadata.name==a", &[])
                .unwrap()
                .matches_object(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=a", &[])
                .unwrap()
                .matches_object(&o)
        );
    }

    #[test]
    fn field_labels_read_kubernetes_paths_and_zero_values() {
        let sel = |s: &str, fields: &[&str]| {
            let fields: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
            FieldSelector::parse(s, &fields).unwrap()
        };
        let obj = |v: serde_json::Value| crate::Object::from_value(v).unwrap();
        let event = obj(serde_json::json!({"source": {"component": "kubelet"}}));
        assert!(sel("source=kubelet", &["source"]).matches_object(&event));
        assert!(!sel("source=job-controller", &["source"]).matches_object(&event));
        let node = obj(serde_json::json!({"spec": {}}));
        assert!(sel("spec.unschedulable=false", &["spec.unschedulable"]).matches_object(&node));
        let cordoned = obj(serde_json::json!({"spec": {"unschedulable": true}}));
        assert!(sel("spec.unschedulable=true", &["spec.unschedulable"]).matches_object(&cordoned));
        let job = obj(serde_json::json!({"status": {"succeeded": 3}}));
        assert!(sel("status.successful=3", &["status.successful"]).matches_object(&job));
        let fresh = obj(serde_json::json!({"status": {}}));
        assert!(sel("status.successful=0", &["status.successful"]).matches_object(&fresh));
        assert!(
            sel("status.replicas!=0", &["status.replicas"])
                .matches_object(&obj(serde_json::json!({"status": {"replicas": 2}})))
        );
    }

    #[test]
    fn field_selectors_match_the_kinds_selectable_fields() {
        let pod = Object::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"nodeName": "n1", "hostNetwork": true},
            "status": {"phase": "Running"},
        }))
        .unwrap();
        let fields: Vec<String> = [
            "spec.nodeName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
        ]
        .map(String::from)
        .to_vec();
        let matches = |s: &str| {
            FieldSelector::parse(s, &fields)
                .unwrap()
                .matches_object(&pod)
        };
        assert!(matches("status.phase=Running,spec.nodeName=n1"));
        assert!(!matches("status.phase=Pending"));
        assert!(matches("status.phase!=Pending"));
        // A boolean compares as JSON writes it; a field the object lacks compares as "".
        assert!(matches("spec.hostNetwork=true"));
        assert!(matches("status.podIP="));
        assert!(!matches("status.podIP!="));
        // Another kind's field is refused, naming what this one has.
        let e = FieldSelector::parse("involvedObject.name=a", &fields).unwrap_err();
        assert!(
            e.to_string()
                .contains("field label not supported: involvedObject.name")
        );
        assert!(e.to_string().contains("status.phase"), "{e}");
    }
}
