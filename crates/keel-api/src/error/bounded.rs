//! Errors cut to a size every gRPC client accepts, whatever the input they echo.
//!
//! gRPC core (grpcio, and the C++, Ruby and PHP clients) counts a header block as the sum of
//! `name + value + 32` over its fields, the binary ones as the base64 text sent, and refuses
//! trailers past 8 KiB at random and past 16 KiB always. An error travels as a trailers-only
//! response: `:status`, `content-type`, `grpc-status`, `grpc-message` (percent-encoded, so up to
//! three bytes per byte) and the Status JSON in `grpc-status-details-bin` (base64, four bytes
//! per three). The caps below keep that block under 6.5 KiB: the JSON at most [`STATUS_MAX`]
//! bytes (5,464 as base64), the summary at most [`SUMMARY_MAX`] bytes (600 encoded), about 250
//! for the rest.

use super::{ApiError, DetailsJson, FieldCause, StatusJson, Target};

/// The Status JSON, in bytes, at most.
pub const STATUS_MAX: usize = 4096;
/// `grpc-message`, in bytes, at most: a summary; the whole message is in the Status.
pub const SUMMARY_MAX: usize = 200;
/// The message in the Status, in characters, at most.
const MESSAGE_MAX: usize = 1024;
/// Any one other string in the Status (the object's name, a cause's field or message), in
/// characters, at most. No valid name is longer (253).
const STRING_MAX: usize = 256;
/// A value the client sent, quoted in a message, in characters, at most.
const ECHO_MAX: usize = 64;
/// What a Status falls back to when even its capped strings do not fit (strings of control
/// characters, escaped as six bytes each): the message and each name, in characters.
const LAST_RESORT_MAX: usize = 64;

/// `s` cut to at most `max` characters, marked as cut.
pub fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((end, _)) => format!("{}... ({} characters in all)", &s[..end], s.chars().count()),
    }
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn truncate_bytes(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A value the client sent, quoted for a message: at most 64 characters of it, as Kubernetes
/// truncates long values in its messages.
pub fn echo(value: &str) -> String {
    format!("{:?}", shorten(value, ECHO_MAX))
}

/// A JSON value as apimachinery's field errors print the Go value it decodes to: a number or
/// boolean bare, a string quoted (cut as [`echo`] cuts it), `null` as `"null"`, an object or
/// list in Go's `%#v` syntax (`map[string]interface {}{"k":1}`), cut after 256 bytes.
pub fn go_value(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::String(s) => echo(s),
        Value::Null => "\"null\"".to_string(),
        Value::Number(_) | Value::Bool(_) => v.to_string(),
        other => {
            let mut text = String::new();
            go_syntax(other, &mut text);
            if text.len() > STRING_MAX {
                text = format!("{}...", truncate_bytes(&text, STRING_MAX));
            }
            text
        }
    }
}

/// `v` as Go's `%#v` prints the `interface{}` JSON decodes it to; stops growing past
/// `STRING_MAX` bytes ([`go_value`] cuts it there).
fn go_syntax(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    if out.len() > STRING_MAX {
        return;
    }
    match v {
        Value::Null => out.push_str("interface {}(nil)"),
        Value::Bool(_) | Value::Number(_) => out.push_str(&v.to_string()),
        Value::String(s) => out.push_str(&format!("{s:?}")),
        Value::Array(items) => {
            out.push_str("[]interface {}{");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                go_syntax(item, out);
            }
            out.push('}');
        }
        Value::Object(map) => {
            out.push_str("map[string]interface {}{");
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&format!("{k:?}:"));
                go_syntax(&map[k], out);
            }
            out.push('}');
        }
    }
}

/// An object's name, quoted for a message: at most 256 characters (no valid name is longer).
pub fn echo_name(name: &str) -> String {
    format!("{:?}", shorten_name(name))
}

/// An object's name for a message, unquoted, at most 256 characters.
pub fn shorten_name(name: &str) -> String {
    shorten(name, STRING_MAX)
}

fn cap_target(t: &Target, max: usize) -> Target {
    Target {
        group: shorten(&t.group, max),
        kind: shorten(&t.kind, max),
        name: shorten(&t.name, max),
    }
}

pub(super) fn status(
    e: &ApiError,
    message: String,
    target: Target,
    causes: Vec<FieldCause>,
) -> StatusJson {
    StatusJson {
        api_version: "v1".into(),
        kind: "Status".into(),
        status: "Failure".into(),
        message,
        reason: e.reason,
        details: DetailsJson {
            target,
            causes,
            retry_after_seconds: e.retry_after_seconds,
        },
        code: e.reason.http_code(),
    }
}

/// The Status JSON of `e`, at most [`STATUS_MAX`] bytes: every string capped, then as many
/// causes as fit (the message says how many there are), and if even that is too long, the
/// message and names cut further.
pub(super) fn status_json(e: &ApiError) -> Vec<u8> {
    let mut causes: Vec<FieldCause> = e
        .causes
        .iter()
        .map(|c| FieldCause {
            reason: shorten(&c.reason, STRING_MAX),
            message: shorten(&c.message, STRING_MAX),
            field: shorten(&c.field, STRING_MAX),
        })
        .collect();
    let message = shorten(&e.message, MESSAGE_MAX);
    let target = cap_target(&e.target, STRING_MAX);
    let size = |c: &[FieldCause]| serde_json::to_vec(c).map(|v| v.len()).unwrap_or(usize::MAX);
    let base = serde_json::to_vec(&status(e, message.clone(), target.clone(), Vec::new()))
        .unwrap_or_default();
    if base.len() > STATUS_MAX {
        let last = status(
            e,
            shorten(&e.message, LAST_RESORT_MAX),
            cap_target(&e.target, LAST_RESORT_MAX),
            Vec::new(),
        );
        return serde_json::to_vec(&last).unwrap_or_default();
    }
    // The room left for `,"causes":[...]`: the last causes go until the rest fit.
    let room = (STATUS_MAX - base.len()).saturating_sub(r#","causes":"#.len());
    while !causes.is_empty() && size(&causes) > room {
        causes.pop();
    }
    if causes.is_empty() {
        return base;
    }
    serde_json::to_vec(&status(e, message, target, causes)).unwrap_or_default()
}

/// The `grpc-message` summary and the Status JSON of `e`.
pub(super) fn encode(e: &ApiError) -> (String, Vec<u8>) {
    let summary = truncate_bytes(&e.message, SUMMARY_MAX).to_string();
    (summary, status_json(e))
}

#[cfg(test)]
mod tests {
    use base64::Engine;

    use super::*;
    use crate::Reason;

    /// What gRPC core counts for the trailers of this error (see the module doc), the
    /// summary at its worst (every byte percent-encoded).
    fn trailer_size(e: &ApiError) -> usize {
        let (summary, json) = encode(e);
        let b64 = base64::engine::general_purpose::STANDARD_NO_PAD
            .encode(&json)
            .len();
        let field = |name: &str, value: usize| name.len() + value + 32;
        field(":status", 3)
            + field("content-type", "application/grpc".len())
            + field("grpc-status", 2)
            + field("grpc-message", 3 * summary.len())
            + field("grpc-status-details-bin", b64)
    }

    /// What a client reads back of `e` from its trailers.
    fn from_wire(e: &ApiError) -> ApiError {
        let (_, json) = encode(e);
        ApiError::from_status_json(&json).unwrap_or_else(|| ApiError::internal("not a Status"))
    }

    fn hostile() -> Vec<ApiError> {
        let long = "x".repeat(5000);
        let controls = "\u{1}".repeat(5000);
        let wide = "é".repeat(5000);
        let configmap = |name: &str| Target::new("", "ConfigMap", name);
        let many_keys: Vec<FieldCause> = (0..40)
            .map(|i| {
                FieldCause::invalid(
                    format!("data[{}{i}]", "bad key ".repeat(20)),
                    &"bad key ".repeat(20),
                    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                )
            })
            .collect();
        vec![
            ApiError::invalid(configmap("cm"), many_keys),
            ApiError::not_found(configmap(&long)),
            ApiError::not_found(configmap(&controls)),
            ApiError::not_found(configmap(&wide)),
            ApiError::bad_request(
                configmap(""),
                format!("invalid label selector: {}", "a in (b), ".repeat(400)),
            ),
            ApiError::invalid(
                configmap(&controls),
                vec![FieldCause::invalid(controls.clone(), &controls, &controls); 100],
            ),
            ApiError::invalid(
                Target::new(&controls, &controls, &controls),
                vec![
                    FieldCause {
                        reason: controls.clone(),
                        message: controls.clone(),
                        field: controls.clone(),
                    };
                    100
                ],
            ),
        ]
    }

    #[test]
    fn every_error_fits_in_trailers_any_grpc_client_accepts() {
        for e in hostile() {
            let size = trailer_size(&e);
            assert!(size < 7 * 1024, "{size} bytes: {:?}", e.reason);
            let (summary, json) = encode(&e);
            assert!(summary.len() <= SUMMARY_MAX);
            assert!(json.len() <= STATUS_MAX);
        }
    }

    #[test]
    fn a_bounded_error_keeps_its_reason_target_and_first_causes() {
        let all = hostile();
        let back = from_wire(&all[0]);
        assert_eq!(back.reason, Reason::Invalid);
        assert_eq!(back.target, Target::new("", "ConfigMap", "cm"));
        assert!(!back.causes.is_empty() && back.causes.len() < 40);
        assert_eq!(back.causes[..], all[0].causes[..back.causes.len()]);
        assert!(back.message.ends_with(" more]"), "{}", back.message);
        // A name no object can have comes back cut, and says so.
        let back = from_wire(&all[1]);
        assert_eq!(back.reason, Reason::NotFound);
        assert!(back.target.name.ends_with("... (5000 characters in all)"));
        assert!(back.message.len() < 400, "{}", back.message);
    }

    #[test]
    fn small_errors_travel_whole() {
        let e = ApiError::invalid(
            Target::new("", "ConfigMap", "a"),
            vec![FieldCause::invalid("data[b c]", "b c", "not a valid key")],
        );
        let back = from_wire(&e);
        assert_eq!(back, e);
    }

    #[test]
    fn echoed_values_are_cut_on_a_character_boundary() {
        let e = echo(&"é".repeat(100));
        assert!(e.starts_with(&format!("\"{}...", "é".repeat(64))), "{e}");
        assert_eq!(echo("short"), "\"short\"");
        assert_eq!(truncate_bytes("éé", 3), "é");
    }
}
