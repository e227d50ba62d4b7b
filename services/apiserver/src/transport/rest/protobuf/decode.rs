//! Kubernetes' protobuf → JSON: a body's message turned into the JSON Kubernetes would have
//! been sent, and from there served as any JSON body is.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use keel_api::{ApiError, Target};
use prost_reflect::{DynamicMessage, MapKey, ReflectMessage, Value};
use serde_json::{Map, Value as Json};

use super::{MAGIC, UNKNOWN, descriptor, is_inline, is_string_list, json_name, pool};

/// Go's zero `time.Time` as Unix seconds: what a protobuf `Time` carries for "unset" (JSON:
/// null).
const GO_ZERO_TIME: i64 = -62_135_596_800;

fn bad(t: &Target, why: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(t.clone(), format!("malformed protobuf body: {why}"))
}

/// The JSON of a protobuf body.
pub fn to_json(body: &[u8], t: &Target) -> Result<Vec<u8>, ApiError> {
    let pool = pool()?;
    let envelope = body.strip_prefix(MAGIC).ok_or_else(|| {
        bad(
            t,
            "it does not start with Kubernetes' magic bytes \"k8s\\0\"",
        )
    })?;
    let unknown = pool
        .get_message_by_name(UNKNOWN)
        .ok_or_else(|| ApiError::internal("no runtime.Unknown descriptor"))?;
    let unknown = DynamicMessage::decode(unknown, envelope).map_err(|e| bad(t, e))?;
    let text = |m: &DynamicMessage, field: &str| {
        m.get_field_by_name(field)
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let type_meta = unknown
        .get_field_by_name("typeMeta")
        .and_then(|v| v.as_message().cloned())
        .ok_or_else(|| bad(t, "no typeMeta"))?;
    let (api_version, kind) = (text(&type_meta, "apiVersion"), text(&type_meta, "kind"));
    let encoding = text(&unknown, "contentEncoding");
    if !encoding.is_empty() {
        return Err(bad(
            t,
            format!("contentEncoding {encoding:?} is not supported"),
        ));
    }
    let raw = unknown
        .get_field_by_name("raw")
        .and_then(|v| v.as_bytes().cloned())
        .unwrap_or_default();
    let descriptor = descriptor(&api_version, &kind).ok_or_else(|| {
        ApiError::new(
            keel_api::Reason::UnsupportedMediaType,
            t.clone(),
            format!(
                "keel has no protobuf form of {} {}: send application/json",
                keel_api::echo(&api_version),
                keel_api::echo(&kind)
            ),
        )
    })?;
    let object = DynamicMessage::decode(descriptor, raw).map_err(|e| bad(t, e))?;
    let mut json = message(&object);
    if let Json::Object(m) = &mut json {
        m.insert("apiVersion".into(), api_version.into());
        m.insert("kind".into(), kind.into());
    }
    serde_json::to_vec(&json).map_err(|e| ApiError::internal(e.to_string()))
}

/// A message as Kubernetes' JSON: fields by their JSON names, and the types whose JSON form is
/// not their message's (times, quantities, int-or-strings, raw JSON) as Kubernetes writes them.
fn message(m: &DynamicMessage) -> Json {
    let int = |field: &str| {
        m.get_field_by_name(field)
            .and_then(|v| v.as_i64().or(v.as_i32().map(i64::from)))
            .unwrap_or(0)
    };
    let string = |field: &str| {
        m.get_field_by_name(field)
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let raw_json = |field: &str| {
        m.get_field_by_name(field)
            .and_then(|v| v.as_bytes().cloned())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Json::Null)
    };
    match m.descriptor().full_name() {
        // Go writes its zero time as an empty message.
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time"
        | "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime"
            if m.fields().next().is_none() =>
        {
            Json::Null
        }
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time" => time(int("seconds"), 0),
        "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => time(int("seconds"), int("nanos")),
        "k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => {
            let d = Duration::from_nanos(u64::try_from(int("duration")).unwrap_or(0));
            Json::String(humantime::format_duration(d).to_string().replace(' ', ""))
        }
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => {
            if int("type") == 1 {
                Json::String(string("strVal"))
            } else {
                Json::from(int("intVal"))
            }
        }
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => Json::String(string("string")),
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => raw_json("raw"),
        "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1" => raw_json("Raw"),
        name if is_string_list(name) => m
            .get_field_by_name("items")
            .map_or(Json::Array(Vec::new()), |v| value(&v)),
        _ => {
            let desc = m.descriptor();
            let mut out = Map::new();
            for (field, v) in m.fields() {
                // Go writes empty strings that its JSON omits (`omitempty`): leave them out,
                // as a JSON client would have. Zero numbers and false stay: protobuf does not
                // say whether Go's field was a pointer (`replicas: 0` is meant) or a value
                // (`stdin: false` is noise).
                if v.as_str() == Some("") {
                    continue;
                }
                let v = value(v);
                match v {
                    Json::Object(embedded) if is_inline(&desc, &field) => out.extend(embedded),
                    v => {
                        out.insert(json_name(&desc, &field).to_string(), v);
                    }
                }
            }
            Json::Object(out)
        }
    }
}

fn value(v: &Value) -> Json {
    match v {
        Value::Bool(b) => Json::Bool(*b),
        Value::I32(n) => Json::from(*n),
        Value::I64(n) => Json::from(*n),
        Value::U32(n) => Json::from(*n),
        Value::U64(n) => Json::from(*n),
        Value::F32(n) => {
            serde_json::Number::from_f64(f64::from(*n)).map_or(Json::Null, Json::Number)
        }
        Value::F64(n) => serde_json::Number::from_f64(*n).map_or(Json::Null, Json::Number),
        Value::String(s) => Json::String(s.clone()),
        Value::Bytes(b) => Json::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Value::EnumNumber(n) => Json::from(*n),
        Value::Message(m) => message(m),
        Value::List(items) => Json::Array(items.iter().map(value).collect()),
        Value::Map(entries) => {
            let mut out = Map::new();
            for (k, v) in entries {
                let key = match k {
                    MapKey::String(s) => s.clone(),
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(n) => n.to_string(),
                    MapKey::I64(n) => n.to_string(),
                    MapKey::U32(n) => n.to_string(),
                    MapKey::U64(n) => n.to_string(),
                };
                out.insert(key, value(v));
            }
            Json::Object(out)
        }
    }
}

/// RFC 3339 in UTC, as Kubernetes writes times (with microseconds for a `MicroTime`); null for
/// Go's zero time, spelled out.
fn time(seconds: i64, nanos: i64) -> Json {
    if seconds == GO_ZERO_TIME || seconds < 0 {
        return Json::Null;
    }
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(seconds.unsigned_abs());
    if nanos > 0 {
        let at = at + Duration::from_nanos(nanos.unsigned_abs());
        return Json::String(humantime::format_rfc3339_micros(at).to_string());
    }
    Json::String(humantime::format_rfc3339_seconds(at).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_and_go_zero_is_null() {
        assert_eq!(time(0, 0), Json::String("1970-01-01T00:00:00Z".into()));
        assert_eq!(time(GO_ZERO_TIME, 0), Json::Null);
        assert_eq!(
            time(1, 5_000),
            Json::String("1970-01-01T00:00:01.000005Z".into())
        );
    }

    #[test]
    fn bodies_without_the_magic_or_garbled_are_bad_requests() {
        let t = Target::new("", "configmaps", "x");
        for body in [&b"{}"[..], b"k8s\x00\xff\xff\xff", b""] {
            let e = to_json(body, &t).err();
            assert_eq!(
                e.map(|e| e.reason),
                Some(keel_api::Reason::BadRequest),
                "{body:?}"
            );
        }
    }
}
