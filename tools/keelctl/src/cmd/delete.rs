//! `keelctl delete`: by type and name, by label selector, or the objects of files.

use std::io::Write;
use std::time::Duration;

use keel_api::Metadata;
use keel_client::{DeleteParams, ListParams, PropagationPolicy, Reason};
use tokio::time::Instant;

use crate::context::{Ctx, require_name};
use crate::error::{Error, api_for};
use crate::manifest;
use crate::resources::Resource;

/// Delete objects by type and name, by label selector, or as listed in files.
///
/// Objects held by finalizers (or deleted with --cascade=foreground or orphan, which the
/// garbage collector completes) get a deletionTimestamp and disappear later; keelctl waits for
/// that unless --wait=false, for at most --timeout.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  keelctl delete configmap settings\n  keelctl delete deploy/nginx --cascade=orphan --wait=false\n  keelctl delete -f nginx.yaml\n  keelctl delete pods -l app=nginx"
)]
pub struct Args {
    /// TYPE NAME... or TYPE/NAME...
    #[arg(value_name = "RESOURCE")]
    pub targets: Vec<String>,
    /// Delete the objects of this file, directory or - for stdin; may be repeated.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR|-",
        conflicts_with = "targets"
    )]
    pub files: Vec<String>,
    /// What happens to the objects this one owns: background (the default) deletes them after
    /// it, foreground before it, orphan keeps them.
    #[arg(long, value_enum, default_value = "background")]
    pub cascade: Cascade,
    /// Wait until the objects are gone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub wait: bool,
    /// An object that does not exist is not an error.
    #[arg(long)]
    pub ignore_not_found: bool,
    /// Delete the objects of the type that match this label selector (e.g. app=nginx).
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,
    /// Delete every object of the type in the namespace.
    #[arg(long)]
    pub all: bool,
}

/// `--cascade`: the deletion propagation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Cascade {
    #[value(alias = "true")]
    Background,
    Foreground,
    #[value(alias = "false")]
    Orphan,
}

impl Cascade {
    fn policy(self) -> PropagationPolicy {
        match self {
            Cascade::Background => PropagationPolicy::Background,
            Cascade::Foreground => PropagationPolicy::Foreground,
            Cascade::Orphan => PropagationPolicy::Orphan,
        }
    }
}

/// One object to delete, and the file it came from (for messages).
struct Doomed<'r> {
    resource: &'r Resource,
    namespace: String,
    name: String,
    source: Option<String>,
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    let resources = ctx.resources().await?;
    let mut errors = Vec::new();
    let mut doomed = Vec::new();
    if !args.files.is_empty() {
        for mut m in manifest::read_all(&args.files)? {
            let placed = ctx
                .place(&resources, &mut m)
                .and_then(|(r, ns)| Ok((r, ns, require_name(&m)?)));
            match placed {
                Ok((resource, namespace, name)) => doomed.push(Doomed {
                    resource,
                    namespace,
                    name,
                    source: Some(m.source.clone()),
                }),
                Err(e) => errors.push(e),
            }
        }
    } else if args.selector.is_some() || args.all {
        let Some(kind) = args.targets.first() else {
            return Err(Error::Usage(
                "you must specify the type of resource to delete".into(),
            ));
        };
        if args.targets.len() > 1 {
            return Err(Error::Usage(
                "names cannot be given together with --selector or --all".into(),
            ));
        }
        let resource = resources.resolve(kind)?;
        let namespace = ctx.namespace_of(resource);
        let params = ListParams {
            label_selector: args.selector.clone().unwrap_or_default(),
            ..Default::default()
        };
        let list = ctx
            .client
            .list_all(&resource.gvr, &namespace, &params)
            .await?;
        for o in &list.items {
            doomed.push(Doomed {
                resource,
                namespace: namespace.clone(),
                name: o.name().to_string(),
                source: None,
            });
        }
        if doomed.is_empty() {
            writeln!(std::io::stderr(), "No resources found")?;
        }
    } else {
        if args.targets.is_empty() {
            return Err(Error::Usage(
                "you must specify the objects to delete: TYPE NAME, TYPE/NAME, -f FILE, -l SELECTOR or --all".into(),
            ));
        }
        let (kind, names) = super::parse_named(&args.targets)?;
        let resource = resources.resolve(&kind)?;
        for name in names {
            doomed.push(Doomed {
                resource,
                namespace: ctx.namespace_of(resource),
                name,
                source: None,
            });
        }
    }

    let params = DeleteParams {
        propagation: args.cascade.policy(),
        ..Default::default()
    };
    let mut waiting = Vec::new();
    for d in &doomed {
        let result = ctx
            .client
            .delete(&d.resource.gvr, &d.namespace, &d.name, &params)
            .await;
        match result {
            Ok((object, gone)) => {
                writeln!(out, "{} {:?} deleted", d.resource.kind_name(), d.name)?;
                if !gone && args.wait {
                    let uid = object["metadata"]["uid"].as_str().unwrap_or("").to_string();
                    waiting.push((d, uid));
                }
            }
            Err(e) if e.reason == Reason::NotFound && args.ignore_not_found => {}
            Err(e) => {
                errors.push(match &d.source {
                    Some(source) => api_for("deleting", source, e),
                    None => Error::from(e),
                });
            }
        }
    }
    let deadline = Instant::now() + ctx.timeout;
    for (d, uid) in waiting {
        if let Err(e) = wait_gone(ctx, d, &uid, deadline).await {
            errors.push(e);
        }
    }
    Error::from_many(errors)
}

/// Polls until the object is gone (or replaced by a new one of the same name).
async fn wait_gone(ctx: &Ctx, d: &Doomed<'_>, uid: &str, deadline: Instant) -> Result<(), Error> {
    loop {
        match ctx.client.get(&d.resource.gvr, &d.namespace, &d.name).await {
            Err(e) if e.reason == Reason::NotFound => return Ok(()),
            Ok(o) if o["metadata"]["uid"].as_str() != Some(uid) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        if Instant::now() >= deadline {
            return Err(Error::WaitTimeout(format!(
                "{} {:?} (it is held by finalizers; --wait=false does not wait)",
                d.resource.kind_name(),
                d.name
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
