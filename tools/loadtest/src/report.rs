//! Results: a live progress line while running, an aligned summary after, JSON for machines.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::Common;
use crate::causes::{self, ErrorCauses, ErrorLog};
use crate::verify::LostUpdate;

/// Counters shared by the workers of a run, read by the progress line.
#[derive(Default)]
pub struct Counters {
    pub ok: AtomicU64,
    /// Failed requests; count them with [`Counters::error`], which records the cause too.
    pub errors: AtomicU64,
    pub conflicts: AtomicU64,
    /// Each error's cause. A mutex, not atomics: errors are the rare path.
    causes: Mutex<ErrorCauses>,
    /// `--error-log`: each error with its time, for a harness injecting faults.
    log: Option<ErrorLog>,
    /// What failed, as the error log names it (the mode).
    what: &'static str,
}

impl Counters {
    /// Counters for one run of `what` (the mode), logging errors where `--error-log` says.
    pub fn new(common: &Common, what: &'static str) -> Counters {
        Counters {
            log: common.error_log.clone(),
            what,
            ..Default::default()
        }
    }

    /// Counts one failed request of `caller` (the writer's, watcher's or request's index),
    /// sent (or, for a watch, opened) at `sent`, under its cause (see [`causes::cause`]).
    pub fn error(&self, caller: usize, sent: SystemTime, cause: &str, message: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.causes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(cause);
        if let Some(log) = &self.log {
            log.write(self.what, caller, sent, cause, message);
        }
    }

    /// [`Counters::error`] for a keel API error.
    pub fn api_error(&self, caller: usize, sent: SystemTime, e: &keel_client::ApiError) {
        self.error(caller, sent, &causes::of_api_error(e), &e.message);
    }

    /// The errors so far, by cause.
    pub fn causes(&self) -> ErrorCauses {
        self.causes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A latency histogram in microseconds, 1 µs to 60 s at 3 significant digits.
#[allow(clippy::expect_used)] // constant, valid bounds: cannot fail
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

pub fn record(h: &mut Histogram<u64>, took: Duration) {
    let us = took.as_micros().clamp(1, 60_000_000) as u64;
    let _ = h.record(us);
}

/// Prints a progress line every second until `done` is set, on stderr (rewritten in place on a
/// terminal, one line every five seconds otherwise).
pub fn progress(
    counters: Arc<Counters>,
    total: Duration,
    label: &'static str,
) -> tokio::task::JoinHandle<()> {
    progress_with(move |el| {
        let ok = counters.ok.load(Ordering::Relaxed);
        format!(
            "[{:>4}s/{}s] {label}: {ok} ok ({:.0}/s), {} errors, {} conflicts",
            el.as_secs(),
            total.as_secs(),
            ok as f64 / el.as_secs_f64().max(0.001),
            counters.errors.load(Ordering::Relaxed),
            counters.conflicts.load(Ordering::Relaxed),
        )
    })
}

/// [`progress`] with the line `line` makes of the time elapsed.
pub fn progress_with(
    line: impl Fn(Duration) -> String + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let start = Instant::now();
        let tty = std::io::stderr().is_terminal();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        let mut n = 0u64;
        loop {
            tick.tick().await;
            n += 1;
            let line = line(start.elapsed());
            let mut err = std::io::stderr();
            if tty {
                let _ = write!(err, "\r{line}\x1b[K");
            } else if n.is_multiple_of(5) {
                let _ = writeln!(err, "{line}");
            }
            let _ = err.flush();
        }
    })
}

pub fn clear_progress() {
    if std::io::stderr().is_terminal() {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        let ms = |us: u64| us as f64 / 1000.0;
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        }
    }
}

/// Everything a run measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub mode: String,
    pub writers: usize,
    pub objects: usize,
    pub watchers: usize,
    pub patch_type: String,
    pub servers: usize,
    /// Whether the servers were reached over TLS (`https://`).
    pub tls: bool,
    /// What the writers spoke: `grpc`, or `rest` (Kubernetes' HTTP/JSON dialect).
    pub protocol: String,
    pub duration_s: f64,
    pub ok: u64,
    pub ok_per_s: f64,
    pub errors: u64,
    pub conflicts: u64,
    /// Conflicts per attempt (replace and etcd CAS modes).
    pub conflict_rate: f64,
    pub latency: Latency,
    /// Server-side PATCH retries, from the servers' /metrics (None when not scraped).
    pub server_retries: Option<f64>,
    /// Average PATCHes committed per compare-and-swap, from /metrics.
    pub mean_batch: Option<f64>,
    pub lost_updates: usize,
    pub lost: Vec<LostUpdate>,
    /// Watch mode: events expected at each watcher and how many were missed or repeated.
    pub events_expected: u64,
    pub events_missed: u64,
    pub events_duplicated: u64,
    /// Watch mode: distinct events for writes whose writer saw an error (the answer was lost
    /// but the write landed): expected by nobody, so neither missed nor extra.
    pub events_unacknowledged: u64,
    /// Watch mode: watch streams that broke or could not be opened (each watcher resumes from
    /// its last event; a client on `watch_resumable` would not see them), and why.
    pub watch_breaks: u64,
    pub watch_breaks_by_cause: ErrorCauses,
    /// Fill mode: objects that were there already (left as they are).
    pub existing: u64,
    /// Initialize mode: Pods that appeared without the sidecar.
    pub sidecars_missing: Option<u64>,
    /// Every failed request (not conflicts retried by a replace writer), by cause.
    pub errors_by_cause: ErrorCauses,
    pub first_error: Option<String>,
}

impl Summary {
    /// The figures every mode derives from its counters: successes and their rate, errors,
    /// conflicts per attempt (`attempts` counts every try, conflicts included), latency.
    pub fn measured(
        mode: &str,
        counters: &Counters,
        elapsed: Duration,
        attempts: u64,
        latency: &Histogram<u64>,
    ) -> Summary {
        let ok = counters.ok.load(Ordering::Relaxed);
        let conflicts = counters.conflicts.load(Ordering::Relaxed);
        Summary {
            mode: mode.into(),
            duration_s: elapsed.as_secs_f64(),
            ok,
            ok_per_s: ok as f64 / elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
            errors: counters.errors.load(Ordering::Relaxed),
            errors_by_cause: counters.causes(),
            conflicts,
            conflict_rate: if attempts > 0 {
                conflicts as f64 / attempts as f64
            } else {
                0.0
            },
            latency: Latency::of(latency),
            ..Default::default()
        }
    }

    /// True when the run proved a fault: a lost update or a missed or repeated event.
    pub fn failed(&self) -> bool {
        self.lost_updates > 0
            || self.events_missed > 0
            || self.events_duplicated > 0
            || self.sidecars_missing.is_some_and(|n| n > 0)
            // A fill that did not make every object leaves the measurement on less.
            || (self.mode == "fill" && self.errors > 0)
    }

    pub fn print(&self, json: bool) {
        if json {
            println!("{}", serde_json::to_string(self).unwrap_or_default());
            return;
        }
        let mut rows: Vec<(&str, String)> = Vec::new();
        let l = &self.latency;
        rows.push(("successes", format!("{} ({:.1}/s)", self.ok, self.ok_per_s)));
        rows.push(("errors", self.errors.to_string()));
        rows.push((
            "latency p50 / p90 / p99",
            format!(
                "{:.2} ms / {:.2} ms / {:.2} ms",
                l.p50_ms, l.p90_ms, l.p99_ms
            ),
        ));
        rows.push(("latency max", format!("{:.2} ms", l.max_ms)));
        if self.mode == "fill" {
            rows.push(("already there", self.existing.to_string()));
        } else if self.mode != "watch" && self.mode != "initialize" {
            rows.push((
                "conflicts",
                format!(
                    "{} ({:.1}% of attempts)",
                    self.conflicts,
                    self.conflict_rate * 100.0
                ),
            ));
        }
        if let Some(r) = self.server_retries {
            rows.push(("server-side retries", format!("{r:.0}")));
        }
        if let Some(b) = self.mean_batch {
            rows.push(("PATCHes per write (mean)", format!("{b:.1}")));
        }
        if self.mode == "watch" {
            rows.push((
                "events expected per watcher",
                self.events_expected.to_string(),
            ));
            rows.push(("events missed", self.events_missed.to_string()));
            rows.push(("events duplicated", self.events_duplicated.to_string()));
            rows.push((
                "events of unacknowledged writes",
                self.events_unacknowledged.to_string(),
            ));
            rows.push(("watch streams broken", self.watch_breaks.to_string()));
        } else if self.mode == "initialize" {
            rows.push(("pods created", self.events_expected.to_string()));
            rows.push(("never initialized", self.events_missed.to_string()));
            rows.push((
                "initialized without the sidecar",
                self.sidecars_missing.unwrap_or(0).to_string(),
            ));
        } else if !matches!(
            self.mode.as_str(),
            "etcd-put" | "etcd-cas" | "etcd-floor" | "fill"
        ) {
            rows.push(("lost updates", self.lost_updates.to_string()));
        }
        if let Some(e) = &self.first_error {
            rows.push(("first error", e.clone()));
        }
        println!(
            "keel-loadtest {}: {} writers, {} objects{}{}{}, {:.0}s",
            self.mode,
            self.writers,
            self.objects,
            if self.watchers > 0 {
                format!(", {} watchers", self.watchers)
            } else {
                String::new()
            },
            if self.patch_type.is_empty() {
                String::new()
            } else {
                format!(", {} patch", self.patch_type)
            },
            if self.protocol == "rest" {
                " over REST"
            } else {
                ""
            },
            self.duration_s
        );
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in rows {
            println!("  {k:<width$}  {v}");
        }
        for lost in self.lost.iter().take(10) {
            println!(
                "  LOST: {}/{} acknowledged {} but holds {:?}",
                lost.object, lost.field, lost.acknowledged, lost.found
            );
        }
        print_causes("errors by cause", &self.errors_by_cause);
        print_causes(
            "watch streams broken, by cause",
            &self.watch_breaks_by_cause,
        );
    }
}

/// A table of causes, most frequent first; nothing when there are none.
fn print_causes(title: &str, causes: &ErrorCauses) {
    for line in cause_table(title, causes) {
        println!("{line}");
    }
}

/// The lines of [`print_causes`]: the title, then `count  cause`, counts right-aligned.
fn cause_table(title: &str, causes: &ErrorCauses) -> Vec<String> {
    let rows = causes.by_count();
    if rows.is_empty() {
        return Vec::new();
    }
    let width = rows
        .iter()
        .map(|(n, _)| n.to_string().len())
        .max()
        .unwrap_or(0)
        .max("count".len());
    let mut out = vec![
        format!("  {title}:"),
        format!("    {:>width$}  cause", "count"),
    ];
    for (n, cause) in rows {
        out.push(format!("    {n:>width$}  {cause}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_table_is_aligned_most_frequent_first() {
        let mut c = ErrorCauses::default();
        for _ in 0..12 {
            c.add("ServiceUnavailable: transport error");
        }
        c.add("Timeout: deadline exceeded");
        assert_eq!(
            cause_table("errors by cause", &c),
            [
                "  errors by cause:",
                "    count  cause",
                "       12  ServiceUnavailable: transport error",
                "        1  Timeout: deadline exceeded",
            ]
        );
        assert!(cause_table("none", &ErrorCauses::default()).is_empty());
    }

    #[test]
    fn counters_count_each_error_under_its_cause() {
        let c = Counters::default();
        let sent = SystemTime::now();
        c.api_error(
            0,
            sent,
            &keel_client::ApiError::unavailable("transport error"),
        );
        c.error(1, sent, "x: y", "y");
        assert_eq!(c.errors.load(Ordering::Relaxed), 2);
        assert_eq!(
            c.causes().by_count(),
            [(1, "ServiceUnavailable: transport error"), (1, "x: y")]
        );
    }
}
