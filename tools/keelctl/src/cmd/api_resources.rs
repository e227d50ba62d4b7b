//! `keelctl api-resources`: the resources the server serves, from Discovery.

use std::io::Write;

use crate::context::Ctx;
use crate::error::Error;
use crate::table::Aligner;

/// List the resource types the server serves, with the names keelctl accepts for them.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  keelctl api-resources\n  keelctl api-resources -o wide")]
pub struct Args {
    /// wide adds the verbs; name prints resource.group only.
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<Format>,
}

/// `-o` of api-resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Wide,
    Name,
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    let resources = ctx.resources().await?;
    let mut all: Vec<_> = resources.all().iter().collect();
    // As kubectl: the core group first, then by group and name.
    all.sort_by(|a, b| (&a.gvr.group, &a.gvr.resource).cmp(&(&b.gvr.group, &b.gvr.resource)));
    if args.output == Some(Format::Name) {
        for r in all {
            writeln!(out, "{}", r.qualified_name())?;
        }
        return Ok(());
    }
    let wide = args.output == Some(Format::Wide);
    let mut rows = vec![
        ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>(),
    ];
    if wide {
        rows[0].push("VERBS".into());
    }
    for r in all {
        let mut row = vec![
            r.gvr.resource.clone(),
            r.short_names.join(","),
            r.api_version(),
            r.namespaced.to_string(),
            r.kind.clone(),
        ];
        if wide {
            row.push(format!("[{}]", r.verbs.join(" ")));
        }
        rows.push(row);
    }
    for line in Aligner::default().lines(&rows) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}
