//! The checks of what a request names, before any of it becomes a key: names and namespaces,
//! the namespace of a write, the scope and selectors of a List or Watch.

use keel_api::selector::{FieldSelector, LabelSelector};
use keel_api::shard::ShardSelector;
use keel_api::validation::{dns1123_label, name_rule};
use keel_api::{ApiError, FieldCause, Metadata, Object, ResourceInfo, Target};

use crate::registry::errors::kind_target;
use crate::registry::{Filter, target};

/// A shard selector as a client sent it, checked: `BadRequest` saying what is wrong.
pub fn shard_scope(
    info: &ResourceInfo,
    shard: Option<ShardSelector>,
) -> Result<Option<ShardSelector>, ApiError> {
    shard
        .map(|s| {
            ShardSelector::new(s.count, s.ids, s.by_owner).map_err(|m| {
                ApiError::bad_request(target(info, ""), format!("shard selector: {m}"))
            })
        })
        .transpose()
}

/// What is wrong with a name and namespace, checked before they become part of a key.
fn name_problems(info: &ResourceInfo, namespace: &str, name: &str) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    if name.is_empty() {
        causes.push(FieldCause::required("metadata.name"));
    } else {
        for e in name_rule(info)(name) {
            causes.push(FieldCause::invalid("metadata.name", name, e));
        }
    }
    if info.namespaced {
        for e in dns1123_label(namespace) {
            causes.push(FieldCause::invalid("metadata.namespace", namespace, e));
        }
    }
    causes
}

/// For a write of an object: its name and namespace must be valid (`Invalid` otherwise).
pub fn check_names(info: &ResourceInfo, namespace: &str, name: &str) -> Result<(), ApiError> {
    let causes = name_problems(info, namespace, name);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(kind_target(info, name), causes))
    }
}

/// For a read, patch or delete by name: an object with an invalid name cannot exist, so it is
/// `NotFound`, as in Kubernetes (a missing name is still `Invalid`).
pub fn check_lookup(info: &ResourceInfo, namespace: &str, name: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return check_names(info, namespace, name);
    }
    if name_problems(info, namespace, name).is_empty() {
        Ok(())
    } else {
        Err(ApiError::not_found(target(info, name)))
    }
}

/// The namespace of a write: the request's and the object's must agree; `default` when
/// neither says.
pub fn resolve_namespace(
    info: &ResourceInfo,
    requested: &str,
    obj: &mut Object,
) -> Result<String, ApiError> {
    if !info.namespaced {
        return Ok(String::new());
    }
    let in_obj = obj.namespace().to_string();
    let ns = match (requested.is_empty(), in_obj.is_empty()) {
        (false, false) if requested != in_obj => {
            return Err(ApiError::bad_request(
                target(info, obj.name()),
                format!(
                    "the namespace of the object ({in_obj}) does not match the namespace of the request ({requested})"
                ),
            ));
        }
        (false, _) => requested.to_string(),
        (true, false) => in_obj,
        (true, true) => "default".to_string(),
    };
    obj.set_meta_str("namespace", &ns);
    Ok(ns)
}

fn selectors(
    info: &ResourceInfo,
    t: &Target,
    labels: &str,
    fields: &str,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let l = LabelSelector::parse(labels)
        .map_err(|e| ApiError::bad_request(t.clone(), format!("invalid label selector: {e}")))?;
    let f = FieldSelector::parse(fields, &info.selectable_fields)
        .map_err(|e| ApiError::bad_request(t.clone(), format!("invalid field selector: {e}")))?;
    Ok((l, f))
}

/// The objects a List or Watch selects: a namespace (none for all, or for a cluster-scoped
/// resource) and the parsed selectors.
pub fn collection_scope(
    info: &ResourceInfo,
    namespace: &str,
    label_selector: &str,
    field_selector: &str,
) -> Result<Filter, ApiError> {
    let t = target(info, "");
    let (labels, fields) = selectors(info, &t, label_selector, field_selector)?;
    let namespace = namespace_of(info, namespace);
    if !namespace.is_empty() && !dns1123_label(&namespace).is_empty() {
        return Err(ApiError::invalid(
            kind_target(info, ""),
            vec![FieldCause::invalid(
                "metadata.namespace",
                &namespace,
                "not a valid namespace name",
            )],
        ));
    }
    Ok(Filter {
        namespace: (!namespace.is_empty()).then_some(namespace),
        labels,
        fields,
        include_uninitialized: false,
        shard: None,
    })
}

/// The name a list or watch is authorized for (Kubernetes' `RequestInfo`): the one its field
/// selector requires `metadata.name` to equal, when that is a valid path segment, so a role
/// whose `resourceNames` hold it may list or watch that one object (single-object
/// informers); else none.
pub fn selected_name(filter: &Filter) -> String {
    filter
        .fields
        .requires_exact_match("metadata.name")
        .filter(|n| keel_api::validation::path_segment_name(n).is_empty())
        .unwrap_or_default()
        .to_string()
}

/// The namespace of a request that names one object (get, patch, delete): `default` when a
/// namespaced resource's request gives none, as for a create or update (DESIGN.md,
/// "Namespaces"); none for a cluster-scoped resource.
pub fn object_namespace(info: &ResourceInfo, ns: &str) -> String {
    match namespace_of(info, ns) {
        ns if ns.is_empty() && info.namespaced => "default".to_string(),
        ns => ns,
    }
}

pub fn namespace_of(info: &ResourceInfo, ns: &str) -> String {
    if info.namespaced {
        ns.to_string()
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use keel_api::Reason;
    use serde_json::json;

    use super::*;

    fn info(kind: &str) -> ResourceInfo {
        keel_api::builtin_resources()
            .into_iter()
            .find(|r| r.kind == kind)
            .unwrap()
    }

    fn obj(v: serde_json::Value) -> Object {
        Object::from_value(v).unwrap()
    }

    #[test]
    fn a_write_goes_to_the_namespace_both_agree_on_else_default() {
        let cms = info("ConfigMap");
        let mut o = obj(json!({"metadata": {"name": "a"}}));
        assert_eq!(resolve_namespace(&cms, "", &mut o).unwrap(), "default");
        assert_eq!(o.namespace(), "default");
        let mut o = obj(json!({"metadata": {"name": "a", "namespace": "x"}}));
        assert_eq!(resolve_namespace(&cms, "", &mut o).unwrap(), "x");
        let e = resolve_namespace(&cms, "y", &mut o).unwrap_err();
        assert_eq!(e.reason, Reason::BadRequest);
        let mut ns = obj(json!({"metadata": {"name": "team"}}));
        assert_eq!(
            resolve_namespace(&info("Namespace"), "x", &mut ns).unwrap(),
            ""
        );
    }

    #[test]
    fn an_invalid_name_is_invalid_on_write_and_not_found_on_lookup() {
        let cms = info("ConfigMap");
        let e = check_names(&cms, "default", "Bad_Name").unwrap_err();
        assert_eq!(e.reason, Reason::Invalid);
        assert_eq!(e.causes[0].field, "metadata.name");
        let e = check_lookup(&cms, "default", "Bad_Name").unwrap_err();
        assert_eq!(e.reason, Reason::NotFound);
        let e = check_lookup(&cms, "default", "").unwrap_err();
        assert_eq!(e.reason, Reason::Invalid);
        check_lookup(&cms, "default", "good").unwrap();
    }

    #[test]
    fn every_verb_on_one_object_defaults_an_empty_namespace() {
        assert_eq!(object_namespace(&info("ConfigMap"), ""), "default");
        assert_eq!(object_namespace(&info("ConfigMap"), "x"), "x");
        assert_eq!(object_namespace(&info("Namespace"), "x"), "");
        assert_eq!(object_namespace(&info("Namespace"), ""), "");
    }

    #[test]
    fn a_collection_is_a_namespace_and_parsed_selectors() {
        let cms = info("ConfigMap");
        let f = collection_scope(&cms, "x", "app=web", "").unwrap();
        assert_eq!(f.namespace.as_deref(), Some("x"));
        assert!(!f.labels.is_empty());
        assert!(
            collection_scope(&cms, "", "", "")
                .unwrap()
                .namespace
                .is_none()
        );
        // A cluster-scoped resource ignores the namespace.
        let f = collection_scope(&info("Namespace"), "x", "", "").unwrap();
        assert!(f.namespace.is_none());
        let e = collection_scope(&cms, "", "app in (", "").unwrap_err();
        assert_eq!(e.reason, Reason::BadRequest);
        let e = collection_scope(&cms, "Not_A_Namespace", "", "").unwrap_err();
        assert_eq!(e.reason, Reason::Invalid);
    }
}
