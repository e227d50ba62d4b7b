//! Kubernetes' CEL libraries (`k8s.io/apiserver/pkg/cel/library`), written on the `cel` crate:
//! what real rules use first. Regex (`find`, `findAll`), and the validity checks of the URL,
//! IP and CIDR libraries (`isURL`, `isIP`, `isCIDR`, `ip.isCanonical`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cel::common::types::{CelBool, CelInt, CelList, CelString};
use cel::common::value::Val;
use cel::{Env, ExecutionError};

use crate::net;

/// Registers the libraries on `env`.
pub fn register(env: &mut Env) -> Result<(), cel::DeclarationError> {
    cel::add_member_overload!(env, fn matches_member: (CelString, CelString) -> Result<CelBool>,
        name = "@keel.matches")?;
    cel::add_overload!(env, fn matches_global: (CelString, CelString) -> Result<CelBool>,
        name = "@keel.matches")?;
    cel::add_member_overload!(env, fn find: (CelString, CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn find_all: (CelString, CelString) -> Result<CelList>)?;
    cel::add_member_overload!(env, fn find_all_n: (CelString, CelString, CelInt) -> Result<CelList>,
        name = "findAll")?;
    cel::add_overload!(env, fn is_url: (CelString) -> CelBool, name = "isURL")?;
    cel::add_overload!(env, fn is_ip: (CelString) -> CelBool, name = "isIP")?;
    cel::add_overload!(env, fn is_cidr: (CelString) -> CelBool, name = "isCIDR")?;
    cel::add_overload!(env, fn is_canonical: (CelString) -> CelBool, name = "ip.isCanonical")?;
    Ok(())
}

/// The most compiled patterns kept: rules name few, each many times.
const REGEX_CACHE: usize = 1024;

/// `pattern` compiled, from a cache of the patterns used so far (the `cel` crate compiles
/// `matches`' pattern on every call, which costs more than most rules).
fn regex(function: &str, pattern: &str) -> Result<Arc<regex::Regex>, ExecutionError> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<regex::Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    if let Some(re) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(pattern) {
        return Ok(re.clone());
    }
    let re = Arc::new(
        regex::Regex::new(pattern).map_err(|e| ExecutionError::function_error(function, e))?,
    );
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= REGEX_CACHE {
        cache.clear();
    }
    cache.insert(pattern.to_string(), re.clone());
    Ok(re)
}

/// The name `matches` calls are compiled to: the standard function, with its pattern cached.
pub(crate) const MATCHES: &str = "@keel.matches";

fn matches_member(s: &CelString<'_>, pattern: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    Ok(CelBool::from(
        regex("matches", pattern.inner())?.is_match(s.inner()),
    ))
}

fn matches_global(s: &CelString<'_>, pattern: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    matches_member(s, pattern)
}

/// `'abc 123'.find('[0-9]+')`: the first match, or `""`.
fn find(
    this: &CelString<'_>,
    pattern: &CelString<'_>,
) -> Result<CelString<'static>, ExecutionError> {
    let re = regex("find", pattern.inner())?;
    Ok(CelString::from(
        re.find(this.inner()).map_or("", |m| m.as_str()).to_string(),
    ))
}

/// `'123 abc 456'.findAll('[0-9]+')`: every match.
fn find_all(
    this: &CelString<'_>,
    pattern: &CelString<'_>,
) -> Result<CelList<'static>, ExecutionError> {
    find_all_n(this, pattern, &CelInt::from(-1))
}

/// `findAll(regex, n)`: at most `n` matches (a negative `n`: all).
fn find_all_n(
    this: &CelString<'_>,
    pattern: &CelString<'_>,
    n: &CelInt,
) -> Result<CelList<'static>, ExecutionError> {
    let re = regex("findAll", pattern.inner())?;
    let limit = usize::try_from(*n.inner()).unwrap_or(usize::MAX);
    Ok(re
        .find_iter(this.inner())
        .take(limit)
        .map(|m| Box::new(CelString::from(m.as_str().to_string())) as Box<dyn Val>)
        .collect::<Vec<_>>()
        .into())
}

/// `isURL(s)`: what `url(s)` accepts (Go's `url.ParseRequestURI`).
fn is_url(s: &CelString<'_>) -> CelBool {
    CelBool::from(net::parse_url(s.inner()).is_ok())
}

/// `isIP(s)`: what `ip(s)` accepts (no zone, no IPv4-mapped IPv6).
fn is_ip(s: &CelString<'_>) -> CelBool {
    CelBool::from(net::parse_ip(s.inner()).is_ok())
}

/// `isCIDR(s)`: what `cidr(s)` accepts.
fn is_cidr(s: &CelString<'_>) -> CelBool {
    CelBool::from(net::parse_cidr(s.inner()).is_ok())
}

/// `ip.isCanonical(s)`: an address written as its canonical form is.
fn is_canonical(s: &CelString<'_>) -> CelBool {
    CelBool::from(net::parse_ip(s.inner()).is_ok_and(|ip| ip.to_string() == s.inner()))
}
