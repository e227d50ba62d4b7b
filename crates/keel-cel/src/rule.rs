//! A CRD's validation rule (`x-kubernetes-validations[i]`): compiled when the CRD is written,
//! judged on every write of an object, as Kubernetes' apiextensions server does.

use keel_api::FieldCause;
use serde_json::Value;

use crate::cost::{
    Actual, PER_CALL_LIMIT, PER_CRD_LIMIT, PER_EXPRESSION_LIMIT, RUNTIME_BUDGET, RuntimeCost,
};
use crate::env::{Binding, Compiled, compile_declared, compile_typed};
use crate::types::{MAX_REQUEST_SIZE, Type, schema_decl_type};

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
    /// What an evaluation of `rule` is charged.
    cost: RuntimeCost,
    pub message: String,
    /// `messageExpression`, as written, and compiled with what an evaluation is charged.
    message_expression: Option<(String, Compiled, RuntimeCost)>,
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
    pub kind: RuleErrorKind,
    pub value: String,
    pub message: String,
}

/// The kind of field error a [`RuleError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleErrorKind {
    /// `Required value` (the message says no more).
    Required,
    /// `Invalid value: <value>: <message>`.
    Invalid,
    /// `Forbidden: <message>` (a cost over a limit).
    Forbidden,
}

impl RuleError {
    fn invalid(field: &'static str, value: &str, message: String) -> RuleError {
        RuleError {
            field,
            kind: RuleErrorKind::Invalid,
            value: value.to_string(),
            message,
        }
    }
}

/// Where a schema node with rules sits in its CRD's schema (Kubernetes' `CELSchemaContext`):
/// whether it is the resource root, and how many times it can occur in one object, the product
/// of the `maxItems` and `maxProperties` above it (unbounded when a list or map above has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleScope {
    cardinality: Option<u64>,
    root: bool,
}

impl RuleScope {
    /// The root of a custom resource's schema.
    pub fn root() -> RuleScope {
        RuleScope {
            cardinality: Some(1),
            root: true,
        }
    }

    /// The scope of a child (a property, `items` or `additionalProperties`) of the node whose
    /// schema is `parent`, in this scope.
    pub fn child(&self, parent: &Value) -> RuleScope {
        let max = |key: &str| {
            parent
                .get(key)
                .and_then(Value::as_i64)
                .map(|v| v.max(0) as u64)
        };
        let factor = match parent.get("type").and_then(Value::as_str) {
            Some("object") if parent.get("additionalProperties").is_some() => max("maxProperties"),
            Some("array") => max("maxItems"),
            _ => Some(1),
        };
        RuleScope {
            cardinality: self
                .cardinality
                .zip(factor)
                .map(|(c, f)| c.saturating_mul(f)),
            root: false,
        }
    }
}

/// The estimated costs of a CRD schema's rules, summed to hold them to the limit of the whole
/// schema (Kubernetes' `TotalCost`).
#[derive(Debug, Clone, Default)]
pub struct CostTotal {
    total: u64,
    /// The (at most four) most expensive expressions costing at least 1% of the limit.
    most_expensive: Vec<(String, u64)>,
}

impl CostTotal {
    fn observe(&mut self, field: String, cost: u64) {
        self.total = self.total.saturating_add(cost);
        if cost < PER_CRD_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((field, cost));
        self.most_expensive.sort_by_key(|e| std::cmp::Reverse(e.1));
        self.most_expensive.truncate(4);
    }

    /// When the total is over the schema's limit, the `Forbidden` errors Kubernetes gives, as
    /// (field, message): one per most expensive rule, then one on `schema_field`
    /// (`spec.versions[0].schema.openAPIV3Schema`).
    pub fn errors(&self, schema_field: &str) -> Vec<(String, String)> {
        if self.total <= PER_CRD_LIMIT {
            return Vec::new();
        }
        let mut out: Vec<(String, String)> = self
            .most_expensive
            .iter()
            .map(|(field, _)| {
                (
                    field.clone(),
                    "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema".to_string(),
                )
            })
            .collect();
        out.push((
            schema_field.to_string(),
            cost_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                self.total,
                PER_CRD_LIMIT,
            ),
        ));
        out
    }
}

/// Kubernetes' `getCostErrorMessage`.
fn cost_message(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// How a rule is compiled: with no schema (every variable dyn), or typed by its node's schema
/// and held to the cost limits.
struct Typing<'a> {
    schema: &'a Value,
    scope: RuleScope,
    total: &'a mut CostTotal,
    /// The path of the rule's entry, `…x-kubernetes-validations[i]`.
    at: &'a str,
}

/// A rule that failed on an object: where, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The node's path, plus the rule's `fieldPath`.
    pub field: String,
    pub reason: Reason,
    pub message: String,
    /// It ends the object's validation: no further rule is judged (the cost budget ran out,
    /// or one evaluation would cost more than the per-call limit).
    pub stops: bool,
}

impl Rule {
    /// Compiles one `x-kubernetes-validations` entry, with no schema: `self` and `oldSelf` are
    /// dyn, and no cost is estimated.
    pub fn new(entry: &Value) -> Result<Rule, Vec<RuleError>> {
        Rule::build(entry, None)
    }

    /// Compiles one `x-kubernetes-validations` entry of the node whose schema is `schema`, as
    /// Kubernetes does when a CRD is written: `self` and `oldSelf` typed by the schema (an
    /// undefined field, a call no overload takes, a result that is not a bool are refused), and
    /// the estimated cost of the rule and of its `messageExpression`, times the node's
    /// cardinality, held to the per-expression limit and added to `total`. `at` is the entry's
    /// path (`…x-kubernetes-validations[0]`), which `total` names the costliest rules by.
    pub fn compile(
        entry: &Value,
        schema: &Value,
        scope: RuleScope,
        total: &mut CostTotal,
        at: &str,
    ) -> Result<Rule, Vec<RuleError>> {
        Rule::build(
            entry,
            Some(Typing {
                schema,
                scope,
                total,
                at,
            }),
        )
    }

    fn build(entry: &Value, mut typing: Option<Typing<'_>>) -> Result<Rule, Vec<RuleError>> {
        let mut errors = Vec::new();
        let text = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or_default();
        let rule = text("rule");
        let optional_old_self = entry.get("optionalOldSelf") == Some(&Value::Bool(true));
        let compiled = if rule.trim().is_empty() {
            errors.push(RuleError {
                field: "rule",
                kind: RuleErrorKind::Required,
                value: String::new(),
                message: "Required value".into(),
            });
            None
        } else {
            match compile_expression(rule, optional_old_self, typing.as_mut(), "rule") {
                Ok((c, t, cost)) if t.has_unknown() || matches!(t, Type::Bool) => Some((c, cost)),
                Ok(_) => {
                    errors.push(RuleError::invalid(
                        "rule",
                        rule,
                        "cel expression must evaluate to a bool".into(),
                    ));
                    None
                }
                Err(e) => {
                    errors.extend(e.cost);
                    if let Some(message) = e.compile {
                        errors.push(RuleError::invalid(
                            "rule",
                            rule,
                            format!("compilation failed: {message}"),
                        ));
                    }
                    None
                }
            }
        };
        let message_expression = match text("messageExpression") {
            "" => None,
            source => match compile_expression(
                source,
                optional_old_self,
                typing.as_mut(),
                "messageExpression",
            ) {
                Ok((c, t, cost)) if t.has_unknown() || matches!(t, Type::String) => {
                    Some((source.to_string(), c, cost))
                }
                Ok(_) => {
                    errors.push(RuleError::invalid(
                        "messageExpression",
                        source,
                        "messageExpression must evaluate to a string".into(),
                    ));
                    None
                }
                Err(e) => {
                    errors.extend(e.cost);
                    if let Some(message) = e.compile {
                        errors.push(RuleError::invalid(
                            "messageExpression",
                            source,
                            format!("messageExpression compilation failed: {message}"),
                        ));
                    }
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
                    kind: RuleErrorKind::Invalid,
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
                kind: RuleErrorKind::Invalid,
                value: field_path.clone(),
                message: "must be a valid relative JSON path, e.g. .spec.field or .spec['field']"
                    .into(),
            });
        }
        match compiled {
            Some((compiled, cost)) if errors.is_empty() => {
                if optional_old_self && !compiled.uses_old_self {
                    return Err(vec![RuleError {
                        field: "optionalOldSelf",
                        kind: RuleErrorKind::Invalid,
                        value: "true".into(),
                        message: "may not be set if oldSelf is not used in rule".into(),
                    }]);
                }
                Ok(Rule {
                    rule: rule.to_string(),
                    compiled,
                    cost,
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
    /// value at the same place, charging `budget` for what it evaluates. `None`: it holds, or
    /// does not apply (a transition rule on a create, or on a value that has no old one).
    ///
    /// A violation that [`Violation::stops`] (the budget ran out, or one evaluation would cost
    /// more than Kubernetes' per-call limit) ends the object's validation: the budget says so
    /// from then on ([`CostBudget::stopped`]).
    pub fn check(
        &self,
        path: &str,
        type_name: &str,
        value: &Value,
        old: Option<&Value>,
        budget: &mut CostBudget,
    ) -> Option<Violation> {
        let mut vars: Vec<(&str, Binding<'_>)> = vec![("self", Binding::Lazy(value))];
        if self.is_transition() {
            // With `optionalOldSelf`, `oldSelf` is an optional: none on a create.
            match (old, self.optional_old_self) {
                (old, true) => vars.push(("oldSelf", Binding::Optional(old))),
                (Some(old), false) => vars.push(("oldSelf", Binding::Lazy(old))),
                (None, false) => return None,
            }
        }
        let sizes = Actual {
            self_value: value,
            old_self: old,
        };
        let cost = self
            .cost
            .of(self.compiled.expression(), sizes, budget.actual_sizes);
        // Kubernetes reports what stops the rules at the node, without the rule's `fieldPath`.
        let stop = |detail: String| Violation {
            field: field_name(path, ""),
            reason: Reason::Invalid,
            message: format!("Invalid value: {type_name:?}: {detail}"),
            stops: true,
        };
        match budget.charge(cost) {
            Charge::Within => {}
            Charge::OutOfBudget => {
                return Some(stop(format!("validation failed due to {OUT_OF_BUDGET}")));
            }
            Charge::OverCallLimit => {
                return Some(stop(format!(
                    "'{CALL_LIMIT_EXCEEDED}': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                    self.error_string()
                )));
            }
        }
        let field = field_name(path, &self.field_path);
        match self.compiled.evaluate_bool(&vars) {
            Ok(true) => None,
            Ok(false) => Some(self.failure(field, &vars, sizes, type_name, budget)),
            Err(e) => {
                let r = self.error_string();
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
                    stops: false,
                })
            }
        }
    }

    /// Kubernetes' `ruleErrorString`: the message, else the rule.
    fn error_string(&self) -> &str {
        if self.message.trim().is_empty() {
            self.rule.trim()
        } else {
            self.message.trim()
        }
    }

    /// The violation of a rule that evaluated to false, at `field`. Its message is
    /// `messageExpression`'s, when it evaluates to a non-empty string; else `message`; else
    /// `failed rule: <rule>`. Evaluating `messageExpression` is charged to `budget` too, and
    /// when it does not fit, that is the violation, and it stops the validation.
    fn failure(
        &self,
        field: String,
        vars: &[(&str, Binding<'_>)],
        sizes: Actual<'_>,
        type_name: &str,
        budget: &mut CostBudget,
    ) -> Violation {
        let mut evaluated = None;
        if let Some((source, expression, cost)) = &self.message_expression {
            let stop = |detail: String| Violation {
                field: field.clone(),
                reason: Reason::Invalid,
                message: format!("Invalid value: {type_name:?}: {detail}"),
                stops: true,
            };
            let cost = cost.of(expression.expression(), sizes, budget.actual_sizes);
            match budget.charge(cost) {
                Charge::Within => {}
                Charge::OutOfBudget => {
                    return stop(format!(
                        "messageExpression evaluation failed due to {OUT_OF_BUDGET}"
                    ));
                }
                Charge::OverCallLimit => {
                    return stop(format!(
                        "no further validation rules will be run due to call cost exceeds limit for messageExpression: {source:?}"
                    ));
                }
            }
            // Kubernetes falls back to `message` when the expression fails, is not a string,
            // is blank, longer than 5120 bytes, or spans lines.
            evaluated = match expression.evaluate(vars) {
                Ok(cel::Value::String(s))
                    if !s.trim().is_empty() && s.len() <= 5120 && !s.contains('\n') =>
                {
                    Some(s.trim().to_string())
                }
                _ => None,
            };
        }
        let detail = evaluated.unwrap_or_else(|| {
            if self.message.trim().is_empty() {
                format!("failed rule: {}", self.rule.trim())
            } else {
                self.message.trim().to_string()
            }
        });
        let message = match self.reason {
            Reason::Invalid => format!("Invalid value: {type_name:?}: {detail}"),
            Reason::Forbidden => format!("Forbidden: {detail}"),
            Reason::Required => format!("Required value: {detail}"),
            Reason::Duplicate => format!("Duplicate value: {type_name:?}"),
        };
        Violation {
            field,
            reason: self.reason,
            message,
            stops: false,
        }
    }
}

/// A node's `path` (`.spec.x`) and a rule's `fieldPath` as Kubernetes prints the field: a
/// root rule's is the empty path, `<nil>`.
fn field_name(path: &str, field_path: &str) -> String {
    let field = format!("{path}{field_path}");
    match field.trim_start_matches('.') {
        "" => "<nil>".to_string(),
        f => f.to_string(),
    }
}

/// cel-go's error when an evaluation goes over its cost limit.
const CALL_LIMIT_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";
const OUT_OF_BUDGET: &str = "running out of cost budget, no further validation rules will be run";

/// The runtime cost budget of one object validation (a create, an update, a status update each
/// have their own): Kubernetes' `RuntimeCELCostBudget`, 10,000,000, which every evaluation of
/// a rule or a `messageExpression` is charged against, each evaluation also held to the
/// per-call limit, 1,000,000 (docs/cel.md §4.5).
///
/// An evaluation is charged an estimate of what cel-go would count (`cost.rs`): its static
/// estimate when that is within the per-call limit (no work at all), else its estimate with
/// the sizes of the values it runs on. Static estimates can add up to more than the budget on
/// an object whose actual sizes are far below the schema's bounds (Gateway API's HTTPRoute
/// totals 11M at its bounds), so when a budget charged them runs out,
/// [`CostBudget::judge_again`] says so, and the object is to be judged again with a budget
/// [`CostBudget::with_actual_sizes`], which charges every evaluation its estimate with the
/// actual sizes: only that budget running out is the error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostBudget {
    remaining: u64,
    stopped: bool,
    /// Every evaluation estimated with actual sizes, static estimates never used alone.
    actual_sizes: bool,
    /// It ran out having charged static estimates: the verdict is not to be kept.
    judge_again: bool,
    limit: u64,
}

/// What charging an evaluation's cost came to.
enum Charge {
    Within,
    /// It would cost more than what remains: not evaluated.
    OutOfBudget,
    /// It would cost more than the per-call limit: not evaluated.
    OverCallLimit,
}

impl Default for CostBudget {
    fn default() -> CostBudget {
        CostBudget::new(RUNTIME_BUDGET)
    }
}

impl CostBudget {
    /// A budget of `limit` (Kubernetes': [`CostBudget::default`]).
    pub fn new(limit: u64) -> CostBudget {
        CostBudget {
            remaining: limit,
            stopped: false,
            actual_sizes: false,
            judge_again: false,
            limit,
        }
    }

    /// A fresh budget of the same limit that charges every evaluation its estimate with the
    /// sizes of the values it runs on.
    pub fn with_actual_sizes(&self) -> CostBudget {
        CostBudget {
            actual_sizes: true,
            ..CostBudget::new(self.limit)
        }
    }

    /// Whether this budget ran out having charged static estimates, which may be far above
    /// what the evaluations cost: the violations found with it are not to be kept, and the
    /// object is to be judged again with [`CostBudget::with_actual_sizes`].
    pub fn judge_again(&self) -> bool {
        self.judge_again
    }

    /// What remains to be spent.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Whether a violation stopped the validation: no further rule is to be judged.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Kubernetes' check before the rules of a node (at `path`, of schema type `type_name`)
    /// are judged: with nothing left, the violation that stops the validation.
    pub fn before_rules(&mut self, path: &str, type_name: &str) -> Option<Violation> {
        if self.remaining > 0 {
            return None;
        }
        self.stopped = true;
        self.judge_again = !self.actual_sizes;
        Some(Violation {
            field: field_name(path, ""),
            reason: Reason::Invalid,
            message: format!(
                "Invalid value: {type_name:?}: validation failed due to {OUT_OF_BUDGET}"
            ),
            stops: true,
        })
    }

    /// Charges one evaluation estimated at `cost`. cel-go stops an evaluation as soon as it
    /// has spent more than the per-call limit, and then charges what it spent, so an
    /// evaluation over that limit takes the limit (plus one) from the budget: with less than
    /// that left, the budget has run out first.
    fn charge(&mut self, cost: u64) -> Charge {
        let charged = cost.min(PER_CALL_LIMIT + 1);
        if charged > self.remaining {
            self.stopped = true;
            // What was charged before may have been static estimates.
            self.judge_again = !self.actual_sizes;
            Charge::OutOfBudget
        } else if cost > PER_CALL_LIMIT {
            self.stopped = true;
            Charge::OverCallLimit
        } else {
            self.remaining -= charged;
            Charge::Within
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

/// Why an expression of a rule is refused: its cost, and why it does not compile.
struct ExpressionError {
    cost: Vec<RuleError>,
    compile: Option<String>,
}

/// Compiles one expression of a rule (`field`: `rule` or `messageExpression`), typed and held
/// to the cost limit when `typing` says how; returns it with its result type.
fn compile_expression(
    source: &str,
    optional_old_self: bool,
    typing: Option<&mut Typing<'_>>,
    field: &'static str,
) -> Result<(Compiled, Type, RuntimeCost), ExpressionError> {
    let Some(typing) = typing else {
        return compile_declared(source, VARIABLES)
            .map(|c| (c, Type::Unknown, RuntimeCost::Unknown))
            .map_err(|e| ExpressionError {
                cost: Vec::new(),
                compile: Some(e.0),
            });
    };
    let embedded = typing.schema.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true));
    let decl = schema_decl_type(typing.schema, typing.scope.root || embedded, "selfType", 0);
    // A node CEL cannot see (no type) is checked untyped: Kubernetes refuses it with an internal
    // error, keel does not refuse what it cannot type.
    let self_type = decl.as_ref().map_or(Type::Unknown, |d| d.cel_type());
    let old_self_type = if optional_old_self {
        Type::optional(self_type.clone())
    } else {
        self_type.clone()
    };
    let vars = [("self", self_type), ("oldSelf", old_self_type)];
    let typed = compile_typed(source, &vars, decl.as_ref()).map_err(|e| ExpressionError {
        cost: Vec::new(),
        compile: Some(e.0),
    })?;
    let cardinality = typing.scope.cardinality.unwrap_or_else(|| {
        // Under an unbounded list or map: as many as fit in a request.
        let min_size = decl.as_ref().map_or(1, |d| d.min_size);
        (MAX_REQUEST_SIZE / (min_size.saturating_add(1)).max(1)) as u64
    });
    let cost = if typed.cost == 0 {
        0
    } else {
        typed.cost.saturating_mul(cardinality)
    };
    typing.total.observe(format!("{}.{field}", typing.at), cost);
    if cost > PER_EXPRESSION_LIMIT {
        let what = match field {
            "rule" => "estimated rule cost",
            _ => "estimated messageExpression cost",
        };
        return Err(ExpressionError {
            cost: vec![RuleError {
                field,
                kind: RuleErrorKind::Forbidden,
                value: String::new(),
                message: cost_message(what, cost, PER_EXPRESSION_LIMIT),
            }],
            compile: None,
        });
    }
    Ok((typed.compiled, typed.result, typed.runtime_cost))
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
            &mut CostBudget::default(),
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
                None,
                &mut CostBudget::default()
            )
            .is_none()
        );
    }

    #[test]
    fn message_expression_then_message_then_the_rule() {
        let r = rule(
            json!({"rule": "self.x < 3", "messageExpression": "'x is ' + string(self.x)", "message": "too big"}),
        );
        let v = r.check(
            ".spec",
            "object",
            &json!({"x": 5}),
            None,
            &mut CostBudget::default(),
        );
        assert_eq!(
            v.map(|v| v.message).unwrap_or_default(),
            "Invalid value: \"object\": x is 5"
        );
        let r = rule(json!({"rule": "self.x < 3", "messageExpression": "self.nothing"}));
        let v = r.check(
            ".spec",
            "object",
            &json!({"x": 5}),
            None,
            &mut CostBudget::default(),
        );
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
            r.check(
                ".spec",
                "object",
                &json!({"name": "a"}),
                None,
                &mut CostBudget::default()
            )
            .is_none()
        );
        let v = r.check(
            ".spec",
            "object",
            &json!({"name": "a"}),
            Some(&json!({"name": "b"})),
            &mut CostBudget::default(),
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
                .check(
                    ".spec.x",
                    "string",
                    &json!("a"),
                    None,
                    &mut CostBudget::default()
                )
                .is_none()
        );
        assert!(
            optional
                .check(
                    ".spec.x",
                    "string",
                    &json!("a"),
                    Some(&json!("a")),
                    &mut CostBudget::default()
                )
                .is_none()
        );
        assert!(
            optional
                .check(
                    ".spec.x",
                    "string",
                    &json!("b"),
                    Some(&json!("a")),
                    &mut CostBudget::default()
                )
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
        let v = r.check(
            ".spec",
            "object",
            &json!({}),
            None,
            &mut CostBudget::default(),
        );
        assert_eq!(
            v.map(|v| (v.field, v.message)),
            Some((
                "spec".to_string(),
                "Invalid value: \"object\": no such key: missing evaluating rule: self.missing == 1".to_string()
            ))
        );
        let r = rule(json!({"rule": "self.x + 'a' == 'b'", "message": "x plus a"}));
        let v = r.check(
            ".spec",
            "object",
            &json!({"x": 1}),
            None,
            &mut CostBudget::default(),
        );
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
            r.check("", "object", &json!({}), None, &mut CostBudget::default())
                .map(|v| v.field),
            Some("<nil>".to_string())
        );
    }

    fn typed_schema() -> Value {
        json!({"type": "object", "properties": {
            "name": {"type": "string"}, "n": {"type": "integer"},
            "list": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 10}},
            "ios": {"x-kubernetes-int-or-string": true},
            "m": {"type": "object", "additionalProperties": {"type": "string"}},
            "namespace": {"type": "string"}, "x-y": {"type": "string"},
            "anything": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "untyped": {"x-kubernetes-preserve-unknown-fields": true}}})
    }

    fn typed(rule: &str) -> Result<Rule, Vec<RuleError>> {
        let mut total = CostTotal::default();
        let entry = json!({"rule": rule});
        Rule::compile(
            &entry,
            &typed_schema(),
            RuleScope::root(),
            &mut total,
            "x[0]",
        )
    }

    #[test]
    fn rules_typed_by_the_schema_compile_as_kubernetes_compiles_them() {
        let ok = [
            "self.name == 'a' && self.n > 1 && self.n > 1.5",
            "self.namespace == 'a' && self.__namespace__ == 'a' && self.x__dash__y == 'b'",
            "self.m.all(k, k.startsWith('a')) && self.m.x == 'a' && self.m.exists(k, self.m[k] == 'a')",
            "type(self.ios) == string ? self.ios.matches('%$') : self.ios < 5",
            "self.metadata.name.startsWith('a') && self.kind == 'K' && has(self.apiVersion)",
            "self.list.exists_one(x, x == 'a') || self.list.filter(x, x != '').size() > 0",
            "optional.of(self.name).orValue('') == '' && self.?name.hasValue()",
            "self.name.split('/').size() <= 2 && self.name.substring(1) != '' && isIP(self.name)",
            "quantity(self.name).isLessThan(quantity('1Gi')) && sets.contains(self.list, ['a'])",
            "self == oldSelf",
        ];
        for rule in ok {
            assert!(typed(rule).is_ok(), "{rule}: {:?}", typed(rule).err());
        }
    }

    #[test]
    fn rules_that_do_not_type_check_are_refused_in_cel_go_words() {
        let table = [
            (
                "self.nosuchfield == 1",
                "compilation failed: ERROR: <input>:1:5: undefined field 'nosuchfield'\n | self.nosuchfield == 1\n | ....^",
            ),
            (
                "self.name + 1 == 'a'",
                "compilation failed: ERROR: <input>:1:11: found no matching overload for '_+_' applied to '(string, int)'\n | self.name + 1 == 'a'\n | ..........^",
            ),
            (
                "self.name.contains(1)",
                "compilation failed: ERROR: <input>:1:19: found no matching overload for 'contains' applied to 'string.(int)'\n | self.name.contains(1)\n | ..................^",
            ),
            ("self.n", "cel expression must evaluate to a bool"),
            ("self.ios", "cel expression must evaluate to a bool"),
            (
                "self.n == 1.0",
                "compilation failed: ERROR: <input>:1:8: found no matching overload for '_==_' applied to '(int, double)'\n | self.n == 1.0\n | .......^",
            ),
            (
                "self.name.reverse() == ''",
                "compilation failed: ERROR: <input>:1:18: undeclared reference to 'reverse' (in container '')\n | self.name.reverse() == ''\n | .................^",
            ),
            (
                "[1, 'a'].size() == 2",
                "compilation failed: ERROR: <input>:1:5: expected type 'int' but found 'string'\n | [1, 'a'].size() == 2\n | ....^",
            ),
            (
                "self.name.nope == 1",
                "compilation failed: ERROR: <input>:1:10: type 'string' does not support field selection\n | self.name.nope == 1\n | .........^",
            ),
            (
                "self.metadata.namespace == 'a'",
                "compilation failed: ERROR: <input>:1:14: undefined field 'namespace'\n | self.metadata.namespace == 'a'\n | .............^",
            ),
            (
                "has(self.untyped)",
                "compilation failed: ERROR: <input>:1:4: undefined field 'untyped'\n | has(self.untyped)\n | ...^",
            ),
            (
                "self.anything.x == 1",
                "compilation failed: ERROR: <input>:1:14: undefined field 'x'\n | self.anything.x == 1\n | .............^",
            ),
        ];
        for (rule, want) in table {
            let errors = typed(rule).err().unwrap_or_default();
            assert_eq!(
                errors,
                vec![RuleError::invalid("rule", rule, want.to_string())],
                "{rule}"
            );
        }
    }

    #[test]
    fn a_rule_over_the_cost_limit_is_forbidden_and_counts_toward_the_total() {
        let schema = |max: Option<i64>| {
            let mut list = json!({"type": "array", "items": {"type": "string"}});
            if let Some(max) = max {
                list["maxItems"] = json!(max);
                list["items"]["maxLength"] = json!(max);
            }
            list
        };
        let entry = json!({"rule": "self.all(x, self.all(y, x == y))"});
        let mut total = CostTotal::default();
        let errors = Rule::compile(&entry, &schema(None), RuleScope::root(), &mut total, "p[0]")
            .err()
            .unwrap_or_default();
        assert_eq!(
            errors,
            vec![RuleError {
                field: "rule",
                kind: RuleErrorKind::Forbidden,
                value: String::new(),
                message: "estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)".into(),
            }]
        );
        let errors = total.errors("s");
        assert_eq!(
            errors.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(),
            ["p[0].rule", "s"]
        );
        assert!(errors[1].1.starts_with("x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x"));
        let mut total = CostTotal::default();
        let bounded = Rule::compile(
            &entry,
            &schema(Some(10)),
            RuleScope::root(),
            &mut total,
            "p[0]",
        );
        assert!(bounded.is_ok());
        assert!(total.errors("s").is_empty());
    }

    #[test]
    fn cardinality_multiplies_by_the_bounds_above_the_node() {
        let root = RuleScope::root();
        let list = json!({"type": "array", "maxItems": 5});
        let map = json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(root.child(&list).child(&list).cardinality, Some(25));
        assert_eq!(root.child(&list).child(&map).cardinality, None);
        assert_eq!(root.child(&json!({"type": "object"})).cardinality, Some(1));
        assert_eq!(
            cost_message("estimated rule cost", 10_485_760, 10_000_000),
            "estimated rule cost exceeds budget by factor of 1.048576x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
        );
        assert!(cost_message("c", 25_000_000, 10_000_000).contains("factor of 2.5x"));
    }
}
