//! `keelctl create -f`: imperative creation from files; an object that exists is an error. An
//! object created uninitialized is waited for (`cmd/initialization.rs`).

use std::io::Write;

use keel_api::Metadata;

use super::initialization;
use crate::context::Ctx;
use crate::error::{Error, api_for};
use crate::last_applied;
use crate::manifest;

/// Create objects from files or stdin.
///
/// An object that already exists is an error (AlreadyExists). Use `apply` to create or
/// update declaratively. An object created with initializers pending
/// (metadata.initializers.pending) is waited for until they are done, unless --wait=false,
/// for at most --timeout when given.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  keelctl create -f nginx.yaml\n  keelctl create -f nginx.yaml --save-config   # later `apply`s patch it\n  keelctl create -f myapp-pod.yaml --wait=false   # do not wait for its initializers"
)]
pub struct Args {
    #[command(flatten)]
    pub input: crate::manifest::FileArgs,
    /// Record the configuration in the last-applied annotation, so that `apply` can later
    /// patch the object.
    #[arg(long)]
    pub save_config: bool,
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

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    let manifests = manifest::read_all(&args.input.files)?;
    if manifests.is_empty() {
        return Err(Error::NoObjects("create"));
    }
    let resources = ctx.resources().await?;
    let mut errors = Vec::new();
    for mut m in manifests {
        let (resource, namespace) = match ctx.place(&resources, &mut m) {
            Ok(placed) => placed,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let object = if args.save_config {
            last_applied::annotate(&m.object).0
        } else {
            m.object.clone()
        };
        match ctx.client.create(&resource.gvr, &namespace, &object).await {
            Ok(created) => {
                // The server's name, which differs from the file's with `generateName`.
                writeln!(out, "{} created", resource.object_ref(created.name()))?;
                out.flush()?;
                if args.wait
                    && let Err(e) = initialization::wait(ctx, resource, &namespace, &created).await
                {
                    errors.push(e);
                }
            }
            Err(e) => errors.push(api_for("creating", &m.source, e)),
        }
    }
    Error::from_many(errors)
}
