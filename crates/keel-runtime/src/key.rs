//! The key of an object in a cache and a work queue: `namespace/name`, or `name` when
//! cluster-scoped.

use std::fmt;
use std::str::FromStr;

use keel_api::Metadata;
use serde_json::Value;

/// Why a key could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The object has no `metadata.name`: the API server never sends one, so a cache skips it.
    #[error("the object has no metadata.name")]
    NoName,
    /// The text is not `name` or `namespace/name` (empty parts, or more than one `/`).
    #[error("{0:?} is not a key: want \"name\" or \"namespace/name\"")]
    Malformed(String),
}

/// Names an object: its namespace ("" for cluster-scoped objects) and name.
///
/// Written `namespace/name`, or `name` alone when cluster-scoped, as client-go's
/// `MetaNamespaceKeyFunc` writes it, so logs read the same in both worlds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// "" for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of an object: its `metadata.namespace` (absent: cluster-scoped) and `metadata.name`.
    pub fn from_object(obj: &Value) -> Result<ObjectKey, KeyError> {
        if obj.name().is_empty() {
            return Err(KeyError::NoName);
        }
        Ok(ObjectKey::new(obj.namespace(), obj.name()))
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

impl FromStr for ObjectKey {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<ObjectKey, KeyError> {
        let malformed = || KeyError::Malformed(s.to_string());
        let (namespace, name) = match s.split_once('/') {
            None => ("", s),
            Some((ns, name)) if !ns.is_empty() && !name.contains('/') => (ns, name),
            Some(_) => return Err(malformed()),
        };
        if name.is_empty() {
            return Err(malformed());
        }
        Ok(ObjectKey::new(namespace, name))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn namespaced_keys_are_namespace_slash_name() {
        let k = ObjectKey::from_object(&json!({"metadata": {"namespace": "a", "name": "b"}}));
        assert_eq!(k.unwrap().to_string(), "a/b");
    }

    #[test]
    fn cluster_scoped_keys_are_the_name_alone() {
        let k = ObjectKey::from_object(&json!({"metadata": {"name": "n1"}})).unwrap();
        assert_eq!(k, ObjectKey::new("", "n1"));
        assert_eq!(k.to_string(), "n1");
    }

    #[test]
    fn an_object_without_a_name_has_no_key() {
        assert_eq!(
            ObjectKey::from_object(&json!({"metadata": {"namespace": "a"}})),
            Err(KeyError::NoName)
        );
        assert_eq!(ObjectKey::from_object(&json!(7)), Err(KeyError::NoName));
    }

    #[test]
    fn keys_parse_back_from_their_text() {
        for k in [ObjectKey::new("ns", "x"), ObjectKey::new("", "y")] {
            assert_eq!(k.to_string().parse::<ObjectKey>().unwrap(), k);
        }
        for bad in ["", "/x", "ns/", "a/b/c", "/"] {
            assert!(bad.parse::<ObjectKey>().is_err(), "{bad:?}");
        }
    }
}
