//! Several API server endpoints: requests go round-robin over those that answer; an endpoint
//! that refused a request unprocessed (connect refused, GOAWAY) or whose connection broke
//! mid-call is skipped for a moment, and a retried request goes first to the endpoints it has
//! not tried yet.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::Channel;

/// How long an endpoint that refused a request, or broke a connection, is skipped.
const DOWN_FOR: Duration = Duration::from_secs(2);

pub(crate) struct Endpoints {
    channels: Vec<(String, Channel)>,
    next: AtomicUsize,
    /// When each endpoint may be tried again (None: it is up).
    down_until: Vec<Mutex<Option<Instant>>>,
}

impl Endpoints {
    pub fn new(channels: Vec<(String, Channel)>) -> Endpoints {
        let down_until = channels.iter().map(|_| Mutex::new(None)).collect();
        Endpoints {
            channels,
            next: AtomicUsize::new(0),
            down_until,
        }
    }

    pub fn len(&self) -> usize {
        self.channels.len()
    }

    pub(crate) fn is_down(&self, i: usize) -> bool {
        let mut d = self.down_until[i].lock().unwrap_or_else(|e| e.into_inner());
        match *d {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                *d = None;
                false
            }
            None => false,
        }
    }

    /// The next endpoint to use: round-robin over those up, or simply the next one when all
    /// are down (one of them may be back).
    pub fn pick(&self) -> usize {
        let n = self.channels.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| !self.is_down(i))
            .unwrap_or(start % n)
    }

    /// The next endpoint for a call that already failed on those marked in `tried`:
    /// round-robin over the untried ones that are up, else any untried one; `None` when every
    /// endpoint was tried.
    pub fn pick_untried(&self, tried: &[bool]) -> Option<usize> {
        let n = self.channels.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let untried = || (0..n).map(|k| (start + k) % n).filter(|&i| !tried[i]);
        untried()
            .find(|&i| !self.is_down(i))
            .or_else(|| untried().next())
    }

    pub fn channel(&self, i: usize) -> Channel {
        self.channels[i].1.clone()
    }

    /// Skips endpoint `i` for a while: it refused a request without processing it, or its
    /// connection broke.
    pub fn mark_down(&self, i: usize) {
        *self.down_until[i].lock().unwrap_or_else(|e| e.into_inner()) =
            Some(Instant::now() + DOWN_FOR);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn endpoints(n: usize) -> Endpoints {
        let channels = (0..n)
            .map(|i| {
                let url = format!("http://127.0.0.1:{}", 1 + i);
                let ch = tonic::transport::Endpoint::from_shared(url.clone())
                    .unwrap()
                    .connect_lazy();
                (url, ch)
            })
            .collect();
        Endpoints::new(channels)
    }

    #[tokio::test(start_paused = true)]
    async fn requests_go_round_robin_and_skip_a_refusing_endpoint_for_a_while() {
        let e = endpoints(3);
        let picks: Vec<usize> = (0..6).map(|_| e.pick()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);

        e.mark_down(1);
        let picks: Vec<usize> = (0..4).map(|_| e.pick()).collect();
        assert!(!picks.contains(&1), "skipped while down: {picks:?}");

        tokio::time::advance(DOWN_FOR - Duration::from_millis(1)).await;
        assert!(
            !(0..3).map(|_| e.pick()).any(|i| i == 1),
            "still within the window"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(
            (0..3).map(|_| e.pick()).any(|i| i == 1),
            "back after the window"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_prefers_untried_endpoints_that_are_up() {
        let e = endpoints(3);
        e.mark_down(2);
        for _ in 0..6 {
            assert_eq!(e.pick_untried(&[true, false, false]), Some(1));
        }
        // Only a down one left untried: still tried (it may be back).
        assert_eq!(e.pick_untried(&[true, true, false]), Some(2));
        assert_eq!(e.pick_untried(&[true, true, true]), None);
    }

    #[tokio::test(start_paused = true)]
    async fn when_every_endpoint_is_down_one_is_still_tried() {
        let e = endpoints(2);
        e.mark_down(0);
        e.mark_down(1);
        let picks: Vec<usize> = (0..4).map(|_| e.pick()).collect();
        assert!(picks.contains(&0) && picks.contains(&1), "{picks:?}");
    }
}
