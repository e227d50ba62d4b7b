//! `create` and `apply` wait for the initializers of what they wrote (`--wait`, the default).
//!
//! The API server answers a Create at once, with the object as stored: while
//! `metadata.initializers.pending` is non-empty the object is uninitialized, and each
//! initializer, in turn from the head of the list, PATCHes it and removes its own name. keelctl
//! then watches the object (uninitialized objects included) from the revision the server
//! returned, printing each initializer it waits on, until `pending` is empty. A dropped stream
//! or a restarted server is resumed from the last revision seen (keel-client's resumable
//! watch); a revision the server no longer has (`Expired`) makes it read the object again. An
//! object deleted meanwhile (an initializer with `failurePolicy: Fail` timed out) is an error.

use std::io::Write;
use std::time::Duration;

use futures::{Stream, StreamExt};
use keel_api::Metadata;
use serde_json::Value;

use crate::cmd::object_watch::{ObjectWatch, Observed};
use crate::context::Ctx;
use crate::error::Error;
use crate::resources::Resource;

/// Waits until `object`, just returned by the server, is initialized: at once when it has
/// no pending initializers. Prints on stderr each initializer waited on. Bounded by
/// `--timeout` when given.
pub async fn wait(
    ctx: &Ctx,
    resource: &Resource,
    namespace: &str,
    object: &Value,
) -> Result<(), Error> {
    if object.is_initialized() {
        return Ok(());
    }
    let later = ObjectWatch::new(ctx, &resource.gvr, namespace, object.name())
        .starting_at(object)
        .include_uninitialized()
        .observe();
    let observed = std::pin::pin!(
        futures::stream::once(std::future::ready(Ok(Observed::Seen(object.clone())))).chain(later)
    );
    let what = format!("{} {:?}", resource.kind_name(), object.name());
    let uid = object.uid();
    let mut stderr = std::io::stderr();
    within(ctx.wait_timeout, follow(observed, &what, uid, &mut stderr)).await
}

/// Prints `waiting for initializer "NAME"` each time the head of `pending` changes, until
/// `pending` is empty. `what` names the object in errors (`pod "myapp-pod"`). The object
/// deleted, or replaced by another of the same name (another `uid`), is an error: it was
/// never initialized.
async fn follow(
    mut observed: impl Stream<Item = Result<Observed, Error>> + Unpin,
    what: &str,
    uid: &str,
    err: &mut dyn Write,
) -> Result<(), Error> {
    let mut waiting_on: Option<String> = None;
    while let Some(item) = observed.next().await {
        let object = match item? {
            Observed::Seen(o) => o,
            Observed::Gone => return Err(Error::DeletedBeforeInitialized(what.to_string())),
        };
        if !uid.is_empty() && object.uid() != uid {
            return Err(Error::DeletedBeforeInitialized(what.to_string()));
        }
        if object.is_initialized() {
            return Ok(());
        }
        // An entry without a name, which the API server never stores, still pends.
        let head = object
            .pending_initializers()
            .first()
            .copied()
            .unwrap_or("")
            .to_string();
        if waiting_on.as_ref() != Some(&head) {
            writeln!(err, "waiting for initializer {head:?}")?;
            err.flush()?;
            waiting_on = Some(head);
        }
    }
    // The watch below never ends; a stream that does leaves nothing more to wait for.
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
            .map_err(|_| Error::InitializationTimeout)?,
        None => wait.await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ENVOY: &str = "envoy.initializer.kubernetes.io";
    const ISTIO: &str = "istio.initializer.example.com";

    fn pod(pending: &[&str]) -> Value {
        let mut p = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "myapp-pod", "uid": "u1", "resourceVersion": "7"},
            "spec": {"containers": [{"name": "myapp-container", "image": "busybox"}]}
        });
        if !pending.is_empty() {
            p["metadata"]["initializers"] = json!({
                "pending": pending.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()
            });
        }
        p
    }

    fn seen(pending: &[&str]) -> Result<Observed, Error> {
        Ok(Observed::Seen(pod(pending)))
    }

    async fn run_follow(events: Vec<Result<Observed, Error>>) -> (Result<(), Error>, String) {
        let mut err = Vec::new();
        let result = follow(
            futures::stream::iter(events),
            "pod \"myapp-pod\"",
            "u1",
            &mut err,
        )
        .await;
        (result, String::from_utf8(err).unwrap())
    }

    #[tokio::test]
    async fn an_entry_without_a_name_is_waited_on_too() {
        let mut nameless = pod(&[]);
        nameless["metadata"]["initializers"] = json!({"pending": [{}]});
        let (result, err) = run_follow(vec![Ok(Observed::Seen(nameless)), seen(&[])]).await;
        result.unwrap();
        assert_eq!(err, "waiting for initializer \"\"\n");
    }

    #[tokio::test]
    async fn each_initializer_waited_on_is_printed_once_until_pending_is_empty() {
        let (result, err) = run_follow(vec![
            seen(&[ENVOY, ISTIO]),
            seen(&[ENVOY, ISTIO]),
            seen(&[ISTIO]),
            seen(&[ISTIO]),
            seen(&[]),
            seen(&[ENVOY]),
        ])
        .await;
        result.unwrap();
        assert_eq!(
            err,
            "waiting for initializer \"envoy.initializer.kubernetes.io\"\n\
             waiting for initializer \"istio.initializer.example.com\"\n"
        );
    }

    #[tokio::test]
    async fn an_initialized_object_is_not_waited_for() {
        let (result, err) = run_follow(vec![seen(&[])]).await;
        result.unwrap();
        assert_eq!(err, "");
    }

    #[tokio::test]
    async fn an_object_deleted_before_it_is_initialized_is_an_error() {
        let (result, err) = run_follow(vec![seen(&[ENVOY]), Ok(Observed::Gone)]).await;
        assert_eq!(
            result.unwrap_err().to_string(),
            "error: pod \"myapp-pod\" was deleted before it was initialized"
        );
        assert_eq!(
            err,
            "waiting for initializer \"envoy.initializer.kubernetes.io\"\n"
        );

        // Deleted and created again under the name (seen on a read after the revision
        // expired): the new one is another object.
        let mut again = pod(&[]);
        again["metadata"]["uid"] = json!("u2");
        let (result, _) = run_follow(vec![seen(&[ENVOY]), Ok(Observed::Seen(again))]).await;
        assert_eq!(
            result.unwrap_err().to_string(),
            "error: pod \"myapp-pod\" was deleted before it was initialized"
        );
    }

    #[tokio::test]
    async fn watch_errors_end_the_wait() {
        let (result, _) = run_follow(vec![seen(&[ENVOY]), Err(Error::Usage("boom".into()))]).await;
        assert_eq!(result.unwrap_err().to_string(), "error: boom");
    }

    #[tokio::test(start_paused = true)]
    async fn the_timeout_ends_a_wait_that_does_not_finish() {
        let start = tokio::time::Instant::now();
        let never = futures::stream::iter(vec![seen(&[ENVOY])]).chain(futures::stream::pending());
        let mut err = Vec::new();
        let result = within(
            Some(Duration::from_secs(2)),
            follow(never, "pod \"myapp-pod\"", "u1", &mut err),
        )
        .await;
        assert_eq!(
            result.unwrap_err().to_string(),
            "error: timed out waiting for the condition"
        );
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "waiting for initializer \"envoy.initializer.kubernetes.io\"\n"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_timeout_the_wait_lasts_until_initialized() {
        let start = tokio::time::Instant::now();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut err = Vec::new();
        let wait = async {
            let result = within(None, follow(rx, "pod \"myapp-pod\"", "u1", &mut err)).await;
            (result, start.elapsed())
        };
        let day = Duration::from_secs(24 * 3600);
        let drive = async {
            tx.unbounded_send(seen(&[ENVOY])).unwrap();
            tokio::time::sleep(day).await;
            tx.unbounded_send(seen(&[])).unwrap();
        };
        let ((result, waited), ()) = tokio::join!(wait, drive);
        result.unwrap();
        assert_eq!(waited, day);
    }
}
