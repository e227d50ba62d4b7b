//! `keelctl scale`: set `spec.replicas` of Deployments and ReplicaSets, optionally only if
//! their size or resourceVersion is the one expected, as kubectl's scaler does.

use std::io::Write;
use std::time::Duration;

use keel_api::{Metadata, Target};
use keel_client::{ApiError, PatchType, Reason};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::cmd::objects::{self, Finding, Found, Query};
use crate::context::Ctx;
use crate::error::Error;
use crate::printer::{ResultFormat, ResultPrinter};

/// A scale refused for a conflict (the object changed between read and write) is tried
/// again, reading the object again, every second for five minutes: kubectl's retry.
const CONFLICT_RETRY_INTERVAL: Duration = Duration::from_secs(1);
const CONFLICT_RETRY_FOR: Duration = Duration::from_secs(5 * 60);
/// How often `--timeout` looks whether the new size is reached.
const SYNC_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Set a new size for a deployment or replica set.
///
/// Scale also allows users to specify one or more preconditions for the scale action.
///
/// If --current-replicas or --resource-version is specified, it is validated before the
/// scale is attempted, and it is guaranteed that the precondition holds true when the scale
/// is sent to the server. With --timeout, waits until status.replicas is the new size.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  # Scale a replica set named 'foo' to 3\n  keelctl scale --replicas=3 rs/foo\n\n  # Scale a resource identified by type and name specified in \"foo.yaml\" to 3\n  keelctl scale --replicas=3 -f foo.yaml\n\n  # If the deployment named mysql's current size is 2, scale mysql to 3\n  keelctl scale --current-replicas=2 --replicas=3 deployment/mysql\n\n  # Scale multiple deployments\n  keelctl scale --replicas=5 deploy/example1 deploy/example2"
)]
pub struct Args {
    /// TYPE NAME... or TYPE/NAME...
    #[arg(value_name = "RESOURCE")]
    pub targets: Vec<String>,
    /// The objects of this file, directory or - for stdin; may be repeated.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE|DIR|-",
        conflicts_with = "targets"
    )]
    pub files: Vec<String>,
    /// The new desired number of replicas. Required.
    #[arg(
        long,
        required = true,
        allow_negative_numbers = true,
        value_name = "COUNT"
    )]
    pub replicas: i64,
    /// Precondition for current size. Requires that the current size of the resource match
    /// this value in order to scale. -1 (default) for no condition.
    #[arg(
        long,
        default_value_t = -1,
        allow_negative_numbers = true,
        value_name = "COUNT"
    )]
    pub current_replicas: i64,
    /// Precondition for resource version. Requires that the current resource version match
    /// this value in order to scale.
    #[arg(long)]
    pub resource_version: Option<String>,
    /// Only the objects of the type that match this label selector (e.g. app=nginx).
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,
    /// Select all resources in the namespace of the specified resource types.
    #[arg(long)]
    pub all: bool,
    /// Print the scaled objects in this format instead of "deployment.apps/NAME scaled".
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<ResultFormat>,
}

/// What must hold of an object for it to be scaled.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Precondition {
    /// `--current-replicas`; -1: any.
    replicas: i64,
    /// `--resource-version`.
    resource_version: Option<String>,
}

impl Precondition {
    /// None when neither flag was given: then the scale is a blind patch.
    fn of(args: &Args) -> Option<Precondition> {
        (args.current_replicas != -1 || args.resource_version.is_some()).then(|| Precondition {
            replicas: args.current_replicas,
            resource_version: args.resource_version.clone(),
        })
    }

    /// kubectl's `ScalePrecondition.validate`: the size first, then the resourceVersion.
    fn check(&self, object: &Value) -> Result<(), Error> {
        let current = replicas(object);
        if self.replicas != -1 && current != self.replicas {
            return Err(Error::ScalePrecondition {
                what: "replicas",
                expected: self.replicas.to_string(),
                actual: current.to_string(),
            });
        }
        let rv = object["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if let Some(want) = &self.resource_version
            && want != rv
        {
            return Err(Error::ScalePrecondition {
                what: "resource version",
                expected: want.clone(),
                actual: rv.to_string(),
            });
        }
        Ok(())
    }
}

/// `spec.replicas`; the API server defaults it to 1.
fn replicas(object: &Value) -> i64 {
    object["spec"]["replicas"].as_i64().unwrap_or(1)
}

/// The merge patch of a scale; with the resourceVersion read, it is refused (Conflict) if
/// the object changed since, so a checked precondition still holds when the write lands.
fn scale_patch(count: i64, read_at: Option<&str>) -> Value {
    match read_at {
        Some(rv) => json!({"metadata": {"resourceVersion": rv}, "spec": {"replicas": count}}),
        None => json!({"spec": {"replicas": count}}),
    }
}

/// kubectl's `scaleHasDesiredReplicas`: the object has `count` replicas, or someone else
/// has set another size meanwhile (then there is nothing left to wait for).
fn synced(object: &Value, count: i64) -> bool {
    let status = object["status"]["replicas"].as_i64().unwrap_or(0);
    replicas(object) != count || status == count
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    if args.replicas < 0 {
        return Err(Error::Usage(
            "The --replicas=COUNT flag is required, and COUNT must be greater than or equal to 0"
                .into(),
        ));
    }
    if args.current_replicas < -1 {
        return Err(Error::Usage(
            "The --current-replicas must specify an integer of -1 or greater".into(),
        ));
    }
    if args.targets.is_empty() && args.files.is_empty() {
        return Err(Error::Usage(
            "You must provide one or more resources by argument or filename.\nExample resource specifications include:\n   '-f rsrc.yaml'\n   '--filename=rsrc.json'\n   '<resource> <name>'\n   '<resource>'".into(),
        ));
    }
    let resources = ctx.resources().await?;
    let query = Query {
        targets: &args.targets,
        files: &args.files,
        selector: args.selector.as_deref(),
        type_means_all: args.all,
        missing: "no objects passed to scale",
    };
    let Finding { found, errors } = objects::find(ctx, &resources, &query).await?;
    if args.resource_version.is_some() && found.len() > 1 {
        return Err(Error::Usage(
            "cannot use --resource-version with multiple resources".into(),
        ));
    }
    if found.is_empty() {
        if errors.is_empty() {
            return Err(Error::NoObjects("scale"));
        }
        return Error::from_many(errors);
    }
    let precondition = Precondition::of(args);
    let mut printer = ResultPrinter::new(args.output);
    for f in &found {
        let scaled = scale(ctx, f, args.replicas, precondition.as_ref()).await?;
        if let Some(timeout) = ctx.wait_timeout {
            wait_synced(ctx, f, args.replicas, timeout).await?;
        }
        printer.print(out, &scaled, "scaled")?;
    }
    // As kubectl: the objects that could not be read are reported after the others scaled.
    Error::from_many(errors)
}

/// Scales one object, retrying conflicts; returns it as the server answered.
async fn scale(
    ctx: &Ctx,
    f: &Found<'_>,
    count: i64,
    precondition: Option<&Precondition>,
) -> Result<Value, Error> {
    if f.resource.gvr.group != "apps"
        || !matches!(f.resource.kind.as_str(), "Deployment" | "ReplicaSet")
    {
        // What kubectl meets asking for the scale subresource of a kind without one.
        return Err(ApiError::new(
            Reason::NotFound,
            Target::default(),
            "the server could not find the requested resource",
        )
        .into());
    }
    let give_up = Instant::now() + CONFLICT_RETRY_FOR;
    loop {
        match scale_once(ctx, f, count, precondition).await {
            Err(e)
                if e.reason == Reason::Conflict
                    && Instant::now() + CONFLICT_RETRY_INTERVAL < give_up =>
            {
                tokio::time::sleep(CONFLICT_RETRY_INTERVAL).await;
            }
            Err(e) => return Err(e.into()),
            Ok(Err(refused)) => return Err(refused),
            Ok(Ok(object)) => return Ok(object),
        }
    }
}

/// One attempt: with a precondition, read, check, then write at the revision read.
/// Server errors come out as such (a conflict is retried); a failed precondition inside.
async fn scale_once(
    ctx: &Ctx,
    f: &Found<'_>,
    count: i64,
    precondition: Option<&Precondition>,
) -> Result<Result<Value, Error>, ApiError> {
    let (gvr, ns, name) = (&f.resource.gvr, &f.namespace, f.name());
    let patch = match precondition {
        None => scale_patch(count, None),
        Some(p) => {
            let current = ctx.client.get(gvr, ns, name).await?;
            if let Err(refused) = p.check(&current) {
                return Ok(Err(refused));
            }
            scale_patch(count, current["metadata"]["resourceVersion"].as_str())
        }
    };
    let scaled = ctx
        .client
        .patch(gvr, ns, name, PatchType::Merge, &patch)
        .await?;
    Ok(Ok(scaled))
}

/// `--timeout`: polls until the object has the new size, for at most `timeout`.
async fn wait_synced(ctx: &Ctx, f: &Found<'_>, count: i64, timeout: Duration) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    loop {
        let object = ctx
            .client
            .get(&f.resource.gvr, &f.namespace, f.name())
            .await?;
        if synced(&object, count) {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::ScaleTimeout(f.name().to_string()));
        }
        tokio::time::sleep(SYNC_POLL_INTERVAL.min(deadline - now)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(replicas: i64, rv: &str) -> Value {
        json!({"metadata": {"name": "nginx", "resourceVersion": rv}, "spec": {"replicas": replicas}})
    }

    fn precondition(replicas: i64, rv: Option<&str>) -> Precondition {
        Precondition {
            replicas,
            resource_version: rv.map(str::to_string),
        }
    }

    #[test]
    fn preconditions_are_checked_size_first() {
        let o = object(2, "7");
        assert!(precondition(2, None).check(&o).is_ok());
        assert!(precondition(-1, Some("7")).check(&o).is_ok());
        assert!(precondition(2, Some("7")).check(&o).is_ok());
        assert_eq!(
            precondition(3, Some("8"))
                .check(&o)
                .unwrap_err()
                .to_string(),
            "error: Expected replicas to be 3, was 2"
        );
        assert_eq!(
            precondition(2, Some("8"))
                .check(&o)
                .unwrap_err()
                .to_string(),
            "error: Expected resource version to be 8, was 7"
        );
        let unset = json!({"metadata": {"resourceVersion": "7"}, "spec": {}});
        assert!(precondition(1, None).check(&unset).is_ok(), "defaults to 1");
    }

    #[test]
    fn a_checked_scale_is_pinned_to_the_revision_read() {
        assert_eq!(scale_patch(3, None), json!({"spec": {"replicas": 3}}));
        assert_eq!(
            scale_patch(0, Some("7")),
            json!({"metadata": {"resourceVersion": "7"}, "spec": {"replicas": 0}})
        );
    }

    #[test]
    fn synced_when_the_status_has_the_size_or_another_size_was_asked() {
        let mut o = object(3, "7");
        assert!(!synced(&o, 3));
        o["status"] = json!({"replicas": 2});
        assert!(!synced(&o, 3));
        o["status"] = json!({"replicas": 3});
        assert!(synced(&o, 3));
        o["spec"]["replicas"] = json!(5);
        o["status"] = json!({"replicas": 2});
        assert!(synced(&o, 3));
        assert!(synced(&object(0, "1"), 0), "no status: no replicas");
    }
}
