//! `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy and
//! ValidatingAdmissionPolicyBinding: Kubernetes' defaults and validation, the stored objects
//! read into [`Policy`] and [`PolicyBinding`], and the evaluation of one policy on one write
//! ([`evaluate`]), as Kubernetes' `validating` plugin runs it (docs/cel.md §6). Matching,
//! params and answers are the registry's (`webhooks::Registry::validate_by_policies`).

use std::sync::Arc;

use keel_api::selector::{LabelSelector, label_selector};
use keel_api::{FieldCause, Metadata, Object, Reason};
use serde_json::{Map, Value, json};

use super::config::{
    FailurePolicy, Match, one_of, str_of, strings, validate_match_conditions, validate_rules,
};
use crate::registry::rbac::validate_label_selector;

pub const POLICIES: &str = "validatingadmissionpolicies";
pub const BINDINGS: &str = "validatingadmissionpolicybindings";

const FAILURE_POLICIES: &[&str] = &["Fail", "Ignore"];
const MATCH_POLICIES: &[&str] = &["Equivalent", "Exact"];
const REASONS: &[&str] = &["Forbidden", "Invalid", "RequestEntityTooLarge"];
const ACTIONS: &[&str] = &["Audit", "Deny", "Warn"];
const NOT_FOUND_ACTIONS: &[&str] = &["Allow", "Deny"];

/// The longest `messageExpression` result and audit annotation expression Kubernetes takes.
const MAX_MESSAGE_BYTES: usize = 5120;
/// The most audit annotations a policy has.
const MAX_AUDIT_ANNOTATIONS: usize = 20;
/// The longest audit annotation value kept.
const MAX_AUDIT_VALUE_BYTES: usize = 10240;

/// The audit annotation a failure of an `Audit` binding writes.
pub const VALIDATION_FAILURE_ANNOTATION: &str =
    "validation.policy.admission.k8s.io/validation_failure";

/// The variables a policy's expressions may read (`params` only with a `paramKind`).
fn variables_of(has_params: bool) -> &'static [&'static str] {
    const WITH: &[&str] = &[
        "object",
        "oldObject",
        "request",
        "params",
        "namespaceObject",
        "authorizer",
        "variables",
    ];
    const WITHOUT: &[&str] = &[
        "object",
        "oldObject",
        "request",
        "namespaceObject",
        "authorizer",
        "variables",
    ];
    if has_params { WITH } else { WITHOUT }
}

/// An empty object, for what is absent.
fn empty() -> &'static Map<String, Value> {
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    &EMPTY
}

/// An object's `spec` (empty when it has none).
fn spec_of(obj: &Object) -> &Map<String, Value> {
    obj.as_map()
        .get("spec")
        .and_then(Value::as_object)
        .unwrap_or(empty())
}

fn spec_mut(obj: &mut Object) -> Option<&mut Map<String, Value>> {
    obj.as_map_mut()
        .entry("spec")
        .or_insert_with(|| json!({}))
        .as_object_mut()
}

/// Kubernetes' defaults of a match (`matchConstraints`, `matchResources`): every namespace and
/// object, `Equivalent`, rules of any scope.
fn default_match(m: &mut Map<String, Value>) {
    m.entry("namespaceSelector").or_insert_with(|| json!({}));
    m.entry("objectSelector").or_insert_with(|| json!({}));
    m.entry("matchPolicy")
        .or_insert_with(|| json!("Equivalent"));
    for rules in ["resourceRules", "excludeResourceRules"] {
        for r in m
            .get_mut(rules)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            r.entry("scope").or_insert_with(|| json!("*"));
        }
    }
}

/// Kubernetes' defaults of a ValidatingAdmissionPolicy (`failurePolicy: Fail`).
pub fn default_policy(obj: &mut Object) {
    let Some(spec) = spec_mut(obj) else { return };
    spec.entry("failurePolicy").or_insert_with(|| json!("Fail"));
    if let Some(m) = spec
        .get_mut("matchConstraints")
        .and_then(Value::as_object_mut)
    {
        default_match(m);
    }
}

/// Kubernetes' defaults of a ValidatingAdmissionPolicyBinding.
pub fn default_binding(obj: &mut Object) {
    let Some(spec) = spec_mut(obj) else { return };
    if let Some(m) = spec
        .get_mut("matchResources")
        .and_then(Value::as_object_mut)
    {
        default_match(m);
    }
}

fn validate_match(
    m: &Map<String, Value>,
    at: &str,
    rules_required: bool,
    causes: &mut Vec<FieldCause>,
) {
    let rules = m.get("resourceRules").and_then(Value::as_array);
    if rules_required && rules.is_none_or(Vec::is_empty) {
        causes.push(FieldCause::required(format!("{at}.resourceRules")));
    }
    validate_rules(
        m.get("resourceRules"),
        &format!("{at}.resourceRules"),
        causes,
    );
    validate_rules(
        m.get("excludeResourceRules"),
        &format!("{at}.excludeResourceRules"),
        causes,
    );
    for selector in ["namespaceSelector", "objectSelector"] {
        if let Some(s) = m.get(selector).filter(|s| !s.is_null()) {
            validate_label_selector(s, &format!("{at}.{selector}"), causes);
        }
    }
    if m.contains_key("matchPolicy") {
        one_of(m, "matchPolicy", MATCH_POLICIES, at, causes);
    }
}

/// `Invalid value: "<expr>": compilation failed: ...` when `expression` does not compile.
fn compiles(expression: &str, at: String, variables: &[&str], causes: &mut Vec<FieldCause>) {
    if let Err(e) = keel_cel::compile_declared(expression, variables) {
        causes.push(FieldCause::invalid(
            at,
            expression,
            format!("compilation failed: {e}"),
        ));
    }
}

fn list<'a>(m: &'a Map<String, Value>, k: &str) -> &'a [Value] {
    m.get(k)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Kubernetes' validation of a ValidatingAdmissionPolicy
/// (`ValidateValidatingAdmissionPolicy`).
pub fn validate_policy(obj: &Object, causes: &mut Vec<FieldCause>) {
    let spec = spec_of(obj);
    let has_params = match spec.get("paramKind") {
        None | Some(Value::Null) => false,
        Some(k) => {
            for field in ["apiVersion", "kind"] {
                if k.get(field)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .is_empty()
                {
                    causes.push(FieldCause::required(format!("spec.paramKind.{field}")));
                }
            }
            true
        }
    };
    let variables = variables_of(has_params);
    match spec.get("matchConstraints").and_then(Value::as_object) {
        None => causes.push(FieldCause::required("spec.matchConstraints")),
        Some(m) => validate_match(m, "spec.matchConstraints", true, causes),
    }
    if spec.contains_key("failurePolicy") {
        one_of(spec, "failurePolicy", FAILURE_POLICIES, "spec", causes);
    } else {
        causes.push(FieldCause::required("spec.failurePolicy"));
    }
    let validations = list(spec, "validations");
    let audits = list(spec, "auditAnnotations");
    if validations.is_empty() && audits.is_empty() {
        for field in ["spec.validations", "spec.auditAnnotations"] {
            causes.push(FieldCause {
                message:
                    "Required value: validations or auditAnnotations must contain at least one item"
                        .into(),
                ..FieldCause::required(field)
            });
        }
    }
    for (i, v) in validations.iter().enumerate() {
        let at = format!("spec.validations[{i}]");
        let v = v.as_object().unwrap_or(empty());
        let expression = str_of(v, "expression");
        if expression.trim().is_empty() {
            causes.push(FieldCause {
                message: "Required value: expression is not specified".into(),
                ..FieldCause::required(format!("{at}.expression"))
            });
        } else {
            compiles(expression, format!("{at}.expression"), variables, causes);
        }
        let message = str_of(v, "message");
        if message.contains(['\n', '\r']) {
            causes.push(FieldCause::invalid(
                format!("{at}.message"),
                message,
                "message must not contain line breaks",
            ));
        }
        if let Some(m) = v.get("messageExpression").and_then(Value::as_str) {
            if m.trim().is_empty() {
                causes.push(FieldCause::invalid(
                    format!("{at}.messageExpression"),
                    m,
                    "must be non-empty if specified",
                ));
            } else {
                compiles(m, format!("{at}.messageExpression"), variables, causes);
            }
        }
        if v.contains_key("reason") {
            one_of(v, "reason", REASONS, &at, causes);
        }
    }
    if audits.len() > MAX_AUDIT_ANNOTATIONS {
        causes.push(FieldCause {
            reason: "FieldValueTooMany".into(),
            message: format!(
                "Too many: {}: must have at most {MAX_AUDIT_ANNOTATIONS} items",
                audits.len()
            ),
            field: "spec.auditAnnotations".into(),
        });
    }
    let mut keys: Vec<&str> = Vec::new();
    for (i, a) in audits.iter().enumerate() {
        let at = format!("spec.auditAnnotations[{i}]");
        let a = a.as_object().unwrap_or(empty());
        let key = str_of(a, "key");
        if key.is_empty() {
            causes.push(FieldCause::required(format!("{at}.key")));
        } else {
            for e in keel_api::validation::label_key(&format!("{}/{key}", obj.name())) {
                causes.push(FieldCause::invalid(format!("{at}.key"), key, e));
            }
            if keys.contains(&key) {
                causes.push(FieldCause::duplicate(format!("{at}.key"), key));
            }
            keys.push(key);
        }
        let value = str_of(a, "valueExpression");
        if value.trim().is_empty() {
            causes.push(FieldCause::required(format!("{at}.valueExpression")));
        } else if value.len() > MAX_MESSAGE_BYTES {
            causes.push(FieldCause::invalid(
                format!("{at}.valueExpression"),
                value,
                format!("must not exceed {MAX_MESSAGE_BYTES} bytes in length"),
            ));
        } else {
            compiles(value, format!("{at}.valueExpression"), variables, causes);
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, v) in list(spec, "variables").iter().enumerate() {
        let at = format!("spec.variables[{i}]");
        let v = v.as_object().unwrap_or(empty());
        let name = str_of(v, "name");
        if name.is_empty() {
            causes.push(FieldCause::required(format!("{at}.name")));
        } else if !keel_cel::is_identifier(name) {
            causes.push(FieldCause::invalid(
                format!("{at}.name"),
                name,
                "name is not a valid CEL identifier",
            ));
        } else if names.contains(&name) {
            causes.push(FieldCause::duplicate(format!("{at}.name"), name));
        }
        names.push(name);
        let expression = str_of(v, "expression");
        if expression.trim().is_empty() {
            causes.push(FieldCause::required(format!("{at}.expression")));
        } else {
            compiles(expression, format!("{at}.expression"), variables, causes);
        }
    }
    validate_match_conditions(
        spec.get("matchConditions"),
        "spec.matchConditions",
        variables,
        causes,
    );
}

/// Kubernetes' validation of a ValidatingAdmissionPolicyBinding.
pub fn validate_binding(obj: &Object, causes: &mut Vec<FieldCause>) {
    let spec = spec_of(obj);
    if str_of(spec, "policyName").is_empty() {
        causes.push(FieldCause::required("spec.policyName"));
    }
    let actions = strings(spec.get("validationActions"));
    if actions.is_empty() {
        causes.push(FieldCause {
            message: "Required value: at least one validation action is required".into(),
            ..FieldCause::required("spec.validationActions")
        });
    }
    for (i, a) in actions.iter().enumerate() {
        let at = format!("spec.validationActions[{i}]");
        if !ACTIONS.contains(&a.as_str()) {
            causes.push(FieldCause::not_supported(at, a, ACTIONS));
        } else if actions[..i].contains(a) {
            causes.push(FieldCause::duplicate(at, a));
        }
    }
    if actions.iter().any(|a| a == "Deny") && actions.iter().any(|a| a == "Warn") {
        causes.push(FieldCause::invalid(
            "spec.validationActions",
            &format!("[{}]", actions.join(" ")),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
    if let Some(p) = spec.get("paramRef").and_then(Value::as_object) {
        let (name, selector) = (
            str_of(p, "name"),
            p.get("selector").filter(|s| !s.is_null()),
        );
        match (name.is_empty(), selector) {
            (false, Some(_)) => {
                for field in ["name", "selector"] {
                    causes.push(FieldCause::forbidden(
                        format!("spec.paramRef.{field}"),
                        "name and selector are mutually exclusive",
                    ));
                }
            }
            (true, None) => causes.push(FieldCause {
                message: "Required value: one of name or selector must be specified".into(),
                ..FieldCause::required("spec.paramRef")
            }),
            (true, Some(s)) => validate_label_selector(s, "spec.paramRef.selector", causes),
            (false, None) => {}
        }
        if p.contains_key("parameterNotFoundAction") {
            one_of(
                p,
                "parameterNotFoundAction",
                NOT_FOUND_ACTIONS,
                "spec.paramRef",
                causes,
            );
        } else {
            causes.push(FieldCause::required(
                "spec.paramRef.parameterNotFoundAction",
            ));
        }
    }
    if let Some(m) = spec.get("matchResources").and_then(Value::as_object) {
        // Kubernetes' path, misspelt as it is.
        validate_match(m, "spec.matchResouces", false, causes);
    }
}

/// An expression of a policy, compiled (or why not: a stored policy the environment no
/// longer compiles fails as its `failurePolicy` says).
pub struct Expression {
    pub source: String,
    program: Result<keel_cel::Compiled, String>,
}

impl Expression {
    fn new(source: &str, variables: &[&str]) -> Expression {
        Expression {
            source: source.to_string(),
            program: keel_cel::compile_declared(source, variables)
                .map_err(|e| format!("compilation error: compilation failed: {e}")),
        }
    }

    fn evaluate(&self, activation: &keel_cel::Activation) -> Result<keel_cel::Value, String> {
        let program = self.program.as_ref().map_err(String::clone)?;
        program
            .evaluate_in(activation)
            .map_err(|e| format!("expression '{}' resulted in error: {e}", self.source))
    }
}

pub struct Validation {
    pub expression: Expression,
    message: String,
    message_expression: Option<Expression>,
    reason: Reason,
}

/// A ValidatingAdmissionPolicy, as admission evaluates it.
pub struct Policy {
    pub name: String,
    pub failure_policy: FailurePolicy,
    /// `None`: it has no `matchConstraints` (a configuration error).
    pub when: Option<Match>,
    /// `paramKind`: its `apiVersion` and `kind`.
    pub param_kind: Option<(String, String)>,
    match_conditions: Vec<Expression>,
    variables: Vec<(String, Expression)>,
    validations: Vec<Validation>,
    audit_annotations: Vec<(String, Expression)>,
}

/// Where a binding finds its params.
pub struct ParamRef {
    pub name: String,
    pub namespace: String,
    /// `None` with a `name`.
    pub selector: Option<LabelSelector>,
    /// `parameterNotFoundAction: Deny`.
    pub deny_when_missing: bool,
}

/// A ValidatingAdmissionPolicyBinding.
pub struct PolicyBinding {
    pub name: String,
    pub policy: String,
    pub param_ref: Option<ParamRef>,
    /// `matchResources` (`None`: whatever the policy matches).
    pub when: Option<Match>,
    pub deny: bool,
    pub warn: bool,
    pub audit: bool,
    /// The actions as written, for the audit annotation.
    pub actions: Vec<String>,
}

/// Reads a stored policy (validated on its way in).
pub fn read_policy(obj: &Object) -> Policy {
    let spec = spec_of(obj);
    let param_kind = spec.get("paramKind").and_then(Value::as_object).map(|k| {
        (
            str_of(k, "apiVersion").to_string(),
            str_of(k, "kind").to_string(),
        )
    });
    let variables = variables_of(param_kind.is_some());
    let entries = |k: &str| list(spec, k).iter().filter_map(Value::as_object);
    Policy {
        name: obj.name().to_string(),
        failure_policy: FailurePolicy::of(spec),
        when: spec
            .get("matchConstraints")
            .and_then(Value::as_object)
            .map(|m| Match::read(m, "resourceRules")),
        match_conditions: entries("matchConditions")
            .map(|c| Expression::new(str_of(c, "expression"), variables))
            .collect(),
        variables: entries("variables")
            .map(|v| {
                (
                    str_of(v, "name").to_string(),
                    Expression::new(str_of(v, "expression"), variables),
                )
            })
            .collect(),
        validations: entries("validations")
            .map(|v| Validation {
                expression: Expression::new(str_of(v, "expression"), variables),
                message: str_of(v, "message").trim().to_string(),
                message_expression: v
                    .get("messageExpression")
                    .and_then(Value::as_str)
                    .map(|m| Expression::new(m, variables)),
                reason: match str_of(v, "reason") {
                    "Forbidden" => Reason::Forbidden,
                    "RequestEntityTooLarge" => Reason::RequestEntityTooLarge,
                    "Unauthorized" => Reason::Unauthorized,
                    _ => Reason::Invalid,
                },
            })
            .collect(),
        audit_annotations: entries("auditAnnotations")
            .map(|a| {
                (
                    str_of(a, "key").to_string(),
                    Expression::new(str_of(a, "valueExpression"), variables),
                )
            })
            .collect(),
        param_kind,
    }
}

/// Reads a stored binding.
pub fn read_binding(obj: &Object) -> PolicyBinding {
    let spec = spec_of(obj);
    let actions = strings(spec.get("validationActions"));
    let has = |a: &str| actions.iter().any(|x| x == a);
    PolicyBinding {
        name: obj.name().to_string(),
        policy: str_of(spec, "policyName").to_string(),
        param_ref: spec
            .get("paramRef")
            .and_then(Value::as_object)
            .map(|p| ParamRef {
                name: str_of(p, "name").to_string(),
                namespace: str_of(p, "namespace").to_string(),
                selector: p
                    .get("selector")
                    .filter(|s| !s.is_null())
                    .map(|s| LabelSelector::parse(&label_selector(s)).unwrap_or_default()),
                deny_when_missing: str_of(p, "parameterNotFoundAction") == "Deny",
            }),
        when: spec
            .get("matchResources")
            .and_then(Value::as_object)
            .map(|m| Match::read(m, "resourceRules")),
        deny: has("Deny"),
        warn: has("Warn"),
        audit: has("Audit"),
        actions,
    }
}

/// The policies that have bindings, each with its bindings, in name order (Kubernetes
/// evaluates them in its informers' order; keel's is stable).
pub fn bound(
    policies: &[Object],
    bindings: &[Object],
) -> Vec<(Arc<Policy>, Vec<Arc<PolicyBinding>>)> {
    let mut bindings: Vec<PolicyBinding> = bindings.iter().map(read_binding).collect();
    bindings.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out: Vec<(Arc<Policy>, Vec<Arc<PolicyBinding>>)> = policies
        .iter()
        .map(|p| (Arc::new(read_policy(p)), Vec::new()))
        .collect();
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    for binding in bindings {
        if let Some((_, of)) = out.iter_mut().find(|(p, _)| p.name == binding.policy) {
            of.push(Arc::new(binding));
        }
    }
    out.retain(|(_, b)| !b.is_empty());
    out
}

/// What one write is, to a policy's expressions.
pub struct Input<'a> {
    pub object: &'a Value,
    pub old_object: &'a Value,
    pub request: &'a Value,
    pub namespace_object: &'a Value,
    /// `None` without a `paramKind`.
    pub params: Option<&'a Value>,
    /// `None`: `authorizer` is null.
    pub authorizer: Option<&'a keel_cel::Authorizer>,
}

/// A failed validation (or an error the policy's `failurePolicy` makes one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    pub reason: Reason,
    /// The validation's index (for the `Audit` annotation).
    pub index: usize,
}

/// What a policy says of one write with one param.
#[derive(Debug, Default)]
pub struct Verdict {
    pub failures: Vec<Failure>,
    /// `<policy>/<key>` and value of each audit annotation that has one.
    pub audit_annotations: Vec<(String, String)>,
}

/// Evaluates `policy` on `input`, as Kubernetes' validator does: `matchConditions` (any false:
/// nothing to say; errors: the failure policy's), `variables`, every validation, then the
/// audit annotations.
pub fn evaluate(policy: &Policy, input: &Input<'_>) -> Verdict {
    let fail = policy.failure_policy == FailurePolicy::Fail;
    let as_failure = |message: String, index: usize| Failure {
        message,
        reason: Reason::Invalid,
        index,
    };
    let mut verdict = Verdict::default();
    let mut bindings = vec![
        ("object", keel_cel::Binding::Json(input.object)),
        ("oldObject", keel_cel::Binding::Json(input.old_object)),
        ("request", keel_cel::Binding::Json(input.request)),
        (
            "namespaceObject",
            keel_cel::Binding::Json(input.namespace_object),
        ),
        (
            "authorizer",
            input.authorizer.map_or(
                keel_cel::Binding::Json(&Value::Null),
                keel_cel::Binding::Authorizer,
            ),
        ),
    ];
    if let Some(params) = input.params {
        bindings.push(("params", keel_cel::Binding::Json(params)));
    }
    let mut activation = match keel_cel::Activation::new(&bindings) {
        Ok(a) => a,
        Err(e) => {
            if fail {
                verdict.failures.push(as_failure(e.message, 0));
            }
            return verdict;
        }
    };
    // matchConditions: a false one ends it; errors count only when none is false.
    let mut errors = Vec::new();
    for c in &policy.match_conditions {
        match c.evaluate(&activation) {
            Ok(keel_cel::Value::Bool(true)) => {}
            Ok(keel_cel::Value::Bool(false)) => return verdict,
            Ok(other) => errors.push(format!(
                "expression '{}' resulted in error: expected a bool, got {:?}",
                c.source,
                other.type_of()
            )),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        if fail {
            let message = if errors.len() == 1 {
                errors.remove(0)
            } else {
                format!("[{}]", errors.join(", "))
            };
            verdict.failures.push(as_failure(message, 0));
        }
        return verdict;
    }
    // Variables, in order, each seeing those before it. One that fails is left out, and
    // what reads it fails with its error.
    let mut values = std::collections::HashMap::new();
    let mut failed: Vec<(&str, String)> = Vec::new();
    for (name, expression) in &policy.variables {
        match expression.evaluate(&activation) {
            Ok(v) => {
                values.insert(name.clone(), v);
                if let Err(e) = activation.bind("variables", keel_cel::Value::from(values.clone()))
                {
                    failed.push((name, e.message));
                }
            }
            Err(e) => failed.push((name, e)),
        }
    }
    if values.is_empty() {
        let _ = activation.bind(
            "variables",
            keel_cel::Value::from(std::collections::HashMap::<String, keel_cel::Value>::new()),
        );
    }
    let error_of = |source: &str, e: String| {
        failed
            .iter()
            .find(|(name, _)| source.contains(&format!("variables.{name}")))
            .map_or(e, |(name, why)| {
                format!("expression '{source}' resulted in error: variable '{name}': {why}")
            })
    };
    for (index, v) in policy.validations.iter().enumerate() {
        let source = v.expression.source.as_str();
        match v.expression.evaluate(&activation) {
            Ok(keel_cel::Value::Bool(true)) => {}
            Ok(keel_cel::Value::Bool(false)) => {
                let from_expression =
                    v.message_expression
                        .as_ref()
                        .and_then(|m| match m.evaluate(&activation) {
                            Ok(keel_cel::Value::String(s)) => {
                                let s = s.trim();
                                (!s.is_empty() && s.len() <= MAX_MESSAGE_BYTES && !s.contains('\n'))
                                    .then(|| s.to_string())
                            }
                            _ => None,
                        });
                let message = from_expression.unwrap_or_else(|| {
                    if v.message.is_empty() {
                        format!("failed expression: {}", source.trim())
                    } else {
                        v.message.clone()
                    }
                });
                verdict.failures.push(Failure {
                    message,
                    reason: v.reason,
                    index,
                });
            }
            Ok(other) => {
                if fail {
                    verdict.failures.push(as_failure(
                        format!(
                            "expression '{source}' resulted in error: expected a bool, got {:?}",
                            other.type_of()
                        ),
                        index,
                    ));
                }
            }
            Err(e) => {
                if fail {
                    verdict
                        .failures
                        .push(as_failure(error_of(source, e), index));
                }
            }
        }
    }
    for (key, expression) in &policy.audit_annotations {
        let source = expression.source.as_str();
        match expression.evaluate(&activation) {
            Ok(keel_cel::Value::String(s)) => {
                let mut value = s.trim().to_string();
                if value.is_empty() {
                    continue;
                }
                if value.len() > MAX_AUDIT_VALUE_BYTES {
                    let mut end = MAX_AUDIT_VALUE_BYTES;
                    while !value.is_char_boundary(end) {
                        end -= 1;
                    }
                    value.truncate(end);
                }
                verdict
                    .audit_annotations
                    .push((format!("{}/{key}", policy.name), value));
            }
            Ok(keel_cel::Value::Null) => {}
            Ok(other) => {
                if fail {
                    verdict.failures.push(as_failure(
                        format!(
                            "valueExpression '{source}' resulted in unsupported return type: {:?}. Return type must be either string or null.",
                            other.type_of()
                        ),
                        0,
                    ));
                }
            }
            Err(e) => {
                if fail {
                    verdict.failures.push(as_failure(error_of(source, e), 0));
                }
            }
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn policy(spec: Value) -> Object {
        let mut obj = Object::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "p.example.com"},
            "spec": spec,
        }))
        .unwrap();
        default_policy(&mut obj);
        obj
    }

    fn causes_of(spec: Value) -> Vec<String> {
        let mut causes = Vec::new();
        validate_policy(&policy(spec), &mut causes);
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn rules() -> Value {
        json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
    }

    #[test]
    fn a_good_policy_is_defaulted_and_accepted() {
        let obj = policy(json!({"matchConstraints": rules(),
            "validations": [{"expression": "object.spec.replicas <= 5"}]}));
        assert_eq!(obj.as_map()["spec"]["failurePolicy"], "Fail");
        assert_eq!(
            obj.as_map()["spec"]["matchConstraints"]["matchPolicy"],
            "Equivalent"
        );
        assert_eq!(
            obj.as_map()["spec"]["matchConstraints"]["resourceRules"][0]["scope"],
            "*"
        );
        assert_eq!(
            causes_of(json!({"matchConstraints": rules(),
                "validations": [{"expression": "object.spec.replicas <= 5"}]})),
            Vec::<String>::new()
        );
    }

    #[test]
    fn bad_policies_are_refused_naming_the_field() {
        let table = [
            (
                json!({"validations": [{"expression": "true"}]}),
                "spec.matchConstraints: Required value",
            ),
            (
                json!({"matchConstraints": rules()}),
                "spec.validations: Required value: validations or auditAnnotations must contain at least one item",
            ),
            (
                json!({"matchConstraints": rules(), "validations": [{"expression": "params.x"}]}),
                "spec.validations[0].expression: Invalid value: \"params.x\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')",
            ),
            (
                json!({"matchConstraints": rules(), "validations": [{"expression": "true", "reason": "Teapot"}]}),
                "spec.validations[0].reason: Unsupported value: \"Teapot\"",
            ),
            (
                json!({"matchConstraints": rules(), "validations": [{"expression": "true"}],
                    "variables": [{"name": "in", "expression": "1"}]}),
                "spec.variables[0].name: Invalid value: \"in\": name is not a valid CEL identifier",
            ),
            (
                json!({"matchConstraints": {}, "validations": [{"expression": "true"}]}),
                "spec.matchConstraints.resourceRules: Required value",
            ),
        ];
        for (spec, want) in table {
            let got = causes_of(spec.clone());
            assert!(
                got.iter().any(|c| c.starts_with(want)),
                "{spec}: want {want}, got {got:?}"
            );
        }
    }

    #[test]
    fn bad_bindings_are_refused_naming_the_field() {
        let table = [
            (
                json!({"policyName": "p", "validationActions": ["Deny", "Warn"]}),
                "spec.validationActions: Invalid value: \"[Deny Warn]\": must not contain both Deny and Warn",
            ),
            (
                json!({"policyName": "p", "validationActions": []}),
                "spec.validationActions: Required value: at least one validation action is required",
            ),
            (
                json!({"validationActions": ["Deny"]}),
                "spec.policyName: Required value",
            ),
            (
                json!({"policyName": "p", "validationActions": ["Deny"],
                    "paramRef": {"name": "x", "selector": {}, "parameterNotFoundAction": "Deny"}}),
                "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
            ),
            (
                json!({"policyName": "p", "validationActions": ["Deny"], "paramRef": {"name": "x"}}),
                "spec.paramRef.parameterNotFoundAction: Required value",
            ),
        ];
        for (spec, want) in table {
            let obj = Object::from_value(json!({"metadata": {"name": "b"}, "spec": spec})).unwrap();
            let mut causes = Vec::new();
            validate_binding(&obj, &mut causes);
            let got: Vec<String> = causes
                .iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect();
            assert!(
                got.iter().any(|c| c.starts_with(want)),
                "want {want}, got {got:?}"
            );
        }
    }

    fn verdict(spec: Value, object: Value, params: Option<Value>) -> Verdict {
        let p = read_policy(&policy(spec));
        let null = Value::Null;
        evaluate(
            &p,
            &Input {
                object: &object,
                old_object: &null,
                request: &json!({"operation": "CREATE"}),
                namespace_object: &null,
                params: params.as_ref(),
                authorizer: None,
            },
        )
    }

    #[test]
    fn validations_fail_with_kubernetes_messages() {
        let spec = json!({"matchConstraints": rules(),
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "variables": [{"name": "limit", "expression": "int(params.data.max)"}],
            "validations": [
                {"expression": "object.spec.replicas <= variables.limit",
                 "messageExpression": "'replicas must be at most ' + string(variables.limit)",
                 "reason": "Forbidden"},
                {"expression": "object.metadata.name.startsWith('web')"},
                {"expression": "object.metadata.name.startsWith('x')", "message": "  named x  "},
                {"expression": "object.spec.nope == 1"},
            ],
            "auditAnnotations": [{"key": "replicas", "valueExpression": "string(object.spec.replicas)"}]});
        let v = verdict(
            spec,
            json!({"metadata": {"name": "api"}, "spec": {"replicas": 9}}),
            Some(json!({"data": {"max": "5"}})),
        );
        let messages: Vec<(&str, Reason, usize)> = v
            .failures
            .iter()
            .map(|f| (f.message.as_str(), f.reason, f.index))
            .collect();
        assert_eq!(
            messages,
            vec![
                ("replicas must be at most 5", Reason::Forbidden, 0),
                (
                    "failed expression: object.metadata.name.startsWith('web')",
                    Reason::Invalid,
                    1
                ),
                ("named x", Reason::Invalid, 2),
                (
                    "expression 'object.spec.nope == 1' resulted in error: no such key: nope",
                    Reason::Invalid,
                    3
                ),
            ]
        );
        assert_eq!(
            v.audit_annotations,
            vec![("p.example.com/replicas".to_string(), "9".to_string())]
        );
    }

    #[test]
    fn match_conditions_and_failure_policy_decide_what_an_error_does() {
        let spec = |failure: &str, condition: &str| {
            json!({"matchConstraints": rules(), "failurePolicy": failure,
                "matchConditions": [{"name": "c", "expression": condition}],
                "validations": [{"expression": "object.spec.x == 1"}]})
        };
        let obj = json!({"metadata": {"name": "a"}, "spec": {}});
        // A false condition: not evaluated at all.
        assert!(
            verdict(spec("Fail", "false"), obj.clone(), None)
                .failures
                .is_empty()
        );
        // An error in a condition: a failure when Fail, nothing when Ignore.
        let v = verdict(spec("Fail", "object.nope"), obj.clone(), None);
        assert_eq!(
            v.failures[0].message,
            "expression 'object.nope' resulted in error: no such key: nope"
        );
        assert!(
            verdict(spec("Ignore", "object.nope"), obj.clone(), None)
                .failures
                .is_empty()
        );
        // An error in a validation likewise.
        assert_eq!(
            verdict(spec("Fail", "true"), obj.clone(), None)
                .failures
                .len(),
            1
        );
        assert!(
            verdict(spec("Ignore", "true"), obj, None)
                .failures
                .is_empty()
        );
    }
}
