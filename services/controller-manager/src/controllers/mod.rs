//! The controllers, and how one is chosen by name and set up.

pub mod deployment;
pub mod expectations;
pub mod garbagecollector;
pub mod namespace;
pub mod podlifecycle;
pub mod replicaset;

use std::sync::Arc;

use futures::future::BoxFuture;
use keel_client::Client;
use keel_runtime::InformerFactory;
use prometheus_client::registry::Registry;

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
