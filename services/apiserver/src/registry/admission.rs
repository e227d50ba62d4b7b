//! The admission pipelines: one for create and one for update, which update, patch and every
//! subresource take, so a rule is applied in one place whichever verb brings the object. And
//! Kubernetes' namespace lifecycle rule, that nothing is created in a namespace that does not
//! exist or is being deleted.

use std::sync::Arc;

use keel_api::{ApiError, FieldCause, Metadata, Object, ResourceInfo, Target};
use tokio::time::Instant;

use super::errors::forbidden;
use super::kinds::Kind;
use super::strategy::{self, Subresource};
use super::validation::validate;
use crate::storage::{ReadFrom, Store};

/// A create's first steps, before its writer's grants are checked: the object in its stored
/// form (a v1beta1 CRD as v1), the system fields, its status and its kind's create rules and
/// defaults.
pub fn prepare_create(info: &ResourceInfo, kind: &dyn Kind, obj: &mut Object) {
    keel_api::conversion::to_stored(info, obj);
    kind.prune(info, obj);
    strategy::prepare_for_create(info, kind, obj);
}

/// A create's object rules, after its grants: validation, then the kind's admission (a custom
/// object is pruned and checked against its schema). The namespace and the initializers, which
/// need reads, are the registry's to add.
pub fn validate_create(
    info: &ResourceInfo,
    kind: &dyn Kind,
    obj: &mut Object,
) -> Result<(), ApiError> {
    validate(info, kind, obj)?;
    let mut causes = Vec::new();
    kind.validate_create(obj, &mut causes);
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            super::errors::kind_target(info, obj.name()),
            causes,
        ));
    }
    kind.admit(obj)
}

/// The update pipeline: `new`, as a client sent it or a patch made it, made a valid successor
/// of `current` (the subresource's part of it), validated, admitted, in its stored form. The
/// kind's rules see both in the stored form, the version they are written for, whichever
/// version the request names.
pub fn admit_update(
    info: &ResourceInfo,
    kind: &dyn Kind,
    mut new: Object,
    current: &Object,
    sub: Subresource,
) -> Result<Object, ApiError> {
    keel_api::conversion::to_stored(info, &mut new);
    let current = keel_api::conversion::stored(info, current);
    let mut new = strategy::prepare_for_update(info, kind, new, &current, sub)?;
    kind.prune(info, &mut new);
    validate(info, kind, &new)?;
    kind.admit_update(&mut new, &current, sub == Subresource::Status)?;
    kind.to_storage_version(&mut new);
    Ok(new)
}

/// `obj` in the form objects of the kind are stored in: a v1beta1 CRD as v1, a custom object at
/// its storage version (what a create does last, and a delete that only marks the object).
pub fn stored_form(info: &ResourceInfo, kind: &dyn Kind, obj: &mut Object) {
    keel_api::conversion::to_stored(info, obj);
    kind.to_storage_version(obj);
}

/// A Create of `t` needs its namespace to exist and not be terminating. Read from etcd, not
/// the cache, so that no create lands in a namespace whose deletion has been answered.
pub async fn require_namespace(
    store: &Store,
    namespaces: &Arc<ResourceInfo>,
    t: &Target,
    namespace: &str,
    deadline: Instant,
) -> Result<(), ApiError> {
    let key = store.key(namespaces, "", namespace);
    let ns: Object = store.get(&key, ReadFrom::Etcd, deadline).await?;
    if ns.deletion_timestamp().is_some() {
        return Err(namespace_terminating(t.clone(), namespace));
    }
    Ok(())
}

/// The error of a Create into a namespace being deleted, worded as Kubernetes' namespace
/// lifecycle admission words it; `t` names the object that was to be created.
pub fn namespace_terminating(t: Target, namespace: &str) -> ApiError {
    let mut e = forbidden(
        t,
        &format!(
            "unable to create new content in namespace {namespace} because it is being terminated"
        ),
    );
    e.causes.push(FieldCause {
        reason: "NamespaceTerminating".into(),
        message: format!("namespace {namespace} is being terminated"),
        field: "metadata.namespace".into(),
    });
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::target;
    use keel_api::Reason;

    use crate::registry::kinds::testing::info;

    #[test]
    fn creates_in_a_terminating_namespace_are_forbidden_as_kubernetes_words_it() {
        let e = namespace_terminating(target(&info("ConfigMap"), "x"), "a");
        assert_eq!(e.reason, Reason::Forbidden);
        assert_eq!(
            e.message,
            "configmaps \"x\" is forbidden: unable to create new content in namespace a because it is being terminated"
        );
        assert_eq!(e.causes[0].reason, "NamespaceTerminating");
        assert_eq!(e.causes[0].field, "metadata.namespace");
    }
}
