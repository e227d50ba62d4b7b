//! The controllers, and how one is chosen by name and set up.

pub mod deployment;
pub mod expectations;
pub mod garbagecollector;
pub mod namespace;
pub mod podlifecycle;
pub mod replicaset;

use std::fmt::Display;
use std::hash::Hash;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use keel_client::{ApiError, Client, GroupVersionResource, PatchType, Reason};
use keel_runtime::{Action, Controller, InformerFactory};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use crate::config::Config;
use crate::shutdown::Shutdown;

/// Every controller, by the name `--controllers` uses.
pub const ALL: [&str; 5] = [
    "replicaset",
    "deployment",
    "podlifecycle",
    "garbagecollector",
    "namespace",
];

/// What every controller is set up with.
pub struct Context {
    pub client: Client,
    /// Shared: one watch per resource however many controllers read it.
    pub factory: InformerFactory,
    pub config: Arc<Config>,
}

/// A controller whose informers and handlers are registered: running it is the last step.
pub type Start = Box<dyn FnOnce(Shutdown) -> BoxFuture<'static, ()> + Send>;

/// The [`Start`] of a controller whose reconcile is `reconcile(this, key)`: it runs on the
/// controller's workers until the shutdown signal, then drains.
pub fn start<K, T, F, Fut, E>(controller: Controller<K>, this: Arc<T>, reconcile: F) -> Start
where
    K: Clone + Eq + Hash + Display + Send + Sync + 'static,
    T: Send + Sync + 'static,
    F: Fn(Arc<T>, K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: Display + Send + 'static,
{
    Box::new(move |shutdown| {
        async move {
            controller
                .run(move |key| reconcile(this.clone(), key), shutdown.wait())
                .await
        }
        .boxed()
    })
}

/// Writes `status` of `obj` as a merge patch of the status subresource, unless it is unchanged.
/// The `resourceVersion` it was computed from is a precondition: a status from a stale cache is
/// refused, and the newer object's event brings the key back, so NotFound and Conflict are not
/// errors here.
pub async fn write_status(
    client: &Client,
    gvr: &GroupVersionResource,
    obj: &Value,
    status: Value,
) -> Result<(), ApiError> {
    if status == obj["status"] {
        return Ok(());
    }
    let body = json!({"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": status});
    match client
        .patch_subresource(
            gvr,
            crate::objects::namespace(obj),
            crate::objects::name(obj),
            "status",
            PatchType::Merge,
            serde_json::to_vec(&body).unwrap_or_default(),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.reason, Reason::NotFound | Reason::Conflict) => Ok(()),
        Err(e) => Err(e),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("unknown controller {0:?}; known: {known}", known = ALL.join(", "))]
    Unknown(String),
    #[error("controller {controller}: {message}")]
    Failed { controller: String, message: String },
}

/// The controllers `--controllers` names: `*` is all of them, `-name` takes one out.
pub fn enabled(flags: &[String]) -> Result<Vec<&'static str>, SetupError> {
    let mut on: Vec<&'static str> = Vec::new();
    let mut off: Vec<&'static str> = Vec::new();
    for f in flags.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        if f == "*" {
            on.extend(ALL);
            continue;
        }
        let (list, name) = match f.strip_prefix('-') {
            Some(n) => (&mut off, n),
            None => (&mut on, f),
        };
        let known = ALL
            .iter()
            .find(|c| **c == name)
            .ok_or_else(|| SetupError::Unknown(name.to_string()))?;
        list.push(known);
    }
    if on.is_empty() && !off.is_empty() {
        on.extend(ALL);
    }
    let mut out: Vec<&'static str> = ALL
        .iter()
        .copied()
        .filter(|c| on.contains(c) && !off.contains(c))
        .collect();
    out.dedup();
    Ok(out)
}

/// Sets up one controller: registers its informers, handlers and metrics.
pub fn setup(name: &str, ctx: &Context, registry: &mut Registry) -> Result<Start, SetupError> {
    match name {
        "replicaset" => replicaset::setup(ctx, registry),
        "deployment" => deployment::setup(ctx, registry),
        "podlifecycle" => podlifecycle::setup(ctx, registry),
        "garbagecollector" => garbagecollector::setup(ctx, registry),
        "namespace" => namespace::setup(ctx, registry),
        other => Err(SetupError::Unknown(other.to_string())),
    }
}

impl SetupError {
    pub fn failed(controller: &str, e: impl std::fmt::Display) -> SetupError {
        SetupError::Failed {
            controller: controller.to_string(),
            message: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(flags: &[&str]) -> Result<Vec<&'static str>, SetupError> {
        enabled(&flags.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn controllers_are_chosen_by_name() {
        assert_eq!(names(&["*"]).unwrap(), ALL.to_vec());
        assert_eq!(
            names(&["deployment", "replicaset"]).unwrap(),
            vec!["replicaset", "deployment"]
        );
        assert_eq!(names(&["*", "-namespace"]).unwrap(), ALL[..4].to_vec());
        assert_eq!(names(&["-namespace"]).unwrap(), ALL[..4].to_vec());
        assert!(matches!(names(&["kubelet"]), Err(SetupError::Unknown(_))));
    }
}
