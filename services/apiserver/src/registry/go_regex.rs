//! Go's regular expressions, as Kubernetes compiles a CRD schema's `pattern` (Go's `regexp`,
//! RE2 syntax), on Rust's `regex` crate, which takes the same syntax (inline flags such as
//! `(?i)`, named groups, `\pL`, `[[:alpha:]]`; no look-around, no back-references) and also
//! matches in linear time. Where the two differ, Go's meaning is kept: `\d`, `\w`, `\s` and
//! `\b` are ASCII-only in Go and Unicode in Rust, so they are spelled out as Go reads them.
//! `.` and `(?i)` work on characters (runes) in both.

/// Go's meaning of the Perl classes, in Rust's syntax (inside or outside a bracket class).
fn go_class(c: char) -> Option<&'static str> {
    Some(match c {
        'd' => "0-9",
        'w' => "0-9A-Za-z_",
        's' => "\\t\\n\\x0C\\r ",
        _ => return None,
    })
}

/// `pattern` with Go's ASCII-only `\d \w \s \b` (and their negations) made explicit.
fn translate(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    // Inside a bracket class: escapes become ranges there.
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(e) = chars.next() else {
                    out.push('\\');
                    break;
                };
                let lower = e.to_ascii_lowercase();
                match (go_class(lower), e.is_ascii_uppercase(), in_class) {
                    (Some(set), false, true) => out.push_str(set),
                    (Some(set), false, false) => {
                        out.push('[');
                        out.push_str(set);
                        out.push(']');
                    }
                    // A negated class inside brackets: a nested class (Rust takes it).
                    (Some(set), true, true) => {
                        out.push_str("[^");
                        out.push_str(set);
                        out.push(']');
                    }
                    (Some(set), true, false) => {
                        out.push_str("[^");
                        out.push_str(set);
                        out.push(']');
                    }
                    (None, _, false) if e == 'b' || e == 'B' => {
                        out.push_str("(?-u:\\");
                        out.push(e);
                        out.push(')');
                    }
                    _ => {
                        out.push('\\');
                        out.push(e);
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                // `]` first (after an optional `^`) is a literal, as in Go.
                let mut ahead = chars.clone();
                match ahead.next() {
                    Some('^') => {
                        out.push('^');
                        chars.next();
                        if ahead.next() == Some(']') {
                            out.push_str("\\]");
                            chars.next();
                        }
                    }
                    Some(']') => {
                        out.push_str("\\]");
                        chars.next();
                    }
                    _ => {}
                }
            }
            '[' if in_class && chars.clone().next() == Some(':') => {
                // `[:alpha:]` inside a class: copied whole.
                out.push('[');
                for d in chars.by_ref() {
                    out.push(d);
                    if d == ']' {
                        break;
                    }
                }
            }
            '[' => out.push_str("\\["),
            // Rust reads `&&` and `~~` in a class as set operations; Go, as characters.
            '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            _ => out.push(c),
        }
    }
    out
}

/// `pattern` compiled with Go's syntax and meaning; `Err` as Go's `regexp.Compile` would refuse
/// it (or, rarely, when a pattern is too large for the linear-time engine).
pub fn compile(pattern: &str) -> Result<regex::Regex, String> {
    // Rust's syntax takes some patterns Go's refuses; those Go refuses are refused here too.
    if pattern.contains("\\Q") {
        return Err("\\Q...\\E quoting is not supported".into());
    }
    regex::RegexBuilder::new(&translate(pattern))
        .size_limit(1 << 20)
        .build()
        .map_err(|e| match e {
            regex::Error::Syntax(s) => s.lines().last().unwrap_or_default().trim().to_string(),
            other => other.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, s: &str) -> bool {
        compile(pattern)
            .unwrap_or_else(|e| panic!("{pattern}: {e}"))
            .is_match(s)
    }

    #[test]
    fn the_prometheus_operators_patterns_compile_and_mean_what_go_means() {
        // alertmanagerconfigs: matchType; prometheusrules: a rule's partial_response_strategy.
        assert!(matches("^(?i)(abort|warn)?$", "Warn"));
        assert!(matches("^(?i)(abort|warn)?$", "ABORT"));
        assert!(matches("^(?i)(abort|warn)?$", ""));
        assert!(!matches("^(?i)(abort|warn)?$", "stop"));
        assert!(matches("^(=|!=|=~|!~)$", "=~"));
        assert!(matches(
            "(^0|([0-9]*[.])?[0-9]+((K|M|G|T|E|P)i?)?B)$",
            "512MiB"
        ));
        assert!(matches(
            "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
            "1h30m"
        ));
    }

    #[test]
    fn perl_classes_are_ascii_as_in_go() {
        assert!(matches(r"^\d+$", "123"));
        assert!(!matches(r"^\d+$", "١٢٣"));
        assert!(matches(r"^\D+$", "١٢٣"));
        assert!(!matches(r"^\w+$", "héllo"));
        assert!(matches(r"^[\w.-]+$", "a.b-c_d"));
        assert!(!matches(r"^[\w.-]+$", "é"));
        assert!(matches(r"^[^\s]+$", "x"));
        assert!(!matches(r"^\s$", "\u{a0}"));
        assert!(matches(r"\bfoo\b", "a foo b"));
        // `.` is a character, in Go as here.
        assert!(matches("^.{2}$", "éé"));
        // Escaped backslashes and brackets stay what they are.
        assert!(matches(r"^\\d$", r"\d"));
        assert!(matches(r"^[]a]+$", "]a"));
        assert!(matches(r"^[[:alpha:]]+$", "abc"));
    }

    #[test]
    fn what_go_refuses_is_refused() {
        for p in ["(?=a)b", r"(a)\1", "^[0-9", "(unclosed", r"\Qa.b\E"] {
            assert!(compile(p).is_err(), "{p}");
        }
    }
}
