//! Kubernetes' lists library (`kubernetes.lists`: `isSorted`, `sum`, `min`, `max`, `indexOf`,
//! `lastIndexOf` on lists) and cel-go's sets extension (`sets.contains`, `sets.equivalent`,
//! `sets.intersects`), on CEL values.

use std::cmp::Ordering;

use cel::common::types::{DYN_TYPE, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError, Value};

/// Registers both libraries on `env`.
pub fn register(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_member_overload("isSorted", "list.isSorted()", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list.sum()", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list.min()", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list.max()", LIST_TYPE, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "list.indexOf(dyn)",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list.lastIndexOf(dyn)",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    for (name, f) in [
        (
            "sets.contains",
            sets_contains as cel::common::functions::Function,
        ),
        ("sets.equivalent", sets_equivalent),
        ("sets.intersects", sets_intersects),
    ] {
        env.add_overload(
            name,
            &format!("{name}(list,list)"),
            vec![LIST_TYPE, LIST_TYPE],
            f,
        )?;
    }
    Ok(())
}

/// The items of a list argument, as values.
fn items(function: &str, v: &dyn Val) -> Result<Vec<Value>, ExecutionError> {
    match Value::try_from(v)? {
        Value::List(l) => Ok(l.to_vec()),
        other => Err(ExecutionError::function_error(
            function,
            format!("expected a list, got {:?}", other.type_of()),
        )),
    }
}

fn out<'b, 'v>(v: Value) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let boxed: Box<dyn Val> = v.try_into()?;
    Ok(CowVal::Owned(boxed))
}

fn arg<'a, 'b, 'v>(args: &'a [CowVal<'b, 'v>], i: usize) -> Result<&'a dyn Val, ExecutionError> {
    args.get(i)
        .map(|a| a.as_ref() as &dyn Val)
        .ok_or_else(ExecutionError::missing_argument_or_target)
}

fn compare(function: &str, a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
    a.partial_cmp(b)
        .ok_or_else(|| ExecutionError::function_error(function, "no such overload"))
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let list = items("isSorted", arg(&args, 0)?)?;
    for pair in list.windows(2) {
        if compare("isSorted", &pair[0], &pair[1])? == Ordering::Greater {
            return out(Value::Bool(false));
        }
    }
    out(Value::Bool(true))
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let list = items("sum", arg(&args, 0)?)?;
    let total = match list.first() {
        None | Some(Value::Int(_)) => {
            let mut t: i64 = 0;
            for v in &list {
                let Value::Int(i) = v else {
                    return Err(ExecutionError::function_error("sum", "no such overload"));
                };
                t = t
                    .checked_add(*i)
                    .ok_or_else(|| ExecutionError::function_error("sum", "integer overflow"))?;
            }
            Value::Int(t)
        }
        Some(Value::UInt(_)) => {
            let mut t: u64 = 0;
            for v in &list {
                let Value::UInt(u) = v else {
                    return Err(ExecutionError::function_error("sum", "no such overload"));
                };
                t = t.checked_add(*u).ok_or_else(|| {
                    ExecutionError::function_error("sum", "unsigned integer overflow")
                })?;
            }
            Value::UInt(t)
        }
        Some(Value::Float(_)) => {
            let mut t = 0.0;
            for v in &list {
                let Value::Float(f) = v else {
                    return Err(ExecutionError::function_error("sum", "no such overload"));
                };
                t += f;
            }
            Value::Float(t)
        }
        Some(_) => return Err(ExecutionError::function_error("sum", "no such overload")),
    };
    out(total)
}

fn extreme<'b, 'v>(
    function: &str,
    args: Vec<CowVal<'b, 'v>>,
    keep: Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let list = items(function, arg(&args, 0)?)?;
    let mut it = list.into_iter();
    let Some(mut best) = it.next() else {
        return Err(ExecutionError::function_error(
            function,
            format!("{function} called on empty list"),
        ));
    };
    for v in it {
        if compare(function, &v, &best)? == keep {
            best = v;
        }
    }
    out(best)
}

fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme("min", args, Ordering::Less)
}

fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme("max", args, Ordering::Greater)
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let list = items("indexOf", arg(&args, 0)?)?;
    let needle = Value::try_from(arg(&args, 1)?)?;
    let i = list
        .iter()
        .position(|v| *v == needle)
        .map_or(-1, |i| i as i64);
    out(Value::Int(i))
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let list = items("lastIndexOf", arg(&args, 0)?)?;
    let needle = Value::try_from(arg(&args, 1)?)?;
    let i = list
        .iter()
        .rposition(|v| *v == needle)
        .map_or(-1, |i| i as i64);
    out(Value::Int(i))
}

fn two_lists<'b, 'v>(
    function: &str,
    args: &[CowVal<'b, 'v>],
) -> Result<(Vec<Value>, Vec<Value>), ExecutionError> {
    Ok((
        items(function, arg(args, 0)?)?,
        items(function, arg(args, 1)?)?,
    ))
}

/// `sets.contains(a, b)`: every element of `b` is in `a`.
fn sets_contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists("sets.contains", &args)?;
    out(Value::Bool(b.iter().all(|x| a.contains(x))))
}

/// `sets.equivalent(a, b)`: each contains the other.
fn sets_equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists("sets.equivalent", &args)?;
    out(Value::Bool(
        b.iter().all(|x| a.contains(x)) && a.iter().all(|x| b.contains(x)),
    ))
}

/// `sets.intersects(a, b)`: some element is in both.
fn sets_intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists("sets.intersects", &args)?;
    out(Value::Bool(b.iter().any(|x| a.contains(x))))
}
