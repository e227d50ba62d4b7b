//! How long a failed key waits before it is retried: client-go's
//! `DefaultControllerRateLimiter`, the larger of a per-key exponential backoff and an overall
//! token bucket.

use std::time::Duration;

use tokio::time::Instant;

/// Delays for retries. The per-key part grows with the key's failures (which the
/// [`WorkQueue`](crate::WorkQueue) counts); the bucket part is shared by every key, so that
/// many keys failing at once cannot flood the API server.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    exponential: Option<Exponential>,
    bucket: Option<TokenBucket>,
}

/// `base · 2^failures`, at most `max`.
#[derive(Debug, Clone, Copy)]
struct Exponential {
    base: Duration,
    max: Duration,
}

/// golang.org/x/time/rate's reservations: `burst` tokens, refilled at `qps`; a retry takes a
/// token, and waits for it when there is none left.
#[derive(Debug, Clone)]
struct TokenBucket {
    qps: f64,
    burst: f64,
    /// May go negative: tokens promised to retries already scheduled.
    tokens: f64,
    last: Option<Instant>,
}

impl Default for RateLimiter {
    fn default() -> Self {
        RateLimiter::default_controller_rate_limiter()
    }
}

impl RateLimiter {
    /// max(per key 5 ms · 2^failures up to 1000 s, overall 10 qps with a burst of 100).
    pub fn default_controller_rate_limiter() -> RateLimiter {
        RateLimiter::exponential(Duration::from_millis(5), Duration::from_secs(1000))
            .with_bucket(10.0, 100)
    }

    /// Per-key exponential backoff only.
    pub fn exponential(base: Duration, max: Duration) -> RateLimiter {
        RateLimiter {
            exponential: Some(Exponential { base, max }),
            bucket: None,
        }
    }

    /// An overall token bucket only. A `qps` that is not positive disables it.
    pub fn bucket(qps: f64, burst: u32) -> RateLimiter {
        RateLimiter {
            exponential: None,
            bucket: None,
        }
        .with_bucket(qps, burst)
    }

    /// Adds an overall token bucket; the delay is the larger of the two.
    pub fn with_bucket(mut self, qps: f64, burst: u32) -> RateLimiter {
        self.bucket = (qps > 0.0).then(|| {
            let burst = f64::from(burst.max(1));
            TokenBucket {
                qps,
                burst,
                tokens: burst,
                last: None,
            }
        });
        self
    }

    /// The delay of a retry at `now` of a key that has failed `failures` times before. Takes a
    /// token from the bucket.
    pub fn when(&mut self, failures: u32, now: Instant) -> Duration {
        let per_key = self
            .exponential
            .map(|e| e.delay(failures))
            .unwrap_or_default();
        let overall = self
            .bucket
            .as_mut()
            .map(|b| b.reserve(now))
            .unwrap_or_default();
        per_key.max(overall)
    }
}

impl Exponential {
    fn delay(&self, failures: u32) -> Duration {
        // Computed in floating point so that no number of failures can overflow.
        let secs = self.base.as_secs_f64() * 2f64.powi(failures.min(1024) as i32);
        if secs < self.max.as_secs_f64() {
            Duration::from_secs_f64(secs)
        } else {
            self.max
        }
    }
}

impl TokenBucket {
    fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = self
            .last
            .map(|last| now.saturating_duration_since(last))
            .unwrap_or_default();
        self.last = Some(now);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.qps).min(self.burst);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            // Finite and positive: tokens ≥ -(retries reserved), qps > 0.
            Duration::try_from_secs_f64(-self.tokens / self.qps).unwrap_or(Duration::MAX)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn close(a: Duration, b: Duration) -> bool {
        a.abs_diff(b) < Duration::from_micros(1)
    }

    #[tokio::test(start_paused = true)]
    async fn per_key_delays_double_from_5ms_up_to_1000s() {
        let mut r = RateLimiter::exponential(ms(5), Duration::from_secs(1000));
        let now = Instant::now();
        let got: Vec<Duration> = (0..5).map(|f| r.when(f, now)).collect();
        assert_eq!(got, [ms(5), ms(10), ms(20), ms(40), ms(80)]);
        // 5 ms · 2^17 = 655 s; 2^18 would be 1311 s: capped.
        assert_eq!(r.when(17, now), ms(655_360));
        assert_eq!(r.when(18, now), Duration::from_secs(1000));
        assert_eq!(r.when(u32::MAX, now), Duration::from_secs(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_allows_a_burst_of_100_then_10_per_second() {
        let mut r = RateLimiter::bucket(10.0, 100);
        let now = Instant::now();
        for i in 0..100 {
            assert_eq!(r.when(0, now), Duration::ZERO, "retry {i} is in the burst");
        }
        assert!(close(r.when(0, now), ms(100)));
        assert!(close(r.when(0, now), ms(200)));
        // One second refills ten tokens, two of which are promised already.
        tokio::time::advance(Duration::from_secs(1)).await;
        let later = Instant::now();
        let delays: Vec<Duration> = (0..9).map(|_| r.when(0, later)).collect();
        assert!(delays[..8].iter().all(|d| d.is_zero()), "{delays:?}");
        assert!(close(delays[8], ms(100)), "{delays:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_takes_the_larger_of_the_two() {
        let mut r = RateLimiter::default_controller_rate_limiter();
        let now = Instant::now();
        // Within the burst the per-key backoff decides.
        assert_eq!(r.when(0, now), ms(5));
        assert_eq!(r.when(3, now), ms(40));
        for _ in 0..98 {
            r.when(0, now);
        }
        // The bucket is empty: fresh keys wait for tokens.
        assert!(close(r.when(0, now), ms(100)));
        // A key deep in its backoff still waits longer than the bucket.
        assert_eq!(r.when(10, now), ms(5120));
    }

    #[tokio::test(start_paused = true)]
    async fn a_non_positive_rate_disables_the_bucket() {
        let mut r = RateLimiter::bucket(0.0, 1);
        for _ in 0..1000 {
            assert_eq!(r.when(0, Instant::now()), Duration::ZERO);
        }
    }
}
