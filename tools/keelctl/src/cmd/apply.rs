//! `keelctl apply -f`: declarative configuration. Creates what is missing; otherwise sends the
//! three-way patch between the last applied configuration, the file and the live object, so
//! that fields removed from the file are removed and fields other writers set are kept. An
//! object left uninitialized is waited for (`cmd/initialization.rs`). With `--server-side`,
//! each object is sent whole as one server-side apply instead, and the server merges it and
//! records who owns which field (`managedFields`).

use std::io::Write;

use keel_client::{ApplyParams, Reason};
use serde_json::Value;

use super::initialization;
use crate::context::{Ctx, require_name};
use crate::error::{Error, api_for, api_within};
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
/// With --server-side, the server applies each object instead: the file is the whole
/// configuration of its field manager (--field-manager, keelctl by default), the server records
/// which manager owns each field (metadata.managedFields) and refuses to change a field another
/// manager owns unless --force-conflicts. No annotation is written.
///
/// An object whose initializers (metadata.initializers.pending) are not done is waited for
/// until they are, unless --wait=false, for at most --timeout when given.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  keelctl apply -f nginx.yaml\n  keelctl apply -f manifests/\n  cat nginx.yaml | keelctl apply -f -\n  keelctl apply --server-side -f nginx.yaml\n  keelctl apply --server-side --field-manager ci --force-conflicts -f nginx.yaml"
)]
pub struct Args {
    #[command(flatten)]
    pub input: crate::manifest::FileArgs,
    /// Apply on the server: send each object whole as a server-side apply, which records the
    /// field manager as the owner of the fields it sets.
    #[arg(long)]
    pub server_side: bool,
    /// With --server-side: take the fields other managers own instead of failing on the
    /// conflict.
    #[arg(long)]
    pub force_conflicts: bool,
    /// With --server-side: the manager applying, whose fields the configuration is
    /// (default: keelctl).
    #[arg(long, value_name = "NAME")]
    pub field_manager: Option<String>,
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

/// The field manager of `apply --server-side` without `--field-manager`, as kubectl's is
/// `kubectl`.
pub const FIELD_MANAGER: &str = "keelctl";

/// What apply did to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Created,
    Configured,
    Unchanged,
    /// Sent as a server-side apply, which created or changed it, or left it as it was.
    ServerSideApplied,
}

/// How the objects are applied: by the client's three-way patch, or on the server.
enum How {
    ClientSide,
    ServerSide(ApplyParams),
}

impl How {
    /// Checks the flags that only a server-side apply takes.
    fn of(args: &Args) -> Result<How, Error> {
        if !args.server_side {
            if args.force_conflicts {
                return Err(Error::Usage(
                    "--force-conflicts only works with --server-side".into(),
                ));
            }
            // kubectl names the client-side writes' manager with it; keelctl's client-side
            // writes do not name one, so the flag would be silently ignored.
            if args.field_manager.is_some() {
                return Err(Error::Usage(
                    "--field-manager only works with --server-side".into(),
                ));
            }
            return Ok(How::ClientSide);
        }
        let manager = args.field_manager.as_deref().unwrap_or(FIELD_MANAGER);
        let mut params = ApplyParams::new(manager);
        params.force = args.force_conflicts;
        Ok(How::ServerSide(params))
    }
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
    let how = How::of(args)?;
    let manifests = manifest::read_all(&args.input.files)?;
    if manifests.is_empty() {
        return Err(Error::NoObjects("apply"));
    }
    let resources = ctx.resources().await?;
    let mut errors = Vec::new();
    for m in manifests {
        let applied = match &how {
            How::ClientSide => apply_one(ctx, &resources, m).await,
            How::ServerSide(params) => apply_on_server(ctx, &resources, m, params).await,
        };
        let applied = match applied {
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
            Outcome::ServerSideApplied => "serverside-applied",
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

/// One object as a server-side apply: the file's object is the manager's configuration, sent
/// as it is (its namespace written in). A conflict reads as kubectl's, with its advice.
async fn apply_on_server<'r>(
    ctx: &Ctx,
    resources: &'r Resources,
    mut m: Manifest,
    params: &ApplyParams,
) -> Result<Applied<'r>, Error> {
    let (resource, namespace) = ctx.place(resources, &mut m)?;
    let name = require_name(&m)?;
    let object = ctx
        .client
        .apply(&resource.gvr, &namespace, &name, &m.object, params)
        .await
        .map_err(|e| match e.reason {
            Reason::Conflict => api_within(e, Error::ApplyConflict),
            _ => Error::from(e),
        })?;
    Ok(Applied {
        what: resource.object_ref(&name),
        resource,
        namespace,
        outcome: Outcome::ServerSideApplied,
        object,
    })
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn how(flags: &[&str]) -> Result<How, Error> {
        let argv = ["apply", "-f", "x.yaml"].iter().chain(flags);
        How::of(&Cli::try_parse_from(argv).unwrap().args)
    }

    fn params(flags: &[&str]) -> ApplyParams {
        match how(flags) {
            Ok(How::ServerSide(p)) => p,
            Ok(How::ClientSide) => panic!("{flags:?}: client-side"),
            Err(e) => panic!("{flags:?}: {e}"),
        }
    }

    #[test]
    fn server_side_applies_as_keelctl_unless_named_and_forces_only_when_told() {
        assert!(matches!(how(&[]), Ok(How::ClientSide)));
        assert_eq!(params(&["--server-side"]), ApplyParams::new("keelctl"));
        assert_eq!(
            params(&[
                "--server-side",
                "--field-manager",
                "ci",
                "--force-conflicts"
            ]),
            ApplyParams::new("ci").force()
        );
    }

    #[test]
    fn server_side_flags_without_server_side_are_usage_errors() {
        let refused = |flags: &[&str]| match how(flags) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{flags:?} accepted"),
        };
        assert_eq!(
            refused(&["--force-conflicts"]),
            "error: --force-conflicts only works with --server-side"
        );
        assert_eq!(
            refused(&["--field-manager", "ci"]),
            "error: --field-manager only works with --server-side"
        );
    }
}
