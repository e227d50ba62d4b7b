//! A range shared by every API server replica (Kubernetes' `allocator/storage.Etcd`): its
//! bitmap lives in one storage key, and every change is a read-modify-write by
//! compare-and-swap on the key's revision, applied again to the fresh bitmap when another
//! replica wrote first. That compare-and-swap is what keeps two replicas from handing out one
//! value. Within a replica, changes that arrive while one is being written are committed
//! together in the next write (a group commit), so a burst of creates costs a few writes of
//! the bitmap rather than one each, and never conflicts with itself.

use std::sync::{Arc, Mutex};

use base64::Engine;
use keel_api::ApiError;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::bitmap::Bitmap;
use super::range::{Range, Value};
use crate::storage::{RangeValue, RangeWrite, Store};

/// Why a change of a range did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// A value asked for is held already: the request is `Invalid`.
    #[error("{0} is already allocated")]
    Allocated(Value),
    /// A value asked for is not in the range: the request is `Invalid`.
    #[error("{0} is not in the range")]
    NotInRange(Value),
    /// No value is left.
    #[error("range is full")]
    Full,
    /// The range's key does not exist yet: the repair controller writes it at start-up, from
    /// the Services there are (until then a value could be handed out twice). Try again.
    #[error("the range is not initialized yet")]
    Uninitialized,
    /// The key holds another range (replicas started with different flags, or the flag
    /// changed and the repair controller has not rewritten the key yet).
    #[error("the stored range {stored} is not the configured {configured}")]
    Mismatch { stored: String, configured: String },
    /// The stored value does not parse.
    #[error("the stored range allocation does not parse: {0}")]
    Corrupt(String),
    /// Storage failed; the change may or may not have been written (a leak at worst, which the
    /// repair controller frees).
    #[error("{0}")]
    Storage(ApiError),
}

/// One caller's change, applied all or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Take these values: each the given one, or any free one (`None`).
    Take(Vec<Option<Value>>),
    /// Give these back (a value not held, or outside the range, is ignored).
    Release(Vec<Value>),
}

/// The bitmap at a revision of its key.
#[derive(Debug, Clone)]
struct Snapshot {
    bitmap: Bitmap,
    revision: i64,
}

/// A change waiting for the next write, and where its outcome goes.
struct Pending {
    op: Op,
    reply: oneshot::Sender<Result<Vec<Value>, AllocError>>,
}

/// The stored form, Kubernetes' `RangeAllocation` (`range`, and `data`: the bitmap's bytes,
/// base64 in JSON), so `etcdctl get` shows what it is.
#[derive(Serialize, Deserialize)]
struct RangeAllocation {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: serde_json::Value,
    range: String,
    data: String,
}

/// What a range's key holds, as the repair controller reads it.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The key's revision, 0 when it does not exist: what a rewrite compares.
    pub revision: i64,
    /// Its bitmap; `None` when the key does not exist, does not parse or holds another range.
    pub bitmap: Option<Bitmap>,
}

/// One range, shared through storage (see the module's doc).
pub struct RangeAllocator {
    range: Range,
    /// The key's name under `ranges/` (`serviceips`).
    name: &'static str,
    key: String,
    store: Arc<Store>,
    /// The state this replica last read or wrote: a change starts from it, so a change costs
    /// one round trip while no other replica wrote. Held by the one task committing a batch.
    state: tokio::sync::Mutex<Option<Snapshot>>,
    /// Changes waiting for the next batch (a std mutex: held only to push or take).
    queue: Mutex<Vec<Pending>>,
}

impl RangeAllocator {
    pub fn new(store: Arc<Store>, name: &'static str, range: Range) -> RangeAllocator {
        RangeAllocator {
            key: store.range_key(name),
            range,
            name,
            store,
            state: tokio::sync::Mutex::new(None),
            queue: Mutex::new(Vec::new()),
        }
    }

    pub fn range(&self) -> &Range {
        &self.range
    }

    /// The storage key (`/registry/ranges/serviceips`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Applies `op` to the shared bitmap: the values taken, in the order asked. Joins the batch
    /// being gathered; the first caller to find no batch being written writes the next one.
    pub async fn apply(&self, op: Op, deadline: Instant) -> Result<Vec<Value>, AllocError> {
        let (reply, mut answer) = oneshot::channel();
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Pending { op, reply });
        let mut state = self.state.lock().await;
        // The task before us may have written our change with its batch.
        if let Ok(done) = answer.try_recv() {
            return done;
        }
        let batch = std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()));
        self.commit(&mut state, batch, deadline).await;
        drop(state);
        answer.await.unwrap_or_else(|_| {
            Err(AllocError::Storage(ApiError::unavailable(
                "the allocation was interrupted; it may have been made (the repair controller frees it)",
            )))
        })
    }

    /// What `op` would take now, writing nothing (`dryRun`): read fresh, so that a value asked
    /// for is judged as it is.
    pub async fn dry_run(&self, op: Op, deadline: Instant) -> Result<Vec<Value>, AllocError> {
        let mut snap = self.read(deadline).await?;
        apply(&self.range, &mut snap.bitmap, &op)
    }

    /// Writes `batch`, retrying on conflict from the fresh bitmap, and answers each change.
    async fn commit(&self, state: &mut Option<Snapshot>, batch: Vec<Pending>, deadline: Instant) {
        if batch.is_empty() {
            return;
        }
        // Whether `state` is known to be etcd's now: read, or sent back by a lost swap, in
        // this commit. A batch that writes nothing (each change refused, or already so) is
        // answered only from such a state; one that writes learns it from its swap.
        let mut fresh = false;
        let outcome = loop {
            let snap = match state.take() {
                Some(s) => s,
                None => match self.read(deadline).await {
                    Ok(s) => {
                        fresh = true;
                        s
                    }
                    // Nothing to release from a range that does not exist yet.
                    Err(AllocError::Uninitialized) => {
                        break batch
                            .iter()
                            .map(|p| match p.op {
                                Op::Release(_) => Ok(Vec::new()),
                                Op::Take(_) => Err(AllocError::Uninitialized),
                            })
                            .collect();
                    }
                    Err(e) => break vec![Err(e); batch.len()],
                },
            };
            let mut bitmap = snap.bitmap.clone();
            let results: Vec<_> = batch
                .iter()
                .map(|p| apply(&self.range, &mut bitmap, &p.op))
                .collect();
            if bitmap == snap.bitmap {
                if !fresh {
                    // Decided on this replica's last state, which another may have moved on.
                    continue;
                }
                *state = Some(snap);
                break results;
            }
            if Instant::now() >= deadline {
                let e = ApiError::timeout(
                    Default::default(),
                    format!(
                        "the range {} kept changing until the request's deadline",
                        self.key
                    ),
                );
                break vec![Err(AllocError::Storage(e)); batch.len()];
            }
            let bytes = self.encode(&bitmap);
            match self
                .store
                .put_range(&self.key, snap.revision, bytes, deadline)
                .await
            {
                Ok(RangeWrite::Done(revision)) => {
                    *state = Some(Snapshot { bitmap, revision });
                    break results;
                }
                // Another replica wrote first: again, from what it wrote.
                Ok(RangeWrite::Stale(Some(now))) => match self.decode(&now) {
                    Ok(s) => {
                        *state = Some(s);
                        fresh = true;
                    }
                    Err(e) => break vec![Err(e); batch.len()],
                },
                Ok(RangeWrite::Stale(None)) => {}
                Err(e) => break vec![Err(AllocError::Storage(e)); batch.len()],
            }
        };
        for (p, result) in batch.into_iter().zip(outcome) {
            // A caller that stopped waiting is gone: nothing to tell it.
            let _ = p.reply.send(result);
        }
    }

    /// The key's bitmap now.
    async fn read(&self, deadline: Instant) -> Result<Snapshot, AllocError> {
        match self.store.get_range(&self.key, deadline).await {
            Ok(Some(v)) => self.decode(&v),
            Ok(None) => Err(AllocError::Uninitialized),
            Err(e) => Err(AllocError::Storage(e)),
        }
    }

    /// What the key holds, for the repair controller: a key that does not parse or holds
    /// another range is to be rewritten, not an error.
    pub async fn stored(&self, deadline: Instant) -> Result<Stored, ApiError> {
        Ok(match self.store.get_range(&self.key, deadline).await? {
            None => Stored {
                revision: 0,
                bitmap: None,
            },
            Some(v) => {
                let bitmap = match self.decode(&v) {
                    Ok(s) => Some(s.bitmap),
                    Err(e) => {
                        tracing::warn!(key = %self.key, error = %e, "the stored range allocation is rebuilt from the Services");
                        None
                    }
                };
                Stored {
                    revision: v.revision,
                    bitmap,
                }
            }
        })
    }

    /// Writes `bitmap` if the key is still at `revision` (0: does not exist): the repair
    /// controller's write. False when another writer came first.
    pub async fn overwrite(
        &self,
        revision: i64,
        bitmap: &Bitmap,
        deadline: Instant,
    ) -> Result<bool, ApiError> {
        let written = self
            .store
            .put_range(&self.key, revision, self.encode(bitmap), deadline)
            .await?;
        Ok(matches!(written, RangeWrite::Done(_)))
    }

    fn encode(&self, bitmap: &Bitmap) -> Vec<u8> {
        let stored = RangeAllocation {
            api_version: "v1".into(),
            kind: "RangeAllocation".into(),
            metadata: serde_json::json!({"name": self.name}),
            range: self.range.to_string(),
            data: base64::engine::general_purpose::STANDARD.encode(bitmap.to_bytes()),
        };
        // A struct of strings always serializes.
        serde_json::to_vec(&stored).unwrap_or_default()
    }

    fn decode(&self, v: &RangeValue) -> Result<Snapshot, AllocError> {
        let stored: RangeAllocation =
            serde_json::from_slice(&v.bytes).map_err(|e| AllocError::Corrupt(e.to_string()))?;
        let configured = self.range.to_string();
        if stored.range != configured {
            return Err(AllocError::Mismatch {
                stored: stored.range,
                configured,
            });
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(stored.data.as_bytes())
            .map_err(|e| AllocError::Corrupt(format!("data: {e}")))?;
        Ok(Snapshot {
            bitmap: Bitmap::from_bytes(self.range.max(), &bytes),
            revision: v.revision,
        })
    }
}

/// Applies `op` to `bitmap`, all or nothing: the values taken, in the order asked. Values asked
/// for by number are taken before any is chosen, so a random choice never takes one of them.
pub fn apply(range: &Range, bitmap: &mut Bitmap, op: &Op) -> Result<Vec<Value>, AllocError> {
    let wants = match op {
        Op::Release(values) => {
            for v in values {
                if let Some(i) = range.offset_of(*v) {
                    bitmap.clear(i);
                }
            }
            return Ok(Vec::new());
        }
        Op::Take(wants) => wants,
    };
    let mut taken: Vec<Option<usize>> = vec![None; wants.len()];
    let undo = |bitmap: &mut Bitmap, taken: &[Option<usize>]| {
        for i in taken.iter().flatten() {
            bitmap.clear(*i);
        }
    };
    for (slot, want) in taken.iter_mut().zip(wants) {
        let Some(v) = want else { continue };
        let Some(i) = range.offset_of(*v) else {
            undo(bitmap, &taken);
            return Err(AllocError::NotInRange(*v));
        };
        if !bitmap.set(i) {
            undo(bitmap, &taken);
            return Err(AllocError::Allocated(*v));
        }
        *slot = Some(i);
    }
    for (k, want) in wants.iter().enumerate() {
        if want.is_some() {
            continue;
        }
        let Some(i) = bitmap.next_free(range.static_offset(), random) else {
            undo(bitmap, &taken);
            return Err(AllocError::Full);
        };
        bitmap.set(i);
        taken[k] = Some(i);
    }
    Ok(taken
        .iter()
        .map(|i| range.value_at(i.unwrap_or_default()))
        .collect())
}

/// A number in `[0, n)` (`n > 0`), from the 48 random bits at the start of a v4 UUID (as
/// `generate_name` draws its suffixes; no random number crate besides). The bias of the
/// modulo is below 2^-28 for the largest range.
fn random(n: usize) -> usize {
    let b = uuid::Uuid::new_v4().into_bytes();
    let bits = u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]]);
    (bits % n.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Duration;

    use super::*;
    use crate::registry::allocator::IpRange;
    use crate::storage::testing::{Fixture, far};

    fn allocator(store: &Arc<Store>, cidr: &str) -> RangeAllocator {
        RangeAllocator::new(
            store.clone(),
            "serviceips",
            Range::Ips(IpRange::parse(cidr).unwrap()),
        )
    }

    /// Writes the range empty, as the repair does at start-up.
    async fn initialized(a: RangeAllocator) -> RangeAllocator {
        let empty = Bitmap::new(a.range().max());
        assert!(a.overwrite(0, &empty, far()).await.unwrap());
        a
    }

    fn ip(s: &str) -> Value {
        u32::from(s.parse::<Ipv4Addr>().unwrap())
    }

    fn any(n: usize) -> Op {
        Op::Take(vec![None; n])
    }

    fn take(ips: &[&str]) -> Op {
        Op::Take(ips.iter().map(|s| Some(ip(s))).collect())
    }

    /// The values the stored bitmap marks.
    async fn marked(a: &RangeAllocator) -> Vec<String> {
        let stored = a.stored(far()).await.unwrap().bitmap.unwrap();
        stored
            .iter()
            .map(|i| a.range().show(a.range().value_at(i)))
            .collect()
    }

    #[tokio::test]
    async fn any_value_comes_from_the_upper_part_and_an_asked_one_is_given_once() {
        let f = Fixture::new();
        // 30 addresses, the first 16 kept for static ones.
        let a = initialized(allocator(&f.store, "10.0.0.0/27")).await;
        let got = a.apply(any(1), far()).await.unwrap();
        assert!(
            got[0] >= ip("10.0.0.17") && got[0] <= ip("10.0.0.30"),
            "{got:?}"
        );
        assert_eq!(
            a.apply(take(&["10.0.0.5"]), far()).await.unwrap(),
            [ip("10.0.0.5")]
        );
        assert_eq!(
            a.apply(take(&["10.0.0.5"]), far()).await,
            Err(AllocError::Allocated(ip("10.0.0.5")))
        );
        for outside in ["10.0.0.0", "10.0.0.31", "10.0.1.5"] {
            assert_eq!(
                a.apply(take(&[outside]), far()).await,
                Err(AllocError::NotInRange(ip(outside))),
                "{outside}"
            );
        }
        let mut want = vec!["10.0.0.5".to_string(), a.range().show(got[0])];
        want.sort_by_key(|s| ip(s));
        assert_eq!(marked(&a).await, want, "written to storage");
    }

    #[tokio::test]
    async fn a_full_range_refuses_and_a_release_frees_a_value() {
        let f = Fixture::new();
        // 6 addresses, no static part.
        let a = initialized(allocator(&f.store, "10.0.0.0/29")).await;
        let mut got = a.apply(any(6), far()).await.unwrap();
        got.sort_unstable();
        assert_eq!(
            got,
            (1..=6)
                .map(|i| ip(&format!("10.0.0.{i}")))
                .collect::<Vec<_>>()
        );
        assert_eq!(a.apply(any(1), far()).await, Err(AllocError::Full));
        a.apply(Op::Release(vec![ip("10.0.0.4")]), far())
            .await
            .unwrap();
        assert_eq!(a.apply(any(1), far()).await.unwrap(), [ip("10.0.0.4")]);
    }

    #[tokio::test]
    async fn a_refused_change_takes_nothing_and_writes_nothing() {
        let f = Fixture::new();
        let a = initialized(allocator(&f.store, "10.0.0.0/29")).await;
        a.apply(take(&["10.0.0.2"]), far()).await.unwrap();
        let before = f.mem.revision();
        let all_or_nothing = Op::Take(vec![Some(ip("10.0.0.1")), None, Some(ip("10.0.0.2"))]);
        assert_eq!(
            a.apply(all_or_nothing, far()).await,
            Err(AllocError::Allocated(ip("10.0.0.2")))
        );
        assert_eq!(f.mem.revision(), before);
        assert_eq!(marked(&a).await, ["10.0.0.2"]);
    }

    #[tokio::test]
    async fn a_dry_run_says_what_would_be_taken_and_writes_nothing() {
        let f = Fixture::new();
        let a = initialized(allocator(&f.store, "10.0.0.0/29")).await;
        a.apply(take(&["10.0.0.2"]), far()).await.unwrap();
        let before = f.mem.revision();
        assert_eq!(
            a.dry_run(take(&["10.0.0.3"]), far()).await.unwrap(),
            [ip("10.0.0.3")]
        );
        assert_eq!(
            a.dry_run(take(&["10.0.0.2"]), far()).await,
            Err(AllocError::Allocated(ip("10.0.0.2")))
        );
        assert_eq!(f.mem.revision(), before);
    }

    #[tokio::test]
    async fn a_range_not_written_yet_or_written_for_another_range_allocates_nothing() {
        let f = Fixture::new();
        let a = allocator(&f.store, "10.0.0.0/29");
        assert_eq!(a.apply(any(1), far()).await, Err(AllocError::Uninitialized));
        // Nothing to give back either: not an error.
        assert_eq!(
            a.apply(Op::Release(vec![ip("10.0.0.1")]), far()).await,
            Ok(vec![])
        );
        let other = initialized(allocator(&f.store, "10.0.0.0/28")).await;
        drop(other);
        assert_eq!(
            a.apply(any(1), far()).await,
            Err(AllocError::Mismatch {
                stored: "10.0.0.0/28".into(),
                configured: "10.0.0.0/29".into()
            })
        );
    }

    #[tokio::test]
    async fn a_replica_with_a_stale_bitmap_loses_the_swap_and_sees_the_other_replicas_value() {
        let f = Fixture::new();
        let a = initialized(allocator(&f.store, "10.0.0.0/29")).await;
        let b = allocator(&f.store, "10.0.0.0/29");
        // a caches the bitmap it wrote; b writes after it.
        a.apply(take(&["10.0.0.1"]), far()).await.unwrap();
        b.apply(take(&["10.0.0.2"]), far()).await.unwrap();
        // a's cached bitmap lacks .2: its write of .2 loses the compare-and-swap, and applied
        // again to what b wrote, it is refused.
        assert_eq!(
            a.apply(take(&["10.0.0.2"]), far()).await,
            Err(AllocError::Allocated(ip("10.0.0.2")))
        );
        a.apply(take(&["10.0.0.3"]), far()).await.unwrap();
        assert_eq!(marked(&a).await, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    }

    #[tokio::test]
    async fn a_refusal_judged_on_a_stale_bitmap_is_judged_again_on_etcds() {
        let f = Fixture::new();
        let a = initialized(allocator(&f.store, "10.0.0.0/29")).await;
        let b = allocator(&f.store, "10.0.0.0/29");
        a.apply(take(&["10.0.0.1"]), far()).await.unwrap();
        // b frees it; a's cached bitmap still has it taken.
        b.apply(Op::Release(vec![ip("10.0.0.1")]), far())
            .await
            .unwrap();
        assert_eq!(
            a.apply(take(&["10.0.0.1"]), far()).await.unwrap(),
            [ip("10.0.0.1")]
        );
        // And a release a's cache thinks is done already is made in etcd.
        b.apply(take(&["10.0.0.2"]), far()).await.unwrap();
        a.apply(Op::Release(vec![ip("10.0.0.2")]), far())
            .await
            .unwrap();
        assert_eq!(marked(&a).await, ["10.0.0.1"]);
    }

    #[tokio::test(start_paused = true)]
    async fn two_replicas_allocating_at_once_never_hand_out_one_value() {
        let f = Fixture::with_latency(Duration::from_millis(1));
        // 62 addresses: exactly what 2 × 31 callers ask for.
        let a = Arc::new(initialized(allocator(&f.store, "10.0.0.0/26")).await);
        let b = Arc::new(allocator(&f.store, "10.0.0.0/26"));
        let start = f.mem.revision();
        let mut tasks = Vec::new();
        for replica in [a.clone(), b.clone()] {
            for _ in 0..31 {
                let r = replica.clone();
                tasks.push(tokio::spawn(async move { r.apply(any(1), far()).await }));
            }
        }
        let mut got = Vec::new();
        for t in tasks {
            got.extend(t.await.unwrap().unwrap());
        }
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), 62, "no value given twice");
        assert_eq!(marked(&a).await.len(), 62, "none lost by a write");
        assert_eq!(b.apply(any(1), far()).await, Err(AllocError::Full));
        // Batched: far fewer writes than allocations.
        let writes = f.mem.revision() - start;
        assert!(writes < 40, "{writes} writes");
    }
}
