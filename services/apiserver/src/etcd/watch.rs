//! etcd watches as typed responses: each change of a key (with its previous value when asked
//! for), progress notifications, and why a watch ended.

use etcd_client::{EventType, WatchOptions, WatchStream};

use super::Etcd;

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

/// One message of a watch: events, or a progress notification.
pub struct WatchResponse(etcd_client::WatchResponse);

impl WatchResponse {
    /// The changes this message carries, in revision order.
    pub fn events(&self) -> impl Iterator<Item = Event<'_>> {
        self.0.events().iter().filter_map(|ev| {
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
    }

    /// For a message without events (a progress notification): the revision up to which every
    /// event has been sent. The message confirming the watch's creation is not one.
    pub fn progress(&self) -> Option<i64> {
        if self.0.events().is_empty() && !self.0.created() {
            self.0.header().map(|h| h.revision())
        } else {
            None
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

/// An open watch of a key prefix.
pub struct Watch {
    stream: WatchStream,
}

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
        let mut client = self.client.clone();
        let stream = client
            .watch(prefix, Some(opts))
            .await
            .map_err(|e| e.to_string())?;
        Ok(Watch { stream })
    }
}

impl Watch {
    /// The next message; cancel-safe, so it may be raced against a timer.
    pub async fn next(&mut self) -> Result<WatchResponse, WatchEnd> {
        match self.stream.message().await {
            Ok(Some(r)) if r.canceled() => Err(WatchEnd::Canceled {
                compact_revision: r.compact_revision(),
                reason: r.cancel_reason().to_string(),
            }),
            Ok(Some(r)) => Ok(WatchResponse(r)),
            Ok(None) => Err(WatchEnd::Failed("etcd closed the watch".into())),
            Err(e) => Err(WatchEnd::Failed(e.to_string())),
        }
    }
}
