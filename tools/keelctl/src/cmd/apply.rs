//! `keelctl apply -f`: declarative configuration. Creates what is missing; otherwise sends the
//! three-way patch between the last applied configuration, the file and the live object, so
//! that fields removed from the file are removed and fields other writers set are kept.

use std::io::Write;

use keel_client::Reason;

use crate::context::{Ctx, require_name};
use crate::error::{Error, api_for};
use crate::last_applied;
use crate::manifest::{self, Manifest};
use crate::patches::{self, Flavour};
use crate::resources::Resources;

/// Apply a configuration to objects by file name or stdin.
///
/// Objects that do not exist are created. Existing objects are patched: fields the file sets
/// are set, fields removed from the file since the last apply are removed, fields set by
/// other writers are kept. The configuration is recorded in the annotation
/// kubectl.kubernetes.io/last-applied-configuration, as kubectl records it, so kubectl and
/// keelctl can take turns. Built-in kinds get strategic merge patches, custom kinds JSON merge
/// patches.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  keelctl apply -f nginx.yaml\n  keelctl apply -f manifests/\n  cat nginx.yaml | keelctl apply -f -"
)]
pub struct Args {
    #[command(flatten)]
    pub input: crate::manifest::FileArgs,
}

/// What apply did to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Created,
    Configured,
    Unchanged,
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    let manifests = manifest::read_all(&args.input.files)?;
    if manifests.is_empty() {
        return Err(Error::NoObjects("apply"));
    }
    let resources = ctx.resources().await?;
    let mut errors = Vec::new();
    for m in manifests {
        match apply_one(ctx, &resources, m).await {
            Ok((what, outcome)) => {
                let word = match outcome {
                    Outcome::Created => "created",
                    Outcome::Configured => "configured",
                    Outcome::Unchanged => "unchanged",
                };
                writeln!(out, "{what} {word}")?;
            }
            Err(e) => errors.push(e),
        }
    }
    Error::from_many(errors)
}

async fn apply_one(
    ctx: &Ctx,
    resources: &Resources,
    mut m: Manifest,
) -> Result<(String, Outcome), Error> {
    let (resource, namespace) = ctx.place(resources, &mut m)?;
    let name = require_name(&m)?;
    let what = resource.object_ref(&name);
    let (modified, _) = last_applied::annotate(&m.object);
    let gvr = &resource.gvr;
    let live = match ctx.client.get(gvr, &namespace, &name).await {
        Ok(live) => live,
        Err(e) if e.reason == Reason::NotFound => {
            ctx.client
                .create(gvr, &namespace, &modified)
                .await
                .map_err(|e| api_for("creating", &m.source, e))?;
            return Ok((what, Outcome::Created));
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
        return Ok((what, Outcome::Unchanged));
    }
    ctx.client
        .patch(gvr, &namespace, &name, flavour.patch_type(), &patch)
        .await
        .map_err(|e| api_for("patching", &m.source, e))?;
    Ok((what, Outcome::Configured))
}
