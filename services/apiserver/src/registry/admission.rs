//! Admission on Create: Kubernetes' namespace lifecycle rule, that nothing is created in a
//! namespace that does not exist or is being deleted.

use std::sync::Arc;

use keel_api::{ApiError, FieldCause, Object, ResourceInfo, Target};
use tokio::time::Instant;

use super::errors::forbidden;
use crate::storage::{ReadFrom, Store};

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

    fn info(kind: &str) -> ResourceInfo {
        keel_api::builtin_resources()
            .into_iter()
            .find(|r| r.kind == kind)
            .unwrap()
    }

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
