//! An object as the watch cache keeps it: its JSON, once, shared by every List and watcher that
//! sends it, and the few fields selectors read, taken out when it arrives. A parsed
//! `serde_json` tree costs several times the JSON it came from; this costs the JSON and a
//! little more. Whoever needs the whole object parses it again ([`CachedObject::object`]).

use std::borrow::Cow;
use std::collections::BTreeMap;

use bytes::Bytes;
use keel_api::object::field_at;
use keel_api::{ApiError, Object, ResourceInfo, Selectable};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;
use serde_json::value::RawValue;

use super::codec::from_storage;

/// The top of a stored object, as far as [`CachedObject::in_place`] reads it.
#[derive(Deserialize)]
struct Top<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
}

/// What selectors read of `metadata`. A field of another type than Kubernetes gives it fails
/// the read, and the object takes the long way, which reads it as `Object` does.
#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    labels: Option<BTreeMap<Cow<'a, str>, Value>>,
    #[serde(rename = "ownerReferences", borrow, default)]
    owner_references: Option<Vec<OwnerReference<'a>>>,
    #[serde(default)]
    initializers: Option<Value>,
    /// Whether the key is there at all, whatever its value (`null` included): the in-place
    /// read writes the field, so an object that has it takes the long way.
    #[serde(rename = "resourceVersion", default, deserialize_with = "present")]
    has_resource_version: bool,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    IgnoredAny::deserialize(d).map(|_| true)
}

#[derive(Deserialize)]
struct OwnerReference<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    controller: Option<bool>,
}

/// One object in the watch cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedObject {
    /// The object's JSON as clients get it, `resourceVersion` included.
    json: Bytes,
    rv: i64,
    /// The namespace followed by the name, in one allocation: the name starts at `name_at`.
    names: Box<str>,
    name_at: u32,
    labels: Box<[(Box<str>, Box<str>)]>,
    owner: Option<Box<str>>,
    initialized: bool,
}

impl CachedObject {
    /// The object `obj`, whose `resourceVersion` is `rv`.
    pub fn new(obj: &Object, rv: i64) -> CachedObject {
        let labels = obj
            .metadata()
            .and_then(|m| m.get("labels"))
            .and_then(|l| l.as_object())
            .map(|l| {
                l.iter()
                    .filter_map(|(k, v)| Some((k.as_str().into(), v.as_str()?.into())))
                    .collect()
            })
            .unwrap_or_default();
        CachedObject {
            // Exactly as long as the JSON: a Vec grown while writing keeps up to twice that.
            json: Bytes::from(obj.to_vec().into_boxed_slice()),
            rv,
            names: names(obj.namespace(), obj.name()),
            name_at: name_at(obj.namespace()),
            labels,
            owner: Selectable::controller_owner(obj).map(Into::into),
            initialized: obj.is_initialized(),
        }
    }

    /// An object as etcd holds it at `revision` (see `codec::from_storage`). The stored JSON
    /// lacks only `resourceVersion`: it is written into `metadata` in place, and the fields
    /// selectors read are taken out without building a tree. Anything unusual (another
    /// version to convert to, a field of an unexpected type) takes the long way: parsed,
    /// converted, serialized.
    pub fn from_storage(
        info: &ResourceInfo,
        bytes: &[u8],
        revision: i64,
    ) -> Result<CachedObject, ApiError> {
        if let Some(c) = Self::in_place(info, bytes, revision) {
            return Ok(c);
        }
        Ok(CachedObject::new(
            &from_storage(info, bytes, revision)?,
            revision,
        ))
    }

    fn in_place(info: &ResourceInfo, bytes: &[u8], rv: i64) -> Option<CachedObject> {
        let top: Top<'_> = serde_json::from_slice(bytes).ok()?;
        if top.api_version.as_deref() != Some(&*info.api_version()) {
            return None;
        }
        let raw = top.metadata?.get();
        let meta: Meta<'_> = serde_json::from_str(raw).ok()?;
        if meta.has_resource_version {
            return None;
        }
        // Where metadata's `{` is in `bytes` (a raw value borrows from the input).
        let open = (raw.as_ptr() as usize).checked_sub(bytes.as_ptr() as usize)?;
        if bytes.get(open) != Some(&b'{') {
            return None;
        }
        let empty = raw[1..].trim_start().starts_with('}');
        let field = format!(
            "\"resourceVersion\":\"{rv}\"{}",
            if empty { "" } else { "," }
        );
        let mut json = Vec::with_capacity(bytes.len() + field.len());
        json.extend_from_slice(&bytes[..=open]);
        json.extend_from_slice(field.as_bytes());
        json.extend_from_slice(&bytes[open + 1..]);
        let labels = match meta.labels {
            Some(l) => l
                .into_iter()
                .filter_map(|(k, v)| Some((k.into(), v.as_str()?.into())))
                .collect(),
            None => Box::default(),
        };
        let owner = meta
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .find(|r| r.controller == Some(true))
            .and_then(|r| r.name)
            .map(|n| n.into());
        // As `keel_api::Metadata::is_initialized`: any entry of `pending` is pending.
        let initialized = meta
            .initializers
            .as_ref()
            .and_then(|i| i.get("pending"))
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        Some(CachedObject {
            json: Bytes::from(json),
            rv,
            names: names(
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
            ),
            name_at: name_at(meta.namespace.as_deref().unwrap_or_default()),
            labels,
            owner,
            initialized,
        })
    }

    /// The JSON clients get (a shared buffer: cloning it copies nothing).
    pub fn json(&self) -> &Bytes {
        &self.json
    }

    /// The object's `resourceVersion`.
    pub fn rv(&self) -> i64 {
        self.rv
    }

    /// The whole object, parsed from its JSON.
    pub fn object(&self) -> Result<Object, ApiError> {
        Object::from_slice(&self.json).map_err(|e| {
            ApiError::internal(format!("the cached {} is unreadable: {e}", self.name()))
        })
    }

    /// The same object at another `resourceVersion`: a deletion shows the object's last state
    /// at the revision that removed it.
    pub fn at_revision(&self, rv: i64) -> CachedObject {
        match self.object() {
            Ok(mut obj) => {
                obj.set_resource_version(&rv.to_string());
                CachedObject::new(&obj, rv)
            }
            // Not reached (the JSON was made from an object); the state as it was is the
            // best answer left.
            Err(_) => CachedObject { rv, ..self.clone() },
        }
    }
}

fn names(namespace: &str, name: &str) -> Box<str> {
    [namespace, name].concat().into_boxed_str()
}

/// Where the name starts in `names`: after the namespace (objects are at most a few MiB, so
/// it fits).
fn name_at(namespace: &str) -> u32 {
    u32::try_from(namespace.len()).unwrap_or(0)
}

impl Selectable for CachedObject {
    fn namespace(&self) -> &str {
        self.names.get(..self.name_at as usize).unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.names.get(self.name_at as usize..).unwrap_or_default()
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }

    fn controller_owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    fn is_initialized(&self) -> bool {
        self.initialized
    }

    /// Read from the JSON when a selector asks, parsed once for all of them (only a selector
    /// on a kind's own fields asks: the cache keeps no more than the metadata selectors read
    /// on every event).
    fn fields(&self, paths: &[&str]) -> Vec<Option<String>> {
        let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(&self.json) else {
            return vec![None; paths.len()];
        };
        paths
            .iter()
            .map(|p| field_at(&map, p).map(Cow::into_owned))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use keel_api::selector::LabelSelector;
    use keel_api::shard::ShardSelector;
    use serde_json::json;

    use super::*;

    fn pod() -> Object {
        Object::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "prod", "resourceVersion": "7",
                "labels": {"app": "web", "tier": "front"},
                "ownerReferences": [{"name": "other"}, {"name": "web", "controller": true}],
                "initializers": {"pending": [{"name": "envoy"}]}},
            "spec": {"containers": []}}))
        .unwrap()
    }

    #[test]
    fn selectors_see_a_cached_object_as_they_see_the_object() {
        let obj = pod();
        let cached = CachedObject::new(&obj, 7);
        assert_eq!(cached.object().unwrap(), obj);
        assert_eq!(cached.json().as_ref(), obj.to_vec().as_slice());
        for s in [
            "app=web",
            "app!=web",
            "tier in (front,back)",
            "!tier",
            "missing",
        ] {
            let s = LabelSelector::parse(s).unwrap();
            assert_eq!(s.matches_object(&cached), s.matches_object(&obj), "{s:?}");
        }
        for by_owner in [false, true] {
            let shards = ShardSelector::new(32, vec![], by_owner).unwrap();
            assert_eq!(shards.shard(&cached), shards.shard(&obj));
        }
        assert_eq!(Selectable::controller_owner(&cached), Some("web"));
        assert!(!Selectable::is_initialized(&cached));
        assert_eq!((cached.namespace(), cached.name()), ("prod", "web-1"));
    }

    fn configmaps() -> ResourceInfo {
        keel_api::builtin_resources()
            .into_iter()
            .find(|r| r.kind == "ConfigMap")
            .unwrap()
    }

    /// Read in place and the long way, the same object with the same selector fields.
    fn both_ways(info: &ResourceInfo, stored: serde_json::Value) -> CachedObject {
        let bytes = serde_json::to_vec(&stored).unwrap();
        let fast = CachedObject::from_storage(info, &bytes, 42).unwrap();
        let slow = CachedObject::new(&from_storage(info, &bytes, 42).unwrap(), 42);
        assert_eq!(fast.object().unwrap(), slow.object().unwrap());
        assert_eq!(
            (
                fast.rv,
                fast.namespace(),
                fast.name(),
                &fast.labels,
                &fast.owner,
                fast.initialized
            ),
            (
                slow.rv,
                slow.namespace(),
                slow.name(),
                &slow.labels,
                &slow.owner,
                slow.initialized
            )
        );
        assert_eq!(fast.json.len(), fast.json.as_ref().len());
        fast
    }

    #[test]
    fn stored_objects_read_in_place_as_they_read_the_long_way() {
        let info = configmaps();
        let fast = both_ways(
            &info,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "ns", "labels": {"app": "web", "n": 5}},
                "data": {"k": "v"}}),
        );
        // The in-place read was taken: the version is written first in `metadata`.
        let text = String::from_utf8(fast.json().to_vec()).unwrap();
        assert!(
            text.contains(r#""metadata":{"resourceVersion":"42","#),
            "{text}"
        );
        let fast = both_ways(
            &info,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}),
        );
        assert!(
            String::from_utf8_lossy(fast.json()).contains(r#""metadata":{"resourceVersion":"42"}"#)
        );
        // Escapes, owners, initializers, nulls.
        both_ways(
            &info,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a\"b\u{e9}", "namespace": "ns", "labels": null,
                    "ownerReferences": [{"name": "x"}, {"name": "web", "controller": true}],
                    "initializers": {"pending": [{"name": "envoy"}]}}}),
        );
        let nameless = both_ways(
            &info,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "initializers": {"pending": [{"x": 1}]}}}),
        );
        assert!(
            !nameless.initialized,
            "an entry without a name is pending too"
        );
        // The long way: a field of an unexpected type, another version, no metadata.
        both_ways(
            &info,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "ownerReferences": [{"name": "web", "controller": "yes"}]}}),
        );
        both_ways(
            &info,
            json!({"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "a"}}),
        );
        both_ways(&info, json!({"apiVersion": "v1", "kind": "ConfigMap"}));
        // A stored version, even `null` (only etcd written by hand holds one), is replaced,
        // never written twice.
        for stored in [json!(null), json!("3")] {
            let fast = both_ways(
                &info,
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "a", "resourceVersion": stored}}),
            );
            let text = String::from_utf8(fast.json().to_vec()).unwrap();
            assert_eq!(text.matches("resourceVersion").count(), 1, "{text}");
            assert!(text.contains(r#""resourceVersion":"42""#), "{text}");
        }
    }

    #[test]
    fn at_revision_changes_only_the_resource_version() {
        let cached = CachedObject::new(&pod(), 7);
        let gone = cached.at_revision(9);
        assert_eq!(gone.rv(), 9);
        let mut want = pod();
        want.set_resource_version("9");
        assert_eq!(gone.object().unwrap(), want);
    }
}
