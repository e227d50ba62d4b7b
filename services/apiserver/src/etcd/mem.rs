//! An in-memory key-value store with etcd's semantics, for unit tests of storage: revisions,
//! compare-and-swap, ranges at a revision, watches from a revision, compaction. Checked against
//! a real etcd by the shared suite in `conformance.rs`.
//!
//! What it imitates, and where the facts come from (etcd 3.4):
//! - a fresh store is at revision 1; each write (put or delete of a key that exists) is one
//!   new revision; deleting a key that is not there writes nothing;
//! - a compare of `mod_revision` against a missing key compares with 0;
//! - compaction at `r` keeps, per key, the newest version at or before `r` unless that is a
//!   deletion; reads before `r` then fail "required revision has been compacted", reads after
//!   the current revision "required revision is a future revision" (both `OutOfRange`, mapped
//!   as etcd's own errors are);
//! - a watch from before the compaction opens, then ends canceled with the compaction's
//!   revision; a watch's events come in revision order, a catching-up watch's in one batch.
//!
//! Not imitated: leases, sizes (answers of any size come whole), member failures, and etcd's
//! own periodic progress notifications (a test sends them with [`MemEtcd::notify_progress`]).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use keel_api::ApiError;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{
    Cas, EventKind, KeyValue, LeaseId, NO_LEASE, OwnedEvent, Page, Stored, UNLIMITED_RANGE, Watch,
    WatchEnd, WatchResponse, classify, prefix_end,
};

/// etcd's messages for the two revisions it cannot read at.
const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
const FUTURE: &str = "etcdserver: mvcc: required revision is a future revision";

/// An in-memory etcd. Answers after [`MemEtcd::with_latency`] (none by default), so that
/// deadlines can be reached on tokio's paused clock.
pub struct MemEtcd {
    /// A std `Mutex`: held for one operation, never across an await. Writes and the watchers'
    /// feeds move together under it, so a watch never misses or repeats a write.
    state: Mutex<State>,
    latency: Duration,
}

struct State {
    revision: i64,
    /// Reads and watches before this revision fail (0: nothing compacted).
    compacted: i64,
    /// Every key's versions, oldest first, back to the compaction.
    keys: BTreeMap<Vec<u8>, Vec<Version>>,
    watchers: Vec<Watcher>,
    /// Leases granted and not yet expired: when each expires and the keys attached to it.
    leases: BTreeMap<LeaseId, (Instant, BTreeSet<Vec<u8>>)>,
    next_lease: LeaseId,
}

#[derive(Clone)]
struct Version {
    mod_revision: i64,
    create_revision: i64,
    /// `None`: deleted at `mod_revision`.
    value: Option<Bytes>,
}

struct Watcher {
    start: Vec<u8>,
    end: Vec<u8>,
    /// Events before this revision are not sent (a watch from a revision not yet written).
    from: i64,
    with_prev: bool,
    /// Unbounded: tests read what they watch; etcd's own bound (a slow watcher is canceled)
    /// is not something storage relies on.
    tx: mpsc::UnboundedSender<Result<WatchResponse, WatchEnd>>,
}

impl Default for MemEtcd {
    fn default() -> Self {
        MemEtcd::new()
    }
}

impl MemEtcd {
    /// An empty store at revision 1, as a fresh etcd.
    pub fn new() -> MemEtcd {
        MemEtcd {
            state: Mutex::new(State {
                revision: 1,
                compacted: 0,
                keys: BTreeMap::new(),
                watchers: Vec::new(),
                leases: BTreeMap::new(),
                next_lease: 1,
            }),
            latency: Duration::ZERO,
        }
    }

    /// Every call takes `latency` (of tokio's clock) before it acts; a call whose deadline
    /// comes first fails `Timeout`, as etcd's do.
    pub fn with_latency(mut self, latency: Duration) -> MemEtcd {
        self.latency = latency;
        self
    }

    /// The state, with the keys of expired leases deleted first (etcd deletes them when the
    /// lease expires; here, at the next call after).
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.expire(Instant::now());
        st
    }

    /// Writes `value` at `key` now, unconditionally (another writer, in a test); returns the
    /// write's revision.
    pub fn put(&self, key: &str, value: impl Into<Bytes>) -> i64 {
        self.lock().put(key.as_bytes(), value.into(), NO_LEASE)
    }

    /// Deletes `key` now, unconditionally; returns the store's revision after it.
    pub fn delete(&self, key: &str) -> i64 {
        self.lock().delete(key.as_bytes())
    }

    /// The store's revision, at once.
    pub fn revision(&self) -> i64 {
        self.lock().revision
    }

    /// Ends every open watch `Failed`, as when etcd's connection breaks: watchers resume from
    /// their last revision.
    pub fn break_watches(&self) {
        self.lock().watchers.clear();
    }

    /// Sends every open watch a progress notification at the current revision, as etcd does
    /// periodically for watches that have been sent every event so far.
    pub fn notify_progress(&self) {
        let mut st = self.lock();
        let rev = st.revision;
        st.watchers
            .retain(|w| w.tx.send(Ok(WatchResponse::progress_at(rev))).is_ok());
    }

    /// Waits out the latency, within `deadline`.
    async fn answer(&self, deadline: Instant) -> Result<(), ApiError> {
        if self.latency.is_zero() {
            return Ok(());
        }
        let wait = tokio::time::sleep(self.latency);
        tokio::time::timeout_at(deadline, wait).await.map_err(|_| {
            ApiError::timeout(
                Default::default(),
                "the request did not complete within its deadline (in-memory etcd)",
            )
        })
    }
}

/// The error etcd gives for `message`, mapped as keel maps etcd's.
fn out_of_range(message: &str) -> ApiError {
    let status = tonic::Status::out_of_range(message);
    match classify(etcd_client::Error::GRpcStatus(status)) {
        super::Failure::Final(e) => e,
        super::Failure::Retry(why) => ApiError::unavailable(why),
    }
}

fn stored(key: &[u8], v: &Version, value: &Bytes) -> Stored {
    Stored {
        key: String::from_utf8_lossy(key).into_owned(),
        value: value.to_vec(),
        mod_revision: v.mod_revision,
        create_revision: v.create_revision,
    }
}

impl State {
    /// The live version of `key` now.
    fn live(&self, key: &[u8]) -> Option<(&Version, &Bytes)> {
        let v = self.keys.get(key)?.last()?;
        Some((v, v.value.as_ref()?))
    }

    fn current(&self, key: &[u8]) -> Option<Stored> {
        self.live(key).map(|(v, value)| stored(key, v, value))
    }

    /// Whether a read at `revision` (0: now) can be answered, as etcd says.
    fn check_readable(&self, revision: i64) -> Result<i64, ApiError> {
        if revision <= 0 {
            return Ok(self.revision);
        }
        if revision < self.compacted {
            return Err(out_of_range(COMPACTED));
        }
        if revision > self.revision {
            return Err(out_of_range(FUTURE));
        }
        Ok(revision)
    }

    /// Deletes the keys of every lease expired at `now`.
    fn expire(&mut self, now: Instant) {
        let expired: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            if let Some((_, keys)) = self.leases.remove(&id) {
                for k in keys {
                    self.delete(&k);
                }
            }
        }
    }

    /// Attaches `key` to `lease` alone (none: `NO_LEASE`).
    fn attach(&mut self, key: &[u8], lease: LeaseId) {
        for (_, keys) in self.leases.values_mut() {
            keys.remove(key);
        }
        if let Some((_, keys)) = self.leases.get_mut(&lease) {
            keys.insert(key.to_vec());
        }
    }

    fn put(&mut self, key: &[u8], value: Bytes, lease: LeaseId) -> i64 {
        self.attach(key, lease);
        self.revision += 1;
        let rev = self.revision;
        let prev = self.live(key).map(|(v, value)| (v.clone(), value.clone()));
        let create_revision = prev.as_ref().map_or(rev, |(v, _)| v.create_revision);
        self.keys.entry(key.to_vec()).or_default().push(Version {
            mod_revision: rev,
            create_revision,
            value: Some(value.clone()),
        });
        self.publish(OwnedEvent {
            kind: EventKind::Put,
            key: Bytes::copy_from_slice(key),
            value,
            mod_revision: rev,
            create_revision,
            prev: prev.map(|(v, value)| (value, v.mod_revision)),
        });
        rev
    }

    /// Deletes `key` if it is there (a new revision); else writes nothing.
    fn delete(&mut self, key: &[u8]) -> i64 {
        self.attach(key, NO_LEASE);
        let Some(prev) = self
            .live(key)
            .map(|(v, value)| (v.mod_revision, value.clone()))
        else {
            return self.revision;
        };
        self.revision += 1;
        let rev = self.revision;
        self.keys.entry(key.to_vec()).or_default().push(Version {
            mod_revision: rev,
            create_revision: 0,
            value: None,
        });
        self.publish(OwnedEvent {
            kind: EventKind::Delete,
            key: Bytes::copy_from_slice(key),
            value: Bytes::new(),
            mod_revision: rev,
            create_revision: 0,
            prev: Some((prev.1, prev.0)),
        });
        rev
    }

    /// Hands one event to every watch of its key; drops watches nobody reads any more.
    fn publish(&mut self, ev: OwnedEvent) {
        self.watchers.retain(|w| {
            if !in_range(&ev.key, &w.start, &w.end) || ev.mod_revision < w.from {
                return true;
            }
            let mut ev = ev.clone();
            if !w.with_prev {
                ev.prev = None;
            }
            w.tx.send(Ok(WatchResponse::from_events(vec![ev]))).is_ok()
        });
    }

    /// Every change in `[start, end)` at or after `from`, in revision order.
    fn history(&self, start: &[u8], end: &[u8], from: i64, with_prev: bool) -> Vec<OwnedEvent> {
        let mut out = Vec::new();
        for (key, versions) in self.range_of(start, end) {
            for (i, v) in versions.iter().enumerate() {
                if v.mod_revision < from {
                    continue;
                }
                let prev = i
                    .checked_sub(1)
                    .and_then(|p| versions.get(p))
                    .and_then(|p| Some((p.value.clone()?, p.mod_revision)))
                    .filter(|_| with_prev);
                out.push(OwnedEvent {
                    kind: if v.value.is_some() {
                        EventKind::Put
                    } else {
                        EventKind::Delete
                    },
                    key: Bytes::copy_from_slice(key),
                    value: v.value.clone().unwrap_or_default(),
                    mod_revision: v.mod_revision,
                    create_revision: v.create_revision,
                    prev,
                });
            }
        }
        out.sort_by_key(|e| e.mod_revision);
        out
    }

    fn range_of<'a>(
        &'a self,
        start: &'a [u8],
        end: &'a [u8],
    ) -> impl Iterator<Item = (&'a Vec<u8>, &'a Vec<Version>)> {
        let upper = if end == [0] {
            // etcd's "every key from `start` on".
            Bound::Unbounded
        } else {
            Bound::Excluded(end.to_vec())
        };
        let lower = Bound::Included(start.to_vec());
        // An empty range (start at or past end) is no keys, not a panic of `BTreeMap::range`.
        let empty = matches!(&upper, Bound::Excluded(e) if e.as_slice() <= start);
        (!empty)
            .then(|| self.keys.range((lower, upper)))
            .into_iter()
            .flatten()
    }

    fn compact(&mut self, revision: i64) -> Result<(), ApiError> {
        if revision <= self.compacted {
            return Err(out_of_range(COMPACTED));
        }
        if revision > self.revision {
            return Err(out_of_range(FUTURE));
        }
        self.compacted = revision;
        self.keys.retain(|_, versions| {
            // The newest version at or before the compaction stays, unless it is a deletion.
            let at = versions
                .iter()
                .rposition(|v| v.mod_revision <= revision)
                .unwrap_or(0);
            let keep_at = versions.get(at).is_some_and(|v| v.value.is_some());
            let first = if keep_at { at } else { at + 1 };
            versions.drain(..first.min(versions.len()));
            !versions.is_empty()
        });
        Ok(())
    }
}

fn in_range(key: &[u8], start: &[u8], end: &[u8]) -> bool {
    key >= start && (end == [0] || key < end)
}

impl KeyValue for MemEtcd {
    fn get<'a>(
        &'a self,
        key: &'a str,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Option<Stored>, ApiError>> {
        Box::pin(async move {
            self.answer(deadline).await?;
            Ok(self.lock().current(key.as_bytes()))
        })
    }

    fn range<'a>(
        &'a self,
        start: &'a [u8],
        end: Vec<u8>,
        revision: i64,
        limit: i64,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Page, ApiError>> {
        Box::pin(async move {
            self.answer(deadline).await?;
            let st = self.lock();
            let at = st.check_readable(revision)?;
            let limit = if limit > 0 { limit } else { UNLIMITED_RANGE };
            let mut kvs = Vec::new();
            let mut count = 0;
            for (key, versions) in st.range_of(start, &end) {
                let Some(v) = versions.iter().rev().find(|v| v.mod_revision <= at) else {
                    continue;
                };
                let Some(value) = &v.value else { continue };
                count += 1;
                if count <= limit {
                    kvs.push(stored(key, v, value));
                }
            }
            Ok(Page {
                more: count > kvs.len() as i64,
                kvs,
                revision: at,
                count,
            })
        })
    }

    fn revisions<'a>(
        &'a self,
        start: &'a [u8],
        end: Vec<u8>,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, ApiError>> {
        Box::pin(async move {
            self.answer(deadline).await?;
            let st = self.lock();
            Ok(st
                .range_of(start, &end)
                .filter_map(|(key, versions)| {
                    let v = versions.last().filter(|v| v.value.is_some())?;
                    Some((String::from_utf8_lossy(key).into_owned(), v.mod_revision))
                })
                .collect())
        })
    }

    fn current_revision(&self, deadline: Instant) -> BoxFuture<'_, Result<i64, ApiError>> {
        Box::pin(async move {
            self.answer(deadline).await?;
            Ok(self.lock().revision)
        })
    }

    fn create<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        lease: LeaseId,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Cas, ApiError>> {
        Box::pin(async move {
            self.answer(deadline).await?;
            let mut st = self.lock();
            if let Some(existing) = st.current(key.as_bytes()) {
                return Ok(Cas::Stale(Some(existing)));
            }
            Ok(Cas::Done(st.put(key.as_bytes(), value.into(), lease)))
        })
    }

    fn grant_lease(&self, ttl: i64, deadline: Instant) -> BoxFuture<'_, Result<LeaseId, ApiError>> {
        Box::pin(async move {
            self.answer(deadline).await?;
            let mut st = self.lock();
            let id = st.next_lease;
            st.next_lease += 1;
            let expiry =
                Instant::now() + Duration::from_secs(u64::try_from(ttl.max(1)).unwrap_or(1));
            st.leases.insert(id, (expiry, BTreeSet::new()));
            Ok(id)
        })
    }

    fn compare_and_put<'a>(
        &'a self,
        key: &'a str,
        expected: i64,
        value: Vec<u8>,
        lease: LeaseId,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Cas, ApiError>> {
        Box::pin(async move {
            self.answer(deadline).await?;
            let mut st = self.lock();
            let current = st.current(key.as_bytes());
            // etcd compares a missing key's mod_revision as 0.
            if current.as_ref().map_or(0, |c| c.mod_revision) != expected {
                return Ok(Cas::Stale(current));
            }
            Ok(Cas::Done(st.put(key.as_bytes(), value.into(), lease)))
        })
    }

    fn compare_and_delete<'a>(
        &'a self,
        key: &'a str,
        expected: i64,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Cas, ApiError>> {
        Box::pin(async move {
            self.answer(deadline).await?;
            let mut st = self.lock();
            let current = st.current(key.as_bytes());
            if current.as_ref().map_or(0, |c| c.mod_revision) != expected {
                return Ok(Cas::Stale(current));
            }
            Ok(Cas::Done(st.delete(key.as_bytes())))
        })
    }

    fn compact(&self, revision: i64, deadline: Instant) -> BoxFuture<'_, Result<(), ApiError>> {
        Box::pin(async move {
            self.answer(deadline).await?;
            self.lock().compact(revision)
        })
    }

    fn watch<'a>(
        &'a self,
        prefix: &'a str,
        from: i64,
        with_prev: bool,
    ) -> BoxFuture<'a, Result<Watch, String>> {
        Box::pin(async move {
            self.answer(Instant::now() + super::watch::OPEN_TIMEOUT)
                .await
                .map_err(|e| e.message)?;
            let (tx, rx) = mpsc::unbounded_channel();
            let mut st = self.lock();
            let from = if from > 0 { from } else { st.revision + 1 };
            if st.compacted > 0 && from < st.compacted {
                // etcd opens the watch, then cancels it.
                let _ = tx.send(Err(WatchEnd::Canceled {
                    compact_revision: st.compacted,
                    reason: COMPACTED.into(),
                }));
                return Ok(Watch::from_channel(rx));
            }
            let start = prefix.as_bytes().to_vec();
            let end = prefix_end(prefix);
            // The history and the subscription under one lock: nothing falls between them.
            let backlog = st.history(&start, &end, from, with_prev);
            if !backlog.is_empty() {
                let _ = tx.send(Ok(WatchResponse::from_events(backlog)));
            }
            st.watchers.push(Watcher {
                start,
                end,
                from,
                with_prev,
                tx,
            });
            Ok(Watch::from_channel(rx))
        })
    }
}

#[cfg(test)]
mod tests {
    use keel_api::Reason;

    use super::*;

    // etcd's own behaviour is checked in `conformance.rs`; these are the test hooks'.

    #[tokio::test]
    async fn a_progress_notification_follows_the_events_it_covers() {
        let kv = MemEtcd::new();
        let mut watch = kv.watch("/p/", 0, false).await.unwrap();
        let rev = kv.put("/p/a", "a");
        kv.notify_progress();
        let first = watch.next().await.unwrap();
        assert_eq!(
            first.events().map(|e| e.mod_revision).collect::<Vec<_>>(),
            [rev]
        );
        assert_eq!(first.progress(), None);
        assert_eq!(watch.next().await.unwrap().progress(), Some(rev));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_deadline_is_a_timeout() {
        let kv = MemEtcd::new().with_latency(Duration::from_millis(100));
        let start = Instant::now();
        let err = kv
            .get("/k", start + Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(err.reason, Reason::Timeout);
        assert_eq!(start.elapsed(), Duration::from_millis(50));
        assert!(
            kv.get("/k", start + Duration::from_secs(1))
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_watch_nobody_reads_is_dropped_at_the_next_write() {
        let kv = MemEtcd::new();
        drop(kv.watch("/p/", 0, false).await.unwrap());
        kv.put("/p/a", "a");
        assert!(kv.lock().watchers.is_empty());
    }
}
