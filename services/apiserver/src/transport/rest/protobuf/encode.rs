//! JSON → Kubernetes' protobuf, the inverse of `decode`: an object's JSON as the message of its
//! kind, enveloped as Kubernetes answers it. JSON fields the message does not have (keel's
//! `metadata.initializers`, `apiVersion` and `kind`, which the envelope carries) are left out;
//! a value of the wrong JSON type is an internal error, since a stored object passed
//! validation.

use base64::Engine as _;
use keel_api::ApiError;
use prost::Message as _;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value,
};
use serde_json::{Map, Value as Json};

use super::{
    MAGIC, META, descriptor, field_by_json_name, inline_fields, is_inline, is_string_list,
    put_bytes,
};

/// Why a value cannot be written, and where: `path` from the value up to the object, in
/// reverse (each level adds its field on the way out, so nothing is built unless it fails).
#[derive(Debug)]
struct Wrong {
    path: Vec<String>,
    why: String,
}

impl Wrong {
    fn new(why: impl Into<String>) -> Wrong {
        Wrong {
            path: Vec::new(),
            why: why.into(),
        }
    }

    fn at(mut self, segment: impl Into<String>) -> Wrong {
        self.path.push(segment.into());
        self
    }

    /// The internal error of an object that cannot be written.
    fn into_error(self, kind: &str, name: &str) -> ApiError {
        let path: Vec<String> = self.path.into_iter().rev().collect();
        ApiError::internal(format!(
            "{kind} {}: cannot be written as protobuf: {}: {}",
            keel_api::echo_name(name),
            path.join(""),
            self.why
        ))
    }
}

/// The JSON type of a value, for errors.
fn type_of(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

fn expected(want: &str, got: &Json) -> Wrong {
    Wrong::new(format!("expected {want}, got {}", type_of(got)))
}

/// An enveloped object of `api_version` `kind` (its JSON `fields`), as Kubernetes answers it:
/// the magic, then `runtime.Unknown{typeMeta, raw}`. `None` when Kubernetes has no message of
/// that kind that keel knows.
pub fn object(
    api_version: &str,
    kind: &str,
    fields: &Map<String, Json>,
) -> Result<Option<Vec<u8>>, ApiError> {
    let Some(desc) = descriptor(api_version, kind) else {
        return Ok(None);
    };
    let raw = message_of(&desc, fields)
        .map_err(|w| w.into_error(kind, name_of(fields)))?
        .encode_to_vec();
    Ok(Some(envelope(api_version, kind, &raw)))
}

/// [`object`] of a JSON value naming its own `apiVersion` and `kind` (a Status, a Scale, a
/// watch event's object). `None` as for `object`, and for a value that is not an object.
pub fn value(v: &Json) -> Result<Option<Vec<u8>>, ApiError> {
    let Json::Object(fields) = v else {
        return Ok(None);
    };
    let text = |k: &str| fields.get(k).and_then(Json::as_str).unwrap_or("");
    object(text("apiVersion"), text("kind"), fields)
}

/// An enveloped list of `api_version` `list_kind` (`ConfigMapList`): its `metadata`
/// (`ListMeta` JSON) and its items, each an object's JSON, as plain messages (not enveloped).
/// The whole answer is made at once, since the envelope starts with its length: it holds the
/// list once more, in protobuf (smaller than its JSON). `None` when the list kind has no
/// message.
pub fn list<I: AsRef<[u8]>>(
    api_version: &str,
    list_kind: &str,
    metadata: &Json,
    items: &[I],
) -> Result<Option<Vec<u8>>, ApiError> {
    let Some(desc) = descriptor(api_version, list_kind) else {
        return Ok(None);
    };
    let (Some(meta_field), Some(items_field)) = (
        desc.get_field_by_name("metadata"),
        desc.get_field_by_name("items"),
    ) else {
        return Ok(None);
    };
    let (Kind::Message(meta_desc), Kind::Message(item_desc)) =
        (meta_field.kind(), items_field.kind())
    else {
        return Ok(None);
    };
    let mut raw = Vec::new();
    let meta =
        message(&meta_desc, metadata).map_err(|w| w.at(".metadata").into_error(list_kind, ""))?;
    put_bytes(meta_field.number(), &meta.encode_to_vec(), &mut raw);
    for (i, item) in items.iter().enumerate() {
        let item: Map<String, Json> = serde_json::from_slice(item.as_ref()).map_err(|e| {
            ApiError::internal(format!("{list_kind}: item {i} is not a JSON object: {e}"))
        })?;
        let m = message_of(&item_desc, &item)
            .map_err(|w| w.into_error(item_desc.name(), name_of(&item)))?;
        put_bytes(items_field.number(), &m.encode_to_vec(), &mut raw);
    }
    Ok(Some(envelope(api_version, list_kind, &raw)))
}

/// One frame of a protobuf watch: the 4-byte big-endian length of a `meta.v1.WatchEvent`, then
/// the event itself (not enveloped), whose `object.raw` is the enveloped object.
pub fn watch_frame(event_type: &str, enveloped: &[u8]) -> Vec<u8> {
    let mut object = Vec::with_capacity(enveloped.len() + 8);
    put_bytes(1, enveloped, &mut object);
    let mut event = Vec::with_capacity(object.len() + event_type.len() + 12);
    put_bytes(1, event_type.as_bytes(), &mut event);
    put_bytes(2, &object, &mut event);
    // An event larger than 4 GiB cannot be: objects are at most a few MiB.
    let length = u32::try_from(event.len()).unwrap_or(u32::MAX);
    let mut frame = Vec::with_capacity(event.len() + 4);
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(&event);
    frame
}

/// The magic, then `runtime.Unknown{typeMeta{apiVersion, kind}, raw}`.
fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::with_capacity(api_version.len() + kind.len() + 4);
    put_bytes(1, api_version.as_bytes(), &mut type_meta);
    put_bytes(2, kind.as_bytes(), &mut type_meta);
    let mut out = Vec::with_capacity(MAGIC.len() + type_meta.len() + raw.len() + 12);
    out.extend_from_slice(MAGIC);
    put_bytes(1, &type_meta, &mut out);
    put_bytes(2, raw, &mut out);
    out
}

fn name_of(fields: &Map<String, Json>) -> &str {
    fields
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Json::as_str)
        .unwrap_or("")
}

/// A JSON value as a message of `desc`: the types whose JSON is not an object as Kubernetes
/// writes them, any other from its fields.
fn message(desc: &MessageDescriptor, v: &Json) -> Result<DynamicMessage, Wrong> {
    let mut m = DynamicMessage::new(desc.clone());
    let name = desc.full_name();
    match (name.strip_prefix(META).unwrap_or(name), v) {
        (".Time" | ".MicroTime", Json::String(s)) => {
            let (seconds, nanos) =
                rfc3339(s).ok_or_else(|| Wrong::new(format!("{s:?} is not an RFC 3339 time")))?;
            set(&mut m, "seconds", Value::I64(seconds))?;
            if nanos != 0 {
                set(&mut m, "nanos", Value::I32(nanos))?;
            }
        }
        (".Time" | ".MicroTime", other) => return Err(expected("a time", other)),
        (".Duration", Json::String(s)) => {
            let nanos =
                go_duration(s).ok_or_else(|| Wrong::new(format!("{s:?} is not a duration")))?;
            set(&mut m, "duration", Value::I64(nanos))?;
        }
        (".Duration", other) => return Err(expected("a duration", other)),
        ("k8s.io.apimachinery.pkg.util.intstr.IntOrString", Json::String(s)) => {
            set(&mut m, "type", Value::I64(1))?;
            set(&mut m, "strVal", Value::String(s.clone()))?;
        }
        ("k8s.io.apimachinery.pkg.util.intstr.IntOrString", Json::Number(_)) => {
            let n = integer(v).and_then(|n| i32::try_from(n).ok());
            let n = n.ok_or_else(|| Wrong::new(format!("{v} is not a 32-bit integer")))?;
            set(&mut m, "type", Value::I64(0))?;
            set(&mut m, "intVal", Value::I32(n))?;
        }
        ("k8s.io.apimachinery.pkg.util.intstr.IntOrString", other) => {
            return Err(expected("an integer or a string", other));
        }
        ("k8s.io.apimachinery.pkg.api.resource.Quantity", Json::String(s)) => {
            set(&mut m, "string", Value::String(s.clone()))?;
        }
        // A quantity written as a JSON number (`cpu: 1`) means the same as its string.
        ("k8s.io.apimachinery.pkg.api.resource.Quantity", Json::Number(n)) => {
            set(&mut m, "string", Value::String(n.to_string()))?;
        }
        ("k8s.io.apimachinery.pkg.api.resource.Quantity", other) => {
            return Err(expected("a quantity", other));
        }
        ("k8s.io.apimachinery.pkg.runtime.RawExtension", _) => {
            set(&mut m, "raw", Value::Bytes(raw_json(v)?.into()))?;
        }
        (".FieldsV1", _) => set(&mut m, "Raw", Value::Bytes(raw_json(v)?.into()))?,
        (_, Json::Array(items)) if is_string_list(name) => {
            let items_field = field(desc, "items")?;
            set(&mut m, "items", repeated(&items_field, items)?)?;
        }
        (_, Json::Object(fields)) => return message_of(desc, fields),
        (_, other) => return Err(expected("an object", other)),
    }
    Ok(m)
}

/// A message from a JSON object's fields; those the message does not have are left out, and
/// so are nulls (absent).
fn message_of(
    desc: &MessageDescriptor,
    fields: &Map<String, Json>,
) -> Result<DynamicMessage, Wrong> {
    let mut m = DynamicMessage::new(desc.clone());
    // An embedded struct takes its fields from among these (each sees the keys it knows).
    for field in inline_fields(desc) {
        if let Kind::Message(embedded) = field.kind() {
            let value = Value::Message(message_of(&embedded, fields)?);
            m.try_set_field(&field, value)
                .map_err(|e| Wrong::new(e.to_string()))?;
        }
    }
    for (key, v) in fields {
        if v.is_null() {
            continue;
        }
        let Some(field) = field_by_json_name(desc, key) else {
            continue;
        };
        if is_inline(desc, &field) {
            continue;
        }
        let value = field_value(&field, v).map_err(|w| w.at(format!(".{key}")))?;
        m.try_set_field(&field, value)
            .map_err(|e| Wrong::new(e.to_string()).at(format!(".{key}")))?;
    }
    Ok(m)
}

/// The value of one field: a map, a list or one value.
fn field_value(field: &FieldDescriptor, v: &Json) -> Result<Value, Wrong> {
    if field.is_map() {
        let Json::Object(entries) = v else {
            return Err(expected("an object", v));
        };
        let entry = match field.kind() {
            Kind::Message(entry) if entry.is_map_entry() => entry,
            _ => return Err(Wrong::new("a map field without an entry message")),
        };
        let (key_kind, value_kind) = (
            entry.map_entry_key_field().kind(),
            entry.map_entry_value_field().kind(),
        );
        let mut out = std::collections::HashMap::with_capacity(entries.len());
        for (k, item) in entries {
            if item.is_null() {
                continue;
            }
            let key = map_key(&key_kind, k).map_err(|w| w.at(format!("[{k:?}]")))?;
            let value = single(&value_kind, item).map_err(|w| w.at(format!("[{k:?}]")))?;
            out.insert(key, value);
        }
        Ok(Value::Map(out))
    } else if field.is_list() {
        let Json::Array(items) = v else {
            return Err(expected("a list", v));
        };
        repeated(field, items)
    } else {
        single(&field.kind(), v)
    }
}

fn repeated(field: &FieldDescriptor, items: &[Json]) -> Result<Value, Wrong> {
    let kind = field.kind();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        // Go's JSON reads null into a list as the element's zero value.
        let value = if item.is_null() {
            Value::default_value(&kind)
        } else {
            single(&kind, item).map_err(|w| w.at(format!("[{i}]")))?
        };
        out.push(value);
    }
    Ok(Value::List(out))
}

fn map_key(kind: &Kind, k: &str) -> Result<MapKey, Wrong> {
    let bad = || Wrong::new(format!("map key {k:?} is not a {kind:?}"));
    Ok(match kind {
        Kind::String => MapKey::String(k.to_string()),
        Kind::Bool => MapKey::Bool(k.parse().map_err(|_| bad())?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => MapKey::I32(k.parse().map_err(|_| bad())?),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => MapKey::I64(k.parse().map_err(|_| bad())?),
        Kind::Uint32 | Kind::Fixed32 => MapKey::U32(k.parse().map_err(|_| bad())?),
        Kind::Uint64 | Kind::Fixed64 => MapKey::U64(k.parse().map_err(|_| bad())?),
        _ => return Err(bad()),
    })
}

/// One value of a field's type.
fn single(kind: &Kind, v: &Json) -> Result<Value, Wrong> {
    let int = |what: &str| integer(v).ok_or_else(|| expected(what, v));
    let out_of_range = || Wrong::new(format!("{v} is out of range"));
    Ok(match kind {
        Kind::String => Value::String(v.as_str().ok_or_else(|| expected("a string", v))?.into()),
        Kind::Bool => Value::Bool(v.as_bool().ok_or_else(|| expected("a boolean", v))?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Value::I32(i32::try_from(int("an integer")?).map_err(|_| out_of_range())?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(int("an integer")?),
        Kind::Uint32 | Kind::Fixed32 => {
            Value::U32(u32::try_from(int("an integer")?).map_err(|_| out_of_range())?)
        }
        Kind::Uint64 | Kind::Fixed64 => match v.as_u64() {
            Some(n) => Value::U64(n),
            None => Value::U64(u64::try_from(int("an integer")?).map_err(|_| out_of_range())?),
        },
        Kind::Double => Value::F64(v.as_f64().ok_or_else(|| expected("a number", v))?),
        // Narrowed as Go's float32 JSON decoding does.
        #[allow(clippy::cast_possible_truncation)]
        Kind::Float => Value::F32(v.as_f64().ok_or_else(|| expected("a number", v))? as f32),
        Kind::Bytes => {
            let text = v.as_str().ok_or_else(|| expected("base64 bytes", v))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| Wrong::new(format!("not base64: {e}")))?;
            Value::Bytes(bytes.into())
        }
        Kind::Enum(e) => match v {
            Json::String(s) => Value::EnumNumber(
                e.get_value_by_name(s)
                    .ok_or_else(|| Wrong::new(format!("{s:?} is not a {}", e.name())))?
                    .number(),
            ),
            _ => Value::EnumNumber(i32::try_from(int("an enum")?).map_err(|_| out_of_range())?),
        },
        Kind::Message(desc) => Value::Message(message(desc, v)?),
    })
}

/// A JSON number as an integer: integral floats (`1.0`) too, as Go reads them.
fn integer(v: &Json) -> Option<i64> {
    let Json::Number(n) = v else {
        return None;
    };
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    let f = n.as_f64()?;
    // Exact below 2^53, which is all a JSON integer promises anyway.
    #[allow(clippy::cast_possible_truncation)]
    let i = f as i64;
    (f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0).then_some(i)
}

fn raw_json(v: &Json) -> Result<Vec<u8>, Wrong> {
    serde_json::to_vec(v).map_err(|e| Wrong::new(e.to_string()))
}

fn field(desc: &MessageDescriptor, name: &str) -> Result<FieldDescriptor, Wrong> {
    desc.get_field_by_name(name)
        .ok_or_else(|| Wrong::new(format!("{} has no field {name}", desc.full_name())))
}

fn set(m: &mut DynamicMessage, name: &str, value: Value) -> Result<(), Wrong> {
    let f = field(&m.descriptor(), name)?;
    m.try_set_field(&f, value)
        .map_err(|e| Wrong::new(e.to_string()))
}

/// An RFC 3339 time (`2024-05-01T10:00:00Z`, with a fraction, or an offset) as seconds and
/// nanoseconds since the Unix epoch.
fn rfc3339(s: &str) -> Option<(i64, i32)> {
    let b = s.as_bytes();
    let digits = |from: usize, to: usize| -> Option<i64> {
        let part = b.get(from..to)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let sep = |at: usize, ok: &[u8]| b.get(at).is_some_and(|c| ok.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 7)?, digits(8, 10)?);
    let (hour, minute, second) = (digits(11, 13)?, digits(14, 16)?, digits(17, 19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut at = 19;
    let mut nanos = 0i64;
    if sep(at, b".") {
        let start = at + 1;
        let mut end = start;
        while b.get(end).is_some_and(u8::is_ascii_digit) {
            end += 1;
        }
        if end == start {
            return None;
        }
        // Nanoseconds: the first nine digits, padded.
        let kept = (end - start).min(9);
        nanos = digits(start, start + kept)? * 10i64.pow(u32::try_from(9 - kept).ok()?);
        at = end;
    }
    let offset = match b.get(at)? {
        b'Z' | b'z' if at + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if at + 6 == b.len() && sep(at + 3, b":") => {
            let (h, m) = (digits(at + 1, at + 3)?, digits(at + 4, at + 6)?);
            if h > 23 || m > 59 {
                return None;
            }
            let minutes = h * 60 + m;
            if *sign == b'+' {
                minutes * 60
            } else {
                -minutes * 60
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset;
    Some((seconds, i32::try_from(nanos).ok()?))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A Go duration (`1h2m3.5s`, `300ms`, `-1.5h`, `0`) in nanoseconds.
fn go_duration(s: &str) -> Option<i64> {
    let (negative, magnitude) = s.strip_prefix('-').map_or((false, s), |m| (true, m));
    let nanos =
        i64::try_from(crate::transport::rest::query::go_duration(magnitude)?.as_nanos()).ok()?;
    Some(if negative { -nanos } else { nanos })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_read_as_rfc3339_with_fractions_and_offsets() {
        assert_eq!(rfc3339("1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(rfc3339("2024-05-01T10:00:00Z"), Some((1_714_557_600, 0)));
        assert_eq!(
            rfc3339("2024-05-01T10:00:00.000123Z"),
            Some((1_714_557_600, 123_000))
        );
        assert_eq!(
            rfc3339("2024-05-01T12:00:00+02:00"),
            Some((1_714_557_600, 0))
        );
        assert_eq!(rfc3339("1969-12-31T23:59:59Z"), Some((-1, 0)));
        for bad in [
            "",
            "2024-05-01",
            "2024-13-01T00:00:00Z",
            "2024-05-01T10:00:00",
            "x024-05-01T10:00:00Z",
            "2024-05-01T10:00:00.Z",
            "2024-05-01T10:00:00Zjunk",
        ] {
            assert_eq!(rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn durations_are_read_as_go_writes_them() {
        assert_eq!(go_duration("0"), Some(0));
        assert_eq!(go_duration("1h2m3s"), Some(3_723_000_000_000));
        assert_eq!(go_duration("-2m"), Some(-120_000_000_000));
        assert_eq!(go_duration("1x"), None);
    }

    #[test]
    fn integral_floats_are_integers_and_fractions_are_not() {
        assert_eq!(integer(&serde_json::json!(3)), Some(3));
        assert_eq!(integer(&serde_json::json!(3.0)), Some(3));
        assert_eq!(integer(&serde_json::json!(3.5)), None);
        assert_eq!(integer(&serde_json::json!("3")), None);
    }
}
