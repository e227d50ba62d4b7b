//! One suite, two stores: each case is written once against [`KeyValue`] and runs on
//! [`MemEtcd`] and on a real etcd that the case starts for itself (`etcd` on `PATH`, or
//! `ETCD_BIN`), so the in-memory store's semantics are checked, not assumed. A real etcd that
//! cannot start fails its cases: the suite never skips.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use keel_api::Reason;
use tokio::time::Instant;

use super::mem::MemEtcd;
use super::{Cas, Etcd, EventKind, KeyValue, NO_LEASE, Page, Stored, Watch, WatchEnd};
use crate::metrics::Metrics;

/// A single-member etcd on free loopback ports with its own data directory; killed (and the
/// directory removed) when dropped.
struct RealEtcd {
    child: Child,
    _dir: tempfile::TempDir,
    etcd: Etcd,
}

impl Drop for RealEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free now; etcd may still lose it to another test before it binds, hence the retries
/// in [`RealEtcd::start`].
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Whether the etcd at `endpoint` is the member named `name`.
async fn is_named(endpoint: &str, name: &str) -> bool {
    let Ok(mut client) = etcd_client::Client::connect([endpoint], None).await else {
        return false;
    };
    client
        .member_list()
        .await
        .is_ok_and(|list| list.members().iter().any(|m| m.name() == name))
}

impl RealEtcd {
    async fn start() -> RealEtcd {
        let bin = std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into());
        let mut why = String::new();
        for _attempt in 0..5 {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let (client, peer) = (free_port(), free_port());
            let endpoint = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log_path = dir.path().join("etcd.log");
            let log = std::fs::File::create(&log_path).expect("etcd's log file");
            // Named by its ports, so that the etcd that answers is known to be this one and
            // not another test's that took the port meanwhile.
            let name = format!("conformance-{client}-{peer}");
            let child = Command::new(&bin)
                .args(["--name", &name, "--data-dir"])
                .arg(dir.path().join("data"))
                .args(["--listen-client-urls", &endpoint])
                .args(["--advertise-client-urls", &endpoint])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("{name}={peer_url}")])
                .args(["--log-level", "error"])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot start {bin}: {e}. The conformance suite needs a real etcd \
                         (Debian's etcd-server, or ETCD_BIN)"
                    )
                });
            let etcd = Etcd::connect(std::slice::from_ref(&endpoint), None, Metrics::new())
                .await
                .expect("an etcd client");
            let mut real = RealEtcd {
                child,
                _dir: dir,
                etcd,
            };
            let until = Instant::now() + Duration::from_secs(20);
            while Instant::now() < until {
                if let Ok(Some(status)) = real.child.try_wait() {
                    // Most likely a port taken meanwhile: try others.
                    why = format!(
                        "{bin} exited ({status}): {}",
                        std::fs::read_to_string(&log_path).unwrap_or_default()
                    );
                    break;
                }
                let probe = Instant::now() + Duration::from_millis(500);
                if real.etcd.current_revision(probe).await.is_ok()
                    && is_named(&endpoint, &name).await
                {
                    return real;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if why.is_empty() {
                why = format!("{bin} did not answer on {endpoint} within 20 s");
            }
        }
        panic!("no real etcd for the conformance suite: {why}");
    }
}

/// Runs each case on both stores: `mem::<case>` and `etcd::<case>`.
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod mem {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(&super::MemEtcd::new()).await;
                }
            )*
        }
        mod etcd {
            $(
                #[tokio::test]
                async fn $case() {
                    let real = super::RealEtcd::start().await;
                    super::$case(&real.etcd).await;
                }
            )*
        }
    };
}

conformance!(
    a_fresh_store_is_at_revision_one,
    a_second_create_of_a_key_fails_with_the_existing_value,
    a_put_against_a_stale_revision_fails_with_the_current_value,
    a_put_against_a_missing_key_fails_with_nothing,
    each_write_advances_the_revision_by_one,
    deleting_a_missing_key_writes_nothing,
    a_delete_against_a_stale_revision_fails_with_the_current_value,
    a_range_pages_by_limit_at_one_revision,
    a_range_at_the_newest_revision_says_which,
    revisions_name_each_live_key_of_a_range_with_its_last_change,
    a_read_at_a_compacted_revision_is_expired,
    a_read_at_a_future_revision_is_expired,
    compacting_twice_at_one_revision_fails,
    a_watch_delivers_every_change_from_its_revision_in_order_with_prev_values,
    a_watch_without_prev_values_carries_none,
    a_watch_from_a_compacted_revision_opens_then_ends_with_the_compaction,
    a_key_written_with_a_lease_is_deleted_when_it_expires,
);

async fn a_key_written_with_a_lease_is_deleted_when_it_expires(kv: &dyn KeyValue) {
    let lease = kv.grant_lease(2, deadline()).await.unwrap();
    let from = revision(kv).await + 1;
    let r = match kv.create("/t/a", b"a".to_vec(), lease, deadline()).await {
        Ok(Cas::Done(r)) => r,
        other => panic!("{other:?}"),
    };
    create(kv, "/t/b", "kept").await;
    // Written again without the lease: the key no longer expires with it.
    let rc = match kv.create("/t/c", b"c".to_vec(), lease, deadline()).await {
        Ok(Cas::Done(r)) => r,
        other => panic!("{other:?}"),
    };
    put(kv, "/t/c", rc, "c2").await;
    let mut watch = kv.watch("/t/", from, true).await.unwrap();
    let until = Instant::now() + Duration::from_secs(15);
    while kv.get("/t/a", deadline()).await.unwrap().is_some() {
        assert!(Instant::now() < until, "the leased key outlived its lease");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events = next_events(&mut watch, 5).await;
    let deleted: Vec<&str> = events
        .iter()
        .filter(|e| e.0 == EventKind::Delete)
        .map(|e| e.1.as_str())
        .collect();
    assert_eq!(deleted, ["/t/a"]);
    assert_eq!(
        events.last().map(|e| e.5.clone()),
        Some(Some((b"a".to_vec(), r)))
    );
    assert!(kv.get("/t/b", deadline()).await.unwrap().is_some());
    assert!(kv.get("/t/c", deadline()).await.unwrap().is_some());
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

async fn create(kv: &dyn KeyValue, key: &str, value: &str) -> i64 {
    match kv.create(key, value.into(), NO_LEASE, deadline()).await {
        Ok(Cas::Done(rev)) => rev,
        other => panic!("create {key}: {other:?}"),
    }
}

async fn put(kv: &dyn KeyValue, key: &str, expected: i64, value: &str) -> i64 {
    match kv
        .compare_and_put(key, expected, value.into(), NO_LEASE, deadline())
        .await
    {
        Ok(Cas::Done(rev)) => rev,
        other => panic!("put {key} at {expected}: {other:?}"),
    }
}

async fn delete(kv: &dyn KeyValue, key: &str, expected: i64) -> i64 {
    match kv.compare_and_delete(key, expected, deadline()).await {
        Ok(Cas::Done(rev)) => rev,
        other => panic!("delete {key} at {expected}: {other:?}"),
    }
}

async fn revision(kv: &dyn KeyValue) -> i64 {
    kv.current_revision(deadline()).await.unwrap()
}

async fn range(kv: &dyn KeyValue, start: &str, end: &str, rev: i64, limit: i64) -> Page {
    kv.range(
        start.as_bytes(),
        end.as_bytes().to_vec(),
        rev,
        limit,
        deadline(),
    )
    .await
    .unwrap()
}

/// A stored key as `(key, value, create_revision, mod_revision)`, to compare whole.
fn kv_of(s: &Stored) -> (&str, &[u8], i64, i64) {
    (&s.key, &s.value, s.create_revision, s.mod_revision)
}

fn stale(cas: Cas) -> Option<Stored> {
    match cas {
        Cas::Stale(current) => current,
        Cas::Done(rev) => panic!("the compare should have failed; it wrote at {rev}"),
    }
}

async fn a_fresh_store_is_at_revision_one(kv: &dyn KeyValue) {
    assert_eq!(revision(kv).await, 1);
}

async fn a_second_create_of_a_key_fails_with_the_existing_value(kv: &dyn KeyValue) {
    let r = create(kv, "/k", "first").await;
    let again = kv
        .create("/k", b"second".to_vec(), NO_LEASE, deadline())
        .await;
    let existing = stale(again.unwrap()).expect("the existing key");
    assert_eq!(kv_of(&existing), ("/k", &b"first"[..], r, r));
    assert_eq!(revision(kv).await, r, "the failed create wrote nothing");
}

async fn a_put_against_a_stale_revision_fails_with_the_current_value(kv: &dyn KeyValue) {
    let r1 = create(kv, "/k", "v1").await;
    let r2 = put(kv, "/k", r1, "v2").await;
    let lost = kv
        .compare_and_put("/k", r1, b"v3".to_vec(), NO_LEASE, deadline())
        .await;
    let current = stale(lost.unwrap()).expect("the current key");
    assert_eq!(kv_of(&current), ("/k", &b"v2"[..], r1, r2));
    let now = kv.get("/k", deadline()).await.unwrap().unwrap();
    assert_eq!(kv_of(&now), ("/k", &b"v2"[..], r1, r2));
}

async fn a_put_against_a_missing_key_fails_with_nothing(kv: &dyn KeyValue) {
    let r = create(kv, "/other", "x").await;
    let lost = kv
        .compare_and_put("/k", r, b"v".to_vec(), NO_LEASE, deadline())
        .await;
    assert!(stale(lost.unwrap()).is_none());
    assert!(kv.get("/k", deadline()).await.unwrap().is_none());
}

async fn each_write_advances_the_revision_by_one(kv: &dyn KeyValue) {
    let r0 = revision(kv).await;
    assert_eq!(create(kv, "/a", "1").await, r0 + 1);
    assert_eq!(put(kv, "/a", r0 + 1, "2").await, r0 + 2);
    assert_eq!(create(kv, "/b", "1").await, r0 + 3);
    assert_eq!(delete(kv, "/a", r0 + 2).await, r0 + 4);
    // A key created again starts a new life: its create revision is the new write's.
    let r5 = create(kv, "/a", "3").await;
    assert_eq!(r5, r0 + 5);
    let a = kv.get("/a", deadline()).await.unwrap().unwrap();
    assert_eq!(kv_of(&a), ("/a", &b"3"[..], r5, r5));
    assert_eq!(revision(kv).await, r0 + 5);
}

async fn deleting_a_missing_key_writes_nothing(kv: &dyn KeyValue) {
    let r = create(kv, "/other", "x").await;
    // A missing key's mod_revision compares as 0: the compare holds, and nothing is deleted.
    assert_eq!(delete(kv, "/k", 0).await, r);
    assert_eq!(revision(kv).await, r);
}

async fn a_delete_against_a_stale_revision_fails_with_the_current_value(kv: &dyn KeyValue) {
    let r1 = create(kv, "/k", "v1").await;
    let r2 = put(kv, "/k", r1, "v2").await;
    let lost = kv.compare_and_delete("/k", r1, deadline()).await;
    let current = stale(lost.unwrap()).expect("the current key");
    assert_eq!(kv_of(&current), ("/k", &b"v2"[..], r1, r2));
    assert_eq!(delete(kv, "/k", r2).await, r2 + 1);
    assert!(kv.get("/k", deadline()).await.unwrap().is_none());
    // Gone: a delete from the last revision now fails with nothing to show.
    let lost = kv.compare_and_delete("/k", r2, deadline()).await;
    assert!(stale(lost.unwrap()).is_none());
}

async fn a_range_pages_by_limit_at_one_revision(kv: &dyn KeyValue) {
    create(kv, "/o/", "outside, before").await;
    let ra = create(kv, "/p/a", "a").await;
    for k in ["b", "c", "d"] {
        create(kv, &format!("/p/{k}"), k).await;
    }
    let at = create(kv, "/p/e", "e").await;
    create(kv, "/q", "outside, after").await;
    // Changes after `at` are not seen by pages read at `at`.
    put(kv, "/p/a", ra, "a2").await;
    create(kv, "/p/aa", "new").await;
    let c = kv.get("/p/c", deadline()).await.unwrap().unwrap();
    delete(kv, "/p/c", c.mod_revision).await;

    let page = range(kv, "/p/", "/p0", at, 2).await;
    let keys: Vec<_> = page.kvs.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["/p/a", "/p/b"]);
    assert_eq!(page.kvs[0].value, b"a");
    assert_eq!((page.revision, page.more, page.count), (at, true, 5));

    // Storage's next page starts just after the last key.
    let page = range(kv, "/p/b\0", "/p0", at, 2).await;
    let keys: Vec<_> = page.kvs.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["/p/c", "/p/d"]);
    assert_eq!((page.revision, page.more, page.count), (at, true, 3));

    let page = range(kv, "/p/d\0", "/p0", at, 2).await;
    let keys: Vec<_> = page.kvs.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["/p/e"]);
    assert_eq!((page.revision, page.more, page.count), (at, false, 1));
}

async fn a_range_at_the_newest_revision_says_which(kv: &dyn KeyValue) {
    create(kv, "/p/a", "a").await;
    let r = create(kv, "/p/b", "b").await;
    create(kv, "/q", "outside").await;
    let page = range(kv, "/p/", "/p0", 0, 0).await;
    assert_eq!(page.kvs.len(), 2);
    assert_eq!((page.revision, page.more, page.count), (r + 1, false, 2));
}

async fn revisions_name_each_live_key_of_a_range_with_its_last_change(kv: &dyn KeyValue) {
    create(kv, "/o", "outside").await;
    let ra = create(kv, "/p/a", "a").await;
    let rb = create(kv, "/p/b", "b").await;
    let rc = create(kv, "/p/c", "c").await;
    let ra2 = put(kv, "/p/a", ra, "a2").await;
    delete(kv, "/p/c", rc).await;
    create(kv, "/q", "outside").await;
    let got = kv
        .revisions(b"/p/", b"/p0".to_vec(), deadline())
        .await
        .unwrap();
    assert_eq!(got, [("/p/a".to_string(), ra2), ("/p/b".to_string(), rb)]);
}

async fn a_read_at_a_compacted_revision_is_expired(kv: &dyn KeyValue) {
    let r1 = create(kv, "/p/a", "a").await;
    let r2 = put(kv, "/p/a", r1, "a2").await;
    put(kv, "/p/a", r2, "a3").await;
    kv.compact(r2, deadline()).await.unwrap();
    let err = kv
        .range(b"/p/", b"/p0".to_vec(), r1, 0, deadline())
        .await
        .err()
        .expect("a read before the compaction fails");
    assert_eq!(err.reason, Reason::Expired, "{}", err.message);
    // The compaction's own revision can still be read.
    let page = range(kv, "/p/", "/p0", r2, 0).await;
    assert_eq!(page.kvs[0].value, b"a2");
}

async fn a_read_at_a_future_revision_is_expired(kv: &dyn KeyValue) {
    let r = create(kv, "/p/a", "a").await;
    let err = kv
        .range(b"/p/", b"/p0".to_vec(), r + 10, 0, deadline())
        .await
        .err()
        .expect("a read after the newest revision fails");
    assert_eq!(err.reason, Reason::Expired, "{}", err.message);
}

async fn compacting_twice_at_one_revision_fails(kv: &dyn KeyValue) {
    let r1 = create(kv, "/a", "1").await;
    put(kv, "/a", r1, "2").await;
    kv.compact(r1, deadline()).await.unwrap();
    // Several replicas compact; the compactor ignores this error.
    let err = kv.compact(r1, deadline()).await.unwrap_err();
    assert_eq!(err.reason, Reason::Expired, "{}", err.message);
}

/// One event as `(kind, key, value, create_revision, mod_revision, prev)`, owned.
type Seen = (EventKind, String, Vec<u8>, i64, i64, Option<(Vec<u8>, i64)>);

/// The next `n` events of `watch`, skipping progress notifications and the message that
/// confirms the watch's creation.
async fn next_events(watch: &mut Watch, n: usize) -> Vec<Seen> {
    let mut out = Vec::new();
    let until = deadline();
    while out.len() < n {
        let msg = tokio::time::timeout_at(until, watch.next())
            .await
            .unwrap_or_else(|_| panic!("only {} of {n} events came: {out:?}", out.len()))
            .unwrap_or_else(|end| panic!("the watch ended after {out:?}: {end:?}"));
        out.extend(msg.events().map(|e| {
            (
                e.kind,
                String::from_utf8_lossy(e.key).into_owned(),
                e.value.to_vec(),
                e.create_revision,
                e.mod_revision,
                e.prev.map(|(v, r)| (v.to_vec(), r)),
            )
        }));
    }
    out
}

fn seen(
    kind: EventKind,
    key: &str,
    value: &str,
    created: i64,
    modified: i64,
    prev: Option<(&str, i64)>,
) -> Seen {
    (
        kind,
        key.into(),
        value.into(),
        created,
        modified,
        prev.map(|(v, r)| (v.into(), r)),
    )
}

async fn a_watch_delivers_every_change_from_its_revision_in_order_with_prev_values(
    kv: &dyn KeyValue,
) {
    use EventKind::{Delete, Put};
    let r1 = create(kv, "/p/a", "a1").await;
    let r2 = put(kv, "/p/a", r1, "a2").await;
    let r3 = create(kv, "/p/b", "b1").await;
    create(kv, "/q", "outside").await;
    let r5 = delete(kv, "/p/a", r2).await;
    let mut watch = kv.watch("/p/", r2, true).await.unwrap();
    // Written while the watch is open: it follows the history, in order.
    let r6 = put(kv, "/p/b", r3, "b2").await;
    let events = next_events(&mut watch, 4).await;
    assert_eq!(
        events,
        [
            seen(Put, "/p/a", "a2", r1, r2, Some(("a1", r1))),
            seen(Put, "/p/b", "b1", r3, r3, None),
            seen(Delete, "/p/a", "", 0, r5, Some(("a2", r2))),
            seen(Put, "/p/b", "b2", r3, r6, Some(("b1", r3))),
        ]
    );
}

async fn a_watch_without_prev_values_carries_none(kv: &dyn KeyValue) {
    use EventKind::Put;
    let r1 = create(kv, "/p/a", "a1").await;
    let mut watch = kv.watch("/p/", r1 + 1, false).await.unwrap();
    let r2 = put(kv, "/p/a", r1, "a2").await;
    let events = next_events(&mut watch, 1).await;
    assert_eq!(events, [seen(Put, "/p/a", "a2", r1, r2, None)]);
}

async fn a_watch_from_a_compacted_revision_opens_then_ends_with_the_compaction(kv: &dyn KeyValue) {
    let r1 = create(kv, "/p/a", "a1").await;
    let r2 = put(kv, "/p/a", r1, "a2").await;
    put(kv, "/p/a", r2, "a3").await;
    kv.compact(r2, deadline()).await.unwrap();
    let mut watch = kv.watch("/p/", r1, true).await.expect("the watch opens");
    let until = deadline();
    let end = loop {
        match tokio::time::timeout_at(until, watch.next()).await {
            Err(_) => panic!("the watch did not end"),
            Ok(Ok(msg)) => assert_eq!(msg.events().count(), 0, "no events before the end"),
            Ok(Err(end)) => break end,
        }
    };
    match end {
        WatchEnd::Canceled {
            compact_revision, ..
        } => assert_eq!(compact_revision, r2),
        other => panic!("expected a cancel for the compaction, got {other:?}"),
    }
}
