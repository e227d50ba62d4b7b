//! A CRD's validation rule (`x-kubernetes-validations[i]`): compiled when the CRD is written,
//! judged on every write of an object, as Kubernetes' apiextensions server does.

use keel_api::FieldCause;
use serde_json::Value;

use crate::env::{Binding, Compiled, compile_declared};

/// `reason`: the kind of field error a failed rule is reported as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reason {
    #[default]
    Invalid,
    Forbidden,
    Required,
    Duplicate,
}

const REASONS: &[&str] = &[
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// The variables of a CRD rule.
const VARIABLES: &[&str] = &["self", "oldSelf"];

/// One rule, compiled.
#[derive(Debug)]
pub struct Rule {
    pub rule: String,
    compiled: Compiled,
    pub message: String,
    message_expression: Option<Compiled>,
    pub reason: Reason,
    /// `fieldPath`, as written (`.spec.x`), appended to the node's path when it fails.
    pub field_path: String,
    /// `optionalOldSelf`: a transition rule also judged on create, `oldSelf` then absent.
    pub optional_old_self: bool,
}

/// A rule that cannot be kept, with the field of the CRD it names under its
/// `x-kubernetes-validations[i]` path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// `rule`, `messageExpression`, `reason`, ... (`""`: the entry itself).
    pub field: &'static str,
    pub value: String,
    pub message: String,
}

/// A rule that failed on an object: where, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The node's path, plus the rule's `fieldPath`.
    pub field: String,
    pub reason: Reason,
    pub message: String,
}

impl Rule {
    /// Compiles one `x-kubernetes-validations` entry.
    pub fn new(entry: &Value) -> Result<Rule, Vec<RuleError>> {
        let mut errors = Vec::new();
        let text = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or_default();
        let rule = text("rule");
        let compiled = if rule.trim().is_empty() {
            errors.push(RuleError {
                field: "rule",
                value: String::new(),
                message: "Required value".into(),
            });
            None
        } else {
            match compile_declared(rule, VARIABLES) {
                Ok(c) => Some(c),
                Err(e) => {
                    errors.push(RuleError {
                        field: "rule",
                        value: rule.to_string(),
                        message: format!("compilation failed: {e}"),
                    });
                    None
                }
            }
        };
        let message_expression = match text("messageExpression") {
            "" => None,
            source => match compile_declared(source, VARIABLES) {
                Ok(c) => Some(c),
                Err(e) => {
                    errors.push(RuleError {
                        field: "messageExpression",
                        value: source.to_string(),
                        message: format!("messageExpression compilation failed: {e}"),
                    });
                    None
                }
            },
        };
        let reason = match text("reason") {
            "" | "FieldValueInvalid" => Reason::Invalid,
            "FieldValueForbidden" => Reason::Forbidden,
            "FieldValueRequired" => Reason::Required,
            "FieldValueDuplicate" => Reason::Duplicate,
            other => {
                errors.push(RuleError {
                    field: "reason",
                    value: other.to_string(),
                    message: format!(
                        "Unsupported value: {other:?}: supported values: {}",
                        REASONS
                            .iter()
                            .map(|r| format!("{r:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
                Reason::Invalid
            }
        };
        let field_path = text("fieldPath").to_string();
        if !field_path.is_empty() && !valid_field_path(&field_path) {
            errors.push(RuleError {
                field: "fieldPath",
                value: field_path.clone(),
                message: "must be a valid relative JSON path, e.g. .spec.field or .spec['field']"
                    .into(),
            });
        }
        let optional_old_self = entry.get("optionalOldSelf") == Some(&Value::Bool(true));
        match compiled {
            Some(compiled) if errors.is_empty() => {
                if optional_old_self && !compiled.uses_old_self {
                    return Err(vec![RuleError {
                        field: "optionalOldSelf",
                        value: "true".into(),
                        message: "may not be set if oldSelf is not used in rule".into(),
                    }]);
                }
                Ok(Rule {
                    rule: rule.to_string(),
                    compiled,
                    message: text("message").to_string(),
                    message_expression,
                    reason,
                    field_path,
                    optional_old_self,
                })
            }
            _ => Err(errors),
        }
    }

    /// Whether it reads `oldSelf` (judged only on updates, unless `optionalOldSelf`).
    pub fn is_transition(&self) -> bool {
        self.compiled.uses_old_self
    }

    /// Judges `value` (at `path`, of schema type `type_name`) and, for an update, its old
    /// value at the same place. `None`: it holds, or does not apply (a transition rule on a
    /// create, or on a value that has no old one).
    pub fn check(
        &self,
        path: &str,
        type_name: &str,
        value: &Value,
        old: Option<&Value>,
    ) -> Option<Violation> {
        let mut vars: Vec<(&str, Binding<'_>)> = vec![("self", Binding::Json(value))];
        if self.is_transition() {
            // With `optionalOldSelf`, `oldSelf` is an optional: none on a create.
            match (old, self.optional_old_self) {
                (old, true) => vars.push(("oldSelf", Binding::Optional(old))),
                (Some(old), false) => vars.push(("oldSelf", Binding::Json(old))),
                (None, false) => return None,
            }
        }
        let field = format!("{path}{}", self.field_path);
        // A root rule's field is Kubernetes' empty path, printed `<nil>`.
        let field = match field.trim_start_matches('.') {
            "" => "<nil>".to_string(),
            f => f.to_string(),
        };
        match self.compiled.evaluate_bool(&vars) {
            Ok(true) => None,
            Ok(false) => Some(Violation {
                field,
                reason: self.reason,
                message: self.message_for(&vars, type_name),
            }),
            Err(e) => {
                // Kubernetes' words (`ruleErrorString`: the message, else the rule).
                let r = if self.message.trim().is_empty() {
                    self.rule.trim()
                } else {
                    self.message.trim()
                };
                let detail = if e.no_such_overload {
                    format!(
                        "'{}': call arguments did not match a supported operator, function or macro signature for rule: {r}",
                        e.message
                    )
                } else {
                    format!("{} evaluating rule: {r}", e.message)
                };
                Some(Violation {
                    field,
                    reason: Reason::Invalid,
                    message: format!("Invalid value: {type_name:?}: {detail}"),
                })
            }
        }
    }

    /// The message of a failure: `messageExpression`'s, when it evaluates to a non-empty
    /// string; else `message`; else `failed rule: <rule>`.
    fn message_for(&self, vars: &[(&str, Binding<'_>)], type_name: &str) -> String {
        let evaluated = self
            .message_expression
            .as_ref()
            // Kubernetes falls back to `message` when the expression fails, is not a string,
            // is blank, longer than 5120 bytes, or spans lines.
            .and_then(|m| match m.evaluate(vars) {
                Ok(cel::Value::String(s))
                    if !s.trim().is_empty() && s.len() <= 5120 && !s.contains('\n') =>
                {
                    Some(s.trim().to_string())
                }
                _ => None,
            });
        let detail = evaluated.unwrap_or_else(|| {
            if self.message.trim().is_empty() {
                format!("failed rule: {}", self.rule.trim())
            } else {
                self.message.trim().to_string()
            }
        });
        match self.reason {
            Reason::Invalid => format!("Invalid value: {type_name:?}: {detail}"),
            Reason::Forbidden => format!("Forbidden: {detail}"),
            Reason::Required => format!("Required value: {detail}"),
            Reason::Duplicate => format!("Duplicate value: {type_name:?}"),
        }
    }
}

impl Violation {
    /// The field error Kubernetes reports.
    pub fn cause(&self) -> FieldCause {
        let reason = match self.reason {
            Reason::Invalid => "FieldValueInvalid",
            Reason::Forbidden => "FieldValueForbidden",
            Reason::Required => "FieldValueRequired",
            Reason::Duplicate => "FieldValueDuplicate",
        };
        FieldCause {
            reason: reason.into(),
            message: self.message.clone(),
            field: self.field.clone(),
        }
    }
}

/// A relative JSON path of field names and quoted keys: `.spec.x`, `.spec['a.b']`.
fn valid_field_path(path: &str) -> bool {
    let mut rest = path;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let name = &r[..end];
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return false;
            }
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("['") {
            let Some(end) = r.find("']") else {
                return false;
            };
            rest = &r[end + 2..];
        } else {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(entry: Value) -> Rule {
        match Rule::new(&entry) {
            Ok(r) => r,
            Err(e) => panic!("{entry}: {e:?}"),
        }
    }

    #[test]
    fn a_failed_rule_says_its_message_at_its_path() {
        let r = rule(
            json!({"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"}),
        );
        let v = r.check(
            ".spec",
            "object",
            &json!({"replicas": 5, "maxReplicas": 3}),
            None,
        );
        assert_eq!(
            v.map(|v| (v.field, v.message)),
            Some((
                "spec".to_string(),
                "Invalid value: \"object\": replicas must not exceed maxReplicas".to_string()
            ))
        );
        assert!(
            r.check(
                ".spec",
                "object",
                &json!({"replicas": 1, "maxReplicas": 3}),
                None
            )
            .is_none()
        );
    }

    #[test]
    fn message_expression_then_message_then_the_rule() {
        let r = rule(
            json!({"rule": "self.x < 3", "messageExpression": "'x is ' + string(self.x)", "message": "too big"}),
        );
        let v = r.check(".spec", "object", &json!({"x": 5}), None);
        assert_eq!(
            v.map(|v| v.message).unwrap_or_default(),
            "Invalid value: \"object\": x is 5"
        );
        let r = rule(json!({"rule": "self.x < 3", "messageExpression": "self.nothing"}));
        let v = r.check(".spec", "object", &json!({"x": 5}), None);
        assert_eq!(
            v.map(|v| v.message).unwrap_or_default(),
            "Invalid value: \"object\": failed rule: self.x < 3"
        );
    }

    #[test]
    fn transition_rules_judge_updates_only_unless_old_self_is_optional() {
        let r = rule(
            json!({"rule": "self == oldSelf", "message": "Value is immutable", "reason": "FieldValueForbidden", "fieldPath": ".name"}),
        );
        assert!(r.is_transition());
        assert!(
            r.check(".spec", "object", &json!({"name": "a"}), None)
                .is_none()
        );
        let v = r.check(
            ".spec",
            "object",
            &json!({"name": "a"}),
            Some(&json!({"name": "b"})),
        );
        assert_eq!(
            v.map(|v| (v.field, v.message, v.reason)),
            Some((
                "spec.name".to_string(),
                "Forbidden: Value is immutable".to_string(),
                Reason::Forbidden
            ))
        );
        let optional = rule(json!({"rule": "oldSelf.optMap(o, o == self).orValue(true)",
            "message": "Immutable after creation", "optionalOldSelf": true}));
        assert!(
            optional
                .check(".spec.x", "string", &json!("a"), None)
                .is_none()
        );
        assert!(
            optional
                .check(".spec.x", "string", &json!("a"), Some(&json!("a")))
                .is_none()
        );
        assert!(
            optional
                .check(".spec.x", "string", &json!("b"), Some(&json!("a")))
                .is_some()
        );
    }

    #[test]
    fn bad_rules_are_refused_naming_the_field() {
        let table = [
            (
                json!({"rule": "self.x +++ 1"}),
                "rule",
                "compilation failed: ERROR: <input>:1:",
            ),
            (json!({"rule": ""}), "rule", "Required value"),
            (
                json!({"rule": "true", "reason": "Nope"}),
                "reason",
                "Unsupported value: \"Nope\"",
            ),
            (
                json!({"rule": "true", "fieldPath": "spec"}),
                "fieldPath",
                "must be a valid relative JSON path",
            ),
            (
                json!({"rule": "true", "messageExpression": "'a' +"}),
                "messageExpression",
                "messageExpression compilation failed",
            ),
            (
                json!({"rule": "self.x > 1", "optionalOldSelf": true}),
                "optionalOldSelf",
                "may not be set if oldSelf is not used in rule",
            ),
        ];
        for (entry, field, want) in table {
            let errors = Rule::new(&entry).err().unwrap_or_default();
            assert!(
                errors
                    .iter()
                    .any(|e| e.field == field && e.message.starts_with(want)),
                "{entry}: {errors:?}"
            );
        }
    }

    #[test]
    fn an_evaluation_error_is_reported_on_the_field() {
        let r = rule(json!({"rule": "self.missing == 1"}));
        let v = r.check(".spec", "object", &json!({}), None);
        assert_eq!(
            v.map(|v| (v.field, v.message)),
            Some((
                "spec".to_string(),
                "Invalid value: \"object\": no such key: missing evaluating rule: self.missing == 1".to_string()
            ))
        );
        let r = rule(json!({"rule": "self.x + 'a' == 'b'", "message": "x plus a"}));
        let v = r.check(".spec", "object", &json!({"x": 1}), None);
        let message = v.map(|v| v.message).unwrap_or_default();
        assert!(
            message.ends_with("': call arguments did not match a supported operator, function or macro signature for rule: x plus a"),
            "{message}"
        );
    }

    #[test]
    fn a_root_rule_fails_at_kubernetes_empty_path() {
        let r = rule(json!({"rule": "false"}));
        assert_eq!(
            r.check("", "object", &json!({}), None).map(|v| v.field),
            Some("<nil>".to_string())
        );
    }
}
