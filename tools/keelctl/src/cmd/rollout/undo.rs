//! `keelctl rollout undo`: put back the pod template of an earlier revision.

use std::io::Write;

use keel_api::Metadata;
use keel_client::PatchType;
use serde_json::Value;

use super::{Targets, replica_sets};
use crate::cmd::objects::{Finding, Found};
use crate::context::Ctx;
use crate::error::{Error, api_within};
use crate::printer::{ResultFormat, ResultPrinter};
use crate::rollout::rollback::{self, Rollback};
use crate::rollout::{RolloutError, owned_replica_sets};

/// Undo a previous rollout.
///
/// The Deployment's pod template becomes that of the ReplicaSet of the revision (without its
/// pod-template-hash label), and its annotations the revision's; the controller then rolls
/// it out as a new revision. The patch is refused if the Deployment changed since keelctl
/// read it.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  # Roll back to the previous deployment\n  keelctl rollout undo deployment/abc\n\n  # Roll back to revision 3\n  keelctl rollout undo deployment/abc --to-revision=3"
)]
pub struct Args {
    #[command(flatten)]
    pub targets: Targets,
    /// The revision to rollback to. Default to 0 (last revision).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub to_revision: i64,
    /// Print the rolled back objects in this format instead of "deployment.apps/NAME rolled
    /// back".
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<ResultFormat>,
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    let resources = ctx.resources().await?;
    let Finding { found, mut errors } = args.targets.find(ctx, &resources).await?;
    let mut printer = ResultPrinter::new(args.output);
    for f in &found {
        match undo(ctx, f, args.to_revision).await {
            Ok((object, operation)) => printer.print(out, &object, &operation)?,
            Err(e) => errors.push(e),
        }
    }
    Error::from_many(errors)
}

/// Rolls one Deployment back; returns the object to print and what was done.
async fn undo(ctx: &Ctx, f: &Found<'_>, to: i64) -> Result<(Value, String), Error> {
    if !f.is_deployment() {
        return Err(RolloutError::Unsupported(format!(
            "no rollbacker has been implemented for {:?}",
            f.group_kind()
        ))
        .into());
    }
    if to < 0 {
        return Err(RolloutError::RevisionNotFound(to).into());
    }
    let listed = replica_sets(ctx, f).await?;
    let owned = owned_replica_sets(&f.object, &listed);
    match rollback::plan(&f.object, &owned, to)? {
        Rollback::Skipped(why) => Ok((f.object.clone(), why)),
        Rollback::Patch(patch) => {
            let patched = ctx
                .client
                .patch(
                    &f.resource.gvr,
                    &f.namespace,
                    f.name(),
                    PatchType::Json,
                    &patch,
                )
                .await
                .map_err(|e| {
                    api_within(e, |message| Error::RollbackFailed {
                        revision: to,
                        message,
                    })
                })?;
            Ok((patched, "rolled back".into()))
        }
    }
}
