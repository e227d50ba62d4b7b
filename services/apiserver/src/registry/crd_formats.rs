//! The `format`s of CRD schemas that Kubernetes checks and the JSON Schema crate does not know,
//! or knows otherwise: as kube-openapi's `strfmt` checks them (Kubernetes 1.32). The formats
//! both know alike (`date`, `email`, `hostname`, `ipv4`, `ipv6`, `uri`) are the crate's.
//! Each checker takes a string; a value of another type is the type validator's business.

use std::net::IpAddr;
use std::sync::LazyLock;

use base64::Engine;
use regex::Regex;

/// The checkers keel registers, by format name. `date-time` is `datetime` written as JSON
/// Schema writes it; Kubernetes reads both (go-openapi ignores `-` in format names).
/// Whether a string is of a format.
pub type Checker = fn(&str) -> bool;

pub const CHECKERS: [(&str, Checker); 17] = [
    ("uuid", |s| matches(&UUID, s)),
    ("uuid3", |s| matches(&UUID3, s)),
    ("uuid4", |s| matches(&UUID4, s)),
    ("uuid5", |s| matches(&UUID5, s)),
    ("byte", |s| {
        base64::engine::general_purpose::STANDARD.decode(s).is_ok()
    }),
    ("bsonobjectid", |s| {
        s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit())
    }),
    ("cidr", is_cidr),
    ("mac", is_mac),
    ("hexcolor", |s| matches(&HEX_COLOR, s)),
    ("rgbcolor", |s| matches(&RGB_COLOR, s)),
    ("ssn", |s| matches(&SSN, s)),
    ("isbn", |s| is_isbn10(s) || is_isbn13(s)),
    ("isbn10", is_isbn10),
    ("isbn13", is_isbn13),
    ("creditcard", is_credit_card),
    ("duration", is_duration),
    ("datetime", is_date_time),
];

/// The formats both know alike, checked as the JSON Schema crate checks them: each by a
/// validator of that format alone, built once.
static SHARED: LazyLock<Vec<(&'static str, Option<jsonschema::Validator>)>> = LazyLock::new(|| {
    ["date", "email", "hostname", "ipv4", "ipv6", "uri"]
        .into_iter()
        .map(|name| {
            let schema = serde_json::json!({ "format": name });
            let validator = jsonschema::draft4::options()
                .should_validate_formats(true)
                .build(&schema)
                .ok();
            (name, validator)
        })
        .collect()
});

/// Whether `s` is of `format` (named as the schema writes it, `date-time` as `datetime`); a
/// format keel does not check takes any string.
pub fn is_valid(format: &str, s: &str) -> bool {
    let name = if format == "date-time" {
        "datetime"
    } else {
        format
    };
    if let Some((_, check)) = CHECKERS.iter().find(|(n, _)| *n == name) {
        return check(s);
    }
    match SHARED.iter().find(|(n, _)| *n == name) {
        Some((_, Some(validator))) => validator.is_valid(&serde_json::Value::String(s.into())),
        _ => true,
    }
}

/// A constant pattern (`every_checker_compiles` proves each one compiles).
type Pattern = LazyLock<Option<Regex>>;

fn matches(re: &Pattern, s: &str) -> bool {
    re.as_ref().is_some_and(|r| r.is_match(s))
}

fn regex(pattern: &str) -> Option<Regex> {
    Regex::new(pattern).ok()
}

static UUID: Pattern = LazyLock::new(|| {
    regex("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
});
static UUID3: Pattern = LazyLock::new(|| {
    regex("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
});
static UUID4: Pattern = LazyLock::new(|| {
    regex("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static UUID5: Pattern = LazyLock::new(|| {
    regex("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static HEX_COLOR: Pattern = LazyLock::new(|| regex("^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"));
static RGB_COLOR: Pattern = LazyLock::new(|| {
    let byte = r"(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])";
    regex(&format!(r"^rgb\(\s*{byte}\s*,\s*{byte}\s*,\s*{byte}\s*\)$"))
});
static SSN: Pattern = LazyLock::new(|| regex(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$"));
static CREDIT_CARD: Pattern = LazyLock::new(|| {
    regex(
        r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|(222[1-9]|22[3-9][0-9]|2[3-6][0-9]{2}|27[01][0-9]|2720)[0-9]{12}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11}|6[27][0-9]{14})$",
    )
});
/// Go's `time.ParseDuration`: signed sequence of decimal numbers with units, or `0`.
static GO_DURATION: Pattern =
    LazyLock::new(|| regex(r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"));
/// strfmt's other durations: a number and a unit, anywhere in the string.
static LOOSE_DURATION: Pattern = LazyLock::new(|| regex(r"(\d+)\s*([A-Za-zµ]+)"));
static DATE_TIME: Pattern = LazyLock::new(|| {
    regex(
        r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(:(\d{2})(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?$",
    )
});

/// Go's `net.ParseCIDR`: an IP address, `/`, a prefix length its family allows.
fn is_cidr(s: &str) -> bool {
    let Some((ip, prefix)) = s.split_once('/') else {
        return false;
    };
    let Ok(ip) = ip.parse::<IpAddr>() else {
        return false;
    };
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let max = if ip.is_ipv4() { 32 } else { 128 };
    prefix.parse::<u32>().is_ok_and(|p| p <= max)
}

/// Go's `net.ParseMAC`: 6, 8 or 20 bytes, as pairs of hex digits joined by `:` or `-`, or as
/// groups of four joined by `.`.
fn is_mac(s: &str) -> bool {
    let hex = |g: &str, n: usize| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit());
    let sizes = [6, 8, 20];
    for sep in [':', '-'] {
        let groups: Vec<&str> = s.split(sep).collect();
        if groups.len() > 1 {
            return sizes.contains(&groups.len()) && groups.iter().all(|g| hex(g, 2));
        }
    }
    let groups: Vec<&str> = s.split('.').collect();
    groups.len() > 1 && sizes.contains(&(groups.len() * 2)) && groups.iter().all(|g| hex(g, 4))
}

/// The digits of an ISBN with its `-` and spaces taken out (govalidator's `IsISBN`).
fn isbn_digits(s: &str) -> String {
    s.chars().filter(|c| *c != '-' && *c != ' ').collect()
}

fn is_isbn10(s: &str) -> bool {
    let d = isbn_digits(s);
    let b = d.as_bytes();
    if b.len() != 10
        || !b[..9].iter().all(u8::is_ascii_digit)
        || !(b[9].is_ascii_digit() || b[9] == b'X')
    {
        return false;
    }
    let sum: u32 = b
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let v = if *c == b'X' { 10 } else { u32::from(c - b'0') };
            (i as u32 + 1) * v
        })
        .sum();
    sum.is_multiple_of(11)
}

fn is_isbn13(s: &str) -> bool {
    let d = isbn_digits(s);
    let b = d.as_bytes();
    if b.len() != 13 || !b.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let sum: u32 = b[..12]
        .iter()
        .enumerate()
        .map(|(i, c)| u32::from(c - b'0') * if i % 2 == 0 { 1 } else { 3 })
        .sum();
    (10 - sum % 10) % 10 == u32::from(b[12] - b'0')
}

/// govalidator's `IsCreditCard`: the digits (anything else dropped) of a known card number,
/// with a right Luhn checksum.
fn is_credit_card(s: &str) -> bool {
    let digits: String = s.chars().filter(char::is_ascii_digit).collect();
    if !matches(&CREDIT_CARD, &digits) {
        return false;
    }
    let mut sum = 0;
    let mut double = false;
    for c in digits.bytes().rev() {
        let mut v = u32::from(c - b'0');
        if double {
            v *= 2;
            if v > 9 {
                v -= 9;
            }
        }
        sum += v;
        double = !double;
    }
    sum.is_multiple_of(10)
}

/// strfmt's `IsDuration`: Go's syntax (`1h30m`), or a number with a unit strfmt knows
/// (`3 days`, `2w`).
fn is_duration(s: &str) -> bool {
    // strfmt's units, each group's last one also as a prefix (`days`, `minutes`).
    const UNITS: [&[&str]; 8] = [
        &["ns", "nano"],
        &["us", "µs", "micro"],
        &["ms", "milli"],
        &["s", "sec"],
        &["m", "min"],
        &["h", "hr", "hour"],
        &["d", "day"],
        &["w", "wk", "week"],
    ];
    let known = |unit: &str| {
        let unit = unit.to_lowercase();
        UNITS.iter().any(|group| {
            group.contains(&unit.as_str()) || group.last().is_some_and(|l| unit.starts_with(l))
        })
    };
    matches(&GO_DURATION, s)
        || LOOSE_DURATION.as_ref().is_some_and(|re| {
            re.captures_iter(s)
                .any(|c| c.get(2).is_some_and(|u| known(u.as_str())))
        })
}

/// strfmt's `IsDateTime`: a date and a time of day (seconds and fraction optional), `T` or a
/// space between, a zone optional; every field in range.
fn is_date_time(s: &str) -> bool {
    let Some(c) = DATE_TIME.as_ref().and_then(|re| re.captures(s)) else {
        return false;
    };
    let n = |i: usize| c.get(i).map_or(Some(0), |m| m.as_str().parse::<u32>().ok());
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(sec)) =
        (n(1), n(2), n(3), n(4), n(5), n(7))
    else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match mo {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d) && h < 24 && mi < 60 && sec < 60
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_checker_compiles() {
        for re in [
            &UUID,
            &UUID3,
            &UUID4,
            &UUID5,
            &HEX_COLOR,
            &RGB_COLOR,
            &SSN,
            &CREDIT_CARD,
            &GO_DURATION,
            &LOOSE_DURATION,
            &DATE_TIME,
        ] {
            assert!(re.is_some());
        }
    }

    #[test]
    fn formats_take_what_strfmt_takes() {
        let check = |format: &str, s: &str| {
            let (_, f) = CHECKERS.iter().find(|(n, _)| *n == format).unwrap();
            f(s)
        };
        for (format, good, bad) in [
            (
                "uuid",
                "6BA7B810-9DAD-11D1-80B4-00C04FD430C8",
                "6ba7b810-9dad-11d1-80b4",
            ),
            (
                "uuid4",
                "f47ac10b-58cc-4372-a567-0e02b2c3d479",
                "f47ac10b-58cc-3372-a567-0e02b2c3d479",
            ),
            ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
            ("cidr", "fd00::/64", "fd00::"),
            ("mac", "01:23:45:67:89:ab", "01:23:45:67:89"),
            ("mac", "0123.4567.89ab", "0123.4567"),
            ("isbn10", "0321751043", "0321751044"),
            ("isbn13", "978-0321751041", "978-0321751042"),
            ("creditcard", "4111 1111 1111 1111", "4111 1111 1111 1112"),
            ("duration", "1h30m", "soon"),
            ("duration", "3 days", "3"),
            ("datetime", "2024-02-29T12:00:00Z", "2023-02-29T12:00:00Z"),
            ("hexcolor", "#fff", "#ffff"),
            ("rgbcolor", "rgb(1, 2, 255)", "rgb(1,2,256)"),
            ("ssn", "123-45-6789", "123-456-789"),
            (
                "bsonobjectid",
                "507f1f77bcf86cd799439011",
                "507f1f77bcf86cd79943901",
            ),
        ] {
            assert!(check(format, good), "{format} refuses {good}");
            assert!(!check(format, bad), "{format} takes {bad}");
        }
    }
}
