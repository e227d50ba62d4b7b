//! `keelctl rollout`: the status, history, undo, restart, pause and resume of Deployments.
//! What each computes lives in [`crate::rollout`]; these modules read and write the objects.

pub mod history;
pub mod pause;
pub mod restart;
pub mod status;
pub mod undo;

use std::io::Write;

use keel_api::Metadata;
use keel_client::{ListParams, PatchType, gvr};
use serde_json::Value;

use crate::cmd::objects::{self, Finding, Found, Query};
use crate::context::Ctx;
use crate::error::{Error, api_within};
use crate::printer::{ResultFormat, ResultPrinter};
use crate::rollout::RolloutError;

/// Manage the rollout of a resource.
///
/// Valid resource types include: deployments.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    Status(status::Args),
    History(history::Args),
    Undo(undo::Args),
    Restart(restart::Args),
    Pause(pause::PauseArgs),
    Resume(pause::ResumeArgs),
}

pub async fn run(ctx: &Ctx, command: &Command, out: &mut dyn Write) -> Result<(), Error> {
    match command {
        Command::Status(a) => status::run(ctx, a, out).await,
        Command::History(a) => history::run(ctx, a, out).await,
        Command::Undo(a) => undo::run(ctx, a, out).await,
        Command::Restart(a) => restart::run(ctx, a, out).await,
        Command::Pause(a) => pause::run_pause(ctx, a, out).await,
        Command::Resume(a) => pause::run_resume(ctx, a, out).await,
    }
}

/// How every `rollout` subcommand names its objects.
#[derive(Debug, clap::Args)]
pub struct Targets {
    /// TYPE NAME..., TYPE/NAME..., or TYPE alone for every object of the type.
    #[arg(value_name = "RESOURCE")]
    pub targets: Vec<String>,
    /// The objects of this file, directory or - for stdin; may be repeated.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR|-",
        conflicts_with = "targets"
    )]
    pub files: Vec<String>,
    /// Only the objects of the type that match this label selector (e.g. app=nginx).
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,
}

impl Targets {
    /// Reads the objects named, as kubectl's rollout commands do: a type alone means all.
    async fn find<'r>(
        &self,
        ctx: &Ctx,
        resources: &'r crate::resources::Resources,
    ) -> Result<Finding<'r>, Error> {
        if self.targets.is_empty() && self.files.is_empty() {
            return Err(Error::Usage("required resource not specified".into()));
        }
        let query = Query {
            targets: &self.targets,
            files: &self.files,
            selector: self.selector.as_deref(),
            type_means_all: true,
            missing: "required resource not specified",
        };
        objects::find(ctx, resources, &query).await
    }
}

/// The ReplicaSets in the Deployment's namespace that its selector selects (the caller keeps
/// those it controls), in the server's order.
async fn replica_sets(ctx: &Ctx, deployment: &Found<'_>) -> Result<Vec<Value>, Error> {
    let params = ListParams {
        label_selector: crate::table::label_selector(&deployment.object["spec"]["selector"]),
        limit: 500,
        ..Default::default()
    };
    let list = ctx
        .client
        .list_all(
            &gvr("apps", "v1", "replicasets"),
            &deployment.namespace,
            &params,
        )
        .await?;
    Ok(list.items)
}

/// `pause`, `resume` and `restart`: for each object, the strategic merge patch `patch_for`
/// computes (or its refusal), sent, then `operation` (`paused`) or the `-o` output.
async fn patch_each(
    ctx: &Ctx,
    targets: &Targets,
    output: Option<ResultFormat>,
    out: &mut dyn Write,
    operation: &str,
    patch_for: impl Fn(&Found<'_>) -> Result<Value, RolloutError>,
) -> Result<(), Error> {
    let resources = ctx.resources().await?;
    let Finding { found, mut errors } = targets.find(ctx, &resources).await?;
    if found.is_empty() && errors.is_empty() {
        let ns = ctx.default_namespace();
        writeln!(std::io::stderr(), "No resources found in {ns} namespace.")?;
        return Ok(());
    }
    let mut printer = ResultPrinter::new(output);
    for f in &found {
        let patch = match patch_for(f) {
            Ok(p) => p,
            Err(e) => {
                errors.push(e.into());
                continue;
            }
        };
        let patched = ctx
            .client
            .patch(
                &f.resource.gvr,
                &f.namespace,
                f.name(),
                PatchType::Strategic,
                &patch,
            )
            .await;
        match patched {
            Ok(object) => printer.print(out, &object, operation)?,
            Err(e) => errors.push(api_within(e, Error::PatchFailed)),
        }
    }
    Error::from_many(errors)
}
