//! etcd watches as typed responses: each change of a key (with its previous value when asked
//! for), progress notifications, and why a watch ended.

use std::time::Duration;

use bytes::Bytes;
use etcd_client::{EventType, WatchOptions, WatchStream};
use keel_api::ApiError;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::members::Members;
use super::{Etcd, Failure, classify};

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change of one key, borrowed from the response that carried it (the watch cache parses
/// the value straight from etcd's buffer).
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    pub kind: EventKind,
    pub key: &'a [u8],
    /// The value written (empty for a delete).
    pub value: &'a [u8],
    pub mod_revision: i64,
    /// The revision that created the key: equal to `mod_revision` for a first write.
    pub create_revision: i64,
    /// The value and `mod_revision` before the change, when the watch asked for them.
    pub prev: Option<(&'a [u8], i64)>,
}

/// One change of one key held in its own buffers, for a watch fed in process (an in-memory
/// store) rather than from etcd's answers.
#[derive(Debug, Clone)]
pub struct OwnedEvent {
    pub kind: EventKind,
    pub key: Bytes,
    pub value: Bytes,
    pub mod_revision: i64,
    pub create_revision: i64,
    pub prev: Option<(Bytes, i64)>,
}

impl OwnedEvent {
    fn borrow(&self) -> Event<'_> {
        Event {
            kind: self.kind,
            key: &self.key,
            value: &self.value,
            mod_revision: self.mod_revision,
            create_revision: self.create_revision,
            prev: self.prev.as_ref().map(|(v, r)| (&v[..], *r)),
        }
    }
}

/// One message of a watch: events, or a progress notification.
pub struct WatchResponse(Message);

enum Message {
    /// etcd's answer, read in place.
    Etcd(etcd_client::WatchResponse),
    /// Events of one revision or more, in order.
    Events(Vec<OwnedEvent>),
    /// Every event up to this revision has been sent.
    Progress(i64),
}

impl WatchResponse {
    /// Events delivered in process, in revision order.
    pub fn from_events(events: Vec<OwnedEvent>) -> WatchResponse {
        WatchResponse(Message::Events(events))
    }

    /// A progress notification delivered in process: every event up to `revision` was sent.
    pub fn progress_at(revision: i64) -> WatchResponse {
        WatchResponse(Message::Progress(revision))
    }

    /// The changes this message carries, in revision order.
    pub fn events(&self) -> impl Iterator<Item = Event<'_>> {
        let (etcd, owned): (&[etcd_client::Event], &[OwnedEvent]) = match &self.0 {
            Message::Etcd(r) => (r.events(), &[]),
            Message::Events(events) => (&[], events),
            Message::Progress(_) => (&[], &[]),
        };
        // One of the two is empty: chaining them keeps etcd's events borrowed in place.
        etcd.iter()
            .filter_map(|ev| {
                let kv = ev.kv()?;
                Some(Event {
                    kind: match ev.event_type() {
                        EventType::Put => EventKind::Put,
                        EventType::Delete => EventKind::Delete,
                    },
                    key: kv.key(),
                    value: kv.value(),
                    mod_revision: kv.mod_revision(),
                    create_revision: kv.create_revision(),
                    prev: ev.prev_kv().map(|p| (p.value(), p.mod_revision())),
                })
            })
            .chain(owned.iter().map(OwnedEvent::borrow))
    }

    /// For a message without events (a progress notification): the revision up to which every
    /// event has been sent. The message confirming the watch's creation is not one.
    pub fn progress(&self) -> Option<i64> {
        match &self.0 {
            Message::Etcd(r) if r.events().is_empty() && !r.created() => {
                r.header().map(|h| h.revision())
            }
            Message::Etcd(_) | Message::Events(_) => None,
            Message::Progress(rev) => Some(*rev),
        }
    }
}

/// Why a watch ended.
#[derive(Debug)]
pub enum WatchEnd {
    /// etcd canceled the watch; `compact_revision` is above 0 when the revisions asked for were
    /// compacted away (the caller must start again from a list).
    Canceled {
        compact_revision: i64,
        reason: String,
    },
    /// The stream broke or etcd closed it; resuming from the last revision seen loses nothing.
    Failed(String),
}

/// An open watch of a key prefix, on one etcd member (it ends `Failed` when that member is
/// marked down, so the caller resumes on another one from its last revision), or fed in
/// process through a channel.
pub struct Watch(Source);

// One per open watch, held by its task: its size costs nothing, a box would cost a pointer
// chase per message.
#[allow(clippy::large_enum_variant)]
enum Source {
    Etcd {
        stream: WatchStream,
        member: usize,
        health: tokio::sync::watch::Receiver<Vec<bool>>,
    },
    /// Messages in order; the sender's last one may be the end. Closing the channel without
    /// one is `Failed`, as a broken stream.
    Channel(mpsc::UnboundedReceiver<Result<WatchResponse, WatchEnd>>),
}

/// How long opening a watch may wait for a member that answers.
pub(super) const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

impl Etcd {
    /// Watches every key under `prefix` from revision `from` on, with progress notifications;
    /// `with_prev` adds each key's previous value to its events.
    pub async fn watch(&self, prefix: &str, from: i64, with_prev: bool) -> Result<Watch, String> {
        let mut opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from)
            .with_progress_notify();
        if with_prev {
            opts = opts.with_prev_key();
        }
        self.open(prefix, opts, Instant::now() + OPEN_TIMEOUT)
            .await
            .map_err(|e| e.message)
    }

    /// Opens a watch on a healthy member, moving on while members fail.
    async fn open(
        &self,
        key: &str,
        opts: WatchOptions,
        deadline: Instant,
    ) -> Result<Watch, ApiError> {
        let mut cause = String::from("no etcd member answers");
        loop {
            let Some(i) = self.members.pick_up(deadline).await else {
                return Err(ApiError::unavailable(format!("etcd watch: {cause}")));
            };
            let member = &self.members.members[i];
            let mut health = self.members.health();
            let mut client = member
                .client()
                .watch_client()
                .max_decoding_message_size(super::MAX_WATCH_ANSWER_BYTES);
            let opened = tokio::select! {
                r = tokio::time::timeout_at(deadline, client.watch(key, Some(opts.clone()))) => r,
                _ = Members::better_elsewhere(&mut health, i) => continue,
            };
            let why = match opened {
                Err(_) => return Err(ApiError::unavailable(format!("etcd watch: {cause}"))),
                Ok(Ok(stream)) => {
                    return Ok(Watch(Source::Etcd {
                        stream,
                        member: i,
                        health,
                    }));
                }
                Ok(Err(e)) => match classify(e) {
                    Failure::Final(e) => return Err(e),
                    Failure::Retry(why) => why,
                },
            };
            self.members.mark_down(i, &why);
            cause = format!("{}: {why}", member.endpoint);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The first change of `key` after revision `after`: its kind, value and revision;
    /// `None` when that history is compacted.
    pub(super) async fn first_change_after(
        &self,
        key: &str,
        after: i64,
        deadline: Instant,
    ) -> Result<Option<(EventKind, Vec<u8>, i64)>, ApiError> {
        let opts = WatchOptions::new().with_start_revision(after + 1);
        loop {
            let mut watch = self.open(key, opts.clone(), deadline).await?;
            loop {
                let msg = tokio::time::timeout_at(deadline, watch.next())
                    .await
                    .map_err(|_| {
                        ApiError::timeout(
                            Default::default(),
                            "etcd did not answer in time whether a write landed",
                        )
                    })?;
                match msg {
                    Ok(resp) => {
                        if let Some(ev) = resp.events().next() {
                            return Ok(Some((ev.kind, ev.value.to_vec(), ev.mod_revision)));
                        }
                    }
                    Err(WatchEnd::Canceled {
                        compact_revision, ..
                    }) if compact_revision > 0 => return Ok(None),
                    // Another member.
                    Err(_) => break,
                }
            }
        }
    }
}

impl Watch {
    /// A watch whose messages are sent in process, in order, through `rx`.
    pub fn from_channel(rx: mpsc::UnboundedReceiver<Result<WatchResponse, WatchEnd>>) -> Watch {
        Watch(Source::Channel(rx))
    }

    /// The next message; cancel-safe, so it may be raced against a timer.
    pub async fn next(&mut self) -> Result<WatchResponse, WatchEnd> {
        let (stream, member, health) = match &mut self.0 {
            Source::Etcd {
                stream,
                member,
                health,
            } => (stream, *member, health),
            Source::Channel(rx) => {
                return rx
                    .recv()
                    .await
                    .unwrap_or_else(|| Err(WatchEnd::Failed("the watch was closed".into())));
            }
        };
        let msg = tokio::select! {
            m = stream.message() => m,
            _ = Members::better_elsewhere(health, member) => {
                return Err(WatchEnd::Failed("the etcd member stopped answering".into()));
            }
        };
        match msg {
            Ok(Some(r)) if r.canceled() => Err(WatchEnd::Canceled {
                compact_revision: r.compact_revision(),
                reason: r.cancel_reason().to_string(),
            }),
            Ok(Some(r)) => Ok(WatchResponse(Message::Etcd(r))),
            Ok(None) => Err(WatchEnd::Failed("etcd closed the watch".into())),
            Err(e) => Err(WatchEnd::Failed(e.to_string())),
        }
    }
}
