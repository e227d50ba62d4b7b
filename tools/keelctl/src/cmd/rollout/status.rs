//! `keelctl rollout status`: watch a Deployment until its rollout is done, printing each new
//! status line.
//!
//! The Deployment is listed, then watched from the list's revision. A dropped stream or a
//! restarted server is resumed from the last revision seen (keel-client's resumable watch);
//! a revision the server no longer has (`Expired`) makes it list again. A line is printed
//! only when it differs from the one before, so a relist repeats nothing.

use std::io::Write;
use std::time::Duration;

use futures::{Stream, StreamExt};
use keel_api::Metadata;

use super::Targets;
use crate::cmd::object_watch::{ObjectWatch, Observed};
use crate::cmd::objects::Finding;
use crate::context::Ctx;
use crate::error::Error;
use crate::rollout::RolloutError;
use crate::rollout::status::deployment_status;

/// Show the status of the rollout.
///
/// By default 'rollout status' will watch the status of the latest rollout until it's done.
/// If you don't want to wait for the rollout to finish then you can use --watch=false. Note
/// that if a new rollout starts in-between, then 'rollout status' will continue watching the
/// latest revision. If you want to pin to a specific revision and abort if it is rolled over
/// by another revision, use --revision=N where N is the revision you need to watch for.
///
/// Exits 0 once rolled out; 1 if the rollout exceeds its progress deadline, the Deployment
/// is deleted, or --timeout passes first.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  # Watch the rollout status of a deployment\n  keelctl rollout status deployment/nginx\n\n  # Give up after five minutes\n  keelctl rollout status deploy/nginx --timeout 5m"
)]
pub struct Args {
    #[command(flatten)]
    pub targets: Targets,
    /// Watch the status of the rollout until it's done.
    #[arg(
        short = 'w',
        long,
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    pub watch: bool,
    /// Pin to a specific revision for showing its status. Defaults to 0 (last revision).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub revision: i64,
}

pub async fn run(ctx: &Ctx, args: &Args, out: &mut dyn Write) -> Result<(), Error> {
    if args.revision < 0 {
        return Err(Error::Usage(format!(
            "revision must be a positive integer: {}",
            args.revision
        )));
    }
    let resources = ctx.resources().await?;
    let Finding { found, errors } = args.targets.find(ctx, &resources).await?;
    Error::from_many(errors)?;
    let [deployment] = found.as_slice() else {
        return Err(Error::Usage(format!(
            "rollout status is only supported on individual resources and resource collections - {} resources were found",
            found.len()
        )));
    };
    if !deployment.is_deployment() {
        return Err(RolloutError::Unsupported(format!(
            "no status viewer has been implemented for {}",
            deployment.group_kind()
        ))
        .into());
    }
    let observed = std::pin::pin!(
        ObjectWatch::new(
            ctx,
            &deployment.resource.gvr,
            &deployment.namespace,
            deployment.name()
        )
        .observe()
    );
    let follow = follow(observed, args.revision, args.watch, out);
    within(ctx.wait_timeout, follow).await
}

/// Prints the status line of each state observed when it changes, until the rollout is done
/// (or after the first line, without `--watch`). A deleted Deployment ends it with an error:
/// one created again under the name would be another rollout.
async fn follow(
    mut observed: impl Stream<Item = Result<Observed, Error>> + Unpin,
    revision: i64,
    watch: bool,
    out: &mut dyn Write,
) -> Result<(), Error> {
    let mut last: Option<String> = None;
    while let Some(item) = observed.next().await {
        let deployment = match item? {
            Observed::Seen(d) => d,
            Observed::Gone => return Err(RolloutError::Deleted.into()),
        };
        let progress = deployment_status(&deployment, revision)?;
        if last.as_ref() != Some(&progress.message) {
            writeln!(out, "{}", progress.message)?;
            out.flush()?;
            last = Some(progress.message);
        }
        if progress.done || !watch {
            return Ok(());
        }
    }
    Ok(())
}

/// Runs `wait`, for at most `timeout` (none: as long as it takes).
async fn within(
    timeout: Option<Duration>,
    wait: impl Future<Output = Result<(), Error>>,
) -> Result<(), Error> {
    match timeout {
        Some(t) => tokio::time::timeout(t, wait)
            .await
            .map_err(|_| RolloutError::TimedOut)?,
        None => wait.await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::fixtures::deployment;
    use serde_json::Value;
    use serde_json::json;

    fn at(status: Value) -> Result<Observed, Error> {
        let mut d = deployment("nginx");
        d["status"] = status;
        Ok(Observed::Seen(d))
    }

    fn rolling(updated: i64, available: i64, replicas: i64) -> Result<Observed, Error> {
        at(json!({"observedGeneration": 3, "replicas": replicas,
                  "updatedReplicas": updated, "availableReplicas": available}))
    }

    async fn run_follow(
        events: Vec<Result<Observed, Error>>,
        revision: i64,
        watch: bool,
    ) -> (Result<(), Error>, String) {
        let mut out = Vec::new();
        let result = follow(futures::stream::iter(events), revision, watch, &mut out).await;
        (result, String::from_utf8(out).unwrap())
    }

    #[tokio::test]
    async fn each_new_line_is_printed_once_until_rolled_out() {
        let (result, out) = run_follow(
            vec![
                at(json!({})),
                rolling(0, 0, 2),
                rolling(1, 0, 3),
                rolling(1, 1, 3),
                rolling(2, 1, 3),
                rolling(2, 1, 2),
                rolling(2, 1, 2),
                rolling(2, 2, 2),
                rolling(2, 2, 2),
            ],
            0,
            true,
        )
        .await;
        result.unwrap();
        assert_eq!(
            out,
            "Waiting for deployment spec update to be observed...\n\
             Waiting for deployment \"nginx\" rollout to finish: 0 out of 2 new replicas have been updated...\n\
             Waiting for deployment \"nginx\" rollout to finish: 1 out of 2 new replicas have been updated...\n\
             Waiting for deployment \"nginx\" rollout to finish: 1 old replicas are pending termination...\n\
             Waiting for deployment \"nginx\" rollout to finish: 1 of 2 updated replicas are available...\n\
             deployment \"nginx\" successfully rolled out\n"
        );
    }

    #[tokio::test]
    async fn without_watch_the_first_line_is_the_answer_done_or_not() {
        let (result, out) = run_follow(vec![rolling(1, 0, 2), rolling(2, 2, 2)], 0, false).await;
        result.unwrap();
        assert_eq!(
            out,
            "Waiting for deployment \"nginx\" rollout to finish: 1 out of 2 new replicas have been updated...\n"
        );
    }

    #[tokio::test]
    async fn a_stuck_or_deleted_deployment_ends_with_an_error() {
        let stuck = at(
            json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 1,
            "conditions": [{"type": "Progressing", "status": "False",
                            "reason": "ProgressDeadlineExceeded"}]}),
        );
        let (result, out) = run_follow(vec![rolling(1, 0, 2), stuck], 0, true).await;
        assert_eq!(
            result.unwrap_err().to_string(),
            "error: deployment \"nginx\" exceeded its progress deadline"
        );
        assert_eq!(out.lines().count(), 1);

        let (result, _) = run_follow(vec![rolling(1, 0, 2), Ok(Observed::Gone)], 0, true).await;
        assert_eq!(
            result.unwrap_err().to_string(),
            "error: object has been deleted"
        );
    }

    #[tokio::test]
    async fn a_pinned_revision_rolled_over_is_an_error() {
        let (result, _) = run_follow(vec![rolling(2, 2, 2)], 1, true).await;
        assert_eq!(
            result.unwrap_err().to_string(),
            "error: desired revision (1) is different from the running revision (2)"
        );
    }

    #[tokio::test]
    async fn watch_errors_end_the_wait() {
        let (result, _) = run_follow(
            vec![rolling(0, 0, 2), Err(Error::Usage("boom".into()))],
            0,
            true,
        )
        .await;
        assert_eq!(result.unwrap_err().to_string(), "error: boom");
    }

    #[tokio::test(start_paused = true)]
    async fn the_timeout_ends_a_rollout_that_does_not_finish() {
        let start = tokio::time::Instant::now();
        let never_done =
            futures::stream::iter(vec![rolling(1, 0, 2)]).chain(futures::stream::pending());
        let mut out = Vec::new();
        let result = within(
            Some(Duration::from_secs(30)),
            follow(never_done, 0, true, &mut out),
        )
        .await;
        assert_eq!(
            result.unwrap_err().to_string(),
            "error: timed out waiting for the condition"
        );
        assert_eq!(start.elapsed(), Duration::from_secs(30));
        assert_eq!(out.len(), b"Waiting for deployment \"nginx\" rollout to finish: 1 out of 2 new replicas have been updated...\n".len());
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_timeout_the_wait_lasts_until_done() {
        let start = tokio::time::Instant::now();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut out = Vec::new();
        let wait = async {
            let result = within(None, follow(rx, 0, true, &mut out)).await;
            (result, start.elapsed())
        };
        let day = Duration::from_secs(24 * 3600);
        let drive = async {
            tx.unbounded_send(rolling(1, 0, 2)).unwrap();
            tokio::time::sleep(day).await;
            tx.unbounded_send(rolling(2, 2, 2)).unwrap();
        };
        let ((result, waited), ()) = tokio::join!(wait, drive);
        result.unwrap();
        assert_eq!(waited, day);
        assert!(out.ends_with(b"successfully rolled out\n"));
    }
}
