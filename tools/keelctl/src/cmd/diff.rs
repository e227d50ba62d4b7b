//! `keelctl diff -f`: what `apply` would change, as a unified diff of YAML.

use std::io::Write;

use keel_client::Reason;
use similar::TextDiff;

use crate::context::{Ctx, require_name};
use crate::error::{Error, api_for};
use crate::last_applied;
use crate::manifest;
use crate::patches::Flavour;
use crate::printer::to_yaml;

/// Show what `apply -f` would change.
///
/// Prints a unified diff of the live objects and the objects as `apply` would leave them, in
/// YAML. Nothing is written.
///
/// Exit status, as kubectl diff: 0 when nothing would change, 1 when something would,
/// more than 1 when keelctl failed.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  keelctl diff -f nginx.yaml\n  keelctl diff -f manifests/ && echo \"nothing to apply\""
)]
pub struct Args {
    #[command(flatten)]
    pub input: crate::manifest::FileArgs,
}

/// The exit status of a `diff` that found differences.
pub const DIFFERENCES: u8 = 1;
/// The exit status of a `diff` that failed (kubectl's "greater than 1").
pub const FAILED: u8 = 2;

/// Prints the diffs; `Ok(true)` when something would change.
pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<bool, Error> {
    let manifests = manifest::read_all(&args.input.files)?;
    if manifests.is_empty() {
        return Err(Error::NoObjects("diff"));
    }
    let resources = ctx.resources().await?;
    let mut differs = false;
    for mut m in manifests {
        let (resource, namespace) = ctx.place(&resources, &mut m)?;
        let name = require_name(&m)?;
        let (modified, _) = last_applied::annotate(&m.object);
        let (live, merged) = match ctx.client.get(&resource.gvr, &namespace, &name).await {
            Ok(live) => {
                let flavour = Flavour::of(m.api_version(), m.kind());
                let patch_error = |error| Error::Patch {
                    object: resource.object_ref(&name),
                    error,
                };
                let last = last_applied::recorded(&live);
                let patch = flavour
                    .three_way(last.as_ref(), &modified, &live)
                    .map_err(patch_error)?;
                let merged = flavour.apply(&live, &patch).map_err(patch_error)?;
                (Some(live), merged)
            }
            Err(e) if e.reason == Reason::NotFound => (None, modified),
            Err(e) => {
                return Err(api_for("retrieving current configuration of", &m.source, e));
            }
        };
        let live_text = match &live {
            Some(live) => to_yaml(live)?,
            None => String::new(),
        };
        let merged_text = to_yaml(&merged)?;
        if live_text == merged_text {
            continue;
        }
        differs = true;
        // kubectl diffs files named group.version.kind.namespace.name in two directories.
        let file = format!(
            "{}.{}.{}.{}",
            resource.api_version().replace('/', "."),
            resource.kind,
            if namespace.is_empty() {
                ""
            } else {
                namespace.as_str()
            },
            name
        )
        .replace("..", ".");
        let (from, to) = (format!("LIVE/{file}"), format!("MERGED/{file}"));
        writeln!(out, "diff -u -N {from} {to}")?;
        write!(
            out,
            "{}",
            TextDiff::from_lines(&live_text, &merged_text)
                .unified_diff()
                .context_radius(3)
                .header(&from, &to)
        )?;
    }
    Ok(differs)
}
