//! `keelctl edit`: change an object in `$EDITOR`; the change is sent as a patch, so that
//! whatever other writers change meanwhile is kept.

use std::io::Write;

use serde_json::Value;

use crate::context::Ctx;
use crate::editor;
use crate::error::Error;
use crate::patches::{self, Flavour};
use crate::printer::to_yaml;
use crate::resources::Resource;

/// Edit objects in your editor (KEEL_EDITOR, EDITOR, else vi).
///
/// The object is opened as YAML. When the editor exits, the difference between the object and
/// the edited text is sent as a patch (strategic for built-in kinds, merge for custom kinds):
/// fields other writers changed meanwhile are kept. An unchanged or empty file cancels the
/// edit. If the server refuses the change, the edited file is kept and its path printed.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  keelctl edit deployment nginx\n  EDITOR=nano keelctl edit cm/settings"
)]
pub struct Args {
    /// TYPE NAME or TYPE/NAME.
    #[arg(value_name = "RESOURCE", required = true)]
    pub targets: Vec<String>,
}

const HEADER: &str = "# Please edit the object below. Lines beginning with a '#' will be ignored,\n# and an empty file will abort the edit. The change is sent as a patch:\n# fields you do not change are left as they are on the server.\n#\n";

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    let (kind, names) = super::parse_named(&args.targets)?;
    let resources = ctx.resources().await?;
    let resource = resources.resolve(&kind)?;
    let namespace = ctx.namespace_of(resource);
    for name in names {
        let live = ctx.client.get(&resource.gvr, &namespace, &name).await?;
        match edit_one(ctx, resource, &namespace, &name, &live).await? {
            true => writeln!(out, "{} edited", resource.object_ref(&name))?,
            false => {
                writeln!(std::io::stderr(), "Edit cancelled, no changes made.")?;
            }
        }
    }
    Ok(())
}

/// Edits one object; `Ok(false)` when the user changed nothing.
async fn edit_one(
    ctx: &Ctx,
    resource: &Resource,
    namespace: &str,
    name: &str,
    live: &Value,
) -> Result<bool, Error> {
    let mut file = tempfile::Builder::new()
        .prefix("keelctl-edit-")
        .suffix(".yaml")
        .tempfile()?;
    write!(file, "{HEADER}{}", to_yaml(live)?)?;
    file.flush()?;
    editor::edit(file.path()).await?;
    let text = std::fs::read_to_string(file.path())?;
    let path = file.path().display().to_string();

    let content: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    if content.trim().is_empty() {
        return Ok(false);
    }
    // From here on a failure keeps the file, so that the user's work is not lost.
    let keep = |error: Error| -> Error {
        match file.keep() {
            Ok((_, path)) => Error::EditSaved {
                error: Box::new(error),
                saved: path.display().to_string(),
            },
            Err(_) => error,
        }
    };
    let edited: Value = match serde_saphyr::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            let line = e.location().map(|l| l.line()).filter(|l| *l > 0);
            let message = e.without_snippet().to_string();
            let message = match message.rfind(" at line ") {
                Some(i) => message[..i].to_string(),
                None => message,
            };
            return Err(keep(Error::Parse {
                source_name: path,
                line,
                message,
            }));
        }
    };
    if &edited == live {
        return Ok(false);
    }
    for field in ["apiVersion", "kind"] {
        if edited[field] != live[field] {
            return Err(keep(Error::Usage(format!(
                "{field} may not be changed by edit"
            ))));
        }
    }
    if edited["metadata"]["name"] != live["metadata"]["name"] {
        return Err(keep(Error::Usage(
            "metadata.name may not be changed by edit".into(),
        )));
    }
    let flavour = Flavour::of_object(live);
    let patch = match flavour.two_way(live, &edited) {
        Ok(p) => p,
        Err(error) => {
            return Err(keep(Error::Patch {
                object: resource.object_ref(name),
                error,
            }));
        }
    };
    if patches::is_empty(&patch) {
        return Ok(false);
    }
    match ctx
        .client
        .patch(&resource.gvr, namespace, name, flavour.patch_type(), &patch)
        .await
    {
        Ok(_) => Ok(true),
        Err(e) => Err(keep(e.into())),
    }
}
