//! `keelctl rollout history`: a Deployment's revisions, from the ReplicaSets it controls.

use std::io::Write;

use super::{Targets, replica_sets};
use crate::cmd::objects::{Finding, Found};
use crate::context::Ctx;
use crate::error::Error;
use crate::printer::{ResultFormat, ResultPrinter, to_yaml};
use crate::rollout::history::{History, unreadable_warning};
use crate::rollout::{RolloutError, owned_replica_sets};

/// View previous rollout revisions and configurations.
///
/// Without --revision, the REVISION / CHANGE-CAUSE table; with it, the pod template of that
/// revision, in YAML. With -o, the ReplicaSets of the revisions themselves.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  # View the rollout history of a deployment\n  keelctl rollout history deployment/abc\n\n  # View the details of deployment revision 3\n  keelctl rollout history deployment/abc --revision=3"
)]
pub struct Args {
    #[command(flatten)]
    pub targets: Targets,
    /// See the details, including podTemplate of the revision specified
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub revision: i64,
    /// Print the ReplicaSets of the revisions in this format.
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<ResultFormat>,
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    if args.revision < 0 {
        return Err(Error::Usage(format!(
            "revision must be a positive integer: {}",
            args.revision
        )));
    }
    let resources = ctx.resources().await?;
    let Finding { found, mut errors } = args.targets.find(ctx, &resources).await?;
    let mut printer = ResultPrinter::new(args.output);
    for f in &found {
        if let Err(e) = history(ctx, f, args, &mut printer, out).await {
            errors.push(e);
        }
    }
    Error::from_many(errors)
}

async fn history(
    ctx: &Ctx,
    f: &Found<'_>,
    args: &Args,
    printer: &mut ResultPrinter,
    out: &mut dyn Write,
) -> Result<(), Error> {
    if !f.is_deployment() {
        return Err(RolloutError::Unsupported(format!(
            "no history viewer has been implemented for {:?}",
            f.group_kind()
        ))
        .into());
    }
    let listed = replica_sets(ctx, f).await?;
    let owned = owned_replica_sets(&f.object, &listed);
    let history = History::of(&owned);
    for (rs, e) in &history.unreadable {
        super::super::warn(&unreadable_warning(rs, &f.object, e));
    }
    if args.output.is_some() {
        if args.revision > 0 {
            let rs = history
                .revisions
                .get(&args.revision)
                .ok_or(RolloutError::HistoryRevisionNotFound)?;
            return printer.print(out, rs, "");
        }
        for rs in history.revisions.values() {
            printer.print(out, rs, "")?;
        }
        return Ok(());
    }
    if args.revision > 0 {
        let template = history
            .template(args.revision)
            .ok_or(RolloutError::HistoryRevisionNotFound)?;
        let yaml: String = to_yaml(&template)?
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect();
        let text = format!("with revision #{}\nPod Template:\n{yaml}", args.revision);
        return printer.print(out, &f.object, &text);
    }
    // kubectl's layout: the object's name, a space, then the table on the lines after.
    printer.print(out, &f.object, &format!("\n{}", history.table()))
}
