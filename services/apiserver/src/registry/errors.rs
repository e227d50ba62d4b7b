//! The errors the registry words as Kubernetes does, whatever the kind: leaf helpers every
//! rule file uses.

use keel_api::{ApiError, ResourceInfo, Target};

/// The target of an `Invalid` error: by kind, as Kubernetes does
/// (`Deployment.apps "web" is invalid: ...`).
pub fn kind_target(info: &ResourceInfo, name: &str) -> Target {
    Target::new(&info.gvr.group, &info.kind, name)
}

/// Kubernetes' `Forbidden` wording: `namespaces "default" is forbidden: <why>`, or
/// `configmaps is forbidden: <why>` when no object is named.
pub fn forbidden(t: Target, why: &str) -> ApiError {
    let what = if t.group.is_empty() {
        t.kind.clone()
    } else {
        format!("{}.{}", t.kind, t.group)
    };
    let message = if t.name.is_empty() {
        format!("{what} is forbidden: {why}")
    } else {
        format!("{what} {:?} is forbidden: {why}", t.name)
    };
    ApiError::new(keel_api::Reason::Forbidden, t, message)
}
