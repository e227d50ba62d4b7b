//! Kubernetes' IP and CIDR libraries (`kubernetes.net.ip`, `kubernetes.net.cidr`) and its URL
//! library (`kubernetes.urls`), as opaque CEL values: `ip('10.0.0.1').family()`,
//! `cidr('10.0.0.0/8').containsIP('10.1.2.3')`, `url('https://a.example/x').getHost()`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use cel::common::types::{CelBool, CelInt, CelString, Type};
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError, Value};

static IP: Type = Type::new_unspecified_type("net.IP");
static CIDR: Type = Type::new_unspecified_type("net.CIDR");
static URL: Type = Type::new_unspecified_type("kubernetes.URL");

/// An IP address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ip(IpAddr);

/// A CIDR: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(IpAddr, u8);

/// A URL as Go's `url.ParseRequestURI` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    text: String,
    scheme: String,
    host: String,
    path: String,
    query: String,
}

opaque!(Ip, IP);
opaque!(Cidr, CIDR);
opaque!(Url, URL);

/// Registers the libraries on `env`.
pub fn register(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_type(IP.to_owned())?;
    env.add_type(CIDR.to_owned())?;
    env.add_type(URL.to_owned())?;
    cel::add_overload!(env, fn ip: (CelString) -> Result<Ip>)?;
    cel::add_member_overload!(env, fn family: (Ip) -> CelInt)?;
    cel::add_member_overload!(env, fn is_unspecified: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_loopback: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_link_local_multicast: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_link_local_unicast: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_global_unicast: (Ip) -> CelBool)?;
    cel::add_overload!(env, fn ip_string: (Ip) -> CelString, name = "string")?;
    cel::add_overload!(env, fn cidr: (CelString) -> Result<Cidr>)?;
    cel::add_member_overload!(env, fn contains_ip: (Cidr, Ip) -> CelBool, name = "containsIP")?;
    cel::add_member_overload!(env, fn contains_ip_string: (Cidr, CelString) -> Result<CelBool>,
        name = "containsIP")?;
    cel::add_member_overload!(env, fn contains_cidr: (Cidr, Cidr) -> CelBool,
        name = "containsCIDR")?;
    cel::add_member_overload!(env, fn contains_cidr_string: (Cidr, CelString) -> Result<CelBool>,
        name = "containsCIDR")?;
    cel::add_member_overload!(env, fn cidr_ip: (Cidr) -> Ip, name = "ip")?;
    cel::add_member_overload!(env, fn masked: (Cidr) -> Cidr)?;
    cel::add_member_overload!(env, fn prefix_length: (Cidr) -> CelInt)?;
    cel::add_overload!(env, fn cidr_string: (Cidr) -> CelString, name = "string")?;
    cel::add_overload!(env, fn url: (CelString) -> Result<Url>)?;
    cel::add_member_overload!(env, fn get_scheme: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_host: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_hostname: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_port: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_escaped_path: (Url) -> CelString)?;
    env.add_member_overload(
        "getQuery",
        "url.getQuery()",
        URL.to_owned(),
        vec![],
        get_query,
    )?;
    Ok(())
}

/// An address as Kubernetes' `ip()` accepts it: no zone, no IPv4-mapped IPv6.
pub fn parse_ip(s: &str) -> Result<IpAddr, String> {
    if s.contains('%') {
        return Err(format!("IP address {s:?} with zone value is not allowed"));
    }
    let ip: IpAddr = s
        .parse()
        .map_err(|e| format!("IP Address {s:?} parse error during conversion from string: {e}"))?;
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(format!("IPv4-mapped IPv6 address {s:?} is not allowed"));
    }
    Ok(ip)
}

/// A CIDR as Kubernetes' `cidr()` accepts it.
pub fn parse_cidr(s: &str) -> Result<(IpAddr, u8), String> {
    let bad = || {
        format!(
            "network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix({s:?}): bad prefix"
        )
    };
    let (ip, len) = s.split_once('/').ok_or_else(bad)?;
    let ip = parse_ip(ip).map_err(|_| bad())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len: u8 = len.parse().ok().filter(|l| *l <= max).ok_or_else(bad)?;
    Ok((ip, len))
}

fn ip(s: &CelString<'_>) -> Result<Ip, ExecutionError> {
    parse_ip(s.inner())
        .map(Ip)
        .map_err(|e| ExecutionError::function_error("ip", e))
}

fn family(ip: &Ip) -> CelInt {
    CelInt::from(if ip.0.is_ipv4() { 4 } else { 6 })
}

fn is_unspecified(ip: &Ip) -> CelBool {
    CelBool::from(ip.0.is_unspecified())
}

fn is_loopback(ip: &Ip) -> CelBool {
    CelBool::from(ip.0.is_loopback())
}

fn is_link_local_multicast(ip: &Ip) -> CelBool {
    CelBool::from(match ip.0 {
        IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => v6.segments()[0] & 0xff0f == 0xff02,
    })
}

fn is_link_local_unicast(ip: &Ip) -> CelBool {
    CelBool::from(match ip.0 {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    })
}

/// Go's `IsGlobalUnicast`: not unspecified, loopback, multicast, link-local, or broadcast.
fn is_global_unicast(ip: &Ip) -> CelBool {
    let special = ip.0.is_unspecified()
        || ip.0.is_loopback()
        || ip.0.is_multicast()
        || is_link_local_unicast(ip).into_inner()
        || matches!(ip.0, IpAddr::V4(v4) if v4.is_broadcast());
    CelBool::from(!special)
}

fn ip_string(ip: &Ip) -> CelString<'static> {
    CelString::from(ip.0.to_string())
}

fn cidr(s: &CelString<'_>) -> Result<Cidr, ExecutionError> {
    parse_cidr(s.inner())
        .map(|(ip, len)| Cidr(ip, len))
        .map_err(|e| ExecutionError::function_error("cidr", e))
}

/// The bits of `ip` as a 128-bit number, and how many it has.
fn bits(ip: IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
        IpAddr::V6(v6) => (u128::from(v6), 128),
    }
}

fn contains(c: &Cidr, ip: IpAddr) -> bool {
    let ((net, width), (addr, addr_width)) = (bits(c.0), bits(ip));
    if width != addr_width {
        return false;
    }
    let shift = u32::from(width - c.1);
    shift >= 128 || (net >> shift) == (addr >> shift)
}

fn contains_ip(c: &Cidr, ip: &Ip) -> CelBool {
    CelBool::from(contains(c, ip.0))
}

fn contains_ip_string(c: &Cidr, s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let ip = parse_ip(s.inner()).map_err(|e| ExecutionError::function_error("containsIP", e))?;
    Ok(CelBool::from(contains(c, ip)))
}

fn contains_cidr(c: &Cidr, other: &Cidr) -> CelBool {
    CelBool::from(other.1 >= c.1 && contains(c, other.0))
}

fn contains_cidr_string(c: &Cidr, s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let (ip, len) =
        parse_cidr(s.inner()).map_err(|e| ExecutionError::function_error("containsCIDR", e))?;
    Ok(contains_cidr(c, &Cidr(ip, len)))
}

fn cidr_ip(c: &Cidr) -> Ip {
    Ip(c.0)
}

fn masked(c: &Cidr) -> Cidr {
    let (addr, width) = bits(c.0);
    let shift = u32::from(width - c.1);
    let net = if shift >= 128 {
        0
    } else {
        (addr >> shift) << shift
    };
    let ip = match c.0 {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::from(net as u32)),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::from(net)),
    };
    Cidr(ip, c.1)
}

fn prefix_length(c: &Cidr) -> CelInt {
    CelInt::from(i64::from(c.1))
}

fn cidr_string(c: &Cidr) -> CelString<'static> {
    CelString::from(format!("{}/{}", c.0, c.1))
}

/// A URL as `url.ParseRequestURI` accepts it: absolute, or an absolute path.
pub fn parse_url(s: &str) -> Result<Url, String> {
    let error = |why: &str| format!("URL parse error during conversion from string: {why}");
    if s.starts_with('/') {
        if s.contains(char::is_whitespace) {
            return Err(error("invalid character in path"));
        }
        let (path, query) = s.split_once('?').unwrap_or((s, ""));
        return Ok(Url {
            text: s.to_string(),
            scheme: String::new(),
            host: String::new(),
            path: path.to_string(),
            query: query.to_string(),
        });
    }
    let uri: http::Uri = s
        .parse()
        .map_err(|e: http::uri::InvalidUri| error(&e.to_string()))?;
    let scheme = uri
        .scheme_str()
        .ok_or_else(|| error("invalid URI for request"))?
        .to_string();
    Ok(Url {
        text: s.to_string(),
        scheme,
        host: uri.authority().map_or("", |a| a.as_str()).to_string(),
        path: uri.path().to_string(),
        query: uri.query().unwrap_or("").to_string(),
    })
}

fn url(s: &CelString<'_>) -> Result<Url, ExecutionError> {
    parse_url(s.inner()).map_err(|e| ExecutionError::function_error("url", e))
}

fn get_scheme(u: &Url) -> CelString<'static> {
    CelString::from(u.scheme.clone())
}

fn get_host(u: &Url) -> CelString<'static> {
    CelString::from(
        u.host
            .rsplit_once('@')
            .map_or(u.host.as_str(), |(_, h)| h)
            .to_string(),
    )
}

/// The host without its port, an IPv6 literal without its brackets.
fn hostname(host: &str) -> &str {
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(h, _)| h);
    }
    host.split_once(':').map_or(host, |(h, _)| h)
}

fn get_hostname(u: &Url) -> CelString<'static> {
    CelString::from(hostname(&u.host).to_string())
}

fn get_port(u: &Url) -> CelString<'static> {
    let host = u.host.rsplit_once('@').map_or(u.host.as_str(), |(_, h)| h);
    let after = match host.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(_, r)| r),
        None => host.split_once(':').map_or("", |(_, p)| p),
    };
    CelString::from(after.trim_start_matches(':').to_string())
}

fn get_escaped_path(u: &Url) -> CelString<'static> {
    CelString::from(u.path.clone())
}

fn get_query<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let u = args
        .first()
        .and_then(|a| a.downcast_ref::<Url>())
        .ok_or_else(ExecutionError::missing_argument_or_target)?;
    let mut query: HashMap<String, Vec<Value>> = HashMap::new();
    for pair in u.query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(&s.replace('+', " "))
                .decode_utf8_lossy()
                .to_string()
        };
        query
            .entry(decode(k))
            .or_default()
            .push(Value::String(Arc::new(decode(v))));
    }
    let map: HashMap<String, Value> = query
        .into_iter()
        .map(|(k, v)| (k, Value::List(Arc::new(v))))
        .collect();
    let boxed: Box<dyn Val> = Value::from(map).try_into()?;
    Ok(CowVal::Owned(boxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read_as_go_reads_request_uris() {
        let u = parse_url("https://user@[::1]:8443/a%20b?x=1&x=2").ok();
        assert_eq!(u.as_ref().map(|u| hostname(&u.host)), Some("::1"));
        assert!(parse_url("not a url").is_err());
        assert!(parse_url("/just/a/path").is_ok());
    }
}
