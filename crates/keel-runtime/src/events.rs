//! Events: what controllers tell people about the objects they act on, recorded as client-go's
//! `tools/record` records them (core/v1 Events, what `kubectl describe` and `kubectl events`
//! read).
//!
//! - A [`Recorder`] never blocks its caller: events go through a bounded queue (client-go's
//!   1,000) to one writer task, and are dropped (and counted) when it is full.
//! - The [`Correlator`] is client-go's `EventCorrelator`, with its constants: an identical
//!   event raises the `count` of the one already written (a patch, not a new object); more than
//!   ten messages of one reason about one object within ten minutes are combined into one event
//!   ("(combined from similar events): ..."); and each object may have 25 events at once, then
//!   one every five minutes (a token bucket per source, object and type).
//! - Every cache is bounded (4,096 keys, client-go's LRU size): the oldest key goes first.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use keel_api::Metadata;
use keel_client::{Client, GroupVersionResource, PatchType, Reason};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Events waiting to be written; more are dropped (client-go's `maxQueuedEvents`).
const QUEUE: usize = 1000;
/// Keys each cache remembers (client-go's `maxLruCacheEntries`).
const CACHE_KEYS: usize = 4096;
/// Distinct messages of one reason about one object before they are combined.
const AGGREGATE_MAX_EVENTS: usize = 10;
/// How long similar messages are gathered for combining.
const AGGREGATE_WINDOW: Duration = Duration::from_secs(600);
/// Per source, object and type: a burst of 25 events, then one per five minutes.
const SPAM_BURST: f64 = 25.0;
const SPAM_QPS: f64 = 1.0 / 300.0;

/// `Normal` or `Warning`, an Event's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Records Events about objects for one component (`source.component`, e.g.
/// `job-controller`). Cheap to clone; every clone and [`Recorder::for_component`] share one
/// queue and writer.
#[derive(Clone)]
pub struct Recorder {
    component: Arc<str>,
    host: Arc<str>,
    tx: mpsc::Sender<Value>,
    dropped: Counter,
}

impl Recorder {
    /// A recorder writing through `client`, as `component` on `host` (the replica's
    /// identity). Spawns its writer task, which ends when every clone is dropped.
    pub fn start(client: Client, component: &str, host: &str, registry: &mut Registry) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let dropped = Counter::default();
        let written = Counter::default();
        registry.register(
            "keel_events_dropped",
            "Events not recorded because the recorder's queue was full",
            dropped.clone(),
        );
        registry.register(
            "keel_events_written",
            "Events created or counted up on the API server",
            written.clone(),
        );
        tokio::spawn(write_events(client, rx, written));
        Recorder {
            component: component.into(),
            host: host.into(),
            tx,
            dropped,
        }
    }

    /// This recorder under another component name.
    pub fn for_component(&self, component: &str) -> Recorder {
        Recorder {
            component: component.into(),
            ..self.clone()
        }
    }

    pub fn normal(&self, obj: &Value, reason: &str, message: impl Into<String>) {
        self.record(obj, EventType::Normal, reason, message.into());
    }

    pub fn warning(&self, obj: &Value, reason: &str, message: impl Into<String>) {
        self.record(obj, EventType::Warning, reason, message.into());
    }

    /// Queues an event about `obj` (which names its `apiVersion` and `kind`); never waits.
    pub fn record(&self, obj: &Value, kind: EventType, reason: &str, message: String) {
        let event = new_event(
            obj,
            kind,
            reason,
            &message,
            &self.component,
            &self.host,
            SystemTime::now(),
        );
        if self.tx.try_send(event).is_err() {
            self.dropped.inc();
        }
    }
}

/// A core/v1 Event about `obj`, as client-go's `recorder.makeEvent` builds it: named
/// `<object>.<unix nanoseconds in hex>`, in the object's namespace (`default` for a
/// cluster-scoped object).
pub fn new_event(
    obj: &Value,
    kind: EventType,
    reason: &str,
    message: &str,
    component: &str,
    host: &str,
    now: SystemTime,
) -> Value {
    let nanos = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let namespace = match obj.namespace() {
        "" => "default",
        ns => ns,
    };
    let mut involved = json!({
        "kind": obj["kind"],
        "name": obj.name(),
        "uid": obj.uid(),
        "apiVersion": obj["apiVersion"],
        "resourceVersion": obj.resource_version(),
    });
    if !obj.namespace().is_empty() {
        involved["namespace"] = json!(obj.namespace());
    }
    let time = humantime::format_rfc3339_seconds(now).to_string();
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": format!("{}.{nanos:x}", obj.name()), "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "source": {"component": component, "host": host},
        "firstTimestamp": time,
        "lastTimestamp": time,
        "count": 1,
        "type": kind.as_str(),
        "eventTime": null,
        "reportingComponent": component,
        "reportingInstance": host,
    })
}

/// What to do with an event after correlation.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Too many events about this object lately: drop it.
    Skip,
    /// Write a new Event.
    Create(Value),
    /// Count up the Event of this name: the event as it now reads (`count`, `lastTimestamp`,
    /// `message`), to patch, or to create again if it has gone.
    Update(Value),
}

/// client-go's `EventCorrelator`: aggregation of similar events, counting of identical ones,
/// and a spam filter per object. Pure: time is passed in.
#[derive(Default)]
pub struct Correlator {
    similar: BoundedMap<String, Similar>,
    seen: BoundedMap<String, Seen>,
    spam: BoundedMap<String, Bucket>,
}

struct Similar {
    messages: HashSet<String>,
    last: Instant,
}

struct Seen {
    name: String,
    count: i64,
    first_timestamp: Value,
}

struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Correlator {
    pub fn correlate(&mut self, mut event: Value, now: Instant) -> Decision {
        if !self.allow(&event, now) {
            return Decision::Skip;
        }
        let key = self.aggregate(&mut event, now);
        match self.seen.get_mut(&key) {
            Some(seen) => {
                seen.count += 1;
                event["metadata"]["name"] = json!(seen.name);
                event["count"] = json!(seen.count);
                event["firstTimestamp"] = seen.first_timestamp.clone();
                Decision::Update(event)
            }
            None => {
                self.seen.insert(
                    key,
                    Seen {
                        name: event.name().to_string(),
                        count: 1,
                        first_timestamp: event["firstTimestamp"].clone(),
                    },
                );
                Decision::Create(event)
            }
        }
    }

    /// The spam filter: a token bucket per source, object and type.
    fn allow(&mut self, event: &Value, now: Instant) -> bool {
        let key = join(event, &SPAM_FIELDS);
        let bucket = self.spam.get_or_insert_with(key, || Bucket {
            tokens: SPAM_BURST,
            last: now,
        });
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * SPAM_QPS).min(SPAM_BURST);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Combines the eleventh and later distinct messages of one reason about one object
    /// within the window into one event; returns the key identical events share.
    fn aggregate(&mut self, event: &mut Value, now: Instant) -> String {
        // Similar events: those of one source, object and type (the spam key) and one reason.
        let aggregate_key = format!(
            "{}\u{0}{}",
            join(event, &SPAM_FIELDS),
            event["reason"].as_str().unwrap_or("")
        );
        let message = event["message"].as_str().unwrap_or("").to_string();
        let similar = self
            .similar
            .get_or_insert_with(aggregate_key.clone(), || Similar {
                messages: HashSet::new(),
                last: now,
            });
        if now.saturating_duration_since(similar.last) > AGGREGATE_WINDOW {
            similar.messages.clear();
        }
        similar.last = now;
        similar.messages.insert(message.clone());
        if similar.messages.len() < AGGREGATE_MAX_EVENTS {
            return format!("{aggregate_key}\u{0}{message}");
        }
        // Keep the set bounded, as client-go's `PopAny`.
        if let Some(any) = similar.messages.iter().next().cloned() {
            similar.messages.remove(&any);
        }
        event["message"] = json!(format!("(combined from similar events): {message}"));
        aggregate_key
    }
}

const SPAM_FIELDS: [&str; 8] = [
    "/source/component",
    "/source/host",
    "/involvedObject/kind",
    "/involvedObject/namespace",
    "/involvedObject/name",
    "/involvedObject/uid",
    "/involvedObject/apiVersion",
    "/type",
];

fn join(event: &Value, fields: &[&str]) -> String {
    fields
        .iter()
        .map(|f| event.pointer(f).and_then(Value::as_str).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\u{0}")
}

/// A map of at most [`CACHE_KEYS`] keys; the key inserted first leaves first.
struct BoundedMap<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    limit: usize,
}

impl<K, V> Default for BoundedMap<K, V> {
    fn default() -> Self {
        BoundedMap {
            map: HashMap::new(),
            order: VecDeque::new(),
            limit: CACHE_KEYS,
        }
    }
}

impl<K: Clone + Eq + Hash, V> BoundedMap<K, V> {
    fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.map.get_mut(k)
    }

    fn insert(&mut self, k: K, v: V) {
        self.make_room(&k);
        self.map.insert(k, v);
    }

    fn get_or_insert_with(&mut self, k: K, v: impl FnOnce() -> V) -> &mut V {
        self.make_room(&k);
        self.map.entry(k).or_insert_with(v)
    }

    /// Before `k` goes in: records it, and drops the oldest keys over the limit (never `k`
    /// itself, the newest, unless the limit is 0).
    fn make_room(&mut self, k: &K) {
        if self.map.contains_key(k) {
            return;
        }
        self.order.push_back(k.clone());
        while self.order.len() > self.limit.max(1) {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }
}

fn events() -> GroupVersionResource {
    GroupVersionResource::new("", "v1", "events")
}

/// The writer: correlates each event, then creates it or counts up the one already written.
/// Failures are logged and the event dropped, as client-go does after its retries (keel-client
/// has retried transient failures already).
async fn write_events(client: Client, mut rx: mpsc::Receiver<Value>, written: Counter) {
    let mut correlator = Correlator::default();
    while let Some(event) = rx.recv().await {
        let decision = correlator.correlate(event, Instant::now());
        let result = match decision {
            Decision::Skip => continue,
            Decision::Create(event) => client.create(&events(), event.namespace(), &event).await,
            Decision::Update(event) => {
                let patch = json!({
                    "count": event["count"],
                    "lastTimestamp": event["lastTimestamp"],
                    "message": event["message"],
                });
                match client
                    .patch(
                        &events(),
                        event.namespace(),
                        event.name(),
                        PatchType::Strategic,
                        &patch,
                    )
                    .await
                {
                    // Expired or deleted: written anew with its count.
                    Err(e) if e.reason == Reason::NotFound => {
                        client.create(&events(), event.namespace(), &event).await
                    }
                    other => other,
                }
            }
        };
        match result {
            Ok(_) => {
                written.inc();
            }
            Err(e) => tracing::debug!("event not recorded: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "pi", "namespace": "ns", "uid": "u1", "resourceVersion": "7"}})
    }

    fn event(reason: &str, message: &str, at: u64) -> Value {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + at);
        new_event(
            &job(),
            EventType::Normal,
            reason,
            message,
            "job-controller",
            "cm-1",
            t,
        )
    }

    #[test]
    fn an_event_reads_as_client_go_writes_it() {
        let e = event("SuccessfulCreate", "Created pod: pi-abcde", 0);
        assert_eq!(e["metadata"]["namespace"], "ns");
        assert!(e.name().starts_with("pi."));
        assert_eq!(e["involvedObject"]["kind"], "Job");
        assert_eq!(e["involvedObject"]["uid"], "u1");
        assert_eq!(e["involvedObject"]["apiVersion"], "batch/v1");
        assert_eq!(e["source"]["component"], "job-controller");
        assert_eq!(e["type"], "Normal");
        assert_eq!(e["count"], 1);
        assert_eq!(e["firstTimestamp"], "2027-01-15T08:00:00Z");
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
        let e = new_event(
            &node,
            EventType::Warning,
            "R",
            "m",
            "c",
            "h",
            SystemTime::now(),
        );
        assert_eq!(e["metadata"]["namespace"], "default");
        assert!(e["involvedObject"].get("namespace").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn identical_events_are_counted_on_the_first() {
        let mut c = Correlator::default();
        let first = match c.correlate(event("Completed", "Job completed", 0), Instant::now()) {
            Decision::Create(e) => e,
            other => panic!("{other:?}"),
        };
        tokio::time::advance(Duration::from_secs(5)).await;
        let Decision::Update(second) =
            c.correlate(event("Completed", "Job completed", 5), Instant::now())
        else {
            panic!("not counted")
        };
        assert_eq!(second.name(), first.name());
        assert_eq!(second["count"], 2);
        assert_eq!(second["firstTimestamp"], first["firstTimestamp"]);
        assert_ne!(second["lastTimestamp"], first["lastTimestamp"]);
        // Another message is another event.
        assert!(matches!(
            c.correlate(event("Completed", "other", 6), Instant::now()),
            Decision::Create(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn the_eleventh_similar_message_is_combined() {
        let mut c = Correlator::default();
        for i in 0..9 {
            let d = c.correlate(
                event("SuccessfulCreate", &format!("Created pod: p{i}"), 0),
                Instant::now(),
            );
            assert!(matches!(d, Decision::Create(_)), "{i}");
        }
        let Decision::Create(combined) = c.correlate(
            event("SuccessfulCreate", "Created pod: p9", 0),
            Instant::now(),
        ) else {
            panic!("the tenth is the first combined event")
        };
        assert_eq!(
            combined["message"],
            "(combined from similar events): Created pod: p9"
        );
        let Decision::Update(again) = c.correlate(
            event("SuccessfulCreate", "Created pod: p10", 0),
            Instant::now(),
        ) else {
            panic!("later ones count up the combined event")
        };
        assert_eq!(again.name(), combined.name());
        assert_eq!(again["count"], 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_gets_25_events_then_one_per_five_minutes() {
        let mut c = Correlator::default();
        let mut kept = 0;
        for i in 0..40 {
            if c.correlate(event(&format!("R{i}"), "m", 0), Instant::now()) != Decision::Skip {
                kept += 1;
            }
        }
        assert_eq!(kept, 25);
        tokio::time::advance(Duration::from_secs(299)).await;
        assert_eq!(
            c.correlate(event("R", "m", 0), Instant::now()),
            Decision::Skip
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_ne!(
            c.correlate(event("R", "m", 0), Instant::now()),
            Decision::Skip
        );
    }

    #[test]
    fn caches_keep_at_most_their_limit() {
        let mut m: BoundedMap<u32, u32> = BoundedMap {
            limit: 3,
            ..BoundedMap::default()
        };
        for i in 0..5 {
            m.insert(i, i);
        }
        assert_eq!(m.map.len(), 3);
        assert!(m.get_mut(&0).is_none() && m.get_mut(&4).is_some());
        *m.get_or_insert_with(9, || 1) += 1;
        assert_eq!(m.get_mut(&9).copied(), Some(2));
        assert_eq!(m.map.len(), 3);
    }
}
