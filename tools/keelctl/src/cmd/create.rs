//! `keelctl create -f`: imperative creation from files; an object that exists is an error.

use std::io::Write;

use crate::context::Ctx;
use crate::error::{Error, api_for};
use crate::last_applied;
use crate::manifest;
use crate::printer::name_of;

/// Create objects from files or stdin.
///
/// An object that already exists is an error (AlreadyExists). Use `apply` to create or
/// update declaratively.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  keelctl create -f nginx.yaml\n  keelctl create -f nginx.yaml --save-config   # later `apply`s patch it"
)]
pub struct Args {
    #[command(flatten)]
    pub input: crate::manifest::FileArgs,
    /// Record the configuration in the last-applied annotation, so that `apply` can later
    /// patch the object.
    #[arg(long)]
    pub save_config: bool,
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
            // The server's name, which differs from the file's with `generateName`.
            Ok(created) => writeln!(out, "{} created", resource.object_ref(name_of(&created)))?,
            Err(e) => errors.push(api_for("creating", &m.source, e)),
        }
    }
    Error::from_many(errors)
}
