//! The functions the type checker knows, with cel-go's and Kubernetes' overload ids (the cost
//! estimator keys on them): the standard library, cel-go's strings (version 2), sets and
//! optional types, and Kubernetes' lists, regex, URL, IP, CIDR, quantity, format and authz
//! libraries (docs/cel.md §1.3-1.4). One line per overload, parsed once.

use std::collections::HashMap;
use std::sync::LazyLock;

use crate::types::Type;

/// One overload of a function.
#[derive(Debug)]
pub(crate) struct Overload {
    pub id: String,
    /// Called on a receiver (`s.contains(x)`), which is the first of `params`.
    pub member: bool,
    pub params: Vec<Type>,
    pub result: Type,
    /// How many type parameters (`Param(0..n)`) it has.
    pub type_params: u32,
}

/// `id: name(args) -> result`, or `id: [receiver] name(args) -> result` for a member function.
/// Single capitals are type parameters.
const DECLARATIONS: &str = "
conditional: _?_:_(bool, A, A) -> A
logical_and: _&&_(bool, bool) -> bool
logical_or: _||_(bool, bool) -> bool
logical_not: !_(bool) -> bool
not_strictly_false: @not_strictly_false(bool) -> bool
equals: _==_(A, A) -> bool
not_equals: _!=_(A, A) -> bool
add_bytes: _+_(bytes, bytes) -> bytes
add_double: _+_(double, double) -> double
add_duration_duration: _+_(duration, duration) -> duration
add_duration_timestamp: _+_(duration, timestamp) -> timestamp
add_timestamp_duration: _+_(timestamp, duration) -> timestamp
add_int64: _+_(int, int) -> int
add_list: _+_(list(A), list(A)) -> list(A)
add_string: _+_(string, string) -> string
add_uint64: _+_(uint, uint) -> uint
divide_double: _/_(double, double) -> double
divide_int64: _/_(int, int) -> int
divide_uint64: _/_(uint, uint) -> uint
modulo_int64: _%_(int, int) -> int
modulo_uint64: _%_(uint, uint) -> uint
multiply_double: _*_(double, double) -> double
multiply_int64: _*_(int, int) -> int
multiply_uint64: _*_(uint, uint) -> uint
negate_double: -_(double) -> double
negate_int64: -_(int) -> int
subtract_double: _-_(double, double) -> double
subtract_duration_duration: _-_(duration, duration) -> duration
subtract_int64: _-_(int, int) -> int
subtract_timestamp_duration: _-_(timestamp, duration) -> timestamp
subtract_timestamp_timestamp: _-_(timestamp, timestamp) -> duration
subtract_uint64: _-_(uint, uint) -> uint
index_list: _[_](list(A), int) -> A
index_map: _[_](map(A, B), A) -> B
in_list: @in(A, list(A)) -> bool
in_map: @in(A, map(A, B)) -> bool
size_bytes: size(bytes) -> int
size_bytes_inst: [bytes] size() -> int
size_list: size(list(A)) -> int
size_list_inst: [list(A)] size() -> int
size_map: size(map(A, B)) -> int
size_map_inst: [map(A, B)] size() -> int
size_string: size(string) -> int
size_string_inst: [string] size() -> int
type: type(A) -> type(A)
bool_to_bool: bool(bool) -> bool
string_to_bool: bool(string) -> bool
bytes_to_bytes: bytes(bytes) -> bytes
string_to_bytes: bytes(string) -> bytes
double_to_double: double(double) -> double
int64_to_double: double(int) -> double
string_to_double: double(string) -> double
uint64_to_double: double(uint) -> double
duration_to_duration: duration(duration) -> duration
int64_to_duration: duration(int) -> duration
string_to_duration: duration(string) -> duration
to_dyn: dyn(A) -> dyn
int64_to_int64: int(int) -> int
double_to_int64: int(double) -> int
duration_to_int64: int(duration) -> int
string_to_int64: int(string) -> int
timestamp_to_int64: int(timestamp) -> int
uint64_to_int64: int(uint) -> int
string_to_string: string(string) -> string
bool_to_string: string(bool) -> string
bytes_to_string: string(bytes) -> string
double_to_string: string(double) -> string
duration_to_string: string(duration) -> string
int64_to_string: string(int) -> string
timestamp_to_string: string(timestamp) -> string
uint64_to_string: string(uint) -> string
timestamp_to_timestamp: timestamp(timestamp) -> timestamp
int64_to_timestamp: timestamp(int) -> timestamp
string_to_timestamp: timestamp(string) -> timestamp
uint64_to_uint64: uint(uint) -> uint
double_to_uint64: uint(double) -> uint
int64_to_uint64: uint(int) -> uint
string_to_uint64: uint(string) -> uint
contains_string: [string] contains(string) -> bool
ends_with_string: [string] endsWith(string) -> bool
starts_with_string: [string] startsWith(string) -> bool
matches: matches(string, string) -> bool
matches_string: [string] matches(string) -> bool
timestamp_to_year: [timestamp] getFullYear() -> int
timestamp_to_year_with_tz: [timestamp] getFullYear(string) -> int
timestamp_to_month: [timestamp] getMonth() -> int
timestamp_to_month_with_tz: [timestamp] getMonth(string) -> int
timestamp_to_day_of_year: [timestamp] getDayOfYear() -> int
timestamp_to_day_of_year_with_tz: [timestamp] getDayOfYear(string) -> int
timestamp_to_day_of_month: [timestamp] getDayOfMonth() -> int
timestamp_to_day_of_month_with_tz: [timestamp] getDayOfMonth(string) -> int
timestamp_to_day_of_month_1_based: [timestamp] getDate() -> int
timestamp_to_day_of_month_1_based_with_tz: [timestamp] getDate(string) -> int
timestamp_to_day_of_week: [timestamp] getDayOfWeek() -> int
timestamp_to_day_of_week_with_tz: [timestamp] getDayOfWeek(string) -> int
timestamp_to_hours: [timestamp] getHours() -> int
timestamp_to_hours_with_tz: [timestamp] getHours(string) -> int
duration_to_hours: [duration] getHours() -> int
timestamp_to_minutes: [timestamp] getMinutes() -> int
timestamp_to_minutes_with_tz: [timestamp] getMinutes(string) -> int
duration_to_minutes: [duration] getMinutes() -> int
timestamp_to_seconds: [timestamp] getSeconds() -> int
timestamp_to_seconds_with_tz: [timestamp] getSeconds(string) -> int
duration_to_seconds: [duration] getSeconds() -> int
timestamp_to_milliseconds: [timestamp] getMilliseconds() -> int
timestamp_to_milliseconds_with_tz: [timestamp] getMilliseconds(string) -> int
duration_to_milliseconds: [duration] getMilliseconds() -> int
string_char_at_int: [string] charAt(int) -> string
string_index_of_string: [string] indexOf(string) -> int
string_index_of_string_int: [string] indexOf(string, int) -> int
string_last_index_of_string: [string] lastIndexOf(string) -> int
string_last_index_of_string_int: [string] lastIndexOf(string, int) -> int
string_lower_ascii: [string] lowerAscii() -> string
string_replace_string_string: [string] replace(string, string) -> string
string_replace_string_string_int: [string] replace(string, string, int) -> string
string_split_string: [string] split(string) -> list(string)
string_split_string_int: [string] split(string, int) -> list(string)
string_substring_int: [string] substring(int) -> string
string_substring_int_int: [string] substring(int, int) -> string
string_trim: [string] trim() -> string
string_upper_ascii: [string] upperAscii() -> string
string_format: [string] format(list(dyn)) -> string
strings_quote: strings.quote(string) -> string
list_join: [list(string)] join() -> string
list_join_string: [list(string)] join(string) -> string
list_sets_contains_list: sets.contains(list(A), list(A)) -> bool
list_sets_equivalent_list: sets.equivalent(list(A), list(A)) -> bool
list_sets_intersects_list: sets.intersects(list(A), list(A)) -> bool
optional_of: optional.of(A) -> optional_type(A)
optional_ofNonZeroValue: optional.ofNonZeroValue(A) -> optional_type(A)
optional_none: optional.none() -> optional_type(A)
optional_value: [optional_type(A)] value() -> A
optional_hasValue: [optional_type(A)] hasValue() -> bool
optional_or_optional: [optional_type(A)] or(optional_type(A)) -> optional_type(A)
optional_orValue_value: [optional_type(A)] orValue(A) -> A
list_optindex_optional_int: _[?_](list(A), int) -> optional_type(A)
optional_list_optindex_optional_int: _[?_](optional_type(list(A)), int) -> optional_type(A)
map_optindex_optional_value: _[?_](map(A, B), A) -> optional_type(B)
optional_map_optindex_optional_value: _[?_](optional_type(map(A, B)), A) -> optional_type(B)
optional_list_index_int: _[_](optional_type(list(A)), int) -> optional_type(A)
optional_map_index_value: _[_](optional_type(map(A, B)), A) -> optional_type(B)
list_is_sorted: [list(A)] isSorted() -> bool
list_sum: [list(A)] sum() -> A
list_min: [list(A)] min() -> A
list_max: [list(A)] max() -> A
list_a_index_of_int: [list(A)] indexOf(A) -> int
list_a_last_index_of_int: [list(A)] lastIndexOf(A) -> int
string_find_string: [string] find(string) -> string
string_find_all_string: [string] findAll(string) -> list(string)
string_find_all_string_int: [string] findAll(string, int) -> list(string)
string_to_url: url(string) -> kubernetes.URL
is_url_string: isURL(string) -> bool
url_get_scheme: [kubernetes.URL] getScheme() -> string
url_get_host: [kubernetes.URL] getHost() -> string
url_get_hostname: [kubernetes.URL] getHostname() -> string
url_get_port: [kubernetes.URL] getPort() -> string
url_get_escaped_path: [kubernetes.URL] getEscapedPath() -> string
url_get_query: [kubernetes.URL] getQuery() -> map(string, list(string))
string_to_quantity: quantity(string) -> kubernetes.Quantity
is_quantity_string: isQuantity(string) -> bool
quantity_sign: sign(kubernetes.Quantity) -> int
quantity_sign_member: [kubernetes.Quantity] sign() -> int
quantity_is_greater_than: [kubernetes.Quantity] isGreaterThan(kubernetes.Quantity) -> bool
quantity_is_less_than: [kubernetes.Quantity] isLessThan(kubernetes.Quantity) -> bool
quantity_compare_to: [kubernetes.Quantity] compareTo(kubernetes.Quantity) -> int
quantity_get_float: [kubernetes.Quantity] asApproximateFloat() -> double
quantity_get_int: [kubernetes.Quantity] asInteger() -> int
quantity_is_integer: [kubernetes.Quantity] isInteger() -> bool
quantity_add: [kubernetes.Quantity] add(kubernetes.Quantity) -> kubernetes.Quantity
quantity_add_int: [kubernetes.Quantity] add(int) -> kubernetes.Quantity
quantity_sub: [kubernetes.Quantity] sub(kubernetes.Quantity) -> kubernetes.Quantity
quantity_sub_int: [kubernetes.Quantity] sub(int) -> kubernetes.Quantity
string_to_ip: ip(string) -> net.IP
ip_family: [net.IP] family() -> int
ip_is_canonical: ip.isCanonical(string) -> bool
ip_is_unspecified: [net.IP] isUnspecified() -> bool
ip_is_loopback: [net.IP] isLoopback() -> bool
ip_is_link_local_multicast: [net.IP] isLinkLocalMulticast() -> bool
ip_is_link_local_unicast: [net.IP] isLinkLocalUnicast() -> bool
ip_is_global_unicast: [net.IP] isGlobalUnicast() -> bool
is_ip: isIP(string) -> bool
ip_to_string: string(net.IP) -> string
string_to_cidr: cidr(string) -> net.CIDR
cidr_contains_ip_string: [net.CIDR] containsIP(string) -> bool
cidr_contains_ip_ip: [net.CIDR] containsIP(net.IP) -> bool
cidr_contains_cidr_string: [net.CIDR] containsCIDR(string) -> bool
cidr_contains_cidr: [net.CIDR] containsCIDR(net.CIDR) -> bool
cidr_ip: [net.CIDR] ip() -> net.IP
cidr_prefix_length: [net.CIDR] prefixLength() -> int
cidr_masked: [net.CIDR] masked() -> net.CIDR
is_cidr: isCIDR(string) -> bool
cidr_to_string: string(net.CIDR) -> string
format_named: format.named(string) -> optional_type(kubernetes.NamedFormat)
format_dns1123Label: format.dns1123Label() -> kubernetes.NamedFormat
format_dns1123Subdomain: format.dns1123Subdomain() -> kubernetes.NamedFormat
format_dns1035Label: format.dns1035Label() -> kubernetes.NamedFormat
format_qualifiedName: format.qualifiedName() -> kubernetes.NamedFormat
format_dns1123LabelPrefix: format.dns1123LabelPrefix() -> kubernetes.NamedFormat
format_dns1123SubdomainPrefix: format.dns1123SubdomainPrefix() -> kubernetes.NamedFormat
format_dns1035LabelPrefix: format.dns1035LabelPrefix() -> kubernetes.NamedFormat
format_labelValue: format.labelValue() -> kubernetes.NamedFormat
format_uri: format.uri() -> kubernetes.NamedFormat
format_uuid: format.uuid() -> kubernetes.NamedFormat
format_byte: format.byte() -> kubernetes.NamedFormat
format_date: format.date() -> kubernetes.NamedFormat
format_datetime: format.datetime() -> kubernetes.NamedFormat
format_validate: [kubernetes.NamedFormat] validate(string) -> optional_type(list(string))
authorizer_path: [kubernetes.authorization.Authorizer] path(string) -> kubernetes.authorization.PathCheck
authorizer_group: [kubernetes.authorization.Authorizer] group(string) -> kubernetes.authorization.GroupCheck
authorizer_serviceaccount: [kubernetes.authorization.Authorizer] serviceAccount(string, string) -> kubernetes.authorization.Authorizer
groupcheck_resource: [kubernetes.authorization.GroupCheck] resource(string) -> kubernetes.authorization.ResourceCheck
resourcecheck_subresource: [kubernetes.authorization.ResourceCheck] subresource(string) -> kubernetes.authorization.ResourceCheck
resourcecheck_namespace: [kubernetes.authorization.ResourceCheck] namespace(string) -> kubernetes.authorization.ResourceCheck
resourcecheck_name: [kubernetes.authorization.ResourceCheck] name(string) -> kubernetes.authorization.ResourceCheck
resourcecheck_fieldselector: [kubernetes.authorization.ResourceCheck] fieldSelector(string) -> kubernetes.authorization.ResourceCheck
resourcecheck_labelselector: [kubernetes.authorization.ResourceCheck] labelSelector(string) -> kubernetes.authorization.ResourceCheck
resourcecheck_check: [kubernetes.authorization.ResourceCheck] check(string) -> kubernetes.authorization.Decision
pathcheck_check: [kubernetes.authorization.PathCheck] check(string) -> kubernetes.authorization.Decision
decision_allowed: [kubernetes.authorization.Decision] allowed() -> bool
decision_reason: [kubernetes.authorization.Decision] reason() -> string
decision_errored: [kubernetes.authorization.Decision] errored() -> bool
decision_error: [kubernetes.authorization.Decision] error() -> string
";

/// The ordering operators, over every pair Kubernetes' `CrossTypeNumericComparisons` allows.
fn comparisons() -> Vec<String> {
    let pairs = [
        ("bool", "bool", "bool"),
        ("int64", "int", "int"),
        ("int64_double", "int", "double"),
        ("int64_uint64", "int", "uint"),
        ("uint64", "uint", "uint"),
        ("uint64_double", "uint", "double"),
        ("uint64_int64", "uint", "int"),
        ("double", "double", "double"),
        ("double_int64", "double", "int"),
        ("double_uint64", "double", "uint"),
        ("string", "string", "string"),
        ("bytes", "bytes", "bytes"),
        ("timestamp", "timestamp", "timestamp"),
        ("duration", "duration", "duration"),
    ];
    let ops = [
        ("less", "_<_"),
        ("less_equals", "_<=_"),
        ("greater", "_>_"),
        ("greater_equals", "_>=_"),
    ];
    let mut lines = Vec::new();
    for (prefix, op) in ops {
        for (suffix, a, b) in pairs {
            lines.push(format!("{prefix}_{suffix}: {op}({a}, {b}) -> bool"));
        }
    }
    lines
}

/// Every function by name (global and member overloads together, as cel-go keeps them).
pub(crate) static FUNCTIONS: LazyLock<HashMap<String, Vec<Overload>>> = LazyLock::new(|| {
    let mut functions: HashMap<String, Vec<Overload>> = HashMap::new();
    let lines = DECLARATIONS
        .lines()
        .map(str::to_string)
        .chain(comparisons())
        .filter(|l| !l.trim().is_empty());
    for line in lines {
        // The table is this file's: a line that does not parse is left out (and a test says so).
        if let Some((name, overload)) = parse_line(&line) {
            functions.entry(name).or_default().push(overload);
        }
    }
    functions
});

fn parse_line(line: &str) -> Option<(String, Overload)> {
    let (id, rest) = line.split_once(": ")?;
    let id = id.trim().to_string();
    let (signature, result) = rest.rsplit_once(" -> ")?;
    let mut params = Vec::new();
    let mut letters: Vec<char> = Vec::new();
    let (member, signature) = match signature.strip_prefix('[') {
        Some(s) => {
            let (receiver, s) = s.split_once("] ")?;
            params.push(parse_type(receiver, &mut letters)?);
            (true, s)
        }
        None => (false, signature),
    };
    let open = signature.find('(')?;
    let name = &signature[..open];
    let args = signature[open + 1..].strip_suffix(')')?;
    for arg in split_top(args) {
        params.push(parse_type(arg, &mut letters)?);
    }
    let result = parse_type(result, &mut letters)?;
    Some((
        name.to_string(),
        Overload {
            id,
            member,
            params,
            result,
            type_params: letters.len() as u32,
        },
    ))
}

/// `a, list(b), map(c, d)` split at its top-level commas.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(s[start..].trim());
    }
    out
}

fn parse_type(s: &str, letters: &mut Vec<char>) -> Option<Type> {
    let s = s.trim();
    let (head, params) = match s.find('(') {
        Some(open) => (&s[..open], split_top(s[open + 1..].strip_suffix(')')?)),
        None => (s, Vec::new()),
    };
    let mut params = params
        .into_iter()
        .map(|p| parse_type(p, letters))
        .collect::<Option<Vec<Type>>>()?;
    let mut one = || (params.len() == 1).then(|| params.remove(0));
    Some(match head {
        "bool" => Type::Bool,
        "int" => Type::Int,
        "uint" => Type::Uint,
        "double" => Type::Double,
        "string" => Type::String,
        "bytes" => Type::Bytes,
        "duration" => Type::Duration,
        "timestamp" => Type::Timestamp,
        "dyn" => Type::Dyn,
        "list" => Type::list(one()?),
        "type" => Type::Kind(Box::new(one()?)),
        "map" if params.len() == 2 => {
            let value = params.pop()?;
            Type::map(params.pop()?, value)
        }
        letter if letter.len() == 1 && letter.chars().all(|c| c.is_ascii_uppercase()) => {
            let c = letter.chars().next()?;
            let index = match letters.iter().position(|l| *l == c) {
                Some(i) => i,
                None => {
                    letters.push(c);
                    letters.len() - 1
                }
            };
            Type::Param(index as u32)
        }
        name => Type::Opaque(name.to_string(), params),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_declaration_parses() {
        let lines = DECLARATIONS
            .lines()
            .map(str::to_string)
            .chain(comparisons())
            .filter(|l| !l.trim().is_empty());
        for line in lines {
            assert!(parse_line(&line).is_some(), "{line}");
        }
        let index = FUNCTIONS.get("_[_]").map(Vec::len);
        assert_eq!(index, Some(4));
        let contains = FUNCTIONS.get("contains").and_then(|o| o.first());
        assert!(contains.is_some_and(|o| o.member && o.params.len() == 2));
    }
}
