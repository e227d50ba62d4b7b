//! The controller: N workers taking keys from a [`WorkQueue`] and running `reconcile(key)`.
//!
//! The queue hands a key to one worker at a time, so a key is never reconciled twice at once.
//! Success forgets the key's failures; an error re-queues it with the rate limiter's backoff;
//! [`Action::requeue`] asks for another look later even on success.

use std::fmt::Display;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Future, FutureExt};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use crate::key::ObjectKey;
use crate::metrics::ControllerMetrics;
use crate::workqueue::WorkQueue;

/// What a successful reconcile wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing until something changes (an event re-queues the key).
    AwaitChange,
    /// Reconcile the key again after this long (e.g. to check on a timeout), even if
    /// nothing changes.
    Requeue(Duration),
}

impl Action {
    pub fn await_change() -> Action {
        Action::AwaitChange
    }

    pub fn requeue(after: Duration) -> Action {
        Action::Requeue(after)
    }
}

/// Runs a reconcile function over the keys of a queue. Built with
/// `Controller::new(name, queue).workers(n).metrics(&mut registry)`, then [`Controller::run`].
pub struct Controller<K = ObjectKey> {
    name: String,
    queue: WorkQueue<K>,
    workers: usize,
    metrics: Option<ControllerMetrics>,
}

impl<K> Controller<K>
where
    K: Clone + Eq + Hash + Display + Send + Sync + 'static,
{
    /// A controller with one worker; `name` labels its metrics, spans and logs.
    pub fn new(name: &str, queue: WorkQueue<K>) -> Controller<K> {
        Controller {
            name: name.to_string(),
            queue,
            workers: 1,
            metrics: None,
        }
    }

    /// Reconciles up to `n` keys at once (at least one).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }

    /// Records queue depth, queue latency, reconcile duration, retries and errors into
    /// `registry`, labelled `controller="<name>"`. Several controllers may share a registry.
    pub fn metrics(mut self, registry: &mut Registry) -> Self {
        let metrics = ControllerMetrics::register(registry, &self.name);
        self.queue.set_metrics(metrics.queue.clone());
        self.metrics = Some(metrics);
        self
    }

    pub fn queue(&self) -> &WorkQueue<K> {
        &self.queue
    }

    /// Runs the workers until `shutdown` completes (or the queue is shut down and empty).
    /// Then no worker takes another key, the reconciles under way finish, and the queue is
    /// shut down. A reconcile that panics counts as failed: its key is retried.
    pub async fn run<F, Fut, E>(self, reconcile: F, shutdown: impl Future<Output = ()>)
    where
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let worker = Arc::new(Worker {
            name: self.name,
            queue: self.queue.clone(),
            metrics: self.metrics,
            reconcile,
        });
        let (stop, stopped) = watch::channel(false);
        let mut workers = JoinSet::new();
        for _ in 0..self.workers {
            workers.spawn(worker.clone().run(stopped.clone()));
        }
        tracing::info!(controller = %worker.name, workers = self.workers, "controller started");
        let shutdown = pin!(shutdown);
        tokio::select! {
            _ = shutdown => {}
            _ = async { while workers.join_next().await.is_some() {} } => {}
        }
        stop.send_replace(true);
        while let Some(joined) = workers.join_next().await {
            if let Err(e) = joined {
                tracing::error!(controller = %worker.name, error = %e, "worker ended abnormally");
            }
        }
        self.queue.shut_down();
        tracing::info!(controller = %worker.name, "controller stopped");
    }
}

struct Worker<K, F> {
    name: String,
    queue: WorkQueue<K>,
    metrics: Option<ControllerMetrics>,
    reconcile: F,
}

impl<K, F, Fut, E> Worker<K, F>
where
    K: Clone + Eq + Hash + Display + Send + Sync + 'static,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: Display + Send + 'static,
{
    async fn run(self: Arc<Self>, mut stopped: watch::Receiver<bool>) {
        loop {
            let key = tokio::select! {
                biased;
                _ = stopped.wait_for(|s| *s) => return,
                key = self.queue.get() => key,
            };
            let Some(key) = key else { return };
            self.reconcile_one(key).await;
        }
    }

    async fn reconcile_one(&self, key: K) {
        let span = tracing::info_span!("reconcile", controller = %self.name, key = %key);
        let start = Instant::now();
        // The call itself is inside the guarded future, so a panic before its first await
        // is caught too.
        let outcome = AssertUnwindSafe(async { (self.reconcile)(key.clone()).await })
            .catch_unwind()
            .instrument(span.clone())
            .await;
        if let Some(m) = &self.metrics {
            m.work_duration.observe(start.elapsed().as_secs_f64());
        }
        match outcome {
            Ok(Ok(action)) => {
                self.queue.forget(&key);
                if let Action::Requeue(after) = action {
                    self.queue.add_after(key.clone(), after);
                }
            }
            Ok(Err(e)) => self.failed(&key, &span, e.to_string()),
            Err(panic) => self.failed(
                &key,
                &span,
                format!("reconcile panicked: {}", panic_message(&*panic)),
            ),
        }
        self.queue.done(&key);
    }

    fn failed(&self, key: &K, span: &tracing::Span, error: String) {
        let retries = self.queue.num_requeues(key);
        span.in_scope(|| tracing::warn!(%error, retries, "reconcile failed"));
        if let Some(m) = &self.metrics {
            m.errors.inc();
        }
        self.queue.add_rate_limited(key.clone());
    }
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Reconcile log: (key, start, end) in paused-clock milliseconds from the test's start.
    type Log = Arc<Mutex<Vec<(String, u128, u128)>>>;

    #[tokio::test(start_paused = true)]
    async fn keys_are_reconciled_in_parallel_but_never_one_key_twice_at_once() {
        let q: WorkQueue<ObjectKey> = WorkQueue::default_controller_queue();
        let log: Log = Arc::default();
        let t0 = Instant::now();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(Controller::new("parallel-test", q.clone()).workers(3).run(
            {
                let log = log.clone();
                move |key: ObjectKey| {
                    let log = log.clone();
                    async move {
                        let start = t0.elapsed().as_millis();
                        tokio::time::sleep(ms(100)).await;
                        log.lock().unwrap().push((
                            key.to_string(),
                            start,
                            t0.elapsed().as_millis(),
                        ));
                        Ok::<_, String>(Action::await_change())
                    }
                }
            },
            async move {
                let _ = stopped.await;
            },
        ));
        for name in ["a", "b", "c"] {
            q.add(ObjectKey::new("ns", name));
        }
        tokio::time::sleep(ms(50)).await;
        // `a` is being reconciled: this add waits for it, and is not run beside it.
        q.add(ObjectKey::new("ns", "a"));
        tokio::time::sleep(ms(500)).await;
        stop.send(()).unwrap();
        run.await.unwrap();

        let log = log.lock().unwrap().clone();
        let mut by_key: HashMap<String, Vec<(u128, u128)>> = HashMap::new();
        for (k, s, e) in &log {
            by_key.entry(k.clone()).or_default().push((*s, *e));
        }
        assert_eq!(by_key["ns/b"], [(0, 100)]);
        assert_eq!(by_key["ns/c"], [(0, 100)]);
        assert_eq!(
            by_key["ns/a"],
            [(0, 100), (100, 200)],
            "one after the other"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn errors_retry_with_backoff_and_success_forgets() {
        let q: WorkQueue<ObjectKey> = WorkQueue::default_controller_queue();
        let attempts: Arc<Mutex<Vec<u128>>> = Arc::default();
        let t0 = Instant::now();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mut registry = Registry::default();
        let controller = Controller::new("retry-test", q.clone()).metrics(&mut registry);
        let run = tokio::spawn(controller.run(
            {
                let attempts = attempts.clone();
                move |_key: ObjectKey| {
                    let attempts = attempts.clone();
                    async move {
                        let n = {
                            let mut a = attempts.lock().unwrap();
                            a.push(t0.elapsed().as_millis());
                            a.len()
                        };
                        if n < 4 {
                            Err(format!("attempt {n} failed"))
                        } else {
                            Ok(Action::await_change())
                        }
                    }
                }
            },
            async move {
                let _ = stopped.await;
            },
        ));
        let key = ObjectKey::new("ns", "x");
        q.add(key.clone());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(*attempts.lock().unwrap(), [0, 5, 15, 35]);
        assert_eq!(q.num_requeues(&key), 0, "forgotten after the success");
        stop.send(()).unwrap();
        run.await.unwrap();

        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("keel_controller_reconcile_errors_total{controller=\"retry-test\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("keel_controller_retries_total{controller=\"retry-test\"} 3"),
            "{text}"
        );
        assert!(
            text.contains(
                "keel_controller_reconcile_duration_seconds_count{controller=\"retry-test\"} 4"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "keel_controller_queue_latency_seconds_count{controller=\"retry-test\"} 4"
            ),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn requeue_reconciles_again_after_the_delay() {
        let q: WorkQueue<ObjectKey> = WorkQueue::default_controller_queue();
        let times: Arc<Mutex<Vec<u128>>> = Arc::default();
        let t0 = Instant::now();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(Controller::new("requeue-test", q.clone()).run(
            {
                let times = times.clone();
                move |_key: ObjectKey| {
                    times.lock().unwrap().push(t0.elapsed().as_millis());
                    async { Ok::<_, String>(Action::requeue(Duration::from_secs(30))) }
                }
            },
            async move {
                let _ = stopped.await;
            },
        ));
        q.add(ObjectKey::new("", "cluster-scoped"));
        tokio::time::sleep(Duration::from_secs(65)).await;
        stop.send(()).unwrap();
        run.await.unwrap();
        assert_eq!(*times.lock().unwrap(), [0, 30_000, 60_000]);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_stops_taking_keys_and_drains_the_reconciles_under_way() {
        let q: WorkQueue<ObjectKey> = WorkQueue::default_controller_queue();
        let finished: Arc<Mutex<Vec<String>>> = Arc::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(Controller::new("drain-test", q.clone()).workers(2).run(
            {
                let finished = finished.clone();
                move |key: ObjectKey| {
                    let finished = finished.clone();
                    async move {
                        tokio::time::sleep(Duration::from_secs(10)).await;
                        finished.lock().unwrap().push(key.to_string());
                        Ok::<_, String>(Action::await_change())
                    }
                }
            },
            async move {
                let _ = stopped.await;
            },
        ));
        for name in ["a", "b", "c", "d"] {
            q.add(ObjectKey::new("ns", name));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let t = Instant::now();
        stop.send(()).unwrap();
        run.await.unwrap();
        assert_eq!(
            t.elapsed(),
            Duration::from_secs(9),
            "waited for a and b to finish"
        );
        let mut done = finished.lock().unwrap().clone();
        done.sort();
        assert_eq!(done, ["ns/a", "ns/b"], "c and d were not started");
        assert!(q.is_shutting_down());
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_reconcile_is_retried_and_the_worker_lives_on() {
        let q: WorkQueue<ObjectKey> = WorkQueue::default_controller_queue();
        let calls: Arc<Mutex<u32>> = Arc::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(Controller::new("panic-test", q.clone()).run(
            {
                let calls = calls.clone();
                move |_key: ObjectKey| {
                    let calls = calls.clone();
                    async move {
                        let n = {
                            let mut c = calls.lock().unwrap();
                            *c += 1;
                            *c
                        };
                        if n == 1 {
                            panic!("first call fails");
                        }
                        Ok::<_, String>(Action::await_change())
                    }
                }
            },
            async move {
                let _ = stopped.await;
            },
        ));
        q.add(ObjectKey::new("ns", "p"));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(*calls.lock().unwrap(), 2);
        stop.send(()).unwrap();
        run.await.unwrap();
    }
}
