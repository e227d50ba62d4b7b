//! `keelctl get -w`: the current objects, then one line per change, for as long as it runs.
//!
//! The stream survives what a long-running client meets: a dropped connection or a
//! restarted API server is resumed from the last revision seen (keel-client's resumable
//! watch), so no change is missed or printed twice; a revision the server no longer has
//! (`Expired`) makes it list again.

use std::io::Write;
use std::time::Duration;

use futures::StreamExt;
use keel_api::Target;
use keel_client::{ApiError, EventType, ListParams, ObjectList, Reason, WatchParams};

use crate::context::Ctx;
use crate::error::Error;
use crate::printer::Printer;
use crate::resources::Resource;

/// First wait before listing again after a failure, doubled each time up to
/// [`MAX_BACKOFF`]: quick after a blip, gentle on a server that is down.
pub const MIN_BACKOFF: Duration = Duration::from_millis(200);
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What to watch.
pub struct Watch<'r> {
    pub resource: &'r Resource,
    /// "" for every namespace.
    pub namespace: String,
    pub name: Option<String>,
    pub label_selector: String,
    pub field_selector: String,
    /// Print the objects as they are before the first change (`-w`; not `--watch-only`).
    pub print_current: bool,
    /// Also objects whose initializers are not done (`--include-uninitialized`).
    pub include_uninitialized: bool,
}

impl Watch<'_> {
    fn field_selector(&self) -> String {
        let by_name = self.name.as_ref().map(|n| format!("metadata.name={n}"));
        [Some(self.field_selector.clone()), by_name]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Runs until interrupted, or until the server refuses the request itself.
    pub async fn run(
        &self,
        ctx: &Ctx,
        printer: &mut Printer,
        out: &mut dyn Write,
    ) -> Result<(), Error> {
        let mut print_list = self.print_current;
        let mut backoff = MIN_BACKOFF;
        loop {
            let list = match self.list(ctx).await {
                Ok(list) => list,
                Err(e) if transient(&e) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            backoff = MIN_BACKOFF;
            if let Some(name) = &self.name
                && list.items.is_empty()
                && print_list
            {
                let t = Target::new(&self.resource.gvr.group, &self.resource.gvr.resource, name);
                return Err(ApiError::not_found(t).into());
            }
            if print_list && !list.items.is_empty() {
                printer.watch_rows(out, self.resource, &list.items)?;
            }
            // After a relist the current objects are printed again: changes were missed
            // while the revision was gone.
            print_list = true;
            self.follow(ctx, list.resource_version, printer, out)
                .await?;
        }
    }

    async fn list(&self, ctx: &Ctx) -> Result<ObjectList, ApiError> {
        let params = ListParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector(),
            limit: 500,
            include_uninitialized: self.include_uninitialized,
            ..Default::default()
        };
        ctx.client
            .list_all(&self.resource.gvr, &self.namespace, &params)
            .await
    }

    /// Prints every change after `rv`; returns when the revision expired (relist).
    async fn follow(
        &self,
        ctx: &Ctx,
        rv: String,
        printer: &mut Printer,
        out: &mut dyn Write,
    ) -> Result<(), Error> {
        let params = WatchParams {
            namespace: self.namespace.clone(),
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector(),
            resource_version: rv,
            // Bookmarks advance the resume point on quiet streams, so a resume rarely finds
            // its revision expired.
            allow_bookmarks: true,
            include_uninitialized: self.include_uninitialized,
            shard: None,
        };
        let mut stream = ctx.client.watch_resumable(&self.resource.gvr, &params);
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) if event.kind == EventType::Bookmark => {}
                Ok(event) => {
                    printer.watch_rows(out, self.resource, std::slice::from_ref(&event.object))?
                }
                Err(e) if e.must_relist() => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        // The resumable stream only ends after an error; relist to be safe.
        Ok(())
    }
}

/// Errors that a later attempt may not meet: the server or the network, not the request.
pub fn transient(e: &ApiError) -> bool {
    matches!(
        e.reason,
        Reason::ServiceUnavailable
            | Reason::Timeout
            | Reason::TooManyRequests
            | Reason::InternalError
            | Reason::Expired
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_api::GroupVersionResource;

    #[test]
    fn a_named_watch_selects_the_name() {
        let r = Resource {
            gvr: GroupVersionResource::new("", "v1", "configmaps"),
            singular: "configmap".into(),
            kind: "ConfigMap".into(),
            short_names: vec![],
            namespaced: true,
            verbs: vec![],
            printer_columns: vec![],
            categories: vec![],
        };
        let w = Watch {
            resource: &r,
            namespace: "default".into(),
            name: Some("x".into()),
            label_selector: String::new(),
            field_selector: "metadata.namespace=default".into(),
            print_current: true,
            include_uninitialized: false,
        };
        assert_eq!(
            w.field_selector(),
            "metadata.namespace=default,metadata.name=x"
        );
    }

    #[test]
    fn only_server_and_network_failures_are_retried() {
        let e = |reason| ApiError::new(reason, Target::default(), "x");
        assert!(transient(&e(Reason::ServiceUnavailable)));
        assert!(transient(&e(Reason::Timeout)));
        assert!(!transient(&e(Reason::BadRequest)));
        assert!(!transient(&e(Reason::NotFound)));
    }
}
