//! etcd, the layer below storage: key-value reads, compare-and-swap transactions, watches and
//! compaction, each under a deadline and counted in the metrics. It knows keys and bytes, not
//! objects; etcd's own errors become `ApiError`s here.
//!
//! A call goes to one healthy member and moves to another when that one fails or stops
//! answering (`members`), before the caller's deadline. A write whose first attempt may have
//! landed is sent again as the same transaction, and the key's history tells whether the
//! write that won was ours ([`Etcd::settle`]).

#[cfg(test)]
mod conformance;
mod kv;
#[cfg(test)]
pub mod mem;
mod members;
mod watch;

pub use kv::KeyValue;
pub use watch::{Event, EventKind, OwnedEvent, Watch, WatchEnd, WatchResponse};

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use keel_api::{ApiError, Reason};
use tokio::time::Instant;

use crate::metrics::Metrics;
use members::Members;

/// TLS towards etcd (`https://` endpoints): the CA that signed etcd's serving certificate,
/// and the client certificate and key etcd checks with `--client-cert-auth` (PEM).
#[derive(Debug, Clone)]
pub struct EtcdTls {
    pub ca: Vec<u8>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// One stored key: its value bytes and revisions.
#[derive(Debug, Clone)]
pub struct Stored {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: i64,
    /// The revision that created the key.
    pub create_revision: i64,
}
/// An etcd lease a key is written with: when it expires, the key is deleted.
pub type LeaseId = i64;
/// A key written with no lease.
pub const NO_LEASE: LeaseId = 0;

fn put_options(lease: LeaseId) -> Option<etcd_client::PutOptions> {
    (lease != NO_LEASE).then(|| etcd_client::PutOptions::new().with_lease(lease))
}

/// The outcome of a compare-and-swap.
#[derive(Debug)]
pub enum Cas {
    /// Written at this revision.
    Done(i64),
    /// The compare failed; the key's current state from the same transaction (`None`: gone).
    Stale(Option<Stored>),
}

/// A page of a range read.
pub struct Page {
    pub kvs: Vec<Stored>,
    /// The revision the page was read at.
    pub revision: i64,
    pub more: bool,
    /// Keys in the range from the start key, including those returned.
    pub count: i64,
}

/// etcd, as the API server uses it. Cheap to clone: the members' clients multiplex one
/// connection each.
#[derive(Clone)]
pub struct Etcd {
    members: Arc<Members>,
    metrics: Metrics,
}

/// The message of etcd's `NOSPACE` alarm, refusing every write until it is disarmed.
const NOSPACE: &str = "database space exceeded";

/// The largest answer to a read that is decoded (etcd-client's default is 4 MiB, three
/// objects of the largest size). A range whose keys make more is read in smaller parts.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;
/// The keys a range without a limit reads at once, before halving for size.
const UNLIMITED_RANGE: i64 = 1000;
/// The largest watch answer decoded: etcd batches a catching-up watcher's events (up to 1,000
/// revisions) into one answer, and they cannot be asked for in smaller parts.
pub const MAX_WATCH_ANSWER_BYTES: usize = 256 * 1024 * 1024;

/// What to do after one attempt failed.
enum Failure {
    /// Another member may succeed (this one is down, has no leader, or lost the connection).
    Retry(String),
    /// An answer every member would give: return it.
    Final(ApiError),
}

fn classify(e: etcd_client::Error) -> Failure {
    use etcd_client::Error as E;
    use tonic::Code;
    match e {
        E::GRpcStatus(s) => match s.code() {
            Code::ResourceExhausted if s.message().contains(NOSPACE) => {
                Failure::Final(ApiError::insufficient_storage(format!(
                    "etcd is out of space ({}): writes fail until an operator compacts, \
                     defragments and disarms the NOSPACE alarm; reads and watches go on",
                    s.message()
                )))
            }
            // etcd's own: a revision compacted away, or not yet written.
            Code::OutOfRange if s.message().contains("mvcc: required revision") => {
                Failure::Final(ApiError::expired(format!(
                    "the requested resourceVersion is too old or not yet reached: {}",
                    s.message()
                )))
            }
            // The client's: an answer over the size it decodes ([`MAX_ANSWER_BYTES`]).
            Code::OutOfRange => Failure::Final(ApiError::too_large(
                Default::default(),
                format!(
                    "etcd's answer is too large to read at once: {}",
                    s.message()
                ),
            )),
            Code::InvalidArgument if s.message().contains("too large") => {
                Failure::Final(ApiError::too_large(Default::default(), s.message()))
            }
            // "no leader", "leader changed", "request timed out", "too many requests", a
            // broken connection, a member shutting down: all on this member, not on the
            // cluster.
            Code::Unavailable
            | Code::Unknown
            | Code::Cancelled
            | Code::Aborted
            | Code::DeadlineExceeded
            | Code::ResourceExhausted => Failure::Retry(s.message().to_string()),
            _ => Failure::Final(ApiError::internal(format!("etcd: {}", s.message()))),
        },
        E::TransportError(t) => Failure::Retry(error_chain(&t)),
        E::IoError(io) => Failure::Retry(io.to_string()),
        E::WatchError(w) => Failure::Retry(w),
        other => Failure::Final(ApiError::internal(format!("etcd: {other}"))),
    }
}

/// An error and its sources, for a log line that says what actually broke.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn stored(kv: &etcd_client::KeyValue) -> Stored {
    Stored {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        value: kv.value().to_vec(),
        mod_revision: kv.mod_revision(),
        create_revision: kv.create_revision(),
    }
}

/// The end of the range of keys starting with `prefix`.
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Pause before sending a failed call again: short, and longer with each attempt, so members
/// that all refuse ("too many requests") are not hammered.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(10u64.saturating_mul(1 << attempt.min(4)))
}

/// A compare-and-swap as sent: what it writes, to recognise it in the key's history if an
/// attempt failed without an answer.
enum Write<'a> {
    Create(&'a [u8]),
    Put(&'a [u8]),
    Delete,
}

impl Etcd {
    /// Connects lazily: the API server starts even while etcd is down, and requests wait for
    /// a member (up to their deadline) until one answers.
    pub async fn connect(
        endpoints: &[String],
        tls: Option<&EtcdTls>,
        metrics: Metrics,
    ) -> Result<Etcd, ApiError> {
        let members = Members::connect(endpoints, tls, metrics.clone())
            .await
            .map_err(|e| ApiError::unavailable(format!("etcd: {e}")))?;
        Ok(Etcd { members, metrics })
    }

    /// Runs one etcd call under the request's deadline on a healthy member, moving to another
    /// when it fails there or the member stops answering. Also says whether an earlier attempt
    /// failed after it may have been sent (a write must then be settled, see [`Etcd::settle`]).
    async fn call<T, F, Fut>(
        &self,
        op: &'static str,
        deadline: Instant,
        mut f: F,
    ) -> Result<(T, bool), ApiError>
    where
        F: FnMut(etcd_client::Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let start = Instant::now();
        let mut retried = false;
        let mut cause = String::from("no etcd member answered");
        let mut attempt = 0;
        let out = loop {
            let (i, _) = self.members.pick();
            let member = &self.members.members[i];
            let mut health = self.members.health();
            let failure = tokio::select! {
                biased;
                r = tokio::time::timeout_at(deadline, f(member.client())) => match r {
                    Err(_) => break Err(timeout(&cause)),
                    Ok(Ok(v)) => break Ok((v, retried)),
                    Ok(Err(e)) => classify(e),
                },
                // The member is marked down while it has our call, and another one is up:
                // send the call there.
                () = Members::better_elsewhere(&mut health, i) => {
                    Failure::Retry(format!("{} stopped answering", member.endpoint))
                }
            };
            match failure {
                Failure::Final(e) => break Err(e),
                Failure::Retry(why) => {
                    self.members.mark_down(i, &why);
                    self.metrics.etcd_retry(op);
                    tracing::debug!(op, endpoint = %member.endpoint, %why, "etcd call sent again");
                    cause = format!("{}: {why}", member.endpoint);
                    retried = true;
                    attempt += 1;
                    if tokio::time::timeout_at(deadline, tokio::time::sleep(backoff(attempt)))
                        .await
                        .is_err()
                    {
                        break Err(timeout(&cause));
                    }
                }
            }
        };
        self.metrics.etcd_request(op, start.elapsed());
        out
    }

    /// Reads one key (linearizable).
    pub async fn get(&self, key: &str, deadline: Instant) -> Result<Option<Stored>, ApiError> {
        let (resp, _) = self
            .call("get", deadline, |c| async move {
                c.kv_client().get(key, None).await
            })
            .await?;
        Ok(resp.kvs().first().map(stored))
    }

    /// Reads up to `limit` keys of `[start, end)` at `revision` (0: newest); fewer (with
    /// `more` set) when that many would make an answer over [`MAX_ANSWER_BYTES`]: the read is
    /// tried again with half as many keys, down to one (an object is at most 1.5 MiB).
    pub async fn range(
        &self,
        start: &[u8],
        end: Vec<u8>,
        revision: i64,
        limit: i64,
        deadline: Instant,
    ) -> Result<Page, ApiError> {
        let mut limit = if limit > 0 { limit } else { UNLIMITED_RANGE };
        loop {
            match self
                .range_once(start, &end, revision, limit, deadline)
                .await
            {
                Err(e) if e.reason == Reason::RequestEntityTooLarge && limit > 1 => {
                    limit /= 2;
                }
                answer => return answer,
            }
        }
    }

    async fn range_once(
        &self,
        start: &[u8],
        end: &[u8],
        revision: i64,
        limit: i64,
        deadline: Instant,
    ) -> Result<Page, ApiError> {
        let mut opts = GetOptions::new().with_range(end).with_limit(limit);
        if revision > 0 {
            opts = opts.with_revision(revision);
        }
        let resp = self.read_range(start, opts, deadline).await?;
        Ok(Page {
            kvs: resp.kvs().iter().map(stored).collect(),
            // A read at a past revision still carries the newest revision in its header.
            revision: if revision > 0 {
                revision
            } else {
                resp.header().map(|h| h.revision()).unwrap_or(0)
            },
            more: resp.more(),
            count: resp.count(),
        })
    }

    /// A range read from `start` as `opts` say, its answer up to [`MAX_ANSWER_BYTES`].
    async fn read_range(
        &self,
        start: &[u8],
        opts: GetOptions,
        deadline: Instant,
    ) -> Result<etcd_client::GetResponse, ApiError> {
        let (resp, _) = self
            .call("range", deadline, |c| {
                let opts = opts.clone();
                async move {
                    c.kv_client()
                        .max_decoding_message_size(MAX_ANSWER_BYTES)
                        .get(start, Some(opts))
                        .await
                }
            })
            .await?;
        Ok(resp)
    }

    /// Every key of `[start, end)` with its `mod_revision`, newest, values left out.
    pub async fn revisions(
        &self,
        start: &[u8],
        end: Vec<u8>,
        deadline: Instant,
    ) -> Result<Vec<(String, i64)>, ApiError> {
        let opts = GetOptions::new().with_range(end).with_keys_only();
        let resp = self.read_range(start, opts, deadline).await?;
        Ok(resp
            .kvs()
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    kv.mod_revision(),
                )
            })
            .collect())
    }

    /// The current revision of the store.
    pub async fn current_revision(&self, deadline: Instant) -> Result<i64, ApiError> {
        let (resp, _) = self
            .call("revision", deadline, |c| async move {
                let opts = GetOptions::new().with_count_only();
                c.kv_client().get("/", Some(opts)).await
            })
            .await?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or(0))
    }

    /// Sends a compare-and-swap whose `or_else` reads the key, and says how it ended: when an
    /// attempt failed without an answer and the compare of a later one failed, the first may
    /// have landed, and [`Etcd::settle`] finds out from the key's history.
    async fn cas(
        &self,
        op: &'static str,
        key: &str,
        expected: i64,
        write: Write<'_>,
        txn: Txn,
        deadline: Instant,
    ) -> Result<Cas, ApiError> {
        let (resp, retried) = self
            .call(op, deadline, |c| {
                let txn = txn.clone();
                async move { c.kv_client().txn(txn).await }
            })
            .await?;
        if resp.succeeded() {
            return Ok(Cas::Done(resp.header().map(|h| h.revision()).unwrap_or(0)));
        }
        let current = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(stored),
            _ => None,
        });
        if !retried {
            return Ok(Cas::Stale(current));
        }
        self.settle(key, expected, write, current, deadline).await
    }

    /// A write was sent, its answer lost, and the same compare-and-swap sent again failed its
    /// compare: either the first attempt landed, or another writer got there first. The first
    /// change of the key after `expected` (the create revision, for a create) tells which.
    async fn settle(
        &self,
        key: &str,
        expected: i64,
        write: Write<'_>,
        current: Option<Stored>,
        deadline: Instant,
    ) -> Result<Cas, ApiError> {
        // A create compared "the key does not exist": the change to look at is the one that
        // created what is there now.
        let after = match (&write, &current) {
            (Write::Create(_), Some(c)) => c.create_revision - 1,
            (Write::Create(_), None) => return Ok(Cas::Stale(None)),
            _ => expected,
        };
        let first = match self.first_change_after(key, after, deadline).await? {
            Some(first) => first,
            None => {
                // History compacted: the key as it is now is all there is to go on.
                let ours = match (&write, &current) {
                    (Write::Create(v) | Write::Put(v), Some(c)) => c.value == *v,
                    (Write::Delete, None) => true,
                    _ => false,
                };
                if !ours {
                    return Err(ApiError::timeout(
                        Default::default(),
                        "etcd did not answer a write and its history no longer shows whether \
                         the write landed: read the object and retry if it did not",
                    ));
                }
                let rev = current.as_ref().map(|c| c.mod_revision).unwrap_or(0);
                return Ok(Cas::Done(rev));
            }
        };
        let ours = match write {
            Write::Create(v) | Write::Put(v) => first.0 == EventKind::Put && first.1 == v,
            Write::Delete => first.0 == EventKind::Delete,
        };
        tracing::info!(
            key,
            ours,
            expected,
            first_revision = first.2,
            first_kind = ?first.0,
            current_revision = current.as_ref().map(|c| c.mod_revision),
            "settled a write whose first answer was lost"
        );
        Ok(if ours {
            Cas::Done(first.2)
        } else {
            Cas::Stale(current)
        })
    }

    /// Creates `key` if it does not exist: `Stale(Some(existing))` when it does.
    pub async fn create(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
        deadline: Instant,
    ) -> Result<Cas, ApiError> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value.clone(), put_options(lease))])
            .or_else([TxnOp::get(key, None)]);
        self.cas("create", key, 0, Write::Create(&value), txn, deadline)
            .await
    }

    /// Puts `value` at `key` if the key's `mod_revision` is still `expected`; otherwise returns
    /// the key's current state read in the same transaction, so a lost race costs no extra
    /// round trip.
    pub async fn compare_and_put(
        &self,
        key: &str,
        expected: i64,
        value: Vec<u8>,
        lease: LeaseId,
        deadline: Instant,
    ) -> Result<Cas, ApiError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
            .and_then([TxnOp::put(key, value.clone(), put_options(lease))])
            .or_else([TxnOp::get(key, None)]);
        self.cas("update", key, expected, Write::Put(&value), txn, deadline)
            .await
    }

    /// Deletes `key` if its `mod_revision` is still `expected`.
    pub async fn compare_and_delete(
        &self,
        key: &str,
        expected: i64,
        deadline: Instant,
    ) -> Result<Cas, ApiError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
            .and_then([TxnOp::delete(key, None)])
            .or_else([TxnOp::get(key, None)]);
        self.cas("delete", key, expected, Write::Delete, txn, deadline)
            .await
    }

    /// Compacts history up to `revision` (physically, so the space is reclaimed).
    /// Grants a lease of `ttl` seconds.
    pub async fn grant_lease(&self, ttl: i64, deadline: Instant) -> Result<LeaseId, ApiError> {
        let (resp, _) = self
            .call("grant", deadline, |c| async move {
                c.lease_client().grant(ttl, None).await
            })
            .await?;
        Ok(resp.id())
    }

    pub async fn compact(&self, revision: i64, deadline: Instant) -> Result<(), ApiError> {
        self.call("compact", deadline, |c| async move {
            let opts = etcd_client::CompactionOptions::new().with_physical();
            c.kv_client().compact(revision, Some(opts)).await
        })
        .await?;
        Ok(())
    }
}

fn timeout(cause: &str) -> ApiError {
    ApiError::timeout(
        Default::default(),
        format!("the request did not complete within its deadline (etcd: {cause})"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_key() {
        assert_eq!(prefix_end("/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }

    fn final_reason(s: tonic::Status) -> Option<Reason> {
        match classify(etcd_client::Error::GRpcStatus(s)) {
            Failure::Final(e) => Some(e.reason),
            Failure::Retry(_) => None,
        }
    }

    #[test]
    fn out_of_range_is_expired_only_when_etcd_says_so() {
        for compacted in [
            "etcdserver: mvcc: required revision has been compacted",
            "etcdserver: mvcc: required revision is a future revision",
        ] {
            let s = tonic::Status::out_of_range(compacted);
            assert_eq!(final_reason(s), Some(Reason::Expired));
        }
        // The client's own decode limit: read in smaller parts, never relist.
        let s = tonic::Status::out_of_range("decoded message length too large");
        assert_eq!(final_reason(s), Some(Reason::RequestEntityTooLarge));
    }
}
