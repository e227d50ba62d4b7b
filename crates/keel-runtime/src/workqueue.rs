//! The rate-limited work queue, with client-go's guarantees:
//! - a key waiting in the queue is there once, however often it is added;
//! - a key is never handed to two workers at once: added while a worker has it, it waits
//!   and is queued again when that worker calls [`WorkQueue::done`];
//! - a failed key is retried after [`RateLimiter`] delays until [`WorkQueue::forget`].
//!
//! Bound: the queue holds each key at most once waiting, once delayed and once in a worker's
//! hands, and counts failures per key until it is forgotten. The keys are those of the
//! objects in the informers' caches, so the queue is bounded by the cache.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::QueueMetrics;
use crate::rate_limiter::RateLimiter;

/// A queue of keys for workers; cheap to clone (clones share the queue).
pub struct WorkQueue<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<K> {
    state: Mutex<State<K>>,
    /// Wakes workers waiting in `get`: a key was queued, a delay got shorter, or shutdown.
    ready: Notify,
    /// Wakes `shut_down_with_drain` when a worker calls `done`.
    done: Notify,
}

struct State<K> {
    /// Ready keys, oldest first.
    queue: VecDeque<K>,
    /// Keys waiting to be handed out (in `queue`, or added again while in a worker's hands),
    /// with the time they were queued, for the latency metric.
    dirty: HashMap<K, Instant>,
    /// Keys in a worker's hands.
    processing: HashSet<K>,
    /// Keys added with a delay, by the time they become ready (and a sequence number, to
    /// keep equal times apart).
    delayed: BTreeMap<(Instant, u64), K>,
    /// The slot of each delayed key: a key is delayed once, until the earliest time asked.
    delayed_at: HashMap<K, (Instant, u64)>,
    seq: u64,
    /// Failures per key since it was last forgotten.
    failures: HashMap<K, u32>,
    limiter: RateLimiter,
    shutting_down: bool,
    metrics: Option<QueueMetrics>,
}

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
{
    pub fn new(limiter: RateLimiter) -> WorkQueue<K> {
        WorkQueue {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    dirty: HashMap::new(),
                    processing: HashSet::new(),
                    delayed: BTreeMap::new(),
                    delayed_at: HashMap::new(),
                    seq: 0,
                    failures: HashMap::new(),
                    limiter,
                    shutting_down: false,
                    metrics: None,
                }),
                ready: Notify::new(),
                done: Notify::new(),
            }),
        }
    }

    /// A queue with [`RateLimiter::default_controller_rate_limiter`].
    pub fn default_controller_queue() -> WorkQueue<K> {
        WorkQueue::new(RateLimiter::default_controller_rate_limiter())
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn set_metrics(&self, metrics: QueueMetrics) {
        let mut state = self.lock();
        metrics.depth.set(state.queue.len() as i64);
        state.metrics = Some(metrics);
    }

    /// Queues a key now. Ignored after shutdown.
    pub fn add(&self, key: K) {
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        state.add(key, Instant::now());
        drop(state);
        self.shared.ready.notify_one();
    }

    /// Queues a key after `delay`. A key already delayed keeps the earlier of its two times.
    pub fn add_after(&self, key: K, delay: Duration) {
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        state.add_after(key, delay, Instant::now());
        drop(state);
        // A worker sleeping until a later time must look again.
        self.shared.ready.notify_one();
    }

    /// Queues a key after the rate limiter's delay for it, and counts a failure.
    pub fn add_rate_limited(&self, key: K) {
        let mut state = self.lock();
        if state.shutting_down {
            return;
        }
        let now = Instant::now();
        let failures = state.failures.get(&key).copied().unwrap_or(0);
        let delay = state.limiter.when(failures, now);
        state
            .failures
            .insert(key.clone(), failures.saturating_add(1));
        if let Some(m) = &state.metrics {
            m.retries.inc();
        }
        state.add_after(key, delay, now);
        drop(state);
        self.shared.ready.notify_one();
    }

    /// Forgets a key's failures: its next rate-limited add starts the backoff over.
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// How often the key was re-queued rate-limited since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Keys ready for a worker (not counting delayed keys, nor keys in workers' hands).
    pub fn len(&self) -> usize {
        let mut state = self.lock();
        state.promote(Instant::now());
        state.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes the oldest ready key, waiting for one; the caller must call [`WorkQueue::done`]
    /// with it. `None` once the queue is shut down and has no ready key left.
    ///
    /// Cancel-safe: a key is taken only when this returns.
    pub async fn get(&self) -> Option<K> {
        loop {
            let mut ready = pin!(self.shared.ready.notified());
            // Registered before the state is read, so that no wake-up is missed.
            ready.as_mut().enable();
            let next_delayed = {
                let mut state = self.lock();
                let now = Instant::now();
                state.promote(now);
                if let Some(key) = state.queue.pop_front() {
                    let queued = state.dirty.remove(&key).unwrap_or(now);
                    state.processing.insert(key.clone());
                    if let Some(m) = &state.metrics {
                        m.latency
                            .observe(now.saturating_duration_since(queued).as_secs_f64());
                        m.depth.set(state.queue.len() as i64);
                    }
                    return Some(key);
                }
                if state.shutting_down {
                    return None;
                }
                state.delayed.keys().next().map(|(at, _)| *at)
            };
            match next_delayed {
                Some(at) => {
                    tokio::select! {
                        _ = ready => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => ready.await,
            }
        }
    }

    /// Marks a key as processed; if it was added meanwhile, it is queued again now. A key
    /// that was not handed out is left alone.
    pub fn done(&self, key: &K) {
        let mut state = self.lock();
        let requeue = state.processing.remove(key) && state.dirty.contains_key(key);
        if requeue {
            state.queue.push_back(key.clone());
            state.publish_depth();
        }
        let idle = state.processing.is_empty();
        drop(state);
        if requeue {
            self.shared.ready.notify_one();
        }
        if idle {
            self.shared.done.notify_waiters();
        }
    }

    /// Stops the queue: adds are ignored from now on and delayed keys are dropped; `get`
    /// hands out the keys still ready, then returns `None`.
    pub fn shut_down(&self) {
        let mut state = self.lock();
        state.shutting_down = true;
        state.delayed.clear();
        state.delayed_at.clear();
        drop(state);
        self.shared.ready.notify_waiters();
    }

    /// [`WorkQueue::shut_down`], then waits until every key handed out is `done`.
    pub async fn shut_down_with_drain(&self) {
        self.shut_down();
        loop {
            let mut done = pin!(self.shared.done.notified());
            done.as_mut().enable();
            if self.lock().processing.is_empty() {
                return;
            }
            done.await;
        }
    }

    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }
}

impl<K> Default for WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + Sync + 'static,
{
    fn default() -> Self {
        WorkQueue::default_controller_queue()
    }
}

impl<K: Clone + Eq + Hash> State<K> {
    fn add(&mut self, key: K, now: Instant) {
        if self.dirty.contains_key(&key) {
            return;
        }
        let in_hands = self.processing.contains(&key);
        if !in_hands {
            self.queue.push_back(key.clone());
            self.publish_depth();
        }
        self.dirty.insert(key, now);
    }

    fn add_after(&mut self, key: K, delay: Duration, now: Instant) {
        if delay.is_zero() {
            self.add(key, now);
            return;
        }
        // So far off that it never comes: an hour-long delay is already "not now".
        let at = now
            .checked_add(delay)
            .unwrap_or_else(|| now + Duration::from_secs(86400 * 365));
        if let Some(&(existing, seq)) = self.delayed_at.get(&key) {
            if existing <= at {
                return;
            }
            self.delayed.remove(&(existing, seq));
        }
        self.seq += 1;
        self.delayed.insert((at, self.seq), key.clone());
        self.delayed_at.insert(key, (at, self.seq));
    }

    /// Queues the delayed keys whose time has come.
    fn promote(&mut self, now: Instant) {
        while let Some(entry) = self.delayed.first_entry() {
            let at = entry.key().0;
            if at > now {
                break;
            }
            let key = entry.remove();
            self.delayed_at.remove(&key);
            self.add(key, at);
        }
    }

    fn publish_depth(&self) {
        if let Some(m) = &self.metrics {
            m.depth.set(self.queue.len() as i64);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn queue() -> WorkQueue<&'static str> {
        WorkQueue::default_controller_queue()
    }

    /// The next key, if one is ready without waiting.
    async fn poll(q: &WorkQueue<&'static str>) -> Option<&'static str> {
        tokio::time::timeout(Duration::ZERO, q.get())
            .await
            .ok()
            .flatten()
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_key_is_queued_once() {
        let q = queue();
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("b"));
        assert_eq!(poll(&q).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_in_a_workers_hands_is_not_handed_out_again_until_done() {
        let q = queue();
        q.add("a");
        assert_eq!(q.get().await, Some("a"));
        q.add("a");
        q.add("a");
        assert_eq!(q.len(), 0, "held back while a worker has it");
        assert_eq!(poll(&q).await, None);
        q.done(&"a");
        assert_eq!(q.len(), 1, "queued again, once");
        assert_eq!(q.get().await, Some("a"));
        q.done(&"a");
        assert_eq!(
            poll(&q).await,
            None,
            "done without a re-add does not re-queue"
        );

        q.add("b");
        q.done(&"b");
        assert_eq!(
            q.len(),
            1,
            "done of a key never handed out queues nothing twice"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_workers_never_hold_one_key_together() {
        let q: WorkQueue<u32> = WorkQueue::default_controller_queue();
        let held = Arc::new(Mutex::new(HashSet::new()));
        let handled = Arc::new(Mutex::new(0u32));
        let mut workers = Vec::new();
        for _ in 0..4 {
            let (q, held, handled) = (q.clone(), held.clone(), handled.clone());
            workers.push(tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    assert!(held.lock().unwrap().insert(k), "key {k} handed out twice");
                    tokio::time::sleep(ms(10)).await;
                    held.lock().unwrap().remove(&k);
                    *handled.lock().unwrap() += 1;
                    q.done(&k);
                }
            }));
        }
        for round in 0..20 {
            for k in 0..3 {
                q.add(k);
            }
            tokio::time::sleep(ms(3 + round % 7)).await;
        }
        tokio::time::sleep(ms(100)).await;
        q.shut_down_with_drain().await;
        for w in workers {
            w.await.unwrap();
        }
        let handled = *handled.lock().unwrap();
        assert!(handled >= 3, "{handled}");
        assert!(handled <= 60, "{handled}");
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_adds_back_off_per_key_and_forget_resets() {
        let q = queue();
        let start = Instant::now();
        let mut ready_at = Vec::new();
        for _ in 0..4 {
            q.add_rate_limited("a");
            assert_eq!(q.get().await, Some("a"));
            ready_at.push(start.elapsed());
            q.done(&"a");
        }
        // 5, then 10, 20, 40 ms after each previous retry.
        assert_eq!(ready_at, [ms(5), ms(15), ms(35), ms(75)]);
        assert_eq!(q.num_requeues(&"a"), 4);
        assert_eq!(q.num_requeues(&"b"), 0);
        q.forget(&"a");
        assert_eq!(q.num_requeues(&"a"), 0);
        let t = Instant::now();
        q.add_rate_limited("a");
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(t.elapsed(), ms(5));
    }

    #[tokio::test(start_paused = true)]
    async fn per_key_backoff_is_capped_at_1000s() {
        let q = queue();
        for _ in 0..30 {
            q.add_rate_limited("a");
            tokio::time::advance(Duration::from_secs(1000)).await;
            assert_eq!(q.get().await, Some("a"));
            q.done(&"a");
        }
        let t = Instant::now();
        q.add_rate_limited("a");
        tokio::time::advance(Duration::from_secs(999)).await;
        assert_eq!(poll(&q).await, None);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(t.elapsed(), Duration::from_secs(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_lets_100_through_then_10_per_second() {
        let q: WorkQueue<u32> = WorkQueue::default_controller_queue();
        // Distinct keys: the per-key backoff stays at 5 ms, the bucket decides.
        for k in 0..120 {
            q.add_rate_limited(k);
        }
        tokio::time::advance(ms(5)).await;
        assert_eq!(q.len(), 100);
        tokio::time::advance(ms(1000)).await;
        assert_eq!(q.len(), 110);
        tokio::time::advance(ms(1000)).await;
        assert_eq!(q.len(), 120);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_key_waits_and_keeps_its_earliest_time() {
        let q = queue();
        let t = Instant::now();
        q.add_after("a", Duration::from_secs(10));
        q.add_after("a", Duration::from_secs(1));
        q.add_after("a", Duration::from_secs(5));
        assert_eq!(q.len(), 0);
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(t.elapsed(), Duration::from_secs(1));
        q.done(&"a");
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(poll(&q).await, None, "the later times were merged away");
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_delay_wakes_a_waiting_worker_early() {
        let q = queue();
        q.add_after("late", Duration::from_secs(60));
        let worker = tokio::spawn({
            let q = q.clone();
            async move {
                let k = q.get().await;
                (k, Instant::now())
            }
        });
        tokio::time::sleep(ms(10)).await;
        let t = Instant::now();
        q.add_after("soon", ms(100));
        let (k, at) = worker.await.unwrap();
        assert_eq!(k, Some("soon"));
        assert_eq!(at - t, ms(100));
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_hands_out_what_is_ready_then_none_and_ignores_adds() {
        let q = queue();
        q.add("a");
        q.add_after("later", ms(10));
        let waiting = tokio::spawn({
            let q = q.clone();
            async move {
                let first = q.get().await;
                let second = q.get().await;
                (first, second)
            }
        });
        tokio::task::yield_now().await;
        q.shut_down();
        q.add("b");
        q.add_rate_limited("c");
        let (first, second) = waiting.await.unwrap();
        assert_eq!(first, Some("a"));
        assert_eq!(second, None, "delayed keys are dropped, adds ignored");
        assert!(q.is_shutting_down());
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_waits_for_keys_in_hands() {
        let q = queue();
        q.add("a");
        q.add("b");
        assert_eq!(q.get().await, Some("a"));
        assert_eq!(q.get().await, Some("b"));
        let drained = tokio::spawn({
            let q = q.clone();
            async move {
                q.shut_down_with_drain().await;
                Instant::now()
            }
        });
        let t = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        q.done(&"a");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!drained.is_finished());
        q.done(&"b");
        assert_eq!(drained.await.unwrap() - t, Duration::from_secs(2));
    }
}
