//! `keelctl rollout restart`: stamp a Deployment's pod template so that every pod is replaced.

use std::io::Write;
use std::time::SystemTime;

use super::{Targets, patch_each};
use crate::context::Ctx;
use crate::error::Error;
use crate::printer::ResultFormat;
use crate::rollout::patches;

/// Restart a resource.
///
/// Sets the pod template annotation kubectl.kubernetes.io/restartedAt to now: the changed
/// template is a new revision, which the Deployment controller rolls out as any other.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  # Restart a deployment\n  keelctl rollout restart deployment/nginx\n\n  # Restart all deployments in the test-namespace namespace\n  keelctl rollout restart deployment -n test-namespace\n\n  # Restart deployments with the app=nginx label\n  keelctl rollout restart deployment --selector=app=nginx"
)]
pub struct Args {
    #[command(flatten)]
    pub targets: Targets,
    /// Print the restarted objects in this format instead of "deployment.apps/NAME restarted".
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<ResultFormat>,
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    // RFC 3339 to the second, as kubectl's time.RFC3339 (in UTC).
    let now = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    patch_each(ctx, &args.targets, args.output, out, "restarted", |f| {
        patches::restart(&f.resource.qualified_name(), &f.object, &now)
    })
    .await
}
