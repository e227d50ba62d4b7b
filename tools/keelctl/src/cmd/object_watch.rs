//! One object followed through the API server: listed by name (or started from a state the
//! server just returned), then watched from that revision. A dropped stream or a restarted
//! server is resumed from the last revision seen (keel-client's resumable watch); a revision
//! the server no longer has (`Expired`) makes it list the object again. What `rollout status`
//! and the initializer waits of `create` and `apply` follow.

use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use keel_client::{ApiError, Event, EventType, GroupVersionResource, ListParams, WatchParams};
use serde_json::Value;

use crate::cmd::watch::{MAX_BACKOFF, MIN_BACKOFF, transient};
use crate::context::Ctx;
use crate::error::Error;

/// What the watch saw of the object.
#[derive(Debug)]
pub enum Observed {
    /// Its current state (listed, added or modified).
    Seen(Value),
    /// It was deleted.
    Gone,
}

/// One object, for as long as it is read.
pub struct ObjectWatch<'a> {
    ctx: &'a Ctx,
    gvr: &'a GroupVersionResource,
    namespace: String,
    name: String,
    include_uninitialized: bool,
    /// Where the next watch starts; "" before the first list and after the revision expired.
    resource_version: String,
    /// The open watch.
    stream: Option<BoxStream<'static, Result<Event, ApiError>>>,
    /// What the last list found, handed out before the watch is read.
    read: VecDeque<Observed>,
    /// Whether the object existed at the last list or event: a list that no longer finds it
    /// means it was deleted meanwhile.
    exists: bool,
    backoff: Duration,
}

impl<'a> ObjectWatch<'a> {
    /// Lists the object first: one that does not exist yet is waited for.
    pub fn new(
        ctx: &'a Ctx,
        gvr: &'a GroupVersionResource,
        namespace: &str,
        name: &str,
    ) -> ObjectWatch<'a> {
        ObjectWatch {
            ctx,
            gvr,
            namespace: namespace.to_string(),
            name: name.to_string(),
            include_uninitialized: false,
            resource_version: String::new(),
            stream: None,
            read: VecDeque::new(),
            exists: false,
            backoff: MIN_BACKOFF,
        }
    }

    /// Starts from `object` as the server just returned it: watched from its revision.
    pub fn starting_at(mut self, object: &Value) -> Self {
        self.resource_version = object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        self.exists = true;
        self
    }

    /// Follows the object while it is uninitialized too (the server hides it otherwise).
    pub fn include_uninitialized(mut self) -> Self {
        self.include_uninitialized = true;
        self
    }

    /// Every state observed, in order; never ends by itself.
    pub fn observe(self) -> impl Stream<Item = Result<Observed, Error>> + 'a {
        futures::stream::unfold(self, |mut w| async move {
            let next = w.next().await;
            Some((next, w))
        })
    }

    fn field_selector(&self) -> String {
        format!("metadata.name={}", self.name)
    }

    async fn next(&mut self) -> Result<Observed, Error> {
        loop {
            if let Some(o) = self.read.pop_front() {
                return Ok(o);
            }
            let Some(stream) = &mut self.stream else {
                if self.resource_version.is_empty() {
                    self.list().await?;
                }
                self.open();
                continue;
            };
            match stream.next().await {
                Some(Ok(event)) => match event.kind {
                    EventType::Bookmark => {}
                    EventType::Deleted => {
                        self.exists = false;
                        return Ok(Observed::Gone);
                    }
                    EventType::Added | EventType::Modified => {
                        self.exists = true;
                        return Ok(Observed::Seen(event.object));
                    }
                },
                Some(Err(e)) if e.must_relist() => self.expired(),
                Some(Err(e)) => return Err(e.into()),
                // The resumable stream ends only after an error; list again to be safe.
                None => self.expired(),
            }
        }
    }

    fn expired(&mut self) {
        self.stream = None;
        self.resource_version.clear();
    }

    fn open(&mut self) {
        let params = WatchParams {
            namespace: self.namespace.clone(),
            field_selector: self.field_selector(),
            resource_version: self.resource_version.clone(),
            // Bookmarks advance the resume point of a quiet stream, so that a resume rarely
            // finds its revision expired.
            allow_bookmarks: true,
            include_uninitialized: self.include_uninitialized,
            ..Default::default()
        };
        self.stream = Some(self.ctx.client.watch_resumable(self.gvr, &params).boxed());
    }

    /// Lists the object by name (retrying while the server is unreachable), and the revision
    /// to watch from. A List rather than a Get: the object's own resourceVersion may be older
    /// than the server keeps, the List's is current.
    async fn list(&mut self) -> Result<(), Error> {
        let params = ListParams {
            field_selector: self.field_selector(),
            include_uninitialized: self.include_uninitialized,
            ..Default::default()
        };
        let list = loop {
            match self
                .ctx
                .client
                .list(self.gvr, &self.namespace, &params)
                .await
            {
                Ok(list) => break list,
                Err(e) if transient(&e) => {
                    tokio::time::sleep(self.backoff).await;
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                }
                Err(e) => return Err(e.into()),
            }
        };
        self.backoff = MIN_BACKOFF;
        match list.items.into_iter().next() {
            Some(object) => {
                self.exists = true;
                self.read.push_back(Observed::Seen(object));
            }
            None if self.exists => {
                self.exists = false;
                self.read.push_back(Observed::Gone);
            }
            None => {}
        }
        self.resource_version = list.resource_version;
        Ok(())
    }
}
