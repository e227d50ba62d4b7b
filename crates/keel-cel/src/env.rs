//! The CEL environment: the standard library with the extensions Kubernetes enables (strings,
//! lists, math, encoders), optional types, and expressions compiled once and evaluated on
//! JSON values.

use std::sync::{Arc, OnceLock};

use cel::{Context, Env, Value};

use crate::types::{DeclType, Type};

/// The environment every expression is compiled and evaluated in, made once.
fn environment() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // Kubernetes enables cel-go's strings extension (version 2), not its math, encoders or
        // lists extensions (docs/cel.md §1); the crate's strings extension also has
        // `reverse`, which Kubernetes' version lacks (refused once rules are type-checked).
        if let Err(e) = env.add_extension(cel::extensions::strings) {
            // A conflict is a programming error of this crate, not of any input: the
            // environment goes on without that extension, and says so.
            eprintln!("keel-cel: the strings extension does not register: {e}");
        }
        if let Err(e) = crate::format::register(&mut env) {
            eprintln!("keel-cel: the format library does not register: {e}");
        }
        if let Err(e) = crate::net::register(&mut env) {
            eprintln!("keel-cel: the IP, CIDR and URL libraries do not register: {e}");
        }
        if let Err(e) = crate::lists::register(&mut env) {
            eprintln!("keel-cel: the lists and sets libraries do not register: {e}");
        }
        if let Err(e) = crate::quantity::register(&mut env) {
            eprintln!("keel-cel: the quantity library does not register: {e}");
        }
        if let Err(e) = crate::authz::register(&mut env) {
            eprintln!("keel-cel: the authorizer library does not register: {e}");
        }
        if let Err(e) = crate::library::register(&mut env) {
            eprintln!("keel-cel: Kubernetes' libraries do not register: {e}");
        }
        Arc::new(env)
    })
}

/// An expression, compiled: its expression tree, without cel's record of where each node was
/// written (only a compile's errors need it, and a CRD keeps hundreds of compiled rules).
pub struct Compiled {
    expression: cel::common::ast::IdedExpr,
    /// The program as keel runs it, when it differs from the parsed one: `matches` calls
    /// compiled to keel's (its patterns cached), and in a rule on a schema, escaped property
    /// names (`__namespace__`, `a__dash__b`) read as the names they stand for.
    rewritten: Option<cel::common::ast::IdedExpr>,
    /// Whether it reads `oldSelf` (a transition rule).
    pub uses_old_self: bool,
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled")
            .field("uses_old_self", &self.uses_old_self)
            .finish()
    }
}

/// Why an expression does not compile, as cel-go words it (`ERROR: <input>:1:6: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError(pub String);

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why an evaluation failed (no such key, no such overload, a division by zero, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError {
    /// As cel-go words it where the two agree (`no such key: x`).
    pub message: String,
    /// No function or operator takes these arguments (Kubernetes words that apart).
    pub no_such_overload: bool,
}

impl EvalError {
    fn new(message: impl Into<String>) -> EvalError {
        EvalError {
            message: message.into(),
            no_such_overload: false,
        }
    }

    fn from_execution(e: cel::ExecutionError) -> EvalError {
        let no_such_overload = matches!(
            e,
            cel::ExecutionError::NoSuchOverload(_)
                | cel::ExecutionError::UnsupportedBinaryOperator(..)
        );
        let message = match e {
            cel::ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
            cel::ExecutionError::UnsupportedBinaryOperator(..) => "no such overload".to_string(),
            other => other.to_string(),
        };
        EvalError {
            message,
            no_such_overload,
        }
    }
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Compiles `source`, in which only the variables `declared` exist, typed dyn: it is
/// type-checked as cel-go checks it, so any other identifier is refused (`undeclared reference
/// to 'x' (in container '')`), and so is a call no overload takes, with cel-go's position and
/// snippet.
pub fn compile_declared(source: &str, declared: &[&str]) -> Result<Compiled, CompileError> {
    let vars: Vec<(&str, Type)> = declared.iter().map(|v| (*v, Type::Unknown)).collect();
    compile_typed(source, &vars, None).map(|t| t.compiled)
}

/// An expression compiled and type-checked against its variables' types.
pub(crate) struct Typed {
    pub compiled: Compiled,
    /// The type it evaluates to.
    pub result: Type,
    /// The most it is estimated to cost (cel-go's estimate, sizes from `root`).
    pub cost: u64,
    /// What an evaluation of it is charged.
    pub runtime_cost: crate::cost::RuntimeCost,
}

/// Compiles `source`, checks it with these variables, and estimates its cost with the sizes of
/// `root` (the schema node `self` is, if any).
pub(crate) fn compile_typed(
    source: &str,
    vars: &[(&str, Type)],
    root: Option<&Arc<DeclType>>,
) -> Result<Typed, CompileError> {
    let program = parse(source)?;
    let expr = program.expression();
    let checked =
        crate::check::check(expr, program.source_info(), source, vars).map_err(CompileError)?;
    let mut compiled = Compiled::of(&program);
    let result = checked.type_of(expr.id);
    let (cost, runtime_cost) = crate::cost::RuntimeCost::new(checked, root, expr);
    // Fields of a schema are selected by their escaped names (Kubernetes' `Escape`); the
    // objects hold them by their own.
    if root.is_some() {
        let mut unescaped = compiled.rewritten.clone().unwrap_or_else(|| expr.clone());
        if rewrite(&mut unescaped, true) {
            compiled.rewritten = Some(unescaped);
        }
    }
    Ok(Typed {
        compiled,
        result,
        cost,
        runtime_cost,
    })
}

/// cel-go's error display: `ERROR: <input>:L:C: <message>`, then the line and a caret under
/// the column (a wide dot and caret for a multi-byte character, as cel-go draws them).
pub(crate) fn located(source: &str, offset: usize, message: &str) -> String {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let prefix = &before[line_start..];
    let column = prefix.chars().count() + 1;
    let text = source[line_start..].lines().next().unwrap_or_default();
    let dots: String = prefix
        .chars()
        .map(|c| if c.len_utf8() > 1 { '\u{FF0E}' } else { '.' })
        .collect();
    let caret = match source[offset..].chars().next() {
        Some(c) if c.len_utf8() > 1 => '\u{FF3E}',
        _ => '^',
    };
    format!("ERROR: <input>:{line}:{column}: {message}\n | {text}\n | {dots}{caret}")
}

/// Compiles `source`.
pub fn compile(source: &str) -> Result<Compiled, CompileError> {
    parse(source).map(|program| Compiled::of(&program))
}

/// Parses `source`, its macros expanded.
fn parse(source: &str) -> Result<cel::Program, CompileError> {
    environment()
        .compile(source)
        .map_err(|e| CompileError(e.to_string()))
}

impl Compiled {
    /// What of `program` is kept.
    fn of(program: &cel::Program) -> Compiled {
        let expression = program.expression().clone();
        let mut rewritten = expression.clone();
        let rewritten = rewrite(&mut rewritten, false).then_some(rewritten);
        Compiled {
            uses_old_self: program.references().has_variable("oldSelf"),
            expression,
            rewritten,
        }
    }
}

/// A property name as Kubernetes' `Unescape` reads an escaped one (`__namespace__` →
/// `namespace`, `a__dot__b` → `a.b`, `__dash__`, `__slash__`, `__underscores__`); `None`
/// when it has nothing escaped.
pub(crate) fn unescape(name: &str) -> Option<String> {
    if let Some(inner) = name.strip_prefix("__").and_then(|n| n.strip_suffix("__"))
        && crate::types::RESERVED.contains(&inner)
    {
        return Some(inner.to_string());
    }
    if !name.contains("__") {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    let mut changed = false;
    'scan: while !rest.is_empty() {
        for (escaped, plain) in [
            ("__underscores__", "__"),
            ("__dot__", "."),
            ("__dash__", "-"),
            ("__slash__", "/"),
        ] {
            if let Some(r) = rest.strip_prefix(escaped) {
                out.push_str(plain);
                rest = r;
                changed = true;
                continue 'scan;
            }
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    changed.then_some(out)
}

/// Rewrites `expr` as keel runs it: `matches` calls to keel's, and with `unescape`, every
/// field selection by an escaped name to the name it stands for; whether anything changed.
fn rewrite(expr: &mut cel::common::ast::IdedExpr, unescape_names: bool) -> bool {
    use cel::common::ast::{EntryExpr, Expr};
    let rewrite_child = |e: &mut cel::common::ast::IdedExpr| rewrite(e, unescape_names);
    match &mut expr.expr {
        Expr::Select(select) => {
            let mut changed = rewrite_child(&mut select.operand);
            if unescape_names && let Some(plain) = unescape(&select.field) {
                select.field = plain;
                changed = true;
            }
            changed
        }
        Expr::Call(call) => {
            let mut changed = false;
            if let Some(t) = call.target.as_deref_mut() {
                changed |= rewrite_child(t);
            }
            for a in &mut call.args {
                changed |= rewrite_child(a);
            }
            let arity = call.args.len() + usize::from(call.target.is_some());
            if call.func_name == "matches" && arity == 2 {
                call.func_name = crate::library::MATCHES.to_string();
                changed = true;
            }
            changed
        }
        Expr::List(list) => list
            .elements
            .iter_mut()
            .fold(false, |c, e| rewrite_child(e) | c),
        Expr::Map(map) => map.entries.iter_mut().fold(false, |c, e| {
            c | match &mut e.expr {
                EntryExpr::MapEntry(m) => rewrite_child(&mut m.key) | rewrite_child(&mut m.value),
                EntryExpr::StructField(f) => rewrite_child(&mut f.value),
            }
        }),
        Expr::Struct(st) => st.entries.iter_mut().fold(false, |c, e| {
            c | match &mut e.expr {
                EntryExpr::MapEntry(m) => rewrite_child(&mut m.value),
                EntryExpr::StructField(f) => rewrite_child(&mut f.value),
            }
        }),
        Expr::Comprehension(c) => [
            &mut c.iter_range,
            &mut c.accu_init,
            &mut c.loop_cond,
            &mut c.loop_step,
            &mut c.result,
        ]
        .into_iter()
        .fold(false, |changed, e| rewrite_child(e) | changed),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => false,
    }
}

/// What a variable is bound to.
#[derive(Debug, Clone, Copy)]
pub enum Binding<'a> {
    /// A JSON value (copied into CEL's values: what a result may hold).
    Json(&'a serde_json::Value),
    /// A JSON value read in place, its objects' fields converted only when selected (what
    /// rules on a schema read; such maps are never part of a result).
    Lazy(&'a serde_json::Value),
    /// An optional of one (`optionalOldSelf`'s `oldSelf`): `optional.of(v)` or
    /// `optional.none()`.
    Optional(Option<&'a serde_json::Value>),
    /// The `authorizer` of admission expressions.
    Authorizer(&'a crate::authz::Authorizer),
}

/// A JSON value as CEL holds it: integers as `int` (Kubernetes' `integer` is int64), other
/// numbers as `double`, an object's null fields left out.
pub(crate) fn cel_value(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(items) => {
            Value::List(Arc::new(items.iter().map(cel_value).collect()))
        }
        serde_json::Value::Object(map) => {
            // A field set to null is absent, as Kubernetes' objects hold it.
            let entries: std::collections::HashMap<String, Value> = map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), cel_value(v)))
                .collect();
            Value::from(entries)
        }
    }
}

fn to_val(value: &serde_json::Value) -> Result<Box<dyn cel::common::value::Val>, EvalError> {
    cel_value(value)
        .try_into()
        .map_err(|_| EvalError::new("a value CEL cannot hold"))
}

/// Variables bound once, for several expressions (a policy's validations share theirs).
pub struct Activation<'v>(Context<'v, 'v>);

impl<'v> Activation<'v> {
    pub fn new(vars: &[(&str, Binding<'v>)]) -> Result<Activation<'v>, EvalError> {
        let mut context = Context::with_env(environment().clone());
        for (name, binding) in vars {
            let val: Box<dyn cel::common::value::Val + 'v> = match binding {
                Binding::Json(v) => to_val(v)?,
                Binding::Lazy(v) => crate::json::val(v),
                Binding::Optional(Some(v)) => {
                    Box::new(cel::common::types::CelOptional::of(crate::json::val(v)))
                }
                Binding::Optional(None) => Box::new(cel::common::types::CelOptional::none()),
                Binding::Authorizer(a) => Box::new((*a).clone()),
            };
            context.add_variable_as_val(*name, val);
        }
        Ok(Activation(context))
    }

    /// Binds `name` to a value already evaluated (a policy's `variables`).
    pub fn bind(&mut self, name: &str, value: Value) -> Result<(), EvalError> {
        let val = value
            .try_into()
            .map_err(|_| EvalError::new("a value CEL cannot hold"))?;
        self.0.add_variable_as_val(name.to_string(), val);
        Ok(())
    }
}

impl Compiled {
    /// Evaluates with these variables.
    pub fn evaluate<'v>(&self, vars: &[(&str, Binding<'v>)]) -> Result<Value, EvalError> {
        self.evaluate_in(&Activation::new(vars)?)
    }

    /// The expression as checked (escaped property names as written).
    pub(crate) fn expression(&self) -> &cel::common::ast::IdedExpr {
        &self.expression
    }

    /// Evaluates with the variables of `activation`.
    pub fn evaluate_in(&self, activation: &Activation<'_>) -> Result<Value, EvalError> {
        match &self.rewritten {
            Some(expr) => Value::resolve(expr, &activation.0),
            None => Value::resolve(&self.expression, &activation.0),
        }
        .map_err(EvalError::from_execution)
    }

    /// Evaluates to a bool, or says what it evaluated to instead.
    pub fn evaluate_bool(&self, vars: &[(&str, Binding<'_>)]) -> Result<bool, EvalError> {
        match self.evaluate(vars)? {
            Value::Bool(b) => Ok(b),
            other => Err(EvalError::new(format!(
                "expected a bool, got {:?}",
                other.type_of()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_property_names_read_as_kubernetes_unescapes_them() {
        let table = [
            ("__namespace__", Some("namespace")),
            ("__in__", Some("in")),
            ("a__dot__b", Some("a.b")),
            ("x__dash__y__slash__z", Some("x-y/z")),
            ("__underscores__a", Some("__a")),
            ("plain", None),
            ("__notreserved__", None),
            ("a__b", None),
        ];
        for (name, want) in table {
            assert_eq!(unescape(name).as_deref(), want, "{name}");
        }
    }
    use serde_json::json;

    #[test]
    fn expressions_evaluate_on_json_with_kubernetes_extensions() {
        let obj = json!({"spec": {"replicas": 3, "name": "Web", "items": ["a", "bb"]}});
        let table: Vec<(&str, Result<bool, ()>)> = vec![
            ("self.spec.replicas > 0", Ok(true)),
            ("self.spec.replicas + 1 == 4", Ok(true)),
            ("type(self.spec.replicas) == int", Ok(true)),
            ("self.spec.name.lowerAscii() == 'web'", Ok(true)),
            ("self.spec.items.all(i, i.size() < 3)", Ok(true)),
            ("self.spec.name.matches('^W')", Ok(true)),
            ("has(self.spec.missing)", Ok(false)),
            ("self.spec.missing == 1", Err(())),
            ("self.spec.items.join(',') == 'a,bb'", Ok(true)),
            // Not Kubernetes' (math, encoders and lists extensions are off).
            ("math.greatest(1, 2) == 2", Err(())),
            ("base64.encode(b'a') == 'YQ=='", Err(())),
            ("'abc 123 x45'.find('[0-9]+') == '123'", Ok(true)),
            ("'abc'.find('[0-9]+') == ''", Ok(true)),
            ("'1 2 3'.findAll('[0-9]') == ['1', '2', '3']", Ok(true)),
            ("'1 2 3'.findAll('[0-9]', 2) == ['1', '2']", Ok(true)),
            ("isURL('https://example.com/x?y=1')", Ok(true)),
            ("isURL('/absolute/path')", Ok(true)),
            ("isURL('not a url')", Ok(false)),
            ("isIP('10.0.0.1') && isIP('::1')", Ok(true)),
            ("isIP('10.0.0.256')", Ok(false)),
            ("isCIDR('10.0.0.0/8') && isCIDR('fd00::/64')", Ok(true)),
            ("isCIDR('10.0.0.0/33')", Ok(false)),
            (
                "ip.isCanonical('2001:db8::1') && !ip.isCanonical('2001:DB8::1')",
                Ok(true),
            ),
            ("'x'.find('(')", Err(())),
            ("quantity('1Gi').isGreaterThan(quantity('1G'))", Ok(true)),
            ("quantity('500m').isLessThan(quantity('1'))", Ok(true)),
            (
                "quantity('1.5').add(quantity('500m')) == quantity('2')",
                Ok(true),
            ),
            ("quantity('2').sub(1).asInteger() == 1", Ok(true)),
            ("quantity('1Ki').compareTo(quantity('1024')) == 0", Ok(true)),
            ("quantity('1.5').isInteger()", Ok(false)),
            ("quantity('-3').sign() == -1", Ok(true)),
            ("isQuantity('1Gi') && !isQuantity('1 Gi')", Ok(true)),
            ("quantity('250m').asApproximateFloat() == 0.25", Ok(true)),
            ("quantity('1.5').asInteger() == 1", Err(())),
            ("quantity('nope') == quantity('1')", Err(())),
            ("[1, 2, 3].isSorted() && !['b', 'a'].isSorted()", Ok(true)),
            (
                "[1, 2, 3].sum() == 6 && [].sum() == 0 && [1.5, 2.5].sum() == 4.0",
                Ok(true),
            ),
            (
                "[3, 1, 2].min() == 1 && ['a', 'c', 'b'].max() == 'c'",
                Ok(true),
            ),
            ("[].min() == 1", Err(())),
            (
                "[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2 && [1].indexOf(5) == -1",
                Ok(true),
            ),
            (
                "sets.contains([1, 2, 3], [3, 1]) && !sets.contains([1], [2])",
                Ok(true),
            ),
            (
                "sets.equivalent([1, 2], [2, 1, 1]) && sets.intersects([1, 2], [2, 5])",
                Ok(true),
            ),
            ("self.spec.items.indexOf('bb') == 1", Ok(true)),
            (
                "ip('10.0.0.1').family() == 4 && ip('::1').isLoopback() && ip('fe80::1').isLinkLocalUnicast()",
                Ok(true),
            ),
            (
                "ip('8.8.8.8').isGlobalUnicast() && !ip('127.0.0.1').isGlobalUnicast() && ip('0.0.0.0').isUnspecified()",
                Ok(true),
            ),
            (
                "string(ip('2001:db8::1')) == '2001:db8::1' && ip('10.0.0.1') == ip('10.0.0.1')",
                Ok(true),
            ),
            ("ip('::ffff:10.0.0.1') == ip('10.0.0.1')", Err(())),
            (
                "cidr('10.0.0.0/8').containsIP('10.1.2.3') && !cidr('10.0.0.0/8').containsIP(ip('11.0.0.1'))",
                Ok(true),
            ),
            (
                "cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && !cidr('10.1.0.0/16').containsCIDR('10.0.0.0/8')",
                Ok(true),
            ),
            (
                "string(cidr('10.1.2.3/8').masked()) == '10.0.0.0/8' && cidr('fd00::/64').prefixLength() == 64",
                Ok(true),
            ),
            ("cidr('10.1.2.3/8').ip() == ip('10.1.2.3')", Ok(true)),
            (
                "url('https://example.com:8443/x?a=1&a=2').getHost() == 'example.com:8443'",
                Ok(true),
            ),
            (
                "url('https://[::1]:80/').getHostname() == '::1' && url('https://[::1]:80/').getPort() == '80'",
                Ok(true),
            ),
            (
                "url('https://example.com/p').getScheme() == 'https' && url('/a/b').getEscapedPath() == '/a/b'",
                Ok(true),
            ),
            (
                "url('https://e.com/?a=1&a=2&b=x').getQuery()['a'] == ['1', '2']",
                Ok(true),
            ),
            ("url('not a url') == url('/')", Err(())),
            (
                "!format.dns1123Label().validate('my-name').hasValue()",
                Ok(true),
            ),
            (
                "format.dns1123Label().validate('My_Name').value()[0].startsWith('a lowercase RFC 1123 label')",
                Ok(true),
            ),
            (
                "format.named('uuid').value().validate('not-a-uuid') == optional.of(['does not match the UUID format'])",
                Ok(true),
            ),
            ("!format.named('nope').hasValue()", Ok(true)),
            (
                "!format.dns1123LabelPrefix().validate('web-').hasValue() && format.dns1123Label().validate('web-').hasValue()",
                Ok(true),
            ),
            (
                "!format.date().validate('2026-11-29').hasValue() && format.datetime().validate('yesterday').hasValue()",
                Ok(true),
            ),
        ];
        for (source, want) in table {
            let compiled = compile(source).unwrap_or_else(|e| panic!("{source}: {e}"));
            let got = compiled
                .evaluate_bool(&[("self", Binding::Json(&obj))])
                .map_err(|_| ());
            assert_eq!(got, want, "{source}");
        }
    }

    #[test]
    fn a_syntax_error_is_worded_as_cel_go_words_it() {
        let e = compile("self.nosuchfield +++ 1")
            .err()
            .map(|e| e.0)
            .unwrap_or_default();
        assert!(e.starts_with("ERROR: <input>:1:19: Syntax error: "), "{e}");
    }

    #[test]
    fn undeclared_variables_are_refused_as_cel_go_refuses_them() {
        let ok = [
            "self.all(i, i > 0)",
            "self.map(x, x + 1).size() > 0 && type(self) == list",
            "optional.of(1).hasValue() && oldSelf == self",
            "self.exists(k, self[k] == 1)",
            "format.dns1123Label().validate('a').hasValue()",
        ];
        for source in ok {
            assert!(
                compile_declared(source, &["self", "oldSelf"]).is_ok(),
                "{source}"
            );
        }
        let e = compile_declared("object.spec.x == 1", &["self", "oldSelf"])
            .err()
            .map(|e| e.0)
            .unwrap_or_default();
        assert_eq!(
            e,
            "ERROR: <input>:1:1: undeclared reference to 'object' (in container '')\n | object.spec.x == 1\n | ^"
        );
        let e = compile_declared("self.all(i, j > 0)", &["self"])
            .err()
            .map(|e| e.0)
            .unwrap_or_default();
        assert!(
            e.starts_with("ERROR: <input>:1:13: undeclared reference to 'j'"),
            "{e}"
        );
    }

    #[test]
    fn transition_rules_are_told_apart() {
        assert!(compile("self == oldSelf").is_ok_and(|c| c.uses_old_self));
        assert!(compile("self.x == 1").is_ok_and(|c| !c.uses_old_self));
    }
}
