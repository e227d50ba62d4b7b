//! How objects are stored: JSON without `resourceVersion` (the key's etcd `mod_revision` is the
//! object's `resourceVersion`), at most `MAX_OBJECT_BYTES`, and how errors name them.

use keel_api::object::MAX_OBJECT_BYTES;
use keel_api::{ApiError, Object, ResourceInfo, Target};

/// The target naming an object of this resource in errors: by resource, as Kubernetes does
/// (`deployments.apps "web" not found`).
pub fn target(info: &ResourceInfo, name: &str) -> Target {
    Target::new(&info.gvr.group, &info.gvr.resource, name)
}

/// The bytes stored in etcd: the object without `resourceVersion` (the key's revision is).
pub fn to_storage(obj: &Object) -> Vec<u8> {
    let mut o = obj.clone();
    o.set_resource_version("");
    o.to_vec()
}

/// The bytes to store for `obj`, or `RequestEntityTooLarge` naming it.
pub fn encode(t: &Target, obj: &Object) -> Result<Vec<u8>, ApiError> {
    let bytes = to_storage(obj);
    if bytes.len() > MAX_OBJECT_BYTES {
        return Err(ApiError::too_large(
            t.clone(),
            format!(
                "the object is {} bytes, more than the limit of {MAX_OBJECT_BYTES}",
                bytes.len()
            ),
        ));
    }
    Ok(bytes)
}

/// An object read from etcd, with its `resourceVersion` set from the key's revision.
pub fn from_storage(info: &ResourceInfo, bytes: &[u8], revision: i64) -> Result<Object, ApiError> {
    let mut obj = Object::from_slice(bytes).map_err(|e| {
        ApiError::internal(format!(
            "stored {} is unreadable: {e}",
            info.qualified_name()
        ))
    })?;
    obj.set_resource_version(&revision.to_string());
    // A resource served at several versions stores its objects at one of them.
    keel_api::conversion::to_served(info, &mut obj);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_api::Metadata;
    use serde_json::json;

    #[test]
    fn stored_bytes_carry_no_resource_version_and_reads_get_the_revision() {
        let info = keel_api::builtin_resources()
            .into_iter()
            .find(|r| r.kind == "ConfigMap")
            .unwrap();
        let obj =
            Object::from_value(json!({"metadata": {"name": "a", "resourceVersion": "7"}})).unwrap();
        let bytes = to_storage(&obj);
        assert!(!String::from_utf8_lossy(&bytes).contains("resourceVersion"));
        let back = from_storage(&info, &bytes, 42).unwrap();
        assert_eq!(back.resource_version(), "42");
        assert_eq!(
            from_storage(&info, b"[1]", 1).unwrap_err().reason,
            keel_api::Reason::InternalError
        );
    }

    #[test]
    fn oversized_objects_are_refused_by_name() {
        let big = "x".repeat(MAX_OBJECT_BYTES);
        let obj =
            Object::from_value(json!({"metadata": {"name": "a"}, "data": {"k": big}})).unwrap();
        let e = encode(&Target::new("", "configmaps", "a"), &obj).unwrap_err();
        assert_eq!(e.reason, keel_api::Reason::RequestEntityTooLarge);
        assert_eq!(e.target.name, "a");
    }
}
