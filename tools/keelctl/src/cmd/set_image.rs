//! `keelctl set image`: change container images of pod templates (or pods) with a patch.

use std::io::Write;

use serde_json::Value;

use crate::context::Ctx;
use crate::error::Error;
use crate::patches::{self, Flavour};

/// Update the image of containers.
///
/// Sends the two-way patch between the object and the object with its new images, so that
/// whatever else changes meanwhile is kept. CONTAINER may be * for every container
/// (init containers included).
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  keelctl set image deployment/nginx nginx=nginx:1.7.9\n  keelctl set image deployment nginx '*=nginx:1.9.1'"
)]
pub struct Args {
    /// TYPE NAME or TYPE/NAME, then CONTAINER=IMAGE pairs.
    #[arg(value_name = "RESOURCE CONTAINER=IMAGE", required = true, num_args = 2..)]
    pub args: Vec<String>,
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    let (targets, pairs): (Vec<String>, Vec<String>) =
        args.args.iter().cloned().partition(|a| !a.contains('='));
    if pairs.is_empty() {
        return Err(Error::Usage(
            "at least one image update is required (CONTAINER=IMAGE)".into(),
        ));
    }
    let images = pairs
        .iter()
        .map(|p| match p.split_once('=') {
            Some((c, i)) if !c.is_empty() && !i.is_empty() => Ok((c.to_string(), i.to_string())),
            _ => Err(Error::Usage(format!("expected CONTAINER=IMAGE, got {p:?}"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (kind, names) = super::parse_named(&targets)?;
    let resources = ctx.resources().await?;
    let resource = resources.resolve(&kind)?;
    let namespace = ctx.namespace_of(resource);
    for name in names {
        let live = ctx.client.get(&resource.gvr, &namespace, &name).await?;
        let mut changed = live.clone();
        set_images(&mut changed, &images)?;
        let flavour = Flavour::of_object(&live);
        let what = resource.object_ref(&name);
        let patch = flavour
            .two_way(&live, &changed)
            .map_err(|error| Error::Patch {
                object: what.clone(),
                error,
            })?;
        // As kubectl: an object already at these images is left alone, silently.
        if patches::is_empty(&patch) {
            continue;
        }
        ctx.client
            .patch(
                &resource.gvr,
                &namespace,
                &name,
                flavour.patch_type(),
                &patch,
            )
            .await?;
        writeln!(out, "{what} image updated")?;
    }
    Ok(())
}

/// Sets the images in the object's pod spec (`spec.template.spec` of workloads, `spec` of
/// pods); every named container must exist.
fn set_images(object: &mut Value, images: &[(String, String)]) -> Result<(), Error> {
    let spec = if object["spec"]["template"]["spec"].is_object() {
        &mut object["spec"]["template"]["spec"]
    } else {
        &mut object["spec"]
    };
    for (container, image) in images {
        let mut found = false;
        for list in ["initContainers", "containers"] {
            let Some(containers) = spec[list].as_array_mut() else {
                continue;
            };
            for c in containers {
                if container == "*" || c["name"].as_str() == Some(container) {
                    c["image"] = Value::String(image.clone());
                    found = true;
                }
            }
        }
        if !found {
            return Err(Error::ContainerNotFound(container.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn images_are_set_by_container_name() {
        let mut d = json!({"spec": {"template": {"spec": {
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "nginx", "image": "nginx"}, {"name": "envoy", "image": "envoy"}],
        }}}});
        set_images(&mut d, &[("nginx".into(), "nginx:1.7.9".into())]).unwrap();
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:1.7.9"
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][1]["image"],
            "envoy"
        );
        set_images(&mut d, &[("*".into(), "x".into())]).unwrap();
        assert_eq!(
            d["spec"]["template"]["spec"]["initContainers"][0]["image"],
            "x"
        );
        let e = set_images(&mut d, &[("nope".into(), "x".into())]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "error: unable to find container named \"nope\""
        );
    }
}
