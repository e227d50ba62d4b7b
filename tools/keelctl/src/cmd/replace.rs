//! `keelctl replace -f`: imperative replacement of whole objects from files.

use std::io::Write;

use keel_client::Reason;

use crate::context::{Ctx, require_name};
use crate::error::{Error, api_for};
use crate::manifest;

/// Replace objects by the ones in files or stdin.
///
/// The whole object is sent. When the file holds a metadata.resourceVersion it is a
/// precondition: a file older than the live object is refused with Conflict, and nothing is
/// written. Without one, the object is replaced whatever its current version.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  keelctl replace -f nginx.yaml\n  keelctl get deploy nginx -o yaml > d.yaml; vi d.yaml; keelctl replace -f d.yaml   # Conflict if it changed meanwhile"
)]
pub struct Args {
    #[command(flatten)]
    pub input: crate::manifest::FileArgs,
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    let manifests = manifest::read_all(&args.input.files)?;
    if manifests.is_empty() {
        return Err(Error::NoObjects("replace"));
    }
    let resources = ctx.resources().await?;
    let mut errors = Vec::new();
    for mut m in manifests {
        let placed = ctx
            .place(&resources, &mut m)
            .and_then(|(r, ns)| Ok((r, ns, require_name(&m)?)));
        let (resource, namespace, name) = match placed {
            Ok(placed) => placed,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let mut object = m.object.clone();
        if m.object["metadata"]["resourceVersion"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            // As kubectl: a file without a version replaces whatever is there, so it is sent
            // with the live version (custom kinds refuse an update without one).
            match ctx.client.get(&resource.gvr, &namespace, &name).await {
                Ok(live) => {
                    object["metadata"]["resourceVersion"] =
                        live["metadata"]["resourceVersion"].clone()
                }
                Err(e) if e.reason == Reason::NotFound => {}
                Err(e) => {
                    errors.push(api_for("replacing", &m.source, e));
                    continue;
                }
            }
        }
        match ctx.client.update(&resource.gvr, &namespace, &object).await {
            Ok(_) => writeln!(out, "{} replaced", resource.object_ref(&name))?,
            Err(e) => errors.push(api_for("replacing", &m.source, e)),
        }
    }
    Error::from_many(errors)
}
