//! `keelctl patch`: send a JSON, merge or strategic merge patch to named objects.

use std::io::Write;

use keel_client::PatchType;
use serde_json::Value;

use crate::context::Ctx;
use crate::error::Error;

/// Update fields of objects with a patch.
///
/// strategic (the default, built-in kinds only) merges lists of objects by their key
/// (containers by name...); merge is RFC 7386 (null deletes, lists replace); json is an
/// RFC 6902 list of operations. The patch may be written in JSON or YAML.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  keelctl patch deploy nginx -p '{\"spec\":{\"replicas\":3}}'\n  keelctl patch cm/settings --type merge -p '{\"data\":{\"old\":null}}'\n  keelctl patch deploy nginx --type json -p '[{\"op\":\"replace\",\"path\":\"/spec/replicas\",\"value\":1}]'"
)]
pub struct Args {
    /// TYPE NAME... or TYPE/NAME...
    #[arg(value_name = "RESOURCE", required = true)]
    pub targets: Vec<String>,
    /// The kind of patch.
    #[arg(long = "type", value_enum, default_value = "strategic")]
    pub patch_type: Kind,
    /// The patch, in JSON or YAML.
    #[arg(short = 'p', long = "patch", required = true)]
    pub patch: String,
}

/// `--type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Json,
    Merge,
    Strategic,
}

impl Kind {
    fn patch_type(self) -> PatchType {
        match self {
            Kind::Json => PatchType::Json,
            Kind::Merge => PatchType::Merge,
            Kind::Strategic => PatchType::Strategic,
        }
    }
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    let (kind, names) = super::parse_named(&args.targets)?;
    let patch = parse_patch(&args.patch)?;
    let body = patch.to_string().into_bytes();
    let resources = ctx.resources().await?;
    let resource = resources.resolve(&kind)?;
    let namespace = ctx.namespace_of(resource);
    let mut errors = Vec::new();
    for name in names {
        let result = async {
            let before = ctx.client.get(&resource.gvr, &namespace, &name).await?;
            let after = ctx
                .client
                .patch_subresource(
                    &resource.gvr,
                    &namespace,
                    &name,
                    "",
                    args.patch_type.patch_type(),
                    body.clone(),
                )
                .await?;
            Ok::<_, keel_client::ApiError>(
                before["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"],
            )
        }
        .await;
        match result {
            Ok(false) => writeln!(out, "{} patched", resource.object_ref(&name))?,
            Ok(true) => writeln!(out, "{} patched (no change)", resource.object_ref(&name))?,
            Err(e) => errors.push(e.into()),
        }
    }
    Error::from_many(errors)
}

/// `-p`: JSON, or YAML (which kubectl accepts too).
fn parse_patch(text: &str) -> Result<Value, Error> {
    serde_json::from_str(text)
        .or_else(|json_error| {
            serde_saphyr::from_str::<Value>(text)
                .ok()
                .filter(|v| v.is_object() || v.is_array())
                .ok_or(json_error)
        })
        .map_err(|e| Error::Usage(format!("unable to parse {text:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patches_may_be_json_or_yaml() {
        assert_eq!(parse_patch(r#"{"a":1}"#).unwrap(), json!({"a": 1}));
        assert_eq!(
            parse_patch("spec:\n  replicas: 3\n").unwrap(),
            json!({"spec": {"replicas": 3}})
        );
        let e = parse_patch("{\"a\":").unwrap_err().to_string();
        assert!(
            e.starts_with("error: unable to parse \"{\\\"a\\\":\": "),
            "{e}"
        );
        assert!(parse_patch("just words").is_err());
    }
}
