//! A Kubernetes-shaped JSON object (`apiVersion`, `kind`, `metadata`, `spec`, `status`).

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::Metadata;

/// How deep a stored object may nest. serde_json refuses to parse past 128 levels, so every
/// object we store must stay below that to be readable again.
pub const MAX_DEPTH: usize = 100;

/// The largest object the API accepts, in bytes of JSON (as etcd's default request limit).
pub const MAX_OBJECT_BYTES: usize = 3 * 512 * 1024;

/// Why bytes are not an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    #[error("malformed JSON: {0}")]
    Malformed(String),
    #[error("the JSON is not an object")]
    NotAnObject,
    #[error("the object nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("the object is {size} bytes, more than the limit of {MAX_OBJECT_BYTES}")]
    TooLarge { size: usize },
}

/// A JSON object no deeper than [`MAX_DEPTH`] (the invariant). Its metadata is read through
/// [`Metadata`].
#[derive(Debug, Clone, PartialEq)]
pub struct Object(Map<String, Value>);

/// What selectors read of an object (namespace and name, labels, the controlling owner for
/// sharding, whether it is initialized, the fields a field selector names): a parsed
/// [`Object`] has it, and so does whatever a server keeps instead of one (the API server's
/// watch cache keeps JSON and these fields). The methods named as [`Metadata`]'s mean what
/// those mean.
pub trait Selectable {
    fn namespace(&self) -> &str;
    fn name(&self) -> &str;
    fn label(&self, key: &str) -> Option<&str>;
    /// The name of the controlling owner (`ownerReferences[].controller: true`), if any.
    fn controller_owner(&self) -> Option<&str>;
    fn is_initialized(&self) -> bool;
    /// The values a field selector compares at the kind's own field `paths` (`status.phase`;
    /// not `metadata.name` or `metadata.namespace`), read at once: a string as it is, a number
    /// or a boolean as JSON writes it; `None` where there is none (a field selector compares
    /// that as `""`, as Kubernetes does).
    fn fields(&self, paths: &[&str]) -> Vec<Option<String>>;
}

impl Selectable for Object {
    fn namespace(&self) -> &str {
        Metadata::namespace(self)
    }
    fn name(&self) -> &str {
        Metadata::name(self)
    }
    fn label(&self, key: &str) -> Option<&str> {
        Metadata::label(self, key)
    }
    fn controller_owner(&self) -> Option<&str> {
        Metadata::controller_owner(self)
    }
    fn is_initialized(&self) -> bool {
        Metadata::is_initialized(self)
    }
    fn fields(&self, paths: &[&str]) -> Vec<Option<String>> {
        paths
            .iter()
            .map(|p| field_at(&self.0, p).map(Cow::into_owned))
            .collect()
    }
}

/// The value at a dotted `path` of a JSON object, as [`Selectable::fields`] gives it.
pub fn field_at<'a>(map: &'a Map<String, Value>, path: &str) -> Option<Cow<'a, str>> {
    let (first, rest) = path.split_once('.').unwrap_or((path, ""));
    let mut value = map.get(first)?;
    for part in rest.split('.').filter(|p| !p.is_empty()) {
        value = value.get(part)?;
    }
    match value {
        Value::String(s) => Some(Cow::Borrowed(s)),
        Value::Bool(_) | Value::Number(_) => Some(Cow::Owned(value.to_string())),
        _ => None,
    }
}

impl Object {
    /// Parses an object from JSON bytes, enforcing the size and depth limits.
    pub fn from_slice(bytes: &[u8]) -> Result<Object, ObjectError> {
        if bytes.len() > MAX_OBJECT_BYTES {
            return Err(ObjectError::TooLarge { size: bytes.len() });
        }
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| ObjectError::Malformed(e.to_string()))?;
        Object::from_value(value)
    }

    /// Wraps a value, checking it is an object within the depth limit.
    pub fn from_value(value: Value) -> Result<Object, ObjectError> {
        if depth(&value) > MAX_DEPTH {
            return Err(ObjectError::TooDeep);
        }
        match value {
            Value::Object(map) => Ok(Object(map)),
            _ => Err(ObjectError::NotAnObject),
        }
    }

    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }

    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    pub fn as_map_mut(&mut self) -> &mut Map<String, Value> {
        &mut self.0
    }

    pub fn to_vec(&self) -> Vec<u8> {
        // Serializing a map of JSON values cannot fail.
        serde_json::to_vec(&self.0).unwrap_or_default()
    }

    pub fn api_version(&self) -> &str {
        self.str_field("apiVersion")
    }

    pub fn kind(&self) -> &str {
        self.str_field("kind")
    }

    fn str_field(&self, key: &str) -> &str {
        self.0.get(key).and_then(Value::as_str).unwrap_or("")
    }

    /// `metadata`, if it is an object.
    pub fn metadata(&self) -> Option<&Map<String, Value>> {
        self.0.get("metadata").and_then(Value::as_object)
    }

    /// `metadata`, created empty when absent (or replaced when not an object).
    pub fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        let entry = self
            .0
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        match entry {
            Value::Object(m) => m,
            _ => unreachable!("metadata was just made an object"),
        }
    }

    /// Sets or, with an empty value, removes a string field of `metadata`.
    pub fn set_meta_str(&mut self, key: &str, value: &str) {
        let meta = self.metadata_mut();
        if value.is_empty() {
            meta.remove(key);
        } else {
            meta.insert(key.into(), Value::String(value.into()));
        }
    }

    pub fn set_resource_version(&mut self, rv: &str) {
        self.set_meta_str("resourceVersion", rv);
    }
}

/// The nesting depth of a JSON value (a scalar is 0), computed without recursion so that no
/// input can exhaust the stack.
pub fn depth(value: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                max = max.max(d + 1);
                stack.extend(a.iter().map(|c| (c, d + 1)));
            }
            Value::Object(o) => {
                max = max.max(d + 1);
                stack.extend(o.values().map(|c| (c, d + 1)));
            }
            _ => {}
        }
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_non_objects_and_garbage() {
        assert_eq!(Object::from_slice(b"[1]"), Err(ObjectError::NotAnObject));
        assert!(matches!(
            Object::from_slice(b"{"),
            Err(ObjectError::Malformed(_))
        ));
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            Object::from_slice(deep.as_bytes()),
            Err(ObjectError::Malformed(_))
        ));
        let deep = format!(
            "{{\"a\":{}1{}}}",
            "[".repeat(MAX_DEPTH),
            "]".repeat(MAX_DEPTH)
        );
        assert_eq!(
            Object::from_slice(deep.as_bytes()),
            Err(ObjectError::TooDeep)
        );
    }

    #[test]
    fn reads_metadata() {
        let o = Object::from_slice(br#"{"kind":"Pod","metadata":{"name":"a","labels":{"x":"y"}}}"#)
            .unwrap();
        assert_eq!(o.kind(), "Pod");
        assert_eq!(Metadata::name(&o), "a");
        assert_eq!(Metadata::label(&o, "x"), Some("y"));
        assert_eq!(Metadata::namespace(&o), "");
    }
}
