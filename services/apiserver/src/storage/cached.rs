//! An object as the watch cache keeps it: its JSON, once, shared by every List and watcher that
//! sends it, and the few fields selectors read, taken out when it arrives. A parsed
//! `serde_json` tree costs several times the JSON it came from; this costs the JSON and a
//! little more. Whoever needs the whole object parses it again ([`CachedObject::object`]).

use bytes::Bytes;
use keel_api::{ApiError, Object, ResourceInfo, Selectable};

use super::codec::from_storage;

/// One object in the watch cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedObject {
    /// The object's JSON as clients get it, `resourceVersion` included.
    json: Bytes,
    rv: i64,
    namespace: Box<str>,
    name: Box<str>,
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
            namespace: obj.namespace().into(),
            name: obj.name().into(),
            labels,
            owner: Selectable::controller_owner(obj).map(Into::into),
            initialized: obj.is_initialized(),
        }
    }

    /// An object as etcd holds it at `revision` (see `codec::from_storage`).
    pub fn from_storage(
        info: &ResourceInfo,
        bytes: &[u8],
        revision: i64,
    ) -> Result<CachedObject, ApiError> {
        Ok(CachedObject::new(
            &from_storage(info, bytes, revision)?,
            revision,
        ))
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
        Object::from_slice(&self.json)
            .map_err(|e| ApiError::internal(format!("the cached {} is unreadable: {e}", self.name)))
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

impl Selectable for CachedObject {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn name(&self) -> &str {
        &self.name
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
