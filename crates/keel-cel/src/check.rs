//! The type checker: cel-go's `checker.Check` over the `cel` crate's AST (docs/cel.md §3.3,
//! §8), with the declarations of [`crate::decls`]. It types every node, resolves each call to
//! the overloads that fit, and reports what Kubernetes refuses (undeclared references,
//! undefined fields, calls no overload takes) in cel-go's words.
//!
//! It must never refuse what Kubernetes accepts: whatever keel does not know is typed
//! [`Type::Unknown`], which fits everything and is never the reason of a refusal.

use std::collections::HashMap;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue, SourceInfo};

use crate::decls::{FUNCTIONS, Overload};
use crate::types::Type;

/// How a call was resolved.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    /// The function, namespace included (`sets.contains`).
    pub name: String,
    /// Called on its target (not a namespaced global written as one).
    pub member: bool,
    /// The ids of the overloads the argument types fit.
    pub overloads: Vec<String>,
}

/// A checked expression: every node's type and every call's overloads.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    pub types: HashMap<u64, Type>,
    pub calls: HashMap<u64, Resolved>,
}

impl Checked {
    pub(crate) fn type_of(&self, id: u64) -> Type {
        self.types.get(&id).cloned().unwrap_or(Type::Unknown)
    }
}

/// Identifiers that name types.
fn type_ident(name: &str) -> Option<Type> {
    let t = match name {
        "bool" => Type::Bool,
        "bytes" => Type::Bytes,
        "double" => Type::Double,
        "int" => Type::Int,
        "uint" => Type::Uint,
        "string" => Type::String,
        "null_type" => Type::Null,
        "list" => Type::list(Type::Dyn),
        "map" => Type::map(Type::Dyn, Type::Dyn),
        "type" => Type::Kind(Box::new(Type::Dyn)),
        _ => return None,
    };
    Some(Type::Kind(Box::new(t)))
}

/// Names Kubernetes' environment knows as namespaces or types, which keel leaves unknown
/// rather than call undeclared.
const LENIENT_IDENTS: &[&str] = &[
    "dyn",
    "duration",
    "timestamp",
    "optional",
    "optional_type",
    "format",
    "sets",
    "ip",
    "net",
    "strings",
    "cel",
    "kubernetes",
    "google",
];

/// Checks `expr`: `Err` holds the issues, formatted as cel-go formats them.
pub(crate) fn check(
    expr: &IdedExpr,
    info: &SourceInfo,
    source: &str,
    vars: &[(&str, Type)],
) -> Result<Checked, String> {
    let mut checker = Checker {
        vars,
        scopes: Vec::new(),
        mappings: HashMap::new(),
        next_var: 0,
        checked: Checked::default(),
        errors: Vec::new(),
        info,
    };
    checker.check(expr);
    if checker.errors.is_empty() {
        checker.homogeneous_literals(expr, false);
    }
    if !checker.errors.is_empty() {
        let mut errors = std::mem::take(&mut checker.errors);
        errors.sort_by_key(|(offset, _)| *offset);
        return Err(errors
            .iter()
            .map(|(offset, message)| crate::env::located(source, *offset, message))
            .collect::<Vec<_>>()
            .join("\n"));
    }
    let mappings = std::mem::take(&mut checker.mappings);
    for t in checker.checked.types.values_mut() {
        *t = substitute(&mappings, t, true);
    }
    Ok(checker.checked)
}

struct Checker<'a> {
    vars: &'a [(&'a str, Type)],
    /// Comprehension variables, innermost last.
    scopes: Vec<(String, Type)>,
    /// Type parameters bound so far.
    mappings: HashMap<u32, Type>,
    next_var: u32,
    checked: Checked,
    /// (offset in the source, message).
    errors: Vec<(usize, String)>,
    info: &'a SourceInfo,
}

impl Checker<'_> {
    fn error(&mut self, id: u64, message: String) {
        let offset = self
            .info
            .offset_for(id)
            .map_or(0, |(start, _)| start as usize);
        self.errors.push((offset, message));
    }

    fn type_of(&self, id: u64) -> Type {
        self.checked.type_of(id)
    }

    fn set(&mut self, id: u64, t: Type) {
        self.checked.types.insert(id, t);
    }

    fn fresh(&mut self) -> Type {
        self.next_var += 1;
        Type::Param(self.next_var)
    }

    fn check(&mut self, e: &IdedExpr) {
        let t = match &e.expr {
            Expr::Literal(l) => match l {
                LiteralValue::Boolean(_) => Type::Bool,
                LiteralValue::Bytes(_) => Type::Bytes,
                LiteralValue::Double(_) => Type::Double,
                LiteralValue::Int(_) => Type::Int,
                LiteralValue::Null => Type::Null,
                LiteralValue::String(_) => Type::String,
                LiteralValue::UInt(_) => Type::Uint,
            },
            Expr::Ident(name) => self.ident(e.id, name),
            Expr::Select(select) => {
                let t = self.select_field(e.id, &select.operand, &select.field, false);
                if select.test {
                    Type::Bool
                } else {
                    substitute(&self.mappings, &t, false)
                }
            }
            Expr::Call(call) => self.call(e, call),
            Expr::List(list) => {
                let mut elem: Option<Type> = None;
                for (i, el) in list.elements.iter().enumerate() {
                    self.check(el);
                    let mut t = self.type_of(el.id);
                    if list.optional_indices.contains(&i) {
                        t = self.optional_element(el.id, t);
                    }
                    elem = Some(self.join(elem, t));
                }
                let elem = elem.unwrap_or_else(|| self.fresh());
                Type::list(elem)
            }
            Expr::Map(map) => {
                let (mut key, mut value): (Option<Type>, Option<Type>) = (None, None);
                for entry in &map.entries {
                    let EntryExpr::MapEntry(entry) = &entry.expr else {
                        continue;
                    };
                    self.check(&entry.key);
                    let k = self.type_of(entry.key.id);
                    key = Some(self.join(key, k));
                    self.check(&entry.value);
                    let mut v = self.type_of(entry.value.id);
                    if entry.optional {
                        v = self.optional_element(entry.value.id, v);
                    }
                    value = Some(self.join(value, v));
                }
                match (key, value) {
                    (Some(k), Some(v)) => Type::map(k, v),
                    _ => {
                        let (k, v) = (self.fresh(), self.fresh());
                        Type::map(k, v)
                    }
                }
            }
            Expr::Struct(st) => {
                // No message types are declared in Kubernetes' environments.
                self.error(
                    e.id,
                    format!(
                        "undeclared reference to '{}' (in container '')",
                        st.type_name
                    ),
                );
                Type::Error
            }
            Expr::Comprehension(c) => {
                self.check(&c.iter_range);
                self.check(&c.accu_init);
                let range = substitute(&self.mappings, &self.type_of(c.iter_range.id), false);
                let accu = self.type_of(c.accu_init.id);
                let depth = self.scopes.len();
                self.scopes.push((c.accu_var.clone(), accu.clone()));
                let (var, var2) = match &range {
                    Type::List(elem) => match c.iter_var2 {
                        Some(_) => (Type::Int, Some((**elem).clone())),
                        None => ((**elem).clone(), None),
                    },
                    Type::Map(k, v) => ((**k).clone(), Some((**v).clone())),
                    Type::Unknown => (Type::Unknown, Some(Type::Unknown)),
                    Type::Dyn | Type::Error | Type::Param(_) => {
                        self.is_assignable(&Type::Dyn, &range);
                        (Type::Dyn, Some(Type::Dyn))
                    }
                    other => {
                        self.error(
                            c.iter_range.id,
                            format!(
                                "expression of type '{other}' cannot be range of a comprehension (must be list, map, or dynamic)"
                            ),
                        );
                        (Type::Error, Some(Type::Error))
                    }
                };
                self.scopes.push((c.iter_var.clone(), var));
                if let (Some(name), Some(t)) = (&c.iter_var2, var2) {
                    self.scopes.push((name.clone(), t));
                }
                self.check(&c.loop_cond);
                self.assert_type(&c.loop_cond, &Type::Bool);
                self.check(&c.loop_step);
                self.assert_type(&c.loop_step, &accu);
                self.scopes.truncate(depth + 1);
                self.check(&c.result);
                self.scopes.truncate(depth);
                substitute(&self.mappings, &self.type_of(c.result.id), false)
            }
            Expr::Unspecified => Type::Error,
        };
        self.set(e.id, t);
    }

    /// An optional element of a list or map literal (`[?x]`, `{?k: v}`): its value type.
    fn optional_element(&mut self, id: u64, t: Type) -> Type {
        if let Some(inner) = t.unwrap_optional() {
            return inner.clone();
        }
        if !t.is_dyn_or_error() {
            self.error(
                id,
                format!(
                    "expected type '{}' but found '{t}'",
                    Type::optional(t.clone())
                ),
            );
        }
        t
    }

    fn ident(&mut self, id: u64, name: &str) -> Type {
        if let Some((_, t)) = self.scopes.iter().rev().find(|(n, _)| n == name) {
            return t.clone();
        }
        if let Some((_, t)) = self.vars.iter().find(|(n, _)| *n == name) {
            return t.clone();
        }
        if let Some(t) = type_ident(name) {
            return t;
        }
        if LENIENT_IDENTS.contains(&name) || name.starts_with('@') || name.starts_with('#') {
            return Type::Unknown;
        }
        self.error(
            id,
            format!("undeclared reference to '{name}' (in container '')"),
        );
        Type::Error
    }

    /// cel-go's `checkSelectField`: a field of an object, a map's value, or dyn.
    fn select_field(&mut self, id: u64, operand: &IdedExpr, field: &str, optional: bool) -> Type {
        self.check(operand);
        let operand_type = substitute(&self.mappings, &self.type_of(operand.id), false);
        let (target, was_optional) = match operand_type.unwrap_optional() {
            Some(inner) => (inner.clone(), true),
            None => (operand_type, false),
        };
        let result = match &target {
            Type::Map(_, value) => (**value).clone(),
            Type::Object(decl) => match decl.field(field) {
                Some(f) => f.cel_type(),
                None if matches!(
                    &decl.kind,
                    crate::types::DeclKind::Object { open: true, .. }
                ) =>
                {
                    Type::Unknown
                }
                None => {
                    self.error(id, format!("undefined field '{field}'"));
                    Type::Error
                }
            },
            Type::Param(_) => {
                self.is_assignable(&Type::Dyn, &target);
                Type::Dyn
            }
            Type::Unknown => Type::Unknown,
            Type::Dyn | Type::Error => Type::Dyn,
            other => {
                self.error(
                    id,
                    format!("type '{other}' does not support field selection"),
                );
                Type::Dyn
            }
        };
        if was_optional || optional {
            Type::optional(result)
        } else {
            result
        }
    }

    fn call(&mut self, e: &IdedExpr, call: &cel::common::ast::CallExpr) -> Type {
        if call.func_name == "_?._" {
            let (Some(operand), Some(field)) = (call.args.first(), call.args.get(1)) else {
                return Type::Error;
            };
            let Expr::Literal(LiteralValue::String(name)) = &field.expr else {
                self.error(field.id, "unsupported optional field selection".into());
                return Type::Error;
            };
            let t = self.select_field(e.id, operand, name.inner(), true);
            self.checked.calls.insert(
                e.id,
                Resolved {
                    name: call.func_name.clone(),
                    member: false,
                    overloads: vec!["select_optional_field".into()],
                },
            );
            return substitute(&self.mappings, &t, false);
        }
        for arg in &call.args {
            self.check(arg);
        }
        let Some(target) = call.target.as_deref() else {
            if !FUNCTIONS.contains_key(&call.func_name) {
                self.error(
                    e.id,
                    format!(
                        "undeclared reference to '{}' (in container '')",
                        call.func_name
                    ),
                );
                return Type::Error;
            }
            return self.resolve(e.id, &call.func_name, None, &call.args);
        };
        // `a.b.f(x)` is the function `a.b.f` when one is declared, else `f` on `a.b`.
        if let Some(prefix) = qualified_name(target) {
            let name = format!("{prefix}.{}", call.func_name);
            if FUNCTIONS.contains_key(&name) {
                return self.resolve(e.id, &name, None, &call.args);
            }
        }
        self.check(target);
        if !FUNCTIONS.contains_key(&call.func_name) {
            self.error(
                e.id,
                format!(
                    "undeclared reference to '{}' (in container '')",
                    call.func_name
                ),
            );
            return Type::Error;
        }
        self.resolve(e.id, &call.func_name, Some(target), &call.args)
    }

    /// cel-go's `resolveOverload`: every overload the argument types fit, and the result type.
    fn resolve(
        &mut self,
        id: u64,
        name: &str,
        target: Option<&IdedExpr>,
        args: &[IdedExpr],
    ) -> Type {
        let mut arg_types: Vec<Type> = Vec::new();
        if let Some(t) = target {
            arg_types.push(self.type_of(t.id));
        }
        arg_types.extend(args.iter().map(|a| self.type_of(a.id)));
        let overloads: &[Overload] = FUNCTIONS.get(name).map_or(&[], Vec::as_slice);
        let mut result: Option<Type> = None;
        let mut ids = Vec::new();
        for overload in overloads {
            if overload.member != target.is_some() {
                continue;
            }
            if name == "_&&_" || name == "_||_" {
                let mut wrong = false;
                for (arg, t) in args.iter().zip(&arg_types) {
                    if !self.is_assignable(t, &Type::Bool) {
                        self.error(arg.id, format!("expected type 'bool' but found '{t}'"));
                        wrong = true;
                    }
                }
                if wrong {
                    return Type::Error;
                }
                ids.push(overload.id.clone());
                result = Some(Type::Bool);
                break;
            }
            if overload.params.len() != arg_types.len() {
                continue;
            }
            let base = self.next_var;
            self.next_var += overload.type_params;
            let fresh = |t: &Type| instantiate(t, base);
            let params: Vec<Type> = overload.params.iter().map(fresh).collect();
            if self.is_assignable_list(&arg_types, &params) {
                ids.push(overload.id.clone());
                let r = substitute(&self.mappings, &fresh(&overload.result), false);
                result = Some(match result {
                    None => r,
                    Some(prev) if !matches!(prev, Type::Dyn) && !r.exact(&prev) => Type::Dyn,
                    Some(prev) => prev,
                });
            }
        }
        let Some(result) = result else {
            let formatted: Vec<String> = arg_types
                .iter()
                .map(|t| substitute(&self.mappings, t, true).to_string())
                .collect();
            let signature = match target {
                Some(_) => format!(
                    "{}.({})",
                    formatted.first().cloned().unwrap_or_default(),
                    formatted.get(1..).unwrap_or_default().join(", ")
                ),
                None => format!("({})", formatted.join(", ")),
            };
            self.error(
                id,
                format!("found no matching overload for '{name}' applied to '{signature}'"),
            );
            return Type::Error;
        };
        self.checked.calls.insert(
            id,
            Resolved {
                name: name.to_string(),
                member: target.is_some(),
                overloads: ids,
            },
        );
        // Keel's ignorance in an argument stays in the result.
        if arg_types.iter().any(|t| matches!(t, Type::Unknown)) && matches!(result, Type::Dyn) {
            return Type::Unknown;
        }
        result
    }

    fn join(&mut self, previous: Option<Type>, current: Type) -> Type {
        let Some(previous) = previous else {
            return current;
        };
        if self.is_assignable(&previous, &current) {
            most_general(&previous, &current)
        } else {
            Type::Dyn
        }
    }

    fn assert_type(&mut self, e: &IdedExpr, t: &Type) {
        let actual = self.type_of(e.id);
        if !self.is_assignable(t, &actual) {
            self.error(e.id, format!("expected type '{t}' but found '{actual}'"));
        }
    }

    fn is_assignable(&mut self, t1: &Type, t2: &Type) -> bool {
        let mut m = self.mappings.clone();
        if assignable(&mut m, t1, t2) {
            self.mappings = m;
            true
        } else {
            false
        }
    }

    fn is_assignable_list(&mut self, l1: &[Type], l2: &[Type]) -> bool {
        let mut m = self.mappings.clone();
        if l1.len() == l2.len() && l1.iter().zip(l2).all(|(a, b)| assignable(&mut m, a, b)) {
            self.mappings = m;
            true
        } else {
            false
        }
    }

    /// Kubernetes' `HomogeneousAggregateLiterals` validator: the elements of a list literal, and
    /// the keys and values of a map literal, are all of one type (list and map literals inside
    /// `format` arguments are exempt). Only types keel knows fully are compared.
    fn homogeneous_literals(&mut self, e: &IdedExpr, exempt: bool) {
        let children: Vec<&IdedExpr> = match &e.expr {
            Expr::List(list) => {
                if !exempt {
                    let types: Vec<(u64, Type)> = list
                        .elements
                        .iter()
                        .enumerate()
                        .map(|(i, el)| {
                            let t = self.type_of(el.id);
                            let t = match (list.optional_indices.contains(&i), t.unwrap_optional())
                            {
                                (true, Some(inner)) => inner.clone(),
                                _ => t,
                            };
                            (el.id, t)
                        })
                        .collect();
                    self.same_types(&types);
                }
                list.elements.iter().collect()
            }
            Expr::Map(map) => {
                let entries: Vec<_> = map
                    .entries
                    .iter()
                    .filter_map(|en| match &en.expr {
                        EntryExpr::MapEntry(m) => Some(m),
                        EntryExpr::StructField(_) => None,
                    })
                    .collect();
                if !exempt {
                    let keys: Vec<(u64, Type)> = entries
                        .iter()
                        .map(|m| (m.key.id, self.type_of(m.key.id)))
                        .collect();
                    self.same_types(&keys);
                    let values: Vec<(u64, Type)> = entries
                        .iter()
                        .map(|m| {
                            let t = self.type_of(m.value.id);
                            let t = match (m.optional, t.unwrap_optional()) {
                                (true, Some(inner)) => inner.clone(),
                                _ => t,
                            };
                            (m.value.id, t)
                        })
                        .collect();
                    self.same_types(&values);
                }
                entries.iter().flat_map(|m| [&m.key, &m.value]).collect()
            }
            Expr::Call(call) => {
                let exempt = exempt || call.func_name == "format";
                for child in call.target.as_deref().into_iter().chain(&call.args) {
                    self.homogeneous_literals(child, exempt);
                }
                return;
            }
            Expr::Select(select) => vec![&select.operand],
            Expr::Comprehension(c) => vec![
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ],
            Expr::Struct(_) | Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => vec![],
        };
        for child in children {
            self.homogeneous_literals(child, exempt);
        }
    }

    fn same_types(&mut self, types: &[(u64, Type)]) {
        let mut first: Option<Type> = None;
        for (id, t) in types {
            let t = substitute(&self.mappings, t, true);
            match &first {
                None => first = Some(t),
                Some(f) if f.is_concrete() && t.is_concrete() && !equivalent(f, &t) => {
                    let message = format!("expected type '{f}' but found '{t}'");
                    self.error(*id, message);
                    return;
                }
                Some(_) => {}
            }
        }
    }
}

/// cel-go's `IsEquivalentType`, with any two objects taken as one type.
fn equivalent(a: &Type, b: &Type) -> bool {
    match (a, b) {
        (Type::Object(_), Type::Object(_)) => true,
        (Type::List(x), Type::List(y)) => equivalent(x, y),
        (Type::Map(k1, v1), Type::Map(k2, v2)) => equivalent(k1, k2) && equivalent(v1, v2),
        _ => a.exact(b),
    }
}

/// `a.b.c` as the name it spells, or `None`.
fn qualified_name(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Expr::Ident(name) => Some(name.clone()),
        Expr::Select(s) if !s.test => Some(format!("{}.{}", qualified_name(&s.operand)?, s.field)),
        _ => None,
    }
}

/// An overload's type with its parameters renamed past `base`, so each call has its own.
fn instantiate(t: &Type, base: u32) -> Type {
    match t {
        Type::Param(p) => Type::Param(base + 1 + p),
        Type::List(e) => Type::list(instantiate(e, base)),
        Type::Map(k, v) => Type::map(instantiate(k, base), instantiate(v, base)),
        Type::Kind(e) => Type::Kind(Box::new(instantiate(e, base))),
        Type::Opaque(n, params) => Type::Opaque(
            n.clone(),
            params.iter().map(|p| instantiate(p, base)).collect(),
        ),
        other => other.clone(),
    }
}

/// cel-go's `substitute`: bound parameters replaced, unbound ones by dyn when `to_dyn`.
fn substitute(m: &HashMap<u32, Type>, t: &Type, to_dyn: bool) -> Type {
    match t {
        Type::Param(p) => match m.get(p) {
            Some(sub) => substitute(m, sub, to_dyn),
            None if to_dyn => Type::Dyn,
            None => t.clone(),
        },
        Type::List(e) => Type::list(substitute(m, e, to_dyn)),
        Type::Map(k, v) => Type::map(substitute(m, k, to_dyn), substitute(m, v, to_dyn)),
        Type::Kind(e) => Type::Kind(Box::new(substitute(m, e, to_dyn))),
        Type::Opaque(n, params) => Type::Opaque(
            n.clone(),
            params.iter().map(|p| substitute(m, p, to_dyn)).collect(),
        ),
        other => other.clone(),
    }
}

fn is_dyn(t: &Type) -> bool {
    matches!(t, Type::Dyn | Type::Unknown)
}

/// cel-go's `isEqualOrLessSpecific`.
fn equal_or_less_specific(t1: &Type, t2: &Type) -> bool {
    if is_dyn(t1) || matches!(t1, Type::Param(_)) {
        return true;
    }
    if is_dyn(t2) || matches!(t2, Type::Param(_)) {
        return false;
    }
    match (t1, t2) {
        (Type::Opaque(n1, p1), Type::Opaque(n2, p2)) => {
            n1 == n2
                && p1.len() == p2.len()
                && p1.iter().zip(p2).all(|(a, b)| equal_or_less_specific(a, b))
        }
        (Type::List(a), Type::List(b)) => equal_or_less_specific(a, b),
        (Type::Map(k1, v1), Type::Map(k2, v2)) => {
            equal_or_less_specific(k1, k2) && equal_or_less_specific(v1, v2)
        }
        (Type::Kind(_), Type::Kind(_)) => true,
        (a, b) => a.exact(b),
    }
}

fn most_general(t1: &Type, t2: &Type) -> Type {
    if equal_or_less_specific(t1, t2) {
        t1.clone()
    } else {
        t2.clone()
    }
}

/// Whether the parameter `t` occurs in `within` (cel-go's `notReferencedIn`, negated).
fn not_referenced_in(m: &HashMap<u32, Type>, t: &Type, within: &Type) -> bool {
    if t.exact(within) {
        return false;
    }
    match within {
        Type::Param(p) => m.get(p).is_none_or(|sub| not_referenced_in(m, t, sub)),
        Type::List(e) | Type::Kind(e) => not_referenced_in(m, t, e),
        Type::Map(k, v) => not_referenced_in(m, t, k) && not_referenced_in(m, t, v),
        Type::Opaque(_, params) => params.iter().all(|p| not_referenced_in(m, t, p)),
        _ => true,
    }
}

/// cel-go's `isValidTypeSubstitution`: (valid, `t2` already had a substitution).
fn valid_substitution(m: &mut HashMap<u32, Type>, t1: &Type, t2: &Type) -> (bool, bool) {
    let Type::Param(p) = t2 else {
        return (false, false);
    };
    if t1.exact(t2) {
        return (true, true);
    }
    if let Some(sub) = m.get(p).cloned() {
        if t1.exact(&sub) {
            return (true, true);
        }
        if assignable(m, t1, &sub) {
            let general = most_general(t1, &sub);
            if not_referenced_in(m, t2, &general) {
                m.insert(*p, general);
            }
            return (true, true);
        }
        return (false, true);
    }
    if not_referenced_in(m, t2, t1) {
        m.insert(*p, t1.clone());
        return (true, false);
    }
    (false, false)
}

/// cel-go's `internalIsAssignable`, with any two objects assignable (Kubernetes names object
/// types by schema path; keel does not refuse on a difference of names).
fn assignable(m: &mut HashMap<u32, Type>, t1: &Type, t2: &Type) -> bool {
    if matches!(t2, Type::Param(_)) {
        let (valid, had) = valid_substitution(m, t1, t2);
        if valid {
            return true;
        }
        if had {
            return false;
        }
    }
    if matches!(t1, Type::Param(_)) {
        return valid_substitution(m, t2, t1).0;
    }
    if t1.is_dyn_or_error() || t2.is_dyn_or_error() {
        return true;
    }
    let nullable = |t: &Type| {
        matches!(
            t,
            Type::Opaque(..) | Type::Object(_) | Type::Duration | Type::Timestamp | Type::Null
        )
    };
    if matches!(t1, Type::Null) {
        return nullable(t2);
    }
    if matches!(t2, Type::Null) {
        return nullable(t1);
    }
    match (t1, t2) {
        (Type::Object(_), Type::Object(_)) => true,
        (Type::Kind(_), b) => matches!(b, Type::Kind(_)),
        (Type::List(a), Type::List(b)) => assignable(m, a, b),
        (Type::Map(k1, v1), Type::Map(k2, v2)) => assignable(m, k1, k2) && assignable(m, v1, v2),
        (Type::Opaque(n1, p1), Type::Opaque(n2, p2)) => {
            n1 == n2 && p1.len() == p2.len() && p1.iter().zip(p2).all(|(a, b)| assignable(m, a, b))
        }
        (a, b) => a.exact(b),
    }
}
