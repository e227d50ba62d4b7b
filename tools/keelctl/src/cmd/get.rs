//! `keelctl get`: read objects as tables, JSON, YAML or names; `-w` follows changes.

use std::io::Write;

use keel_client::ListParams;
use serde_json::Value;

use crate::context::Ctx;
use crate::error::Error;
use crate::printer::{self, Format, Printer};
use crate::resources::Resource;

/// Display objects.
///
/// RESOURCE is a plural, singular, kind or short name (po, cm, deploy, rs, ns), optionally
/// with its group (deployments.apps); several may be joined by commas. Namespaced resources
/// are read in --namespace (default: default), or in every namespace with -A. Objects whose
/// initializers are not done are shown only with --include-uninitialized.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  keelctl get deploy\n  keelctl get pods -A -o wide\n  keelctl get deployment nginx -o yaml\n  keelctl get cm,deploy -l app=nginx\n  keelctl get pods -w\n  keelctl get pods --include-uninitialized"
)]
pub struct Args {
    /// RESOURCE[,RESOURCE...] [NAME...], or RESOURCE/NAME...
    #[arg(value_name = "RESOURCE")]
    pub targets: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: Format,
    /// Only objects whose labels match this selector (e.g. app=nginx,tier!=db).
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,
    /// Only objects whose fields match (metadata.name, metadata.namespace).
    #[arg(long)]
    pub field_selector: Option<String>,
    /// Read every namespace; tables get a NAMESPACE column.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// After printing the objects, print each change as it happens (until interrupted).
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Like --watch, without printing the objects first.
    #[arg(long)]
    pub watch_only: bool,
    /// Also objects whose initializers (metadata.initializers.pending) are not done yet,
    /// which the server otherwise hides; with -w, their changes too. Objects with empty
    /// metadata.initializers are regarded as initialized.
    #[arg(
        long,
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub include_uninitialized: bool,
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    let selection = super::parse_selection(&args.targets)?;
    if selection.is_empty() {
        return Err(Error::Usage(
            "you must specify the type of resource to get. Use \"keelctl api-resources\" for a complete list of supported resources.".into(),
        ));
    }
    let named = selection.iter().any(|s| !s.names.is_empty());
    if named && args.selector.is_some() {
        return Err(Error::Usage(
            "name cannot be provided when a selector is specified".into(),
        ));
    }
    let discovered = ctx.resources().await?;
    let mut wanted: Vec<(&Resource, &[String])> = Vec::new();
    for s in &selection {
        for resource in discovered.expand(&s.resource)? {
            wanted.push((resource, &s.names));
        }
    }
    let show_kind = wanted.len() > 1;
    let mut printer = Printer::new(args.output, args.all_namespaces, show_kind);

    if args.watch || args.watch_only {
        let [(resource, names)] = wanted.as_slice() else {
            return Err(Error::Usage(
                "you may only watch one resource type at a time".into(),
            ));
        };
        if names.len() > 1 {
            return Err(Error::Usage("you may only watch one object by name".into()));
        }
        let watch = super::watch::Watch {
            resource,
            namespace: namespace(ctx, resource, args.all_namespaces),
            name: names.first().cloned(),
            label_selector: args.selector.clone().unwrap_or_default(),
            field_selector: args.field_selector.clone().unwrap_or_default(),
            print_current: !args.watch_only,
            include_uninitialized: args.include_uninitialized,
        };
        return watch.run(ctx, &mut printer, out).await;
    }

    let mut errors = Vec::new();
    let mut documents: Vec<Value> = Vec::new();
    let mut found = 0;
    for (resource, names) in &wanted {
        let ns = namespace(ctx, resource, args.all_namespaces);
        let mut objects = Vec::new();
        if names.is_empty() {
            let params = ListParams {
                label_selector: args.selector.clone().unwrap_or_default(),
                field_selector: args.field_selector.clone().unwrap_or_default(),
                // Pages keep each response small; every page is read at the first one's
                // revision, so the list is one consistent snapshot.
                limit: 500,
                include_uninitialized: args.include_uninitialized,
                ..Default::default()
            };
            let list = ctx.client.list_all(&resource.gvr, &ns, &params).await?;
            objects = list.items;
        } else {
            for name in names.iter() {
                let got = if args.include_uninitialized {
                    ctx.client.get_uninitialized(&resource.gvr, &ns, name).await
                } else {
                    ctx.client.get(&resource.gvr, &ns, name).await
                };
                match got {
                    Ok(o) => objects.push(o),
                    Err(e) => errors.push(e.into()),
                }
            }
        }
        found += objects.len();
        match args.output {
            Format::Json | Format::Yaml => documents.extend(objects),
            _ => printer.table(out, resource, &objects)?,
        }
    }
    if matches!(args.output, Format::Json | Format::Yaml) {
        // One object asked for by name prints as itself; anything else as a List.
        let single = wanted.len() == 1 && wanted[0].1.len() == 1;
        match (single, documents.len()) {
            (true, 1) => printer.document(out, &documents[0])?,
            (true, _) => {}
            (false, _) => printer.document(out, &printer::list(documents))?,
        }
    }
    if found == 0 && errors.is_empty() && !matches!(args.output, Format::Json | Format::Yaml) {
        let message = match wanted.as_slice() {
            [(r, _)] if r.namespaced && !args.all_namespaces => {
                format!("No resources found in {} namespace.", ctx.namespace_of(r))
            }
            _ => "No resources found".to_string(),
        };
        writeln!(std::io::stderr(), "{message}")?;
    }
    Error::from_many(errors)
}

/// The namespace to read: "" (all) with -A or for cluster-scoped resources.
fn namespace(ctx: &Ctx, resource: &Resource, all_namespaces: bool) -> String {
    if all_namespaces {
        String::new()
    } else {
        ctx.namespace_of(resource)
    }
}
