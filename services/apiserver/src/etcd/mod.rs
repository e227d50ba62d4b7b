//! etcd, the layer below storage: key-value reads, compare-and-swap transactions, watches and
//! compaction, each under a deadline and counted in the metrics. It knows keys and bytes, not
//! objects; etcd's own errors become `ApiError`s here.

mod watch;

pub use watch::{Event, EventKind, Watch, WatchEnd, WatchResponse};

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, KvClient, Txn, TxnOp, TxnOpResponse};
use keel_api::ApiError;
use tokio::time::Instant;

use crate::metrics::Metrics;

/// One stored key: its value bytes and revisions.
#[derive(Debug, Clone)]
pub struct Stored {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: i64,
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

/// etcd, as the API server uses it. Cheap to clone: the client multiplexes one connection per
/// endpoint.
#[derive(Clone)]
pub struct Etcd {
    client: Client,
    metrics: Metrics,
}

fn map_err(e: etcd_client::Error) -> ApiError {
    use etcd_client::Error as E;
    match e {
        E::GRpcStatus(s) => match s.code() {
            tonic::Code::OutOfRange => ApiError::expired(format!(
                "the requested resourceVersion is too old or not yet reached: {}",
                s.message()
            )),
            tonic::Code::DeadlineExceeded => ApiError::timeout(Default::default(), s.message()),
            tonic::Code::InvalidArgument if s.message().contains("too large") => {
                ApiError::too_large(Default::default(), s.message())
            }
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => {
                ApiError::unavailable(format!("etcd: {}", s.message()))
            }
            _ => ApiError::internal(format!("etcd: {}", s.message())),
        },
        other => ApiError::unavailable(format!("etcd: {other}")),
    }
}

fn stored(kv: &etcd_client::KeyValue) -> Stored {
    Stored {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        value: kv.value().to_vec(),
        mod_revision: kv.mod_revision(),
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

impl Etcd {
    /// Connects lazily: the API server starts even while etcd is down, and requests fail with
    /// `ServiceUnavailable` until it is back.
    pub async fn connect(endpoints: &[String], metrics: Metrics) -> Result<Etcd, ApiError> {
        let opts = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5))
            .with_keep_alive_while_idle(true);
        let client = Client::connect(endpoints, Some(opts))
            .await
            .map_err(map_err)?;
        Ok(Etcd { client, metrics })
    }

    fn kv(&self) -> KvClient {
        self.client.kv_client()
    }

    /// Runs one etcd call under the request's deadline, counting it in the metrics.
    async fn call<T>(
        &self,
        op: &'static str,
        deadline: Instant,
        fut: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, ApiError> {
        let start = Instant::now();
        let out = tokio::time::timeout_at(deadline, fut).await;
        self.metrics.etcd_request(op, start.elapsed());
        match out {
            Err(_) => Err(ApiError::timeout(
                Default::default(),
                "the request did not complete within its deadline (etcd did not answer)",
            )),
            Ok(r) => r.map_err(map_err),
        }
    }

    /// Reads one key (linearizable).
    pub async fn get(&self, key: &str, deadline: Instant) -> Result<Option<Stored>, ApiError> {
        let mut kv = self.kv();
        let resp = self.call("get", deadline, kv.get(key, None)).await?;
        Ok(resp.kvs().first().map(stored))
    }

    /// Reads up to `limit` keys of `[start, end)` at `revision` (0: newest).
    pub async fn range(
        &self,
        start: &[u8],
        end: Vec<u8>,
        revision: i64,
        limit: i64,
        deadline: Instant,
    ) -> Result<Page, ApiError> {
        let mut opts = GetOptions::new().with_range(end).with_limit(limit);
        if revision > 0 {
            opts = opts.with_revision(revision);
        }
        let mut kv = self.kv();
        let resp = self
            .call("range", deadline, kv.get(start.to_vec(), Some(opts)))
            .await?;
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

    /// The current revision of the store.
    pub async fn current_revision(&self, deadline: Instant) -> Result<i64, ApiError> {
        let mut kv = self.kv();
        let opts = GetOptions::new().with_count_only();
        let resp = self.call("get", deadline, kv.get("/", Some(opts))).await?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or(0))
    }

    fn stale_of(resp: &etcd_client::TxnResponse) -> Option<Stored> {
        resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(stored),
            _ => None,
        })
    }

    fn revision_of(resp: &etcd_client::TxnResponse) -> i64 {
        resp.header().map(|h| h.revision()).unwrap_or(0)
    }

    /// Creates `key` if it does not exist: `Stale(Some(existing))` when it does.
    pub async fn create(
        &self,
        key: &str,
        value: Vec<u8>,
        deadline: Instant,
    ) -> Result<Cas, ApiError> {
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value, None)])
            .or_else([TxnOp::get(key, None)]);
        let mut kv = self.kv();
        let resp = self.call("create", deadline, kv.txn(txn)).await?;
        Ok(if resp.succeeded() {
            Cas::Done(Self::revision_of(&resp))
        } else {
            Cas::Stale(Self::stale_of(&resp))
        })
    }

    /// Puts `value` at `key` if the key's `mod_revision` is still `expected`; otherwise returns
    /// the key's current state read in the same transaction, so a lost race costs no extra
    /// round trip.
    pub async fn compare_and_put(
        &self,
        key: &str,
        expected: i64,
        value: Vec<u8>,
        deadline: Instant,
    ) -> Result<Cas, ApiError> {
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
            .and_then([TxnOp::put(key, value, None)])
            .or_else([TxnOp::get(key, None)]);
        let mut kv = self.kv();
        let resp = self.call("update", deadline, kv.txn(txn)).await?;
        Ok(if resp.succeeded() {
            Cas::Done(Self::revision_of(&resp))
        } else {
            Cas::Stale(Self::stale_of(&resp))
        })
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
        let mut kv = self.kv();
        let resp = self.call("delete", deadline, kv.txn(txn)).await?;
        Ok(if resp.succeeded() {
            Cas::Done(Self::revision_of(&resp))
        } else {
            Cas::Stale(Self::stale_of(&resp))
        })
    }

    /// Compacts history up to `revision` (physically, so the space is reclaimed).
    pub async fn compact(&self, revision: i64, deadline: Instant) -> Result<(), ApiError> {
        let mut kv = self.kv();
        let opts = etcd_client::CompactionOptions::new().with_physical();
        self.call("compact", deadline, kv.compact(revision, Some(opts)))
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_key() {
        assert_eq!(prefix_end("/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }
}
