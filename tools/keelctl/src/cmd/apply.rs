//! `keelctl apply -f`: declarative configuration. Creates what is missing; otherwise sends the
//! three-way patch between the last applied configuration, the file and the live object, so
//! that fields removed from the file are removed and fields other writers set are kept. An
//! object left uninitialized is waited for (`cmd/initialization.rs`).

use std::io::Write;

use keel_client::Reason;
use serde_json::Value;

use super::initialization;
use crate::context::{Ctx, require_name};
use crate::error::{Error, api_for};
use crate::last_applied;
use crate::manifest::{self, Manifest};
use crate::patches::{self, Flavour};
use crate::resources::{Resource, Resources};

/// Apply a configuration to objects by file name or stdin.
///
/// Objects that do not exist are created. Existing objects are patched: fields the file sets
/// are set, fields removed from the file since the last apply are removed, fields set by
/// other writers are kept. The configuration is recorded in the annotation
/// kubectl.kubernetes.io/last-applied-configuration, as kubectl records it, so kubectl and
/// keelctl can take turns. Built-in kinds get strategic merge patches, custom kinds JSON merge
/// patches.
///
/// An object whose initializers (metadata.initializers.pending) are not done is waited for
/// until they are, unless --wait=false, for at most --timeout when given.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  keelctl apply -f nginx.yaml\n  keelctl apply -f manifests/\n  cat nginx.yaml | keelctl apply -f -"
)]
pub struct Args {
    #[command(flatten)]
    pub input: crate::manifest::FileArgs,
    /// Wait until the objects are initialized: their initializers
    /// (metadata.initializers.pending) are done.
    #[arg(
        long,
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub wait: bool,
}

/// What apply did to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Created,
    Configured,
    Unchanged,
}

/// What apply did to one object, and the object as the server last returned it.
struct Applied<'r> {
    /// `deployment.apps/nginx`.
    what: String,
    resource: &'r Resource,
    namespace: String,
    outcome: Outcome,
    object: Value,
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    let manifests = manifest::read_all(&args.input.files)?;
    if manifests.is_empty() {
        return Err(Error::NoObjects("apply"));
    }
    let resources = ctx.resources().await?;
    let mut errors = Vec::new();
    for m in manifests {
        let applied = match apply_one(ctx, &resources, m).await {
            Ok(applied) => applied,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let word = match applied.outcome {
            Outcome::Created => "created",
            Outcome::Configured => "configured",
            Outcome::Unchanged => "unchanged",
        };
        writeln!(out, "{} {word}", applied.what)?;
        out.flush()?;
        if args.wait {
            let waited =
                initialization::wait(ctx, applied.resource, &applied.namespace, &applied.object)
                    .await;
            if let Err(e) = waited {
                errors.push(e);
            }
        }
    }
    Error::from_many(errors)
}

async fn apply_one<'r>(
    ctx: &Ctx,
    resources: &'r Resources,
    mut m: Manifest,
) -> Result<Applied<'r>, Error> {
    let (resource, namespace) = ctx.place(resources, &mut m)?;
    let name = require_name(&m)?;
    let what = resource.object_ref(&name);
    let (modified, _) = last_applied::annotate(&m.object);
    let gvr = &resource.gvr;
    // An object whose initializers are not done exists too: the server hides it only from
    // those that do not ask for it.
    let live = match ctx.client.get_uninitialized(gvr, &namespace, &name).await {
        Ok(live) => live,
        Err(e) if e.reason == Reason::NotFound => {
            let object = ctx
                .client
                .create(gvr, &namespace, &modified)
                .await
                .map_err(|e| api_for("creating", &m.source, e))?;
            return Ok(Applied {
                what,
                resource,
                namespace,
                outcome: Outcome::Created,
                object,
            });
        }
        Err(e) => {
            return Err(api_for("retrieving current configuration of", &m.source, e));
        }
    };
    let last = last_applied::recorded(&live);
    if last.is_none() {
        super::warn(&format!(
            "resource {} {name:?} is missing the {} annotation which is required by keelctl apply. keelctl apply should only be used on resources created declaratively by either keelctl create --save-config or keelctl apply. The missing annotation will be patched automatically.",
            resource.qualified_name(),
            last_applied::ANNOTATION
        ));
    }
    let flavour = Flavour::of(m.api_version(), m.kind());
    let patch = flavour
        .three_way(last.as_ref(), &modified, &live)
        .map_err(|error| Error::Patch {
            object: what.clone(),
            error,
        })?;
    if patches::is_empty(&patch) {
        return Ok(Applied {
            what,
            resource,
            namespace,
            outcome: Outcome::Unchanged,
            object: live,
        });
    }
    let object = ctx
        .client
        .patch(gvr, &namespace, &name, flavour.patch_type(), &patch)
        .await
        .map_err(|e| api_for("patching", &m.source, e))?;
    Ok(Applied {
        what,
        resource,
        namespace,
        outcome: Outcome::Configured,
        object,
    })
}
