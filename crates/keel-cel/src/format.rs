//! Kubernetes' format library (`kubernetes.format`): `format.dns1123Label()` and the other
//! named formats, `format.named('dns1123Label')`, and a format's `validate(s)`: none when `s`
//! is of the format, else the messages apimachinery's validation gives.

use std::any::Any;

use base64::Engine;
use cel::common::types::{CelOptional, CelString, Type};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{Env, ExecutionError, Value};
use keel_api::validation::{dns1123_label, dns1123_subdomain, label_key, label_value};

static NAMED_FORMAT: Type = Type::new_unspecified_type("kubernetes.NamedFormat");

/// A named format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedFormat(&'static str);

impl Val for NamedFormat {
    fn get_type(&self) -> &Type {
        <Self as Val>::cel_type()
    }
    fn cel_type() -> &'static Type {
        &NAMED_FORMAT
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<NamedFormat>()
            .is_some_and(|o| o == self)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for NamedFormat {}

/// Registers the library on `env`.
pub fn register(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_type(NAMED_FORMAT.to_owned())?;
    for (name, f) in CONSTANTS {
        env.add_overload(
            &format!("format.{name}"),
            &format!("format_{name}"),
            vec![],
            *f,
        )?;
    }
    env.add_overload(
        "format.named",
        "format_named_string",
        vec![cel::common::types::STRING_TYPE],
        named,
    )?;
    env.add_member_overload(
        "validate",
        "format_validate_string",
        NAMED_FORMAT.to_owned(),
        vec![cel::common::types::STRING_TYPE],
        validate,
    )?;
    Ok(())
}

/// `format.<name>()`, one function per format.
macro_rules! constants {
    ($($f:ident => $name:literal),* $(,)?) => {
        $(
            fn $f<'b, 'v>(_: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
                Ok(CowVal::owned(NamedFormat($name)))
            }
        )*
        const CONSTANTS: &[(&str, cel::common::functions::Function)] = &[$(($name, $f)),*];
    };
}

constants! {
    dns1123_label_format => "dns1123Label",
    dns1123_subdomain_format => "dns1123Subdomain",
    dns1035_label_format => "dns1035Label",
    qualified_name_format => "qualifiedName",
    dns1123_label_prefix_format => "dns1123LabelPrefix",
    dns1123_subdomain_prefix_format => "dns1123SubdomainPrefix",
    dns1035_label_prefix_format => "dns1035LabelPrefix",
    label_value_format => "labelValue",
    uri_format => "uri",
    uuid_format => "uuid",
    byte_format => "byte",
    date_format => "date",
    datetime_format => "datetime",
}

fn lookup(name: &str) -> Option<NamedFormat> {
    CONSTANTS
        .iter()
        .find(|(f, _)| *f == name)
        .map(|(f, _)| NamedFormat(f))
}

fn named<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let name = args
        .first()
        .and_then(|a| a.downcast_ref::<CelString>())
        .ok_or_else(ExecutionError::missing_argument_or_target)?;
    Ok(CowVal::owned(match lookup(name.inner()) {
        Some(f) => CelOptional::of(Box::new(f)),
        None => CelOptional::none(),
    }))
}

fn validate<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (Some(format), Some(s)) = (
        args.first().and_then(|a| a.downcast_ref::<NamedFormat>()),
        args.get(1).and_then(|a| a.downcast_ref::<CelString>()),
    ) else {
        return Err(ExecutionError::missing_argument_or_target());
    };
    let errors = check(format.0, s.inner());
    if errors.is_empty() {
        return Ok(CowVal::owned(CelOptional::none()));
    }
    let list: Box<dyn Val> = Value::List(std::sync::Arc::new(
        errors
            .into_iter()
            .map(|e| Value::String(std::sync::Arc::new(e)))
            .collect(),
    ))
    .try_into()?;
    Ok(CowVal::owned(CelOptional::of(list)))
}

/// `s` with a trailing `-` masked, as apimachinery checks generated-name prefixes.
fn mask_trailing_dash(s: &str) -> String {
    match s.strip_suffix('-') {
        Some(rest) if !rest.is_empty() => format!("{rest}a"),
        _ => s.to_string(),
    }
}

/// An RFC 1035 label: a lowercase letter first.
fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let ok = s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !ok {
        errs.push("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".to_string());
    }
    errs
}

/// The messages of `s` against `format` (empty: valid).
pub fn check(format: &str, s: &str) -> Vec<String> {
    match format {
        "dns1123Label" => dns1123_label(s),
        "dns1123Subdomain" => dns1123_subdomain(s),
        "dns1035Label" => dns1035_label(s),
        "qualifiedName" => label_key(s),
        "dns1123LabelPrefix" => dns1123_label(&mask_trailing_dash(s)),
        "dns1123SubdomainPrefix" => dns1123_subdomain(&mask_trailing_dash(s)),
        "dns1035LabelPrefix" => dns1035_label(&mask_trailing_dash(s)),
        "labelValue" => label_value(s),
        "uri" => match crate::net::parse_url(s) {
            Ok(_) => Vec::new(),
            Err(e) => vec![e],
        },
        "uuid" => {
            let hex = |p: &str, n: usize| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit());
            let parts: Vec<&str> = s.split('-').collect();
            let ok =
                parts.len() == 5 && [8, 4, 4, 4, 12].iter().zip(&parts).all(|(n, p)| hex(p, *n));
            if ok {
                Vec::new()
            } else {
                vec!["does not match the UUID format".into()]
            }
        }
        "byte" => match base64::engine::general_purpose::STANDARD.decode(s) {
            Ok(_) => Vec::new(),
            Err(_) => vec!["invalid base64".into()],
        },
        "date" => match chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
            Ok(_) => Vec::new(),
            Err(_) => vec!["invalid date".into()],
        },
        "datetime" => match chrono::DateTime::parse_from_rfc3339(s) {
            Ok(_) => Vec::new(),
            Err(_) => vec!["invalid datetime".into()],
        },
        _ => Vec::new(),
    }
}
