//! `keelctl rollout pause` and `resume`: set or clear a Deployment's `spec.paused`.

use std::io::Write;

use super::{Targets, patch_each};
use crate::context::Ctx;
use crate::error::Error;
use crate::printer::ResultFormat;
use crate::rollout::patches;

/// Mark the provided resource as paused.
///
/// Paused resources will not be reconciled by a controller. Use "keelctl rollout resume" to
/// resume a paused resource. Currently only deployments support being paused.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  # Mark the nginx deployment as paused\n  # Any current state of the deployment will continue its function; new updates\n  # to the deployment will not have an effect as long as the deployment is paused\n  keelctl rollout pause deployment/nginx"
)]
pub struct PauseArgs {
    #[command(flatten)]
    pub targets: Targets,
    /// Print the paused objects in this format instead of "deployment.apps/NAME paused".
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<ResultFormat>,
}

/// Resume a paused resource.
///
/// Paused resources will not be reconciled by a controller. By resuming a resource, we allow
/// it to be reconciled again. Currently only deployments support being resumed.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  # Resume an already paused deployment\n  keelctl rollout resume deployment/nginx"
)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub targets: Targets,
    /// Print the resumed objects in this format instead of "deployment.apps/NAME resumed".
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<ResultFormat>,
}

pub async fn run_pause(ctx: &Ctx, args: &PauseArgs, out: &mut dyn Write) -> Result<(), Error> {
    patch_each(ctx, &args.targets, args.output, out, "paused", |f| {
        patches::pause(&f.resource.qualified_name(), &f.object)
    })
    .await
}

pub async fn run_resume(ctx: &Ctx, args: &ResumeArgs, out: &mut dyn Write) -> Result<(), Error> {
    patch_each(ctx, &args.targets, args.output, out, "resumed", |f| {
        patches::resume(&f.resource.qualified_name(), &f.object)
    })
    .await
}
