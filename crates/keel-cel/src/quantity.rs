//! Kubernetes' quantity library (`k8s.io/apiserver/pkg/cel/library/quantity.go`):
//! `quantity('1.5Gi')`, `isQuantity`, and a quantity's `sign`, `isInteger`, `asInteger`,
//! `asApproximateFloat`, `add`, `sub`, `compareTo`, `isLessThan`, `isGreaterThan`, and `==`.
//! Values are held exactly, in nano-units (`resource.Quantity` keeps at most nine fractional
//! digits, rounding up).

use std::any::Any;
use std::cmp::Ordering;

use cel::common::types::{CelBool, CelDouble, CelInt, CelString, Type};
use cel::common::value::{StaticVal, Val};
use cel::{Env, ExecutionError};

static QUANTITY: Type = Type::new_unspecified_type("kubernetes.Quantity");

/// A quantity, in nano-units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(i128);

impl Val for Quantity {
    fn get_type(&self) -> &Type {
        <Self as Val>::cel_type()
    }

    fn cel_type() -> &'static Type {
        &QUANTITY
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Quantity>().is_some_and(|o| o == self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(*self)
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Quantity {}

const NANO: i128 = 1_000_000_000;

/// Parses a quantity as `resource.ParseQuantity` does: a signed decimal number and a suffix
/// (binary `Ki`…`Ei`, decimal `n`, `u`, `m`, `k`, `M`…`E`, or an exponent `e<n>`/`E<n>`).
pub fn parse(s: &str) -> Option<Quantity> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'-' => (-1i128, &s[1..]),
        b'+' => (1, &s[1..]),
        _ => (1, s),
    };
    let digits_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(digits_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return None;
    }
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    // The number as an integer of `frac.len()` decimals.
    let mut mantissa: i128 = 0;
    for c in whole.chars().chain(frac.chars()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(c.to_digit(10)?))?;
    }
    let mut exp10: i32 = -(i32::try_from(frac.len()).ok()?);
    let mut binary: u32 = 0;
    match suffix {
        "" => {}
        "Ki" => binary = 10,
        "Mi" => binary = 20,
        "Gi" => binary = 30,
        "Ti" => binary = 40,
        "Pi" => binary = 50,
        "Ei" => binary = 60,
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        e if e.starts_with(['e', 'E']) => {
            let n: i32 = e[1..].parse().ok()?;
            exp10 = exp10.checked_add(n)?;
        }
        _ => return None,
    }
    // nano-units: mantissa * 10^(exp10 + 9) * 2^binary, rounded up past nano.
    let mut value = mantissa.checked_mul(1i128.checked_shl(binary)?)?;
    let shift = exp10 + 9;
    if shift >= 0 {
        value = value.checked_mul(10i128.checked_pow(u32::try_from(shift).ok()?)?)?;
    } else {
        let div = 10i128.checked_pow(u32::try_from(-shift).ok()?)?;
        value = (value + div - 1) / div;
    }
    Some(Quantity(sign * value))
}

fn invalid(function: &str) -> ExecutionError {
    ExecutionError::function_error(
        function,
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
    )
}

/// Registers the library on `env`.
pub fn register(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_type(QUANTITY.to_owned())?;
    cel::add_overload!(env, fn quantity: (CelString) -> Result<Quantity>)?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool)?;
    cel::add_member_overload!(env, fn sign: (Quantity) -> CelInt)?;
    cel::add_member_overload!(env, fn is_integer: (Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn as_integer: (Quantity) -> Result<CelInt>)?;
    cel::add_member_overload!(env, fn as_approximate_float: (Quantity) -> CelDouble)?;
    cel::add_member_overload!(env, fn add: (Quantity, Quantity) -> Result<Quantity>)?;
    cel::add_member_overload!(env, fn add_int: (Quantity, CelInt) -> Result<Quantity>, name = "add")?;
    cel::add_member_overload!(env, fn sub: (Quantity, Quantity) -> Result<Quantity>)?;
    cel::add_member_overload!(env, fn sub_int: (Quantity, CelInt) -> Result<Quantity>, name = "sub")?;
    cel::add_member_overload!(env, fn compare_to: (Quantity, Quantity) -> CelInt)?;
    cel::add_member_overload!(env, fn is_less_than: (Quantity, Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn is_greater_than: (Quantity, Quantity) -> CelBool)?;
    Ok(())
}

fn quantity(s: &CelString<'_>) -> Result<Quantity, ExecutionError> {
    parse(s.inner()).ok_or_else(|| invalid("quantity"))
}

fn is_quantity(s: &CelString<'_>) -> CelBool {
    CelBool::from(parse(s.inner()).is_some())
}

fn sign(q: &Quantity) -> CelInt {
    CelInt::from(q.0.signum() as i64)
}

fn is_integer(q: &Quantity) -> CelBool {
    CelBool::from(q.0 % NANO == 0 && i64::try_from(q.0 / NANO).is_ok())
}

fn as_integer(q: &Quantity) -> Result<CelInt, ExecutionError> {
    if q.0 % NANO != 0 {
        return Err(ExecutionError::function_error(
            "asInteger",
            "cannot convert value to integer",
        ));
    }
    i64::try_from(q.0 / NANO)
        .map(CelInt::from)
        .map_err(|_| ExecutionError::function_error("asInteger", "cannot convert value to integer"))
}

fn as_approximate_float(q: &Quantity) -> CelDouble {
    CelDouble::from(q.0 as f64 / NANO as f64)
}

fn overflow(function: &str) -> ExecutionError {
    ExecutionError::function_error(function, "arithmetic overflow")
}

fn add(a: &Quantity, b: &Quantity) -> Result<Quantity, ExecutionError> {
    a.0.checked_add(b.0)
        .map(Quantity)
        .ok_or_else(|| overflow("add"))
}

fn add_int(a: &Quantity, b: &CelInt) -> Result<Quantity, ExecutionError> {
    i128::from(*b.inner())
        .checked_mul(NANO)
        .and_then(|b| a.0.checked_add(b))
        .map(Quantity)
        .ok_or_else(|| overflow("add"))
}

fn sub(a: &Quantity, b: &Quantity) -> Result<Quantity, ExecutionError> {
    a.0.checked_sub(b.0)
        .map(Quantity)
        .ok_or_else(|| overflow("sub"))
}

fn sub_int(a: &Quantity, b: &CelInt) -> Result<Quantity, ExecutionError> {
    i128::from(*b.inner())
        .checked_mul(NANO)
        .and_then(|b| a.0.checked_sub(b))
        .map(Quantity)
        .ok_or_else(|| overflow("sub"))
}

fn compare_to(a: &Quantity, b: &Quantity) -> CelInt {
    CelInt::from(match a.cmp(b) {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    })
}

fn is_less_than(a: &Quantity, b: &Quantity) -> CelBool {
    CelBool::from(a < b)
}

fn is_greater_than(a: &Quantity, b: &Quantity) -> CelBool {
    CelBool::from(a > b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_as_kubernetes_parses_them() {
        let table = [
            ("1", Some(NANO)),
            ("1.5Gi", Some(3 * (1 << 29) * NANO)),
            ("100m", Some(NANO / 10)),
            ("2k", Some(2000 * NANO)),
            ("1e3", Some(1000 * NANO)),
            ("-5", Some(-5 * NANO)),
            ("1n", Some(1)),
            ("0.1n", Some(1)),
            ("", None),
            ("1Qi", None),
            ("abc", None),
            ("1..2", None),
        ];
        for (s, want) in table {
            assert_eq!(parse(s).map(|q| q.0), want, "{s}");
        }
    }
}
