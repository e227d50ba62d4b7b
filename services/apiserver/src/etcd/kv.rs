//! The key-value store storage is written against: exactly the calls it makes of etcd, in
//! keel's own types. [`Etcd`] is the product's; an in-memory one with etcd's semantics serves
//! unit tests (`mem.rs`), and one shared suite checks that the two agree (`conformance.rs`).

use futures::future::BoxFuture;
use keel_api::ApiError;
use tokio::time::Instant;

#[cfg(doc)]
use super::NO_LEASE;
use super::{Cas, Etcd, LeaseId, Page, Stored, Watch};

/// A key-value store with etcd's semantics: one revision counter for the whole store, bumped
/// by one per write; per key the revision that created it and the one that last changed it;
/// history kept until compaction. Errors are `ApiError`s mapped as etcd's are (a revision
/// compacted away or not yet written: `Expired`).
///
/// Futures are boxed so that storage holds one `Arc<dyn KeyValue>`: one allocation per call,
/// nothing against the round trip it stands for; values are moved in, never copied.
pub trait KeyValue: Send + Sync {
    /// Reads one key (linearizable).
    fn get<'a>(
        &'a self,
        key: &'a str,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Option<Stored>, ApiError>>;

    /// Reads up to `limit` keys of `[start, end)` in key order at `revision` (0: newest;
    /// `limit` 0: a default page). `more` says keys are left; `count` is the number of keys
    /// in the whole range at that revision. A page may hold fewer than `limit` keys with `more`
    /// set (etcd's answers have a size limit).
    fn range<'a>(
        &'a self,
        start: &'a [u8],
        end: Vec<u8>,
        revision: i64,
        limit: i64,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Page, ApiError>>;

    /// Every key of `[start, end)` with the revision that last changed it, newest, without
    /// the values (etcd's keys-only read): what a caller that holds most of the values
    /// already compares against.
    fn revisions<'a>(
        &'a self,
        start: &'a [u8],
        end: Vec<u8>,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, ApiError>>;

    /// The store's current revision.
    fn current_revision(&self, deadline: Instant) -> BoxFuture<'_, Result<i64, ApiError>>;

    /// Creates `key` if it does not exist: `Stale(Some(existing))` when it does. A `lease`
    /// other than [`NO_LEASE`] removes the key when it expires.
    fn create<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        lease: LeaseId,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Cas, ApiError>>;

    /// Puts `value` at `key` if the key's `mod_revision` is still `expected`; otherwise the
    /// key's current state, read in the same transaction (`Stale(None)`: it is gone). The key
    /// is attached to `lease` from then on (none: [`NO_LEASE`]).
    fn compare_and_put<'a>(
        &'a self,
        key: &'a str,
        expected: i64,
        value: Vec<u8>,
        lease: LeaseId,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Cas, ApiError>>;

    /// A lease of `ttl` seconds: the keys written with it are deleted (each a delete event)
    /// when it expires. etcd may round a short TTL up to its minimum (about 2 s).
    fn grant_lease(&self, ttl: i64, deadline: Instant) -> BoxFuture<'_, Result<LeaseId, ApiError>>;

    /// Deletes `key` if its `mod_revision` is still `expected`; otherwise as `compare_and_put`.
    fn compare_and_delete<'a>(
        &'a self,
        key: &'a str,
        expected: i64,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Cas, ApiError>>;

    /// Forgets the history before `revision`: reads and watches from earlier revisions fail
    /// from then on. A revision already compacted, or not yet written, is an error.
    fn compact(&self, revision: i64, deadline: Instant) -> BoxFuture<'_, Result<(), ApiError>>;

    /// Watches every key under `prefix` from revision `from` on (0: from now), with progress
    /// notifications; `with_prev` adds each key's previous value to its events. Events come
    /// in revision order. A watch from a compacted revision opens, then ends
    /// `WatchEnd::Canceled` with the compaction's revision.
    fn watch<'a>(
        &'a self,
        prefix: &'a str,
        from: i64,
        with_prev: bool,
    ) -> BoxFuture<'a, Result<Watch, String>>;
}

impl KeyValue for Etcd {
    fn get<'a>(
        &'a self,
        key: &'a str,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Option<Stored>, ApiError>> {
        Box::pin(Etcd::get(self, key, deadline))
    }

    fn range<'a>(
        &'a self,
        start: &'a [u8],
        end: Vec<u8>,
        revision: i64,
        limit: i64,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Page, ApiError>> {
        Box::pin(Etcd::range(self, start, end, revision, limit, deadline))
    }

    fn revisions<'a>(
        &'a self,
        start: &'a [u8],
        end: Vec<u8>,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, ApiError>> {
        Box::pin(Etcd::revisions(self, start, end, deadline))
    }

    fn current_revision(&self, deadline: Instant) -> BoxFuture<'_, Result<i64, ApiError>> {
        Box::pin(Etcd::current_revision(self, deadline))
    }

    fn create<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        lease: LeaseId,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Cas, ApiError>> {
        Box::pin(Etcd::create(self, key, value, lease, deadline))
    }

    fn compare_and_put<'a>(
        &'a self,
        key: &'a str,
        expected: i64,
        value: Vec<u8>,
        lease: LeaseId,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Cas, ApiError>> {
        Box::pin(Etcd::compare_and_put(
            self, key, expected, value, lease, deadline,
        ))
    }

    fn grant_lease(&self, ttl: i64, deadline: Instant) -> BoxFuture<'_, Result<LeaseId, ApiError>> {
        Box::pin(Etcd::grant_lease(self, ttl, deadline))
    }

    fn compare_and_delete<'a>(
        &'a self,
        key: &'a str,
        expected: i64,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<Cas, ApiError>> {
        Box::pin(Etcd::compare_and_delete(self, key, expected, deadline))
    }

    fn compact(&self, revision: i64, deadline: Instant) -> BoxFuture<'_, Result<(), ApiError>> {
        Box::pin(Etcd::compact(self, revision, deadline))
    }

    fn watch<'a>(
        &'a self,
        prefix: &'a str,
        from: i64,
        with_prev: bool,
    ) -> BoxFuture<'a, Result<Watch, String>> {
        Box::pin(Etcd::watch(self, prefix, from, with_prev))
    }
}
