//! Turns a PATCH request into a mutation of the current object: apply the patch, then the
//! same update rules as a replace (immutable fields, subresource, validation).

use std::borrow::Cow;
use std::sync::Arc;

use keel_api::{ApiError, Metadata, Object, ObjectError, ResourceInfo, Target};
use keel_patch::PatchError;
use serde_json::{Map, Value};

use super::admission::admit_update;
use super::kinds::Kind;
use super::managed;
use super::strategy::Subresource;
use crate::storage::{Change, Draft, Mutation, target};

/// The kinds of patch a client may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 6902 JSON Patch.
    Json,
    /// RFC 7386 JSON Merge Patch.
    Merge,
    /// Kubernetes' strategic merge patch.
    Strategic,
    /// Server-side apply (`application/apply-patch+yaml`): the manager's configuration.
    Apply,
    /// The client did not say: refused once the rest of the request has been checked.
    Unspecified,
}

/// Applies one patch document to an object's JSON.
type Applier = Box<dyn Fn(&Value) -> Result<Value, PatchError> + Send + Sync>;

/// `kind` names the object in an `Invalid` error, as Kubernetes does.
fn patch_error(t: &Target, kind: &str, e: PatchError) -> ApiError {
    match e {
        PatchError::TooManyOperations { .. } => ApiError::too_large(t.clone(), e.to_string()),
        PatchError::TestFailed { .. } => ApiError::invalid(
            Target {
                kind: kind.to_string(),
                ..t.clone()
            },
            vec![keel_api::FieldCause {
                reason: "FieldValueInvalid".into(),
                message: e.to_string(),
                field: "patch".into(),
            }],
        ),
        PatchError::Conflict { .. } => ApiError::conflict(t.clone(), e.to_string()),
        _ => ApiError::bad_request(t.clone(), format!("the patch cannot be applied: {e}")),
    }
}

/// Parses a patch body: JSON of bounded size and depth; an apply's may be YAML too.
pub fn parse(t: &Target, kind: PatchType, bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.len() > keel_api::object::MAX_OBJECT_BYTES {
        return Err(ApiError::too_large(
            t.clone(),
            format!("the patch is {} bytes, more than the limit", bytes.len()),
        ));
    }
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok(v),
        Err(e) if kind != PatchType::Apply => Err(ApiError::bad_request(
            t.clone(),
            format!("malformed patch: {e}"),
        )),
        Err(_) => {
            let text = std::str::from_utf8(bytes).map_err(|e| {
                ApiError::bad_request(t.clone(), format!("error decoding YAML: {e}"))
            })?;
            let v: Value = serde_saphyr::from_str(text).map_err(|e| {
                ApiError::bad_request(t.clone(), format!("error decoding YAML: {e}"))
            })?;
            if keel_api::object::depth(&v) > keel_patch::MAX_DEPTH {
                return Err(ApiError::bad_request(
                    t.clone(),
                    "error decoding YAML: nested too deeply",
                ));
            }
            Ok(v)
        }
    }
}

/// The `resourceVersion` a patch pins, if any: such a patch is a precondition, answered with
/// `Conflict` (never retried) when the object has moved on. A JSON patch pins one only by
/// setting it; a `test` of it changes nothing, and fails as any `test` does (422 Invalid, what
/// kopf retries on), as in Kubernetes.
pub fn precondition(kind: PatchType, patch: &Value) -> Option<String> {
    match kind {
        PatchType::Json => patch.as_array()?.iter().find_map(|op| {
            let path = op.get("path")?.as_str()?;
            let verb = op.get("op")?.as_str()?;
            (path == "/metadata/resourceVersion" && matches!(verb, "replace" | "add"))
                .then(|| op.get("value")?.as_str().map(str::to_string))
                .flatten()
        }),
        _ => patch
            .get("metadata")?
            .get("resourceVersion")?
            .as_str()
            .map(str::to_string),
    }
}

/// Whether `patch` is a JSON patch that tests `metadata.resourceVersion` (kopf's optimistic
/// lock): it must meet the object as committed, never a batch's intermediate state, which
/// still holds the stored resourceVersion after the patches before it, so it is not
/// coalesced.
pub fn tests_resource_version(kind: PatchType, patch: &Value) -> bool {
    kind == PatchType::Json
        && patch.as_array().is_some_and(|ops| {
            ops.iter().any(|op| {
                op.get("op").and_then(Value::as_str) == Some("test")
                    && op.get("path").and_then(Value::as_str) == Some("/metadata/resourceVersion")
            })
        })
}

/// The mutation applying `patch` of type `kind` by `manager` to the current object, and
/// recording it in `managedFields` (`force`: an apply takes fields other managers own).
pub fn mutation(
    info: &Arc<ResourceInfo>,
    rules: Arc<dyn Kind>,
    kind: PatchType,
    sub: Subresource,
    patch: Value,
    manager: &str,
    force: bool,
) -> Result<Mutation, ApiError> {
    let t = target(info, "");
    let manager = manager.to_string();
    if kind == PatchType::Apply {
        return Ok(apply_mutation(
            info,
            rules,
            managed::Apply {
                manager,
                force,
                sub,
                config: patch,
            },
        ));
    }
    if kind == PatchType::Merge && !patch.is_object() {
        return Err(ApiError::bad_request(
            t,
            "a merge patch must be a JSON object",
        ));
    }
    let sees_entries = sees_entries(kind, &patch);
    let apply: Applier = match kind {
        PatchType::Json => {
            // Parsed once here, so a malformed patch fails before any read and a retried
            // write does not parse it again.
            let parsed =
                keel_patch::parse_json_patch(&patch).map_err(|e| patch_error(&t, &info.kind, e))?;
            Box::new(move |doc| parsed.apply(doc))
        }
        PatchType::Merge => Box::new(move |doc| Ok(keel_patch::apply_merge_patch(doc, &patch))),
        PatchType::Strategic => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    t,
                    "a strategic merge patch must be a JSON object",
                ));
            }
            let schema = rules.merge_schema().ok_or_else(|| {
                ApiError::new(
                    keel_api::Reason::MethodNotAllowed,
                    t.clone(),
                    format!(
                        "strategic merge patch is not supported for {}: no merge keys are known for its lists; use a merge or JSON patch",
                        info.qualified_name()
                    ),
                )
            })?;
            Box::new(move |doc| keel_patch::apply_strategic_merge_patch(doc, &patch, &*schema))
        }
        // (An apply was handed to `apply_mutation` above.)
        PatchType::Apply | PatchType::Unspecified => {
            return Err(ApiError::bad_request(
                t,
                "the patch type is not set (json, merge or strategic)",
            ));
        }
    };
    let info = info.clone();
    Ok(Box::new(move |stored: &Draft| {
        let current = keel_api::conversion::served(&info, &stored.object);
        let current: &Object = &current;
        let t = target(&info, current.name());
        if sub == Subresource::Scale {
            // The patch is of the object's Scale: only its replicas reach the object, where
            // its kind keeps them.
            let Some(paths) = rules.scale() else {
                return Err(ApiError::not_found(t));
            };
            let view = keel_api::scale::view_at(current, &paths);
            let scale = apply(&view).map_err(|e| patch_error(&t, "Scale", e))?;
            let replicas = keel_api::scale::replicas(&scale, &t)?;
            let mut scaled = current.clone();
            keel_api::scale::set_replicas(&mut scaled, &paths, replicas);
            let new = admit_update(&info, &*rules, scaled, current, Subresource::Main)?;
            return Ok(Change::Put(managed::record_update(
                &*rules, &manager, sub, stored, new,
            )));
        }
        // A patch that may address `managedFields` sees them as JSON.
        let source = if sees_entries {
            Cow::Owned(stored.with(current.clone()).into_object())
        } else {
            Cow::Borrowed(current)
        };
        let patched = apply(&Value::Object(source.as_map().clone()))
            .map_err(|e| patch_error(&t, &info.kind, e))?;
        let mut patched = Object::from_value(patched).map_err(|e| match e {
            ObjectError::NotAnObject => ApiError::bad_request(
                t.clone(),
                "the patch turns the object into something that is not an object",
            ),
            e => ApiError::bad_request(t.clone(), e.to_string()),
        })?;
        in_place_of(&mut patched, current);
        check_identity(&t, &patched, current)?;
        let new = admit_update(&info, &*rules, patched, current, sub)?;
        Ok(Change::Put(managed::record_update(
            &*rules, &manager, sub, stored, new,
        )))
    }))
}

/// Whether the result of `patch` may depend on what `metadata.managedFields` hold, rather than
/// only replace or remove them: any JSON patch; a merge or strategic patch that names them in
/// any other way (a strategic list merge, `$setElementOrder/managedFields`, ...) or carries a
/// directive where it could reach them.
fn sees_entries(kind: PatchType, patch: &Value) -> bool {
    let directive = |m: &Map<String, Value>| m.keys().any(|k| k.starts_with('$'));
    let Some(top) = patch.as_object().filter(|_| kind != PatchType::Json) else {
        return true;
    };
    match top.get("metadata") {
        None => false,
        Some(Value::Object(md)) => {
            let replaces = |k: &str, v: &Value| {
                k == "managedFields" && (v.is_null() || (kind == PatchType::Merge && v.is_array()))
            };
            directive(top)
                || directive(md)
                || md
                    .iter()
                    .any(|(k, v)| k.contains("managedFields") && !replaces(k, v))
        }
        Some(_) => true,
    }
}

/// The mutation of a server-side apply: the configuration merged into the current object
/// (served at the request's version), then the update's rules, then the entries it made.
pub fn apply_mutation(
    info: &Arc<ResourceInfo>,
    rules: Arc<dyn Kind>,
    apply: managed::Apply,
) -> Mutation {
    let info = info.clone();
    Box::new(move |stored: &Draft| {
        let current = keel_api::conversion::served(&info, &stored.object);
        let current: &Object = &current;
        let t = target(&info, current.name());
        let applied = managed::apply(
            &info,
            &*rules,
            &t,
            &apply,
            Some((current, stored.entries.as_slice())),
        )?;
        let mut patched = applied.object;
        in_place_of(&mut patched, current);
        check_identity(&t, &patched, current)?;
        if patched.namespace() != current.namespace() {
            return Err(ApiError::bad_request(
                t,
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        // The update's rules see the object itself: a scale's replicas are already in it.
        let sub = match apply.sub {
            Subresource::Scale => Subresource::Main,
            sub => sub,
        };
        let new = admit_update(&info, &*rules, patched, current, sub)?;
        Ok(Change::Put(Draft {
            object: new,
            entries: Arc::new(applied.entries),
        }))
    })
}

/// A patched object keeps its name, apiVersion and kind.
fn check_identity(t: &Target, patched: &Object, current: &Object) -> Result<(), ApiError> {
    if patched.name() != current.name() {
        return Err(ApiError::bad_request(
            t.clone(),
            format!(
                "the name of the object ({}) does not match the name on the URL ({})",
                keel_api::shorten_name(patched.name()),
                keel_api::shorten_name(current.name())
            ),
        ));
    }
    if patched.api_version() != current.api_version() || patched.kind() != current.kind() {
        return Err(ApiError::bad_request(
            t.clone(),
            "a patch may not change apiVersion or kind",
        ));
    }
    Ok(())
}

/// What Kubernetes' decoding of a patched object into the request's kind fills in: an
/// apiVersion, kind or namespace the patch removed is the current object's. (A strategic
/// `{"$patch": "delete"}` at the top leaves `{}`, which then fails the name check, as there.)
fn in_place_of(patched: &mut Object, current: &Object) {
    for field in ["apiVersion", "kind"] {
        if !patched.as_map().contains_key(field)
            && let Some(v) = current.as_map().get(field)
        {
            patched.as_map_mut().insert(field.to_string(), v.clone());
        }
    }
    if patched.namespace().is_empty() && !current.namespace().is_empty() {
        patched.set_meta_str("namespace", current.namespace());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::kinds::testing::{info, kind, kind as kind_of};
    use serde_json::json;

    fn custom_kind() -> Arc<ResourceInfo> {
        Arc::new(ResourceInfo {
            converted_by_server: false,
            gvr: keel_api::GroupVersionResource::new("samplecrd.k8s.io", "v1", "networks"),
            singular: "network".into(),
            kind: "Network".into(),
            short_names: vec![],
            namespaced: true,
            status_subresource: false,
            create_only: false,
            subresources: vec![],
            categories: vec![],
            selectable_fields: vec![],
        })
    }

    #[test]
    fn strategic_patches_need_known_merge_keys() {
        let e = mutation(
            &custom_kind(),
            crate::registry::kinds::unknown(),
            PatchType::Strategic,
            Subresource::Main,
            json!({"spec": {}}),
            "test",
            false,
        )
        .err()
        .unwrap();
        assert_eq!(e.reason, keel_api::Reason::MethodNotAllowed);
        assert!(
            e.message.contains("networks.samplecrd.k8s.io"),
            "{}",
            e.message
        );
        let pods = info("Pod");
        assert!(
            mutation(
                &pods,
                kind("Pod"),
                PatchType::Strategic,
                Subresource::Main,
                json!({"spec": {}}),
                "test",
                false,
            )
            .is_ok()
        );
        assert!(
            mutation(
                &pods,
                kind("Pod"),
                PatchType::Strategic,
                Subresource::Main,
                json!([]),
                "test",
                false,
            )
            .is_err()
        );
    }

    fn patch(kind: PatchType, p: Value) -> Result<Change, ApiError> {
        let current = Object::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default", "uid": "u1", "resourceVersion": "5"},
            "data": {"a": "1"},
        }))
        .unwrap();
        mutation(
            &info("ConfigMap"),
            kind_of("ConfigMap"),
            kind,
            Subresource::Main,
            p,
            "test",
            false,
        )?(&Draft::from_object(current))
    }

    #[test]
    fn a_patch_that_empties_the_object_fails_the_name_check_as_in_kubernetes() {
        for (kind, p) in [
            (PatchType::Strategic, json!({"$patch": "delete"})),
            (PatchType::Merge, json!({"metadata": null})),
        ] {
            let e = patch(kind, p).err().unwrap();
            assert_eq!(e.reason, keel_api::Reason::BadRequest);
            assert_eq!(
                e.message,
                "the name of the object () does not match the name on the URL (cm)"
            );
        }
    }

    #[test]
    fn a_patch_that_drops_apiversion_or_kind_keeps_the_request_kind() {
        let Ok(Change::Put(Draft { object: o, .. })) = patch(
            PatchType::Merge,
            json!({"apiVersion": null, "kind": null, "data": {"b": "2"}}),
        ) else {
            panic!("patched");
        };
        assert_eq!((o.api_version(), o.kind()), ("v1", "ConfigMap"));
        assert_eq!(o.as_map()["data"], json!({"a": "1", "b": "2"}));
        let e = patch(PatchType::Merge, json!({"kind": "Secret"}))
            .err()
            .unwrap();
        assert_eq!(e.message, "a patch may not change apiVersion or kind");
    }

    #[test]
    fn patches_that_pin_a_resource_version_are_preconditions() {
        assert_eq!(
            precondition(
                PatchType::Merge,
                &json!({"metadata": {"resourceVersion": "5"}})
            )
            .as_deref(),
            Some("5")
        );
        assert_eq!(
            precondition(PatchType::Merge, &json!({"data": {"a": "b"}})),
            None
        );
        let p = json!([{"op": "replace", "path": "/metadata/resourceVersion", "value": "7"}]);
        assert_eq!(precondition(PatchType::Json, &p).as_deref(), Some("7"));
        let p = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": "7"}]);
        assert_eq!(precondition(PatchType::Json, &p), None);
        // Not a precondition, but not coalesced either: a batch's intermediate state still
        // holds the stored resourceVersion.
        assert!(tests_resource_version(PatchType::Json, &p));
        let other = json!([{"op": "test", "path": "/data/a", "value": "7"}]);
        assert!(!tests_resource_version(PatchType::Json, &other));
        assert!(!tests_resource_version(
            PatchType::Merge,
            &json!({"metadata": {"resourceVersion": "7"}})
        ));
    }
}
