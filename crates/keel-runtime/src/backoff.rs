//! The reflector's reconnect backoff: client-go's `NewExponentialBackoffManager(800ms, 30s,
//! 2min, 2.0, 1.0)`.

use std::time::Duration;

use tokio::time::Instant;

/// Exponential backoff with jitter that forgets past failures after a healthy spell.
///
/// The base doubles from `initial` to `max`; each delay adds up to `jitter` × base of random
/// jitter (client-go's factor 1.0: a delay lies in `[base, 2·base)`), so that the clients of
/// a restarted server do not all come back in the same instant. When `reset_after` has passed
/// since the end of the last delay, the base starts over at `initial`: a watch that ran for
/// two minutes was healthy, and its next failure is a new incident.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    reset_after: Duration,
    jitter: f64,
    /// The base of the next delay.
    next: Duration,
    /// When the last delay ended.
    last_retry: Option<Instant>,
    /// A number in `[0, 1)`; random but for tests.
    random: fn() -> f64,
}

impl Default for Backoff {
    /// The reflector's: 800 ms → 30 s, jitter 1.0, reset after 2 min.
    fn default() -> Self {
        Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
            1.0,
        )
    }
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration, reset_after: Duration, jitter: f64) -> Backoff {
        Backoff {
            initial,
            max,
            reset_after,
            jitter: jitter.max(0.0),
            next: initial,
            last_retry: None,
            random: random_fraction,
        }
    }

    /// How long to wait before the next attempt, after a failure at `now`.
    pub fn next_delay(&mut self, now: Instant) -> Duration {
        if let Some(last) = self.last_retry
            && now.saturating_duration_since(last) >= self.reset_after
        {
            self.next = self.initial;
        }
        let base = self.next;
        self.next = (base * 2).min(self.max);
        let delay = base + base.mul_f64(self.jitter * (self.random)());
        self.last_retry = Some(now + delay);
        delay
    }

    #[cfg(test)]
    pub(crate) fn set_random_for_tests(&mut self, random: fn() -> f64) {
        self.random = random;
    }

    /// Sleeps for the next delay.
    pub async fn wait(&mut self) {
        let delay = self.next_delay(Instant::now());
        tokio::time::sleep(delay).await;
    }
}

/// A random number in `[0, 1)`. Jitter needs no quality beyond "differs between processes
/// and calls": std's `RandomState` is seeded randomly per process and its keys change with
/// each instance, so hashing nothing with a fresh one gives that without a dependency.
pub(crate) fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn no_jitter() -> Backoff {
        Backoff {
            random: || 0.0,
            ..Backoff::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_base_doubles_from_800ms_to_30s() {
        let mut b = no_jitter();
        let mut got = Vec::new();
        for _ in 0..9 {
            got.push(b.next_delay(Instant::now()));
        }
        let want = [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000];
        assert_eq!(got, want.map(ms));
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_adds_up_to_one_base() {
        let mut b = Backoff::default();
        let mut base = ms(800);
        for _ in 0..200 {
            let d = b.next_delay(Instant::now());
            assert!(d >= base && d < base * 2, "{d:?} not in [{base:?}, 2×)");
            base = (base * 2).min(Duration::from_secs(30));
        }
        let mut delays: Vec<Duration> = (0..50)
            .map(|_| Backoff::default().next_delay(Instant::now()))
            .collect();
        delays.dedup();
        assert!(delays.len() > 40, "delays are jittered: {delays:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn two_healthy_minutes_reset_the_backoff() {
        let mut b = no_jitter();
        for _ in 0..5 {
            let d = b.next_delay(Instant::now());
            tokio::time::advance(d).await;
        }
        // Healthy, but not for long enough: the backoff keeps growing.
        tokio::time::advance(ms(119_000)).await;
        assert_eq!(b.next_delay(Instant::now()), ms(25_600));
        tokio::time::advance(ms(25_600)).await;
        tokio::time::advance(Duration::from_secs(120)).await;
        assert_eq!(b.next_delay(Instant::now()), ms(800));
        assert_eq!(b.next_delay(Instant::now()), ms(1600));
    }

    #[tokio::test(start_paused = true)]
    async fn wait_sleeps_for_the_delay() {
        let mut b = no_jitter();
        let start = Instant::now();
        b.wait().await;
        b.wait().await;
        assert_eq!(start.elapsed(), ms(2400));
    }

    #[test]
    fn random_fractions_are_in_the_unit_interval() {
        for _ in 0..1000 {
            let r = random_fraction();
            assert!((0.0..1.0).contains(&r));
        }
    }
}
